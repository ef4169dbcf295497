"""Held-out 8 (correct twin): Llama 4 text model mask update (transformers' `Llama4TextModel._update_causal_mask`
with chunked local attention, `_prepare_4d_causal_attention_mask_with_cache_position`, and the SDPA
attention integration).

Source: huggingface/transformers PR #38094 ("In Llama4 fix wrongly inverted causal attention mask
when using SDPA implementation": the causal mask arrives as a float tensor with `finfo.min` at masked
positions; converting it with `.bool()` gives True exactly where it is masked, and SDPA reads a bool
mask as True = attend, so the mask is inverted).
Surroundings: a static method building the additive mask from cache positions, a config attribute
choosing the backend, the converted mask reaching SDPA through a separate attention function.
"""

import torch
import torch.nn.functional as F
from torch import nn


def sdpa_attention_forward(module: nn.Module, query, key, value, attention_mask, dropout: float = 0.0,
                           scaling=None, **kwargs):
    causal_mask = attention_mask
    if attention_mask is not None:
        causal_mask = causal_mask[:, :, :, : key.shape[-2]]
    is_causal = query.shape[2] > 1 and causal_mask is None
    attn_output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=causal_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
    )
    return attn_output.transpose(1, 2).contiguous()


class Llama4TextModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.attention_chunk_size = config.attention_chunk_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            Llama4TextAttention(config, use_rope=(i + 1) % 4 != 0) for i in range(config.num_hidden_layers)
        )

    def forward(self, input_ids, attention_mask=None):
        hidden_states = self.embed_tokens(input_ids)
        cache_position = torch.arange(input_ids.shape[1], device=input_ids.device)
        causal_mask, chunk_causal_mask = self._update_causal_mask(attention_mask, hidden_states, cache_position)
        for layer in self.layers:
            hidden_states = hidden_states + layer(hidden_states, causal_mask, chunk_causal_mask).flatten(2)
        return hidden_states

    @staticmethod
    def _prepare_4d_causal_attention_mask_with_cache_position(attention_mask, sequence_length: int,
                                                              target_length: int, dtype: torch.dtype,
                                                              cache_position: torch.Tensor, batch_size: int):
        min_dtype = torch.finfo(dtype).min
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype,
                                 device=cache_position.device)
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length, device=cache_position.device) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
        if attention_mask is not None:
            causal_mask = causal_mask.clone()
            mask_length = attention_mask.shape[-1]
            padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :].to(causal_mask.device)
            padding_mask = padding_mask == 0
            causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
        return causal_mask

    def create_chunked_attention_mask(self, start: int, end: int, device: torch.device) -> torch.Tensor:
        block_pos = torch.abs(
            torch.arange(start, end).unsqueeze(0) // self.attention_chunk_size
            - torch.arange(start, end).unsqueeze(1) // self.attention_chunk_size
        )
        token_pos = torch.arange(start, end).unsqueeze(0) - torch.arange(start, end).unsqueeze(1)
        return ((block_pos == 0) & (token_pos <= 0))[None, None, :, :].to(device)

    def _update_causal_mask(self, attention_mask, input_tensor, cache_position):
        dtype, device = input_tensor.dtype, input_tensor.device
        sequence_length = input_tensor.shape[1]
        target_length = attention_mask.shape[-1] if attention_mask is not None else sequence_length
        causal_mask = self._prepare_4d_causal_attention_mask_with_cache_position(
            attention_mask, sequence_length=sequence_length, target_length=target_length, dtype=dtype,
            cache_position=cache_position, batch_size=input_tensor.shape[0],
        )
        chunked_attention_mask = None
        if target_length > self.attention_chunk_size:
            chunked_attention_mask = self.create_chunked_attention_mask(0, target_length, device)
        if self.config._attn_implementation == "sdpa" and chunked_attention_mask is not None:
            chunked_attention_mask = chunked_attention_mask.bool()
            causal_mask = causal_mask == 0  # additive: 0 = attend, finfo.min = masked
        return causal_mask, chunked_attention_mask


class Llama4TextAttention(nn.Module):
    def __init__(self, config, use_rope: bool):
        super().__init__()
        self.config = config
        self.use_rope = use_rope
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, hidden_states, causal_mask, chunk_causal_mask):
        b, n, _ = hidden_states.shape
        shape = (b, n, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        attention_mask = chunk_causal_mask if self.use_rope and chunk_causal_mask is not None else causal_mask
        return sdpa_attention_forward(self, q, k, v, attention_mask, scaling=self.scaling)
