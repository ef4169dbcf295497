"""The shapes of held-out 44 (applied code) that its first reading missed: the bad source next to
the finding it must give, its correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# ASI-style comparables valuation: a dataset's method returns the batch as a dict, the model is
# called with `model(**dataset.batch(idx))`, and a bool mask picked with `torch.gather` and
# `&`-ed with an `isfinite()` test is added to the scores.
BOOL_MASK_FROM_A_DATASET_METHOD = """\
import torch
import torch.nn as nn


def build_comparables(subjects, sales, k=4):
    dist = torch.cdist(subjects[:, :2], sales[:, :2])
    same = subjects[:, 2:3] == sales[None, :, 2]
    near = dist.topk(k, largest=False)
    comp_keep = torch.cat([near.values.isfinite(), near.values.isfinite()], 1)
    idx = torch.cat([near.indices, near.indices], 1)
    same_market = torch.gather(same, 1, idx) & comp_keep
    return {"comp_idx": idx, "comp_keep": comp_keep, "same_market": same_market}


class HousingDataset:
    def __init__(self, subjects, sales):
        self.subjects, self.sales = subjects, sales
        self.comps = build_comparables(subjects, sales)

    def batch(self, idx):
        return {
            "comp_features": self.sales[self.comps["comp_idx"][idx]],
            "comp_keep": self.comps["comp_keep"][idx],
            "market_keep": self.comps["same_market"][idx],
        }


class Attention(nn.Module):
    def forward(self, keys, pad_keep, market_keep):
        scores = keys.sum(-1)
        scores = scores + market_keep
        scores = scores.masked_fill(~pad_keep, float("-inf"))
        return scores.softmax(dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()

    def forward(self, comp_features, comp_keep, market_keep):
        return self.attention(comp_features, pad_keep=comp_keep, market_keep=market_keep)


def main(subjects, sales):
    dataset = HousingDataset(subjects, sales)
    model = Model()
    return model(**dataset.batch(torch.arange(4)))
"""

# DETR with a hand-written image processor: `pad` returns an int64 `pixel_mask` (1 = real
# pixel) in a dict, and the model inverts it with `~`.
INT_PIXEL_MASK_FROM_A_PROCESSOR_METHOD = """\
import torch
import torch.nn as nn


class ShelfImageProcessor:
    def pad(self, images):
        h = max(i.shape[1] for i in images)
        pixel_values = torch.zeros(len(images), 3, h, h)
        pixel_mask = torch.zeros(len(images), h, h, dtype=torch.long)
        for n, img in enumerate(images):
            pixel_mask[n, : img.shape[1], : img.shape[2]] = 1
        return {"pixel_values": pixel_values, "pixel_mask": pixel_mask}


class DETR(nn.Module):
    def forward(self, pixel_values, pixel_mask):
        mask = ~pixel_mask
        return pixel_values.masked_fill(mask[:, None], 0.0)


def main(images):
    processor = ShelfImageProcessor()
    model = DETR()
    return model(**processor.pad(images))
"""


def test_a_bool_mask_added_to_scores_masks_nothing() -> None:
    scores = torch.zeros(1, 3)
    keep = torch.tensor([[True, False, True]])
    weights = (scores + keep).softmax(-1)
    assert weights[0, 1] > 0.1  # the "masked" key keeps weight: True only added 1.0


def test_picking_and_testing_keep_a_tensor_bool() -> None:
    same = torch.tensor([[1.0, 2.0]]) == torch.tensor([[1.0, 3.0]])
    assert torch.gather(same, 1, torch.tensor([[1, 0]])).dtype == torch.bool
    assert torch.tensor([1.0, float("inf")]).isfinite().dtype == torch.bool


def test_the_int_pixel_mask_inverted_is_never_false() -> None:
    pixel_mask = torch.tensor([1, 0], dtype=torch.long)
    assert (~pixel_mask).tolist() == [-2, -1]


def test_a_bool_mask_from_a_dataset_method_added_to_the_scores(found: Found) -> None:
    assert found(BOOL_MASK_FROM_A_DATASET_METHOD) == [(31, "MC509")]
    fixed = BOOL_MASK_FROM_A_DATASET_METHOD.replace(
        "scores = scores + market_keep", "scores = scores.masked_fill(~market_keep, -1e4)")
    assert found(fixed) == []


def test_a_float_mask_from_the_same_method_is_not_a_bool_one(found: Found) -> None:
    float_mask = BOOL_MASK_FROM_A_DATASET_METHOD.replace(
        '"market_keep": self.comps["same_market"][idx],',
        '"market_keep": self.comps["same_market"][idx].float().log(),')
    assert found(float_mask) == []


def test_an_int_pixel_mask_from_a_processor_method_inverted(found: Found) -> None:
    assert found(INT_PIXEL_MASK_FROM_A_PROCESSOR_METHOD) == [(17, "MC518")]
    fixed = INT_PIXEL_MASK_FROM_A_PROCESSOR_METHOD.replace("dtype=torch.long", "dtype=torch.bool")
    assert found(fixed) == []


# Older held-out shapes reached by the same work: a collator returning `{...}, targets`
# unpacked before `model(**inputs)` (held-out 16's timm NaFlex), and a model passed to the
# training loop as an annotated parameter, fed from a generator's batches (held-out 13).
TUPLE_OF_DICT_FROM_A_COLLATOR = """\
import torch
import torch.nn as nn


def create_attention_mask(patch_valid, num_prefix_tokens=1, dtype=torch.float32):
    if num_prefix_tokens > 0:
        prefix_valid = patch_valid.new_ones((patch_valid.shape[0], num_prefix_tokens))
        patch_valid = torch.cat([prefix_valid, patch_valid], dim=1)
    mask_float = torch.zeros(patch_valid.shape, dtype=dtype)
    mask_float = mask_float.masked_fill(~patch_valid, torch.finfo(dtype).min)
    return mask_float[:, None, None, :]


class Vit(nn.Module):
    def forward(self, patches, patch_valid):
        return patches + create_attention_mask(patch_valid).sum()


class Collator:
    def __call__(self, batch):
        patches = torch.zeros(len(batch), 4, 8)
        patch_valid = torch.zeros(len(batch), 4, dtype=torch.long)
        for i, p in enumerate(batch):
            patch_valid[i, : p.shape[0]] = 1
        targets = torch.tensor([0] * len(batch))
        return {"patches": patches, "patch_valid": patch_valid}, targets


def main(images):
    collate, model = Collator(), Vit()
    inputs, targets = collate(images)
    return model(**inputs)
"""

GENERATOR_BATCHES_TO_AN_ANNOTATED_MODEL = """\
import torch
import torch.nn as nn


def batches(sessions):
    for chunk in sessions:
        mask = [[1] * len(s) for s in chunk]
        yield {"items": torch.tensor(chunk), "attention_mask": torch.tensor(mask)}


class Encoder(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, items, attention_mask):
        x = items.float()
        h, _ = self.attn(x, x, x, key_padding_mask=~attention_mask)
        return h


def train(model: Encoder, sessions):
    for batch in batches(sessions):
        model(batch["items"], batch["attention_mask"])
"""


def test_an_int_mask_from_a_tuple_of_dict_collator_inverted(found: Found) -> None:
    assert found(TUPLE_OF_DICT_FROM_A_COLLATOR) == [(10, "MC518")]
    fixed = TUPLE_OF_DICT_FROM_A_COLLATOR.replace(
        "patch_valid = torch.zeros(len(batch), 4, dtype=torch.long)",
        "patch_valid = torch.zeros(len(batch), 4, dtype=torch.bool)")
    assert found(fixed) == []


def test_a_batch_mask_handed_to_an_annotated_model_and_inverted(found: Found) -> None:
    assert found(GENERATOR_BATCHES_TO_AN_ANNOTATED_MODEL) == [(18, "MC518")]
    fixed = GENERATOR_BATCHES_TO_AN_ANNOTATED_MODEL.replace(
        "key_padding_mask=~attention_mask", "key_padding_mask=attention_mask == 0")
    assert found(fixed) == []
    cast = GENERATOR_BATCHES_TO_AN_ANNOTATED_MODEL.replace(
        'model(batch["items"], batch["attention_mask"])',
        'model(batch["items"], batch["attention_mask"].bool())')
    assert found(cast) == []


def test_int_new_ones_joined_to_an_int_mask_stays_int() -> None:
    valid = torch.tensor([[1, 0]], dtype=torch.long)
    joined = torch.cat([valid.new_ones((1, 1)), valid], dim=1)
    assert joined.dtype == torch.int64 and (~joined).tolist() == [[-2, -2, -1]]


def test_a_model_declared_at_module_level_is_an_instance_too(found: Found) -> None:
    # (the surroundings benchmark's module-level rewrite: `def train(model: Encoder, ...)`'s
    # body run at module level under the declaration `model: Encoder`)
    declared = GENERATOR_BATCHES_TO_AN_ANNOTATED_MODEL.replace(
        "def train(model: Encoder, sessions):\n", "model: Encoder\nif True:\n")
    assert "model: Encoder\nif True:" in declared
    assert found(declared) == [(18, "MC518")]

