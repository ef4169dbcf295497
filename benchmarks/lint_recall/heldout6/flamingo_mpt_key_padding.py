"""Held-out 6: a Flamingo-style vision-language model on an MPT language backbone, whose attention
inverts the key padding mask with `~` and receives the tokenizer's int64 attention mask.

Source: mlfoundations/open_flamingo PR #214 ("fix atten from Long to Bool": with `mpt-1b-redpajama-200b`
as the language model the attention mask reaches MPT's attention as a LongTensor; MPT fills with
`~key_padding_mask`, which on int64 gives -2/-1 and `masked_fill` rejects; the fix converts the mask
to bool before the language model is called).
Surroundings: an MPT-style functional attention taking `key_padding_mask` by keyword, a module that
forwards its `attention_mask` argument to it, and the VLM wrapper passing the tokenizer's mask
through unchanged.
"""

import math
from typing import Optional

import torch
import torch.nn as nn
from einops import rearrange


def scaled_multihead_dot_product_attention(query, key, value, n_heads, softmax_scale=None,
                                           attn_bias=None, key_padding_mask=None, is_causal=False,
                                           dropout_p=0.0, training=False):
    q = rearrange(query, "b s (h d) -> b h s d", h=n_heads)
    k = rearrange(key, "b s (h d) -> b h d s", h=n_heads)
    v = rearrange(value, "b s (h d) -> b h s d", h=n_heads)
    min_val = torch.finfo(q.dtype).min
    b, _, s_q, d = q.shape
    s_k = k.size(-1)
    if softmax_scale is None:
        softmax_scale = 1 / math.sqrt(d)
    attn_weight = q.matmul(k) * softmax_scale
    if attn_bias is not None:
        attn_weight = attn_weight + attn_bias
    if key_padding_mask is not None:
        attn_weight = attn_weight.masked_fill(~key_padding_mask.view((b, 1, 1, s_k)), min_val)  # expect: MC518 forwarded
    if is_causal and (not q.size(2) == 1):
        s = max(s_q, s_k)
        causal_mask = attn_weight.new_ones(s, s, dtype=torch.float16)
        causal_mask = causal_mask.tril()
        causal_mask = causal_mask.to(torch.bool)
        causal_mask = ~causal_mask
        causal_mask = causal_mask[-s_q:, -s_k:]
        attn_weight = attn_weight.masked_fill(causal_mask.view(1, 1, s_q, s_k), min_val)
    attn_weight = torch.softmax(attn_weight, dim=-1)
    if dropout_p:
        attn_weight = torch.nn.functional.dropout(attn_weight, p=dropout_p, training=training)
    out = attn_weight.matmul(v)
    return rearrange(out, "b h s d -> b s (h d)")


class MultiheadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.Wqkv = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, attn_bias: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None, is_causal: bool = True) -> torch.Tensor:
        query, key, value = self.Wqkv(x).chunk(3, dim=2)
        context = scaled_multihead_dot_product_attention(
            query, key, value, self.n_heads, attn_bias=attn_bias,
            key_padding_mask=attention_mask, is_causal=is_causal)
        return self.out_proj(context)


class Flamingo(nn.Module):
    def __init__(self, vision_encoder: nn.Module, lang_encoder: nn.Module, tokenizer) -> None:
        super().__init__()
        self.vision_encoder = vision_encoder
        self.lang_encoder = lang_encoder
        self.tokenizer = tokenizer

    def forward(self, vision_x: torch.Tensor, texts: list) -> torch.Tensor:
        lang_x = self.tokenizer(texts, return_tensors="pt", padding="longest")
        self.lang_encoder.condition_vis_x(self.vision_encoder(vision_x))
        return self.lang_encoder(input_ids=lang_x["input_ids"], attention_mask=lang_x["attention_mask"])
