"""MC504 correct twin: start from -inf and write 0 where attention is allowed, or write 1
into the zeros before filling where the mask is still 0.

Source: the seed self_attention_mask_guide.txt (create_local_mask starts the same way but writes
-inf explicitly), and the repaired create_block_mask.
"""

import torch
import torch.nn as nn

BLOCK = 4
N = 12
mask = torch.full((N, N), float("-inf"))
for start in range(0, N, BLOCK):
    mask[start:start + BLOCK, start:start + BLOCK] = 0

window = torch.zeros(N, N)
for i in range(N):
    for j in range(max(0, i - 1), min(N, i + 2)):
        window[i][j] = 1
window[window == 0] = float("-inf")
window[window == 1] = 0


class BlockSparse(nn.Module):
    def __init__(self, block: int) -> None:
        super().__init__()
        self.block = block

    def build(self, n: int) -> torch.Tensor:
        m = torch.zeros(n, n)
        for s in range(0, n, self.block):
            m[s:s + self.block, s:s + self.block].fill_(1)
        return m.masked_fill(m == 0, float("-inf")).masked_fill(m == 1, 0.0)


def local_mask_factory(n: int, w: int):
    def build() -> torch.Tensor:
        m = torch.zeros(n, n)
        for i in range(n):
            m[i, :max(0, i - w)] = float("-inf")
            m[i, i + w + 1:] = float("-inf")
        return m

    return build


def create_local_mask(sz: int, window_size: int) -> torch.Tensor:
    m = torch.zeros(sz, sz)
    for i in range(sz):
        start = max(0, i - window_size // 2)
        end = min(sz, i + window_size // 2 + 1)
        m[i, start:end] = 0
        m[i, :start] = float("-inf")
        m[i, end:] = float("-inf")
    return m
