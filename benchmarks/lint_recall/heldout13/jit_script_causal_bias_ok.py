"""Held-out 13 (correct twin): an on-device next-word predictor exported with TorchScript; the causal bias is a
`@torch.jit.script` function so that the exported graph rebuilds it for any length.

Source: the seed guide's `generate_causal_mask` (`torch.triu(torch.ones(sz, sz) * float('-inf'),
diagonal=1)`), written here as `torch.triu(torch.full(...), -inf)` with the diagonal left at its
default 0 (the offset bug of pbloem/former#6): every token's own position is hidden as well, and
the first token's row is all -inf, NaN after the softmax.
Twin: `triu(..., diagonal=1)`: the diagonal is kept.
Surroundings: a torch.jit.script function returning the mask, manual attention with a softmax.
"""

import math

import torch
from torch import Tensor, nn


@torch.jit.script
def causal_bias(n: int, device: torch.device) -> Tensor:
    return torch.triu(torch.full((n, n), float("-inf"), device=device), diagonal=1)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att + causal_bias(n, x.device)
        att = torch.softmax(att, dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, n, d))


class NextWordModel(nn.Module):
    def __init__(self, vocab: int = 500, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([CausalSelfAttention(dim, heads) for _ in range(layers)])
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = x + layer(x)
        return torch.log_softmax(self.lm_head(x), dim=-1)
