"""Single-cell foundation model (scGPT-style) over the expressed genes of each cell.

A cell is a set of (gene id, binned expression) tokens behind a <cls> token; cells express
different numbers of genes, so a batch is padded to its largest cell. Training masks some
expression values and predicts them; the <cls> state is the cell embedding used for cell-type
annotation. On the GPU attention runs FlashAttention varlen on the unpadded genes, on CPU the
reference path below.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21)
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None


@dataclass
class CellConfig:
    n_genes: int = 2000
    n_bins: int = 51
    dim: int = 64
    heads: int = 4
    depth: int = 3
    max_genes: int = 64
    pad_id: int = 0
    cls_id: int = 1
    mask_value: int = -1


def collate(cells, cfg):
    rows = []
    for gene_ids, counts in cells:
        order = counts.argsort(descending=True)[: cfg.max_genes - 1]
        bins = torch.bucketize(torch.log1p(counts[order]), torch.linspace(0, 8, cfg.n_bins - 1))
        rows.append((torch.cat([torch.tensor([cfg.cls_id]), gene_ids[order]]), torch.cat([torch.tensor([0]), bins])))
    width = max(len(g) for g, _ in rows)
    genes = torch.full((len(rows), width), cfg.pad_id, dtype=torch.long)
    values = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (g, v) in enumerate(rows):
        genes[i, : len(g)], values[i, : len(v)] = g, v
    gene_keep = (genes != cfg.pad_id).unsqueeze(1).unsqueeze(2)
    return {"genes": genes, "values": values, "gene_keep": gene_keep}


class GeneAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.dim // cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x, gene_keep):
        b, n, d = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, self.head_dim)
        if flash_attn_varlen_func is not None and x.is_cuda:
            keep = gene_keep.flatten(1)
            idx = keep.flatten().nonzero().flatten()
            lengths = keep.sum(-1, dtype=torch.int32)
            cu = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
            q, k, v = qkv.flatten(0, 1)[idx].unbind(1)
            y = flash_attn_varlen_func(q, k, v, cu, cu, int(lengths.max()), int(lengths.max()))
            out = x.new_zeros(b * n, self.heads, self.head_dim)
            out[idx] = y
            return self.out(out.view(b, n, d))
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(gene_keep == 0, float("-inf"))
        y = scores.softmax(dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = GeneAttention(cfg)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.ffn = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, gene_keep):
        x = self.norm1(x + self.attn(x, gene_keep))
        return self.norm2(x + self.ffn(x))


class CellEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.gene_embed = nn.Embedding(cfg.n_genes, cfg.dim, padding_idx=cfg.pad_id)
        self.value_embed = nn.Embedding(cfg.n_bins + 1, cfg.dim)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.depth))
        self.expr_head = nn.Linear(cfg.dim, cfg.n_bins)

    def forward(self, genes, values, gene_keep):
        values = values.masked_fill(values == self.cfg.mask_value, self.cfg.n_bins)
        x = self.gene_embed(genes) + self.value_embed(values)
        for layer in self.layers:
            x = layer(x, gene_keep)
        return {"cell": x[:, 0], "expr_logits": self.expr_head(x)}


def masked_value_loss(model, batch, rate=0.3):
    keep = batch["gene_keep"].flatten(1)
    chosen = (torch.rand(keep.shape) < rate) & keep
    chosen[:, 0] = False
    inputs = batch["values"].masked_fill(chosen, model.cfg.mask_value)
    out = model(batch["genes"], inputs, batch["gene_keep"])
    return F.cross_entropy(out["expr_logits"][chosen], batch["values"][chosen])


def simulate_cells(n, cfg, types=4):
    programs = torch.randint(2, cfg.n_genes, (types, 40))
    cells, labels = [], []
    for _ in range(n):
        t = int(torch.randint(0, types, ()))
        k = int(torch.randint(10, 40, ()))
        genes = programs[t, torch.randperm(40)[:k]]
        cells.append((genes, torch.poisson(torch.full((k,), 20.0)) + 1))
        labels.append(t)
    return cells, torch.tensor(labels)


@torch.no_grad()
def embed_cells(model, cells, batch_size=16):
    out = []
    for i in range(0, len(cells), batch_size):
        batch = collate(cells[i:i + batch_size], model.cfg)
        out.append(F.normalize(model(batch["genes"], batch["values"], batch["gene_keep"])["cell"], dim=-1))
    return torch.cat(out)
