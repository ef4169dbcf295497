"""A text-conditioned diffusion Transformer (DiT / PixArt-style) for latent images.

Latent patches go through DiT blocks with adaLN-Zero modulation from the timestep and the
pooled caption, self-attention over the image tokens and cross-attention to the caption's
token states; captions are encoded by a small Transformer text encoder. Captions are
right-padded by the tokenizer, whose `attention_mask` is int64 1/0 (1 = real token).
Classifier-free guidance drops captions at random during training (replaced by a learned
null caption that is fully visible) and mixes the two predictions at sampling time. The
cross-attention has an SDPA path (bool mask, True = attend) and an eager path (additive,
0 / finfo.min) that must agree.

Source: pytorch/pytorch#103963 (a 0/1 float mask given to scaled_dot_product_attention is
added to the scores and masks nothing), huggingface/transformers#32195 and #46458;
conventions.md §2.9.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


def tokenize(captions, max_length=12):
    """Whitespace tokenizer with a hashed vocabulary; returns a Hugging Face style dict."""
    rows = [[BOS] + [3 + (sum(map(ord, w)) % 97) for w in c.split()][: max_length - 2] + [EOS] for c in captions]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, : len(r)] = torch.tensor(r)
        attention_mask[i, : len(r)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


class TextEncoder(nn.Module):
    def __init__(self, vocab_size=100, dim=64, heads=4, layers=2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.pos = nn.Parameter(torch.randn(32, dim) * 0.02)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"norm1": nn.LayerNorm(dim), "qkv": nn.Linear(dim, 3 * dim), "proj": nn.Linear(dim, dim), "norm2": nn.LayerNorm(dim), "mlp": nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))})
            for _ in range(layers)
        )
        self.final_norm = nn.LayerNorm(dim)

    def forward(self, input_ids, attention_mask):
        keep = attention_mask.bool()
        x = self.embed(input_ids) + self.pos[: input_ids.shape[1]]
        b, n, d = x.shape
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["norm1"](x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
            x = x + blk["proj"](out.transpose(1, 2).reshape(b, n, d))
            x = x + blk["mlp"](blk["norm2"](x))
        x = self.final_norm(x)
        weights = keep[..., None].to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return x, pooled


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def sincos_2d(grid, dim):
    coords = torch.arange(grid, dtype=torch.float32)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float32) / (dim // 4))
    out = [torch.sin(xx.flatten()[:, None] * omega), torch.cos(xx.flatten()[:, None] * omega)]
    out += [torch.sin(yy.flatten()[:, None] * omega), torch.cos(yy.flatten()[:, None] * omega)]
    return torch.cat(out, dim=1)


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class CrossAttention(nn.Module):
    """Image tokens (queries) attend to caption tokens; padded caption tokens are hidden."""

    def __init__(self, dim, context_dim, heads, attn_impl="sdpa"):
        super().__init__()
        self.heads = heads
        self.attn_impl = attn_impl
        self.to_q = nn.Linear(dim, dim)
        self.to_kv = nn.Linear(context_dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, encoder_hidden_states, encoder_attention_mask):
        b, n, d = x.shape
        m = encoder_hidden_states.shape[1]
        q = self.to_q(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
        k, v = self.to_kv(encoder_hidden_states).view(b, m, 2, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        text_keep = encoder_attention_mask.bool()
        if self.attn_impl == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=text_keep[:, None, None, :])
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            bias = torch.zeros(b, 1, 1, m, dtype=scores.dtype).masked_fill(~text_keep[:, None, None, :], torch.finfo(scores.dtype).min)
            out = (scores + bias).softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
    def __init__(self, dim, context_dim, heads, attn_impl):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = SelfAttention(dim, heads)
        self.norm_cross = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, context_dim, heads, attn_impl)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x, c, encoder_hidden_states, encoder_attention_mask):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa[:, None] * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + self.cross_attn(self.norm_cross(x), encoder_hidden_states, encoder_attention_mask)
        return x + gate_mlp[:, None] * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))


class TextDiT(nn.Module):
    def __init__(self, in_channels=4, image_size=8, patch=2, dim=64, heads=4, depth=2, attn_impl="sdpa"):
        super().__init__()
        self.patch, self.in_channels, self.grid = patch, in_channels, image_size // patch
        self.text_encoder = TextEncoder(dim=dim)
        self.x_embedder = nn.Conv2d(in_channels, dim, kernel_size=patch, stride=patch)
        self.register_buffer("pos_embed", sincos_2d(self.grid, dim), persistent=False)
        self.t_embedder = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.null_text = nn.Parameter(torch.randn(1, dim) * 0.02)
        self.blocks = nn.ModuleList(DiTBlock(dim, dim, heads, attn_impl) for _ in range(depth))
        self.final_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.final_linear = nn.Linear(dim, patch * patch * in_channels)

    def set_attn_impl(self, attn_impl):
        for blk in self.blocks:
            blk.cross_attn.attn_impl = attn_impl

    def encode_text(self, input_ids, attention_mask, drop=None):
        """drop: (B,) bool, True = use the null caption (classifier-free guidance)."""
        hidden, pooled = self.text_encoder(input_ids, attention_mask)
        if drop is not None:
            hidden = torch.where(drop[:, None, None], self.null_text[None].expand_as(hidden), hidden)
            pooled = torch.where(drop[:, None], self.null_text.expand_as(pooled), pooled)
            attention_mask = torch.where(drop[:, None], torch.ones_like(attention_mask), attention_mask)
        return hidden, pooled, attention_mask

    def unpatchify(self, x):
        b, p, c, g = x.shape[0], self.patch, self.in_channels, self.grid
        x = x.view(b, g, g, p, p, c).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, c, g * p, g * p)

    def forward(self, latents, t, input_ids, attention_mask, drop=None):
        x = self.x_embedder(latents).flatten(2).transpose(1, 2) + self.pos_embed
        text, pooled, text_mask = self.encode_text(input_ids, attention_mask, drop)
        c = self.t_embedder(timestep_embedding(t, x.shape[-1])) + pooled
        for blk in self.blocks:
            x = blk(x, c, text, text_mask)
        shift, scale = self.final_modulation(c).chunk(2, dim=1)
        return self.unpatchify(self.final_linear(modulate(self.final_norm(x), shift, scale)))


def training_loss(model, latents, batch, p_uncond=0.1):
    t = torch.randint(0, 1000, (latents.shape[0],))
    alpha = torch.cos(t.float() / 1000 * math.pi / 2)[:, None, None, None]
    noise = torch.randn_like(latents)
    noisy = alpha * latents + (1 - alpha**2).sqrt() * noise
    drop = torch.rand(latents.shape[0]) < p_uncond
    pred = model(noisy, t, batch["input_ids"], batch["attention_mask"], drop)
    return F.mse_loss(pred, noise)


@torch.no_grad()
def sample(model, batch, steps=4, guidance=3.0, shape=(4, 8, 8)):
    b = batch["input_ids"].shape[0]
    x = torch.randn(b, *shape)
    cond_drop = torch.zeros(b, dtype=torch.bool)
    for i in reversed(range(steps)):
        t = torch.full((b,), int(1000 * (i + 1) / steps) - 1)
        eps_c = model(x, t, batch["input_ids"], batch["attention_mask"], cond_drop)
        eps_u = model(x, t, batch["input_ids"], batch["attention_mask"], ~cond_drop)
        x = x - (eps_u + guidance * (eps_c - eps_u)) / steps
    return x


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TextDiT().eval()
    captions = ["a red fox", "a small boat on a calm lake at dawn"]
    batch = tokenize(captions)
    latents = torch.randn(2, 4, 8, 8)
    t = torch.tensor([500, 500])
    with torch.no_grad():
        sdpa = model(latents, t, batch["input_ids"], batch["attention_mask"])
        model.set_attn_impl("eager")
        eager = model(latents, t, batch["input_ids"], batch["attention_mask"])
        model.set_attn_impl("sdpa")
        print("cross-attention sdpa vs eager max |diff| =", (sdpa - eager).abs().max().item())
        one = tokenize(captions[:1])
        alone = model(latents[:1], t[:1], one["input_ids"], one["attention_mask"])
        print("short caption: batched vs alone max |diff| =", (sdpa[0] - alone[0]).abs().max().item())
    model.train()
    print("training loss finite:", bool(torch.isfinite(training_loss(model, latents, batch, p_uncond=0.5))))
    model.eval()
    print("samples finite:", bool(sample(model, batch).isfinite().all()))
