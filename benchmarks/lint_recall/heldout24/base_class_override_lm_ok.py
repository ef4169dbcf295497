"""Tiny decoder LM whose attention mask comes from an overridable method.

`BaseSelfAttention.forward` adds `self.build_bias(...)` to the scores. The bias is additive:
0 where a query may attend, `torch.finfo(dtype).min` where it may not. The base class only
hides padded keys (encoder use); `CausalSelfAttention` overrides `build_bias` to hide the
future as well, reusing the base padding plane. Batches are left-padded for generation.

Source: huggingface/transformers PR #27114 (and PR #26421), NVIDIA-NeMo/Automodel PR #2658,
conventions.md §2.3 and §3 items 15-16 (a causal finfo.min plane and a padding finfo.min plane
summed: where both hide a key the sum overflows to -inf).
"""
import math

import torch
import torch.nn as nn

PAD_ID = 0


class BaseSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def build_bias(self, keep: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
        """(B, 1, 1, S) additive bias: 0 for real keys, finfo.min for padded keys."""
        neg = torch.finfo(dtype).min
        bias = torch.zeros(keep.shape[0], 1, 1, length, dtype=dtype)
        return bias.masked_fill(~keep[:, None, None, :], neg)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores + self.build_bias(keep, n, scores.dtype)
        weights = scores.softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, n, -1)
        return self.proj(out)


class CausalSelfAttention(BaseSelfAttention):
    def build_bias(self, keep: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
        """(B, 1, L, S): also hides every key after the query (finfo.min above the diagonal)."""
        neg = torch.finfo(dtype).min
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        causal = torch.zeros(length, length, dtype=dtype).masked_fill(future, neg)
        padding = super().build_bias(keep, length, dtype)
        return torch.minimum(causal, padding)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        attn_cls = CausalSelfAttention if causal else BaseSelfAttention
        self.attn = attn_cls(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, keep):
        x = x + self.attn(self.ln1(x), keep)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
        self.blocks = nn.ModuleList(Block(dim, heads, causal=True) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids):
        keep = input_ids != PAD_ID
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, keep)
        return self.head(x)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyLM().eval()
    ids = torch.tensor([[0, 0, 7, 8, 9], [3, 4, 5, 6, 7]])  # left padding in row 0
    attn = model.blocks[0].attn
    bias = attn.build_bias(ids != PAD_ID, ids.shape[1], torch.float32)
    print("bias has -inf:", bool(torch.isinf(bias).any()))
    # query 0 of row 0 is a pad query: its row should stay uniform, never favour the future
    row = (bias[0, 0, 0] + torch.zeros(5)).softmax(-1)
    print("pad query 0 weights:", [round(w, 3) for w in row.tolist()])
    with torch.no_grad():
        logits = model(ids)
    print("logits finite:", bool(torch.isfinite(logits).all()))
