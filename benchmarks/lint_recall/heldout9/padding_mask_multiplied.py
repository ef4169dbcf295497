"""Held-out 9: a small decoder-only sequence model whose attention applies the causal mask by
addition, as in the formula softmax((QK^T + CausalMask) / sqrt(d_k)) V, and the padding mask by the
element-wise product the question proposes.

Source: ai.stackexchange.com/questions/41367 ("How is the padding mask incorporated in the attention
formula?": the asker proposes an element-wise multiplication of the attention matrix with a tensor of
ones that is zero at the padding tokens; the answer explains that e^0 = 1, so a product before
softmax is not a mask, and the padding must get -inf before the softmax like the causal part).
Surroundings: the 0/1 padding tensor made from sequence lengths by a helper in the model's forward,
passed through a ModuleList of blocks, the product taken in an attention method of each block.
"""

import math

import torch
from torch import nn


def lengths_to_padding_tensor(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(batch, max_len) float tensor: 1.0 at real tokens, 0.0 at padding."""
    positions = torch.arange(max_len, device=lengths.device)
    return (positions[None, :] < lengths[:, None]).float()


def causal_mask(size: int, device=None) -> torch.Tensor:
    return torch.triu(torch.full((size, size), float("-inf"), device=device), diagonal=1)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def attention(self, q, k, v, pad):
        T = q.size(-2)
        scores = (q @ k.transpose(-2, -1) + causal_mask(T, q.device)) / math.sqrt(self.d_k)
        scores = scores * pad[:, None, None, :]  # expect: MC520 helper
        weights = scores.softmax(dim=-1)
        return weights @ v

    def forward(self, x, pad):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, self.d_k).transpose(1, 2) for t in (q, k, v))
        y = self.attention(q, k, v, pad)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, pad):
        x = x + self.attn(self.ln1(x), pad)
        return x + self.mlp(self.ln2(x))


class TinyDecoder(nn.Module):
    def __init__(self, vocab_size: int, d_model: int = 128, n_heads: int = 4, n_layers: int = 2,
                 max_len: int = 256):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_heads) for _ in range(n_layers)])
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor):
        B, T = tokens.shape
        pad = lengths_to_padding_tensor(lengths, T)
        x = self.tok(tokens) + self.pos(torch.arange(T, device=tokens.device))[None]
        for block in self.blocks:
            x = block(x, pad)
        return self.head(x)
