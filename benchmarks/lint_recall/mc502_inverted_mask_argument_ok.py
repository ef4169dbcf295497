"""MC502 correct twin: every mask is inverted where the conventions meet.

Source: the fixes suggested in the seed self_attention_mask_guide.txt and huggingface/transformers#205.
"""

import torch
import torch.nn as nn
from torch.nn.functional import scaled_dot_product_attention as sdpa

mha = nn.MultiheadAttention(16, 2, batch_first=True)
x = torch.randn(2, 5, 16)
attention_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
out, _ = mha(x, x, x, key_padding_mask=attention_mask == 0)


class Pooler(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(hidden, hidden, hidden, key_padding_mask=~attention_mask.bool())
        return out.mean(dim=1)

    def forward_positional(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(hidden, hidden, hidden, attention_mask.logical_not())
        return out


def encoder(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_padding_mask: torch.Tensor):
    def attend() -> torch.Tensor:
        return sdpa(q, k, v, attn_mask=~key_padding_mask[:, None, None, :])

    return attend()
