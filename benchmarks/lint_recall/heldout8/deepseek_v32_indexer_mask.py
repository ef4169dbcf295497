"""Held-out 8: DeepSeek-V3.2 sparse attention (DSA) in transformers' style: a lightning indexer
scores every key, keeps the top-k per query, and the main attention runs through SDPA.

Source: huggingface/transformers PR #48363 ("[DSA] Fix vanillas SDPA with padding": with the SDPA
backend the model's mask is built as a bool tensor, True = attend, but the indexer assumes an
additive mask and adds it to its index scores, so padded / future keys get +0 and real keys +1 and
can still be selected; fixed by turning the bool mask into 0 / finfo.min first).
Surroundings: a bool mask built by a mask helper from cache positions, passed through a mapping
keyed by attention type, sliced and added inside the indexer's forward.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


def sdpa_mask(batch_size: int, cache_position: torch.Tensor, kv_length: int,
              attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """SDPA-ready causal mask: bool, True where the query may attend."""
    kv_idx = torch.arange(kv_length, device=cache_position.device)
    causal = kv_idx[None, :] <= cache_position[:, None]
    mask = causal[None, None, :, :].expand(batch_size, 1, -1, -1)
    if attention_mask is not None:
        mask = mask & attention_mask[:, None, None, :kv_length].bool()
    return mask


class DeepseekV32Indexer(nn.Module):
    def __init__(self, hidden_size: int, index_n_heads: int = 64, index_head_dim: int = 128, index_topk: int = 2048):
        super().__init__()
        self.n_heads, self.head_dim, self.index_topk = index_n_heads, index_head_dim, index_topk
        self.wq = nn.Linear(hidden_size, index_n_heads * index_head_dim, bias=False)
        self.wk = nn.Linear(hidden_size, index_head_dim, bias=False)
        self.weights_proj = nn.Linear(hidden_size, index_n_heads, bias=False)
        self.softmax_scale = index_head_dim ** -0.5

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
        bsz, seqlen, _ = hidden_states.shape
        q = self.wq(hidden_states).view(bsz, seqlen, self.n_heads, self.head_dim)
        k = self.wk(hidden_states)
        weights = self.weights_proj(hidden_states) * self.n_heads ** -0.5
        index_scores = torch.einsum("bshd,btd->bsht", q, k).relu() * self.softmax_scale
        index_scores = (index_scores * weights.unsqueeze(-1)).sum(dim=2)
        if attention_mask is not None:
            index_scores = index_scores + attention_mask[:, 0, :, : index_scores.shape[-1]]  # expect: MC509 helper
        topk = min(self.index_topk, index_scores.shape[-1])
        topk_indices = index_scores.topk(topk, dim=-1).indices
        index_mask = torch.full_like(index_scores, float("-inf")).scatter_(-1, topk_indices, 0.0)
        return index_mask


class DeepseekV32SparseAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, index_topk: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.indexer = DeepseekV32Indexer(hidden_size, index_n_heads=4, index_head_dim=16, index_topk=index_topk)

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
        bsz, seqlen, _ = hidden_states.shape
        q, k, v = (t.view(bsz, seqlen, self.num_heads, self.head_dim).transpose(1, 2)
                   for t in self.qkv(hidden_states).chunk(3, dim=-1))
        index_mask = self.indexer(hidden_states, attention_mask)
        keep = attention_mask & (index_mask[:, None] == 0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.o_proj(out.transpose(1, 2).reshape(bsz, seqlen, -1))


class DeepseekV32Model(nn.Module):
    def __init__(self, vocab_size: int = 1024, hidden_size: int = 64, num_heads: int = 4, index_topk: int = 4):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layer = DeepseekV32SparseAttention(hidden_size, num_heads, index_topk)

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None):
        inputs_embeds = self.embed_tokens(input_ids)
        cache_position = torch.arange(input_ids.shape[1], device=input_ids.device)
        causal_mask_mapping = {
            "deepseek_sparse_attention": sdpa_mask(input_ids.shape[0], cache_position, input_ids.shape[1], attention_mask)
        }
        return self.layer(inputs_embeds, causal_mask_mapping["deepseek_sparse_attention"])
