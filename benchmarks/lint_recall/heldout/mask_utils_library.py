"""Held-out: a small library of mask helpers (static methods, lambdas, a registry dict, keyword
forwarding) of the kind projects keep in utils/masks.py.

Source: the seed self_attention_mask_guide.txt (create_block_mask, generate_causal_mask),
rasbt/LLMs-from-scratch#1061, pytorch/pytorch#103963, TransformerLensOrg/TransformerLens#318,
conventions.md 2.6 and 2.9.
"""

import torch
import torch.nn.functional as fn

MASK_FACTORIES = {}


def register(name):
    def deco(f):
        MASK_FACTORIES[name] = f
        return f

    return deco


causal_additive = lambda n: torch.triu(torch.full((n, n), float("-inf")))  # noqa: E731  # expect: MC503 lambda


class Masks:
    @staticmethod
    def block_diagonal(n: int, block: int) -> torch.Tensor:
        mask = torch.zeros(n, n)
        for i in range(0, n, block):
            mask[i:i + block, i:i + block] = 0
        mask[mask == 0] = float("-inf")  # expect: MC504 staticmethod
        return mask

    @classmethod
    def causal_from_ones(cls, n: int) -> torch.Tensor:
        return torch.ones(n, n).triu(1) * -float("inf")  # expect: MC522 classmethod

    @staticmethod
    def weak_causal(scores: torch.Tensor) -> torch.Tensor:
        n = scores.size(-1)
        future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
        return scores.masked_fill(future, -10.0)  # expect: MC516 staticmethod


@register("sdpa-causal")
def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> torch.Tensor:
    n = q.size(-2)
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return fn.scaled_dot_product_attention(q, k, v, attn_mask=future, **kwargs)  # expect: MC511|MC521 decorated


@register("sdpa-padding")
def sdpa_padding(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor):
    keep = torch.arange(k.size(-2))[None, :] < lengths[:, None]
    bias = keep.to(q.dtype)
    return fn.scaled_dot_product_attention(q, k, v, attn_mask=bias[:, None, None, :])  # expect: MC508 decorated


def eager_with_bool(scores: torch.Tensor, keep4d: torch.Tensor) -> torch.Tensor:
    return (scores + keep4d.bool()).softmax(-1)  # expect: MC509 inline-cast
