"""A float tensor's dtype held in a name (`dtype = q.dtype`, `dtype = self.proj.weight.dtype`)
casts a 0/1 mask to a float 0/1 mask, as `.to(q.dtype)` does: SDPA then adds it (MC508)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

NAMED_DTYPE = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, q, k, v, attention_mask):
        dtype = q.dtype
        mask = attention_mask[:, None, None, :].to(dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Pooled(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.pooler = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())

    def forward(self, q, k, v, attention_mask):
        dtype = self.pooler[0].weight.dtype
        mask = attention_mask[:, None, None, :].to(dtype=dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
"""


def test_a_tokenizer_mask_cast_to_a_float_dtype_adds_one_to_the_kept_keys() -> None:
    q = torch.randn(2, 1, 3, 4, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[1, 1, 1], [1, 1, 0]])
    as_float = keep[:, None, None, :].to(q.dtype)
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=as_float)
    weights = torch.softmax(q @ q.transpose(-1, -2) / 2.0 + as_float, dim=-1)
    # SDPA adds the float mask: +1 on the kept keys, +0 on the padding, which keeps its weight
    assert torch.allclose(out, weights @ q, atol=1e-5)
    assert (weights[1, 0, :, 2] > 0).all()  # a masked key would get exactly 0
    as_bool = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :].bool())
    assert not torch.allclose(out[1], as_bool[1], atol=1e-4)


def test_a_dtype_held_in_a_name_is_a_float_cast(found: Found) -> None:
    assert found(NAMED_DTYPE) == [(13, "MC508"), (24, "MC508")]  # at the casts


def test_the_converted_mask_is_not_reported(found: Found) -> None:
    fixed = NAMED_DTYPE.replace(
        "mask = attention_mask[:, None, None, :].to(dtype)",
        "mask = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min",
    ).replace(
        "mask = attention_mask[:, None, None, :].to(dtype=dtype)",
        "mask = attention_mask[:, None, None, :].to(dtype=torch.bool)",
    )
    assert found(fixed) == []
    # a dtype name that is no tensor's (a parameter) proves nothing: not reported
    unknown = NAMED_DTYPE.replace("dtype = q.dtype", "dtype = self.dtype_for(q)")
    assert found(unknown) == [(24, "MC508")]
