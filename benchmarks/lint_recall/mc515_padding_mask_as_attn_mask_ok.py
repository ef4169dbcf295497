"""MC515 correct twin: the padding mask gets its head and query axes (N, 1, 1, S) first.

Source: conventions.md 2.6 and the x-transformers answer in lucidrains/x-transformers#172.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as attention

q = k = v = torch.randn(4, 2, 4, 8)
keep = torch.tensor([[True, True, True, False]] * 4)
out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])

lengths = torch.tensor([4, 3, 2, 4])
key_keep = torch.arange(4)[None, :] < lengths[:, None]
out2 = attention(q, k, v, attn_mask=key_keep.view(4, 1, 1, 4))
causal = torch.ones(4, 4, dtype=torch.bool).tril()
out3 = attention(q, k, v, attn_mask=causal)


class Encoder(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        mask = attention_mask.bool()[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def make_attend(ids: torch.Tensor, pad_id: int):
    not_pad = (ids != pad_id).unsqueeze(1).unsqueeze(2)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, not_pad)

    return attend
