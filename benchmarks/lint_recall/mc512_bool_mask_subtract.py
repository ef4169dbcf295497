"""MC512: `1 - mask` on a bool mask: torch raises "Subtraction, the `-` operator, with a bool
tensor is not supported" (checked on torch 2.13).

Source: huggingface/transformers#32195 (4-D masks inverted with `1 - mask`), the torch error message
itself, and conventions.md 1 (HF 4.x inverted user masks with `1 - mask`).
Surroundings: top of file, after other code, a method, a closure.
"""

import torch
import torch.nn as nn

input_ids = torch.tensor([[5, 6, 0, 0]])
keep = input_ids != 0
extended = (1 - keep[:, None, None, :]) * -10000.0  # expect: MC512 top

PAD = 0
DIM = 8
N_LAYERS = 2


def shift_right(ids: torch.Tensor) -> torch.Tensor:
    return torch.cat([ids.new_zeros(ids.size(0), 1), ids[:, :-1]], dim=1)


class Sizes:
    dim = DIM
    n_layers = N_LAYERS


labels = shift_right(input_ids)
valid = labels.ne(PAD)
ignore = 1.0 - valid  # expect: MC512 after-code


class Encoder(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.bool()
        bias = (1.0 - mask[:, None, None, :]) * torch.finfo(x.dtype).min  # expect: MC512 method
        return self.proj(x) + bias.sum()


def pair_bias(seq_keep: torch.Tensor):
    pair = seq_keep[:, :, None] & seq_keep[:, None, :]

    def bias() -> torch.Tensor:
        return (1 - pair) * -1e4  # expect: MC512 closure

    return bias
