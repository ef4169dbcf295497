"""An example test file: check your own attention module with maskcheck.testing under pytest.

Copy it next to your tests and replace `MyAttention` with your module. Each helper probes the
module (a few dozen forward passes on CPU) and fails with maskcheck's report when a rule fails.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from maskcheck.testing import (
    assert_batch_isolated,
    assert_causal,
    assert_no_nan_on_boundaries,
    assert_padding_invariant,
)


class MyAttention(nn.Module):
    """Causal self-attention over a padded batch: forward(x, keep), keep True = real token."""

    embed_dim = 16  # the probe reads the input width from here

    def __init__(self, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(self.embed_dim, 3 * self.embed_dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        n, length, e = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, self.heads, e // self.heads).permute(
            2, 0, 3, 1, 4)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        allowed = keep[:, None, None, :] & causal  # (N, 1, L, L), True = may attend
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return y.transpose(1, 2).reshape(n, length, e)


def test_no_future_leak_and_no_blind_spot() -> None:
    assert_causal(MyAttention())


def test_padding_changes_nothing() -> None:
    assert_padding_invariant(MyAttention(), causal=True)


def test_sequences_do_not_see_each_other() -> None:
    assert_batch_isolated(MyAttention())


def test_edge_cases_stay_finite() -> None:
    # an all-padding sequence in the batch, a batch of one, length 1; here in float16 too
    assert_no_nan_on_boundaries(MyAttention(), dtype="float16")
