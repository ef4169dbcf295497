"""Held-out twin: the mask helper library written correctly.

Source: the seed self_attention_mask_guide.txt (generate_causal_mask, create_local_mask).
"""

import torch
import torch.nn.functional as fn

MASK_FACTORIES = {}


def register(name):
    def deco(f):
        MASK_FACTORIES[name] = f
        return f

    return deco


causal_additive = lambda n: torch.triu(torch.full((n, n), float("-inf")), 1)  # noqa: E731


class Masks:
    @staticmethod
    def block_diagonal(n: int, block: int) -> torch.Tensor:
        mask = torch.full((n, n), float("-inf"))
        for i in range(0, n, block):
            mask[i:i + block, i:i + block] = 0
        return mask

    @classmethod
    def causal_from_ones(cls, n: int) -> torch.Tensor:
        return torch.triu(torch.ones(n, n) * float("-inf"), diagonal=1)

    @staticmethod
    def causal(scores: torch.Tensor) -> torch.Tensor:
        n = scores.size(-1)
        future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
        return scores.masked_fill(future, torch.finfo(scores.dtype).min)


@register("sdpa-causal")
def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> torch.Tensor:
    n = q.size(-2)
    keep = torch.tril(torch.ones(n, n, dtype=torch.bool))
    return fn.scaled_dot_product_attention(q, k, v, attn_mask=keep, **kwargs)


@register("sdpa-padding")
def sdpa_padding(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor):
    keep = torch.arange(k.size(-2))[None, :] < lengths[:, None]
    return fn.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])


def eager_with_bias(scores: torch.Tensor, keep4d: torch.Tensor) -> torch.Tensor:
    bias = torch.zeros_like(scores).masked_fill(~keep4d.bool(), torch.finfo(scores.dtype).min)
    return (scores + bias).softmax(-1)
