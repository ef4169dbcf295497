"""Class-conditional 3-D mesh generation with PolyGen's vertex model (Nash et al., 2020).

Vertices are quantized, sorted by (z, y, x), flattened into one coordinate sequence with a stop
token, and embedded as value + coordinate-type + vertex-index embeddings after a class-context
token; a pre-LN transformer decoder on scaled_dot_product_attention predicts the next
coordinate. Training on padded batches of primitive meshes, bits per vertex on held-out meshes
(computed with the MATH kernel for reproducible numbers) and nucleus sampling.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7 and section 5 item 8, pytorch/pytorch PR #111007 (conventions.md section 1)
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CLASSES = ["box", "tetrahedron", "pyramid", "prism"]


@dataclass
class VertexModelConfig:
    quantization_bits: int = 5
    max_num_input_verts: int = 8
    num_classes: int = len(CLASSES)
    hidden_size: int = 96
    fc_size: int = 256
    num_heads: int = 4
    num_layers: int = 3
    dropout_rate: float = 0.1


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.ln_attn = nn.LayerNorm(cfg.hidden_size)
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.ln_fc = nn.LayerNorm(cfg.hidden_size)
        self.fc = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.fc_size), nn.ReLU(), nn.Linear(cfg.fc_size, cfg.hidden_size))
        self.dropout = cfg.dropout_rate

    def forward(self, x, attn_keep):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_attn(x)).view(B, T, 3, self.num_heads, C // self.num_heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_keep & torch.ones(T, T, dtype=torch.bool, device=x.device).tril(), dropout_p=self.dropout if self.training else 0.0)
        x = x + F.dropout(self.out(y.transpose(1, 2).reshape(B, T, C)), self.dropout, self.training)
        return x + F.dropout(self.fc(self.ln_fc(x)), self.dropout, self.training)


class VertexModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        n_values = 2 ** cfg.quantization_bits + 1
        self.class_embedding = nn.Embedding(cfg.num_classes, cfg.hidden_size)
        self.coord_embeddings = nn.Embedding(3, cfg.hidden_size)
        self.pos_embeddings = nn.Embedding(cfg.max_num_input_verts + 1, cfg.hidden_size)
        self.value_embeddings = nn.Embedding(n_values, cfg.hidden_size)
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.ln_out = nn.LayerNorm(cfg.hidden_size)
        self.project_to_logits = nn.Linear(cfg.hidden_size, n_values)

    def _embed_inputs(self, vertices, class_label):
        seq_length = vertices.size(1)
        positions = torch.arange(seq_length, device=vertices.device)
        embeddings = (self.coord_embeddings(positions % 3) + self.pos_embeddings(positions // 3)
                      + self.value_embeddings(vertices))
        context = self.class_embedding(class_label).unsqueeze(1)
        return torch.cat([context, embeddings], dim=1)

    def forward(self, vertices_flat, vertices_flat_mask, class_label):
        x = self._embed_inputs(vertices_flat, class_label)
        keep = torch.cat([torch.ones_like(vertices_flat_mask[:, :1]), vertices_flat_mask], dim=1).bool()
        attn_keep = keep[:, None, None, :]
        for layer in self.decoder:
            x = layer(x, attn_keep)
        return self.project_to_logits(self.ln_out(x))[:, :-1]

    @torch.no_grad()
    def sample(self, class_label, max_sample_length=24, top_p=0.9):
        samples = torch.zeros(class_label.size(0), 0, dtype=torch.long)
        for _ in range(max_sample_length + 1):
            mask = torch.ones_like(samples, dtype=torch.float)
            logits = self(torch.cat([samples, samples.new_zeros(samples.size(0), 1)], dim=1),
                          torch.cat([mask, mask.new_ones(mask.size(0), 1)], dim=1), class_label)[:, -1]
            sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)
            cumulative = sorted_logits.softmax(-1).cumsum(-1)
            remove = cumulative - sorted_logits.softmax(-1) > top_p
            sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
            nxt = sorted_idx.gather(1, torch.multinomial(sorted_logits.softmax(-1), 1))
            samples = torch.cat([samples, nxt], dim=1)
        return samples


def primitive_vertices(kind, rng):
    w, d, h = (rng.uniform(0.3, 1.0) for _ in range(3))
    if kind == "box":
        verts = [(x, y, z) for x in (-w, w) for y in (-d, d) for z in (-h, h)]
    elif kind == "tetrahedron":
        verts = [(-w, -d, -h), (w, -d, -h), (0.0, d, -h), (0.0, 0.0, h)]
    elif kind == "pyramid":
        verts = [(x, y, -h) for x in (-w, w) for y in (-d, d)] + [(0.0, 0.0, h)]
    else:
        verts = [(x, y, z) for z in (-h, h) for x, y in ((-w, -d), (w, -d), (0.0, d))]
    return torch.tensor(verts)


def quantize_and_flatten(verts, bits):
    q = ((verts + 1.0) / 2.0 * (2 ** bits - 1)).round().long().clamp(0, 2 ** bits - 1)
    q = q[:, [2, 1, 0]]
    order = sorted(range(len(q)), key=lambda i: tuple(q[i].tolist()))
    return torch.cat([q[order].flatten() + 1, torch.zeros(1, dtype=torch.long)])


def make_batch(n, cfg, rng):
    labels = [rng.randrange(cfg.num_classes) for _ in range(n)]
    seqs = [quantize_and_flatten(primitive_vertices(CLASSES[c], rng), cfg.quantization_bits) for c in labels]
    width = max(len(s) for s in seqs)
    vertices_flat = torch.zeros(n, width, dtype=torch.long)
    vertices_flat_mask = torch.zeros(n, width)
    for i, s in enumerate(seqs):
        vertices_flat[i, : len(s)] = s
        vertices_flat_mask[i, : len(s)] = 1.0
    return {"vertices_flat": vertices_flat, "vertices_flat_mask": vertices_flat_mask, "class_label": torch.tensor(labels)}


def bits_per_vertex(model, batch):
    logits = model(**batch)
    nll = F.cross_entropy(logits.transpose(1, 2), batch["vertices_flat"], reduction="none")
    nll = (nll * batch["vertices_flat_mask"]).sum()
    n_verts = (batch["vertices_flat_mask"].sum() - batch["vertices_flat"].size(0)) / 3
    return (nll / math.log(2) / n_verts).item()


def main():
    torch.manual_seed(0)
    cfg = VertexModelConfig()
    model = VertexModel(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    for step in range(400):
        model.train()
        batch = make_batch(32, cfg, rng)
        logits = model(**batch)
        nll = F.cross_entropy(logits.transpose(1, 2), batch["vertices_flat"], reduction="none")
        loss = (nll * batch["vertices_flat_mask"]).sum() / batch["vertices_flat_mask"].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} nll {loss.item():.3f}")
    model.eval()
    test = make_batch(256, cfg, random.Random(1))
    with torch.no_grad():
        print(f"test bits per vertex (default kernel) {bits_per_vertex(model, test):.2f}")
        with sdpa_kernel(SDPBackend.MATH):
            print(f"test bits per vertex (MATH kernel) {bits_per_vertex(model, test):.2f}")
    samples = model.sample(torch.arange(cfg.num_classes))
    for c, s in zip(CLASSES, samples.tolist()):
        n = s.index(0) if 0 in s else len(s)
        print(f"{c}: {n // 3} vertices sampled, stop after {n} coordinates")


if __name__ == "__main__":
    main()
