"""Held-out 5 twin (seed): the mask helper tests with the masks built the right way round.

Source: the seed guide's recipes corrected (block mask starting at -inf, diagonal=1, is_causal left
False when an explicit mask is passed, key_padding_mask True at padding).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def create_block_mask(sz: int, block_size: int) -> torch.Tensor:
    mask = torch.full((sz, sz), float("-inf"))
    for i in range(0, sz, block_size):
        mask[i:i + block_size, i:i + block_size] = 0
    return mask


@pytest.fixture
def causal_bias() -> torch.Tensor:
    return torch.triu(torch.ones(6, 6) * float("-inf"), diagonal=1)


def test_block_mask_shape() -> None:
    assert create_block_mask(12, 4).shape == (12, 12)


def test_sdpa_causal_and_bias(causal_bias: torch.Tensor) -> None:
    q = k = v = torch.randn(2, 2, 6, 8)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_bias)
    assert out.shape == q.shape


def test_mha_ignores_padding() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)
    attention_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    _, weights = mha(x, x, x, key_padding_mask=attention_mask == 0)
    assert torch.allclose(weights[0, :, 3:], torch.zeros(5, 2))
