"""MC506 correct twin: either is_causal=True alone, or the causal part folded into attn_mask.

Source: the fix advised for pytorch/pytorch#131254 and the SDPA docstring.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

q = k = v = torch.randn(1, 2, 4, 8)
pad = torch.tensor([True, True, True, False])
causal = torch.ones(4, 4, dtype=torch.bool).tril()
out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad & causal)
out2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
attend = F.scaled_dot_product_attention
y = attend(q, k, v, None, 0.0, True)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads

    def forward(self, x: torch.Tensor, key_keep: torch.Tensor | None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        if key_keep is None:
            return F.scaled_dot_product_attention(q, k, v, None, 0.0, True)
        mask = key_keep[:, None, None, :] & torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        return F.scaled_dot_product_attention(q, k, v, mask, 0.0, False)


def decoder_step(keep: torch.Tensor | None):
    def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=keep is None)

    return step
