"""Held-out 2 (fixed twin): the planes composed as booleans, then one finfo.min where masked.

Source: the fix of NVIDIA-NeMo/Automodel PR #2658 (compose with a boolean torch.where).
"""

import torch


def build_causal_padding_mask(
    padding_mask: torch.Tensor, seq_len: int, window: int | None, dtype: torch.dtype
) -> torch.Tensor:
    device = padding_mask.device
    min_value = torch.finfo(dtype).min
    q = torch.arange(seq_len, device=device)[:, None]
    k = torch.arange(seq_len, device=device)[None, :]
    visible = k <= q
    if window is not None:
        visible = visible & (q - k < window)
    keep = visible[None, None, :, :] & padding_mask.bool()[:, None, None, :]
    return torch.where(keep, 0.0, min_value).to(dtype)


class MaskBuilder:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def dense(self, attention_mask: torch.Tensor, seq_len: int) -> torch.Tensor:
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
        keep = causal[None, None] & attention_mask[:, None, None, :].bool()
        combined = torch.zeros(keep.shape, dtype=self.dtype).masked_fill(
            ~keep, torch.finfo(self.dtype).min)
        return combined
