"""Custom attention patterns for nn.MultiheadAttention, from a blog post's "advanced" section.

The post's two helpers, a local window mask and a block-diagonal mask (Longformer / BigBird
style sparse patterns), both additive float masks (0 = attend, -inf = blocked), grown into a
small script that runs one MHA layer under each pattern and prints which keys query 0 uses.

Source: seed self_attention_mask_guide.txt §6 (create_local_mask, create_block_mask)
"""
import torch
import torch.nn as nn


def create_local_mask(sz, window_size):
    mask = torch.zeros(sz, sz)
    for i in range(sz):
        start = max(0, i - window_size // 2)
        end = min(sz, i + window_size // 2 + 1)
        mask[i, start:end] = 0
        mask[i, :start] = float("-inf")
        mask[i, end:] = float("-inf")
    return mask


def create_block_mask(sz, block_size):
    mask = torch.zeros(sz, sz)
    for i in range(0, sz, block_size):
        mask[i:i + block_size, i:i + block_size] = 0
    mask[mask == 0] = float("-inf")  # expect: MC504 snippet
    return mask


PATTERNS = {
    "local": lambda n: create_local_mask(n, window_size=3),
    "block": lambda n: create_block_mask(n, block_size=4),
}


class PatternAttention(nn.Module):
    def __init__(self, embed_dim=16, num_heads=2, pattern="local"):
        super().__init__()
        self.pattern = PATTERNS[pattern]
        self.mha = nn.MultiheadAttention(embed_dim, num_heads)

    def forward(self, x):
        # x: (L, N, E), sequence first as in the post
        attn_mask = self.pattern(x.size(0)).to(x.device)
        return self.mha(x, x, x, attn_mask=attn_mask)


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(12, 2, 16)
    for name in PATTERNS:
        layer = PatternAttention(pattern=name)
        out, weights = layer(x)
        used = (weights[0, 0] > 0).nonzero().flatten().tolist()
        print(f"{name:5s} query 0 attends to {used}; finite output: {bool(torch.isfinite(out).all())}")
