"""MC522 on a bool tensor times -inf: False * -inf is NaN, as 0 * -inf is (session 9 review:
the `(1 - keep) * -inf` finding went away once `--fix` turned it into `(~keep) * -inf`)."""

from __future__ import annotations

import pytest

from maskcheck.lint.runner import find_hits

CODES = frozenset({"MC512", "MC522"})


def _codes(body: str) -> list[tuple[int, str]]:
    src = f"import torch\n\n\ndef f(ids, pad, scores):\n    keep = ids != pad\n{body}"
    return [(h.line, h.code) for h in find_hits(src, CODES)]


@pytest.mark.parametrize("expr", ['(~keep) * float("-inf")', 'keep * float("-inf")',
                                  'float("-inf") * keep.logical_not()'])
def test_a_bool_times_minus_inf_is_nan(expr: str) -> None:
    assert _codes(f"    return {expr}\n") == [(6, "MC522")]


@pytest.mark.parametrize("expr", ['scores.masked_fill(~keep, float("-inf"))',
                                  'torch.where(keep, 0.0, float("-inf"))',
                                  'scores * float("-inf")'])
def test_the_right_ways_and_a_float_tensor_are_silent(expr: str) -> None:
    assert _codes(f"    return {expr}\n") == []


def test_torch_gives_nan_where_the_bool_is_false() -> None:
    torch = pytest.importorskip("torch")
    keep = torch.tensor([True, False])
    product = keep * float("-inf")
    assert product[0].item() == float("-inf") and torch.isnan(product[1]).item()
