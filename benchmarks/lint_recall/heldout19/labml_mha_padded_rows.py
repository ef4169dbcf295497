"""Multi-head attention in the style of labml.ai's annotated implementations, with padding.

labml's `PrepareForMultiHeadAttention` / `MultiHeadAttention` (sequence-first `[seq, batch, d]`,
einsum scores `ijbh`, `prepare_mask` for `[seq_len_q, seq_len_k, batch]` masks, softmax over the
key axis `dim=1`), used by a learner on padded batches. The learner's padding mask also blanks the
padded query rows, so those rows are filled with the finite `finfo.min` (uniform, no NaN) and the
attention is zeroed afterwards with `attn.masked_fill_(...)`: an in-place write into the output
of the softmax, which its backward needs. The forward runs; `loss.backward()` raises.

Source: seed masked_fill_inplace.txt (注意 / 梯度计算风险: `masked_fill_` on a tensor that takes
part in autograd breaks the backward pass; use `masked_fill`).
"""
import math
from typing import List, Optional

import torch
from torch import nn


class PrepareForMultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, d_k: int, bias: bool):
        super().__init__()
        self.linear = nn.Linear(d_model, heads * d_k, bias=bias)
        self.heads = heads
        self.d_k = d_k

    def forward(self, x: torch.Tensor):
        head_shape = x.shape[:-1]
        x = self.linear(x)
        return x.view(*head_shape, self.heads, self.d_k)


class MultiHeadAttention(nn.Module):
    def __init__(self, heads: int, d_model: int, dropout_prob: float = 0.1, bias: bool = True):
        super().__init__()
        self.d_k = d_model // heads
        self.heads = heads
        self.query = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=bias)
        self.key = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=bias)
        self.value = PrepareForMultiHeadAttention(d_model, heads, self.d_k, bias=True)
        self.softmax = nn.Softmax(dim=1)
        self.output = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout_prob)
        self.scale = 1 / math.sqrt(self.d_k)
        self.attn = None

    def get_scores(self, query: torch.Tensor, key: torch.Tensor):
        return torch.einsum('ibhd,jbhd->ijbh', query, key)

    def prepare_mask(self, mask: torch.Tensor, query_shape: List[int], key_shape: List[int]):
        assert mask.shape[0] == 1 or mask.shape[0] == query_shape[0]
        assert mask.shape[1] == key_shape[0]
        assert mask.shape[2] == 1 or mask.shape[2] == query_shape[1]
        return mask.unsqueeze(-1)  # same mask for all heads: [seq_len_q, seq_len_k, batch, 1]

    def forward(self, *, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: Optional[torch.Tensor] = None):
        seq_len, batch_size, _ = query.shape
        if mask is not None:
            mask = self.prepare_mask(mask, query.shape, key.shape)
        query = self.query(query)
        key = self.key(key)
        value = self.value(value)
        scores = self.get_scores(query, key)
        scores *= self.scale
        if mask is not None:
            scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        attn = self.softmax(scores)
        if mask is not None:
            attn.masked_fill_(mask == 0, 0.0)  # expect: MC505 labml
        attn = self.dropout(attn)
        x = torch.einsum("ijbh,jbhd->ibhd", attn, value)
        self.attn = attn.detach()
        x = x.reshape(seq_len, batch_size, -1)
        return self.output(x)


def make_pad_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """`[seq_len_q, seq_len_k, batch]`, True where both the query and the key are real tokens."""
    real = torch.arange(seq_len)[:, None] < lengths[None, :]  # [seq_len, batch]
    return real[:, None, :] & real[None, :, :]


class TransformerLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout_prob: float = 0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(heads, d_model, dropout_prob)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm_self_attn = nn.LayerNorm([d_model])
        self.norm_ff = nn.LayerNorm([d_model])
        self.dropout = nn.Dropout(dropout_prob)

    def forward(self, *, x: torch.Tensor, mask: torch.Tensor):
        z = self.norm_self_attn(x)
        x = x + self.dropout(self.self_attn(query=z, key=z, value=z, mask=mask))
        z = self.norm_ff(x)
        return x + self.dropout(self.feed_forward(z))


if __name__ == "__main__":
    torch.manual_seed(0)
    seq_len, batch_size, d_model = 6, 3, 32
    lengths = torch.tensor([6, 4, 2])
    layer = TransformerLayer(d_model, heads=4, d_ff=64, dropout_prob=0.0)
    x = torch.randn(seq_len, batch_size, d_model)
    mask = make_pad_mask(lengths, seq_len)
    out = layer(x=x, mask=mask)
    alone = layer(x=x[:2, 2:3], mask=make_pad_mask(lengths[2:3], 2))
    print("short sequence padded vs alone:", (out[:2, 2] - alone[:, 0]).abs().max().item())
    real = torch.arange(seq_len)[:, None] < lengths[None, :]
    loss = out[real].pow(2).mean()  # real tokens only
    loss.backward()
    print("grad norm:", sum(p.grad.norm() ** 2 for p in layer.parameters()).sqrt().item())
