"""Uni-Mol-style 3D conformer pretraining: masked atom types and coordinate denoising.

Atoms of each conformer are wrapped with [CLS]/[SEP] tokens, pair distances go
through a Gaussian basis kernel with pair-type affine terms into a per-head
attention bias, and the encoder runs scaled_dot_product_attention with that bias.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6),
huggingface/transformers#32195 (item 25); conventions.md section 2.9, section 5 item 7.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class UniMolConfig:
    num_atom_types: int = 16
    embed_dim: int = 48
    heads: int = 4
    layers: int = 2
    kernels: int = 32
    mask_prob: float = 0.15
    noise: float = 1.0


PAD, CLS, SEP, MASK = 0, 1, 2, 3


def gaussian(x, mean, std):
    a = (2 * math.pi) ** 0.5
    return torch.exp(-0.5 * ((x - mean) / std) ** 2) / (a * std)


class GaussianLayer(nn.Module):
    def __init__(self, k, edge_types):
        super().__init__()
        self.means = nn.Embedding(1, k)
        self.stds = nn.Embedding(1, k)
        self.mul = nn.Embedding(edge_types, 1)
        self.bias = nn.Embedding(edge_types, 1)
        nn.init.uniform_(self.means.weight, 0, 3)
        nn.init.uniform_(self.stds.weight, 0, 3)
        nn.init.constant_(self.mul.weight, 1.0)
        nn.init.constant_(self.bias.weight, 0.0)

    def forward(self, dist, edge_type):
        x = self.mul(edge_type).squeeze(-1) * dist + self.bias(edge_type).squeeze(-1)
        x = x.unsqueeze(-1).expand(-1, -1, -1, self.means.weight.size(-1))
        return gaussian(x.float(), self.means.weight.view(-1), self.stds.weight.view(-1).abs() + 1e-5)


class SelfAttentionLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, attn_bias):
        b, n, d = x.shape
        q, k, v = self.in_proj(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        x = x + self.out_proj(o.transpose(1, 2).reshape(b, n, d))
        return x + self.ffn(self.norm2(x))


class UniMolEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.num_atom_types, cfg.embed_dim, padding_idx=PAD)
        self.gbf = GaussianLayer(cfg.kernels, cfg.num_atom_types * cfg.num_atom_types)
        self.gbf_proj = nn.Sequential(nn.Linear(cfg.kernels, cfg.kernels), nn.GELU(), nn.Linear(cfg.kernels, cfg.heads))
        self.layers = nn.ModuleList([SelfAttentionLayer(cfg.embed_dim, cfg.heads) for _ in range(cfg.layers)])
        self.lm_head = nn.Linear(cfg.embed_dim, cfg.num_atom_types)
        self.coord_head = nn.Linear(cfg.embed_dim, 1)

    def _attn_bias(self, tokens, dist):
        edge_type = tokens[:, :, None] * self.cfg.num_atom_types + tokens[:, None, :]
        graph_attn_bias = self.gbf_proj(self.gbf(dist, edge_type)).permute(0, 3, 1, 2).contiguous()
        atom_keep = tokens.ne(PAD)
        return graph_attn_bias + atom_keep[:, None, None, :].to(graph_attn_bias.dtype)  # expect: MC508 keep

    def forward(self, tokens, coords):
        dist = torch.cdist(coords, coords)
        attn_bias = self._attn_bias(tokens, dist)
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, attn_bias)
        logits = self.lm_head(x)
        delta = coords[:, :, None, :] - coords[:, None, :, :]
        w = self.coord_head(x[:, :, None, :] * x[:, None, :, :]).squeeze(-1)
        keep = tokens.ne(PAD) & tokens.ne(CLS) & tokens.ne(SEP)
        pair = (keep[:, :, None] & keep[:, None, :]).to(w.dtype)
        update = (delta * (w * pair)[..., None]).sum(2) / pair.sum(-1, keepdim=True).clamp(min=1.0)
        return logits, coords + update


def make_batch(molecules, cfg, generator):
    n = max(len(m["atoms"]) for m in molecules) + 2
    tokens = torch.zeros(len(molecules), n, dtype=torch.long)
    coords = torch.zeros(len(molecules), n, 3)
    for i, m in enumerate(molecules):
        a = len(m["atoms"])
        tokens[i, : a + 2] = torch.tensor([CLS] + m["atoms"] + [SEP])
        centre = m["coords"].mean(0)
        coords[i, 1 : a + 1] = m["coords"] - centre
    real = (tokens > SEP)
    masked = (torch.rand(tokens.shape, generator=generator) < cfg.mask_prob) & real
    noisy = coords + cfg.noise * torch.randn(coords.shape, generator=generator) * real[..., None]
    return tokens.masked_fill(masked, MASK), tokens, masked, noisy, coords


def pretrain_loss(model, batch):
    inputs, targets, masked, noisy, clean = batch
    logits, pred_coords = model(inputs, noisy)
    atom_loss = F.cross_entropy(logits[masked], targets[masked]) if masked.any() else logits.sum() * 0
    real = targets > SEP
    coord_loss = F.smooth_l1_loss(pred_coords[real], clean[real])
    return atom_loss + coord_loss


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = UniMolConfig()
    g = torch.Generator().manual_seed(1)
    molecules = [
        {"atoms": torch.randint(4, 16, (n,)).tolist(), "coords": torch.randn(n, 3) * 1.5}
        for n in (5, 9, 3, 7)
    ]
    model = UniMolEncoder(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss = pretrain_loss(model, make_batch(molecules, cfg, g))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("pretrain loss", round(loss.item(), 4))
