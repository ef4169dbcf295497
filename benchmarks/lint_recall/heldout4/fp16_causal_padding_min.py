"""Held-out 4 (written after the fixes; see README.md): an fp16 decoder whose causal mask and
padding mask are both made at finfo(dtype).min and then added, so a position masked by both
overflows to -inf (a left-padded row becomes all -inf, NaN after softmax).

Source: huggingface/transformers#17306 ("Fix -1e4 as attn mask": with `torch.finfo(dtype).min`
in fp16, causal mask + padding give `[[-65504, -65504], ...]` and adding anything below -16
gives -inf, then NaN after softmax for a `[pad_token, token_1]` row).
Surroundings: the two masks made in two methods of the model and added in its forward; a
module-level helper that adds a padding plane to the mask it is given with `+=`.
"""

import torch
import torch.nn as nn


def add_padding(mask: torch.Tensor, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    padding = torch.zeros(attention_mask.shape, dtype=dtype).masked_fill(
        attention_mask == 0, torch.finfo(dtype).min)
    mask += padding[:, None, None, :]
    return mask


class HalfDecoder(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.qk = nn.Linear(dim, 2 * dim)

    def _causal_mask(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        mask = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype)
        return torch.triu(mask, diagonal=1)[None, None]

    def _padding_mask(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        inverted = 1.0 - attention_mask[:, None, None, :].to(dtype)
        return inverted.masked_fill(inverted.bool(), torch.finfo(dtype).min)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids).half()
        dtype = h.dtype
        q, k = self.qk(h).chunk(2, dim=-1)
        scores = (q @ k.transpose(-1, -2))[:, None]
        mask = self._causal_mask(input_ids.shape[1], dtype) + self._padding_mask(attention_mask, dtype)  # expect: MC513 method-planes
        return (scores + mask).float().softmax(-1)

    def forward_cached(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(input_ids).half()
        q, k = self.qk(h).chunk(2, dim=-1)
        causal = self._causal_mask(input_ids.shape[1], h.dtype)
        mask = add_padding(causal, attention_mask, h.dtype)  # expect: MC513 helper-inplace
        return ((q @ k.transpose(-1, -2))[:, None] + mask).float().softmax(-1)
