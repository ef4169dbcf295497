"""Streaming Conformer encoder written the way WeNet writes it (wenet/transformer/encoder.py,
wenet/utils/mask.py): ``make_pad_mask``, ``subsequent_chunk_mask``, ``add_optional_chunk_mask``
for dynamic chunk training, a static chunk mask for the deployed model, macaron feed-forward
and a causal convolution module that zeroes padded frames.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合, 区别, 命名规则)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class EncoderConfig:
    input_size: int = 20
    output_size: int = 32
    attention_heads: int = 4
    num_blocks: int = 2
    cnn_module_kernel: int = 5
    static_chunk_size: int = 4
    use_dynamic_chunk: bool = False
    max_frames: int = 64


def make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    max_len = max_len if max_len > 0 else int(lengths.max())
    seq_range = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    return seq_range.unsqueeze(0).expand(lengths.size(0), max_len) >= lengths.unsqueeze(-1)


def subsequent_chunk_mask(size: int, chunk_size: int, num_left_chunks: int = -1) -> torch.Tensor:
    ret = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        start = 0 if num_left_chunks < 0 else max((i // chunk_size - num_left_chunks) * chunk_size, 0)
        ending = min((i // chunk_size + 1) * chunk_size, size)
        ret[i, start:ending] = True
    return ret


def add_optional_chunk_mask(xs: torch.Tensor, masks: torch.Tensor, decoding_chunk_size: int) -> torch.Tensor:
    max_len = xs.size(1)
    chunk_size = decoding_chunk_size if decoding_chunk_size > 0 else int(torch.randint(1, max_len, (1,)))
    chunk_size = max_len if chunk_size > max_len // 2 and decoding_chunk_size <= 0 else chunk_size
    chunk_masks = subsequent_chunk_mask(max_len, chunk_size).to(xs.device)
    return masks & chunk_masks.unsqueeze(0)


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n_batch = x.size(0)
        q = self.linear_q(x).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(x).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        mask = mask.unsqueeze(1).eq(0)
        scores = scores.masked_fill(mask, -float("inf"))
        attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(n_batch, -1, self.h * self.d_k)
        return self.linear_out(out)


class ConvolutionModule(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.lorder, self.norm = kernel_size - 1, nn.LayerNorm(channels)
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, 1)
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, groups=channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor, mask_pad: torch.Tensor) -> torch.Tensor:
        x = x.transpose(1, 2).masked_fill(~mask_pad, 0.0)
        x = F.glu(self.pointwise_conv1(x), dim=1)
        x = self.depthwise_conv(F.pad(x, (self.lorder, 0), "constant", 0.0))
        x = F.silu(self.norm(x.transpose(1, 2))).transpose(1, 2)
        x = self.pointwise_conv2(x).masked_fill(~mask_pad, 0.0)
        return x.transpose(1, 2)


class ConformerEncoderLayer(nn.Module):
    def __init__(self, size: int, heads: int, kernel: int):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, size)
        self.ff_macaron = nn.Sequential(nn.Linear(size, 2 * size), nn.SiLU(), nn.Linear(2 * size, size))
        self.ff = nn.Sequential(nn.Linear(size, 2 * size), nn.SiLU(), nn.Linear(2 * size, size))
        self.conv_module = ConvolutionModule(size, kernel)
        self.norms = nn.ModuleList(nn.LayerNorm(size) for _ in range(5))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, mask_pad: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff_macaron(self.norms[0](x))
        x = x + self.self_attn(self.norms[1](x), mask)
        x = x + self.conv_module(self.norms[2](x), mask_pad)
        x = x + 0.5 * self.ff(self.norms[3](x))
        return self.norms[4](x)


class ConformerEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Linear(cfg.input_size, cfg.output_size)
        size, heads, kernel = cfg.output_size, cfg.attention_heads, cfg.cnn_module_kernel
        self.encoders = nn.ModuleList(ConformerEncoderLayer(size, heads, kernel) for _ in range(cfg.num_blocks))
        self.register_buffer("chunk_mask", subsequent_chunk_mask(cfg.max_frames, cfg.static_chunk_size))
        self.register_buffer("chunk_index", torch.arange(cfg.max_frames) // cfg.static_chunk_size)

    def forward(self, xs: torch.Tensor, xs_lens: torch.Tensor, decoding_chunk_size: int = 0,
                num_decoding_left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        T = xs.size(1)
        masks = ~make_pad_mask(xs_lens, T).unsqueeze(1)
        xs = self.embed(xs) * math.sqrt(self.cfg.output_size)
        if self.cfg.use_dynamic_chunk and self.training:
            chunk_masks = add_optional_chunk_mask(xs, masks, decoding_chunk_size)
        else:
            chunk_mask = self.chunk_mask
            if num_decoding_left_chunks >= 0:
                too_far = (self.chunk_index[:, None] - self.chunk_index[None, :]) > num_decoding_left_chunks
                chunk_mask = self.chunk_mask.masked_fill(too_far, False)
            chunk_masks = masks & chunk_mask[:T, :T].unsqueeze(0)
        for layer in self.encoders:
            xs = layer(xs, chunk_masks, masks)
        return xs, masks


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder = ConformerEncoder(EncoderConfig()).eval()
    feats, lens = torch.randn(2, 24, 20), torch.tensor([24, 17])
    with torch.no_grad():
        full, masks = encoder(feats, lens)
        encoder(feats, lens, num_decoding_left_chunks=1)
        again, _ = encoder(feats, lens)
        real = masks.squeeze(1)
        print("full context before/after a limited-left-chunk call:", (full - again)[real].abs().max().item())
        stored = ConformerEncoder(EncoderConfig()).chunk_mask != encoder.chunk_mask
        print("chunk_mask entries changed:", int(stored.sum()))
        noisy, later = feats.clone(), feats.clone()
        noisy[1, 17:], later[:, 20:] = 50.0, later[:, 20:] + 1.0
        print("padding content leak:", (encoder(noisy, lens)[0] - again)[real].abs().max().item())
        print("look-ahead beyond the chunk:", (encoder(later, lens)[0] - again)[:, :20].abs().max().item())
