"""A tokenizer-free byte-level language model in the MEGABYTE layout (a global and a local model).

UTF-8 bytes are grouped into patches of four; the global model runs causally over patch
embeddings (shifted by one patch) and the local model predicts the bytes of each patch from the
global output and the bytes before them in the patch. Texts of different lengths are right-padded
with byte 256. Held-out bits per byte are measured on the MATH kernel for reproducibility.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

PAD = 256


class AttnImpl(StrEnum):
    SDPA = "sdpa"
    EAGER = "eager"


@dataclass(slots=True, frozen=True)
class ByteConfig:
    patch: Annotated[int, "bytes per patch"] = 4
    dim: int = 64
    heads: int = 4
    global_layers: int = 2
    local_layers: int = 1
    attn: AttnImpl = AttnImpl.SDPA


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ByteConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Float[Tensor, "b t d"], keep: Bool[Tensor, "b t"]) -> Float[Tensor, "b t d"]:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.cfg.heads, -1).permute(2, 0, 3, 1, 4)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        match self.cfg.attn:
            case AttnImpl.SDPA:
                ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :] & causal)
            case AttnImpl.EAGER:
                scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
                scores = scores.masked_fill(~(causal & keep[:, None, None, :]), torch.finfo(scores.dtype).min)
                ctx = scores.softmax(dim=-1) @ v
        return self.proj(ctx.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: ByteConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x), keep)
        return x + self.mlp(self.ln2(x))


class MegaByte(nn.Module):
    def __init__(self, cfg: ByteConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.byte_emb = nn.Embedding(PAD + 1, cfg.dim)
        self.patch_proj = nn.Linear(cfg.patch * cfg.dim, cfg.dim)
        self.patch_pos = nn.Embedding(64, cfg.dim)
        self.start = nn.Parameter(torch.zeros(cfg.dim))
        self.global_blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.global_layers))
        self.local_blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.local_layers))
        self.head = nn.Linear(cfg.dim, PAD + 1)

    def forward(self, data: Int[Tensor, "b n"]) -> Float[Tensor, "b n v"]:
        b, n = data.shape
        p, np_ = self.cfg.patch, n // self.cfg.patch
        emb = self.byte_emb(data)
        patches = self.patch_proj(emb.view(b, np_, -1))
        g = torch.cat([self.start.expand(b, 1, -1), patches[:, :-1]], dim=1) + self.patch_pos.weight[:np_]
        patch_keep = data.view(b, np_, p)[:, :, 0] != PAD
        for block in self.global_blocks:
            g = block(g, patch_keep)
        shifted = torch.cat([torch.zeros_like(emb[:, :1]), emb[:, :-1]], dim=1).view(b * np_, p, -1)
        shifted[:, 0] = 0.0
        local = shifted + g.reshape(b * np_, 1, -1)
        byte_keep = data.view(b * np_, p) != PAD
        byte_keep[:, 0] = True
        for block in self.local_blocks:
            local = block(local, byte_keep)
        return self.head(local).view(b, n, -1)


def encode(texts: list[str], patch: int) -> Int[Tensor, "b n"]:
    rows = [list(t.encode("utf-8")) for t in texts]
    n = math.ceil(max(map(len, rows)) / patch) * patch
    return torch.tensor([r + [PAD] * (n - len(r)) for r in rows])


WORDS = ["grüße", "naïve", "東京", "café", "straße", "smörgåsbord", "crème", "日本語", "façade", "über"]


def sample_texts(k: int, gen: torch.Generator) -> list[str]:
    return [" ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (int(n),), generator=gen)) for n in torch.randint(2, 7, (k,), generator=gen)]


def bits_per_byte(model: MegaByte, data: Tensor) -> float:
    logits = model(data)
    keep = data != PAD
    return (F.cross_entropy(logits[keep], data[keep]) / math.log(2)).item()


def main(steps: int = 100) -> None:
    torch.manual_seed(0)
    cfg = ByteConfig()
    model = MegaByte(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(steps):
        data = encode(sample_texts(32, gen), cfg.patch)
        loss = F.cross_entropy(model(data).flatten(0, 1), data.flatten(), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % 50 == 0:
            print(f"step {step + 1} loss {loss.item():.3f}")
    model.eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        print(f"held-out bits/byte {bits_per_byte(model, encode(sample_texts(64, torch.Generator().manual_seed(1)), cfg.patch)):.3f}")


if __name__ == "__main__":
    main()
