"""The spellings of held-out 23 (course assignments, Kaggle kernels, assistant-written code)
that hid a mask from its use: a dict of attention functions picked by an Enum, an Enum member
compared by identity as the causal flag, a float 0/1 mask written by hand into zeros, a
DataLoader's collate_fn batches. Each bad source next to the findings it must give, its
correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

DISPATCH = """\
from enum import Enum
import torch.nn.functional as F

class Backend(str, Enum):
    EAGER = "eager"
    SDPA = "sdpa"

def eager(q, k, v, mask):
    scores = q @ k.transpose(-2, -1)
    scores = scores + mask
    return scores.softmax(-1) @ v

def sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

FUNCTIONS = {Backend.EAGER: eager, Backend.SDPA: sdpa}

def attend(q, k, v, keep, backend):
    mask = keep.bool()[:, None, None, :]
    return FUNCTIONS[backend](q, k, v, mask)
"""


def test_a_function_picked_from_a_dict_is_checked_at_its_use(found: Found) -> None:
    assert found(DISPATCH) == [(10, "MC509")]
    additive = DISPATCH.replace("mask = keep.bool()[:, None, None, :]",
                                "mask = (~keep.bool()[:, None, None, :]).float() * -1e4")
    assert found(additive) == []


ENUM_FLAG = """\
from enum import Enum
import torch
import torch.nn.functional as F
from torch import nn

class Kind(str, Enum):
    CAUSAL = "causal"
    FULL = "full"

class Attention(nn.Module):
    def __init__(self, kind: Kind = Kind.CAUSAL):
        super().__init__()
        self.kind = kind

    def forward(self, q, k, v, past_k=None):
        if past_k is not None:
            k = torch.cat([past_k, k], dim=2)
        causal = self.kind is Kind.CAUSAL
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
"""


def test_is_causal_aligns_top_left_with_a_cache() -> None:
    q = torch.randn(1, 1, 1, 4)
    k = v = torch.randn(1, 1, 3, 4)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(top_left, v[:, :, :1])  # the new query sees only the first key


def test_an_enum_member_compared_by_identity_is_a_flag(found: Found) -> None:
    assert found(ENUM_FLAG) == [(19, "MC510")]
    assert found(ENUM_FLAG.replace("kind: Kind = Kind.CAUSAL", "kind: Kind = Kind.FULL")) == []
    negated = ENUM_FLAG.replace("self.kind is Kind.CAUSAL", "self.kind is not Kind.CAUSAL")
    assert found(negated) == []


HAND_WRITTEN = """\
import torch
import torch.nn.functional as F

def attend(q, k, v, lengths):
    frame_mask = torch.zeros(len(lengths), k.shape[-2])
    for i, n in enumerate(lengths):
        frame_mask[i, :n] = 1.0
    return F.scaled_dot_product_attention(q, k, v, attn_mask=frame_mask[:, None, None, :])
"""


def test_a_float_zero_one_mask_added_masks_nothing() -> None:
    q = k = v = torch.randn(1, 1, 2, 4)
    keep = torch.tensor([[1.0, 0.0]])
    added = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
    assert not torch.allclose(added, v[:, :, :1].expand_as(added))  # key 1 still weighs


def test_ones_written_into_zeros_make_a_float_zero_one_mask(found: Found) -> None:
    assert found(HAND_WRITTEN) == [(8, "MC508")]
    assert found(HAND_WRITTEN.replace("attn_mask=frame_mask[:, None, None, :]",
                                      "attn_mask=frame_mask[:, None, None, :].bool()")) == []
    # another value written too: no longer 0/1 by evidence
    both = HAND_WRITTEN.replace("frame_mask[i, :n] = 1.0",
                                "frame_mask[i, :n] = 1.0\n        frame_mask[i, n:] = -1e4")
    assert found(both) == []


LOADER = """\
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

def collate(batch):
    x = torch.stack([b[0] for b in batch])
    keep = torch.stack([b[1] for b in batch]) != 0
    return x, keep.float()

class Model(nn.Module):
    def forward(self, x, mask):
        return F.scaled_dot_product_attention(x, x, x, attn_mask=mask[:, None, None, :])

def train(dataset):
    model = Model()
    for x, mask in DataLoader(dataset, batch_size=4, collate_fn=collate):
        model(x, mask)
"""


def test_a_dataloader_batch_is_what_its_collate_fn_returns(found: Found) -> None:
    assert found(LOADER) == [(9, "MC508")]  # at the collate's cast
    assert found(LOADER.replace("return x, keep.float()", "return x, keep")) == []
