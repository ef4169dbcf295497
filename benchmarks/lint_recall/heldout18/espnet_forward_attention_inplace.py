"""ESPnet-style ASR encoder: `make_pad_mask`, linear input layer with scaled PositionalEncoding,
MultiHeadedAttention with `forward_qkv` / `forward_attention`, pre-norm EncoderLayer, CTC loss.

`forward_attention` keeps ESPnet's conventions (`mask.unsqueeze(1).eq(0)`, fill with
`torch.finfo(scores.dtype).min`, zero the masked weights after the softmax), but zeroes them with
the in-place `masked_fill_` on the softmax output, which autograd needs for the backward pass.

Source: seed masked_fill_inplace.txt (注意 / 梯度计算风险: an in-place masked_fill_ on a tensor that
takes part in gradient computation breaks the backward pass; use the out-of-place masked_fill).
"""
import math

import torch
from torch import nn


def make_pad_mask(lengths: torch.Tensor, maxlen: int = None) -> torch.Tensor:
    """Make mask tensor containing indices of padded part (True = pad)."""
    maxlen = int(lengths.max()) if maxlen is None else maxlen
    seq_range = torch.arange(0, maxlen, dtype=torch.int64, device=lengths.device)
    return seq_range.unsqueeze(0).expand(lengths.size(0), maxlen) >= lengths.unsqueeze(-1)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout_rate: float, max_len: int = 500):
        super().__init__()
        self.xscale, self.dropout = math.sqrt(d_model), nn.Dropout(p=dropout_rate)
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x * self.xscale + self.pe[:, : x.size(1)])


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int, dropout_rate: float):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q, self.linear_k = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.linear_v, self.linear_out = nn.Linear(n_feat, n_feat), nn.Linear(n_feat, n_feat)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward_qkv(self, query, key, value):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)  # (batch, head, time1, d_k)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)  # (batch, head, time2, d_k)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)  # (batch, head, time2, d_k)
        return q, k, v

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        if mask is not None:
            mask = mask.unsqueeze(1).eq(0)  # (batch, 1, *, time2)
            min_value = torch.finfo(scores.dtype).min
            scores = scores.masked_fill(mask, min_value)
            self.attn = torch.softmax(scores, dim=-1).masked_fill_(mask, 0.0)  # expect: MC505 espnet
        else:
            self.attn = torch.softmax(scores, dim=-1)  # (batch, head, time1, time2)
        x = torch.matmul(self.dropout(self.attn), value)  # (batch, head, time1, d_k)
        x = x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)  # (batch, time1, d_model)
        return self.linear_out(x)

    def forward(self, query, key, value, mask):
        q, k, v = self.forward_qkv(query, key, value)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class EncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout_rate):
        super().__init__()
        self.self_attn, self.feed_forward = self_attn, feed_forward
        self.norm1, self.norm2 = nn.LayerNorm(size, eps=1e-12), nn.LayerNorm(size, eps=1e-12)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x, mask):
        residual, x = x, self.norm1(x)
        x = residual + self.dropout(self.self_attn(x, x, x, mask))
        residual, x = x, self.norm2(x)
        return residual + self.dropout(self.feed_forward(x)), mask


class TransformerEncoder(nn.Module):
    def __init__(self, input_size=20, output_size=32, attention_heads=4, num_blocks=2, vocab_size=12, dropout_rate=0.1):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(input_size, output_size), nn.LayerNorm(output_size), nn.ReLU(),
                                   PositionalEncoding(output_size, dropout_rate))
        self.encoders = nn.ModuleList([EncoderLayer(output_size, MultiHeadedAttention(attention_heads, output_size, dropout_rate),
                                                    nn.Sequential(nn.Linear(output_size, 64), nn.ReLU(), nn.Linear(64, output_size)),
                                                    dropout_rate) for _ in range(num_blocks)])
        self.after_norm = nn.LayerNorm(output_size, eps=1e-12)
        self.ctc_lo = nn.Linear(output_size, vocab_size)

    def forward(self, xs_pad: torch.Tensor, ilens: torch.Tensor):
        masks = (~make_pad_mask(ilens)[:, None, :]).to(xs_pad.device)  # (batch, 1, time), True = valid
        xs_pad = self.embed(xs_pad)
        for layer in self.encoders:
            xs_pad, masks = layer(xs_pad, masks)
        return self.ctc_lo(self.after_norm(xs_pad)), masks.squeeze(1).sum(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TransformerEncoder()
    xs_pad, ilens = torch.randn(2, 30, 20), torch.tensor([30, 22])
    ys_pad, ylens = torch.tensor([[3, 5, 7, 2], [4, 4, 9, 0]]), torch.tensor([4, 3])
    logits, olens = model(xs_pad, ilens)
    loss = nn.functional.ctc_loss(logits.log_softmax(-1).transpose(0, 1), ys_pad, olens, ylens, zero_infinity=True)
    loss.backward()
    print("ctc loss:", loss.item(), "grad norm:", torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0).item())
