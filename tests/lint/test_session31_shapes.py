"""Shapes of session 31's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Held-out 41's FedNLP DistilBERT: the model's `forward(input_ids, attention_mask)` takes the
# tokenizer's mask and hands it down through a block, under other names, to an attention layer
# that casts it to the scores' dtype for SDPA.
HANDED_DOWN_KEEP_MASK = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, mask):
        q, k, v = self.qkv(x)[:, None].chunk(3, -1)
        attn_mask = mask[:, None, None, :].to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)[:, 0]


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attention = SelfAttention(dim)

    def forward(self, x, attn_mask):
        return x + self.attention(x, mask=attn_mask)


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.embed = nn.Embedding(100, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(2)])

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, attention_mask)
        return x


def train_step(model, tokenizer, texts):
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    return model(**batch).mean()
"""


def test_a_tokenizer_mask_handed_down_and_cast_for_sdpa_is_found(found: Found) -> None:
    cast = line_of(HANDED_DOWN_KEEP_MASK, "attn_mask = mask[:, None, None, :].to(q.dtype)")
    assert found(HANDED_DOWN_KEEP_MASK) == [(cast, "MC508")]  # SDPA takes the name as it is
    fixed = HANDED_DOWN_KEEP_MASK.replace("mask[:, None, None, :].to(q.dtype)",
                                          "mask[:, None, None, :].bool()")
    assert found(fixed) == []


def test_the_mask_handed_down_under_another_name_keeps_its_reading(found: Found) -> None:
    # a function called with something else than the tokenizer's mask (here its additive
    # (batch, seq) bias, which the layer expands and SDPA adds, as it should) is not seeded
    # with the tokenizer's reading
    other = HANDED_DOWN_KEEP_MASK.replace(
        "x = block(x, attention_mask)",
        "x = block(x, (1.0 - attention_mask.float()) * -1e4)")
    assert other != HANDED_DOWN_KEEP_MASK
    assert found(other) == []


def test_sdpa_adds_a_float_keep_mask_instead_of_masking() -> None:
    q = k = v = torch.randn(1, 1, 3, 4)
    keep = torch.tensor([[1, 1, 0]])
    added = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :].float())
    masked = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :].bool())
    weights = (q @ k.transpose(-1, -2) / 2 + keep[:, None, None, :].float()).softmax(-1)
    assert torch.allclose(added, weights @ v, atol=1e-6)
    assert not torch.allclose(added, masked)


# A collate function's batch spread into the model outside a DataLoader loop (held-out 49's
# loader form, once more without the loader): the float 0/1 mask reaches SDPA.
COLLATED_BATCH_SPREAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def collate(rows):
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(r) for r in rows], batch_first=True)
    keep = (ids != 0).float()
    return {"input_ids": ids, "keep": keep}


class Scorer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.embed = nn.Embedding(100, dim)
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, input_ids, keep):
        q, k, v = self.qkv(self.embed(input_ids))[:, None].chunk(3, -1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])


def score(rows):
    model = Scorer(16)
    batch = collate(rows)
    return model(**batch)
"""


def test_a_collated_batch_spread_into_the_model_is_read_at_the_call(found: Found) -> None:
    made = line_of(COLLATED_BATCH_SPREAD, "keep = (ids != 0).float()")
    assert found(COLLATED_BATCH_SPREAD) == [(made, "MC508")]
    fixed = COLLATED_BATCH_SPREAD.replace("keep = (ids != 0).float()", "keep = ids != 0")
    assert found(fixed) == []
    # a batch written after the call that made it is not the function's dict any more
    written = COLLATED_BATCH_SPREAD.replace(
        "    return model(**batch)", "    batch.update(keep=None)\n    return model(**batch)")
    assert found(written) == []


# Held-out 28's reranker, its batch spread into the model: the layer inverts the tokenizer's
# mask for SDPA. One finding, in the layer; the call's report is its echo.
INVERTED_IN_THE_LAYER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def tokenize(rows):
    width = max(len(r) for r in rows)
    return {
        "input_ids": torch.tensor([r + [0] * (width - len(r)) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
    }


class Layer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, attention_mask):
        q, k, v = self.qkv(x)[:, None].chunk(3, -1)
        attn_mask = (attention_mask == 0)[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)[:, 0]


class Reranker(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.embed = nn.Embedding(100, dim)
        self.layers = nn.ModuleList([Layer(dim) for _ in range(2)])

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x[:, 0].sum(-1)


def rerank(model, rows):
    batch = tokenize(rows)
    return model(**batch)
"""


def test_a_mask_inverted_in_the_layer_is_reported_once(found: Found) -> None:
    use = line_of(INVERTED_IN_THE_LAYER, "F.scaled_dot_product_attention(q, k, v")
    assert found(INVERTED_IN_THE_LAYER) == [(use, "MC511")]


def test_sdpa_keeps_the_true_entries_of_a_bool_mask() -> None:
    q = k = v = torch.randn(1, 1, 2, 4)
    keep = torch.tensor([[True, False]])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
    assert torch.allclose(out, v[:, :, :1].expand_as(out), atol=1e-6)


# Held-out 47's ET-BERT (UER's encoder): one branch makes the segment test a float 0/1 mask,
# the other an additive causal mask; the attention adds `mask.type_as(scores)`.
BRANCH_FLOAT_MASK_ADDED = """\
import torch
import torch.nn as nn


class Attention(nn.Module):
    def forward(self, key, value, query, mask):
        scores = torch.matmul(query, key.transpose(-2, -1))
        scores = scores + mask.type_as(scores)
        return torch.matmul(scores.softmax(-1), value)


class Encoder(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.attn = Attention()

    def forward(self, emb, seg):
        n = emb.size(1)
        if self.kind == "fully_visible":
            mask = (seg > 0).unsqueeze(1).repeat(1, n, 1).float()
        else:
            mask = (1.0 - torch.tril(torch.ones(n, n))) * -10000
        return self.attn(emb, emb, emb, mask)
"""


def test_a_branch_that_leaves_a_float_keep_mask_for_an_addition_is_found(found: Found) -> None:
    made = line_of(BRANCH_FLOAT_MASK_ADDED, "mask = (seg > 0)")
    assert found(BRANCH_FLOAT_MASK_ADDED) == [(made, "MC508")]
    fixed = BRANCH_FLOAT_MASK_ADDED.replace(
        ".repeat(1, n, 1).float()",
        ".repeat(1, n, 1).float()\n            mask = (1.0 - mask) * -10000")
    assert found(fixed) == []


# fresh40's yoyodyne: a monotonic hard-attention aligner forbids moving back to an earlier
# state by filling the lower triangle of its transition matrix: no attention scores, no past.
MONOTONIC_TRANSITIONS = """\
import torch


def apply_mono_mask(transitions):
    mask = torch.ones_like(transitions[0], dtype=bool).triu().logical_not().unsqueeze(0)
    transitions = transitions.masked_fill(mask, float("-inf"))
    return transitions - transitions.logsumexp(dim=2, keepdim=True)
"""


def test_a_lower_triangle_fill_of_a_transition_matrix_is_no_finding(found: Found) -> None:
    assert found(MONOTONIC_TRANSITIONS) == []
    # the same fill of attention scores masks the past
    scores = MONOTONIC_TRANSITIONS.replace("transitions", "scores").replace(
        "scores - scores.logsumexp(dim=2, keepdim=True)", "scores.softmax(-1)")
    made = line_of(scores, "masked_fill(mask")
    assert found(scores) == [(made, "MC521")]


# Held-out 51's Morse decoder: the tokenizer's mask inverted under a neutral name, then handed
# to the layers reshaped (`key_mask[:, None, None, :]`) as SDPA's bool attn_mask. The finding
# sits where the inversion is made, as for the name passed bare.
INVERTED_THEN_RESHAPED = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, attn_mask):
        q, k, v = self.qkv(x)[:, None].chunk(3, -1)
        return x + F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)[:, 0]


class Decoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.embed = nn.Embedding(60, dim)
        self.layers = nn.ModuleList([Layer(dim) for _ in range(2)])

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids)
        key_mask = attention_mask == 0
        for layer in self.layers:
            x = layer(x, key_mask[:, None, None, :])
        return x
"""


def test_an_inversion_handed_on_reshaped_is_reported_where_it_is_made(found: Found) -> None:
    made = line_of(INVERTED_THEN_RESHAPED, "key_mask = attention_mask == 0")
    assert found(INVERTED_THEN_RESHAPED) == [(made, "MC511")]
    fixed = INVERTED_THEN_RESHAPED.replace("attention_mask == 0", "attention_mask == 1")
    assert found(fixed) == []
    # a name that says padding, right where it is made, is passed the wrong way at the call
    named = INVERTED_THEN_RESHAPED.replace("key_mask", "padding_mask")
    call = line_of(named, "x = layer(x, padding_mask")
    assert found(named) == [(call, "MC511")]


# Held-out 51's mushroom classifier: `attention_mask` defaults to a bool made from the ids,
# and every call gives the file's tokenizer's int64 mask; `~` of it is wrong on that path.
DEFAULTED_THEN_INVERTED = """\
import torch
import torch.nn as nn


class Tokenizer:
    def __init__(self, vocab):
        self.vocab = vocab

    def __call__(self, notes):
        rows = [[self.vocab.get(w, 1) for w in n.split()] for n in notes]
        width = max(len(r) for r in rows)
        input_ids = torch.zeros(len(rows), width, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 8)
        layer = nn.TransformerEncoderLayer(8, 2, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask=None):
        if attention_mask is None:
            attention_mask = input_ids.ne(0)
        key_padding_mask = ~attention_mask
        return self.encoder(self.embed(input_ids), src_key_padding_mask=key_padding_mask)


def identify(model, tokenizer, notes):
    return model(**tokenizer(notes))


identify(Classifier(), Tokenizer({"cap": 2, "gills": 3}), ["cap gills", "cap"])
"""


def test_an_inverted_mask_defaulting_to_bool_is_int_as_the_calls_pass_it(found: Found) -> None:
    inverted = line_of(DEFAULTED_THEN_INVERTED, "key_padding_mask = ~attention_mask")
    assert found(DEFAULTED_THEN_INVERTED) == [(inverted, "MC518")]
    fixed = DEFAULTED_THEN_INVERTED.replace("~attention_mask", "attention_mask == 0")
    assert found(fixed) == []
    # a tokenizer of the file that gives a bool mask leaves the inversion right
    bool_mask = DEFAULTED_THEN_INVERTED.replace(
        "attention_mask = torch.zeros(len(rows), width, dtype=torch.long)",
        "attention_mask = torch.zeros(len(rows), width, dtype=torch.bool)").replace(
        "attention_mask[i, : len(row)] = 1", "attention_mask[i, : len(row)] = True")
    assert found(bool_mask) == []


def test_inverting_an_int64_keep_mask_keeps_every_position() -> None:
    keep = torch.tensor([[1, 1, 0]])
    assert bool((~keep).bool().all())  # -2, -2, -1: all true, padding or not
    assert torch.equal(keep == 0, torch.tensor([[False, False, True]]))


# Held-out 52's volcano monitor, its blocks built directly: the stations online (a bool) are
# handed to a layer that rearranges them with einops and casts them for SDPA.
EINOPS_CAST_FOR_SDPA = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange


class StationAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, online):
        q, k, v = rearrange(self.qkv(x), "b s (t h d) -> t b h s d", t=3, h=self.heads)
        visible = rearrange(online, "b s -> b 1 1 s").to(q.dtype)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
        return x + rearrange(o, "b h s d -> b s (h d)")


class Monitor(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.blocks = nn.ModuleList([StationAttention(dim, 4) for _ in range(2)])

    def forward(self, readings):
        online = ~readings.isnan().any(dim=-1)
        x = readings.nan_to_num(0.0)
        for block in self.blocks:
            x = block(x, online)
        return x
"""


def test_a_bool_mask_rearranged_and_cast_for_sdpa_is_found(found: Found) -> None:
    cast = line_of(EINOPS_CAST_FOR_SDPA, '"b s -> b 1 1 s").to(q.dtype)')
    assert found(EINOPS_CAST_FOR_SDPA) == [(cast, "MC508")]
    fixed = EINOPS_CAST_FOR_SDPA.replace('"b s -> b 1 1 s").to(q.dtype)', '"b s -> b 1 1 s")')
    assert found(fixed) == []


def test_a_rearranged_mask_keeps_its_meaning_not_its_axes(found: Found) -> None:
    # `rearrange(keep, "b s -> b 1 1 s")` is the four-axis form SDPA broadcasts: no MC515
    source = """\
import torch.nn.functional as F
from einops import rearrange


def attend(q, k, v, ids):
    keep = ids != 0
    return F.scaled_dot_product_attention(q, k, v, attn_mask=rearrange(keep, "b s -> b 1 1 s"))
"""
    assert found(source) == []
    # ... and a padding test rearranged is still one: read as SDPA's keep-mask, it is inverted
    inverted = source.replace("keep = ids != 0", "keep = ids == 0")
    assert [code for _, code in found(inverted)] == ["MC511"]


# Held-out 51's lyrics aligner: the collate function's dict is handed to an inference helper
# that spreads it into the model; its character mask is laid out (batch, 1, seq, 1).
COLLATED_DICT_HANDED_ON = """\
import torch
import torch.nn as nn


def collate(rows):
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(r) for r in rows], batch_first=True)
    return {"ids": ids, "char_mask": (ids != 0).unsqueeze(1).unsqueeze(3)}


class Aligner(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.embed = nn.Embedding(40, dim)

    def forward(self, ids, char_mask):
        x = self.embed(ids)
        scores = x @ x.transpose(-1, -2)
        scores = scores.masked_fill(char_mask[:, 0] == 0, torch.finfo(scores.dtype).min)
        return scores.softmax(-1) @ x


def align(model, batch):
    return model(**batch).argmax(-1)


align(Aligner(8), collate([[3, 4, 5], [6]]))
"""


def test_a_collated_dict_handed_to_a_helper_that_spreads_it_is_read(found: Found) -> None:
    made = line_of(COLLATED_DICT_HANDED_ON, '"char_mask": (ids != 0)')
    assert found(COLLATED_DICT_HANDED_ON) == [(made, "MC514")]
    fixed = COLLATED_DICT_HANDED_ON.replace(".unsqueeze(1).unsqueeze(3)",
                                            ".unsqueeze(1).unsqueeze(2)")
    assert found(fixed) == []


# Held-out 53 (domain scientists' code): masks built with numpy and turned into tensors.
NUMPY_TRIANGLE = """\
import numpy as np
import torch
import torch.nn as nn


def lookahead_mask(n):
    return torch.from_numpy(np.tril(np.ones((n, n), dtype=bool), k=-1))


class Forecaster(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, x):
        mask = lookahead_mask(x.size(1))
        return self.attn(x, x, x, attn_mask=mask)[0]
"""


def test_a_numpy_triangle_made_a_tensor_keeps_its_direction(found: Found) -> None:
    made = line_of(NUMPY_TRIANGLE, "np.tril(")
    assert found(NUMPY_TRIANGLE) == [(made, "MC521")]
    fixed = NUMPY_TRIANGLE.replace("np.tril(np.ones((n, n), dtype=bool), k=-1)",
                                   "np.triu(np.ones((n, n), dtype=bool), k=1)")
    assert found(fixed) == []


def test_numpy_tril_k_is_its_diagonal() -> None:
    import numpy as np

    strict = torch.from_numpy(np.tril(np.ones((3, 3), dtype=bool), k=-1))
    assert torch.equal(strict, torch.ones(3, 3, dtype=torch.bool).tril(diagonal=-1))
    assert not bool(strict.diagonal().any())


NUMPY_KEEP_SUBTRACTED = """\
import numpy as np
import torch


def pad_profiles(profiles):
    n = max(len(p) for p in profiles)
    keep = np.zeros((len(profiles), n), dtype=bool)
    for i, p in enumerate(profiles):
        keep[i, : len(p)] = True
    keep = torch.from_numpy(keep)
    pad = 1 - keep
    return keep, pad
"""


def test_a_numpy_bool_mask_made_a_tensor_is_bool(found: Found) -> None:
    assert found(NUMPY_KEEP_SUBTRACTED) == [(line_of(NUMPY_KEEP_SUBTRACTED, "pad = 1 - keep"),
                                             "MC512")]
    assert found(NUMPY_KEEP_SUBTRACTED.replace("pad = 1 - keep", "pad = ~keep")) == []


NUMPY_FLOAT_BAND = """\
import numpy as np
import torch
import torch.nn as nn


class LocalEncoder(nn.Module):
    def __init__(self, frames, window):
        super().__init__()
        i = np.arange(frames)
        far = (np.abs(i[:, None] - i[None, :]) > window).astype(np.float32)
        self.register_buffer("band_bias", torch.from_numpy(far) * float("-inf"))
"""


def test_a_numpy_float_mask_times_minus_inf_is_found(found: Found) -> None:
    assert found(NUMPY_FLOAT_BAND) == [(line_of(NUMPY_FLOAT_BAND, "band_bias"), "MC522")]
    fixed = NUMPY_FLOAT_BAND.replace(
        'torch.from_numpy(far) * float("-inf")',
        'torch.zeros(frames, frames).masked_fill(torch.from_numpy(far).bool(), float("-inf"))')
    assert found(fixed) == []


def test_a_numpy_zeros_buffer_filled_later_is_no_mask(found: Found) -> None:
    # the ids array is zeros only until it is written: `src.eq(0)` is still a padding test
    source = """\
import numpy as np
import torch
import torch.nn as nn


def make(n, width, rows):
    src = np.zeros((n, width), dtype=np.int64)
    for i, row in enumerate(rows):
        src[i, : len(row)] = row
    return torch.from_numpy(src)


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.embed = nn.Embedding(50, dim)
        layer = nn.TransformerEncoderLayer(dim, 2)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, src):
        return self.encoder(self.embed(src).transpose(0, 1), mask=src.eq(0))
"""
    assert [code for _, code in found(source)] == ["MC515"]


def test_zero_times_minus_inf_is_nan() -> None:
    assert bool(torch.isnan(torch.tensor([0.0, 1.0]) * float("-inf"))[0])


# Held-out 53's time-use diaries: the collate function builds an int64 keep-mask with numpy
# and returns it under the tokenizer's key; the model inverts it with `~` for MHA.
NUMPY_INT_MASK_INVERTED = """\
import numpy as np
import torch
import torch.nn as nn


def collate(rows):
    n = max(len(r) for r in rows)
    cat = np.zeros((len(rows), n), dtype=np.int64)
    attention_mask = np.zeros((len(rows), n), dtype=np.int64)
    for i, r in enumerate(rows):
        cat[i, : len(r)] = r
        attention_mask[i, : len(r)] = 1
    return {"category": torch.as_tensor(cat), "attention_mask": torch.as_tensor(attention_mask)}


class DiaryEncoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.cat = nn.Embedding(10, dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, category, attention_mask):
        h = self.cat(category)
        return self.attn(h, h, h, key_padding_mask=~attention_mask, need_weights=False)[0]


def run(rows):
    model = DiaryEncoder(8)
    batch = collate(rows)
    return model(**batch)
"""


def test_a_collated_int64_mask_inverted_with_tilde_is_found(found: Found) -> None:
    inverted = line_of(NUMPY_INT_MASK_INVERTED, "key_padding_mask=~attention_mask")
    assert found(NUMPY_INT_MASK_INVERTED) == [(inverted, "MC518")]
    fixed = NUMPY_INT_MASK_INVERTED.replace("~attention_mask", "attention_mask == 0")
    assert found(fixed) == []


def test_scores_filled_and_concatenated_stay_scores(found: Found) -> None:
    # fresh precision set's native-sparse-attention test: masked scores joined with `cat` and
    # rearranged, then scaled, are no additive mask multiplied (MC523)
    source = """\
import torch
from einops import rearrange


def attend(q, k, bk, keep):
    sim = q @ k.transpose(-1, -2)
    causal = torch.ones(sim.shape[-2:], dtype=torch.bool).triu(1)
    sim = sim.masked_fill(causal, -torch.finfo(sim.dtype).max)
    bsim = torch.where(keep, q @ bk.transpose(-1, -2), -torch.finfo(sim.dtype).max)
    sim = rearrange(torch.cat((sim, bsim), dim=-1), "b i j -> b i j")
    sim = sim * q.shape[-1] ** -0.5
    return sim.softmax(dim=-1)
"""
    assert found(source) == []
