"""Shapes of held-out 49 (session 30, attention code from new fields): the bad source next to
the finding it must give, its correct form next to none, and the torch 2.13 fact it rests
on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# The adverse-event tagger: a helper returns the tokenizer's mask turned into a padding mask
# (True at padding) in a tuple; the caller hands it to the model, whose layers give it to SDPA
# as a keep-mask. Reported once, where the comparison is written, not at each call.
RETURNED_PADDING_MASK = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def encode_batch(tokenizer, texts):
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    token_mask = enc["attention_mask"] == 0
    tags = torch.zeros_like(enc["input_ids"])
    return enc["input_ids"], token_mask, tags


class Layer(nn.Module):
    def forward(self, x, token_mask):
        q = x[:, None]
        return F.scaled_dot_product_attention(q, q, q, attn_mask=token_mask[:, None, None, :])


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(2)])

    def forward(self, x, token_mask):
        for layer in self.layers:
            x = layer(x, token_mask)[:, 0]
        return x


def evaluate(model, tokenizer, texts, x):
    input_ids, token_mask, tags = encode_batch(tokenizer, texts)
    return model(x, token_mask)


def train(model, tokenizer, texts, x):
    input_ids, token_mask, tags = encode_batch(tokenizer, texts)
    return model(x, token_mask)


def main(tokenizer, texts, x):
    model = Tagger()
    train(model, tokenizer, texts, x)
    evaluate(model, tokenizer, texts, x)
"""


def test_a_padding_mask_a_helper_returns_is_reported_where_it_is_made(found: Found) -> None:
    made = line_of(RETURNED_PADDING_MASK, 'token_mask = enc["attention_mask"] == 0')
    assert found(RETURNED_PADDING_MASK) == [(made, "MC511")]
    fixed = RETURNED_PADDING_MASK.replace('enc["attention_mask"] == 0',
                                          'enc["attention_mask"] == 1')
    assert found(fixed) == []


def test_a_helper_bound_twice_leaves_the_finding_at_the_calls(found: Found) -> None:
    # where the helper's returned name is bound on two paths, the call keeps the finding
    twice = RETURNED_PADDING_MASK.replace(
        '    token_mask = enc["attention_mask"] == 0\n',
        '    token_mask = enc["attention_mask"] == 0\n'
        '    if not texts:\n        token_mask = enc["attention_mask"].eq(0)\n')
    lines = [line for line, code in found(twice) if code == "MC511"]
    assert lines and all(
        twice.splitlines()[line - 1].strip() == "return model(x, token_mask)" for line in lines)


# The citation-intent classifier: the collate function (wrapped in a lambda that passes the
# vocabulary) makes the keep-mask float, and the batches are spread into the model, in the
# training loop and in an evaluation function given the loader.
LOADER_BATCH_SPREAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

PAD_ID = 0


def collate_citations(batch, vocab):
    ids = [torch.tensor(vocab.encode(t)) for t, _ in batch]
    input_ids = nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=PAD_ID)
    attention_mask = (input_ids != PAD_ID).float()
    labels = torch.tensor([y for _, y in batch])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 16)

    def forward(self, input_ids, attention_mask, labels=None):
        q = self.embed(input_ids)[:, None]
        out = F.scaled_dot_product_attention(q, q, q, attn_mask=attention_mask[:, None, None, :])
        return out.mean()


def evaluate(model, loader):
    for batch in loader:
        model(**batch)


def main(data, vocab):
    collate = lambda b: collate_citations(b, vocab)
    loader = DataLoader(data, batch_size=32, collate_fn=collate)
    model = Model()
    for batch in loader:
        model(**batch).backward()
    evaluate(model, DataLoader(data, batch_size=64, collate_fn=collate))
"""


def test_a_loader_s_batches_spread_into_the_model_are_its_collate_s_dict(
        found: Found) -> None:
    made = line_of(LOADER_BATCH_SPREAD, "attention_mask = (input_ids != PAD_ID).float()")
    assert found(LOADER_BATCH_SPREAD) == [(made, "MC508")]
    fixed = LOADER_BATCH_SPREAD.replace("(input_ids != PAD_ID).float()", "input_ids != PAD_ID")
    assert found(fixed) == []


def test_the_batches_of_a_loader_given_to_a_function_are_read_there(found: Found) -> None:
    # only the evaluation function spreads the batches
    evaluation_only = LOADER_BATCH_SPREAD.replace(
        "    for batch in loader:\n        model(**batch).backward()\n", "")
    made = line_of(evaluation_only, "attention_mask = (input_ids != PAD_ID).float()")
    assert found(evaluation_only) == [(made, "MC508")]


def test_sdpa_masks_nothing_with_a_float_keep_mask() -> None:
    q = torch.randn(1, 1, 3, 4, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[True, True, False]])
    as_float = F.scaled_dot_product_attention(q, q, q, attn_mask=keep.float())
    unmasked = F.scaled_dot_product_attention(q, q, q, attn_mask=keep.float() * 0 + 1)
    masked = F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    # adding 1 to the real keys and 0 to the padding still gives the padding weight
    assert not torch.allclose(as_float, masked, atol=1e-3)
    assert torch.allclose(unmasked, F.scaled_dot_product_attention(q, q, q), atol=1e-6)


def test_batches_counted_and_shown_with_a_progress_bar_are_the_loader_s(found: Found) -> None:
    counted = LOADER_BATCH_SPREAD.replace(
        "from torch.utils.data import DataLoader\n",
        "from torch.utils.data import DataLoader\nfrom tqdm import tqdm\n").replace(
        "    for batch in loader:\n        model(**batch).backward()\n",
        "    for step, batch in enumerate(tqdm(loader)):\n        model(**batch).backward()\n"
    ).replace("    evaluate(model, DataLoader(data, batch_size=64, collate_fn=collate))\n", "")
    made = line_of(counted, "attention_mask = (input_ids != PAD_ID).float()")
    assert found(counted) == [(made, "MC508")]


def test_batches_moved_to_the_device_by_a_dict_comprehension_keep_their_keys(
        found: Found) -> None:
    moved = LOADER_BATCH_SPREAD.replace(
        "    for batch in loader:\n        model(**batch).backward()\n",
        "    for batch in loader:\n"
        "        batch = {k: v.to(\"cpu\") for k, v in batch.items()}\n"
        "        model(**batch).backward()\n"
    ).replace("    evaluate(model, DataLoader(data, batch_size=64, collate_fn=collate))\n", "")
    made = line_of(moved, "attention_mask = (input_ids != PAD_ID).float()")
    assert found(moved) == [(made, "MC508")]
