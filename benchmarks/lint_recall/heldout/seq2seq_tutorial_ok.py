"""Held-out twin: the tutorial seq2seq with the masks as upstream fixed them.

Source: bentrevett/pytorch-seq2seq (6 - Attention is All You Need) after #96, hyunwoongko/transformer
PR #40.
"""

import torch
import torch.nn as nn


class Seq2Seq(nn.Module):
    def __init__(self, src_pad_idx: int, trg_pad_idx: int, device: torch.device) -> None:
        super().__init__()
        self.src_pad_idx = src_pad_idx
        self.trg_pad_idx = trg_pad_idx
        self.device = device

    def make_src_mask(self, src):
        return (src != self.src_pad_idx).unsqueeze(1).unsqueeze(2)

    def make_trg_mask(self, trg):
        trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(2)
        trg_len = trg.shape[1]
        trg_sub_mask = torch.tril(torch.ones((trg_len, trg_len), device=self.device)).bool()
        return trg_pad_mask & trg_sub_mask


class PointerHead(nn.Module):
    def __init__(self, hid_dim: int) -> None:
        super().__init__()
        self.w = nn.Linear(hid_dim, hid_dim)

    def forward(self, dec: torch.Tensor, enc: torch.Tensor, attention_mask: torch.Tensor):
        scores = torch.bmm(self.w(dec), enc.transpose(1, 2))
        src_pad = attention_mask.unsqueeze(1) == 0
        scores = scores.masked_fill(src_pad, float("-inf"))
        return scores.log_softmax(-1)


def token_loss_mask(trg: torch.Tensor, pad: int) -> torch.Tensor:
    return (trg != pad).unsqueeze(-1).float()
