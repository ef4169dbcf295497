"""Held-out 2 (fixed twin): bool masks inverted with `~` / logical_not.

Source: the fixes of deepspeedai/DeepSpeed#3319, facebookresearch/ParlAI PR #1905,
nlpyang/PreSumm#54 and Eurus-Holmes/MNMT#4.
"""

import torch
import torch.nn as nn

NEAR_INF = 1e20


class AttentionLayer(nn.Module):
    def __init__(self, hiddensize: int, null_idx: int = 0) -> None:
        super().__init__()
        self.null_idx = null_idx
        self.linear_out = nn.Linear(hiddensize * 2, hiddensize, bias=False)

    def forward(self, xes, hidden, enc_out, xs):
        attn_mask = xs != self.null_idx
        attn_w_premask = torch.bmm(enc_out, hidden.unsqueeze(2)).squeeze(2).float()
        attn_w_premask.masked_fill_(~attn_mask, -NEAR_INF)
        attn_weights = torch.softmax(attn_w_premask, dim=1)
        return torch.bmm(attn_weights.unsqueeze(1).type_as(enc_out), enc_out)


class Batch:
    def __init__(self, src: torch.Tensor, tgt: torch.Tensor) -> None:
        self.src = src
        self.tgt = tgt
        mask_src = ~(src == 0)
        mask_tgt = ~(tgt == 0)
        self.mask_src = mask_src
        self.mask_tgt = mask_tgt


def global_attention(align: torch.Tensor, memory_lengths: torch.Tensor) -> torch.Tensor:
    max_len = align.size(-1)
    mask = torch.arange(max_len, device=align.device)[None, :] < memory_lengths[:, None]
    mask = mask.unsqueeze(1)
    align.masked_fill_(~mask, -float("inf"))
    return torch.softmax(align, -1)


def ds_softmax_input(attn_scores: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
    input_mask = input_mask.bool()
    return attn_scores.masked_fill(input_mask.logical_not(), torch.finfo(attn_scores.dtype).min)
