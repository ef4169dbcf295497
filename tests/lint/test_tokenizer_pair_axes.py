"""A model's `forward(self, input_ids, attention_mask)` takes the tokenizer's (batch, seq) mask:
handed down as it is to SDPA's attn_mask it is MC515 (held-out 35's DPR). Not where the
docstring gives it more axes (kornia's PaliGemma), nor beside `inputs_embeds` (an encoder
stack's expanded mask: CLIP's, vLLM's Idefics2)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# DPR's BERT: the bi-encoder's padding mask goes from the model's entry point through a layer
# to the attention's SDPA call, axes unchanged.
ENTRY_MASK_HANDED_DOWN = """\
import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, hidden_states, key_keep):
        b, n, d = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep)
        return context.transpose(1, 2).reshape(b, n, d)


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.attention = SelfAttention(d, heads)

    def forward(self, hidden_states, key_keep):
        return hidden_states + self.attention(hidden_states, key_keep=key_keep)


class Encoder(nn.Module):
    def __init__(self, vocab, d, heads, n):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Layer(d, heads) for _ in range(n)])

    def forward(self, input_ids, attention_mask):{doc}
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x[:, 0]
"""


def test_a_batch_seq_mask_as_attn_mask_raises_unless_batch_equals_queries() -> None:
    q = torch.randn(2, 1, 5, 4)  # (batch, heads, queries, dim)
    keep = torch.ones(2, 5, dtype=torch.bool)  # (batch, seq)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    # with batch == queries it runs, and query i of every sequence reads sequence i's padding
    q = torch.randn(3, 1, 3, 4)
    keep = torch.tensor([[True, True, True], [True, False, False], [True, True, False]])
    wrong = F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    right = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :])
    assert not torch.allclose(wrong, right)


def test_the_entry_points_mask_handed_down_to_sdpa_as_it_is(found: Found) -> None:
    assert found(ENTRY_MASK_HANDED_DOWN.format(doc="")) == [(15, "MC515")]
    fixed = ENTRY_MASK_HANDED_DOWN.format(doc="").replace(
        "layer(x, attention_mask)", "layer(x, attention_mask[:, None, None, :].bool())")
    assert found(fixed) == []


def test_a_docstring_of_batch_and_seq_keeps_the_finding(found: Found) -> None:
    doc = '\n        """attention_mask: (batch, seq), 1 at the real tokens."""'
    assert found(ENTRY_MASK_HANDED_DOWN.format(doc=doc)) == [(15, "MC515")]


@pytest.mark.parametrize("doc", [
    '\n        """Args:\n            attention_mask: a mask SDPA broadcasts against the scores."""',
    '\n        """Args:\n            input_ids: (batch, seq).\n            attention_mask: the\n'
    '                (batch, 1, seq, seq) mask.\n        """',
    '\n        """attention_mask (`torch.Tensor`): a 4D mask."""',
])
def test_a_docstring_giving_the_mask_more_axes_is_believed(found: Found, doc: str) -> None:
    assert found(ENTRY_MASK_HANDED_DOWN.format(doc=doc)) == []


def test_a_later_entry_of_the_docstring_is_not_the_masks(found: Found) -> None:
    doc = ('\n        """Args:\n            attention_mask: 1 at the real tokens.\n'
           '            labels: (batch, heads, seq) targets.\n        """')
    assert found(ENTRY_MASK_HANDED_DOWN.format(doc=doc)) == [(15, "MC515")]


def test_beside_inputs_embeds_the_mask_may_be_expanded_already(found: Found) -> None:
    source = ENTRY_MASK_HANDED_DOWN.format(doc="").replace(
        "def forward(self, input_ids, attention_mask):", "def forward(self, inputs_embeds, "
        "attention_mask):").replace("self.embed(input_ids)", "inputs_embeds")
    assert found(source) == []
