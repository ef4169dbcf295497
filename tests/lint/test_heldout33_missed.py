"""Two of held-out 33's shapes that session 20 left missed (a reward model's mixed-direction
mask, a mixture of experts' pruned-expert buffer), each bad source next to the finding it must
give, its correct form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

# A GPT-2-style sequence classifier: a keep triangle buffer AND-ed with the tokenizer mask
# compared with `== 0` (True = padding), handed to SDPA; a collator gives the mask as int64.
REWARD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def collate(rows):
    mask = torch.zeros(len(rows), 8, dtype=torch.long)
    ids = torch.zeros(len(rows), 8, dtype=torch.long)
    return ids, mask


class Attention(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.attn = Attention()
        self.register_buffer("causal_keep", torch.ones(n, n, dtype=torch.bool).tril())

    def _prepare(self, attention_mask, t):
        key_mask = attention_mask[:, None, None, :] == 0
        return self.causal_keep[:t, :t] & key_mask

    def forward(self, input_ids, attention_mask):
        t = input_ids.shape[1]
        mask = self._prepare(attention_mask, t)
        x = torch.randn(input_ids.shape[0], 1, t, 4)
        return self.attn(x, x, x, mask)


def train(model, rows):
    ids, mask = collate(rows)
    return model(ids, attention_mask=mask)
"""


def test_a_keep_triangle_and_a_padding_mask_keep_only_padded_past_keys() -> None:
    keep = torch.ones(3, 3, dtype=torch.bool).tril()
    attention_mask = torch.tensor([[1, 1, 0]])
    mixed = keep & (attention_mask[:, None, None, :] == 0)
    assert mixed[0, 0].tolist() == [[False, False, False]] * 2 + [[False, False, True]]
    q = torch.randn(1, 1, 3, 4)
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=mixed)
    assert torch.equal(out[0, 0, 0], torch.zeros(4))  # the first query keeps no key at all
    assert torch.allclose(out[0, 0, 2], q[0, 0, 2])  # the last sees only the padded key


def test_a_keep_triangle_and_a_padding_mask_are_reported_at_the_comparison(
        found: Found) -> None:
    assert found(REWARD) == [(24, "MC511")]
    assert found(REWARD.replace("== 0", "!= 0")) == []
    # a name given the pair's mask as a plain tensor is the tokenizer's mask as well
    assert found(REWARD.replace("dtype=torch.long)\n    ids", "dtype=torch.float)\n    ids")) == [
        (24, "MC511")]


# A mixture-of-experts router: experts switched off through a bool buffer of ones that a
# pruning function of the file writes from outside the class.
ROUTER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Router(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.gate = nn.Linear(8, n)
        self.register_buffer("expert_available", torch.ones(n, dtype=torch.bool))

    def forward(self, x):
        logits = self.gate(x)
        available = self.expert_available.to(logits.dtype)
        return F.softmax(logits * available, dim=-1)


def prune(model, ids):
    model.layers[0].router.expert_available[ids] = False
"""


def test_a_zeroed_logit_keeps_softmax_weight() -> None:
    logits = torch.tensor([2.0, 1.0, 3.0])
    available = torch.tensor([True, True, False]).to(logits.dtype)
    probs = F.softmax(logits * available, dim=-1)
    assert probs[2] > 0.03  # the pruned expert still gets exp(0) / sum
    hidden = F.softmax(logits.masked_fill(~available.bool(), float("-inf")), dim=-1)
    assert hidden[2] == 0


def test_a_buffer_of_ones_written_from_outside_is_a_mask(found: Found) -> None:
    assert found(ROUTER) == [(15, "MC520")]
    # never written (and held under a name that says nothing): all ones, a product that
    # changes nothing
    unwritten = ROUTER.replace("    model.layers[0].router.expert_available[ids] = False\n",
                               "    return model, ids\n").replace("available", "factor")
    assert found(unwritten) == []
    fixed = ROUTER.replace("logits * available", "logits.masked_fill(available == 0, "
                           "float('-inf'))")
    assert found(fixed) == []


# A chat fine-tuning script: a collator class whose `__call__` returns the batch dict (a bool
# attention_mask), spread into the model, whose BERT-era helper subtracts the mask from 1.0.
CHAT = """\
import torch
import torch.nn as nn


class Collator:
    def __init__(self, pad):
        self.pad = pad

    def __call__(self, rows):
        input_ids = torch.tensor(rows)
        attention_mask = input_ids != self.pad
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def get_extended_attention_mask(attention_mask, dtype):
    extended = attention_mask[:, None, None, :]
    return (1.0 - extended) * torch.finfo(dtype).min


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        return x, get_extended_attention_mask(attention_mask, x.dtype)


def main(rows):
    collator = Collator(0)
    model = Model()
    batch = collator(rows)
    return model(**batch)
"""


def test_one_minus_a_bool_mask_raises() -> None:
    mask = torch.tensor([[True, False]])
    try:
        _ = 1.0 - mask
    except RuntimeError as error:
        assert "bool" in str(error)
    else:
        raise AssertionError("1.0 - bool did not raise")


def test_a_collator_class_batch_spread_into_the_model(found: Found) -> None:
    assert found(CHAT) == [(17, "MC512")]
    assert found(CHAT.replace("(1.0 - extended)", "(1.0 - extended.float())")) == []
