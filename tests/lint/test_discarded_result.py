"""MC525: an out-of-place fill whose result is thrown away (real shapes from public code)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]

# zeta nn/attention/multi_modal_causal_attention.py:56
ZETA = '''import torch
from torch import nn


class MultiModalCausalAttention(nn.Module):
    def forward(self, x, mask):
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        dots_textual = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if mask is not None:
            dots_textual.masked_fill(~mask, float("-inf"))
        attn = dots_textual.softmax(dim=-1)
        return torch.einsum("bhij,bhjd->bhid", attn, v)
'''

# espnet2/enh/layers/mask_estimator.py:82 (also funasr's copy)
ESPNET = '''import torch
from espnet.nets.pytorch_backend.nets_utils import make_pad_mask


def estimate(self, xs, ilens):
    masks = []
    for linear in self.linears:
        mask = torch.sigmoid(linear(xs))
        mask.masked_fill(make_pad_mask(ilens, mask, length_dim=2), 0)
        masks.append(mask)
    return tuple(masks)
'''


def test_a_masked_fill_statement_is_reported(found: Found) -> None:
    assert found(ZETA) == [(10, "MC525")]


def test_a_masked_fill_statement_in_a_loop_is_reported(found: Found) -> None:
    assert found(ESPNET) == [(9, "MC525")]


@pytest.mark.parametrize("fixed", [
    "dots_textual = dots_textual.masked_fill(~mask, float(\"-inf\"))",
    "dots_textual.masked_fill_(~mask, float(\"-inf\"))",
    "dots_textual = torch.where(mask, dots_textual, float(\"-inf\"))",
])
def test_the_assigned_or_in_place_fill_is_silent(found: Found, fixed: str) -> None:
    source = ZETA.replace('dots_textual.masked_fill(~mask, float("-inf"))', fixed)
    assert fixed in source
    assert found(source) == []


@pytest.mark.parametrize("statement", [
    "model.float()",  # nn.Module.float() works in place
    "x.to(device)",  # a module's .to() works in place; casts are never reported
    "torch.where(x > 0, x, 0, out=x)",  # out= writes the result
    "torch.where(x > 0)",  # one argument: nonzero(), used for its value elsewhere
    "np.triu(x)",  # not torch's
    "df.where(df > 0, 0, inplace=True)",  # pandas, in place
    "df.where(df > 0, 0)",  # pandas' DataFrame.where: not a tensor method
    "x.masked_fill_(x > 0, 0.0)",  # the in-place form
    "print(x.masked_fill(x > 0, 0.0))",  # the result is used
])
def test_statements_that_do_something_are_silent(found: Found, statement: str) -> None:
    source = ("import numpy as np\nimport torch\n\n\n"
              f"def f(model, x, df, device):\n    {statement}\n    return x\n")
    assert found(source) == []


def test_torch_triu_and_where_statements_are_reported(found: Found) -> None:
    source = ("import torch\n\n\ndef f(scores, keep, n):\n"
              "    bias = torch.full((n, n), float('-inf'))\n"
              "    torch.triu(bias, diagonal=1)\n"
              "    torch.where(keep, scores, torch.finfo(scores.dtype).min)\n"
              "    return scores + bias\n")
    assert found(source) == [(6, "MC525"), (7, "MC525")]


def test_masked_fill_really_leaves_its_input_unchanged() -> None:
    # What the rule's message says, on the installed torch.
    scores = torch.zeros(2, 3)
    keep = torch.tensor([[True, True, False], [True, False, False]])
    filled = scores.masked_fill(~keep, float("-inf"))
    assert torch.equal(scores, torch.zeros(2, 3))
    assert torch.isinf(filled).sum().item() == 3
    bias = torch.full((3, 3), float("-inf"))
    torch.triu(bias, diagonal=1)
    assert torch.isinf(bias).all()


def _notebook(*cells: str) -> str:
    import json

    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                  "execution_count": None, "source": c} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_a_notebook_cell_that_shows_a_result_is_silent(found: Found) -> None:
    # The last expression of a cell is displayed: a tutorial's `torch.triu(m, diagonal=1)`.
    source = _notebook("import torch\nm = torch.ones(4, 4)\ntorch.triu(m, diagonal=1)",
                       "scores = torch.randn(4, 4)\nscores.masked_fill(m == 0, float('-inf'))")
    assert found(source, "demo.ipynb") == []


def test_a_dropped_fill_inside_a_notebook_function_is_reported(found: Found) -> None:
    source = _notebook("import torch\n",
                       "def attend(scores, keep):\n"
                       "    scores.masked_fill(~keep, float('-inf'))\n"
                       "    return scores.softmax(-1)\n")
    assert [code for _, code in found(source, "demo.ipynb")] == ["MC525"]


def test_a_percent_cell_file_shows_its_top_level_expressions(found: Found) -> None:
    source = "# %%\nimport torch\n\n# %%\nm = torch.ones(4, 4)\ntorch.triu(m, diagonal=1)\n"
    assert found(source) == []
    assert found(source.replace("# %%\n", "")) == [(4, "MC525")]
