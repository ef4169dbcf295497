"""Every mask rule: a bad example that fires, and correct masks that stay silent."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import maskcheck
from maskcheck.model import Severity
from maskcheck.rules.mask_rules import CHECKS
from maskcheck.rules.registry import all_rules
from maskcheck.selection import Selection

L = 5
F32_MIN = float(np.finfo(np.float32).min)
F16_MIN = float(np.finfo(np.float16).min)


def tril(n: int = L, m: int | None = None) -> np.ndarray:
    return np.tril(np.ones((n, m or n), bool))


def additive(keep: np.ndarray, value: float = -np.inf, dtype: type = np.float32) -> np.ndarray:
    return np.where(keep, 0.0, value).astype(dtype)


def padded_keep(lengths: list[int], s: int, left: bool = False) -> np.ndarray:
    cols = np.arange(s)[None, :]
    n = np.array(lengths)[:, None]
    return cols >= s - n if left else cols < n


def hf_left_padded_causal(lengths: list[int], s: int) -> np.ndarray:
    keep = padded_keep(lengths, s, left=True)
    return (tril(s)[None] & keep[:, None, :])[:, None]


def summed_finfo_min_masks() -> np.ndarray:
    # conventions.md §2.3: causal(finfo.min) + left padding(finfo.min) overflows to -inf
    with np.errstate(over="ignore"):
        causal = np.triu(np.full((3, 3), F32_MIN, np.float32), 1)
        return causal + np.array([F32_MIN, F32_MIN, 0], np.float32)


def prefix_lm(n: int, prefix: int) -> np.ndarray:
    keep = tril(n)
    keep[:prefix, :prefix] = True  # the prefix attends bidirectionally
    return keep


def alibi_causal(n: int) -> np.ndarray:
    distance = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    return (np.triu(np.full((n, n), -np.inf), 1) - 0.5 * distance).astype(np.float32)


# name -> (array, analyze kwargs): masks built the way correct code builds them.
GOOD: dict[str, tuple[Callable[[], np.ndarray], dict[str, str]]] = {
    "sdpa-bool-causal": (lambda: tril(), {"name": "attn_mask", "api": "sdpa"}),
    "mha-bool-causal": (lambda: ~tril(), {"name": "attn_mask", "api": "mha"}),
    "float-causal-inf": (lambda: additive(tril()), {"name": "tgt_mask"}),
    "kpm-right": (lambda: ~padded_keep([5, 3], 5), {"name": "key_padding_mask"}),
    "hf-int": (lambda: padded_keep([5, 2], 5).astype(np.int64), {"name": "attention_mask"}),
    "sdpa-padding-4d": (lambda: padded_keep([5, 3], 5)[:, None, None, :], {"name": "attn_mask",
                                                                          "api": "sdpa"}),
    "causal-right-pad": (
        lambda: (tril()[None] & padded_keep([5, 3], 5)[:, None, :])[:, None],
        {"name": "causal_mask", "api": "sdpa"}),
    "sliding-window": (
        lambda: tril() & ~np.tril(np.ones((L, L), bool), -2), {"name": "attn_mask", "api": "sdpa"}),
    "block-diagonal": (
        lambda: np.kron(np.eye(3, dtype=bool), np.ones((4, 4), bool)),
        {"name": "attn_mask", "api": "sdpa"}),
    "eager-finfo-left": (
        lambda: additive(hf_left_padded_causal([5, 3], 5), F32_MIN), {"name": "causal_mask"}),
    "fp16-minus-1e4": (lambda: additive(tril(), -1e4, np.float16), {"name": "attn_mask"}),
    "fp32-minus-1e9": (lambda: additive(tril(), -1e9), {"name": "attn_mask"}),
    "prefix-lm": (lambda: prefix_lm(6, 3), {"name": "attn_mask", "api": "sdpa"}),
    "alibi-with-causal": (lambda: alibi_causal(6), {"name": "attn_bias"}),
    "lower-right-kv-cache": (lambda: np.tril(np.ones((2, 6), bool), 4), {"name": "attn_mask",
                                                                       "api": "sdpa"}),
}
# Findings a correct mask may legitimately carry (info level, or the padded-query warning).
ALLOWED = {
    "sdpa-bool-causal": {"MC050"},
    "mha-bool-causal": {"MC050"},
    "float-causal-inf": {"MC050"},
    "fp16-minus-1e4": {"MC050"},
    "fp32-minus-1e9": {"MC050"},
    "eager-finfo-left": {"MC002", "MC021"},
}


@pytest.mark.parametrize("case", sorted(GOOD))
def test_correct_masks_stay_silent(case: str) -> None:
    build, kwargs = GOOD[case]
    report = maskcheck.analyze(build(), **kwargs)
    codes = {f.code for f in report.findings}
    assert codes <= ALLOWED.get(case, set()), report.findings
    assert not [f for f in report.findings if f.severity is Severity.ERROR]
    assert report.convention not in ("ambiguous", "not-a-mask")


# code -> list of (array builder, kwargs) that must fire it.
BAD: dict[str, list[tuple[Callable[[], np.ndarray], dict[str, str]]]] = {
    "MC001": [(lambda: np.array([[0, np.nan, -np.inf]], np.float32), {"name": "attn_mask"})],
    "MC002": [
        (lambda: np.array([[False, False, True], [True, True, True], [False, False, False]]),
         {"name": "key_padding_mask"}),  # pytorch/pytorch#40932
        (lambda: np.concatenate([tril(5, 10)[:5], np.zeros((1, 10), bool)])[None, None],
         {"name": "attn_mask", "api": "sdpa"}),  # pytorch/pytorch#103749
    ],
    "MC010": [
        (lambda: np.triu(np.ones((L, L), bool), 1), {"name": "attn_mask", "api": "sdpa"}),
        # an HF keep-mask (.bool()) used as MHA key_padding_mask: no row unpadded, one empty
        (lambda: padded_keep([6, 3], 6), {"name": "key_padding_mask", "api": "mha"}),
        (lambda: tril(), {"name": "tgt_mask"}),
        (lambda: additive(padded_keep([4, 2], 4)), {"name": "attention_mask"}),
    ],
    "MC011": [(lambda: additive(tril(), 1e9), {"name": "attn_mask"})],
    "MC012": [(lambda: tril().astype(np.float32), {"name": "attn_mask", "api": "sdpa"})],
    "MC013": [(lambda: additive(tril(), -10.0), {"name": "attn_mask"}),
              (lambda: additive(tril(), -1e5), {"name": "attn_mask"}),  # TransformerLens#318
              (lambda: additive(tril(), -1e3, np.float16), {"name": "attn_mask"})],
    "MC014": [(lambda: np.where(tril(), 1.0, -np.inf).astype(np.float32), {"name": "attn_mask"})],
    "MC020": [(lambda: additive(tril(), -1e9), {"name": "attn_mask", "query_dtype": "float16"})],
    "MC021": [(lambda: additive(tril(), F32_MIN),
               {"name": "attn_mask", "selection": Selection.build(["MC021"])})],
    "MC022": [(lambda: tril().astype(np.int64)[None, None], {"name": "attn_mask", "api": "sdpa"}),
              (lambda: additive(tril(), F16_MIN, np.float16),
               {"name": "attn_mask", "query_dtype": "bfloat16"})],
    "MC023": [(lambda: summed_finfo_min_masks(), {"name": "mask"})],
    "MC030": [(lambda: ~tril()[None, None].repeat(2, 0), {"name": "attn_mask", "api": "mha"})],
    "MC031": [(lambda: padded_keep([3, 2, 1], 3), {"name": "attn_mask", "api": "sdpa"}),
              (lambda: padded_keep([4, 2], 4)[:, None, :], {"name": "attn_mask", "api": "sdpa"})],
    "MC032": [(lambda: padded_keep([4, 2], 4)[:, None, :, None], {"name": "mask"})],
    "MC040": [(lambda: additive(~np.triu(np.ones((L, L), bool), 0)), {"name": "attn_mask"})],
    "MC041": [(lambda: additive(np.triu(np.ones((L, L), bool))), {"name": "attn_mask"})],
    "MC042": [(lambda: np.array([[False, True, False, True, False], [False] * 5]),
               {"name": "key_padding_mask"})],
    "MC050": [(lambda: tril(), {"name": "attn_mask", "api": "sdpa"})],
    "MC051": [(lambda: np.broadcast_to(tril(), (2, 3, L, L)).copy(), {"name": "attn_mask"})],
}


def _bad_cases() -> list[tuple[str, int]]:
    return [(code, i) for code, cases in sorted(BAD.items()) for i in range(len(cases))]


@pytest.mark.parametrize(("code", "index"), _bad_cases())
def test_bad_example_fires(code: str, index: int) -> None:
    build, kwargs = BAD[code][index]
    report = maskcheck.analyze(build(), **kwargs)
    assert code in {f.code for f in report.findings}, (report.convention, report.pattern,
                                                        report.findings)


def test_every_mask_rule_has_a_check_and_a_bad_example() -> None:
    mask_codes = {r.code for r in all_rules() if r.kind == "mask"}
    assert mask_codes == set(CHECKS)
    assert mask_codes == set(BAD)


def test_rule_metadata_is_complete_and_unique() -> None:
    rules = all_rules()
    assert len({r.code for r in rules}) == len(rules)
    # Names are unique within a kind; the CONTRACT gives MC060 and MC506 one name.
    for kind in ("mask", "call", "source"):
        of_kind = [r.name for r in rules if r.kind == kind]
        assert len(set(of_kind)) == len(of_kind), kind
    for r in rules:
        assert r.summary and r.explanation and r.bad and r.good, r.code


def test_padded_query_rows_are_info_real_rows_an_error() -> None:
    report = maskcheck.analyze(hf_left_padded_causal([4, 2], 4), name="causal_mask", api="sdpa")
    mc002 = [f for f in report.findings if f.code == "MC002"]
    assert [f.severity for f in mc002] == [Severity.INFO]
    assert [list(w) for w in mc002[0].where] == [[1, 0, 0], [1, 0, 1]]
    assert "pad query" in mc002[0].message


def test_inverted_mask_says_which_reading_and_how_to_fix() -> None:
    # rasbt/LLMs-from-scratch#1061: MHA-style triu bool mask handed to SDPA
    report = maskcheck.analyze(np.triu(np.ones((4, 4), bool), 1), name="attn_mask", api="sdpa")
    assert report.convention == "bool-true-masked"
    assert report.pattern == ["causal"]
    (f,) = [f for f in report.findings if f.code == "MC010"]
    assert f.fix is not None and "~" in f.fix


def test_selection_filters_findings() -> None:
    from maskcheck.selection import Selection

    sel = Selection.build(ignore=["MC050"])
    report = maskcheck.analyze(tril(), name="attn_mask", api="sdpa", selection=sel)
    assert not report.findings
