"""Held-out 16 (correct twin): a Hugging Face 4.3x-style decoder-only modeling file: an `AttentionMaskConverter`
(as in modeling_attn_mask_utils.py) whose static methods `_make_causal_mask` and `_expand_mask`
build the causal and the padding planes with `torch.finfo(dtype).min`, `to_4d` combining them,
`_prepare_4d_causal_attention_mask`, a Llama-like eager attention that adds the 4-D mask to the
scores, RMSNorm, SwiGLU MLP and a causal-LM head. Batched generation left-pads the prompts.

Source: huggingface/transformers PR #27114 ("[AttentionMaskConverter] Fix-mask-inf": the causal
plane and the expanded padding plane were added, and finfo.min + finfo.min overflowed to -inf),
NVIDIA-NeMo/Automodel PR #2658 (the same sum in bfloat16), huggingface/transformers PR #17306
(in fp16, finfo.min plus anything below -16 is -inf). `to_4d` adds the two planes that the static
methods fill with the minimum.
Twin: `to_4d` fills the causal plane where the padding plane is set, as after the fix: `causal_4d_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)`.
"""

from typing import Optional, Tuple

import torch
from torch import nn


class AttentionMaskConverter:
    def __init__(self, is_causal: bool = True):
        self.is_causal = is_causal

    @staticmethod
    def _make_causal_mask(input_ids_shape: torch.Size, dtype: torch.dtype, device: torch.device,
                          past_key_values_length: int = 0) -> torch.Tensor:
        bsz, tgt_len = input_ids_shape
        mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
        mask_cond = torch.arange(mask.size(-1), device=device)
        mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
        mask = mask.to(dtype)
        if past_key_values_length > 0:
            mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)
        return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)

    @staticmethod
    def _expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: Optional[int] = None) -> torch.Tensor:
        bsz, src_len = mask.size()
        tgt_len = tgt_len if tgt_len is not None else src_len
        expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
        inverted_mask = 1.0 - expanded_mask
        return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)

    def to_4d(self, attention_mask_2d: torch.Tensor, query_length: int, dtype: torch.dtype,
              key_value_length: int) -> torch.Tensor:
        input_shape = (attention_mask_2d.shape[0], query_length)
        causal_4d_mask = None
        if input_shape[-1] > 1 and self.is_causal:
            causal_4d_mask = self._make_causal_mask(input_shape, dtype, attention_mask_2d.device,
                                                    past_key_values_length=key_value_length - query_length)
        expanded_attn_mask = self._expand_mask(attention_mask_2d, dtype, tgt_len=input_shape[-1])
        expanded_4d_mask = expanded_attn_mask if causal_4d_mask is None else causal_4d_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)
        return expanded_4d_mask


def _prepare_4d_causal_attention_mask(attention_mask: Optional[torch.Tensor], input_shape: Tuple[int, int],
                                      inputs_embeds: torch.Tensor, past_key_values_length: int = 0) -> torch.Tensor:
    converter = AttentionMaskConverter(is_causal=True)
    key_value_length = input_shape[-1] + past_key_values_length
    if attention_mask is None:
        attention_mask = torch.ones(input_shape[0], key_value_length, dtype=torch.long, device=inputs_embeds.device)
    return converter.to_4d(attention_mask, input_shape[-1], inputs_embeds.dtype, key_value_length)


class LlamaAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.q_proj, self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False), nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj, self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False), nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor, output_attentions: bool = False):
        bsz, q_len, _ = hidden_states.size()
        q, k, v = (proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        attn_weights = torch.matmul(q, k.transpose(2, 3)) / self.head_dim ** 0.5
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = torch.matmul(attn_weights, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(attn_output), (attn_weights if output_attentions else None)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int):
        super().__init__()
        self.self_attn = LlamaAttention(hidden_size, num_heads)
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.input_layernorm, self.post_attention_layernorm = nn.RMSNorm(hidden_size, eps=1e-6), nn.RMSNorm(hidden_size, eps=1e-6)

    def forward(self, hidden_states, attention_mask, output_attentions: bool = False):
        attn_out, weights = self.self_attn(self.input_layernorm(hidden_states), attention_mask, output_attentions)
        hidden_states = hidden_states + attn_out
        h = self.post_attention_layernorm(hidden_states)
        return hidden_states + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h)), weights


class LlamaForCausalLM(nn.Module):
    def __init__(self, vocab_size: int = 64, hidden_size: int = 64, num_heads: int = 4, num_layers: int = 2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.embed_positions = nn.Embedding(128, hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(hidden_size, num_heads, 2 * hidden_size) for _ in range(num_layers)])
        self.norm = nn.RMSNorm(hidden_size, eps=1e-6)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None, output_attentions: bool = False):
        inputs_embeds = self.embed_tokens(input_ids)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0) if attention_mask is not None else torch.arange(input_ids.shape[1])
        hidden_states = inputs_embeds + self.embed_positions(position_ids)
        mask_4d = _prepare_4d_causal_attention_mask(attention_mask, input_ids.shape, inputs_embeds)
        all_attentions = []
        for layer in self.layers:
            hidden_states, weights = layer(hidden_states, mask_4d, output_attentions)
            all_attentions.append(weights)
        return self.lm_head(self.norm(hidden_states)), mask_4d, all_attentions


if __name__ == "__main__":
    torch.manual_seed(0)
    model = LlamaForCausalLM().eval()
    input_ids = torch.tensor([[0, 0, 7, 8, 9], [3, 4, 5, 6, 7]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        logits, mask_4d, attentions = model(input_ids, attention_mask, output_attentions=True)
        alone, _, _ = model(input_ids[:1, 2:])
    print("-inf cells in the 4-D mask:", int(torch.isinf(mask_4d).sum()))
    print("weights of padded query row 0:", [round(w, 3) for w in attentions[0][0, 0, 0].tolist()])
    print("real tokens padded vs alone:", float((logits[0, 2:] - alone[0]).abs().max()))
