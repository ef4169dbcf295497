"""Held-out 8 (correct twin): a teaching framework's attention and GPT modules (TinyTorch, modules 12 "attention" and
13 "transformers" of the cs249r book), written here on torch tensors.

Source: harvard-edge/cs249r_book PR #1785 ("fix GPT causal mask convention in module 13":
`GPT._create_causal_mask` built an additive mask, -inf above the diagonal and 0 elsewhere, but the
attention module's `_apply_mask` expects a binary keep mask, 1 = allow, and computes
`(1 - mask) * MASK_VALUE`; every allowed position got -1e9 and the future ones -inf, so all
attention was blocked; fixed by returning `tril(ones)`).
The twin also fills with `torch.finfo(scores.dtype).min` instead of MASK_VALUE = -1e9, which
the recall sets count as an MC501 bug (heldout7's TF tutorial port).
Surroundings: a module constant, a private helper multiplying the mask, the mask built by a method of
another class and handed through transformer blocks.
"""

import math

import torch
from torch import nn

def _apply_mask(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """mask: 1 = allow, 0 = block (binary)."""
    adder_mask = (1 - mask) * torch.finfo(scores.dtype).min  # fits float16 too
    return scores + adder_mask


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = _apply_mask(scores, mask)
    attention_weights = torch.softmax(scores, dim=-1)
    return attention_weights @ V, attention_weights


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x, mask=None):
        batch_size, seq_len, embed_dim = x.shape
        split = lambda t: t.reshape(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        Q, K, V = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        attended, _ = scaled_dot_product_attention(Q, K, V, mask)
        return self.out_proj(attended.transpose(1, 2).reshape(batch_size, seq_len, embed_dim))


class TransformerBlock(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.attention = MultiHeadAttention(embed_dim, num_heads)
        self.ln1, self.ln2 = nn.LayerNorm(embed_dim), nn.LayerNorm(embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, mlp_ratio * embed_dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * embed_dim, embed_dim))

    def forward(self, x, mask=None):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, embed_dim: int, num_layers: int, num_heads: int, max_seq_len: int = 1024):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, embed_dim)
        self.position_embedding = nn.Embedding(max_seq_len, embed_dim)
        self.blocks = nn.ModuleList(TransformerBlock(embed_dim, num_heads) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(embed_dim)
        self.lm_head = nn.Linear(embed_dim, vocab_size, bias=False)

    def _create_causal_mask(self, seq_len: int) -> torch.Tensor:
        """Causal mask: position i cannot see positions after i."""
        mask = torch.tril(torch.ones(seq_len, seq_len))  # 1 = allow, 0 = block
        return mask

    def forward(self, tokens):
        batch_size, seq_len = tokens.shape
        positions = torch.arange(seq_len, device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        mask = self._create_causal_mask(seq_len)
        for block in self.blocks:
            x = block(x, mask)
        return self.lm_head(self.ln_f(x))
