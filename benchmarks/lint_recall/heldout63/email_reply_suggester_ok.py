"""Smart-reply suggester: a small decoder LM scores short candidate replies to an email thread.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger(__name__)


class AttentionKind(str, Enum):
    SDPA = "sdpa"
    EAGER = "eager"


@dataclass
class SuggesterConfig:
    vocab_size: int = 300
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_positions: int = 96
    pad_id: int = 0
    bos_id: int = 1
    attention: AttentionKind = AttentionKind.SDPA

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads != 0:
            raise ValueError("d_model must be a multiple of n_heads")
        if self.pad_id == self.bos_id:
            raise ValueError("pad_id and bos_id must differ")


def make_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(batch, 1, 1, seq) boolean mask, True where a key may be attended."""
    if attention_mask.dim() != 2:
        raise ValueError("attention_mask must be (batch, seq)")
    return attention_mask.bool()[:, None, None, :]


def build_causal_mask(seq_len: int, device: torch.device) -> torch.Tensor:
    """(seq, seq) boolean mask, True on and below the diagonal."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pad_keep: Optional[torch.Tensor]) -> torch.Tensor:
    if pad_keep is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=pad_keep & build_causal_mask(q.size(-2), q.device))


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pad_keep: Optional[torch.Tensor]) -> torch.Tensor:
    keep = build_causal_mask(q.size(-2), q.device)
    if pad_keep is not None:
        keep = keep & pad_keep
    scores = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
    scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1) @ v


ATTENTION_FUNCTIONS: Dict[AttentionKind, Callable[..., torch.Tensor]] = {
    AttentionKind.SDPA: sdpa_attention,
    AttentionKind.EAGER: eager_attention,
}


class DecoderBlock(nn.Module):
    def __init__(self, cfg: SuggesterConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.attn_fn = ATTENTION_FUNCTIONS[cfg.attention]
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, pad_keep: Optional[torch.Tensor]) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = self.attn_fn(q, k, v, pad_keep).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln_2(x))


class ReplySuggester(nn.Module):
    def __init__(self, cfg: SuggesterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        t = input_ids.size(1)
        if t > self.cfg.max_positions:
            raise ValueError(f"sequence of {t} tokens exceeds max_positions")
        pad_keep = make_padding_mask(attention_mask) if attention_mask is not None else None
        x = self.wte(input_ids) + self.wpe(torch.arange(t, device=input_ids.device))
        for block in self.blocks:
            x = block(x, pad_keep)
        return self.lm_head(self.ln_f(x))


def encode_pairs(thread: List[int], replies: List[List[int]], cfg: SuggesterConfig) -> Tuple[Dict[str, torch.Tensor], torch.Tensor]:
    """Right-pad `thread + reply` for every candidate; returns the batch and a reply-token mask."""
    rows = [[cfg.bos_id] + thread + r for r in replies]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), cfg.pad_id, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
    reply_tokens = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (row, reply) in enumerate(zip(rows, replies)):
        input_ids[i, : len(row)] = torch.tensor(row)
        attention_mask[i, : len(row)] = 1
        reply_tokens[i, len(row) - len(reply): len(row)] = True
    return {"input_ids": input_ids, "attention_mask": attention_mask}, reply_tokens


def score_replies(model: ReplySuggester, thread: List[int], replies: List[List[int]]) -> List[float]:
    """Mean log-likelihood of each candidate reply given the thread."""
    batch, reply_tokens = encode_pairs(thread, replies, model.cfg)
    model.eval()
    with torch.no_grad():
        logits = model(**batch)
    logp = F.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    target = reply_tokens[:, 1:].float()
    return ((logp * target).sum(1) / target.sum(1)).tolist()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    torch.manual_seed(0)
    cfg = SuggesterConfig()
    model = ReplySuggester(cfg)
    thread = torch.randint(2, cfg.vocab_size, (20,)).tolist()
    replies = [torch.randint(2, cfg.vocab_size, (n,)).tolist() for n in (3, 8, 5)]
    batch, _ = encode_pairs(thread, replies, cfg)
    model.train()
    logits = model(**batch)
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), batch["input_ids"][:, 1:].flatten(), ignore_index=cfg.pad_id)
    loss.backward()
    logger.info("lm loss %.4f", loss.item())
    for reply, score in zip(replies, score_replies(model, thread, replies)):
        print(len(reply), round(score, 4))
