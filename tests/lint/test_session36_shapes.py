"""Shapes of session 36's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Held-out 67's draft-model layer: softmax computed in float32 and cast back to the query's
# dtype, then zeroed in place for padded queries. In a float32 run the cast is the same tensor.
CAST_PROBS = """\
import torch
import torch.nn as nn


class Layer(nn.Module):
    def forward(self, q, k, v, query_keep):
        scores = q @ k.transpose(-1, -2)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        probs.masked_fill_(~query_keep[:, None, :, None], 0.0)
        return probs @ v
"""


def test_an_in_place_fill_of_softmax_cast_to_a_dtype_is_reported(found: Found) -> None:
    assert found(CAST_PROBS) == [(line_of(CAST_PROBS, "masked_fill_"), "MC505")]
    fixed = CAST_PROBS.replace("probs.masked_fill_(", "probs = probs.masked_fill(")
    assert fixed != CAST_PROBS and found(fixed) == []


@pytest.mark.parametrize("cast", [".type_as(q)", ".to(dtype=q.dtype)", ".to(torch.float32)"])
def test_other_casts_to_a_dtype_read_through(found: Found, cast: str) -> None:
    source = CAST_PROBS.replace(".to(q.dtype)", cast)
    assert found(source) == [(line_of(source, "masked_fill_"), "MC505")]


@pytest.mark.parametrize("move", ['.to("cuda")', ".to(q.device)", ".to(q.dtype, copy=True)",
                                  ".clone()", ".to(torch.float16)"])
def test_a_move_or_a_copy_is_not_read_through(found: Found, move: str) -> None:
    # a device move or a copy is a new tensor (float32 softmax to float16 always copies):
    # filling it in place leaves softmax's output alone
    source = CAST_PROBS.replace(".to(q.dtype)", move)
    assert source != CAST_PROBS and found(source) == []


def test_a_cast_to_its_own_dtype_returns_softmax_output_and_backward_raises() -> None:
    scores = torch.randn(2, 3, requires_grad=True)
    probs = torch.softmax(scores, -1, dtype=torch.float32).to(torch.float32)
    probs.masked_fill_(torch.tensor([True, False, False]), 0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        probs.sum().backward()
    # a cast that changes the dtype copies: the fill leaves the saved output alone
    half = torch.softmax(scores.half(), -1, dtype=torch.float32).to(torch.float16)
    half.masked_fill_(torch.tensor([True, False, False]), 0.0)
    half.float().sum().backward()
    assert scores.grad is not None


# Held-out 66's layout-grounding layer: bool ones for the visual tokens joined to the objects'
# keep-mask, then added to the scores.
JOINED_KEEP = """\
import torch


def gated_attention(q, k, x, obj_keep):
    keep = torch.cat([torch.ones(x.shape[:2], dtype=torch.bool), obj_keep], dim=1)
    sim = torch.einsum("bhid,bhjd->bhij", q, k)
    sim = sim + keep[:, None, None, :]
    return sim.softmax(dim=-1)
"""


def test_bool_ones_joined_to_a_keep_mask_added_to_scores_is_reported(found: Found) -> None:
    assert found(JOINED_KEEP) == [(line_of(JOINED_KEEP, "sim + keep"), "MC509")]
    fixed = JOINED_KEEP.replace("sim = sim + keep[:, None, None, :]",
                                "sim = sim.masked_fill(~keep[:, None, None, :], -torch.inf)")
    assert fixed != JOINED_KEEP and found(fixed) == []


def test_float_ones_joined_to_a_keep_mask_are_not_called_bool(found: Found) -> None:
    source = JOINED_KEEP.replace("dtype=torch.bool", "dtype=torch.float32")
    assert source != JOINED_KEEP and "MC509" not in {code for _, code in found(source)}


def test_a_bool_keep_mask_added_to_scores_masks_nothing() -> None:
    sim = torch.zeros(1, 1, 1, 3)
    keep = torch.tensor([True, True, False])
    added = (sim + keep).softmax(-1)
    # the hidden key keeps weight: True adds 1.0, False adds 0.0
    assert added[0, 0, 0, 2] > 0.1
    assert (sim + keep).dtype == torch.float32


# fresh51's vocex: its own TransformerEncoder, imported relatively, drops the padding mask
# before attention; what torch's class does with a float key padding mask does not apply.
OWN_ENCODER = """\
import torch
from torch import nn
from .transformer import TransformerEncoder


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = TransformerEncoder(nn.Linear(8, 8), num_layers=2)

    def forward(self, mel):
        pad = (mel.sum(dim=-1) != 0).to(mel.dtype)
        return self.layers(mel, src_key_padding_mask=pad)
"""


def test_a_relatively_imported_encoder_is_the_projects_own(found: Found) -> None:
    assert found(OWN_ENCODER) == []
    torch_own = OWN_ENCODER.replace("from .transformer import TransformerEncoder",
                                    "from torch.nn import TransformerEncoder")
    assert found(torch_own) == [(line_of(torch_own, "src_key_padding_mask=pad"), "MC508")]


# Held-out 68's VALL-E decoder: a True triu with diagonal 0 handed to a decoder layer whose
# parameter goes to MultiheadAttention as attn_mask (True = masked).
TRIANGLE_TO_LAYER = """\
import torch
import torch.nn as nn


class DecoderLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x, mask):
        return x + self.self_attn(x, x, x, attn_mask=mask, need_weights=False)[0]


class Decoder(nn.Module):
    def __init__(self, d=8, n=2):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d) for _ in range(n))

    def forward(self, x):
        t = x.size(1)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=0)
        for layer in self.layers:
            x = layer(x, causal)
        return x
"""


def test_a_diagonal_zero_triangle_handed_to_an_mha_layer_is_reported(found: Found) -> None:
    assert found(TRIANGLE_TO_LAYER) == [(line_of(TRIANGLE_TO_LAYER, "diagonal=0"), "MC503")]
    fixed = TRIANGLE_TO_LAYER.replace("diagonal=0", "diagonal=1")
    assert found(fixed) == []


def test_a_diagonal_zero_triangle_in_mha_leaves_the_first_query_nothing() -> None:
    mha = torch.nn.MultiheadAttention(4, 1, batch_first=True)
    x = torch.randn(1, 3, 4)
    wrong = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=0)
    _, weights = mha(x, x, x, attn_mask=wrong)
    assert torch.isnan(weights[0, 0]).all()  # query 0 hides every key, itself included


# Held-out 68's ECAPA pooling: SpeechBrain's `length_to_mask`, a comparison cast to a dtype
# the helper is given (or the lengths' own), multiplied into the attention logits.
CAST_MASK_PRODUCT = """\
import torch
import torch.nn.functional as F


def length_to_mask(length, max_len, dtype=None, device=None):
    mask = torch.arange(max_len, device=length.device).expand(len(length), max_len) < (
        length.unsqueeze(1))
    if dtype is None:
        dtype = length.dtype
    return torch.as_tensor(mask, dtype=dtype, device=device)


def attentive_pool(x, attn, lengths):
    L = x.shape[-1]
    mask = length_to_mask(lengths * L, max_len=L, device=x.device).unsqueeze(1)
    attn = attn * mask
    attn = F.softmax(attn, dim=2)
    return (x * attn).sum(dim=2)
"""


def test_a_cast_comparison_multiplied_into_logits_is_reported(found: Found) -> None:
    assert found(CAST_MASK_PRODUCT) == [(line_of(CAST_MASK_PRODUCT, "attn * mask"), "MC520")]
    fixed = CAST_MASK_PRODUCT.replace("attn = attn * mask",
                                      'attn = attn.masked_fill(mask == 0, float("-inf"))')
    assert found(fixed) == []


def test_a_cast_mask_multiplied_after_softmax_is_not_reported(found: Found) -> None:
    after = CAST_MASK_PRODUCT.replace(
        "    attn = attn * mask\n    attn = F.softmax(attn, dim=2)\n",
        "    attn = F.softmax(attn, dim=2) * mask\n    attn = attn / attn.sum(2, keepdim=True)\n")
    assert after != CAST_MASK_PRODUCT and found(after) == []


def test_a_zeroed_logit_keeps_weight_after_softmax() -> None:
    attn = torch.tensor([[2.0, 1.0, 3.0]])
    mask = torch.as_tensor(torch.tensor([[True, True, False]]), dtype=torch.float32)
    weights = torch.softmax(attn * mask, dim=-1)
    assert weights[0, 2] > 0.05  # the hidden key gets exp(0) of weight


# Held-out 68's SepFormer block: SpeechBrain's `get_lookahead_mask` (the PyTorch tutorial's
# `generate_square_subsequent_mask`), handed to layers of a ModuleList of ModuleDicts, whose
# attention multiplies its scores by it.
DICT_LAYERS = """\
import torch
import torch.nn as nn


def get_lookahead_mask(x):
    n = x.shape[1]
    mask = (torch.triu(torch.ones((n, n), device=x.device)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))
    return mask.detach().to(x.device)


class SelfAttention(nn.Module):
    def forward(self, x, attn_mask=None):
        scores = x @ x.transpose(-1, -2)
        if attn_mask is not None:
            scores = scores * attn_mask
        return scores.softmax(dim=-1) @ x


class Block(nn.Module):
    def __init__(self, n, causal=True):
        super().__init__()
        self.causal = causal
        self.layers = nn.ModuleList(
            nn.ModuleDict({"attn": SelfAttention(), "norm": nn.LayerNorm(4)}) for _ in range(n))

    def forward(self, x):
        src_mask = get_lookahead_mask(x) if self.causal else None
        for layer in self.layers:
            x = x + layer["attn"](layer["norm"](x), attn_mask=src_mask)
        return x
"""


def test_an_additive_mask_reaching_a_module_dict_layer_that_multiplies_it(found: Found) -> None:
    assert found(DICT_LAYERS) == [(line_of(DICT_LAYERS, "scores * attn_mask"), "MC523")]
    fixed = DICT_LAYERS.replace("scores * attn_mask", "scores + attn_mask")
    assert found(fixed) == []


def test_the_tutorial_mask_is_zero_and_minus_inf() -> None:
    n = 3
    mask = (torch.triu(torch.ones((n, n))) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)
    assert set(mask.flatten().tolist()) == {0.0, float("-inf")}
    scores = torch.tensor([[2.0, 1.0, -1.0], [0.5, 3.0, 1.0], [1.0, 2.0, 4.0]])
    # multiplied: the kept scores become 0 (row 2 is uniform, its scores lost) and a negative
    # score above the diagonal becomes +inf (row 0 is NaN)
    weights = (scores * mask).softmax(-1)
    assert torch.isnan(weights[0]).all()
    assert torch.allclose(weights[2], torch.full((3,), 1 / 3))


# Held-out 70's drug-interaction readout and held-out 71's NARM: a mask made float, or a 0/1
# float built by torch.where, multiplied into the scores softmax reads.
READOUT = """\
import torch


def readout(scores, h, node_mask):
    weights = torch.softmax(scores * node_mask.float(), dim=-1)
    return torch.einsum("bn,bnd->bd", weights, h)


def narm(scores, seq):
    mask = torch.where(seq > 0, torch.tensor([1.0]), torch.tensor([0.0]))
    return torch.softmax(scores * mask, dim=1)
"""


def test_a_float_mask_multiplied_into_softmax_logits_is_reported(found: Found) -> None:
    assert found(READOUT) == [(line_of(READOUT, "node_mask.float()"), "MC520"),
                              (line_of(READOUT, "scores * mask"), "MC520")]


def test_the_same_products_renormalised_after_softmax_are_silent(found: Found) -> None:
    # allennlp's masked_softmax: softmax(x * m) * m, renormalised
    renormalised = READOUT.replace(
        "    weights = torch.softmax(scores * node_mask.float(), dim=-1)\n",
        "    weights = torch.softmax(scores * node_mask.float(), dim=-1) * node_mask.float()\n"
        "    weights = weights / (weights.sum(-1, keepdim=True) + 1e-13)\n").replace(
        "    return torch.softmax(scores * mask, dim=1)\n",
        "    alpha = torch.softmax(scores * mask, dim=1) * mask\n"
        "    return alpha / (alpha.sum(1, keepdim=True) + 1e-13)\n")
    assert renormalised != READOUT and found(renormalised) == []


def test_where_of_one_and_zero_tensors_is_a_float_zero_one_mask() -> None:
    seq = torch.tensor([[3, 5, 0]])
    mask = torch.where(seq > 0, torch.tensor([1.0]), torch.tensor([0.0]))
    assert mask.dtype == torch.float32 and mask.tolist() == [[1.0, 1.0, 0.0]]
    alpha = torch.softmax(torch.tensor([[1.0, 2.0, 3.0]]) * mask, dim=1)
    assert alpha[0, 2] > 0.03  # the padded item keeps exp(0) of weight


# The same triangle filled by the layer it is handed to (a TiSASRec-style attention layer): a guard,
# found before this session too, at the triangle.
TRIANGLE_FILLED_BY_LAYER = """\
import torch
import torch.nn as nn


class Attn(nn.Module):
    def forward(self, q, k, attn_mask):
        w = q @ k.transpose(1, 2)
        w = w.masked_fill(attn_mask, -1e4)
        return w.softmax(-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()

    def forward(self, x):
        t = x.shape[1]
        causal = torch.triu(torch.ones((t, t), dtype=torch.bool))
        return self.attn(x, x, causal)
"""


def test_a_diagonal_zero_triangle_filled_by_the_layer_it_is_handed_to(found: Found) -> None:
    assert found(TRIANGLE_FILLED_BY_LAYER) == [
        (line_of(TRIANGLE_FILLED_BY_LAYER, "torch.triu"), "MC503")]
    fixed = TRIANGLE_FILLED_BY_LAYER.replace("dtype=torch.bool))", "dtype=torch.bool), 1)")
    assert fixed != TRIANGLE_FILLED_BY_LAYER and found(fixed) == []


# Held-out 70's GraphGPS layer: torch_geometric's to_dense_batch gives a (graphs, max_nodes)
# mask, True at real nodes, handed bare to SDPA as attn_mask (read as (queries, keys)).
DENSE_BATCH = """\
import torch.nn as nn
import torch.nn.functional as F
from torch_geometric.utils import to_dense_batch


class GlobalAttention(nn.Module):
    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


class GPSLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = GlobalAttention()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, h, batch):
        h_dense, mask = to_dense_batch(h, batch)
        out = self.attn(h_dense, h_dense, h_dense, mask)
        return out + self.mha(h_dense, h_dense, h_dense, key_padding_mask=~mask)[0]
"""


def test_a_dense_batch_mask_handed_bare_to_sdpa_is_reported(found: Found) -> None:
    # (at the call: the layer's parameter is given the mask by this one call only)
    assert found(DENSE_BATCH) == [
        (line_of(DENSE_BATCH, "out = self.attn(h_dense, h_dense, h_dense, mask)"), "MC515")]
    fixed = DENSE_BATCH.replace("attn_mask=keep)", "attn_mask=keep[:, None, None, :])")
    assert fixed != DENSE_BATCH and found(fixed) == []


def test_a_keyword_multihead_attention_does_not_take_is_another_module(found: Found) -> None:
    # h2gb's GPS layer: `self.self_attn` is nn.MultiheadAttention in one branch of __init__ and
    # a Performer (which takes `mask=`, True = keep) in another
    source = DENSE_BATCH.replace(
        "        out = self.attn(h_dense, h_dense, h_dense, mask)\n",
        "        out = self.mha(h_dense, mask=mask)\n")
    assert source != DENSE_BATCH and found(source) == []
    mha = source.replace("self.mha(h_dense, mask=mask)", "self.mha(h_dense, h_dense, h_dense, "
                         "attn_mask=mask)[0]")
    assert [code for _, code in found(mha)] == ["MC515"]


def test_the_multihead_attention_keywords_are_the_installed_torchs() -> None:
    import inspect

    from maskcheck.lint.checks import _MHA_FORWARD_KEYWORDS

    taken = set(inspect.signature(torch.nn.MultiheadAttention.forward).parameters) - {"self"}
    assert taken == _MHA_FORWARD_KEYWORDS
