"""Small decoder-only LM with a typed KV cache (`typing.NamedTuple` per layer, `Tensor | None`
signatures), chunked prefill and one-token decode steps on SDPA.

Source: pytorch/pytorch PR #111007, conventions.md §1 (SDPA `is_causal` row), §2.7 and §5
item 8.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class KVCache(NamedTuple):
    k: Tensor  # (batch, heads, cached, head_dim)
    v: Tensor


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> tuple[Tensor, KVCache]:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k = torch.cat([cache.k, k], dim=2)
            v = torch.cat([cache.v, v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(t, k.shape[2], dtype=torch.bool).tril(diagonal=k.shape[2] - t))
        return self.proj(y.transpose(1, 2).reshape(b, t, c)), KVCache(k, v)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor, cache: KVCache | None = None) -> tuple[Tensor, KVCache]:
        a, cache = self.attn(self.ln1(x), cache)
        x = x + a
        return x + self.mlp(self.ln2(x)), cache


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4, depth: int = 2, ctx: int = 32) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: Tensor, caches: list[KVCache] | None = None, start: int = 0) -> tuple[Tensor, list[KVCache]]:
        x = self.tok(ids) + self.pos(torch.arange(start, start + ids.shape[1]))
        new: list[KVCache] = []
        for i, block in enumerate(self.blocks):
            x, c = block(x, None if caches is None else caches[i])
            new.append(c)
        return self.head(x), new


@torch.inference_mode()
def incremental_logits(model: TinyLM, ids: Tensor, prefill: int, chunk: int = 1) -> Tensor:
    logits, caches = model(ids[:, :prefill])
    out = [logits]
    for s in range(prefill, ids.shape[1], chunk):
        step, caches = model(ids[:, s : s + chunk], caches, start=s)
        out.append(step)
    return torch.cat(out, dim=1)


def main() -> None:
    torch.manual_seed(0)
    model = TinyLM().eval()
    ids = torch.randint(0, 50, (2, 12))
    with torch.inference_mode():
        full, _ = model(ids)
    for prefill, chunk in [(6, 1), (4, 3)]:
        inc = incremental_logits(model, ids, prefill, chunk)
        diff = (inc - full).abs().amax(-1).amax(0)
        print(f"prefill {prefill}, chunks of {chunk}: max diff per position", [round(float(d), 4) for d in diff])


if __name__ == "__main__":
    main()
