"""Text-to-image diffusion transformer (PixArt-style DiT) with cross-attention to caption tokens.

Cross-attention runs xformers' memory-efficient kernel with a block-diagonal bias built from the
caption lengths on the GPU, and a PyTorch path on CPU workers and in the unit tests. Sampling
can run the whole model in float16.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md §3 item 18), conventions.md §2.3
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import xformers.ops as xops
except ImportError:
    xops = None


def timestep_embedding(t, dim, max_period=10000.0):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


class CaptionEncoder(nn.Module):
    def __init__(self, vocab, dim, depth=2, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)

    def forward(self, ids, caption_mask):
        return self.encoder(self.embed(ids), src_key_padding_mask=~caption_mask)


class CrossAttention(nn.Module):
    def __init__(self, dim, cond_dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(cond_dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cond, cond_keep):
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim)
        k, v = self.kv(cond).view(b, cond.shape[1], 2, self.heads, self.head_dim).unbind(2)
        if xops is not None and x.is_cuda:
            keep_flat = cond_keep.flatten()
            bias = xops.fmha.BlockDiagonalMask.from_seqlens([n] * b, cond_keep.sum(-1).tolist())
            out = xops.memory_efficient_attention(
                q.reshape(1, b * n, self.heads, self.head_dim),
                k.reshape(-1, self.heads, self.head_dim)[keep_flat][None],
                v.reshape(-1, self.heads, self.head_dim)[keep_flat][None],
                attn_bias=bias,
            )
            return self.proj(out.reshape(b, n, d))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~cond_keep[:, None, None, :], -1e9)  # expect: MC501 method
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class DiTBlock(nn.Module):
    def __init__(self, dim, cond_dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attn_out = nn.Linear(dim, dim)
        self.cross = CrossAttention(dim, cond_dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.ada = nn.Linear(dim, 6 * dim)

    def forward(self, x, t_emb, cond, cond_keep):
        b, n, d = x.shape
        sh1, sc1, g1, sh2, sc2, g2 = self.ada(F.silu(t_emb)).chunk(6, dim=-1)
        h = modulate(self.norm1(x), sh1, sc1)
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + g1[:, None] * self.attn_out(h)
        x = x + self.cross(x, cond, cond_keep)
        return x + g2[:, None] * self.mlp(modulate(self.norm2(x), sh2, sc2))


class PixArtDiT(nn.Module):
    def __init__(self, vocab=1000, channels=4, size=16, patch=2, dim=96, depth=3, heads=4):
        super().__init__()
        self.patch, self.size, self.channels = patch, size, channels
        self.text = CaptionEncoder(vocab, dim)
        self.patchify = nn.Conv2d(channels, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2, dim) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList(DiTBlock(dim, dim, heads) for _ in range(depth))
        self.out = nn.Linear(dim, patch * patch * channels)

    def forward(self, latents, t, caption):
        cond = self.text(caption["ids"], caption["keep"])
        x = self.patchify(latents).flatten(2).transpose(1, 2) + self.pos
        t_emb = self.t_mlp(timestep_embedding(t, x.shape[-1]).to(x.dtype))
        for block in self.blocks:
            x = block(x, t_emb, cond, caption["keep"])
        b, g, p = x.shape[0], self.size // self.patch, self.patch
        x = self.out(x).view(b, g, g, p, p, self.channels)
        return x.permute(0, 5, 1, 3, 2, 4).reshape(b, self.channels, self.size, self.size)


def encode_prompts(tokenizer, prompts, max_length=32, device="cpu"):
    enc = tokenizer(prompts, padding="longest", truncation=True, max_length=max_length, return_tensors="pt")
    return {"ids": enc["input_ids"].to(device), "keep": enc["attention_mask"].to(device).bool()}


def alphas_cumprod(steps=1000):
    betas = torch.linspace(1e-4, 0.02, steps, dtype=torch.float64)
    return torch.cumprod(1 - betas, dim=0)


def train_step(model, opt, latents, caption, abar):
    t = torch.randint(0, len(abar), (latents.shape[0],))
    noise = torch.randn_like(latents)
    a = abar[t].float()[:, None, None, None]
    noisy = a.sqrt() * latents + (1 - a).sqrt() * noise
    loss = F.mse_loss(model(noisy, t, caption), noise)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


@torch.no_grad()
def sample(model, tokenizer, prompts, args):
    dtype = torch.float16 if args.fp16 else torch.float32
    model = model.to(args.device, dtype=dtype).eval()
    caption = encode_prompts(tokenizer, prompts, device=args.device)
    abar = alphas_cumprod().to(args.device)
    x = torch.randn(len(prompts), model.channels, model.size, model.size, device=args.device, dtype=dtype)
    ts = torch.linspace(len(abar) - 1, 0, args.steps, device=args.device).long()
    for i, t in enumerate(ts):
        a = abar[t].to(dtype)
        a_prev = abar[ts[i + 1]].to(dtype) if i + 1 < len(ts) else torch.ones((), dtype=dtype, device=args.device)
        eps = model(x, t.repeat(len(prompts)), caption)
        x0 = (x - (1 - a).sqrt() * eps) / a.sqrt()
        x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
    return x.float()


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--fp16", action="store_true")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args(argv)
