"""MC504: a zero-initialised mask filled with -inf where it equals 0 masks everything.

Source: the seed self_attention_mask_guide.txt, `create_block_mask` (`mask = torch.zeros(sz, sz)`;
`mask[i:i+b, i:i+b] = 0`; `mask[mask == 0] = float('-inf')`).
Surroundings: top of file, after other code, a method, a closure, a named constant.
"""

import torch
import torch.nn as nn

BLOCK = 4
N = 12
mask = torch.zeros(N, N)
for start in range(0, N, BLOCK):
    mask[start:start + BLOCK, start:start + BLOCK] = 0
mask[mask == 0] = float("-inf")  # expect: MC504 top

MASKED = float("-inf")
EMBED = 16
HEADS = 2
attn = nn.MultiheadAttention(EMBED, HEADS)


def describe(m: torch.Tensor) -> str:
    return f"{tuple(m.shape)} {m.dtype}"


class Shapes:
    embed = EMBED
    heads = HEADS


x = torch.randn(N, 1, EMBED)
report = describe(x)
window = torch.zeros(N, N)
for i in range(N):
    window[i, max(0, i - 1):i + 2] = 0
window[window == 0] = MASKED  # expect: MC504 constant


class BlockSparse(nn.Module):
    def __init__(self, block: int) -> None:
        super().__init__()
        self.block = block

    def build(self, n: int) -> torch.Tensor:
        m = torch.zeros(n, n)
        for s in range(0, n, self.block):
            m[s:s + self.block, s:s + self.block] = 0
        m = m.masked_fill(m == 0, float("-inf"))  # expect: MC504 method
        return m


def local_mask_factory(n: int, w: int):
    def build() -> torch.Tensor:
        m = torch.zeros(n, n)
        for i in range(n):
            m[i, max(0, i - w):i + w + 1] = 0.0
        m[m == 0] = -float("inf")  # expect: MC504 closure
        return m

    return build
