"""Held-out 7: a fairseq-style incremental MultiheadAttention layer and a tiny encoder-decoder
(T x B x C layout, `buffered_future_mask`, `fill_with_neg_inf` utility, `padding_idx`).

Source: facebookresearch/fairseq#3575 (masked_fill with -1e8 under fp16, here written
`float("-1e8")`), the seed guide's `generate_causal_mask` (`torch.triu(... -inf ..., diagonal)`,
here built by a `fill_with_neg_inf` helper with offset 0), nlpyang/BertSum#73 (`1 - mask` on a bool
mask, here from `tokens.eq(padding_idx)`), the seed article's `return x * self.mask` (an additive
mask multiplied, here with `*=`).
Surroundings: module-level utility, method returning a cached buffer, augmented assignment,
string-spelled float literal, positional triu offset.
"""

import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def fill_with_neg_inf(t: Tensor) -> Tensor:
    """FP16-compatible function that fills a tensor with -inf."""
    return t.float().fill_(float("-inf")).type_as(t)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, self_attention: bool = True):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = dropout
        self.self_attention = self_attention
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query: Tensor, key_padding_mask: Optional[Tensor] = None,
                attn_mask: Optional[Tensor] = None) -> Tensor:
        tgt_len, bsz, embed_dim = query.size()
        q, k, v = self.in_proj(query).chunk(3, dim=-1)
        q = (q * self.scaling).contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if attn_mask is not None:
            attn_weights += attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(  # expect: MC501 constant
                key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-1e8")  # also: MC501
            )
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_probs = F.dropout(F.softmax(attn_weights, dim=-1), p=self.dropout, training=self.training)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, embed_dim: int, heads: int):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads)
        self.norm = nn.LayerNorm(embed_dim)
        self._future_mask = torch.empty(0)

    def buffered_future_mask(self, tensor: Tensor) -> Tensor:
        dim = tensor.size(0)
        if self._future_mask.size(0) < dim:
            self._future_mask = torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 0)  # expect: MC503 closure
        self._future_mask = self._future_mask.to(tensor)
        return self._future_mask[:dim, :dim]

    def forward(self, x: Tensor, self_attn_padding_mask: Optional[Tensor] = None) -> Tensor:
        residual = x
        x = self.self_attn(x, key_padding_mask=self_attn_padding_mask, attn_mask=self.buffered_future_mask(x))
        return self.norm(residual + x)


class GatedDecoderLayer(TransformerDecoderLayer):
    """Variant that re-weights the scores with the future mask before attention."""

    def score(self, x: Tensor) -> Tensor:
        scores = torch.einsum("tbc,sbc->bts", x, x) / math.sqrt(x.size(-1))
        scores *= self.buffered_future_mask(x)  # expect: MC523 method
        return scores.softmax(-1)


class TinySeq2Seq(nn.Module):
    def __init__(self, vocab: int, embed_dim: int = 256, heads: int = 4, padding_idx: int = 1):
        super().__init__()
        self.padding_idx = padding_idx
        self.embed_tokens = nn.Embedding(vocab, embed_dim, padding_idx=padding_idx)
        self.layers = nn.ModuleList([TransformerDecoderLayer(embed_dim, heads) for _ in range(2)])
        self.output_projection = nn.Linear(embed_dim, vocab, bias=False)

    def forward(self, src_tokens: Tensor) -> Dict[str, Tensor]:
        x = self.embed_tokens(src_tokens).transpose(0, 1)
        key_padding_mask = src_tokens.eq(self.padding_idx)
        for layer in self.layers:
            x = layer(x, self_attn_padding_mask=key_padding_mask)
        non_pad = 1 - key_padding_mask  # expect: MC512 method
        lengths = non_pad.sum(dim=1)
        return {"logits": self.output_projection(x.transpose(0, 1)), "src_lengths": lengths}
