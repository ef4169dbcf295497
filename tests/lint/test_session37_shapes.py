"""Shapes of session 37's reach: the bad source next to the finding it must give, its correct
form next to none, and the torch 2.13 fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# Held-out 27's, 41's and 63's layers: a keep-mask cast to the query's dtype on its own line,
# then handed to SDPA by name. The cast is the line to change, and the finding sits there.
CAST_THEN_SDPA = """\
import torch
import torch.nn.functional as F


def attend(q, k, v, keep):
    attn_mask = keep[:, None, None, :].to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
"""


def test_a_cast_used_by_its_name_is_reported_at_the_cast(found: Found) -> None:
    cast = line_of(CAST_THEN_SDPA, "attn_mask = keep")
    assert found(CAST_THEN_SDPA) == [(cast, "MC508")]
    fixed = CAST_THEN_SDPA.replace(".to(q.dtype)", ".bool()")
    assert fixed != CAST_THEN_SDPA and found(fixed) == []


def test_a_cast_reshaped_at_its_use_is_reported_at_the_use(found: Found) -> None:
    # held-out 5's and the first held-out set's layers: the use lays the mask on its axes, and
    # either line may be the one to change; they mark the use
    reshaped = CAST_THEN_SDPA.replace(
        "keep[:, None, None, :].to(q.dtype)", "keep.to(q.dtype)").replace(
        "attn_mask=attn_mask)", "attn_mask=attn_mask[:, None, None, :])")
    use = line_of(reshaped, "F.scaled_dot_product_attention")
    assert found(reshaped) == [(use, "MC508")]


def test_a_float_keep_mask_adds_one_to_the_kept_keys() -> None:
    q = torch.randn(1, 1, 3, 4, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[1, 1, 0]])
    as_float = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :].to(q.dtype))
    as_bool = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :].bool())
    assert not torch.allclose(as_float, as_bool, atol=1e-4)  # the padded key still weighs


# Held-out 72's Temporal Fusion Transformer helper: left padding marked by position < the
# number of pads. That is True at the padding, so filling there is right (no MC519).
PAD_COUNT = """\
import torch


def padding_bias(lengths, max_len, dtype=torch.float32):
    n_pad = max_len - lengths
    pad = torch.arange(max_len)[None, :] < n_pad[:, None]
    return torch.zeros(pad.shape, dtype=dtype).masked_fill(pad, torch.finfo(dtype).min)
"""


def test_positions_below_a_pad_count_are_padding_not_keep(found: Found) -> None:
    assert found(PAD_COUNT) == []
    keep = PAD_COUNT.replace("    n_pad = max_len - lengths\n", "").replace("n_pad", "lengths")
    fill = line_of(keep, "masked_fill(pad")
    assert found(keep) == [(fill, "MC519")]  # `arange < lengths` is True at real positions


def test_positions_below_the_pad_count_are_the_left_padding() -> None:
    lengths = torch.tensor([3, 5])
    pad = torch.arange(5)[None, :] < (5 - lengths)[:, None]
    assert pad.tolist() == [[True, True, False, False, False], [False] * 5]


# Held-out 72's mTAN: observed-value masks made float, joined with themselves, then multiplied
# into the logits inside softmax.
MTAN = """\
import torch
import torch.nn.functional as F


def attend(scores, values):
    mask = (~torch.isnan(values)).float()
    mask = torch.cat([mask, mask], dim=2)
    return F.softmax(scores * mask.unsqueeze(-3), dim=-2)
"""


def test_zero_one_masks_joined_stay_zero_one(found: Found) -> None:
    assert found(MTAN) == [(line_of(MTAN, "F.softmax"), "MC520")]
    values = MTAN.replace("torch.cat([mask, mask], dim=2)", "torch.cat([mask, values], dim=2)")
    assert found(values) == []  # the data joined in is no 0/1 mask


def test_a_zeroed_logit_still_takes_weight() -> None:
    scores = torch.tensor([[2.0, 1.0, 5.0]])
    weights = F.softmax(scores * torch.cat([torch.ones(1, 2), torch.zeros(1, 1)], dim=1), -1)
    assert weights[0, 2] > 0.05  # exp(0) against exp(2) and exp(1)


# Held-out 74's DNABERT head: the tokenizer's mask spelled `.to(torch.bool)` given to
# key_padding_mask is MC502's named case, as `.bool()` is.
TO_BOOL = """\
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, 2), 2)

    def forward(self, hidden, attention_mask):
        return self.encoder(hidden, src_key_padding_mask=attention_mask.to(torch.bool))
"""


@pytest.mark.parametrize("cast", [".to(torch.bool)", ".to(dtype=torch.bool)", ".bool()"])
def test_a_cast_to_bool_keeps_the_name_convention(found: Found, cast: str) -> None:
    source = TO_BOOL.replace(".to(torch.bool)", cast)
    assert found(source) == [(line_of(source, "src_key_padding_mask"), "MC502")]
    fixed = source.replace(f"attention_mask{cast}", f"attention_mask{cast} == 0")
    assert found(fixed) == []


# Held-out 74's CodonBERT: the model inverts the tokenizer's mask for SDPA inside its forward
# (reported there); the training loop that passes the tokenizer's mask is the same bug, once.
CALLER_ECHO = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def forward(self, h, attn_mask):
        q = h[:, None]
        return F.scaled_dot_product_attention(q, q, q, attn_mask=attn_mask)[:, 0]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(2)])

    def forward(self, input_ids, attention_mask):
        h = input_ids
        pad = attention_mask == 0
        for layer in self.layers:
            h = layer(h, attn_mask=pad[:, None, None, :])
        return h


def train(model, tok, texts, h):
    batch = tok(texts, padding=True, return_tensors="pt")
    return model(h, batch["attention_mask"])
"""


def test_the_callers_report_of_a_use_reported_in_the_callee_is_dropped(found: Found) -> None:
    assert found(CALLER_ECHO) == [(line_of(CALLER_ECHO, "h = layer(h"), "MC511")]
    # a forward that does not read as a tokenizer's pair: the caller's report is the one
    renamed = CALLER_ECHO.replace(
        "def forward(self, input_ids, attention_mask):\n        h = input_ids\n",
        "def forward(self, h, attention_mask):\n")
    assert found(renamed) == [(line_of(renamed, "return model(h"), "MC511")]


def test_padding_true_as_sdpa_bool_mask_keeps_only_the_padding() -> None:
    q = torch.randn(1, 1, 3, 4, generator=torch.Generator().manual_seed(1))
    pad = torch.tensor([[False, False, True]])[:, None, None, :]
    weights = torch.softmax(torch.where(pad, q @ q.transpose(-1, -2), float("-inf")), -1)
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=pad)
    assert torch.allclose(out, weights @ q, atol=1e-5)
    assert torch.allclose(out[0, 0], q[0, 0, 2].expand(3, 4), atol=1e-5)  # only the pad key


# Held-out 73's MulT: a pair mask inverted and filled with -inf, softmax taken in float32.
MULT = """\
import torch
import torch.nn.functional as F


def attend(q, k, v, query_keep, key_keep):
    w = q @ k.transpose(-1, -2)
    w = w.masked_fill(~(query_keep[:, None, :, None] & key_keep[:, None, None, :]), float("-inf"))
    w = F.softmax(w.float(), dim=-1).type_as(w)
    return w @ v
"""


def test_softmax_of_upcast_scores_reads_the_scores(found: Found) -> None:
    assert found(MULT) == [(line_of(MULT, "masked_fill"), "MC507")]
    keys_only = MULT.replace("~(query_keep[:, None, :, None] & key_keep[:, None, None, :])",
                             "~key_keep[:, None, None, :]")
    assert found(keys_only) == []


def test_a_row_filled_with_minus_inf_everywhere_is_nan() -> None:
    w = torch.zeros(1, 2, 2).masked_fill(torch.tensor([[[True, True], [False, True]]]),
                                         float("-inf"))
    assert torch.isnan(F.softmax(w.float(), dim=-1)[0, 0]).all()


# Held-out 70's Uni-Mol: a pad test cast to a learned bias's dtype and added to that bias,
# which the layers add to their scores.
UNIMOL = """\
import torch

PAD = 0


def attn_bias(tokens, dist, proj):
    graph_attn_bias = proj(dist).permute(0, 3, 1, 2).contiguous()
    atom_keep = tokens.ne(PAD)
    return graph_attn_bias + atom_keep[:, None, None, :].to(graph_attn_bias.dtype)
"""


def test_a_pad_test_cast_and_added_to_an_attention_bias_is_found(found: Found) -> None:
    assert found(UNIMOL) == [(line_of(UNIMOL, "return graph_attn_bias"), "MC508")]
    fixed = UNIMOL.replace(
        "graph_attn_bias + atom_keep[:, None, None, :].to(graph_attn_bias.dtype)",
        "graph_attn_bias.masked_fill(~atom_keep[:, None, None, :], float('-inf'))")
    assert found(fixed) == []
    named = UNIMOL.replace("graph_attn_bias", "attention_bias")
    assert found(named) == [(line_of(named, "return attention_bias"), "MC508")]
    other = UNIMOL.replace("graph_attn_bias", "features")  # not attention's: no reading
    assert found(other) == []


# Held-out 68's VALL-E: text rows see the text only, audio rows see the text and a triangle
# of the audio, joined by F.pad and torch.concat; diagonal 0 hides each audio query's own key.
VALLE = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def build_xy_attn_mask(x_len, y_len):
    x_attn_mask = F.pad(torch.zeros((x_len, x_len), dtype=torch.bool), (0, y_len), value=True)
    y_causal = torch.triu(torch.ones(y_len, y_len, dtype=torch.bool), diagonal=0)
    y_attn_mask = F.pad(y_causal, (x_len, 0), value=False)
    return torch.concat([x_attn_mask, y_attn_mask], dim=0)


class Decoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, xy, x_len, y_len):
        mask = build_xy_attn_mask(x_len, y_len)
        return self.self_attn(xy, xy, xy, attn_mask=mask, need_weights=False)[0]
"""


def test_a_diagonal_zero_triangle_padded_and_joined_is_found(found: Found) -> None:
    assert found(VALLE) == [(line_of(VALLE, "y_causal = torch.triu"), "MC503")]
    fixed = VALLE.replace("diagonal=0", "diagonal=1")
    assert found(fixed) == []
    # padded on the right, the triangle no longer sits on the queries' own keys: not read
    right = VALLE.replace("(x_len, 0), value=False", "(0, x_len), value=False")
    assert found(right) == []


def test_the_joined_mask_hides_each_audio_query_from_itself() -> None:
    x_len, y_len = 2, 3
    x_rows = F.pad(torch.zeros((x_len, x_len), dtype=torch.bool), (0, y_len), value=True)
    y_rows = F.pad(torch.triu(torch.ones(y_len, y_len, dtype=torch.bool), diagonal=0),
                   (x_len, 0), value=False)
    mask = torch.concat([x_rows, y_rows], dim=0)
    assert mask.dtype == torch.bool
    assert all(mask[x_len + i, x_len + i] for i in range(y_len))  # each audio query, itself


# Held-out 71's TiSASRec: layers appended to a ModuleList in a loop and called by index; the
# layer fills with torch.where(mask, paddings, w), paddings a tensor of -2 ** 32 + 1.
TISASREC = """\
import torch
import torch.nn as nn


class TimeAwareAttention(nn.Module):
    def forward(self, q, k, attn_mask):
        w = q.matmul(k.transpose(1, 2))
        attn_mask = attn_mask.unsqueeze(0).expand(w.shape[0], -1, -1)
        paddings = torch.ones(w.shape, device=w.device) * (-2 ** 32 + 1)
        w = torch.where(attn_mask, paddings, w)
        return w.softmax(-1)


class Model(nn.Module):
    def __init__(self, n_layers):
        super().__init__()
        self.attention_layers = nn.ModuleList()
        for _ in range(n_layers):
            self.attention_layers.append(TimeAwareAttention())

    def forward(self, seqs):
        tl = seqs.shape[1]
        attention_mask = torch.triu(torch.ones((tl, tl), dtype=torch.bool))
        for i in range(len(self.attention_layers)):
            seqs = self.attention_layers[i](seqs, seqs, attention_mask)
        return seqs
"""


def test_a_triangle_handed_to_appended_layers_filling_by_where_is_found(found: Found) -> None:
    assert found(TISASREC) == [(line_of(TISASREC, "attention_mask = torch.triu"), "MC503")]
    fixed = TISASREC.replace("dtype=torch.bool))", "dtype=torch.bool), diagonal=1)")
    assert found(fixed) == []
    # a class of the file that drops the mask appended beside it: which layer runs at each
    # index is not known, so nothing is read through the calls
    mixed = TISASREC.replace(
        "class Model(nn.Module):",
        "class Plain(nn.Module):\n    def forward(self, q, k, attn_mask):\n        return q\n\n\n"
        "class Model(nn.Module):").replace(
        "        for _ in range(n_layers):\n",
        "        self.attention_layers.append(Plain())\n        for _ in range(n_layers):\n")
    assert mixed != TISASREC and found(mixed) == []


def test_where_with_a_tensor_of_minus_two_to_the_32_hides_the_positions() -> None:
    w = torch.zeros(1, 2, 2)
    mask = torch.triu(torch.ones(2, 2, dtype=torch.bool))[None]
    out = torch.where(mask, torch.ones(w.shape) * (-2 ** 32 + 1), w).softmax(-1)
    assert out[0, 1, 1] == 0 and out[0, 1, 0] == 1  # the diagonal is hidden too
    assert torch.allclose(out[0, 0], torch.full((2,), 0.5))  # row 0 hides every key: uniform
