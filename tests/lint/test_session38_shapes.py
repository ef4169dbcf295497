"""Shapes of session 38's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Held-out 51's CW decoder: the model's forward hands the tokenizer's mask to its encoder, the
# encoder inverts it (`== 0`) and hands it on to a layer, the layer to SDPA. The slip is the
# encoder's inversion, reported there; the script that calls `model(**enc)` passes the right
# mask and gets no second finding, though its chain runs through the encoder.
THREE_LEVELS = """\
import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, attn_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 1, d).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)[:, 0]


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = SelfAttention(d)

    def forward(self, x, attn_mask, token_keep):
        return (x + self.attn(x, attn_mask)).masked_fill(~token_keep[..., None], 0.0)


class Encoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.embed = nn.Embedding(10, d)
        self.layers = nn.ModuleList([Layer(d) for _ in range(2)])

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        token_keep = attention_mask.bool()
        key_mask = attention_mask == 0
        for layer in self.layers:
            x = layer(x, key_mask[:, None, None, :], token_keep)
        return x


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.encoder = Encoder(d)
        self.head = nn.Linear(d, 2)

    def forward(self, input_ids, attention_mask):
        return self.head(self.encoder(input_ids, attention_mask))


class Tokenizer:
    def __call__(self, texts):
        rows = [[1 + len(w) for w in t.split()] for t in texts]
        width = max(map(len, rows))
        input_ids = torch.zeros(len(rows), width, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def run(model, tokenizer, texts):
    enc = tokenizer(texts)
    return model(**enc)


if __name__ == "__main__":
    print(run(Model(8), Tokenizer(), ["a bc", "a"]))
"""


def test_a_callers_echo_through_a_middle_level_is_dropped(found: Found) -> None:
    slip = line_of(THREE_LEVELS, "key_mask = attention_mask == 0")
    assert found(THREE_LEVELS) == [(slip, "MC511")]
    fixed = THREE_LEVELS.replace("attention_mask == 0", "attention_mask.bool()")
    assert fixed != THREE_LEVELS and found(fixed) == []


def test_the_inverted_keep_mask_attends_to_the_padding_only() -> None:
    q = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[1, 1, 0]])
    wrong = F.scaled_dot_product_attention(q, q, q, attn_mask=(keep == 0)[:, None, :])
    assert torch.allclose(wrong, q[:, 2:3].expand_as(q))  # every query reads the pad key
