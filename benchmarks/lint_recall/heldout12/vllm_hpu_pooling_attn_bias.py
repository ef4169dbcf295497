"""Held-out 12: HabanaAI/vllm-fork (vllm/worker/hpu_pooling_model_runner.py `HPUPoolingModelRunner`,
its `_set_attn_bias` building the prompt's attention bias into the attention metadata), the runner
of classify / embed (pooling) models on Gaudi, condensed to a CPU encoder.

Source: HabanaAI/vllm-fork PR #1441 ("Fix pooling (classify or embed) model returns nan when dtype
is float16 (or downcasted to float16)"): `_set_attn_bias` fills the padding part of the mask with
`off_value = -3E38  #small number, avoid nan and overflow`, a float32-sized constant. With a
float16 model the bias is float16: -3e38 does not fit (float16 ends at 65504); on HPU it became
-inf and the fully masked padded rows gave NaN, on the CPU `masked_fill_` refuses the value. The
PR sets `off_value = -63000` when `dtype == torch.float16`.
Surroundings: the constant bound to a local, the fill done on a zeros_like of the bool mask in the
model's dtype, the bias carried in a dataclass (`dataclasses.replace`), the batch a dict.
"""

from dataclasses import dataclass, replace
from typing import Optional

import torch
import torch.nn as nn


@dataclass
class HPUAttentionMetadata:
    is_prompt: bool
    seq_lens_tensor: torch.Tensor
    attn_bias: Optional[torch.Tensor] = None


class EncoderSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv_proj = nn.Linear(hidden_size, 3 * hidden_size)
        self.o_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, attn_metadata):
        b, s, _ = hidden_states.shape
        q, k, v = self.qkv_proj(hidden_states).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        attn_weights = torch.matmul(q * self.head_dim ** -0.5, k.transpose(-1, -2))
        if attn_metadata.attn_bias is not None:
            attn_weights = attn_weights + attn_metadata.attn_bias
        attn_weights = torch.softmax(attn_weights, dim=-1)
        out = torch.matmul(attn_weights, v).transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(out)


class BertLikeEmbeddingModel(nn.Module):
    def __init__(self, vocab_size=100, hidden_size=32, num_heads=4, num_layers=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList(
            [EncoderSelfAttention(hidden_size, num_heads) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, input_ids, attn_metadata):
        hidden_states = self.embed_tokens(input_ids)
        for layer in self.layers:
            hidden_states = hidden_states + layer(hidden_states, attn_metadata)
        return self.norm(hidden_states)


class HPUPoolingModelRunner:
    def __init__(self, model, dtype):
        self.model = model.to(dtype)
        self.dtype = dtype

    def _set_attn_bias(self, attn_metadata, batch_size, seq_len, device, dtype):
        if attn_metadata is None or not attn_metadata.is_prompt:
            return attn_metadata

        seq_lens_t = attn_metadata.seq_lens_tensor
        len_mask = (torch.arange(0, seq_len, device=device, dtype=torch.int32)
                    .view(1, seq_len)
                    .ge(seq_lens_t.unsqueeze(-1))
                    .view(batch_size, 1, 1, seq_len))
        len_mask_v = len_mask.view(batch_size, 1, seq_len, 1)
        attn_mask = torch.zeros((batch_size, 1, seq_len, seq_len), device=device, dtype=torch.bool)
        mask = attn_mask.logical_or(len_mask).logical_or(len_mask_v)
        off_value = -3E38  #small number, avoid nan and overflow  # expect: MC501 constant
        attn_bias = torch.zeros_like(mask, dtype=dtype).masked_fill_(mask, off_value)  # also: MC501
        return replace(attn_metadata, attn_bias=attn_bias)

    def prepare_model_input(self, seqs, pad_id=0):
        seq_lens = [len(s) for s in seqs]
        seq_len = max(seq_lens)
        input_ids = torch.full((len(seqs), seq_len), pad_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            input_ids[i, :len(s)] = torch.tensor(s)
        attn_metadata = HPUAttentionMetadata(is_prompt=True,
                                             seq_lens_tensor=torch.tensor(seq_lens))
        return {"input_ids": input_ids, "attn_metadata": attn_metadata, "seq_lens": seq_lens}

    @torch.inference_mode()
    def execute_model(self, model_input):
        input_ids = model_input["input_ids"]
        batch_size, seq_len = input_ids.shape
        attn_metadata = self._set_attn_bias(model_input["attn_metadata"], batch_size, seq_len,
                                            input_ids.device, self.dtype)
        hidden_states = self.model(input_ids, attn_metadata)
        # mean pooling over the real tokens of each sequence
        pooled = [hidden_states[i, :n].float().mean(0) for i, n in enumerate(model_input["seq_lens"])]
        return torch.stack(pooled)
