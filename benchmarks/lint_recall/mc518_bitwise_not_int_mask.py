"""MC518: `~` on an integer mask (a tokenizer's int64 attention_mask): ~1 == -2 and ~0 == -1, so
nothing is inverted and every entry is non-zero.

Source: ZikangZhou/HiVT#44 ("~True=-2 and ~False=-1" confusion), pytorch/pytorch#24180 (`~` on a
byte tensor gives 254/255), huggingface/transformers#205 (attention_mask is a LongTensor).
Surroundings: top of file, after other code, a method, a closure.
"""

import torch
import torch.nn as nn

attention_mask = torch.tensor([[1, 1, 1, 0, 0]])
padding = ~attention_mask  # expect: MC518 top

MAX_LEN = 5
HIDDEN = 8


def pad_to(ids: list[int], n: int) -> list[int]:
    return ids + [0] * (n - len(ids))


class Dims:
    max_len = MAX_LEN
    hidden = HIDDEN


batch = {"input_ids": torch.tensor([pad_to([4, 5], MAX_LEN)]),
         "attention_mask": torch.tensor([pad_to([1, 1], MAX_LEN)])}
hidden = torch.randn(1, MAX_LEN, HIDDEN)
is_pad = ~batch["attention_mask"].long()  # expect: MC518 after-code
pooled = (hidden * is_pad.unsqueeze(-1)).sum(1)


class Encoder(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(dim, 2, batch_first=True)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        keep = attention_mask.int()
        drop = ~keep  # expect: MC518 method
        return x * drop.unsqueeze(-1)


def masked_mean(mask: torch.Tensor):
    mask_long = mask.to(torch.long)

    def mean(x: torch.Tensor) -> torch.Tensor:
        inv = ~mask_long  # expect: MC518 closure
        return (x * inv[..., None]).sum(1)

    return mean
