"""MC502: a mask in one convention handed to an argument of the other.

Source: the seed self_attention_mask_guide.txt (key_padding_mask: True = padding) against a
Hugging Face `attention_mask` (1 = real token, huggingface/transformers#205), and
pytorch/pytorch#103749 / the SDPA docstring's "invert your boolean mask when migrating from MHA".
Surroundings: top of file, a method, a positional argument of MultiheadAttention.forward, a closure,
an SDPA alias.
"""

import torch
import torch.nn as nn
from torch.nn.functional import scaled_dot_product_attention as sdpa

mha = nn.MultiheadAttention(16, 2, batch_first=True)
x = torch.randn(2, 5, 16)
attention_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
out, _ = mha(x, x, x, key_padding_mask=attention_mask.bool())  # expect: MC502 top


class Pooler(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(hidden, hidden, hidden, key_padding_mask=attention_mask)  # expect: MC502 method
        return out.mean(dim=1)

    def forward_positional(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out, _ = self.attn(hidden, hidden, hidden, attention_mask)  # expect: MC502 positional
        return out


def encoder(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_padding_mask: torch.Tensor):
    def attend() -> torch.Tensor:
        return sdpa(q, k, v, attn_mask=key_padding_mask[:, None, None, :])  # expect: MC502 alias

    return attend()
