"""fairseq-style transformer LM decoder (T x B x C) with incremental decoding, trained with --fp16.

The self-attention follows fairseq's MultiheadAttention: `incremental_state` keeps prev_key /
prev_value, the future mask comes from `utils.fill_with_neg_inf`, and `key_padding_mask` is True at
padding. Correct twin. Twin: the padding fill uses float("-inf"), as fairseq does (fp16-safe).

Source: facebookresearch/fairseq#3575 (-1e8 fill on half attention weights: "value cannot be
converted to type at::Half without overflow"), NVIDIA/apex#1052, conventions.md §3 item 18, §2.3.
"""
import argparse
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def fill_with_neg_inf(t):
    """FP16-compatible function that fills a tensor with -inf."""
    return t.float().fill_(float("-inf")).type_as(t)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = dropout
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Tensor]] = None, attn_mask: Optional[Tensor] = None):
        tgt_len, bsz, embed_dim = query.size()
        q = self.q_proj(query) * self.scaling
        k, v = self.k_proj(query), self.v_proj(query)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        if incremental_state is not None:
            if "prev_key" in incremental_state:
                k = torch.cat([incremental_state["prev_key"], k], dim=1)
                v = torch.cat([incremental_state["prev_value"], v], dim=1)
            incremental_state["prev_key"], incremental_state["prev_value"] = k, v
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if attn_mask is not None:
            attn_weights += attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights_float = F.softmax(attn_weights, dim=-1, dtype=torch.float32)
        attn_probs = F.dropout(attn_weights_float.type_as(attn_weights), p=self.dropout, training=self.training)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.self_attn = MultiheadAttention(args.decoder_embed_dim, args.decoder_attention_heads, args.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(args.decoder_embed_dim)
        self.fc1 = nn.Linear(args.decoder_embed_dim, args.decoder_ffn_embed_dim)
        self.fc2 = nn.Linear(args.decoder_ffn_embed_dim, args.decoder_embed_dim)
        self.final_layer_norm = nn.LayerNorm(args.decoder_embed_dim)

    def forward(self, x, incremental_state=None, self_attn_mask=None, self_attn_padding_mask=None):
        residual = x
        x = self.self_attn(self.self_attn_layer_norm(x), key_padding_mask=self_attn_padding_mask,
                           incremental_state=incremental_state, attn_mask=self_attn_mask)
        x = residual + x
        return x + self.fc2(F.relu(self.fc1(self.final_layer_norm(x))))


class TransformerDecoder(nn.Module):
    def __init__(self, args, vocab_size, padding_idx=1):
        super().__init__()
        self.padding_idx = padding_idx
        self.embed_tokens = nn.Embedding(vocab_size, args.decoder_embed_dim, padding_idx=padding_idx)
        self.embed_positions = nn.Embedding(args.max_target_positions, args.decoder_embed_dim)
        self.layers = nn.ModuleList([TransformerDecoderLayer(args) for _ in range(args.decoder_layers)])
        self.layer_norm = nn.LayerNorm(args.decoder_embed_dim)
        self._future_mask = torch.empty(0)

    def buffered_future_mask(self, tensor):
        dim = tensor.size(0)
        if self._future_mask.size(0) == 0 or self._future_mask.size(0) < dim:
            self._future_mask = torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 1)
        self._future_mask = self._future_mask.to(tensor)
        return self._future_mask[:dim, :dim]

    def forward(self, prev_output_tokens, incremental_state: Optional[List[Dict[str, Tensor]]] = None):
        positions = torch.arange(prev_output_tokens.size(1), device=prev_output_tokens.device)
        if incremental_state is not None:
            prev_output_tokens, positions = prev_output_tokens[:, -1:], positions[-1:]
        x = self.embed_tokens(prev_output_tokens) + self.embed_positions(positions)[None]
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        self_attn_padding_mask = None
        if incremental_state is None and prev_output_tokens.eq(self.padding_idx).any():
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)
        self_attn_mask = self.buffered_future_mask(x) if incremental_state is None else None
        for idx, layer in enumerate(self.layers):
            state = incremental_state[idx] if incremental_state is not None else None
            x = layer(x, state, self_attn_mask=self_attn_mask, self_attn_padding_mask=self_attn_padding_mask)
        x = self.layer_norm(x).transpose(0, 1)
        return F.linear(x, self.embed_tokens.weight)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true", help="use FP16 (model.half())")
    args = parser.parse_args()
    args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.decoder_attention_heads = 32, 64, 4
    args.decoder_layers, args.attention_dropout, args.max_target_positions = 2, 0.0, 64
    torch.manual_seed(0)
    model = TransformerDecoder(args, vocab_size=50).eval()
    if args.fp16:
        model = model.half()
    tokens = torch.tensor([[2, 7, 9, 4, 11, 1, 1], [2, 5, 8, 6, 3, 12, 13]])  # right padded (pad = 1)
    with torch.no_grad():
        full = model(tokens)
        state = [{} for _ in model.layers]
        steps = torch.cat([model(tokens[1:, : t + 1], state) for t in range(tokens.size(1))], dim=1)
    print("incremental == full:", torch.allclose(steps[0], full[1], atol=1e-4))
    print("dtype:", next(model.parameters()).dtype, "logits finite:", bool(torch.isfinite(full).all()))
