"""Typed audio frame encoder: a frozen dataclass config, eager attention with an additive bias (correct twin).

Source: conventions.md §2.9 (a 4-D bool mask given to eager attention, which does
`attn_weights + attention_mask`, is added: True adds +1 and nothing is masked) and
huggingface/transformers#32113 (boolean masks where the code expects an additive float mask).
The (B, 1, 1, T) bool keep-mask made from the frame lengths is passed as `bias` and added to the
logits.
Twin: `bias` is a float 0 / `torch.finfo(x.dtype).min` mask made from `valid` with masked_fill.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class EncoderConfig:
    n_mels: int = 80
    dim: int = 144
    heads: int = 4
    depth: int = 3
    ff_mult: int = 4
    dropout: float = 0.0


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Eager attention; `bias` is added to the logits (0 = attend, very negative = ignore)."""
    logits = torch.einsum("bhid,bhjd->bhij", q, k) * q.shape[-1] ** -0.5
    if bias is not None:
        logits = logits + bias
    return torch.einsum("bhij,bhjd->bhid", logits.softmax(dim=-1), v)


def lengths_to_valid(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) frame counts -> (B, T) bool, True at real frames."""
    max_len = max_len or int(lengths.max())
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


class SelfAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return self.out(attention(q, k, v, bias).transpose(1, 2).flatten(2))


class Layer(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = SelfAttention(cfg)
        self.ff = nn.Sequential(nn.Linear(cfg.dim, cfg.ff_mult * cfg.dim), nn.SiLU(),
                                nn.Dropout(cfg.dropout), nn.Linear(cfg.ff_mult * cfg.dim, cfg.dim))

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), bias)
        return x + self.ff(self.norm2(x))


class FrameEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig = EncoderConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.subsample = nn.Conv1d(cfg.n_mels, cfg.dim, kernel_size=3, stride=2, padding=1)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.dim)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, n_mels), lengths (B,) -> frames (B, T', dim), new lengths (B,)."""
        x = self.subsample(feats.transpose(1, 2)).transpose(1, 2)
        lengths = (lengths - 1) // 2 + 1
        valid = lengths_to_valid(lengths, x.shape[1])
        x = x.masked_fill(~valid[..., None], 0.0)
        bias = torch.zeros(valid.shape, dtype=x.dtype, device=x.device)
        bias = bias.masked_fill(~valid, torch.finfo(x.dtype).min)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, bias)
        return self.norm(x), lengths


def masked_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    w = valid.unsqueeze(-1).to(x.dtype)
    return (x * w).sum(1) / w.sum(1).clamp(min=1.0)


if __name__ == "__main__":
    torch.manual_seed(0)
    enc = FrameEncoder().eval()
    feats = torch.randn(2, 50, 80)
    lengths = torch.tensor([50, 31])
    feats[1, 31:] = 0.0
    with torch.no_grad():
        out, out_len = enc(feats, lengths)
        alone, _ = enc(feats[1:, :31], lengths[1:])
        n = int(out_len[1])
        print("frames:", out.shape, out_len.tolist())
        print("short utterance, padded vs alone:", (out[1, :n] - alone[0, :n]).abs().max().item())
        pooled = masked_mean(out, lengths_to_valid(out_len, out.shape[1]))
        print("pooled:", pooled.shape)
