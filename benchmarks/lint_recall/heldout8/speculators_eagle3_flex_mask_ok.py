"""Held-out 8 (correct twin): a speculative-decoding draft model (speculators' Eagle3 draft layer) that builds its
training mask with FlexAttention's `create_mask` and can run on the eager / SDPA backends too.

Source: vllm-project/speculators PR #691 ("convert boolean mask to float for eager/SDPA backends":
`torch.nn.attention.flex_attention.create_mask` returns a bool tensor, True = attend, but the eager
attention function adds the mask to the scores, so True adds +1 and False +0: the mask is ignored;
eager vs flex cosine similarity 0.789).
Surroundings: a mask_mod closure built by a factory, `create_mask` called in the model's forward,
the mask handed through a decoder layer into an eager attention function defined below it, the
attention function chosen from a dict by the config.
"""

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import create_mask, flex_attention


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    if n_rep == 1:
        return hidden_states
    b, h, n, d = hidden_states.shape
    return hidden_states[:, :, None, :, :].expand(b, h, n_rep, n, d).reshape(b, h * n_rep, n, d)


def eager_attention_forward(module: nn.Module, query, key, value, attention_mask: Optional[torch.Tensor],
                            scaling: float, dropout: float = 0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    return torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()


def flex_attention_forward(module: nn.Module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0):
    return flex_attention(query, key, value, scale=scaling, enable_gqa=True).transpose(1, 2).contiguous()


ATTENTION_FUNCTIONS: dict[str, Callable] = {"eager": eager_attention_forward, "flex_attention": flex_attention_forward}


def create_float_mask(mask_mod: Callable, q_len: int, kv_len: int, device, dtype=torch.float32) -> torch.Tensor:
    """`create_mask` gives a bool mask (True = attend); the eager path adds its mask to the scores."""
    keep = create_mask(mask_mod, None, None, q_len, kv_len, device=device)
    return torch.zeros(keep.shape, dtype=dtype, device=device).masked_fill(~keep, float("-inf"))


def create_draft_mask_mod(lengths: torch.Tensor, ttt_step: int) -> Callable:
    """Causal within a document, and each test-time-training step sees the steps before it."""
    doc_ids = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)

    def mask_mod(b, h, q_idx, kv_idx):
        same_doc = doc_ids[q_idx % doc_ids.numel()] == doc_ids[kv_idx % doc_ids.numel()]
        causal = (kv_idx % doc_ids.numel()) <= (q_idx % doc_ids.numel())
        return same_doc & causal & (kv_idx // doc_ids.numel() <= ttt_step)

    return mask_mod


class Eagle3DraftAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, attn_implementation: str = "eager"):
        super().__init__()
        self.head_dim = hidden_size // num_heads
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.num_key_value_groups = num_heads // num_kv_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(2 * hidden_size, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * hidden_size, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)
        self.attn_implementation = attn_implementation

    def forward(self, hidden_states, attention_mask=None):
        b, n, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        attention_interface = ATTENTION_FUNCTIONS[self.attn_implementation]
        out = attention_interface(self, q, k, v, attention_mask, scaling=self.scaling)
        return self.o_proj(out.reshape(b, n, -1))


class Eagle3DraftModel(nn.Module):
    def __init__(self, hidden_size: int = 4096, num_heads: int = 32, num_kv_heads: int = 8,
                 attn_implementation: str = "eager"):
        super().__init__()
        self.fc = nn.Linear(3 * hidden_size, hidden_size, bias=False)
        self.layer = Eagle3DraftAttention(hidden_size, num_heads, num_kv_heads, attn_implementation)

    def forward(self, hidden_states: torch.Tensor, input_embeds: torch.Tensor, lengths: torch.Tensor,
                ttt_step: int = 0):
        hidden_states = self.fc(hidden_states)
        seq_len = hidden_states.shape[1]
        mask_mod = create_draft_mask_mod(lengths, ttt_step)
        attention_mask = create_float_mask(mask_mod, seq_len, seq_len, hidden_states.device)
        return self.layer(torch.cat([input_embeds, hidden_states], dim=-1), attention_mask=attention_mask)
