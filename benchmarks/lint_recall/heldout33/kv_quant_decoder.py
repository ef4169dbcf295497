"""Batched generation with a quantized key/value cache, served in float16.

Follows the design of transformers' ``QuantizedCache``: keys and values are quantized with
asymmetric min/max quantization in groups of ``q_group_size`` channels, the most recent
``residual_length`` tokens stay in the model's precision, and the cache re-quantizes everything
once the residual buffer is full. Prompts are left-padded; ``generate`` keeps the 2-D
``attention_mask`` growing with the cache and derives position ids from it. The serving copy is
``model.half()`` with the dequantized cache in ``torch.float16``.

Source: NVIDIA/apex#1052 and #1105, facebookresearch/fairseq#3575, conventions.md §2.3 and §3 item 18, tools.md §0 P5
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class QuantizedCacheConfig:
    nbits: int = 4
    q_group_size: int = 8
    residual_length: int = 4


@dataclass
class DecoderConfig:
    vocab_size: int = 40
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_positions: int = 64
    pad_token_id: int = 0


def quantize(t: torch.Tensor, nbits: int, group: int):
    shape = t.shape
    grouped = t.reshape(*shape[:-1], shape[-1] // group, group)
    lo = grouped.amin(dim=-1, keepdim=True)
    hi = grouped.amax(dim=-1, keepdim=True)
    scale = ((hi - lo) / (2 ** nbits - 1)).clamp(min=1e-6)
    q = torch.round((grouped - lo) / scale).to(torch.uint8)
    return q, scale, lo, shape


def dequantize(packed, dtype: torch.dtype) -> torch.Tensor:
    q, scale, lo, shape = packed
    return (q.to(scale.dtype) * scale + lo).reshape(shape).to(dtype)


class QuantizedCache:
    def __init__(self, config: QuantizedCacheConfig, num_layers: int, dtype: torch.dtype):
        self.config, self.dtype = config, dtype
        self._quantized_key_cache = [None] * num_layers
        self._quantized_value_cache = [None] * num_layers
        self.key_cache = [None] * num_layers
        self.value_cache = [None] * num_layers

    def _dequantized(self, layer_idx: int):
        if self._quantized_key_cache[layer_idx] is None:
            return None, None
        return (dequantize(self._quantized_key_cache[layer_idx], self.dtype),
                dequantize(self._quantized_value_cache[layer_idx], self.dtype))

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int):
        cfg = self.config
        if self.key_cache[layer_idx] is None:
            self.key_cache[layer_idx], self.value_cache[layer_idx] = key_states, value_states
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=2)
        deq_k, deq_v = self._dequantized(layer_idx)
        keys = self.key_cache[layer_idx] if deq_k is None else torch.cat([deq_k, self.key_cache[layer_idx]], dim=2)
        values = self.value_cache[layer_idx] if deq_v is None else torch.cat([deq_v, self.value_cache[layer_idx]], dim=2)
        if self.key_cache[layer_idx].shape[2] > cfg.residual_length:
            self._quantized_key_cache[layer_idx] = quantize(keys, cfg.nbits, cfg.q_group_size)
            self._quantized_value_cache[layer_idx] = quantize(values, cfg.nbits, cfg.q_group_size)
            empty = keys[:, :, :0]
            self.key_cache[layer_idx], self.value_cache[layer_idx] = empty, values[:, :, :0]
        return keys, values


class DenseCache(QuantizedCache):
    def update(self, key_states, value_states, layer_idx):
        if self.key_cache[layer_idx] is not None:
            key_states = torch.cat([self.key_cache[layer_idx], key_states], dim=2)
            value_states = torch.cat([self.value_cache[layer_idx], value_states], dim=2)
        self.key_cache[layer_idx], self.value_cache[layer_idx] = key_states, value_states
        return key_states, value_states


class Attention(nn.Module):
    def __init__(self, cfg: DecoderConfig, layer_idx: int):
        super().__init__()
        self.layer_idx, self.num_heads = layer_idx, cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.qkv_proj = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x, attention_mask, past_key_values):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2) for t in self.qkv_proj(x).split(C, dim=-1))
        k, v = past_key_values.update(k, v, self.layer_idx)
        S = k.shape[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
        attn_keep = causal[None, None] & attention_mask[:, None, None, :].bool()
        scores = scores.masked_fill(~attn_keep, -1e9)  # expect: MC501 kvquant
        return self.o_proj((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class Decoder(nn.Module):
    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_positions = nn.Embedding(cfg.max_positions, cfg.hidden_size)
        self.attn = nn.ModuleList(Attention(cfg, i) for i in range(cfg.num_layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.LayerNorm(cfg.hidden_size), nn.Linear(cfg.hidden_size, 2 * cfg.hidden_size), nn.GELU(), nn.Linear(2 * cfg.hidden_size, cfg.hidden_size)) for _ in range(cfg.num_layers))
        self.ln = nn.ModuleList(nn.LayerNorm(cfg.hidden_size) for _ in range(cfg.num_layers))
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def forward(self, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(input_ids) + self.embed_positions(position_ids)
        for attn, mlp, ln in zip(self.attn, self.mlp, self.ln):
            x = x + attn(ln(x), attention_mask, past_key_values)
            x = x + mlp(x)
        return self.lm_head(x)

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_new_tokens: int, cache_config: QuantizedCacheConfig | None = None):
        cache_cls = DenseCache if cache_config is None else QuantizedCache
        past_key_values = cache_cls(cache_config or QuantizedCacheConfig(), self.config.num_layers, self.dtype)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = self(input_ids, attention_mask, position_ids, past_key_values)
        generated = []
        for _ in range(max_new_tokens):
            next_tokens = logits[:, -1].argmax(-1, keepdim=True)
            generated.append(next_tokens)
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(attention_mask.shape[0], 1)], dim=-1)
            position_ids = position_ids[:, -1:] + 1
            logits = self(next_tokens, attention_mask, position_ids, past_key_values)
        return torch.cat(generated, dim=1), logits


def left_pad(prompts: list[list[int]], pad_token_id: int) -> dict:
    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad_token_id] * (width - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def main() -> None:
    torch.manual_seed(0)
    cfg = DecoderConfig()
    model = Decoder(cfg).eval()
    prompts = [[5, 9, 13], [7, 2, 30, 11, 4, 19, 8], [21, 3, 3, 17, 26]]
    batch = left_pad(prompts, cfg.pad_token_id)
    dense_tokens, _ = model.generate(**batch, max_new_tokens=12)
    quant_tokens, _ = model.generate(**batch, max_new_tokens=12, cache_config=QuantizedCacheConfig())
    print(f"float32: quantized vs dense cache, {(dense_tokens == quant_tokens).float().mean().item():.2f} of tokens agree")
    alone, _ = model.generate(**left_pad(prompts[:1], cfg.pad_token_id), max_new_tokens=12)
    print(f"float32: shortest prompt batched vs alone, tokens equal: {bool((alone[0] == dense_tokens[0]).all())}")

    half = copy.deepcopy(model).half()
    try:
        half_tokens, _ = half.generate(**batch, max_new_tokens=12, cache_config=QuantizedCacheConfig())
        print(f"float16 serving: {(half_tokens == quant_tokens).float().mean().item():.2f} of tokens agree with float32")
    except RuntimeError as err:
        print(f"float16 serving: RuntimeError: {err}")


if __name__ == "__main__":
    main()
