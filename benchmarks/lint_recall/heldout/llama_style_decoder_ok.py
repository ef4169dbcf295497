"""Held-out twin: the Llama-style decoder as upstream writes it. The KV cache buffers are written
inside forward on purpose (that is what a cache is), which a buffer rule must not flag.

Source: meta-llama/llama model.py (Attention.forward, Transformer.forward's mask).
"""

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 64
    n_heads: int = 4
    max_batch_size: int = 2
    max_seq_len: int = 32


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)
        shape = (args.max_batch_size, args.max_seq_len, self.n_heads, self.head_dim)
        self.register_buffer("cache_k", torch.zeros(shape), persistent=False)
        self.register_buffer("cache_v", torch.zeros(shape), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int, mask: Optional[torch.Tensor]):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        self.cache_k[:bsz, start_pos:start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos:start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, : start_pos + seqlen].transpose(1, 2)
        values = self.cache_v[:bsz, : start_pos + seqlen].transpose(1, 2)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys, values, attn_mask=mask)
        return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, -1))


def transformer_mask(seqlen: int, start_pos: int, device: torch.device) -> Optional[torch.Tensor]:
    mask = None
    if seqlen > 1:
        mask = torch.full((seqlen, seqlen), float("-inf"), device=device)
        mask = torch.triu(mask, diagonal=1)
        mask = torch.hstack([torch.zeros((seqlen, start_pos), device=device), mask])
    return mask


def build_decoder_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bsz, seqlen = attention_mask.shape
    min_dtype = torch.finfo(dtype).min
    future = torch.ones(seqlen, seqlen, dtype=torch.bool).triu(diagonal=1)
    drop = future[None, None] | (attention_mask[:, None, None, :] == 0)
    return torch.zeros(bsz, 1, seqlen, seqlen, dtype=dtype).masked_fill(drop, min_dtype)
