"""Held-out 4: boolean masks handed to eager attention helpers that add the mask to the scores
(True adds 1.0: nothing is masked).

Source: huggingface/transformers#41443 (Qwen3 `eager_attention_forward` adds `attention_mask` to
`attn_weights`; given a torch.bool mask the logits are silently wrong), huggingface/
pytorch-image-models#2674 (`timm.layers.attention.maybe_add_mask` expects a float mask and adds
whatever it gets; a bool mask passed by the caller is added as 0/1).
Surroundings: a module-level helper taking the mask as a parameter from a model two calls up
(positional), a one-line helper `scores if mask is None else scores + mask` fed by a keyword
argument of a block.
"""

from typing import Optional

import torch
import torch.nn as nn


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: Optional[torch.Tensor], scaling: float, dropout: float = 0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask  # expect: MC509 caller-positional
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    return attn_output.transpose(1, 2).contiguous(), attn_weights


class Qwen3Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        self.num_key_value_groups = heads // kv_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(hidden, heads * self.head_dim)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, n, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, n, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, n, -1, self.head_dim).transpose(1, 2)
        attn_output, _ = eager_attention_forward(self, q, k, v, attention_mask, self.scaling)
        return self.o_proj(attn_output.reshape(b, n, -1))


class Qwen3Model(nn.Module):
    def __init__(self, vocab: int, hidden: int, heads: int, kv_heads: int, layers: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Qwen3Attention(hidden, heads, kv_heads) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(input_ids)
        seq = input_ids.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=input_ids.device).tril()
        mask4d = causal[None, None] & attention_mask.bool()[:, None, None, :]
        for layer in self.layers:
            h = h + layer(h, mask4d)  # also: MC509
        return h


def maybe_add_mask(scores: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    return scores if attn_mask is None else scores + attn_mask  # expect: MC509 helper-keyword


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int = 8) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = maybe_add_mask(attn, attn_mask)
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class NaFlexEncoder(nn.Module):
    def __init__(self, dim: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Attention(dim) for _ in range(depth))

    def forward_features(self, x: torch.Tensor, patch_valid: torch.Tensor) -> torch.Tensor:
        keep = patch_valid.bool()[:, None, None, :]
        for blk in self.blocks:
            x = x + blk(x, attn_mask=keep)  # also: MC509
        return x
