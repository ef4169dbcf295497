"""Held-out: a Llama-style decoder with a static KV cache and its mask construction.

Source: meta-llama/llama model.py (cache_k/cache_v buffers, `mask = torch.full((seqlen, seqlen),
float("-inf")); mask = torch.triu(mask, diagonal=1)`), with the bugs of pytorch/pytorch#131254
(is_causal together with an attn_mask), huggingface/transformers PR #27114 (two finfo.min planes
summed), and the seed masked_fill_inplace.txt (a registered buffer rewritten inside forward).
"""

import math
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
        self.register_buffer("causal", torch.zeros(args.max_seq_len, args.max_seq_len),
                             persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int, mask: Optional[torch.Tensor]):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        self.cache_k[:bsz, start_pos:start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos:start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, : start_pos + seqlen].transpose(1, 2)
        values = self.cache_v[:bsz, : start_pos + seqlen].transpose(1, 2)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys, values, attn_mask=mask,  # expect: MC506 multiline
                                             is_causal=True)  # also: MC506
        return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, -1))

    def forward_eager(self, x: torch.Tensor, pad_keep: torch.Tensor) -> torch.Tensor:
        bsz, seqlen, _ = x.shape
        n = seqlen
        self.causal.masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # expect: MC524 buffer
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        scores = xq @ xk.transpose(2, 3) / math.sqrt(self.head_dim)
        return (scores + self.causal[:n, :n]).softmax(-1)


def build_decoder_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bsz, seqlen = attention_mask.shape
    min_dtype = torch.finfo(dtype).min
    causal = torch.full((seqlen, seqlen), min_dtype, dtype=dtype).triu(diagonal=1)
    padding = torch.zeros(bsz, 1, 1, seqlen, dtype=dtype).masked_fill(
        attention_mask[:, None, None, :] == 0, min_dtype)
    return causal[None, None] + padding  # expect: MC513 function
