"""Held-out: a tutorial-style Transformer seq2seq (encoder, decoder, mask helpers in the model).

Source: bentrevett/pytorch-seq2seq#96 and hyunwoongko/transformer PR #40 (padding mask on the
query axis), pytorch/pytorch#29546 (look-ahead mask the wrong way round), huggingface/transformers#205
(keep mask used as the fill condition).
"""

import math

import torch
import torch.nn as nn


class MultiHeadAttentionLayer(nn.Module):
    def __init__(self, hid_dim: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.hid_dim = hid_dim
        self.n_heads = n_heads
        self.head_dim = hid_dim // n_heads
        self.fc_q = nn.Linear(hid_dim, hid_dim)
        self.fc_k = nn.Linear(hid_dim, hid_dim)
        self.fc_v = nn.Linear(hid_dim, hid_dim)
        self.fc_o = nn.Linear(hid_dim, hid_dim)
        self.dropout = nn.Dropout(dropout)
        self.scale = math.sqrt(self.head_dim)

    def forward(self, query, key, value, mask=None):
        batch_size = query.shape[0]
        Q = self.fc_q(query).view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
        K = self.fc_k(key).view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
        V = self.fc_v(value).view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
        energy = torch.matmul(Q, K.permute(0, 1, 3, 2)) / self.scale
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e10)
        attention = torch.softmax(energy, dim=-1)
        x = torch.matmul(self.dropout(attention), V)
        x = x.permute(0, 2, 1, 3).contiguous().view(batch_size, -1, self.hid_dim)
        return self.fc_o(x), attention


class Seq2Seq(nn.Module):
    def __init__(self, encoder: nn.Module, decoder: nn.Module, src_pad_idx: int, trg_pad_idx: int,
                 device: torch.device) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_pad_idx = src_pad_idx
        self.trg_pad_idx = trg_pad_idx
        self.device = device

    def make_src_mask(self, src):
        src_mask = (src != self.src_pad_idx)[:, None, :, None]  # expect: MC514 indexing
        return src_mask

    def make_trg_mask(self, trg):
        trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(2)
        trg_len = trg.shape[1]
        trg_sub_mask = torch.triu(torch.ones((trg_len, trg_len), device=self.device)).bool()  # expect: MC521 keep-mask
        trg_mask = trg_pad_mask & trg_sub_mask  # also: MC521
        return trg_mask

    def forward(self, src, trg):
        src_mask = self.make_src_mask(src)
        trg_mask = self.make_trg_mask(trg)
        enc_src = self.encoder(src, src_mask)
        output, attention = self.decoder(trg, enc_src, trg_mask, src_mask)
        return output, attention


class PointerHead(nn.Module):
    """Copy attention over the source tokens, masked with the tokenizer's attention_mask."""

    def __init__(self, hid_dim: int) -> None:
        super().__init__()
        self.w = nn.Linear(hid_dim, hid_dim)

    def forward(self, dec: torch.Tensor, enc: torch.Tensor, attention_mask: torch.Tensor):
        scores = torch.bmm(self.w(dec), enc.transpose(1, 2))
        src_keep = attention_mask.unsqueeze(1).bool()
        scores = scores.masked_fill(src_keep, float("-inf"))  # expect: MC519 attribute
        return scores.log_softmax(-1)
