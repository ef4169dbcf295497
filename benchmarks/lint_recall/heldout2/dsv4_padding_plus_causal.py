"""Held-out 2: two finfo.min planes summed into one additive mask.

Source: NVIDIA-NeMo/Automodel PR #2658 (deepseek_v4 `build_causal_padding_mask` summed the
causal/sliding-window plane and the padding plane, each `torch.finfo(dtype).min`; where both mask
a key the sum overflows bf16 to -inf; NaN grad_norm at step 0).
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
    causal_plane = torch.where(visible, 0.0, min_value).to(dtype)
    pad_plane = torch.where(padding_mask.bool(), 0.0, min_value).to(dtype)
    return causal_plane[None, None, :, :] + pad_plane[:, None, None, :]  # expect: MC513 function


class MaskBuilder:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def dense(self, attention_mask: torch.Tensor, seq_len: int) -> torch.Tensor:
        causal = torch.full((seq_len, seq_len), torch.finfo(self.dtype).min, dtype=self.dtype)
        causal = torch.triu(causal, diagonal=1)
        padding = (1.0 - attention_mask[:, None, None, :].to(self.dtype)) * torch.finfo(self.dtype).min
        combined = causal + padding  # expect: MC513 method
        return combined
