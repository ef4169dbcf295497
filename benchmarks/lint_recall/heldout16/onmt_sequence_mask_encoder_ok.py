"""Held-out 16 (correct twin): an OpenNMT-py-style Transformer encoder (pre-norm layers, sinusoidal
`PositionalEncoding`, `MultiHeadedAttention(key, value, query, mask=...)` with the
True = padding convention, and the `sequence_mask(lengths)` helper of onmt/utils/misc.py, which
returns True for the real tokens). The helper is used twice: for the attention mask and for the
masked mean of the bridge that initialises the decoder state.

Source: lucidrains/halonet-pytorch#4 and its fix PR #6 (a mask that is True on the valid positions
handed to `masked_fill`, "directing all attention to the padding zeros"), seed guide Q1 (a mask
with no effect: True given where False was needed). The encoder passes `sequence_mask(src_len)` (True = real token) where
`MultiHeadedAttention` fills the True positions, without the `~` that OpenNMT-py writes.
Twin: `mask = ~sequence_mask(src_len, src.size(1)).unsqueeze(1)`, as OpenNMT-py writes it (True = padding).
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn


def sequence_mask(lengths: torch.Tensor, max_len: Optional[int] = None) -> torch.Tensor:
    """Creates a boolean mask from sequence lengths: True for the positions inside each length."""
    batch_size = lengths.numel()
    max_len = max_len or int(lengths.max())
    return torch.arange(0, max_len, device=lengths.device).type_as(lengths).repeat(batch_size, 1).lt(
        lengths.unsqueeze(1))


class MultiHeadedAttention(nn.Module):
    def __init__(self, head_count: int, model_dim: int, dropout: float = 0.1):
        super().__init__()
        self.dim_per_head = model_dim // head_count
        self.head_count = head_count
        self.linear_keys = nn.Linear(model_dim, model_dim)
        self.linear_values = nn.Linear(model_dim, model_dim)
        self.linear_query = nn.Linear(model_dim, model_dim)
        self.softmax = nn.Softmax(dim=-1)
        self.dropout = nn.Dropout(dropout)
        self.final_linear = nn.Linear(model_dim, model_dim)

    def forward(self, key, value, query, mask: Optional[torch.Tensor] = None):
        """mask: (batch, 1 or query_len, key_len), True where attention is NOT allowed."""
        b, h, d = key.size(0), self.head_count, self.dim_per_head

        def shape(x):
            return x.view(b, -1, h, d).transpose(1, 2)

        key, value = shape(self.linear_keys(key)), shape(self.linear_values(value))
        query = shape(self.linear_query(query)) / math.sqrt(d)
        scores = torch.matmul(query, key.transpose(2, 3)).float()
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1), float("-inf"))
        attn = self.softmax(scores).to(query.dtype)
        context = torch.matmul(self.dropout(attn), value).transpose(1, 2).contiguous().view(b, -1, h * d)
        return self.final_linear(context), attn


class PositionalEncoding(nn.Module):
    def __init__(self, dim: int, max_len: int = 512, dropout: float = 0.1):
        super().__init__()
        pe = torch.zeros(max_len, dim)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position.float() * div_term), torch.cos(position.float() * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(dropout)
        self.dim = dim

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        return self.dropout(emb * math.sqrt(self.dim) + self.pe[:, : emb.size(1)])


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.self_attn = MultiHeadedAttention(heads, d_model, dropout)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.ffn_layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, layer_in: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        norm = self.layer_norm(layer_in)
        context, _ = self.self_attn(norm, norm, norm, mask=mask)
        out = self.dropout(context) + layer_in
        return out + self.dropout(self.feed_forward(self.ffn_layer_norm(out)))


class TransformerEncoder(nn.Module):
    def __init__(self, vocab_size: int, d_model: int = 64, heads: int = 4, d_ff: int = 128,
                 num_layers: int = 2, padding_idx: int = 1, dropout: float = 0.1):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.pe = PositionalEncoding(d_model, dropout=dropout)
        self.transformer = nn.ModuleList([TransformerEncoderLayer(d_model, heads, d_ff, dropout) for _ in range(num_layers)])
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.bridge = nn.Linear(d_model, d_model)

    def forward(self, src: torch.Tensor, src_len: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        enc_out = self.pe(self.embeddings(src))
        mask = ~sequence_mask(src_len, src.size(1)).unsqueeze(1)
        for layer in self.transformer:
            enc_out = layer(enc_out, mask)
        enc_out = self.layer_norm(enc_out)
        keep = sequence_mask(src_len, src.size(1)).unsqueeze(-1).to(enc_out.dtype)
        enc_final = torch.tanh(self.bridge((enc_out * keep).sum(1) / keep.sum(1)))
        return enc_out, enc_final, src_len


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder = TransformerEncoder(vocab_size=40).eval()
    src = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 1, 1]])
    src_len = torch.tensor([6, 4])
    with torch.no_grad():
        out, final, _ = encoder(src, src_len)
        alone, final_alone, _ = encoder(src[1:, :4], src_len[1:])
    print("unpadded sentence finite:", bool(torch.isfinite(out[0]).all()))
    print("padded sentence finite:", bool(torch.isfinite(out[1]).all()))
    print("padded sentence vs alone (max abs diff):", float((out[1, :4] - alone[0]).abs().max()))
    print("bridge state padded vs alone:", float((final[1] - final_alone[0]).abs().max()))
