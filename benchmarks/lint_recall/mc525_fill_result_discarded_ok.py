"""The fixed twin of mc525_fill_result_discarded.py: every result is assigned (or the fill is
in place on a copy).

MC525: an out-of-place masked_fill (or triu, torch.where) called as a statement: the masked copy
is thrown away and the scores are never masked.

Source: the seed masked_fill_inplace.txt (its whole point is that `.masked_fill()` returns a new
tensor and leaves the original unchanged), and the real shapes found by this rule in public code:
zeta's multi-modal causal attention (`dots_textual.masked_fill(~mask, float('-inf'))`), gliner's
label padding (`decoder_labels.masked_fill(~decoder_attention_mask.bool(), -100)`), espnet's mask
estimator (`mask.masked_fill(make_pad_mask(...), 0)`) and pytorch-original-transformer's beam
decoding (`latest_token_log_probs.masked_fill(torch.tensor(had_eos == True), float('-inf'))`).
Surroundings: top level, a method, after other code, a closure, a loop, torch.where, triu.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

scores = torch.randn(2, 4, 4)
pad = torch.tensor([[False, False, True, True], [False, False, False, True]])
scores = scores.masked_fill(pad[:, None, :], float("-inf"))
weights = scores.softmax(-1)


class CausalAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        dots = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        dots = dots.masked_fill(~mask, float("-inf"))
        return F.softmax(dots, dim=-1) @ v


def label_padding(labels: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    labels = labels.clone()
    labels.masked_fill_(~attention_mask.bool(), -100)
    return labels


def beam_step(log_probs: torch.Tensor, had_eos: list[bool]) -> torch.Tensor:
    def push_down() -> torch.Tensor:
        return log_probs.masked_fill(torch.tensor(had_eos)[:, None], float("-inf"))

    return push_down()


def linear_attention(k: torch.Tensor, v: torch.Tensor, pads: list[torch.Tensor]) -> torch.Tensor:
    for pad_mask in pads:
        k = k.masked_fill(pad_mask[..., None], 0.0)
    return k.softmax(-2).transpose(-2, -1) @ v


def gated(scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    scores = torch.where(keep, scores, torch.finfo(scores.dtype).min)
    return scores.softmax(-1)


def causal_bias(n: int) -> torch.Tensor:
    bias = torch.full((n, n), float("-inf"))
    bias = torch.triu(bias, diagonal=1)
    return bias
