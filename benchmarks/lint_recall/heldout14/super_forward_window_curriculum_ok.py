"""Held-out 14 (correct twin): a human-activity recogniser for wrist-worn IMU data. Its encoder layers subclass
`nn.TransformerEncoderLayer` to add local attention whose window grows during training (a
curriculum: short windows first). Each layer keeps an additive window plane as a
non-persistent buffer and passes it to the parent class with `super().forward(...)`.

Source: the seed article on `masked_fill_` ("与模型缓冲区的配合": `self.mask.masked_fill_(...)`
on a registered buffer inside `forward`), `maskcheck explain MC524`: the fill rewrites the
stored mask on every call, so fills accumulate. Here the window of the first epochs stays in the
buffer after the curriculum widens it.
Twin: the fill is out of place and the buffer stays all zeros.
Surroundings: a subclass of nn.TransformerEncoderLayer passing the buffer to `super().forward`.
"""

import torch
from torch import nn


class LocalEncoderLayer(nn.TransformerEncoderLayer):
    def __init__(self, d_model: int, nhead: int, max_len: int = 512, **kwargs):
        super().__init__(d_model, nhead, batch_first=True, **kwargs)
        self.register_buffer("window_bias", torch.zeros(max_len, max_len), persistent=False)
        self.window = 2

    def forward(self, src: torch.Tensor, src_mask=None, src_key_padding_mask=None,
                is_causal: bool = False) -> torch.Tensor:
        n = src.shape[1]
        pos = torch.arange(self.window_bias.shape[0], device=src.device)
        far = (pos[:, None] - pos[None, :]).abs() > self.window
        bias = self.window_bias.masked_fill(far, float("-inf"))
        return super().forward(src, src_mask=bias[:n, :n])


class ActivityRecognizer(nn.Module):
    def __init__(self, channels: int = 6, dim: int = 32, heads: int = 4, layers: int = 2,
                 n_activities: int = 8):
        super().__init__()
        self.inp = nn.Linear(channels, dim)
        self.layers = nn.ModuleList(
            LocalEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0) for _ in range(layers)
        )
        self.head = nn.Linear(dim, n_activities)

    def set_window(self, window: int) -> None:
        for layer in self.layers:
            layer.window = window

    def forward(self, imu: torch.Tensor) -> torch.Tensor:
        """imu (B, T, channels) -> per-time-step activity logits (B, T, n_activities)."""
        h = self.inp(imu)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def window_for_epoch(epoch: int) -> int:
    """Curriculum: 2 samples either side for the first epochs, then 8, then 32."""
    return 2 if epoch < 3 else 8 if epoch < 6 else 32
