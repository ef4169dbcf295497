"""MC514: a padding mask placed on the query axis (B, 1, L, 1) instead of the key axis (B, 1, 1, S).

Source: hyunwoongko/transformer PR #40 ("fix(model): attention pad mask": `.unsqueeze(1).unsqueeze(3)`),
bentrevett/pytorch-seq2seq#96, lucidrains/x-transformers#172 (b i -> b 1 i 1 vs b 1 1 i).
Surroundings: top of file, after other code, a method, a closure.
"""

import torch
import torch.nn as nn

PAD_IDX = 0
src = torch.tensor([[5, 7, 0, 0]])
src_mask = (src != PAD_IDX).unsqueeze(1).unsqueeze(3)  # expect: MC514 top
scores = torch.randn(1, 2, 4, 4).masked_fill(src_mask == 0, -10000.0)  # also: MC514

D_MODEL = 16
N_HEAD = 2
MAX_LEN = 32


def sinusoid(n: int, d: int) -> torch.Tensor:
    pos = torch.arange(n)[:, None]
    return torch.sin(pos / 10000 ** (torch.arange(d)[None, :] / d))


class HParams:
    d_model = D_MODEL
    n_head = N_HEAD


pe = sinusoid(MAX_LEN, D_MODEL)
trg = torch.tensor([[3, 4, 0]])
trg_pad = (trg != PAD_IDX)[:, None, :, None]  # expect: MC514 after-code
att = torch.randn(1, 2, 3, 3).masked_fill(~trg_pad, -1e4)  # also: MC514


class Seq2Seq(nn.Module):
    def __init__(self, pad_idx: int) -> None:
        super().__init__()
        self.pad_idx = pad_idx

    def make_src_mask(self, src: torch.Tensor) -> torch.Tensor:
        return (src != self.pad_idx).unsqueeze(1).unsqueeze(3)  # expect: MC514 method

    def forward(self, src: torch.Tensor, energy: torch.Tensor) -> torch.Tensor:
        mask = self.make_src_mask(src)
        return energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min).softmax(-1)  # also: MC514


def scorer(mask_2d: torch.Tensor):
    m = mask_2d.unsqueeze(-1).unsqueeze(1)  # expect: MC514 closure

    def score(s: torch.Tensor) -> torch.Tensor:
        return s.masked_fill(m == 0, float("-inf")).softmax(-1)  # also: MC514

    return score
