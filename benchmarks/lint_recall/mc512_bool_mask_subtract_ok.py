"""MC512 correct twin: bool masks inverted with `~`/logical_not, or cast before `1 - mask`.

Source: the torch error message's advice and huggingface/transformers#32195's fixed code.
"""

import torch
import torch.nn as nn

input_ids = torch.tensor([[5, 6, 0, 0]])
keep = input_ids != 0
extended = (~keep[:, None, None, :]).float() * -10000.0
extended2 = (1 - keep.float()[:, None, None, :]) * -10000.0
attention_mask = torch.tensor([[1, 1, 0, 0]])
extended3 = (1.0 - attention_mask[:, None, None, :]) * -10000.0


class Encoder(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.to(x.dtype)
        bias = (1.0 - mask[:, None, None, :]) * torch.finfo(x.dtype).min
        return self.proj(x) + bias.sum()


def pair_bias(seq_keep: torch.Tensor):
    pair = seq_keep[:, :, None] & seq_keep[:, None, :]

    def bias() -> torch.Tensor:
        return pair.logical_not().float() * -1e4

    return bias
