"""MusicGen-style decoder over residual codebook tokens of a neural audio codec.

Each time step holds K codebook indices; their embeddings are summed into one token, and K
heads predict the next step's codes. Clips of different lengths are right-padded with PAD;
keys at padded steps are hidden and their targets ignored. Attention runs through
F.scaled_dot_product_attention.

Source: conventions.md §1 (SDPA is_causal row) and §2.7
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DecoderConfig:
    codebooks: int = 4
    codebook_size: int = 64
    dim: int = 64
    heads: int = 4
    depth: int = 2
    max_steps: int = 128


PAD = -1


class CausalBlock(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.heads = cfg.heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, keep):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=True)  # expect: MC506 music
        x = x + self.proj(out.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class CodebookDecoder(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.ModuleList(nn.Embedding(cfg.codebook_size + 1, cfg.dim) for _ in range(cfg.codebooks))
        self.pos = nn.Embedding(cfg.max_steps, cfg.dim)
        self.blocks = nn.ModuleList(CausalBlock(cfg) for _ in range(cfg.depth))
        self.heads = nn.ModuleList(nn.Linear(cfg.dim, cfg.codebook_size) for _ in range(cfg.codebooks))

    def forward(self, codes):
        real = codes[..., 0] != PAD
        safe = codes.masked_fill(codes == PAD, self.cfg.codebook_size)
        x = sum(emb(safe[..., i]) for i, emb in enumerate(self.embed))
        x = x + self.pos(torch.arange(codes.size(1), device=codes.device))
        keep = real[:, None, None, :]
        for block in self.blocks:
            x = block(x, keep)
        return torch.stack([head(x) for head in self.heads], dim=2)


def loss_fn(logits, codes):
    pred, target = logits[:, :-1], codes[:, 1:]
    return F.cross_entropy(pred.reshape(-1, pred.size(-1)), target.reshape(-1), ignore_index=PAD)


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = DecoderConfig()
    lengths = [20, 12, 16]
    codes = torch.full((len(lengths), max(lengths), cfg.codebooks), PAD)
    for i, n in enumerate(lengths):
        codes[i, :n] = torch.randint(0, cfg.codebook_size, (n, cfg.codebooks))
    model = CodebookDecoder(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        loss = loss_fn(model(codes), codes)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.3f}")
