"""Held-out 7 (correct twin): a PyTorch port of a Flax/JAX encoder (`make_attention_mask` with a pairwise
function, `dot_product_attention_weights` with a `big_neg` constant, a `bias` argument).

Source: conventions.md section 1 (JAX/Flax `make_attention_mask` gives float 1 = keep / 0 = drop;
ported literally and added to the logits as a bias it masks nothing: pytorch/pytorch#103963),
huggingface/lerobot PR #710 (`torch.where(mask, w, big_neg)` with a huge constant under
half precision, here -1e10 from a module constant), nlpyang/BertSum#73 (`1.0 - mask` on a bool
mask, here `keep = ids.gt(0)`).
Surroundings: module constant, pairwise_fn lambda default, `torch.where`, a bias argument,
`@torch.no_grad()` evaluation helper.
"""

from typing import Callable, Optional

import torch
import torch.nn as nn


def make_attention_mask(query_input: torch.Tensor, key_input: torch.Tensor,
                        pairwise_fn: Callable = torch.mul, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Mask for attention weights: 1 where the pair may attend, 0 elsewhere ([batch, 1, q, kv])."""
    mask = pairwise_fn(query_input.unsqueeze(-1), key_input.unsqueeze(-2))
    return mask.unsqueeze(-3).to(dtype)


def dot_product_attention_weights(query: torch.Tensor, key: torch.Tensor,
                                  bias: Optional[torch.Tensor] = None,
                                  mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    depth = query.shape[-1]
    attn_weights = torch.einsum("...qhd,...khd->...hqk", query / depth ** 0.5, key)
    if bias is not None:
        attn_weights = attn_weights + bias
    if mask is not None:
        attn_weights = torch.where(mask.bool(), attn_weights, torch.finfo(attn_weights.dtype).min)
    return attn_weights.softmax(dim=-1)


class EncoderBlock(nn.Module):
    def __init__(self, dim: int = 512, heads: int = 8):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, bias: Optional[torch.Tensor] = None,
                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1) for t in self.qkv(x).chunk(3, -1))
        w = dot_product_attention_weights(q, k, bias=bias, mask=mask)
        return self.out(torch.einsum("...hqk,...khd->...qhd", w, v).reshape(b, n, d))


class Encoder(nn.Module):
    def __init__(self, vocab: int, dim: int = 512, depth: int = 6):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(EncoderBlock(dim) for _ in range(depth))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        keep = ids.gt(0)
        attention_bias = make_attention_mask(keep, keep)
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, mask=attention_bias)
        return x

    @torch.no_grad()
    def pooled(self, ids: torch.Tensor) -> torch.Tensor:
        keep = ids.gt(0)
        x = self.forward(ids)
        drop = (~keep)[..., None].float()
        return (x * (1 - drop)).sum(1) / keep.sum(1, keepdim=True)
