"""Held-out 16: an ESPnet-style Transformer ASR encoder: `make_pad_mask(lengths)` (True = padded
frame), `Conv2dSubsampling` returning `(x, x_mask)` with the mask sliced like the two stride-2
convolutions, scaled `PositionalEncoding`, `MultiHeadedAttention` with `forward_qkv` /
`forward_attention`, `EncoderLayer` returning `(x, mask)`, and a CTC head. The mask travels as a
bool keep-mask of shape (batch, 1, time) through the tuples returned by the subsampling and by
every layer.

Source: OpenNMT/OpenNMT-py#1524 via Eurus-Holmes/MNMT#4 (`align.masked_fill_(1 - mask, ...)` on a
bool mask: "Subtraction, the `-` operator, with a bool tensor is not supported"),
deepspeedai/DeepSpeed#3319 ("1 - input_mask need to be modified to ~input_mask"). The masks were
uint8 when `forward_attention` was written; it inverts the bool mask with `1 - mask`.
"""

import math
from typing import Tuple

import torch
from torch import nn


def make_pad_mask(lengths: torch.Tensor) -> torch.Tensor:
    """(batch, max_len) bool mask, True at the padded frames."""
    seq_range = torch.arange(int(lengths.max()), device=lengths.device)
    return seq_range[None, :] >= lengths[:, None]


class Conv2dSubsampling(nn.Module):
    def __init__(self, idim: int, odim: int, dropout_rate: float = 0.1):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)
        self.pos_enc = PositionalEncoding(odim, dropout_rate)

    def forward(self, x: torch.Tensor, x_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.pos_enc(self.out(x.transpose(1, 2).contiguous().view(b, t, c * f)))
        return x, x_mask[:, :, :-2:2][:, :, :-2:2]


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout_rate: float, max_len: int = 1000):
        super().__init__()
        self.xscale = math.sqrt(d_model)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x * self.xscale + self.pe[:, : x.size(1)])


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int, dropout_rate: float = 0.1):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward_qkv(self, query, key, value):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        return q, k, v

    def forward_attention(self, value, scores, mask):
        """mask: (batch, 1, time2) or (batch, time1, time2), True = attend."""
        n_batch = value.size(0)
        if mask is not None:
            mask = (1 - mask.unsqueeze(1)).bool()  # expect: MC512 tuple
            min_value = torch.finfo(scores.dtype).min
            scores = scores.masked_fill(mask, min_value)
            attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)
        x = torch.matmul(self.dropout(attn), value).transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)

    def forward(self, query, key, value, mask):
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class EncoderLayer(nn.Module):
    def __init__(self, size: int, n_head: int, linear_units: int, dropout_rate: float = 0.1):
        super().__init__()
        self.self_attn = MultiHeadedAttention(n_head, size, dropout_rate)
        self.feed_forward = nn.Sequential(nn.Linear(size, linear_units), nn.ReLU(), nn.Dropout(dropout_rate), nn.Linear(linear_units, size))
        self.norm1, self.norm2 = nn.LayerNorm(size, eps=1e-12), nn.LayerNorm(size, eps=1e-12)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        residual, x = x, self.norm1(x)
        x = residual + self.dropout(self.self_attn(x, x, x, mask))
        residual, x = x, self.norm2(x)
        return residual + self.dropout(self.feed_forward(x)), mask


class TransformerEncoder(nn.Module):
    def __init__(self, input_size: int = 40, output_size: int = 64, attention_heads: int = 4,
                 linear_units: int = 128, num_blocks: int = 2, vocab_size: int = 32):
        super().__init__()
        self.embed = Conv2dSubsampling(input_size, output_size)
        self.encoders = nn.ModuleList([EncoderLayer(output_size, attention_heads, linear_units) for _ in range(num_blocks)])
        self.after_norm = nn.LayerNorm(output_size, eps=1e-12)
        self.ctc_lo = nn.Linear(output_size, vocab_size)

    def forward(self, xs_pad: torch.Tensor, ilens: torch.Tensor):
        masks = (~make_pad_mask(ilens))[:, None, :]
        xs_pad, masks = self.embed(xs_pad, masks)
        for layer in self.encoders:
            xs_pad, masks = layer(xs_pad, masks)
        xs_pad = self.after_norm(xs_pad)
        olens = masks.squeeze(1).sum(1)
        return self.ctc_lo(xs_pad).log_softmax(-1), olens


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder = TransformerEncoder().eval()
    feats, ilens = torch.randn(2, 50, 40), torch.tensor([50, 30])
    feats[1, 30:] = 0.0
    noisy = feats.clone()
    noisy[1, 35:] = torch.randn(15, 40)  # frames that reach only masked outputs
    with torch.no_grad():
        try:
            log_probs, olens = encoder(feats, ilens)
            n = int(olens[1])
            print("output lengths:", olens.tolist(), "| finite:", bool(torch.isfinite(log_probs).all()))
            print("short utterance, valid outputs change with its padding:", float((log_probs[1, :n] - encoder(noisy, ilens)[0][1, :n]).abs().max()))
        except RuntimeError as err:
            print("forward:", err)
