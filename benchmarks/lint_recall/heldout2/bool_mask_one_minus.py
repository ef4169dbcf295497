"""Held-out 2: `1 - mask` on a bool mask (raises since torch 1.2).

Source: deepspeedai/DeepSpeed#3319 (ds_attention.py `1 - input_mask` needs `~input_mask`),
facebookresearch/ParlAI PR #1905 (`attn_w_premask.masked_fill_((1 - attn_mask), -NEAR_INF)`),
nlpyang/PreSumm#54 (`mask_src = 1 - (src == 0)`), Eurus-Holmes/MNMT#4
(`align.masked_fill_(1 - mask, -float('inf'))`).
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
        attn_w_premask.masked_fill_((1 - attn_mask), -NEAR_INF)  # expect: MC512 method
        attn_weights = torch.softmax(attn_w_premask, dim=1)
        return torch.bmm(attn_weights.unsqueeze(1).type_as(enc_out), enc_out)


class Batch:
    def __init__(self, src: torch.Tensor, tgt: torch.Tensor) -> None:
        self.src = src
        self.tgt = tgt
        mask_src = 1 - (src == 0)  # expect: MC512 init
        mask_tgt = ~(tgt == 0)
        self.mask_src = mask_src
        self.mask_tgt = mask_tgt


def global_attention(align: torch.Tensor, memory_lengths: torch.Tensor) -> torch.Tensor:
    max_len = align.size(-1)
    mask = torch.arange(max_len, device=align.device)[None, :] < memory_lengths[:, None]
    mask = mask.unsqueeze(1)
    align.masked_fill_(1 - mask, -float("inf"))  # expect: MC512 function
    return torch.softmax(align, -1)


def ds_softmax_input(attn_scores: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
    input_mask = input_mask.bool()
    return attn_scores.masked_fill(1 - input_mask, torch.finfo(attn_scores.dtype).min)  # expect: MC512 cast
