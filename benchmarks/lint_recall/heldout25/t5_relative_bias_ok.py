"""A T5-style encoder-decoder with bucketed relative position bias (no absolute positions).

Follows the Hugging Face T5 modeling file: RMS layer norm with a float32 variance, unscaled
dot-product attention, a relative-position bias computed by the first layer of each stack and
reused by the others, masks folded into that bias as additive 4-D tensors (0 = attend, the
dtype's minimum = masked), tied input/output embeddings. The model is trained in float32 and
served in float16 (`model.half()`), so every masking value has to fit the dtype it lands in.

Source: NVIDIA/apex#1052 (`value cannot be converted to type at::Half without overflow:
-1e+09`), NVIDIA/apex#1105 and facebookresearch/fairseq#3575; conventions.md §2.3 and §3 item 18.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TinyT5Config:
    vocab_size: int = 64
    d_model: int = 64
    d_kv: int = 16
    num_heads: int = 4
    d_ff: int = 128
    num_layers: int = 2
    relative_attention_num_buckets: int = 16
    relative_attention_max_distance: int = 32
    layer_norm_epsilon: float = 1e-6
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    return relative_buckets + torch.where(is_small, relative_position, relative_position_if_large)


def invert_attention_mask(attention_mask, dtype):
    """Tokenizer mask (batch, kv), 1 = real -> additive (batch, 1, 1, kv): 0 / finfo(dtype).min."""
    extended = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - extended) * torch.finfo(dtype).min


def decoder_self_attention_mask(decoder_attention_mask, dtype):
    """Causal + key padding for the decoder: additive (batch, 1, tgt, tgt)."""
    tgt_len = decoder_attention_mask.shape[1]
    future = torch.triu(torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=decoder_attention_mask.device), diagonal=1)
    hide = future[None, None] | (decoder_attention_mask[:, None, None, :] == 0)
    return torch.zeros(hide.shape, dtype=dtype, device=hide.device).masked_fill(hide, torch.finfo(dtype).min)


class T5Attention(nn.Module):
    def __init__(self, config, has_relative_attention_bias=False, is_decoder=False):
        super().__init__()
        self.is_decoder = is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.n_heads, self.key_value_proj_dim = config.num_heads, config.d_kv
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        inner_dim = config.num_heads * config.d_kv
        self.q = nn.Linear(config.d_model, inner_dim, bias=False)
        self.k = nn.Linear(config.d_model, inner_dim, bias=False)
        self.v = nn.Linear(config.d_model, inner_dim, bias=False)
        self.o = nn.Linear(inner_dim, config.d_model, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.num_buckets, self.n_heads)

    def compute_bias(self, query_length, key_length, device):
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        buckets = relative_position_bucket(memory_position - context_position, not self.is_decoder, self.num_buckets, self.max_distance)
        return self.relative_attention_bias(buckets).permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None):
        bsz, q_len = hidden_states.shape[:2]
        source = hidden_states if key_value_states is None else key_value_states
        k_len = source.shape[1]

        def shape(x, n):
            return x.view(bsz, n, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        query, key, value = shape(self.q(hidden_states), q_len), shape(self.k(source), k_len), shape(self.v(source), k_len)
        scores = torch.matmul(query, key.transpose(3, 2))
        if position_bias is None:
            if self.has_relative_attention_bias:
                position_bias = self.compute_bias(q_len, k_len, scores.device).to(scores.dtype)
            else:
                position_bias = torch.zeros((1, self.n_heads, q_len, k_len), device=scores.device, dtype=scores.dtype)
            if mask is not None:
                position_bias = position_bias + mask
        scores = scores + position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = torch.matmul(attn_weights, value).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o(attn_output), position_bias


class T5Block(nn.Module):
    def __init__(self, config, has_relative_attention_bias, is_decoder):
        super().__init__()
        self.is_decoder = is_decoder
        self.self_attn = T5Attention(config, has_relative_attention_bias, is_decoder)
        self.self_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        if is_decoder:
            self.cross_attn = T5Attention(config, False, is_decoder)
            self.cross_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)
        self.wi_0 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wi_1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.ff_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)

    def forward(self, hidden, mask, position_bias, encoder_hidden=None, encoder_mask=None, encoder_position_bias=None):
        attn, position_bias = self.self_attn(self.self_norm(hidden), mask=mask, position_bias=position_bias)
        hidden = hidden + attn
        if self.is_decoder:
            attn, encoder_position_bias = self.cross_attn(self.cross_norm(hidden), mask=encoder_mask, key_value_states=encoder_hidden, position_bias=encoder_position_bias)
            hidden = hidden + attn
        normed = self.ff_norm(hidden)
        hidden = hidden + self.wo(F.gelu(self.wi_0(normed), approximate="tanh") * self.wi_1(normed))
        return hidden, position_bias, encoder_position_bias


class T5Stack(nn.Module):
    def __init__(self, config, embed_tokens, is_decoder):
        super().__init__()
        self.is_decoder = is_decoder
        self.embed_tokens = embed_tokens
        self.block = nn.ModuleList(T5Block(config, i == 0, is_decoder) for i in range(config.num_layers))
        self.final_layer_norm = T5LayerNorm(config.d_model, config.layer_norm_epsilon)

    def forward(self, input_ids, attention_mask, encoder_hidden_states=None, encoder_attention_mask=None):
        hidden = self.embed_tokens(input_ids)
        dtype = hidden.dtype
        if self.is_decoder:
            mask = decoder_self_attention_mask(attention_mask, dtype)
            encoder_mask = invert_attention_mask(encoder_attention_mask, dtype)
        else:
            mask, encoder_mask = invert_attention_mask(attention_mask, dtype), None
        position_bias = encoder_position_bias = None
        for block in self.block:
            hidden, position_bias, encoder_position_bias = block(hidden, mask, position_bias, encoder_hidden_states, encoder_mask, encoder_position_bias)
        return self.final_layer_norm(hidden)


class TinyT5ForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = T5Stack(config, self.shared, is_decoder=False)
        self.decoder = T5Stack(config, self.shared, is_decoder=True)

    def _shift_right(self, labels):
        shifted = labels.new_zeros(labels.shape)
        shifted[..., 1:] = labels[..., :-1].clone()
        shifted[..., 0] = self.config.decoder_start_token_id
        return shifted.masked_fill(shifted == -100, self.config.pad_token_id)

    def forward(self, input_ids, attention_mask, labels=None, decoder_input_ids=None, decoder_attention_mask=None):
        encoder_hidden = self.encoder(input_ids, attention_mask)
        if decoder_input_ids is None:
            decoder_input_ids = self._shift_right(labels)
        if decoder_attention_mask is None:
            decoder_attention_mask = torch.ones_like(decoder_input_ids)
            if labels is not None:
                decoder_attention_mask[:, 1:] = (labels[:, :-1] != -100).long()
        hidden = self.decoder(decoder_input_ids, decoder_attention_mask, encoder_hidden, attention_mask)
        logits = F.linear(hidden * self.config.d_model**-0.5, self.shared.weight)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return logits, loss, encoder_hidden

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_new_tokens=5):
        out = torch.full((input_ids.shape[0], 1), self.config.decoder_start_token_id, dtype=torch.long)
        for _ in range(max_new_tokens):
            logits, _, _ = self(input_ids, attention_mask, decoder_input_ids=out, decoder_attention_mask=torch.ones_like(out))
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out


def collate(sources, targets, pad_token_id=0):
    src_len = max(map(len, sources))
    tgt_len = max(map(len, targets))
    input_ids = torch.full((len(sources), src_len), pad_token_id, dtype=torch.long)
    labels = torch.full((len(targets), tgt_len), -100, dtype=torch.long)
    for i, (s, t) in enumerate(zip(sources, targets)):
        input_ids[i, : len(s)] = torch.tensor(s)
        labels[i, : len(t)] = torch.tensor(t)
    return {"input_ids": input_ids, "attention_mask": (input_ids != pad_token_id).long(), "labels": labels}


if __name__ == "__main__":
    torch.manual_seed(0)
    config = TinyT5Config()
    model = TinyT5ForConditionalGeneration(config).eval()
    batch = collate([[5, 6, 7, 1], [8, 9, 10, 11, 12, 13, 1]], [[20, 21, 1], [22, 23, 24, 25, 1]])
    with torch.no_grad():
        logits, loss, enc = model(**batch)
        one = collate([[5, 6, 7, 1]], [[20, 21, 1]])
        logits_one, _, enc_one = model(**one)
    print("float32 loss", round(loss.item(), 4))
    print("short source: encoder batched vs alone max |diff| =", (enc[0, :4] - enc_one[0]).abs().max().item())
    print("short pair: decoder logits batched vs alone max |diff| =", (logits[0, :3] - logits_one[0]).abs().max().item())
    model.half()
    try:
        with torch.no_grad():
            logits, loss, _ = model(**batch)
        print("float16 loss", round(loss.item(), 4), "logits finite:", bool(logits.isfinite().all()))
        print("float16 generate", model.generate(batch["input_ids"], batch["attention_mask"]).tolist())
    except RuntimeError as err:
        print("float16 forward failed:", err)
