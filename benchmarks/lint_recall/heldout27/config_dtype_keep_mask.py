"""Query encoder for retrieval: a frozen `@dataclass` run config picks the compute dtype, every
tensor is moved with `.to(dtype=cfg.compute_dtype)`, SDPA attention, masked mean pooling.

Source: pytorch/pytorch#103963, conventions.md §2.9 and §5 item 7, tools.md §0 P1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class RunConfig:
    vocab: int = 80
    dim: int = 32
    heads: int = 4
    layers: int = 2
    pad_id: int = 0
    compute_dtype: torch.dtype = torch.float32


@dataclass(frozen=True)
class EncodedBatch:
    input_ids: Tensor
    attention_mask: Tensor


class Block(nn.Module):
    def __init__(self, cfg: RunConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x: Tensor, keep: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.cfg.heads, -1).permute(2, 0, 3, 1, 4)
        attn_mask = keep[:, None, None, :].to(dtype=self.cfg.compute_dtype)  # expect: MC508 todtype
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class QueryEncoder(nn.Module):
    def __init__(self, cfg: RunConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim, padding_idx=cfg.pad_id)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.to(dtype=cfg.compute_dtype)

    def forward(self, batch: EncodedBatch) -> Tensor:
        keep = batch.attention_mask.bool()
        x = self.embed(batch.input_ids)
        for block in self.blocks:
            x = block(x, keep)
        w = keep[..., None].to(dtype=self.cfg.compute_dtype)
        pooled = (x * w).sum(1) / w.sum(1)
        return F.normalize(pooled, dim=-1)


def encode(texts: list[list[int]], pad_id: int = 0, pad_to: int = 0) -> EncodedBatch:
    width = max(pad_to, max(len(t) for t in texts))
    ids = torch.full((len(texts), width), pad_id)
    for i, t in enumerate(texts):
        ids[i, : len(t)] = torch.tensor(t)
    return EncodedBatch(ids, (ids != pad_id).long())


def main() -> None:
    torch.manual_seed(0)
    cfg = RunConfig()
    model = QueryEncoder(cfg).eval()
    queries = [[4, 8, 15, 16], [23, 42], [7, 7, 9, 31, 2, 5, 11]]
    with torch.no_grad():
        batch = encode(queries)
        emb = model(batch)
        for i, q in enumerate(queries):
            alone = model(encode([q]))
            print(f"query {i}: batched vs alone cosine {float(emb[i] @ alone[0]):.6f}")
        junk = batch.input_ids.masked_fill(batch.attention_mask == 0, 77)
        moved = (model(EncodedBatch(junk, batch.attention_mask)) - emb).abs().max().item()
        print("padding ids 0 -> 77 moves the embeddings by", round(moved, 6))


if __name__ == "__main__":
    main()
