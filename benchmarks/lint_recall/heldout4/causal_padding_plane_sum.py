"""Held-out 4: a 4-D additive attention mask composed by adding two planes that each hold
finfo(dtype).min: where a key is masked by both, the sum overflows to -inf.

Source: NVIDIA-NeMo/Automodel#2658 (`build_causal_padding_mask` of the DeepSeek-V4 layers summed
the causal/sliding-window plane and the padding plane, both at `torch.finfo(dtype).min`, and bf16
overflowed to -inf: NaN grad norm at step 0; fixed with a boolean `torch.where`),
huggingface/transformers#27114 (`AttentionMaskConverter.to_4d` added the causal 4-D mask to the
expanded padding mask, both filled with finfo.min, and the mask held -inf; fixed by
`masked_fill`ing one with the other).
Surroundings: planes returned by a helper and added with `torch.add`, a converter class whose
methods return the two planes and a third method adds them.
"""

from typing import Optional

import torch


def _additive(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    min_value = torch.finfo(dtype).min
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, min_value)


def build_causal_padding_mask(attention_mask: torch.Tensor, q_len: int, kv_len: int,
                              dtype: torch.dtype, sliding_window: Optional[int] = None) -> torch.Tensor:
    device = attention_mask.device
    q_idx = torch.arange(kv_len - q_len, kv_len, device=device)
    k_idx = torch.arange(kv_len, device=device)
    causal_keep = k_idx[None, :] <= q_idx[:, None]
    if sliding_window is not None:
        causal_keep &= k_idx[None, :] > q_idx[:, None] - sliding_window
    causal_plane = _additive(causal_keep, dtype)[None, None]
    padding_plane = _additive(attention_mask.bool(), dtype)[:, None, None, :]
    return torch.add(causal_plane, padding_plane)  # expect: MC513 helper-return


class AttentionMaskConverter:
    def __init__(self, is_causal: bool, sliding_window: Optional[int] = None) -> None:
        self.is_causal = is_causal
        self.sliding_window = sliding_window

    def to_causal_4d(self, batch_size: int, query_length: int, key_value_length: int,
                     dtype: torch.dtype, device: torch.device) -> Optional[torch.Tensor]:
        if not self.is_causal:
            return None
        mask = torch.full((query_length, key_value_length), torch.finfo(dtype).min, device=device)
        cond = torch.arange(key_value_length, device=device)
        past = key_value_length - query_length
        mask.masked_fill_(cond[None, :] <= (torch.arange(query_length, device=device) + past)[:, None], 0)
        mask = mask.to(dtype)
        return mask[None, None, :, :].expand(batch_size, 1, query_length, key_value_length)

    @staticmethod
    def _expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: int) -> torch.Tensor:
        bsz, src_len = mask.size()
        expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
        inverted_mask = 1.0 - expanded_mask
        return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)

    def to_4d(self, attention_mask_2d: torch.Tensor, query_length: int, dtype: torch.dtype,
              key_value_length: int) -> torch.Tensor:
        causal_4d_mask = self.to_causal_4d(attention_mask_2d.shape[0], query_length, key_value_length,
                                           dtype, attention_mask_2d.device)
        expanded_attn_mask = self._expand_mask(attention_mask_2d, dtype, tgt_len=query_length)
        if causal_4d_mask is not None:
            expanded_attn_mask = causal_4d_mask + expanded_attn_mask  # expect: MC513 method-returns
        return expanded_attn_mask
