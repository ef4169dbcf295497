"""MC514 correct twin: padding on the key axis (B, 1, 1, S); a query-axis mask only where it is
combined with a key-axis one for a loss or an output mask, never as the attention mask alone.

Source: the fix in hyunwoongko/transformer PR #40 (`.unsqueeze(1).unsqueeze(2)`).
"""

import torch
import torch.nn as nn

PAD_IDX = 0
src = torch.tensor([[5, 7, 0, 0]])
src_mask = (src != PAD_IDX).unsqueeze(1).unsqueeze(2)
scores = torch.randn(1, 2, 4, 4).masked_fill(src_mask == 0, -10000.0)

trg = torch.tensor([[3, 4, 0]])
trg_pad = (trg != PAD_IDX)[:, None, None, :]
att = torch.randn(1, 2, 3, 3).masked_fill(~trg_pad, -1e4)
hidden = torch.randn(1, 3, 8) * (trg != PAD_IDX).unsqueeze(-1)


class Seq2Seq(nn.Module):
    def __init__(self, pad_idx: int) -> None:
        super().__init__()
        self.pad_idx = pad_idx

    def make_src_mask(self, src: torch.Tensor) -> torch.Tensor:
        return (src != self.pad_idx).unsqueeze(1).unsqueeze(2)

    def forward(self, src: torch.Tensor, energy: torch.Tensor) -> torch.Tensor:
        mask = self.make_src_mask(src)
        return energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min).softmax(-1)


def pool(x: torch.Tensor, mask_2d: torch.Tensor) -> torch.Tensor:
    m = mask_2d.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(1) / m.sum(1)
