"""Held-out 4 twin: the buffer is the lower triangle read through `== 0`, the boolean look-ahead
triangle starts at diagonal 1, and the padding bias is built per call instead of written into a
buffer.

Source: karpathy/nanoGPT#170, TransformerLensOrg/TransformerLens#284, OpenNMT/OpenNMT-py#240.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class DemoAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_head: int) -> None:
        super().__init__()
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_V = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_O = nn.Parameter(torch.empty(n_heads, d_head, d_model))
        self.d_head = d_head
        for w in (self.W_Q, self.W_K, self.W_V, self.W_O):
            nn.init.normal_(w, std=0.02)

    def apply_causal_mask(self, attn_scores: torch.Tensor) -> torch.Tensor:
        ones = torch.ones(attn_scores.size(-2), attn_scores.size(-1), device=attn_scores.device)
        mask = ones.bool().triu(1)
        return torch.where(mask, torch.tensor(float("-inf"), device=attn_scores.device), attn_scores)

    def forward(self, normalized_resid_pre: torch.Tensor) -> torch.Tensor:
        q = torch.einsum("bpd,ndh->bpnh", normalized_resid_pre, self.W_Q)
        k = torch.einsum("bpd,ndh->bpnh", normalized_resid_pre, self.W_K)
        v = torch.einsum("bpd,ndh->bpnh", normalized_resid_pre, self.W_V)
        attn_scores = torch.einsum("bqnh,bknh->bnqk", q, k) / math.sqrt(self.d_head)
        pattern = self.apply_causal_mask(attn_scores).softmax(-1)
        z = torch.einsum("bknh,bnqk->bqnh", v, pattern)
        return torch.einsum("bqnh,nhd->bqd", z, self.W_O)


class SamplingHead(nn.Module):
    """Single-sequence sampler: padding of the prompt is hidden through a key bias."""

    def __init__(self, vocab: int, d_model: int, max_len: int, pad_id: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.attn = nn.MultiheadAttention(d_model, 4, batch_first=True)
        self.pad_id = pad_id
        self.register_buffer("key_bias", torch.zeros(1, max_len))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.size(1)
        key_bias = self.key_bias[:, :T].masked_fill(tokens == self.pad_id, float("-inf"))
        h = self.embed(tokens)
        bias = key_bias.expand(T, T)
        out, _ = self.attn(h, h, h, attn_mask=bias)
        return out
