"""Held-out 14 (correct twin): a drum-pattern generator (one token per 16th-note step and instrument hit) with
a learned relative-position bias per layer, stored as one `nn.Parameter` per layer in an
`nn.ParameterList` and walked with `zip(self.blocks, self.step_bias)`.

Source: the seed article on `masked_fill_` ("梯度计算风险": `x.masked_fill_(...)` on a tensor
with requires_grad=True breaks autograd; use the out-of-place `masked_fill`), pytorch/pytorch#54625,
`maskcheck explain MC505`. Here each layer's learned bias is made causal with
`masked_fill_` on a slice of the parameter: training raises "a view of a leaf Variable that
requires grad is being used in an in-place operation", and sampling under `torch.no_grad()`
writes -inf into the weights.
Twin: the causal fill is out of place (`bias = bias.masked_fill(future, float("-inf"))`).
Surroundings: parameters taken from an `nn.ParameterList` through `zip` in forward.
"""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5 + bias
        x = x + self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.ff(x)


class DrumGenerator(nn.Module):
    def __init__(self, vocab: int = 512, dim: int = 64, heads: int = 4, layers: int = 3,
                 max_steps: int = 256):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.step_bias = nn.ParameterList(
            nn.Parameter(torch.zeros(heads, max_steps, max_steps)) for _ in range(layers)
        )
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        future = torch.ones(n, n, dtype=torch.bool, device=tokens.device).triu(1)
        x = self.embed(tokens)
        for block, bias in zip(self.blocks, self.step_bias):
            bias = bias[:, :n, :n]
            bias = bias.masked_fill(future, float("-inf"))
            x = block(x, bias)
        return self.head(x)

    @torch.no_grad()
    def sample(self, prompt: torch.Tensor, steps: int, temperature: float = 1.0) -> torch.Tensor:
        tokens = prompt
        for _ in range(steps):
            logits = self(tokens)[:, -1] / temperature
            nxt = torch.multinomial(logits.softmax(-1), 1)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens
