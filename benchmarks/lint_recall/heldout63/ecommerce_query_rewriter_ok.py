"""E-commerce query rewriter: a small decoder LM that rewrites a shopper's search query into a canonical one, decoded greedily with a key/value cache.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)

SEP_TOKEN = "<to>"
EOS_TOKEN = "<eos>"


@dataclass
class RewriterConfig:
    vocab: List[str] = field(default_factory=list)
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_len: int = 64
    max_new_tokens: int = 8

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        for special in (SEP_TOKEN, EOS_TOKEN):
            if special not in self.vocab:
                self.vocab.append(special)


@dataclass
class LayerKVCache:
    """Keys and values of the tokens decoded so far for one layer."""

    keys: Optional[torch.Tensor] = None
    values: Optional[torch.Tensor] = None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.keys is not None:
            k = torch.cat([self.keys, k], dim=2)
            v = torch.cat([self.values, v], dim=2)
        self.keys, self.values = k, v
        return k, v

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.size(2)


class CachedSelfAttention(nn.Module):
    def __init__(self, cfg: RewriterConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, cache: Optional[LayerKVCache] = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.update(k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(t, k.size(2), dtype=torch.bool, device=x.device).tril(diagonal=k.size(2) - t))
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: RewriterConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = CachedSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, cache: Optional[LayerKVCache]) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache)
        return x + self.mlp(self.ln2(x))


class QueryRewriter(nn.Module):
    def __init__(self, cfg: RewriterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.stoi: Dict[str, int] = {w: i for i, w in enumerate(cfg.vocab)}
        self.tok = nn.Embedding(len(cfg.vocab), cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, len(cfg.vocab))

    def forward(self, ids: torch.Tensor, caches: Optional[List[LayerKVCache]] = None, start: int = 0) -> torch.Tensor:
        if start + ids.size(1) > self.cfg.max_len:
            raise ValueError("sequence exceeds max_len")
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError("one cache per layer is required")
        x = self.tok(ids) + self.pos(torch.arange(start, start + ids.size(1), device=ids.device))
        for i, block in enumerate(self.blocks):
            x = block(x, caches[i] if caches is not None else None)
        return self.head(self.ln_f(x))

    def encode(self, query: str) -> torch.Tensor:
        unknown = [w for w in query.split() if w not in self.stoi]
        if unknown:
            logger.warning("dropping out-of-vocabulary words: %s", unknown)
        ids = [self.stoi[w] for w in query.split() if w in self.stoi] + [self.stoi[SEP_TOKEN]]
        return torch.tensor([ids])

    @torch.no_grad()
    def rewrite(self, query: str) -> str:
        """Greedy decoding of the rewritten query, one token per step after the prompt."""
        self.eval()
        ids = self.encode(query)
        caches = [LayerKVCache() for _ in self.blocks]
        logits = self(ids, caches, start=0)
        out: List[str] = []
        for _ in range(self.cfg.max_new_tokens):
            next_id = int(logits[0, -1].argmax())
            word = self.cfg.vocab[next_id]
            if word == EOS_TOKEN:
                break
            out.append(word)
            logits = self(torch.tensor([[next_id]]), caches, start=caches[0].length)
        return " ".join(out)


def make_training_batch(model: QueryRewriter, pairs: List[Tuple[str, str]]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Right-padded `query <to> rewrite <eos>` rows; loss only on the rewrite."""
    rows, targets = [], []
    for src, tgt in pairs:
        prompt = [model.stoi[w] for w in src.split()] + [model.stoi[SEP_TOKEN]]
        answer = [model.stoi[w] for w in tgt.split()] + [model.stoi[EOS_TOKEN]]
        rows.append(prompt + answer)
        targets.append([-100] * (len(prompt) - 1) + answer + [-100])
    width = max(map(len, rows))
    ids = torch.tensor([r + [model.stoi[EOS_TOKEN]] * (width - len(r)) for r in rows])
    tgt = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
    return ids, tgt


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    words = "cheap red running shoes sneakers womens mens laptop bag notebook sleeve 15 inch phone case".split()
    model = QueryRewriter(RewriterConfig(vocab=words))
    pairs = [("cheap red running shoes", "red running sneakers"), ("15 inch laptop bag", "laptop sleeve 15 inch")]
    ids, tgt = make_training_batch(model, pairs)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(20):
        loss = F.cross_entropy(model(ids).flatten(0, 1), tgt.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    logger.info("final loss %.4f", loss.item())
    for src, _ in pairs:
        print(f"{src!r} -> {model.rewrite(src)!r}")
