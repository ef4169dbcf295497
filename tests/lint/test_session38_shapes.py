"""Shapes of session 38's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
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


# finetrainers' and diffusers' flex providers: `attn_mask.view(attn_mask.size(0), 1,
# attn_mask.size(1), 1)` puts a (batch, seq) mask on the query axis, as `[:, None, :, None]`.
VIEWED = """\
import torch.nn.functional as F


def attend(q, k, v, input_ids, pad_id):
    keep = input_ids != pad_id
    m = keep.view(keep.size(0), 1, keep.size(1), 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
"""


def test_a_view_onto_the_query_axis_is_mc514(found: Found) -> None:
    made = line_of(VIEWED, "m = keep.view")
    assert found(VIEWED) == [(made, "MC514")]
    fixed = VIEWED.replace("keep.size(1), 1)", "1, keep.size(1))")
    assert fixed != VIEWED and found(fixed) == []


def test_a_query_axis_mask_hides_query_rows_not_keys() -> None:
    q = torch.randn(1, 1, 3, 4, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[True, True, False]])
    on_queries = F.scaled_dot_product_attention(q, q, q, attn_mask=keep.view(1, 1, 3, 1))
    # the padded query row hides every key (zeros on torch 2.13's CPU path), and the real rows
    # still see the padded key, as with no mask at all
    assert (on_queries[0, 0, 2] == 0).all()
    assert torch.allclose(on_queries[0, 0, :2], F.scaled_dot_product_attention(q, q, q)[0, 0, :2])


# Held-out 75's TarMAC: an environment's `alive_mask` (1 = the agent is alive) cast to bool and
# handed to key_padding_mask, which reads True as padding.
ALIVE = """\
import torch
from torch import nn


class Comm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, h, alive_mask):
        out, _ = self.attn(h, h, h, key_padding_mask=alive_mask.bool())
        return out * alive_mask.unsqueeze(-1)
"""


def test_a_keep_named_mask_cast_to_bool_as_key_padding_is_mc502(found: Found) -> None:
    assert found(ALIVE) == [(line_of(ALIVE, "key_padding_mask="), "MC502")]
    fixed = ALIVE.replace("key_padding_mask=alive_mask.bool()", "key_padding_mask=alive_mask == 0")
    assert fixed != ALIVE and found(fixed) == []


# Held-out 77's Sparse Transformer: the "fixed" pattern ORs two comparisons of positions the
# file does not show as tensors; the mask is bool either way, and adding it to the scores is
# MC509.
FIXED_PATTERN = """\
import torch


def get_attn_mask(n, ctx, cols=1):
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    causal = q >= k
    same_block = q // ctx == k // ctx
    summary = k % ctx >= ctx - cols
    return causal & (same_block | summary)


def attend(q, k, v, ctx):
    w = q @ k.transpose(-2, -1)
    w = w + get_attn_mask(q.shape[-2], ctx)
    return torch.softmax(w, dim=-1) @ v
"""


def test_or_of_two_comparisons_is_a_bool_mask(found: Found) -> None:
    assert found(FIXED_PATTERN) == [(line_of(FIXED_PATTERN, "w = w + get_attn_mask"), "MC509")]
    fixed = FIXED_PATTERN.replace(
        "w = w + get_attn_mask(q.shape[-2], ctx)",
        "w = w.masked_fill(~get_attn_mask(q.shape[-2], ctx), float('-inf'))")
    assert fixed != FIXED_PATTERN and found(fixed) == []


def test_a_bool_mask_added_to_scores_masks_nothing() -> None:
    w = torch.zeros(2, 2)
    keep = torch.tensor([[True, False], [True, True]])
    assert (w + keep).softmax(-1)[0, 1] > 0.2  # the hidden key still weighs


# Held-out 75's pi0 expert: the policy is cast to a config record's dtype, whose default is
# bfloat16, and torch.where fills the scores with float32's minimum (-inf in bfloat16).
PI0 = """\
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Config:
    dtype: torch.dtype = torch.bfloat16


class Expert(nn.Module):
    def forward(self, q, k, attention_mask):
        att_weights = q @ k.transpose(-2, -1)
        masked = torch.where(attention_mask[:, None], att_weights, torch.finfo(torch.float32).min)
        return masked.softmax(dim=-1)


def build(cfg: Config):
    return Expert().to(cfg.dtype)
"""


def test_a_cast_to_a_config_fields_half_dtype_makes_mc517(found: Found) -> None:
    assert found(PI0) == [(line_of(PI0, "masked = torch.where"), "MC517")]
    fixed = PI0.replace("torch.finfo(torch.float32).min", "torch.finfo(att_weights.dtype).min")
    assert fixed != PI0 and found(fixed) == []


def test_float32_minimum_is_minus_inf_in_bfloat16() -> None:
    s = torch.zeros(1, 2, dtype=torch.bfloat16)
    out = torch.where(torch.tensor([[True, False]]), s, torch.finfo(torch.float32).min)
    assert out.dtype == torch.bfloat16 and out[0, 1].item() == float("-inf")


# Held-out 76's BEVFormer: the sigmoid's output, viewed and permuted, is filled in place; a
# view shares the storage autograd saved, so backward raises.
VIEWED_SIGMOID = """\
from torch import nn


class Weights(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, 8)

    def forward(self, query, hits):
        b, q, _ = query.shape
        weights = self.proj(query).sigmoid().view(b, q, 2, 4).permute(0, 2, 1, 3)
        weights.masked_fill_(~hits, 0.0)
        return weights.sum()
"""


def test_an_in_place_fill_of_a_view_of_sigmoid_is_mc505(found: Found) -> None:
    assert found(VIEWED_SIGMOID) == [(line_of(VIEWED_SIGMOID, "masked_fill_"), "MC505")]
    fixed = VIEWED_SIGMOID.replace("weights.masked_fill_(~hits, 0.0)",
                                   "weights = weights.masked_fill(~hits, 0.0)")
    assert fixed != VIEWED_SIGMOID and found(fixed) == []


def test_filling_a_view_of_a_saved_output_breaks_backward() -> None:
    x = torch.randn(2, 8, requires_grad=True)
    w = x.sigmoid().view(2, 2, 4).permute(0, 2, 1)
    w.masked_fill_(w > 0.5, 0.0)
    with pytest.raises(RuntimeError, match="inplace operation"):
        w.sum().backward()


# Held-out 76's PlanT: a CLS column of ones joined to the (batch, seq) keep-mask, then handed
# bare to SDPA, which reads a 2-D attn_mask as (queries, keys).
CLS_COLUMN = """\
import torch
import torch.nn.functional as F
from torch import nn


class Layer(nn.Module):
    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = Layer()

    def forward(self, x, keep):
        b = x.size(0)
        keep = torch.cat([keep.new_ones(b, 1), keep], dim=1)
        return self.layer(x, x, x, keep)
"""


def test_a_keep_mask_with_a_cls_column_is_batch_by_seq(found: Found) -> None:
    # (reported at the call that hands the (batch, seq) mask to the layer)
    assert found(CLS_COLUMN) == [(line_of(CLS_COLUMN, "self.layer(x, x, x, keep)"), "MC515")]
    fixed = CLS_COLUMN.replace("self.layer(x, x, x, keep)",
                               "self.layer(x, x, x, keep[:, None, None, :])")
    assert fixed != CLS_COLUMN and found(fixed) == []


# Held-out 77's Longformer: the inverse of a mask named for what it hides, cast to the query's
# dtype, is a float 0/1 keep-mask that SDPA adds to the scores.
INVERTED_CAST = """\
import torch.nn.functional as F


def attend(q, k, v, is_index_masked):
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=(~is_index_masked)[:, None, None, :].to(q.dtype))
"""


def test_the_inverse_of_a_masked_flag_cast_to_float_is_mc508(found: Found) -> None:
    assert found(INVERTED_CAST) == [(line_of(INVERTED_CAST, "attn_mask="), "MC508")]
    fixed = INVERTED_CAST.replace(".to(q.dtype)", "")
    assert fixed != INVERTED_CAST and found(fixed) == []


def test_a_key_padding_mask_by_that_name_may_hold_kept_keys(found: Found) -> None:
    # flash-attn's testing helpers: key_padding_mask is True at the kept keys there, so `~` of
    # it is no keep-mask by name
    source = """\
from einops import rearrange


def attention_ref(scores, key_padding_mask):
    scores.masked_fill_(rearrange(~key_padding_mask, "b s -> b 1 1 s"), float("-inf"))
    return scores.softmax(dim=-1)
"""
    assert found(source) == []


# Held-out 77's MeMViT: a module constant `-torch.finfo(torch.float32).max` filled into scores
# that run under bfloat16 autocast.
NEG_MAX = """\
import torch

MASK_VALUE = -torch.finfo(torch.float32).max


def attend(attn, keep):
    return attn.masked_fill(~keep[:, None, None, :], MASK_VALUE).softmax(-1)


def run(attn, keep):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return attend(attn, keep)
"""


def test_minus_float32_max_is_float32s_minimum(found: Found) -> None:
    assert found(NEG_MAX) == [(line_of(NEG_MAX, "MASK_VALUE).softmax"), "MC517")]
    fixed = NEG_MAX.replace("MASK_VALUE).softmax", "torch.finfo(attn.dtype).min).softmax")
    assert fixed != NEG_MAX and found(fixed) == []


def test_float32_minimum_cannot_fill_bfloat16() -> None:
    with pytest.raises(RuntimeError, match="overflow"):
        torch.zeros(2, dtype=torch.bfloat16).masked_fill(
            torch.tensor([True, False]), -torch.finfo(torch.float32).max)


# Held-out 77's attention-sink scorer: the cached keys go through the file's rotary helper, and
# is_causal=L > 1 then aligns the triangle to the top-left of the cache.
ROTARY_CACHE = """\
import torch
import torch.nn.functional as F


def rotate(x, cos, sin):
    return x * cos + torch.flip(x, dims=[-1]) * sin


def attend(q, k, v, past, cos, sin):
    L = q.size(2)
    k = torch.cat([past[0], k], dim=2)
    v = torch.cat([past[1], v], dim=2)
    k = rotate(k, cos, sin)
    return F.scaled_dot_product_attention(q, k, v, is_causal=L > 1)
"""


def test_cached_keys_stay_cached_through_a_helper(found: Found) -> None:
    assert found(ROTARY_CACHE) == [(line_of(ROTARY_CACHE, "is_causal=L > 1"), "MC510")]
    fixed = ROTARY_CACHE.replace("is_causal=L > 1)", "attn_mask=torch.ones(L, k.size(2), "
                                 "dtype=torch.bool).tril(k.size(2) - L))")
    assert fixed != ROTARY_CACHE and found(fixed) == []


def test_is_causal_with_a_cache_hides_the_cache_from_new_queries() -> None:
    q = torch.randn(1, 1, 2, 4, generator=torch.Generator().manual_seed(0))
    k = torch.randn(1, 1, 5, 4, generator=torch.Generator().manual_seed(1))
    top_left = F.scaled_dot_product_attention(q, k, k, is_causal=True)
    bottom_right = F.scaled_dot_product_attention(
        q, k, k, attn_mask=torch.ones(2, 5, dtype=torch.bool).tril(3))
    assert not torch.allclose(top_left, bottom_right)
    assert torch.allclose(top_left[0, 0, 0], k[0, 0, 0])  # the first new query sees one key


# Held-out 75's Body Transformer mixes layers: `Masked(...) if masked else
# nn.MultiheadAttention(...)`. A call with two arguments can only be the file's own module, whose
# forward multiplies the scores by its bias; the call with q, k, v and key_padding_mask is
# torch's.
EITHER_MODULE = """\
import torch
from torch import nn


def make_bias(n):
    reach = torch.eye(n, dtype=torch.bool)
    return torch.zeros(n, n).masked_fill(~reach, float("-inf"))


class Masked(nn.Module):
    def forward(self, x, bias):
        scores = (x @ x.transpose(-2, -1)) * bias
        return scores.softmax(dim=-1) @ x


class Layer(nn.Module):
    def __init__(self, d, masked):
        super().__init__()
        self.masked = masked
        self.attn = Masked() if masked else nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x, bias, kpm):
        if self.masked:
            h = self.attn(x, bias)
        else:
            h, _ = self.attn(x, x, x, key_padding_mask=kpm)
        return x + h


def run(x, kpm):
    layer = Layer(4, True)
    return layer(x, make_bias(3), kpm)
"""


def test_a_module_or_torchs_attention_is_read_by_the_call(found: Found) -> None:
    assert found(EITHER_MODULE) == [(line_of(EITHER_MODULE, "h = self.attn(x, bias)"), "MC523")]
    fixed = EITHER_MODULE.replace("* bias", "+ bias")
    assert fixed != EITHER_MODULE and found(fixed) == []
    # the call with q, k, v goes to torch's module: a tokenizer's mask there is MC502
    hf_mask = fixed.replace("kpm", "attention_mask")
    assert found(hf_mask) == [(line_of(hf_mask, "key_padding_mask=attention_mask"), "MC502")]


# Held-out 76's VectorNet: a helper lays a per-token mask on the query axis; the attention that
# fills where it is 0 is another module's.
QUERY_AXIS_HELPER = """\
import torch
from torch import nn


def get_attention_mask(polyline_valid):
    return polyline_valid.unsqueeze(1).unsqueeze(3)


class GlobalGraph(nn.Module):
    def forward(self, nodes, attention_mask):
        scores = nodes[:, None] @ nodes[:, None].transpose(-1, -2)
        scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
        return scores.softmax(dim=-1) @ nodes[:, None]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.global_graph = GlobalGraph()

    def forward(self, nodes, polyline_valid):
        return self.global_graph(nodes, get_attention_mask(polyline_valid))
"""


def test_a_helper_laying_a_token_mask_on_the_query_axis_is_mc514(found: Found) -> None:
    made = line_of(QUERY_AXIS_HELPER, "return polyline_valid.unsqueeze(1).unsqueeze(3)")
    assert found(QUERY_AXIS_HELPER) == [(made, "MC514")]
    fixed = QUERY_AXIS_HELPER.replace(".unsqueeze(3)", ".unsqueeze(2)")
    assert fixed != QUERY_AXIS_HELPER and found(fixed) == []
    # a mask named for the queries' side is laid there on purpose
    query_side = QUERY_AXIS_HELPER.replace("polyline_valid", "query_valid")
    assert found(query_side) == []


# Held-out 79's trial matcher: BERT's `get_extended_attention_mask` without the `(1 - m) * min`
# step, cast to the dtype of the hidden states `h`, then added to the scores two modules down.
EXTENDED_CAST = """\
import torch
from torch import nn


class Attn(nn.Module):
    def forward(self, scores, attention_mask):
        scores = scores + attention_mask
        return scores.softmax(-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.ln = nn.LayerNorm(4)
        self.attn = Attn()

    def get_extended_attention_mask(self, attention_mask, dtype):
        return attention_mask[:, None, None, :].to(dtype)

    def forward(self, input_ids, attention_mask):
        h = self.ln(self.emb(input_ids))
        ext = self.get_extended_attention_mask(attention_mask, h.dtype)
        return self.attn(h @ h.transpose(-1, -2), ext)
"""


def test_a_keep_mask_cast_to_the_hidden_states_dtype_is_mc508(found: Found) -> None:
    made = line_of(EXTENDED_CAST, "return attention_mask[:, None, None, :].to(dtype)")
    assert found(EXTENDED_CAST) == [(made, "MC508")]
    fixed = EXTENDED_CAST.replace(
        "return attention_mask[:, None, None, :].to(dtype)",
        "return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min")
    assert fixed != EXTENDED_CAST and found(fixed) == []


# Held-out 79's Swin-UNETR: Swin's shifted-window mask (-100 across regions, 0 within one)
# multiplied into the scores instead of added.
SWIN = """\
import torch


def compute_mask(mask_windows):
    attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
    return attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(
        attn_mask == 0, float(0.0))


def attend(q, k, v, mask_windows):
    attn = q @ k.transpose(-2, -1)
    attn = attn * compute_mask(mask_windows).unsqueeze(1)
    return attn.softmax(dim=-1) @ v
"""


def test_swins_window_mask_multiplied_is_mc523(found: Found) -> None:
    assert found(SWIN) == [(line_of(SWIN, "attn = attn * compute_mask"), "MC523")]
    fixed = SWIN.replace("attn * compute_mask", "attn + compute_mask")
    assert fixed != SWIN and found(fixed) == []


def test_swins_minus_100_hides_a_key() -> None:
    scores = torch.zeros(1, 3)
    bias = torch.tensor([[0.0, -100.0, 0.0]])
    assert (scores + bias).softmax(-1)[0, 1] < 1e-40  # added: the key is hidden
    assert (scores * bias).softmax(-1)[0, 1] > 0.3  # multiplied: it is not


# Held-out 80's DPR reader: span scores (every start against every end) hide the spans that
# end before they start, below the diagonal: right for spans, not a causal mask (no MC521).
SPANS = """\
import torch


def best_span(start_logits, end_logits, max_len=4):
    n = start_logits.size(0)
    scores = start_logits[:, None] + end_logits[None, :]
    ones = torch.ones(n, n, dtype=torch.bool)
    valid = ones.triu() & ~ones.triu(max_len)
    scores = scores.masked_fill(~valid, float("-inf"))
    return divmod(scores.flatten().argmax().item(), n)
"""


def test_span_scores_hide_spans_that_end_before_they_start(found: Found) -> None:
    assert found(SPANS) == []
    attention = SPANS.replace("start_logits[:, None] + end_logits[None, :]",
                              "start_logits @ end_logits.T")
    assert found(attention) == [(line_of(attention, "scores.masked_fill(~valid"), "MC521")]


# Held-out 80's SPLADE: relu's output, filled in place; relu's backward reads its output.
RELU = """\
import torch
from torch import nn


class Splade(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 8)

    def forward(self, h, attention_mask):
        act = torch.relu(self.proj(h))
        act.masked_fill_(attention_mask.unsqueeze(-1) == 0, 0.0)
        return torch.log1p(act).amax(dim=1)
"""


def test_an_in_place_fill_of_relus_output_is_mc505(found: Found) -> None:
    assert found(RELU) == [(line_of(RELU, "act.masked_fill_"), "MC505")]
    fixed = RELU.replace("act.masked_fill_(", "act = act.masked_fill(")
    assert fixed != RELU and found(fixed) == []


def test_relu_saves_its_output_for_backward() -> None:
    x = torch.rand(2, 3, requires_grad=True)
    y = torch.relu(x)
    y.masked_fill_(torch.tensor([[True, False, False], [False] * 3]), 0.0)
    with pytest.raises(RuntimeError, match="inplace operation"):
        y.sum().backward()


# Held-out 80's poly-encoder (ParlAI): the encoder returns `input_ids != opt["null_idx"]` under
# Hugging Face's name, and the caller hands it to key_padding_mask.
POLY = """\
import torch
from torch import nn

opt = {"null_idx": 0}


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, input_ids):
        attention_mask = input_ids != opt["null_idx"]
        return self.emb(input_ids), attention_mask


class Poly(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)

    def forward(self, ids, codes):
        out, attention_mask = self.encoder(ids)
        rep, _ = self.attn(codes, out, out, key_padding_mask=attention_mask)
        return rep
"""


def test_a_pad_test_against_an_options_pad_index_is_a_keep_mask(found: Found) -> None:
    assert found(POLY) == [(line_of(POLY, "key_padding_mask=attention_mask"), "MC502")]
    fixed = POLY.replace("key_padding_mask=attention_mask", "key_padding_mask=~attention_mask")
    assert fixed != POLY and found(fixed) == []


# fresh57's wiola: a causal plane of 0 and finfo.min made by torch.where of 0-d tensors, plus a
# padding plane of finfo.min: -inf where both hide a key.
WHERE_PLANES = """\
import torch


def build(q_len, kv_len, dtype, key_padding):
    min_val = torch.finfo(dtype).min
    i = torch.arange(q_len)[:, None]
    j = torch.arange(kv_len)[None, :]
    allowed = j <= (kv_len - q_len + i)
    mask = torch.where(allowed, torch.zeros((), dtype=dtype), torch.full((), min_val, dtype=dtype))
    pad = (1 - key_padding[:, None, None, :].to(dtype)) * min_val
    return mask + pad
"""


def test_a_where_of_zero_and_finfo_min_is_a_min_plane(found: Found) -> None:
    assert found(WHERE_PLANES) == [(line_of(WHERE_PLANES, "return mask + pad"), "MC513")]
    fixed = WHERE_PLANES.replace("return mask + pad", "return torch.minimum(mask, pad)")
    assert fixed != WHERE_PLANES and found(fixed) == []


def test_two_min_planes_overflow_where_both_hide() -> None:
    low = torch.finfo(torch.float32).min
    both = torch.tensor([low]) + torch.tensor([low])
    assert both.item() == float("-inf")


def test_a_helpers_query_axis_mask_is_right_where_scores_are_keys_first(found: Found) -> None:
    # scores laid out (batch, heads, keys, queries) and softmaxed over dim=-2: the third axis is
    # the keys', and the helper's layout puts the tokens there on purpose
    keys_first = QUERY_AXIS_HELPER.replace("scores.softmax(dim=-1)", "scores.softmax(dim=-2)")
    assert keys_first != QUERY_AXIS_HELPER and found(keys_first) == []
