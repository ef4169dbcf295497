"""Real code shapes behind the misses of the twelfth held-out recall set (written apart from the
engine from public reports cited nowhere else): each bad source next to the findings it must
give, its correct form next to none, and the torch facts they rest on (torch 2.13 CPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# lucidrains/x-transformers#160: the flash path ORs the causal triangle (True = hidden) into the
# mask and hands it to SDPA, whose bool attn_mask keeps where True.
ORED_TRIANGLE = '''import torch
import torch.nn.functional as F


class Attend(torch.nn.Module):
    def get_mask(self, i, j, device):
        return torch.ones((i, j), device=device, dtype=torch.bool).triu(j - i + 1)

    def flash_attn(self, q, k, v, mask, causal):
        q_len, k_len = q.shape[-2], k.shape[-2]
        if causal:
            causal_mask = self.get_mask(q_len, k_len, q.device)
            mask = mask | causal_mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
'''


def test_a_triangle_ored_into_an_sdpa_mask_is_found(found: Found) -> None:
    assert found(ORED_TRIANGLE) == [(14, "MC511")]


def test_the_triangle_removed_from_a_keep_mask_is_silent(found: Found) -> None:
    assert found(ORED_TRIANGLE.replace("mask = mask | causal_mask",
                                       "mask = mask & ~causal_mask")) == []


def test_the_ored_mask_inverted_for_sdpa_is_silent(found: Found) -> None:
    assert found(ORED_TRIANGLE.replace("attn_mask=mask)", "attn_mask=~mask)")) == []


def test_the_ored_mask_handed_to_masked_fill_is_silent(found: Found) -> None:
    source = ORED_TRIANGLE.replace(
        "return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
        "return (q @ k.transpose(-1, -2)).masked_fill(mask, float('-inf')).softmax(-1) @ v")
    assert found(source) == []


def test_sdpa_attends_where_the_ored_mask_hides() -> None:
    q = torch.randn(1, 1, 3, 4)
    v = torch.eye(3).view(1, 1, 3, 3)
    hidden = torch.zeros(3, 3, dtype=torch.bool) | torch.ones(3, 3, dtype=torch.bool).triu(1)
    weights = F.scaled_dot_product_attention(q, q, v, attn_mask=hidden)[0, 0]
    assert weights[0, 0] == 0 and weights[0, 1:].sum() > 0.99  # query 0 sees only the future


# A collate_fn returns the float 0/1 padding mask in a batch dict; the model reads it back by its
# key and hands it to nn.TransformerEncoder, which adds a float key padding mask (held-out 9).
BATCH_FIELD = '''import torch
from torch import nn


def collate(features, lengths):
    positions = torch.arange(features.shape[1])
    padding_mask = (positions[None, :] >= lengths[:, None]).float()
    return {"features": features, "padding_mask": padding_mask}


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1)

    def forward(self, batch):
        padding_mask = batch["padding_mask"]
        return self.encoder(batch["features"], src_key_padding_mask=padding_mask)
'''


def test_a_float_padding_mask_read_back_from_a_batch_dict_is_found(found: Found) -> None:
    assert found(BATCH_FIELD) == [(19, "MC508")]


def test_a_bool_padding_mask_read_back_from_a_batch_dict_is_silent(found: Found) -> None:
    assert found(BATCH_FIELD.replace("lengths[:, None]).float()", "lengths[:, None])")) == []


def test_a_float_key_padding_mask_is_added_not_masked() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, batch_first=True, dropout=0.0).eval()
    x = torch.randn(1, 4, 8)
    pad = torch.tensor([[False, False, True, True]])
    other = x.clone()
    other[:, 2:] = torch.randn(1, 2, 8)  # only the padding changes
    as_float = layer(x, src_key_padding_mask=pad.float())[:, :2]
    assert not torch.allclose(as_float, layer(other, src_key_padding_mask=pad.float())[:, :2])
    assert torch.allclose(layer(x, src_key_padding_mask=pad)[:, :2],
                          layer(other, src_key_padding_mask=pad)[:, :2], atol=1e-6)
