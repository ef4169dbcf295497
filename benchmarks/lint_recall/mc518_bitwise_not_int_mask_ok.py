"""MC518 correct twin: integer masks compared (`== 0`) or cast to bool before `~`.

Source: the advice in pytorch/pytorch#24180 and ZikangZhou/HiVT#44.
"""

import torch
import torch.nn as nn

attention_mask = torch.tensor([[1, 1, 1, 0, 0]])
padding = attention_mask == 0
padding2 = ~attention_mask.bool()
flags = torch.tensor([3, 5])
low_bits = ~flags & 0xF


class Encoder(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(dim, 2, batch_first=True)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.layer(x, src_key_padding_mask=~attention_mask.bool())


def masked_mean(mask: torch.Tensor):
    keep = mask.to(torch.bool)

    def mean(x: torch.Tensor) -> torch.Tensor:
        inv = ~keep
        return (x * inv[..., None]).sum(1)

    return mean
