"""Perceiver classifier over point clouds of different sizes.

A fixed array of learned latents cross-attends to the points (Fourier features
of the coordinates plus per-point attributes), then a stack of latent
self-attention blocks runs on the latents alone, repeated ``num_cross_layers``
times with shared weights as in the Perceiver paper. Point sets are padded to
the largest in the batch; the collate function returns a Hugging Face
Perceiver-style ``attention_mask`` (True for a real point) and the model is
called with ``model(**batch)``.

Source: conventions.md §1 (HF 2-D attention_mask row, nn.MultiheadAttention row, direction cheat-sheet), seed self_attention_mask_guide.txt §2
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PerceiverConfig:
    point_dim: int = 3
    attr_dim: int = 2
    num_bands: int = 6
    max_freq: float = 10.0
    num_latents: int = 16
    d_latents: int = 64
    num_heads: int = 4
    num_self_attends_per_block: int = 2
    num_cross_layers: int = 2
    num_classes: int = 4
    dropout: float = 0.0


def fourier_encode(x, max_freq, num_bands):
    x = x.unsqueeze(-1)
    scales = torch.linspace(1.0, max_freq / 2, num_bands, device=x.device, dtype=x.dtype)
    x_scaled = x * scales * math.pi
    encoded = torch.cat([x_scaled.sin(), x_scaled.cos(), x], dim=-1)
    return encoded.flatten(-2)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * mult * 2), nn.Dropout(dropout))
        self.out = nn.Linear(dim * mult, dim)

    def forward(self, x):
        a, gates = self.net(x).chunk(2, dim=-1)
        return self.out(a * F.gelu(gates))


class CrossAttention(nn.Module):
    def __init__(self, d_latents, d_inputs, num_heads, dropout):
        super().__init__()
        self.latent_norm = nn.LayerNorm(d_latents)
        self.input_norm = nn.LayerNorm(d_inputs)
        self.attn = nn.MultiheadAttention(d_latents, num_heads, dropout=dropout, kdim=d_inputs, vdim=d_inputs,
                                          batch_first=True)
        self.ff = FeedForward(d_latents, dropout=dropout)

    def forward(self, latents, inputs, attention_mask=None):
        kv = self.input_norm(inputs)
        out, _ = self.attn(self.latent_norm(latents), kv, kv, key_padding_mask=~attention_mask, need_weights=False)
        latents = latents + out
        return latents + self.ff(latents)


class SelfAttentionBlock(nn.Module):
    def __init__(self, d_latents, num_heads, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(d_latents)
        self.attn = nn.MultiheadAttention(d_latents, num_heads, dropout=dropout, batch_first=True)
        self.ff = FeedForward(d_latents, dropout=dropout)

    def forward(self, latents):
        h = self.norm(latents)
        out, _ = self.attn(h, h, h, need_weights=False)
        latents = latents + out
        return latents + self.ff(latents)


class PerceiverForPointClassification(nn.Module):
    def __init__(self, cfg: PerceiverConfig):
        super().__init__()
        self.cfg = cfg
        d_inputs = cfg.point_dim * (2 * cfg.num_bands + 1) + cfg.attr_dim
        self.latents = nn.Parameter(torch.randn(cfg.num_latents, cfg.d_latents) * 0.02)
        self.cross_attention = CrossAttention(cfg.d_latents, d_inputs, cfg.num_heads, cfg.dropout)
        self.self_attends = nn.ModuleList(
            [SelfAttentionBlock(cfg.d_latents, cfg.num_heads, cfg.dropout) for _ in range(cfg.num_self_attends_per_block)]
        )
        self.decoder = nn.Sequential(nn.LayerNorm(cfg.d_latents), nn.Linear(cfg.d_latents, cfg.num_classes))

    def embed_inputs(self, points, attributes, attention_mask):
        inputs = torch.cat([fourier_encode(points, self.cfg.max_freq, self.cfg.num_bands), attributes], dim=-1)
        return inputs * attention_mask.unsqueeze(-1).to(inputs.dtype)

    def forward(self, points, attributes, attention_mask=None, labels=None):
        if attention_mask is None:
            attention_mask = torch.ones(points.shape[:2], dtype=torch.bool, device=points.device)
        inputs = self.embed_inputs(points, attributes, attention_mask)
        latents = self.latents.unsqueeze(0).expand(points.size(0), -1, -1)
        for _ in range(self.cfg.num_cross_layers):
            latents = self.cross_attention(latents, inputs, attention_mask=attention_mask)
            for block in self.self_attends:
                latents = block(latents)
        logits = self.decoder(latents.mean(dim=1))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


def point_collate(samples):
    n_max = max(s["points"].size(0) for s in samples)
    b = len(samples)
    batch = {
        "points": torch.zeros(b, n_max, 3),
        "attributes": torch.zeros(b, n_max, 2),
        "attention_mask": torch.zeros(b, n_max, dtype=torch.bool),
        "labels": torch.tensor([s["label"] for s in samples]),
    }
    for i, s in enumerate(samples):
        n = s["points"].size(0)
        batch["points"][i, :n] = s["points"]
        batch["attributes"][i, :n] = s["attributes"]
        batch["attention_mask"][i, :n] = True
    return batch


def make_shapes(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(n):
        label = i % 4
        m = int(torch.randint(12, 48, (1,), generator=g))
        u = torch.rand(m, 2, generator=g) * 2 * math.pi
        if label == 0:
            pts = torch.stack([u[:, 0].cos(), u[:, 0].sin(), torch.zeros(m)], -1)
        elif label == 1:
            pts = torch.stack([u[:, 0].cos() * u[:, 1].sin(), u[:, 0].sin() * u[:, 1].sin(), u[:, 1].cos()], -1)
        elif label == 2:
            pts = torch.rand(m, 3, generator=g) * 2 - 1
        else:
            pts = torch.stack([u[:, 0] / math.pi - 1, torch.zeros(m), torch.zeros(m)], -1)
        pts = pts + 0.02 * torch.randn(m, 3, generator=g)
        samples.append({"points": pts, "attributes": torch.randn(m, 2, generator=g) * 0.1, "label": label})
    return samples


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = PerceiverConfig()
    samples = make_shapes()
    model = PerceiverForPointClassification(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(30):
        model.train()
        batch = point_collate(samples[(step % 4) * 16:(step % 4) * 16 + 16])
        out = model(**batch)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    print("loss", round(out["loss"].item(), 4))

    model.eval()
    with torch.no_grad():
        small = min(samples, key=lambda s: s["points"].size(0))
        large = max(samples, key=lambda s: s["points"].size(0))
        alone = model(**point_collate([small]))["logits"]
        together = model(**point_collate([small, large]))["logits"][:1]
        print("alone", [round(v, 4) for v in alone[0].tolist()], "batched vs alone:", (alone - together).abs().max().item())
