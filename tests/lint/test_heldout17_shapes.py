"""Real code shapes behind two misses of the seventeenth held-out recall set (bugs from public
reports in ordinary code, written apart from the engine), fixed after its first reading: each
bad source next to the findings it must give, its correct form next to none (torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# A dataclass cache whose `append` stores the new keys and returns all of them; the verify
# step of speculative decoding then runs is_causal=True with the cache in the keys.
CACHE_APPEND = '''import torch
from torch.nn.functional import scaled_dot_product_attention


def verify(q, k, v, cache):
    k, v = cache.append(k, v)
    return scaled_dot_product_attention(q, k, v, is_causal=True)
'''


def test_keys_returned_by_a_cache_append_are_cached(found: Found) -> None:
    assert found(CACHE_APPEND) == [(7, "MC510")]


def test_a_cache_append_whose_result_is_dropped_leaves_the_keys_new(found: Found) -> None:
    assert found(CACHE_APPEND.replace("    k, v = cache.append(k, v)\n",
                                      "    cache.append(k, v)\n")) == []


def test_is_causal_aligns_top_left_when_keys_outnumber_queries() -> None:
    q = torch.randn(1, 1, 2, 4)
    k = torch.randn(1, 1, 5, 4)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True)
    first_only = torch.softmax(q[..., :1, :] @ k[..., :1, :].transpose(-1, -2), -1) @ k[..., :1, :]
    assert torch.allclose(out[..., :1, :], first_only, atol=1e-6)  # query 0 sees key 0 only


# lerobot's pi0 (PR #710): the float32 minimum in torch.where on scores of a model the file
# itself casts to bfloat16.
WHERE_IN_HALF_MODEL = '''import torch
from torch import nn


def eager_attention(mask, q, k, v):
    att_weights = torch.matmul(q, k.transpose(2, 3))
    big_neg = torch.finfo(torch.float32).min
    masked = torch.where(mask[:, None, :, :], att_weights, big_neg)
    return torch.softmax(masked, dim=-1) @ v


class Policy(nn.Module):
    def to_bfloat16(self):
        return self.to(dtype=torch.bfloat16)
'''


def test_the_float32_minimum_on_scores_of_a_half_cast_model_is_found(found: Found) -> None:
    assert found(WHERE_IN_HALF_MODEL) == [(8, "MC517")]


def test_the_same_file_without_a_half_cast_is_silent(found: Found) -> None:
    assert found(WHERE_IN_HALF_MODEL.replace("dtype=torch.bfloat16", "dtype=torch.float32")
                 ) == []


def test_the_scores_own_minimum_is_silent(found: Found) -> None:
    assert found(WHERE_IN_HALF_MODEL.replace("torch.finfo(torch.float32).min",
                                             "torch.finfo(att_weights.dtype).min")) == []


def test_masked_fill_of_scores_in_a_half_cast_file_is_found(found: Found) -> None:
    fill = WHERE_IN_HALF_MODEL.replace(
        "masked = torch.where(mask[:, None, :, :], att_weights, big_neg)",
        "masked = att_weights.masked_fill(~mask[:, None, :, :], big_neg)")
    assert found(fill) == [(8, "MC517")]


def test_torch_where_rounds_the_float32_minimum_to_minus_inf_in_bfloat16() -> None:
    scores = torch.zeros(2, dtype=torch.bfloat16)
    out = torch.where(torch.tensor([True, False]), scores, torch.finfo(torch.float32).min)
    assert out.tolist() == [0.0, float("-inf")]
    row = torch.where(torch.tensor([False, False]), scores, torch.finfo(torch.float32).min)
    assert torch.isnan(torch.softmax(row.float(), dim=-1)).all()
