"""Shapes of session 32's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Held-out 51's heraldry generator: a remote-code config class (a PretrainedConfig subclass)
# whose `__init__` default is the masking value, read as `config.mask_fill_value` two classes
# down from where the model is built.
CONFIG_INIT_DEFAULT = """\
import torch
import torch.nn as nn
from transformers import PretrainedConfig


class TinyConfig(PretrainedConfig):
    model_type = "tiny"

    def __init__(self, n_embd=32, n_head=4, mask_fill_value=-1e-9, **kwargs):
        self.n_embd = n_embd
        self.n_head = n_head
        self.mask_fill_value = mask_fill_value
        super().__init__(**kwargs)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.mask_fill_value = config.mask_fill_value
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-1, -2)
        future = torch.ones(x.size(1), x.size(1), dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, self.mask_fill_value)
        return scores.softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = Attention(config)

    def forward(self, x):
        return x + self.attn(x)


def build():
    return Block(TinyConfig(n_embd=32))
"""


def test_a_config_init_default_is_the_field_an_instance_holds(found: Found) -> None:
    use = line_of(CONFIG_INIT_DEFAULT, "scores.masked_fill(future, self.mask_fill_value)")
    assert found(CONFIG_INIT_DEFAULT) == [(use, "MC516")]
    fixed = CONFIG_INIT_DEFAULT.replace("mask_fill_value=-1e-9", 'mask_fill_value=float("-inf")')
    assert fixed != CONFIG_INIT_DEFAULT and found(fixed) == []


def test_a_config_built_with_another_value_does_not_hold_the_default(found: Found) -> None:
    overridden = CONFIG_INIT_DEFAULT.replace(
        "TinyConfig(n_embd=32)", 'TinyConfig(n_embd=32, mask_fill_value=float("-inf"))')
    assert overridden != CONFIG_INIT_DEFAULT and found(overridden) == []
    positional = CONFIG_INIT_DEFAULT.replace("TinyConfig(n_embd=32)",
                                             'TinyConfig(32, 4, float("-inf"))')
    assert found(positional) == []
    spread = CONFIG_INIT_DEFAULT.replace("TinyConfig(n_embd=32)", "TinyConfig(**settings)")
    assert found(spread) == []


# The same for a dataclass config (held-out 53's space-weather forecaster): its default holds
# where the instance is built without it, not where it is built with another value or the
# field is set afterwards.
DATACLASS_DEFAULT = """\
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class ForecastConfig:
    d_model: int = 16
    gap_fill: float = -1e-9


class Net(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)

    def forward(self, x, gap):
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-1, -2)
        scores = scores.masked_fill(gap[:, None, :], self.cfg.gap_fill)
        return scores.softmax(-1) @ v


def main():
    cfg = ForecastConfig()
    return Net(cfg)
"""


def test_a_dataclass_default_holds_only_where_nothing_sets_it(found: Found) -> None:
    use = line_of(DATACLASS_DEFAULT, "self.cfg.gap_fill)")
    assert found(DATACLASS_DEFAULT) == [(use, "MC516")]
    for built in ('ForecastConfig(gap_fill=float("-inf"))', 'ForecastConfig(16, -1e30)'):
        assert found(DATACLASS_DEFAULT.replace("ForecastConfig()", built)) == []
    set_after = DATACLASS_DEFAULT.replace(
        "    cfg = ForecastConfig()\n",
        '    cfg = ForecastConfig()\n    cfg.gap_fill = float("-inf")\n')
    assert set_after != DATACLASS_DEFAULT and found(set_after) == []


def test_a_tiny_negative_fill_leaves_masked_keys_their_weight() -> None:
    scores = torch.zeros(1, 4)
    hidden = torch.tensor([[False, False, True, True]])
    weights = scores.masked_fill(hidden, -1e-9).softmax(-1)
    assert torch.allclose(weights, torch.full((1, 4), 0.25))
    assert torch.equal(scores.masked_fill(hidden, float("-inf")).softmax(-1),
                       torch.tensor([[0.5, 0.5, 0.0, 0.0]]))


# Held-out 53's milking-robot alert: a numpy length test turned into a tensor in one
# expression, batched by an index tensor, then handed to SDPA as a 2-D attn_mask (MC515).
NUMPY_LENGTH_TEST_AS_ATTN_MASK = """\
import numpy as np
import torch
import torch.nn as nn
from torch.nn.functional import scaled_dot_product_attention as sdpa

MAX_VISITS = 12


def pad_visits(visits):
    X = np.zeros((len(visits), MAX_VISITS, 4), dtype=np.float32)
    lengths = np.array([len(v) for v in visits])
    for i, v in enumerate(visits):
        X[i, : len(v)] = v
    keep = torch.from_numpy(np.arange(MAX_VISITS)[None, :] < lengths[:, None])
    return torch.from_numpy(X), keep


class VisitAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)

    def forward(self, h, keep):
        B, T, D = h.shape
        q, k, v = (t.reshape(B, T, self.n_heads, -1).transpose(1, 2)
                   for t in self.qkv(h).chunk(3, -1))
        return sdpa(q, k, v, keep).transpose(1, 2).reshape(B, T, D)


def train(visits):
    model = VisitAttention(4, 2)
    X, keep = pad_visits(visits)
    idx = torch.randperm(len(visits))[:8]
    return model(X[idx], keep[idx])
"""


def test_a_numpy_length_test_made_a_tensor_keeps_its_axes(found: Found) -> None:
    # (reported where the layer hands its own `keep` to SDPA bare, as for a torch one: session
    # 33 moved a layer's own padding mask's MC515 there from the call)
    use = line_of(NUMPY_LENGTH_TEST_AS_ATTN_MASK, "return sdpa(q, k, v, keep)")
    assert found(NUMPY_LENGTH_TEST_AS_ATTN_MASK) == [(use, "MC515")]
    by_position = NUMPY_LENGTH_TEST_AS_ATTN_MASK.replace("keep[idx]", "keep[:8]")
    assert found(by_position) == [(use, "MC515")]
    # (a bool index flattens the rows it picks: no (batch, seq) mask any more)
    by_bool = NUMPY_LENGTH_TEST_AS_ATTN_MASK.replace(
        "idx = torch.randperm(len(visits))[:8]", "idx = keep.any(-1)")
    assert by_bool != NUMPY_LENGTH_TEST_AS_ATTN_MASK and found(by_bool) == []
    fixed = NUMPY_LENGTH_TEST_AS_ATTN_MASK.replace("sdpa(q, k, v, keep)",
                                                   "sdpa(q, k, v, keep[:, None, None, :])")
    assert found(fixed) == []


# Held-out 53's GDP nowcast: one bool array per vintage (np.zeros(..., dtype=bool) filled
# element by element) appended to a list, stacked, returned in a tuple and added to the
# scores in a closure (MC509: True adds 1.0, nothing is masked).
APPENDED_BOOL_ROWS = """\
import numpy as np
import torch


def build(vintages, n_series):
    X, avail = [], []
    for vintage in vintages:
        released = np.zeros(n_series, dtype=bool)
        for j in range(n_series):
            released[j] = vintage[j] > 0
        X.append(np.asarray(vintage, dtype=np.float32))
        avail.append(released)
    return torch.from_numpy(np.stack(X)), torch.from_numpy(np.stack(avail))


def fit(vintages, n_series, W):
    X, released_all = build(vintages, n_series)

    def attend(h, released):
        scores = h @ W @ h.transpose(-1, -2)
        scores = scores + released[:, None, :]
        return torch.softmax(scores, dim=-1) @ h

    return attend(X[..., None].expand(-1, -1, W.shape[0]), released_all)
"""


def test_a_list_of_appended_bool_rows_stacks_to_a_bool_mask(found: Found) -> None:
    use = line_of(APPENDED_BOOL_ROWS, "scores = scores + released[:, None, :]")
    assert found(APPENDED_BOOL_ROWS) == [(use, "MC509")]
    fixed = APPENDED_BOOL_ROWS.replace(
        "scores + released[:, None, :]",
        "scores.masked_fill(~released[:, None, :], float('-inf'))")
    assert found(fixed) == []


def test_a_list_appended_with_other_dtypes_has_no_dtype(found: Found) -> None:
    mixed = APPENDED_BOOL_ROWS.replace(
        "        avail.append(released)\n",
        "        avail.append(released)\n        avail.append(np.ones(n_series))\n")
    assert mixed != APPENDED_BOOL_ROWS and found(mixed) == []
    extended = APPENDED_BOOL_ROWS.replace(
        "        avail.append(released)\n",
        "        avail.append(released)\n        avail.extend(other_rows)\n")
    assert extended != APPENDED_BOOL_ROWS and found(extended) == []


def test_adding_a_stacked_bool_mask_to_scores_adds_one() -> None:
    rows = [np.array([True, False, True]), np.array([True, True, False])]
    released = torch.from_numpy(np.stack(rows))
    assert released.dtype == torch.bool
    scores = torch.zeros(2, 3, 3)
    added = scores + released[:, None, :]
    assert added.dtype == torch.float32
    assert torch.equal(added[0, 0], torch.tensor([1.0, 0.0, 1.0]))  # the hidden key keeps 0


# fresh41's nnsvs (DiffSinger's fairseq-style attention): a fill under `if mask is not None:`
# where every call of the file leaves the mask out, directly or through a caller's own
# never-given parameter, never runs in this file.
FILL_NO_CALL_REACHES = """\
import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, key_padding_mask=None, constraint_mask=None):
        q, k, v = self.qkv(x).chunk(3, -1)
        s = q @ k.transpose(-1, -2)
        if constraint_mask is not None:
            s = s.masked_fill(constraint_mask[:, None, :], -1e9)
        if key_padding_mask is not None:
            s = s.masked_fill(key_padding_mask[:, None, :], -1e9)
        return s.softmax(-1) @ v


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = Attention(d)

    def forward(self, x, padding_mask=None, constraint_mask=None):
        return x + self.attn(x, key_padding_mask=padding_mask, constraint_mask=constraint_mask)


class Encoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.layer = Layer(d)

    def forward(self, x, lengths):
        padding_mask = torch.arange(x.size(1))[None, :] >= lengths[:, None]
        with torch.autocast("cuda", dtype=torch.float16):
            return self.layer(x, padding_mask)
"""


def test_a_fill_no_call_of_the_file_reaches_is_not_reported(found: Found) -> None:
    padding_fill = line_of(FILL_NO_CALL_REACHES,
                           "s = s.masked_fill(key_padding_mask[:, None, :], -1e9)")
    assert found(FILL_NO_CALL_REACHES) == [(padding_fill, "MC501")]
    given = FILL_NO_CALL_REACHES.replace(
        "return self.layer(x, padding_mask)",
        "return self.layer(x, padding_mask, constraint_mask=padding_mask)")
    constraint_fill = line_of(FILL_NO_CALL_REACHES,
                              "s = s.masked_fill(constraint_mask[:, None, :], -1e9)")
    assert given != FILL_NO_CALL_REACHES
    assert found(given) == [(constraint_fill, "MC501"), (padding_fill, "MC501")]
    # a class no call of the file reaches is checked whole (its users are elsewhere)
    unused = FILL_NO_CALL_REACHES.replace("self.layer = Layer(d)", "self.layer = None")
    assert sorted(found(unused)) == [(constraint_fill, "MC501"), (padding_fill, "MC501")]


def test_a_large_negative_fill_raises_on_float16_scores() -> None:
    scores = torch.zeros(1, 3, dtype=torch.float16)
    hidden = torch.tensor([[False, False, True]])
    try:
        scores.masked_fill(hidden, -1e9)
    except RuntimeError as error:
        assert "overflow" in str(error)
    else:
        raise AssertionError("masked_fill(-1e9) on float16 did not raise")


# Held-out 56's typed modules: jaxtyping annotations state a mask's dtype and axes
# (`Bool[Tensor, "b s"]`): a bool mask added to the scores (MC509), a (batch, seq) mask handed
# to SDPA as its attn_mask (MC515).
JAXTYPED_MASKS = """\
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor


def attend(q: Tensor, k: Tensor, v: Tensor, pad: Bool[Tensor, "b s"]) -> Tensor:
    scores = q @ k.transpose(-2, -1)
    scores = scores + pad[:, None, None, :]
    return scores.softmax(dim=-1) @ v


def node_attention(x: Float[Tensor, "b h n d"], node_keep: Bool[Tensor, "b n"]) -> Tensor:
    return F.scaled_dot_product_attention(x, x, x, node_keep)
"""


def test_jaxtyping_annotations_give_a_mask_its_dtype_and_axes(found: Found) -> None:
    added = line_of(JAXTYPED_MASKS, "scores = scores + pad[:, None, None, :]")
    handed = line_of(JAXTYPED_MASKS, "F.scaled_dot_product_attention(x, x, x, node_keep)")
    assert found(JAXTYPED_MASKS) == [(added, "MC509"), (handed, "MC515")]
    fixed = JAXTYPED_MASKS.replace(
        "scores + pad[:, None, None, :]",
        'scores.masked_fill(pad[:, None, None, :], float("-inf"))').replace(
        "x, x, x, node_keep)", "x, x, x, node_keep[:, None, None, :])")
    assert found(fixed) == []
    # a float annotation, or axes that are not (batch, seq), say nothing of the kind
    other = JAXTYPED_MASKS.replace('Bool[Tensor, "b s"]', 'Float[Tensor, "b s"]').replace(
        'Bool[Tensor, "b n"]', 'Bool[Tensor, "n m"]')
    assert found(other) == []


# Held-out 54's ESIM (Theano's dl4mt conventions): numpy float32 zeros with 1.0 written at
# the real words, made tensors, returned in a tuple through a named lambda; the helper adds
# the float 0/1 mask to the scores.
NUMPY_ZERO_ONE_THROUGH_LAMBDA = """\
import numpy
import torch


def prepare_data(seqs):
    lengths = [len(s) for s in seqs]
    x = numpy.zeros((max(lengths), len(seqs))).astype("int64")
    x_mask = numpy.zeros((max(lengths), len(seqs))).astype("float32")
    for idx, s in enumerate(seqs):
        x[:lengths[idx], idx] = s
        x_mask[:lengths[idx], idx] = 1.0
    return torch.from_numpy(x), torch.from_numpy(x_mask)


def attend(h, seqs):
    encode = lambda pairs: prepare_data(pairs)
    x, x_mask = encode(seqs)
    scores = h @ h.transpose(-1, -2)
    return torch.softmax(scores + x_mask.T[:, None, :], dim=-1)
"""


def test_a_numpy_zero_one_mask_keeps_its_values_through_a_named_lambda(found: Found) -> None:
    added = line_of(NUMPY_ZERO_ONE_THROUGH_LAMBDA, "torch.softmax(scores + x_mask.T")
    assert found(NUMPY_ZERO_ONE_THROUGH_LAMBDA) == [(added, "MC508")]
    fixed = NUMPY_ZERO_ONE_THROUGH_LAMBDA.replace(
        "scores + x_mask.T[:, None, :]",
        "scores.masked_fill(x_mask.T[:, None, :] == 0, float('-inf'))")
    assert found(fixed) == []


# fresh41's first run of this session's engine on pykeen's tests: a comparison made a tensor
# with `dtype=` another tensor's dtype is no bool tensor any more.
CAST_COMPARISON = """\
import torch


def shapes(max_shape, n_dim, generator):
    mask = torch.as_tensor(torch.rand(size=(n_dim,), generator=generator) < 0.3)
    return max_shape * mask + (1 - mask)
"""


def test_a_comparison_made_a_tensor_is_bool_unless_a_dtype_is_given(found: Found) -> None:
    subtracted = line_of(CAST_COMPARISON, "return max_shape * mask + (1 - mask)")
    assert found(CAST_COMPARISON) == [(subtracted, "MC512")]
    cast = CAST_COMPARISON.replace("< 0.3)", "< 0.3, dtype=max_shape.dtype)")
    assert cast != CAST_COMPARISON and found(cast) == []


def test_subtracting_a_bool_tensor_from_one_raises() -> None:
    mask = torch.as_tensor(torch.rand(4) < 0.3)
    assert mask.dtype == torch.bool
    try:
        _ = 1 - mask
    except RuntimeError as error:
        assert "bool" in str(error)
    else:
        raise AssertionError("1 - bool tensor did not raise")
    as_long = torch.as_tensor(torch.rand(4) < 0.3, dtype=torch.long)
    assert torch.equal(1 - (1 - as_long), as_long)


# Held-out 55 (groups that name things in their own language): a comparison made int64 holds
# 0s and 1s under any name (`mascara`), multiplied into the logits (MC520) ...
INT_MASK_MULTIPLIED = """\
import torch


def rellenar(secuencias, relleno):
    n = max(len(s) for s in secuencias)
    ids = torch.tensor([s + [relleno] * (n - len(s)) for s in secuencias])
    return ids, (ids != relleno).long()


def atender(consulta, claves, secuencias):
    ids, mascara = rellenar(secuencias, 0)
    puntuaciones = consulta @ claves.transpose(1, 2)
    puntuaciones = puntuaciones * mascara[:, None, :]
    return torch.softmax(puntuaciones, dim=-1) @ claves
"""


def test_a_comparison_made_int64_is_a_zero_one_mask_under_any_name(found: Found) -> None:
    product = line_of(INT_MASK_MULTIPLIED, "puntuaciones = puntuaciones * mascara")
    assert found(INT_MASK_MULTIPLIED) == [(product, "MC520")]
    fixed = INT_MASK_MULTIPLIED.replace(
        "puntuaciones * mascara[:, None, :]",
        "puntuaciones.masked_fill(mascara[:, None, :] == 0, float('-inf'))")
    assert found(fixed) == []


# ... and an int64 keep-mask a collate function writes (`yuhyo[i, :n] = 1`), handed by a
# training function that takes the file's model as `model`, is inverted with `~` (MC518).
INT_KEEP_MASK_THROUGH_TRAIN_FUNCTION = """\
import torch
import torch.nn as nn


def rogeu_collate(mukkeum):
    b, t = len(mukkeum), max(len(r) for r in mukkeum)
    x = torch.zeros(b, t, 4)
    yuhyo = torch.zeros(b, t, dtype=torch.long)
    for i, rogeu in enumerate(mukkeum):
        x[i, : len(rogeu)] = torch.tensor(rogeu)
        yuhyo[i, : len(rogeu)] = 1
    return {"x": x, "yuhyo": yuhyo}


class SukseongModel(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ipryeok = nn.Linear(4, d)
        layer = nn.TransformerEncoderLayer(d, 2, 2 * d, batch_first=True)
        self.inkoding = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, x, yuhyo):
        garim = (~yuhyo).bool()
        return self.inkoding(self.ipryeok(x), src_key_padding_mask=garim)


def hakseup(model, logs):
    mukkeum = rogeu_collate(logs)
    return model(mukkeum["x"], mukkeum["yuhyo"]).mean()


def main(logs):
    return hakseup(SukseongModel(8), logs)
"""


def test_an_int64_keep_mask_handed_through_a_train_function_is_inverted(found: Found) -> None:
    inverted = line_of(INT_KEEP_MASK_THROUGH_TRAIN_FUNCTION, "garim = (~yuhyo).bool()")
    assert found(INT_KEEP_MASK_THROUGH_TRAIN_FUNCTION) == [(inverted, "MC518")]
    fixed = INT_KEEP_MASK_THROUGH_TRAIN_FUNCTION.replace("(~yuhyo).bool()", "yuhyo == 0")
    assert found(fixed) == []


def test_inverting_an_int64_keep_mask_hides_nothing() -> None:
    yuhyo = torch.tensor([[1, 1, 0]])
    assert (~yuhyo).bool().all()  # ~1 = -2 and ~0 = -1: every position reads as padding
    assert torch.equal(yuhyo == 0, torch.tensor([[False, False, True]]))


# Held-out 55's oyster-farm model: a config dict names the inference dtype
# (`"precision_inference": torch.bfloat16`) and a copy of the model is cast with it; the float32
# minimum a module constant holds then fills bfloat16 scores (MC517).
CONFIG_DICT_HALF_CAST = """\
import copy

import torch
import torch.nn as nn

PARAMETRES = {"dim": 16, "precision_inference": torch.bfloat16}
VALEUR_MASQUEE = torch.finfo(torch.float32).min


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, masque):
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(~masque[:, None, :], VALEUR_MASQUEE)
        return scores.softmax(dim=-1) @ v


def inference(modele, x, masque):
    dtype = PARAMETRES["precision_inference"]
    copie = copy.deepcopy(modele).to(dtype).eval()
    return copie(x.to(dtype), masque)
"""


def test_a_cast_to_a_config_dicts_half_dtype_is_a_half_cast(found: Found) -> None:
    fill = line_of(CONFIG_DICT_HALF_CAST, "scores.masked_fill(~masque[:, None, :], VALEUR")
    assert found(CONFIG_DICT_HALF_CAST) == [(fill, "MC517")]
    annotated = CONFIG_DICT_HALF_CAST.replace(
        'dtype = PARAMETRES["precision_inference"]',
        'dtype: torch.dtype = PARAMETRES["precision_inference"]')
    assert annotated != CONFIG_DICT_HALF_CAST and found(annotated) == [(fill, "MC517")]
    full = CONFIG_DICT_HALF_CAST.replace('"precision_inference": torch.bfloat16',
                                         '"precision_inference": torch.float32')
    assert full != CONFIG_DICT_HALF_CAST and found(full) == []


def test_the_float32_minimum_does_not_fit_bfloat16() -> None:
    scores = torch.zeros(1, 2, dtype=torch.bfloat16)
    try:
        scores.masked_fill(torch.tensor([[False, True]]), torch.finfo(torch.float32).min)
    except RuntimeError as error:
        assert "overflow" in str(error)
    else:
        raise AssertionError("the float32 minimum fit in bfloat16")


# Held-out 55's makam model: ids padded with the group's own word for padding (`torch.full((b,
# n), DOLGU)`, filled row by row), a keep test against it laid out on the query axis, handed
# to a layer that fills its scores (`skor`, by their softmax) where the mask is 0 (MC514).
PADDED_WITH_OWN_WORD = """\
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DOLGU = 0


def toplu_hazirla(ornekler):
    n = max(len(e) for e in ornekler)
    perdeler = torch.full((len(ornekler), n), DOLGU, dtype=torch.long)
    for i, e in enumerate(ornekler):
        perdeler[i, : len(e)] = torch.tensor(e)
    maske = (perdeler != DOLGU).unsqueeze(1).unsqueeze(3)
    return perdeler, maske


class DikkatKatmani(nn.Module):
    def __init__(self, boyut):
        super().__init__()
        self.sorgu = nn.Linear(boyut, boyut)

    def forward(self, x, maske):
        q = self.sorgu(x)[:, None]
        skor = q @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
        skor = skor.masked_fill(maske == 0, torch.finfo(skor.dtype).min)
        return F.softmax(skor, dim=-1) @ q


def egit(ornekler):
    model = DikkatKatmani(8)
    perdeler, maske = toplu_hazirla(ornekler)
    return model(perdeler.float()[..., None].expand(-1, -1, 8), maske)
"""


def test_ids_padded_with_a_named_value_give_a_padding_test(found: Found) -> None:
    made = line_of(PADDED_WITH_OWN_WORD, "maske = (perdeler != DOLGU).unsqueeze(1).unsqueeze(3)")
    assert found(PADDED_WITH_OWN_WORD) == [(made, "MC514")]
    fixed = PADDED_WITH_OWN_WORD.replace(".unsqueeze(1).unsqueeze(3)", "[:, None, None, :]")
    assert found(fixed) == []


# The same by a comprehension that pads each list with the value (`s + [RELLENO] * (n -
# len(s))`): a keep test against it is a (batch, seq) padding mask (MC515 as SDPA's attn_mask);
# a list of 1s and 0s built the same way is a keep-mask, not padded ids.
LIST_PADDED_IDS = """\
import torch
import torch.nn.functional as F

RELLENO = 0


def atender(q, k, v, secuencias):
    n = max(len(s) for s in secuencias)
    ids = torch.tensor([s + [RELLENO] * (n - len(s)) for s in secuencias])
    mascara = ids != RELLENO
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mascara)
"""


def test_ids_padded_by_a_comprehension_give_a_padding_test(found: Found) -> None:
    use = line_of(LIST_PADDED_IDS, "attn_mask=mascara)")
    assert found(LIST_PADDED_IDS) == [(use, "MC515")]
    fixed = LIST_PADDED_IDS.replace("attn_mask=mascara)", "attn_mask=mascara[:, None, None, :])")
    assert found(fixed) == []


# Held-out 55's prescription generator: a KV cache kept in a dict under the group's own name
# (`huancun["k"]`), joined before the new keys, then is_causal=True with L != S (MC510).
DICT_KV_CACHE = """\
import torch
import torch.nn.functional as F


def zhuyili(q, k, v, huancun=None):
    if huancun is not None:
        if "k" in huancun:
            k = torch.cat([huancun["k"], k], dim=2)
            v = torch.cat([huancun["v"], v], dim=2)
        huancun["k"], huancun["v"] = k, v
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
"""


def test_keys_joined_after_a_dicts_stored_keys_are_a_cache(found: Found) -> None:
    use = line_of(DICT_KV_CACHE, "is_causal=True)")
    assert found(DICT_KV_CACHE) == [(use, "MC510")]
    # without the cache's keys joined, L == S and is_causal=True is right
    uncached = DICT_KV_CACHE.replace('k = torch.cat([huancun["k"], k], dim=2)', "pass").replace(
        'v = torch.cat([huancun["v"], v], dim=2)', "pass")
    assert uncached != DICT_KV_CACHE and found(uncached) == []


def test_is_causal_with_cached_keys_hides_the_cache_from_new_queries() -> None:
    q = torch.randn(1, 1, 1, 4)
    k = v = torch.randn(1, 1, 3, 4)
    aligned = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(aligned, v[:, :, :1])  # top-left: the one query sees only key 0


# Held-out 54's AlphaGeometry port, wrapped whole in a function (as the surroundings benchmark
# does): the attention helper is defined below the layer that calls it, both nested in the
# function; the bool causal keep-mask handed to its `bias` is added to the logits (MC509).
HELPER_BELOW_ITS_CALLER = """\
import torch
import torch.nn as nn


def main():
    class Attention(nn.Module):
        def forward(self, q, k, v):
            t = q.shape[1]
            keep = torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None]
            return dot_product_attention(q, k, v, keep)

    def dot_product_attention(query, key, value, bias=None, mask=None):
        logits = torch.einsum("BTNH,BSNH->BNTS", query, key)
        if bias is not None:
            logits = logits + bias
        if mask is not None:
            logits = torch.where(mask, logits, torch.finfo(logits.dtype).min)
        return torch.einsum("BNTS,BSNH->BTNH", torch.softmax(logits, dim=-1), value)

    return Attention()
"""


def test_a_nested_helper_below_its_caller_is_read_at_the_call(found: Found) -> None:
    call = line_of(HELPER_BELOW_ITS_CALLER, "return dot_product_attention(q, k, v, keep)")
    assert found(HELPER_BELOW_ITS_CALLER) == [(call, "MC509")]
    fixed = HELPER_BELOW_ITS_CALLER.replace("dot_product_attention(q, k, v, keep)",
                                            "dot_product_attention(q, k, v, mask=keep)")
    assert found(fixed) == []


# fresh41-era first run of this session's engine on omnivoice: a MaskGIT-style canvas filled
# with the [MASK] id (`torch.full(..., mask_id)`) is no padded batch: `ids != mask_id` means
# "decoded already", and filling those scores with -inf before top-k is right.
MASK_ID_CANVAS = """\
import torch


def decode_step(scores, b, n, mask_id, k):
    tokens = torch.full((b, n), mask_id, dtype=torch.long)
    scores = scores.masked_fill(tokens != mask_id, -float("inf"))
    return torch.topk(scores.flatten(), k)
"""


def test_a_canvas_of_mask_ids_is_not_a_padded_batch(found: Found) -> None:
    assert found(MASK_ID_CANVAS) == []
    padded = MASK_ID_CANVAS.replace("mask_id", "fill_id")
    fill = line_of(padded, "scores.masked_fill(tokens != fill_id")
    assert found(padded) == [(fill, "MC519")]
