"""Hugging Face 4.x BERT-style decoder (`BertLMHeadModel` with `config.is_decoder`): `ModuleUtilsMixin`
with `get_extended_attention_mask` and the static `create_extended_attention_mask_for_decoder`,
eager `BertSelfAttention` that adds the extended mask, left-padded prompts for generation.

The encoder path inverts the 0/1 mask once, `(1.0 - mask) * torch.finfo(dtype).min`, as
transformers does; the decoder path makes a causal bias and a padding bias, each filled with
finfo.min, and adds them.

Source: huggingface/transformers PR #27114 and PR #26421 (causal and padding finfo.min planes summed
to -inf), NVIDIA-NeMo/Automodel PR #2658, conventions.md §2.3 and §3 items 15-16.
"""
import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class BertConfig:
    vocab_size: int = 60
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 64
    max_position_embeddings: int = 32
    layer_norm_eps: float = 1e-12
    is_decoder: bool = True


class ModuleUtilsMixin:
    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @staticmethod
    def create_extended_attention_mask_for_decoder(input_shape, attention_mask, dtype):
        batch_size, seq_length = input_shape
        seq_ids = torch.arange(seq_length, device=attention_mask.device)
        causal_mask = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]
        causal_bias = (1.0 - causal_mask[:, None, :, :].to(dtype)) * torch.finfo(dtype).min
        padding_bias = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        return causal_bias + padding_bias  # expect: MC513 hf

    def get_extended_attention_mask(self, attention_mask: torch.Tensor, input_shape, dtype=None) -> torch.Tensor:
        dtype = self.dtype if dtype is None else dtype
        if attention_mask.dim() == 3:
            extended_attention_mask = attention_mask[:, None, :, :]
        elif attention_mask.dim() == 2:
            if self.config.is_decoder:
                return ModuleUtilsMixin.create_extended_attention_mask_for_decoder(input_shape, attention_mask, dtype)
            extended_attention_mask = attention_mask[:, None, None, :]
        else:
            raise ValueError(f"Wrong shape for input_ids (shape {input_shape}) or attention_mask (shape {attention_mask.shape})")
        extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility
        return (1.0 - extended_attention_mask) * torch.finfo(dtype).min


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query, self.key = nn.Linear(config.hidden_size, config.hidden_size), nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x):
        return x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer, value_layer = self.transpose_for_scores(self.key(hidden_states)), self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            # Apply the attention mask is (precomputed for all layers in BertModel forward() function)
            attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (-1,)), attention_probs


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Sequential(nn.Linear(config.hidden_size, config.intermediate_size), nn.GELU())
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None):
        context, probs = self.attention(hidden_states, attention_mask)
        attention_output = self.attention_norm(self.attention_output(context) + hidden_states)
        return self.output_norm(self.output(self.intermediate(attention_output)) + attention_output), probs


class BertLMHeadModel(nn.Module, ModuleUtilsMixin):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids, attention_mask=None):
        input_shape = input_ids.size()
        attention_mask = torch.ones(input_shape, dtype=torch.long) if attention_mask is None else attention_mask
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, input_shape)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden_states = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        all_attentions = ()
        for layer_module in self.layer:
            hidden_states, probs = layer_module(hidden_states, extended_attention_mask)
            all_attentions = all_attentions + (probs,)
        return self.decoder(hidden_states), extended_attention_mask, all_attentions


if __name__ == "__main__":
    torch.manual_seed(0)
    model = BertLMHeadModel(BertConfig()).eval()
    input_ids = torch.tensor([[0, 0, 14, 27, 9], [31, 5, 8, 22, 17]])  # left padded, pad_token_id = 0
    attention_mask = (input_ids != 0).long()
    with torch.no_grad():
        logits, ext, attentions = model(input_ids, attention_mask)
        alone, _, _ = model(input_ids[:1, 2:])
    print("-inf cells in the extended mask:", int(torch.isinf(ext).sum()))
    print("padded query 0, weights (layer 0, head 0):", [round(w, 3) for w in attentions[0][0, 0, 0].tolist()])
    print("real tokens, padded vs alone:", (logits[0, 2:] - alone[0]).abs().max().item())
