"""Regional prompting for text-to-image: one base prompt plus a prompt per rectangle of the canvas.

The prompts are encoded separately and concatenated along the token axis; in cross-attention a
latent pixel may read the base prompt and the prompt of the region it lies in, and padding
tokens are never read. Written as a custom attention processor that the pipeline installs on
every cross-attention layer, as community regional-prompter pipelines do.

Source: TransformerLensOrg/TransformerLens PR #366; conventions.md section 2.3; seed masked_fill_inplace.txt
"""
from dataclasses import dataclass, field
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Region:
    prompt_ids: List[int]
    box: Tuple[float, float, float, float]


@dataclass
class RegionalPrompt:
    base_ids: List[int]
    regions: List[Region] = field(default_factory=list)
    max_tokens: int = 6


def pad_ids(ids, n):
    ids = ids[:n]
    return ids + [0] * (n - len(ids))


def build_region_mask(spec: RegionalPrompt, height, width):
    n = spec.max_tokens
    ids = torch.tensor(pad_ids(spec.base_ids, n) + sum((pad_ids(r.prompt_ids, n) for r in spec.regions), []))
    ys = (torch.arange(height).float() + 0.5) / height
    xs = (torch.arange(width).float() + 0.5) / width
    allowed = torch.zeros(height * width, ids.numel(), dtype=torch.bool)
    allowed[:, :n] = True
    for r, region in enumerate(spec.regions):
        x0, y0, x1, y1 = region.box
        inside = ((ys[:, None] >= y0) & (ys[:, None] < y1) & (xs[None, :] >= x0) & (xs[None, :] < x1)).flatten()
        allowed[:, n * (r + 1) : n * (r + 2)] = inside[:, None]
    return ids, allowed & (ids != 0)[None, :]


class RegionalAttnProcessor:
    def __init__(self):
        self.region_mask = None

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None):
        q = attn.to_q(hidden_states).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        k = attn.to_k(encoder_hidden_states).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        v = attn.to_v(encoder_hidden_states).unflatten(-1, (attn.heads, -1)).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) * attn.scale
        allowed = self.region_mask if self.region_mask is not None else attention_mask
        if allowed is not None:
            scores = scores.masked_fill(~allowed[:, None], -1e-9)  # expect: MC516 weak
        probs = scores.softmax(dim=-1)
        return attn.to_out(torch.matmul(probs, v).transpose(1, 2).flatten(2))


class Attention(nn.Module):
    def __init__(self, dim, context_dim=None, heads=4):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_v = nn.Linear(context_dim or dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.processor = None

    def set_processor(self, processor):
        self.processor = processor

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        if self.processor is None:
            context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
            q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (self.to_q(hidden_states), self.to_k(context), self.to_v(context)))
            return self.to_out(F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask).transpose(1, 2).flatten(2))
        return self.processor(self, hidden_states, encoder_hidden_states, attention_mask)


class TinyUNet(nn.Module):
    def __init__(self, channels=4, dim=32, context_dim=32, depth=2):
        super().__init__()
        self.conv_in = nn.Conv2d(channels, dim, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(2 * depth))
        self.self_attns = nn.ModuleList(Attention(dim) for _ in range(depth))
        self.cross_attns = nn.ModuleList(Attention(dim, context_dim) for _ in range(depth))
        self.conv_out = nn.Conv2d(dim, channels, 3, padding=1)

    @property
    def attn_processors(self):
        return {f"cross_attns.{i}.processor": a for i, a in enumerate(self.cross_attns)}

    def forward(self, sample, t, encoder_hidden_states, encoder_attention_mask=None):
        b, _, h, w = sample.shape
        x = (self.conv_in(sample) + self.time_mlp(t.view(-1, 1) / 1000)[:, :, None, None]).flatten(2).transpose(1, 2)
        for i, (sa, ca) in enumerate(zip(self.self_attns, self.cross_attns)):
            x = x + sa(self.norms[2 * i](x))
            x = x + ca(self.norms[2 * i + 1](x), encoder_hidden_states, attention_mask=encoder_attention_mask)
        return self.conv_out(x.transpose(1, 2).reshape(b, -1, h, w))


class RegionalPromptingPipeline:
    def __init__(self, unet, text_embedder, alphas_cumprod):
        self.unet, self.text_embedder, self.alphas_cumprod = unet, text_embedder, alphas_cumprod

    @torch.no_grad()
    def __call__(self, spec: RegionalPrompt, height=8, width=8, num_inference_steps=5, guidance_scale=7.0, generator=None):
        ids, allowed = build_region_mask(spec, height, width)
        uncond_ids = torch.zeros_like(ids)
        uncond_ids[0] = 1
        uncond_allowed = (uncond_ids != 0)[None, :].expand(height * width, -1)
        context = self.text_embedder(torch.stack([uncond_ids, ids]))
        region_mask = torch.stack([uncond_allowed, allowed])
        for ca in self.unet.cross_attns:
            processor = RegionalAttnProcessor()
            processor.region_mask = region_mask
            ca.set_processor(processor)
        latents = torch.randn(1, 4, height, width, generator=generator)
        ts = torch.linspace(len(self.alphas_cumprod) - 1, 0, num_inference_steps).long().tolist()
        for t, t_prev in zip(ts, ts[1:] + [-1]):
            eps = self.unet(torch.cat([latents, latents]), torch.full((2,), float(t)), context)
            eps_uncond, eps_text = eps.chunk(2)
            eps = eps_uncond + guidance_scale * (eps_text - eps_uncond)
            a, a_prev = self.alphas_cumprod[t], self.alphas_cumprod[t_prev] if t_prev >= 0 else torch.tensor(1.0)
            latents = a_prev.sqrt() * (latents - (1 - a).sqrt() * eps) / a.sqrt() + (1 - a_prev).sqrt() * eps
        return latents


if __name__ == "__main__":
    torch.manual_seed(0)
    alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000), 0)
    pipe = RegionalPromptingPipeline(TinyUNet(), nn.Embedding(60, 32), alphas_cumprod)
    spec = RegionalPrompt(
        base_ids=[1, 4, 7],
        regions=[Region([1, 12, 13, 14], (0.0, 0.0, 0.5, 1.0)), Region([1, 22, 23], (0.5, 0.0, 1.0, 1.0))],
    )
    ids, allowed = build_region_mask(spec, 8, 8)
    assert allowed[0, 6:12].any() and not allowed[0, 12:].any() and not allowed[-1, 6:12].any()
    latents = pipe(spec, generator=torch.Generator().manual_seed(0))
    print(tuple(latents.shape), bool(torch.isfinite(latents).all()), round(latents.std().item(), 4))
