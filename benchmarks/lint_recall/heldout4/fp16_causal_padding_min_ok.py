"""Held-out 4 twin: the padding positions are written into the causal mask with masked_fill, so
a cell masked by both still holds finfo.min once.

Source: huggingface/transformers#17306 (the masks combined without summing two minima).
"""

import torch
import torch.nn as nn


def add_padding(mask: torch.Tensor, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return mask.masked_fill((attention_mask == 0)[:, None, None, :], torch.finfo(dtype).min)


class HalfDecoder(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.qk = nn.Linear(dim, 2 * dim)

    def _causal_mask(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        mask = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype)
        return torch.triu(mask, diagonal=1)[None, None]

    def _padding_keep(self, attention_mask: torch.Tensor) -> torch.Tensor:
        return attention_mask[:, None, None, :].bool()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids).half()
        dtype = h.dtype
        q, k = self.qk(h).chunk(2, dim=-1)
        scores = (q @ k.transpose(-1, -2))[:, None]
        causal = self._causal_mask(input_ids.shape[1], dtype)
        mask = causal.masked_fill(~self._padding_keep(attention_mask), torch.finfo(dtype).min)
        return (scores + mask).float().softmax(-1)

    def forward_cached(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids).half()
        q, k = self.qk(h).chunk(2, dim=-1)
        causal = self._causal_mask(input_ids.shape[1], h.dtype)
        mask = add_padding(causal, attention_mask, h.dtype)
        return ((q @ k.transpose(-1, -2))[:, None] + mask).float().softmax(-1)
