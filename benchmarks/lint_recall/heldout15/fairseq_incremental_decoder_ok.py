"""Held-out 15 (correct twin): a fairseq-style Transformer decoder layer with incremental decoding: T x B x C
tensors, an `incremental_state` dict holding the previous keys and values, a buffered future mask
built with `fill_with_neg_inf`, and encoder-decoder attention over the `encoder_out` dict with its
`encoder_padding_mask`. Translation models are trained and served with `--fp16` (`.half()`).

Source: facebookresearch/fairseq#3575 (`masked_fill(..., -1e8)` on half-precision attention
weights: "value cannot be converted to type at::Half without overflow"), NVIDIA/apex#1052,
conventions.md §3 item 18. The key padding fill of the shared attention module is the literal
-1e8, which float16 cannot hold.
Twin: the key padding fill is `float("-inf")`, as in fairseq (no key row is all padding).
"""

from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def fill_with_neg_inf(t: Tensor) -> Tensor:
    """FP16-compatible function that fills a tensor with -inf."""
    return t.float().fill_(float("-inf")).type_as(t)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, x: Tensor, bsz: int) -> Tensor:
        return x.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor] = None,
                attn_mask: Optional[Tensor] = None, saved_state: Optional[Dict[str, Tensor]] = None) -> Tensor:
        tgt_len, bsz, _ = query.shape
        q = self._shape(self.q_proj(query) * self.scaling, bsz)
        k = self._shape(self.k_proj(key), bsz)
        v = self._shape(self.v_proj(value), bsz)
        if saved_state is not None:
            if "prev_key" in saved_state:
                k = torch.cat([saved_state["prev_key"], k], dim=1)
                v = torch.cat([saved_state["prev_value"], v], dim=1)
            saved_state["prev_key"], saved_state["prev_value"] = k, v
        src_len = k.size(1)

        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if attn_mask is not None:
            attn_weights = attn_weights + attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_probs = F.softmax(attn_weights.float(), dim=-1).type_as(attn_weights)
        attn_probs = F.dropout(attn_probs, p=self.dropout, training=self.training)
        attn = torch.bmm(attn_probs, v).transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        return self.out_proj(attn)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, embed_dim: int = 64, heads: int = 4, ffn_dim: int = 128, dropout: float = 0.1):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads, dropout)
        self.encoder_attn = MultiheadAttention(embed_dim, heads, dropout)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.encoder_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1, self.fc2 = nn.Linear(embed_dim, ffn_dim), nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout = dropout
        self._future_mask = torch.empty(0)

    def buffered_future_mask(self, tensor: Tensor) -> Tensor:
        dim = tensor.size(0)
        if self._future_mask.size(0) < dim or self._future_mask.device != tensor.device:
            self._future_mask = torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 1)
        self._future_mask = self._future_mask.to(tensor)
        return self._future_mask[:dim, :dim]

    def forward(self, x: Tensor, encoder_out: Dict[str, Tensor],
                incremental_state: Optional[Dict[str, Dict[str, Tensor]]] = None) -> Tensor:
        self_attn_mask = self.buffered_future_mask(x) if incremental_state is None else None
        saved_state = None
        if incremental_state is not None:
            saved_state = incremental_state.setdefault(f"self_attn_{id(self)}", {})
        residual = x
        x = self.self_attn_layer_norm(x)
        x = self.self_attn(x, x, x, attn_mask=self_attn_mask, saved_state=saved_state)
        x = residual + F.dropout(x, p=self.dropout, training=self.training)
        residual = x
        x = self.encoder_attn_layer_norm(x)
        enc = encoder_out["encoder_out"]
        x = self.encoder_attn(x, enc, enc, key_padding_mask=encoder_out["encoder_padding_mask"])
        x = residual + F.dropout(x, p=self.dropout, training=self.training)
        residual = x
        x = self.fc2(F.relu(self.fc1(self.final_layer_norm(x))))
        return residual + F.dropout(x, p=self.dropout, training=self.training)


def make_encoder_out(src_tokens: Tensor, encoder_states: Tensor, padding_idx: int = 1) -> Dict[str, Tensor]:
    """encoder_states: T x B x C; the padding mask is B x T, True at padding (fairseq convention)."""
    return {"encoder_out": encoder_states, "encoder_padding_mask": src_tokens.eq(padding_idx)}
