"""Held-out 14 (correct twin): a streaming speech encoder (for on-device dictation) in which a
frame attends to its own chunk of frames and to the chunks before it, so that each chunk can be
encoded as soon as it has arrived. The chunk mask is built lazily by a
`functools.cached_property` of the schedule object that the encoder holds.

Source: the seed guide's `create_block_mask` (section 6, "块状sparse attention": start from
`torch.zeros`, write 0 into the blocks, then `mask[mask == 0] = float('-inf')`, which masks
every position; here the blocks are a chunk's rows over that chunk and the earlier ones),
`maskcheck explain MC504`.
Twin: the mask starts as `torch.full(..., -inf)` and the chunks are written 0 (the
explain page's fix).
Surroundings: a `functools.cached_property` that builds and caches the mask.
"""

from functools import cached_property

import torch
from torch import nn


class ChunkSchedule:
    """Which frames may attend to which: a frame sees its own chunk and every earlier chunk."""

    def __init__(self, max_frames: int, chunk_frames: int):
        self.max_frames = max_frames
        self.chunk_frames = chunk_frames

    @cached_property
    def attn_mask(self) -> torch.Tensor:
        n, c = self.max_frames, self.chunk_frames
        mask = torch.full((n, n), float("-inf"))
        for start in range(0, n, c):
            mask[start:start + c, : start + c] = 0
        return mask

    def mask_for(self, n_frames: int, device: torch.device) -> torch.Tensor:
        return self.attn_mask[:n_frames, :n_frames].to(device)


class StreamingEncoder(nn.Module):
    def __init__(self, n_mels: int = 80, dim: int = 64, heads: int = 4, layers: int = 2,
                 max_frames: int = 1500, chunk_frames: int = 16):
        super().__init__()
        self.schedule = ChunkSchedule(max_frames, chunk_frames)
        self.subsample = nn.Sequential(nn.Linear(n_mels, dim), nn.ReLU())
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ctc_head = nn.Linear(dim, 32)

    def forward(self, mels: torch.Tensor, frame_pad: torch.Tensor) -> torch.Tensor:
        """mels (B, T, n_mels); frame_pad (B, T) bool, True at padded frames.
        Returns CTC log-probabilities (B, T, 32)."""
        x = self.subsample(mels)
        mask = self.schedule.mask_for(x.shape[1], x.device)
        pad_bias = torch.zeros(frame_pad.shape, device=x.device).masked_fill(frame_pad, float("-inf"))
        h = self.encoder(x, mask=mask, src_key_padding_mask=pad_bias)
        return self.ctc_head(h).log_softmax(dim=-1)
