"""Held-out 5 (seed): a project's pytest module for its mask helpers, written from the seed guide.

Source: seed article "解密PyTorch中的Self-Attention Mask机制" (/work/shared/seeds): `create_block_mask`
(`mask = torch.zeros(sz, sz)`, blocks set to 0, `mask[mask == 0] = float('-inf')`), the causal mask
`torch.triu(torch.ones(sz, sz) * float('-inf'), diagonal=1)`, "同时使用两种mask" and key_padding_mask
(True = padding) beside a tokenizer-style 1/0 mask.
Surroundings: a helper under test, a pytest fixture, test functions calling SDPA and MHA.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def create_block_mask(sz: int, block_size: int) -> torch.Tensor:
    mask = torch.zeros(sz, sz)
    for i in range(0, sz, block_size):
        mask[i:i + block_size, i:i + block_size] = 0
    mask[mask == 0] = float("-inf")  # expect: MC504 function
    return mask


@pytest.fixture
def causal_bias() -> torch.Tensor:
    return torch.triu(torch.ones(6, 6) * float("-inf"))  # expect: MC503 fixture


def test_block_mask_shape() -> None:
    assert create_block_mask(12, 4).shape == (12, 12)


def test_sdpa_causal_and_bias(causal_bias: torch.Tensor) -> None:
    q = k = v = torch.randn(2, 2, 6, 8)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_bias, is_causal=True)  # expect: MC506 test
    assert out.shape == q.shape


def test_mha_ignores_padding() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)
    attention_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    _, weights = mha(x, x, x, key_padding_mask=attention_mask.bool())  # expect: MC511|MC502 test
    assert torch.allclose(weights[0, :, 3:], torch.zeros(5, 2))
