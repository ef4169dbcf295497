"""Held-out 10: transformers' SDPA attention integration (integrations/sdpa_attention.py:
`repeat_kv`, `sdpa_attention_forward`) reached from a Llama-style attention layer through the
`ALL_ATTENTION_FUNCTIONS` mapping chosen by `config._attn_implementation`.

Source: huggingface/transformers#37807 ('Why does "is_causal = query.shape[2] > 1 and causal_mask
is None"? ... I tend to think the opposite'): the question proposes setting `is_causal` when a
mask IS given. The maintainer's answer: the flag makes SDPA build its own causal mask, which
conflicts with the padded mask the model already passes (torch's MATH path raises on both, other
kernels combine or drop one). The proposal is the bug here; the repository's line is the twin.
Surroundings: the 4-D mask made by the model, handed through the decoder layer and a dict of
attention functions keyed by the config, the flag computed from it inside the integration.
"""

from typing import Callable, Optional

import torch
from torch import nn


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def sdpa_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    is_causal: Optional[bool] = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    if hasattr(module, "num_key_value_groups"):
        key = repeat_kv(key, module.num_key_value_groups)
        value = repeat_kv(value, module.num_key_value_groups)

    causal_mask = attention_mask
    if attention_mask is not None:
        causal_mask = causal_mask[:, :, :, : key.shape[-2]]

    query = query.contiguous()
    key = key.contiguous()
    value = value.contiguous()

    if is_causal is None:
        is_causal = query.shape[2] > 1 and causal_mask is not None  # expect: MC506 flag

    attn_output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=causal_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=is_causal,  # also: MC506
    )
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, None


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
    return attn_output, attn_weights


ALL_ATTENTION_FUNCTIONS: dict[str, Callable] = {"sdpa": sdpa_attention_forward, "eager": eager_attention_forward}


class LlamaAttention(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask, **kwargs):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, attention_mask, dropout=0.0, scaling=self.scaling,
            **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class LlamaModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaAttention(config, i) for i in range(config.num_hidden_layers))

    def _update_causal_mask(self, attention_mask, input_tensor):
        dtype = input_tensor.dtype
        min_dtype = torch.finfo(dtype).min
        batch_size, sequence_length = input_tensor.shape[:2]
        causal_mask = torch.full((sequence_length, sequence_length), fill_value=min_dtype, dtype=dtype)
        causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1).clone()
        if attention_mask is not None:
            padding_mask = attention_mask[:, None, None, :] == 0
            causal_mask = causal_mask.masked_fill(padding_mask, min_dtype)
        return causal_mask

    def forward(self, input_ids, attention_mask=None):
        hidden_states = self.embed_tokens(input_ids)
        causal_mask = self._update_causal_mask(attention_mask, hidden_states)
        for decoder_layer in self.layers:
            attn_output, _ = decoder_layer(hidden_states, attention_mask=causal_mask)
            hidden_states = hidden_states + attn_output
        return hidden_states
