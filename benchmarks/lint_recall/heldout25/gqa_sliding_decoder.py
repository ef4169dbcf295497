"""Modeling file for a small grouped-query-attention decoder (Mistral/Qwen2-style).

Rotary position embeddings, grouped-query attention (4 query heads over 2 key/value heads),
alternating full-attention and sliding-window layers, a dynamic key/value cache and two
attention implementations ("eager", "sdpa") chosen by the config, laid out like a Hugging Face
`modeling_*.py` file. The masks follow transformers 5.x `masking_utils`: the 2-D
`attention_mask` is 1 for real tokens and 0 for (left) padding; the SDPA mask is bool
(batch, 1, q, kv) with True = attend; the eager mask is float (batch, 1, q, kv) with 0 / the
dtype's finfo.min, made with torch.where; `create_causal_mask` returns None when the layer needs
nothing but the causal triangle (no padding, no window).

Source: conventions.md §1 (SDPA `is_causal` row: the triangle is aligned top-left when
L != S), §2.7 and §5 item 8; pytorch/pytorch PR #111007 (top-left vs bottom-right causal
alignment once the keys include a KV cache).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TinyMistralConfig:
    vocab_size: int = 101
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    rope_theta: float = 10000.0
    sliding_window: int = 4
    layer_types: tuple = ("full_attention", "sliding_attention", "full_attention", "sliding_attention")
    rms_norm_eps: float = 1e-6
    pad_token_id: int = 0
    attn_implementation: str = "sdpa"


class DynamicCache:
    """Per-layer keys/values of shape (batch, kv_heads, seen_tokens, head_dim)."""

    def __init__(self, num_layers: int):
        self.key_cache: list = [None] * num_layers
        self.value_cache: list = [None] * num_layers

    def get_seq_length(self, layer_idx: int = 0) -> int:
        keys = self.key_cache[layer_idx]
        return 0 if keys is None else keys.shape[-2]

    def update(self, key_states, value_states, layer_idx):
        if self.key_cache[layer_idx] is None:
            self.key_cache[layer_idx] = key_states
            self.value_cache[layer_idx] = value_states
        else:
            self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)
            self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)
        return self.key_cache[layer_idx], self.value_cache[layer_idx]


class TinyMistralRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class TinyMistralRotaryEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        dim = config.head_dim
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


# ------------------------------------------------------------------------------------------------
# masks
# ------------------------------------------------------------------------------------------------


def causal_keep(cache_position, kv_length, sliding_window=None):
    """(q, kv) bool, True = may attend; the queries sit at absolute positions `cache_position`."""
    kv_idx = torch.arange(kv_length, device=cache_position.device)
    keep = kv_idx[None, :] <= cache_position[:, None]
    if sliding_window is not None:
        keep = keep & (kv_idx[None, :] > cache_position[:, None] - sliding_window)
    return keep


def padding_keep(attention_mask, kv_length):
    """(batch, kv) bool from the tokenizer's 1/0 mask, cut or padded with False to kv_length."""
    keep = attention_mask.bool()
    if keep.shape[-1] < kv_length:
        keep = F.pad(keep, (0, kv_length - keep.shape[-1]), value=False)
    return keep[:, :kv_length]


def create_causal_mask(config, attention_mask, cache_position, kv_length, dtype, sliding_window=None):
    """sdpa: bool (batch, 1, q, kv), True = attend. eager: float, 0 / finfo(dtype).min.

    Returns None (sdpa only) when there is no padding and no window.
    """
    has_padding = attention_mask is not None and not bool(attention_mask.all())
    if config.attn_implementation == "sdpa" and not has_padding and sliding_window is None:
        return None
    keep = causal_keep(cache_position, kv_length, sliding_window)[None, None, :, :]
    if attention_mask is not None:
        keep = keep & padding_keep(attention_mask, kv_length)[:, None, None, :]
    if config.attn_implementation == "sdpa":
        return keep
    min_dtype = torch.finfo(dtype).min
    return torch.where(keep, torch.tensor(0.0, dtype=dtype), torch.tensor(min_dtype, dtype=dtype))


def eager_attention_forward(module, query, key, value, attention_mask, scaling):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(attn_weights, value_states)


class TinyMistralAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values, cache_position):
        bsz, q_len, _ = hidden_states.shape
        hidden_shape = (bsz, q_len, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if past_key_values is not None:
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)

        if self.config.attn_implementation == "eager":
            attn_output = eager_attention_forward(self, query_states, key_states, value_states, attention_mask, self.scaling)
        elif attention_mask is None:
            # no padding and no window: only the causal triangle is needed
            attn_output = F.scaled_dot_product_attention(query_states, key_states, value_states, is_causal=True, scale=self.scaling, enable_gqa=True)  # expect: MC510 kvcache
        else:
            attn_output = F.scaled_dot_product_attention(query_states, key_states, value_states, attn_mask=attention_mask, scale=self.scaling, enable_gqa=True)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


class TinyMistralMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TinyMistralDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.attention_type = config.layer_types[layer_idx]
        self.self_attn = TinyMistralAttention(config, layer_idx)
        self.mlp = TinyMistralMLP(config)
        self.input_layernorm = TinyMistralRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = TinyMistralRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values, cache_position):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask, past_key_values, cache_position)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp(self.post_attention_layernorm(hidden_states))
        return residual + hidden_states


class TinyMistralModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.layers = nn.ModuleList(TinyMistralDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = TinyMistralRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = TinyMistralRotaryEmbedding(config)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(self.config.num_hidden_layers)
        past_seen = past_key_values.get_seq_length() if past_key_values is not None else 0
        cache_position = torch.arange(past_seen, past_seen + inputs_embeds.shape[1], device=inputs_embeds.device)
        if position_ids is None:
            position_ids = cache_position.unsqueeze(0)
        mask_kwargs = {
            "config": self.config,
            "attention_mask": attention_mask,
            "cache_position": cache_position,
            "kv_length": past_seen + inputs_embeds.shape[1],
            "dtype": inputs_embeds.dtype,
        }
        causal_mask_mapping = {
            "full_attention": create_causal_mask(**mask_kwargs),
            "sliding_attention": create_causal_mask(**mask_kwargs, sliding_window=self.config.sliding_window),
        }
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            mask = causal_mask_mapping[layer.attention_type]
            hidden_states = layer(hidden_states, position_embeddings, mask, past_key_values, cache_position)
        return self.norm(hidden_states), past_key_values


class TinyMistralForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = TinyMistralModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False, labels=None):
        hidden_states, past_key_values = self.model(input_ids, attention_mask, position_ids, past_key_values, use_cache)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            if attention_mask is not None:
                labels = labels.masked_fill(attention_mask == 0, -100)
            shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1])
            loss = F.cross_entropy(shift_logits, labels[:, 1:].reshape(-1), ignore_index=-100)
        return logits, past_key_values, loss

    @staticmethod
    def position_ids_from_mask(attention_mask):
        """Left padding: real tokens count from 0; pad positions get a dummy 1."""
        position_ids = attention_mask.long().cumsum(-1) - 1
        return position_ids.masked_fill(attention_mask == 0, 1)

    @torch.no_grad()
    def decode_logits(self, input_ids, attention_mask, prompt_len):
        """Prefill `prompt_len` tokens, then feed the rest one at a time through the cache.

        Returns the logits of every position from prompt_len - 1 on, as a no-cache forward would.
        """
        position_ids = self.position_ids_from_mask(attention_mask)
        mask = attention_mask[:, :prompt_len]
        logits, past, _ = self(input_ids[:, :prompt_len], mask, position_ids[:, :prompt_len], use_cache=True)
        steps = [logits[:, -1]]
        for t in range(prompt_len, input_ids.shape[1]):
            mask = attention_mask[:, : t + 1]
            logits, past, _ = self(input_ids[:, t : t + 1], mask, position_ids[:, t : t + 1], past, use_cache=True)
            steps.append(logits[:, -1])
        return torch.stack(steps, dim=1)

    @torch.no_grad()
    def full_logits(self, input_ids, attention_mask, prompt_len):
        position_ids = self.position_ids_from_mask(attention_mask)
        logits, _, _ = self(input_ids, attention_mask, position_ids)
        return logits[:, prompt_len - 1 :]


if __name__ == "__main__":
    torch.manual_seed(0)
    config = TinyMistralConfig()
    model = TinyMistralForCausalLM(config).eval()

    # one unpadded prompt: the full-attention layers take the mask-free branch
    ids = torch.randint(1, config.vocab_size, (1, 9))
    ones = torch.ones_like(ids)
    cached = model.decode_logits(ids, ones, prompt_len=5)
    full = model.full_logits(ids, ones, prompt_len=5)
    print("unpadded: cached vs no-cache max |diff| =", (cached - full).abs().max().item())

    # a left-padded batch: explicit masks everywhere; sdpa and eager must agree
    ids = torch.randint(1, config.vocab_size, (2, 9))
    attention_mask = torch.ones_like(ids)
    attention_mask[0, :3] = 0
    ids = ids.masked_fill(attention_mask == 0, config.pad_token_id)
    cached = model.decode_logits(ids, attention_mask, prompt_len=6)
    full = model.full_logits(ids, attention_mask, prompt_len=6)
    print("left-padded: cached vs no-cache max |diff| =", (cached - full).abs().max().item())
    config.attn_implementation = "eager"
    eager = model.full_logits(ids, attention_mask, prompt_len=6)
    print("left-padded: sdpa vs eager max |diff| =", (full - eager).abs().max().item())
    _, _, loss = model(ids, attention_mask, TinyMistralForCausalLM.position_ids_from_mask(attention_mask), labels=ids)
    print("loss", round(loss.item(), 4))
