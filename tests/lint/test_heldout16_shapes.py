"""Real code shapes behind the misses and the false alarm of the sixteenth held-out recall set
(the wrong mask and the API that meets it sit in different functions, written apart from the
engine): each bad source next to the findings it must give, its correct form next to none
(torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# torchtune's decoder is a class of its own named TransformerDecoder; its layers hand the mask
# (True = attend) to SDPA. Annotated so, it is not torch's nn.TransformerDecoder.
OWN_DECODER = '''import torch
from torch import nn


class TransformerDecoder(nn.Module):
    def forward(self, tokens, *, mask=None):
        return nn.functional.scaled_dot_product_attention(tokens, tokens, tokens, attn_mask=mask)


def generate(model: TransformerDecoder, prompt):
    n = prompt.size(1)
    causal_mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    return model(prompt, mask=causal_mask)
'''


def test_a_class_of_the_file_named_like_torchs_is_the_files(found: Found) -> None:
    assert found(OWN_DECODER) == []


def test_torchs_own_decoder_annotated_is_still_torchs(found: Found) -> None:
    torch_decoder = OWN_DECODER.replace(
        "model: TransformerDecoder", "model: nn.MultiheadAttention").replace(
        "model(prompt, mask=causal_mask)", "model(prompt, prompt, prompt, attn_mask=causal_mask)")
    assert found(torch_decoder) == [(13, "MC521")]


def test_sdpa_attends_where_the_lower_triangle_is_true() -> None:
    q = torch.randn(1, 3, 4)
    keep = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    assert torch.allclose(out[:, 0], q[:, 0], atol=1e-6)  # the first query sees only itself
