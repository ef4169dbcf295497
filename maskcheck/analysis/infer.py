"""What a tensor is: convention (with confidence and evidence), role, pattern.

Evidence comes from three places, strongest first: the declared API, the tensor's name, and
the values. Values alone decide only where they are unambiguous (a causal mask keeps its
diagonal; a mask cannot hide everything); where they clearly contradict the API or name, the
values win and MC010 says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from maskcheck.analysis.patterns import (
    PLAUSIBLE_CORES,
    SUSPECT_CORES,
    MatrixPattern,
    classify,
)
from maskcheck.analysis.summary import MaskSummary
from maskcheck.conventions import (
    ADDITIVE_MASKED_BELOW,
    APIS,
    CONVENTIONS,
    FINFO_MIN,
    MASK_MAX_DISTINCT,
    WEAK_MASK_MAGNITUDE,
    int_not_a_mask_name,
    is_bool,
    is_float,
    is_int,
    name_hint,
)
from maskcheck.model import Convention, Role

# A value reading must beat the other reading by this much, with a structural pattern,
# before it overrides a declared API or a name.
STRONG_MARGIN = 2.0


@dataclass
class Reading:
    """One way to read a binary mask: nonzero elements are kept, or masked."""

    nonzero_means: str  # "keep" | "masked"
    kept_count: np.ndarray
    first_kept: np.ndarray
    last_kept: np.ndarray
    col_kept: np.ndarray  # (units, S)
    units: list[MatrixPattern]  # one per matrix (or per row for padding masks)
    unit_rows: int  # rows per unit
    score: float = 0.0
    split: bool = False  # read on the masked/kept split of a float mask with a bias
    tags: list[str] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)

    @property
    def cores(self) -> set[str]:
        return {u.core for u in self.units}


@dataclass
class Inference:
    convention: Convention
    confidence: float
    role: Role
    pattern: list[str]
    params: dict[str, object]
    evidence: list[str]
    api: str  # the API the mask is checked against (declared, from the name, or "auto")
    value_kind: str  # "binary" | "additive" | "multiplicative" | "not-a-mask" | "empty"
    reading: Reading | None = None
    other: Reading | None = None  # the opposite reading, when both were possible
    expected: Convention | None = None  # what the API or name says
    expected_from: str = ""  # "--api sdpa" / "the name 'key_padding_mask'"
    inverted: bool = False  # values contradict expected strongly (MC010)
    masked_values: list[float] = field(default_factory=list)
    padding_role: bool = False
    # Per flat row: the query is a pad position (analysis.padquery); None when not decided
    # (padding-role masks, no reading).
    pad_queries: np.ndarray | None = None


def infer(s: MaskSummary, *, api: str = "auto", real_keys: np.ndarray | None = None) -> Inference:
    """`real_keys`: an optional companion (N, S) bool, True = real token, from the same call
    or file (the key padding / HF attention mask): its pad positions are pad queries."""
    hint = name_hint(s.name)
    declared = api if api != "auto" else None
    eff_api = declared or (hint.api if hint and hint.api != "auto" else "auto")
    evidence: list[str] = []
    if s.size == 0 or not s.shape:
        why = "zero-size tensor: nothing to analyse" if s.size == 0 else "0-dim scalar"
        return Inference("not-a-mask", 0.9, "unknown", [], {}, [why], eff_api, "empty")
    kind, masked_values, why = _value_kind(s)
    evidence.append(why)
    if kind == "not-a-mask":
        return Inference("not-a-mask", 0.9, "unknown", [], {}, evidence, eff_api, kind)
    split = kind == "bias"
    if split:
        # A float mask with a bias (ALiBi, relative positions, kept = +1, Longformer's
        # +finfo.max globals): masked = at or below ADDITIVE_MASKED_BELOW, kept = the rest.
        kind = "additive"
    padding_role = _is_padding_layout(s, hint.role if hint else None, declared)
    readings = _readings(s, kind, padding_role, split)
    if not padding_role and len(s.shape) == 2 and declared is None and not hint:
        # (N, S) or (L, S)? Padding rows that do not form a matrix pattern say (N, S).
        as_rows = _readings(s, kind, True, split)
        if _prefers_padding(readings, as_rows):
            padding_role, readings = True, as_rows
    role = _role(s, hint.role if hint else None, declared, padding_role)

    expected, expected_from = _expected(s, kind, declared, hint, role)
    chosen, other, convention, confidence, inverted = _decide(
        s, kind, readings, expected, evidence
    )
    if expected and expected_from:
        if inverted:
            evidence.append(f"{expected_from} says {expected}, but the values say {convention}")
        elif convention == expected:
            evidence.append(f"{expected_from} agrees: {expected}")
    tags, params = (chosen.tags, chosen.params) if chosen else ([], {})
    if split:
        params = {**params, "bias": _bias_range(s)}
        evidence.append(_bias_words(s))
    pad_queries = None
    if chosen is not None and not padding_role and len(s.shape) >= 2:
        pad_queries = _pad_queries(s, chosen, real_keys)
        if pad_queries.any():
            params = dict(params)
            params["pad_queries"] = _pad_query_lists(s, pad_queries)
    return Inference(
        convention, confidence, role, tags, params, evidence, eff_api, kind,
        reading=chosen, other=other, expected=expected, expected_from=expected_from,
        inverted=inverted, masked_values=masked_values, padding_role=padding_role,
        pad_queries=pad_queries,
    )


def own_key_kept(s: MaskSummary, r: Reading) -> np.ndarray | None:
    """Per flat row: does the query keep its own key (column i + S - L)? None if S < L."""
    if s.cols < s.matrix_rows:
        return None
    d = s.diag_value
    if r.split:
        return np.asarray(d > ADDITIVE_MASKED_BELOW)
    if r.nonzero_means == "keep":
        kept: np.ndarray = (d != 0) & ~np.isnan(d)
    else:
        kept = d == 0
    return kept


def _pad_queries(s: MaskSummary, r: Reading, real_keys: np.ndarray | None) -> np.ndarray:
    from maskcheck.analysis.padquery import pad_queries_from_summary

    pad = pad_queries_from_summary(
        own_key_kept(s, r), r.col_kept, s.matrices, s.matrix_rows, s.cols, s.shape, real_keys)
    # A left-padded pattern's own empty rows (e.g. cross-attention, L != S) are pad queries.
    for u, unit in enumerate(r.units):
        if unit.core in PLAUSIBLE_CORES and unit.pad_left and unit.expected_empty.size:
            sl = slice(u * r.unit_rows, (u + 1) * r.unit_rows)
            pad[sl] |= unit.expected_empty
    return pad


def _pad_query_lists(s: MaskSummary, pad: np.ndarray) -> list[list[int]]:
    """Pad query rows per matrix (batch x head), for the report; at most 64 matrices."""
    L = s.matrix_rows
    per = pad.reshape(-1, L)[:64]
    return [np.flatnonzero(m).tolist() for m in per]


def _value_kind(s: MaskSummary) -> tuple[str, list[float], str]:
    """binary | multiplicative | additive | bias (additive read on the masked/kept split) |
    not-a-mask, the masked values, and why."""
    values = sorted(s.distinct)
    if is_bool(s.dtype):
        return "binary", [], "bool values"
    if is_int(s.dtype):
        if int_not_a_mask_name(s.name):
            return "not-a-mask", [], (
                f"integer tensor named {s.name.rsplit('.', 1)[-1]!r}: ids, types or "
                "positions, not a mask")
        if not s.distinct_overflow and set(values) <= {0.0, 1.0}:
            return "binary", [], "integer values in {0, 1}"
        return "not-a-mask", [], (
            f"integer values beyond 0/1 ({len(values)}{'+' if s.distinct_overflow else ''} "
            f"distinct, max {s.max_value:g}): token ids or indices, not a mask")
    if not is_float(s.dtype):
        return "not-a-mask", [], f"dtype {s.dtype} is not a mask dtype"
    if not values:  # all NaN
        return "additive", [], "every value is NaN"
    many = s.distinct_overflow or len(values) > MASK_MAX_DISTINCT
    strong = [v for v in values if v <= ADDITIVE_MASKED_BELOW]
    if s.strong_count and s.split is not None:
        return "bias", strong, (
            f"float values {_fmt_values(values)}: additive, masked at or below "
            f"{ADDITIVE_MASKED_BELOW:g}, kept keys carry a bias")
    vset = set(values)
    if not many and vset <= {0.0, 1.0}:
        if vset == {0.0}:
            return "additive", [], "float, every value 0: an additive mask that hides nothing"
        return "multiplicative", [], "float values in {0, 1}: a multiplicative (keep = 1) mask"
    negatives = [v for v in values if v < 0]
    positives = [v for v in values if v > 0]
    if s.split is not None and not s.strong_count and _bias_alone(s, negatives, positives,
                                                                    many):
        return "bias", [], (
            f"float values {_fmt_values(values)}, none at or below "
            f"{ADDITIVE_MASKED_BELOW:g}: a bias that masks nothing (relative position / ALiBi)")
    if many:
        return "not-a-mask", [], (
            f"{'more than ' if s.distinct_overflow else ''}{len(values)} distinct float values "
            f"in [{s.min_value:.3g}, {s.max_value:.3g}]: weights or activations, not a mask")
    if negatives and not positives:
        return "additive", negatives, (
            f"float values {_fmt_values(values)}: additive (0 = attend, negative = masked)")
    if positives and not negatives:
        if all(v <= 1.0 for v in positives):
            return "not-a-mask", [], (
                f"float values {_fmt_values(values)} in [0, 1]: probabilities, not a mask")
        return "additive", positives, (
            f"float values {_fmt_values(values)}: additive with large POSITIVE values")
    return "additive", negatives, f"float values {_fmt_values(values)}: additive, mixed signs"


def _bias_alone(s: MaskSummary, negatives: list[float], positives: list[float],
                many: bool) -> bool:
    """Small values and nothing strongly masked: a bias (T5's relative positions, ALiBi) when
    the values say so (both signs, or more than a few), not a weak mask nor weights."""
    if s.max_value >= WEAK_MASK_MAGNITUDE:
        return False  # large positives: a wrong-sign mask (MC011)
    if many:
        hint = s.name.rsplit(".", 1)[-1].lower()
        return any(w in hint for w in ("bias", "mask", "alibi"))
    if negatives and positives:
        return True
    return len(negatives) > 3


def _bias_range(s: MaskSummary) -> dict[str, float]:
    kept = [v for v in s.distinct if v > ADDITIVE_MASKED_BELOW and v != 0 and not math.isnan(v)]
    lo = min(kept, default=0.0)
    hi = s.max_value if s.max_value > ADDITIVE_MASKED_BELOW else max(kept, default=0.0)
    return {"min": min(lo, 0.0) if 0.0 in s.distinct else lo, "max": hi}


def _bias_words(s: MaskSummary) -> str:
    r = _bias_range(s)
    words = f"kept keys carry a bias in [{_fmt(r['min'])}, {_fmt(r['max'])}]"
    fmax = -FINFO_MIN.get(s.dtype, -math.inf)
    if r["max"] >= fmax or r["max"] == math.inf:
        words += " (+finfo.max / +inf entries: global-attention keys, as Longformer marks them)"
    elif set(s.distinct) - {0.0} and all(
            v in (1.0,) for v in s.distinct if v > ADDITIVE_MASKED_BELOW and v != 0):
        words += " (kept = 1: a multiplicative value in an additive mask, MC014)"
    return words


def _fmt_values(values: list[float]) -> str:
    return "{" + ", ".join(_fmt(v) for v in values[:6]) + (", ..." if len(values) > 6 else "") + "}"


def _fmt(v: float) -> str:
    if v == -math.inf:
        return "-inf"
    if v == math.inf:
        return "inf"
    for dt, m in FINFO_MIN.items():
        if v == m and dt in ("float16", "bfloat16", "float32"):
            return f"finfo({dt}).min"
    return f"{v:g}"


def _is_padding_layout(s: MaskSummary, hint_role: str | None, declared: str | None) -> bool:
    nd = len(s.shape)
    if nd == 1:
        return True
    if nd == 2:
        if hint_role in ("key_padding_mask", "hf_attention_mask"):
            return True
        return declared == "hf"
    return False


def _readings(s: MaskSummary, kind: str, padding_role: bool, split: bool) -> list[Reading]:
    if kind == "binary":
        return [_reading(s, "keep", padding_role), _reading(s, "masked", padding_role)]
    if kind == "multiplicative":
        return [_reading(s, "keep", padding_role)]
    return [_reading(s, "masked", padding_role, split=split)]


def _reading(s: MaskSummary, nonzero_means: str, padding_role: bool, *,
             split: bool = False) -> Reading:
    S = s.cols
    flags = s.split if split and s.split is not None else s
    if nonzero_means == "keep":
        count, first, last = flags.nz_count, flags.first_nz, flags.last_nz
        col_any = flags.col_any_nz
    else:
        count, first, last = S - flags.nz_count, flags.first_z, flags.last_z
        col_any = ~flags.col_all_nz
    if padding_role or s.matrix_rows == 1:
        # Each row is one sequence's padding mask: classify rows one by one.
        units_first = first.reshape(-1, 1)
        col_kept = _row_kept_cols(first, last, count, S)
        unit_rows = 1
    else:
        units_first = first.reshape(s.matrices, s.matrix_rows)
        col_kept = col_any
        unit_rows = s.matrix_rows
    n_units = units_first.shape[0]
    units = []
    for u in range(n_units):
        sl = slice(u * unit_rows, (u + 1) * unit_rows)
        units.append(classify(first[sl], last[sl], count[sl], col_kept[u]))
    r = Reading(nonzero_means, count, first, last, col_kept, units, unit_rows,
                split=flags is not s)
    r.tags, r.params = _tags(r, s)
    r.score = _score(r)
    return r


def _row_kept_cols(first: np.ndarray, last: np.ndarray, count: np.ndarray, S: int) -> np.ndarray:
    # Only used for 1-row units: a row's kept columns span [first, last] when contiguous;
    # for a scattered row, classify() sees contiguous=False before looking at columns.
    cols = np.arange(S)
    inside = (cols[None, :] >= first[:, None]) & (cols[None, :] <= last[:, None])
    return (count[:, None] > 0) & inside


def _tags(r: Reading, s: MaskSummary) -> tuple[list[str], dict[str, object]]:
    cores = [u.core for u in r.units]
    non_empty = {c for c in cores if c != "empty"}
    params: dict[str, object] = {}
    if not non_empty:
        return ["custom"], {"everything_masked": True}
    core = merged_core(r.units)
    tags: list[str] = []
    left = [u.pad_left for u in r.units]
    right = [u.pad_right for u in r.units]
    # Named parts of a custom mask (bidirectional blocks inside a causal one) in every unit.
    named = core == "custom" and all(u.core == "empty" or "bidirectional_blocks" in u.params
                                     for u in r.units)
    if core == "custom":
        tags.append("custom")
        if named:
            tags.append("causal")
    elif core != "full":
        tags.append(core)
    for u in r.units:
        for k, v in u.params.items():
            params.setdefault(k, v)
    blocks = {str(u.params.get("block", u.params.get("block_sizes"))) for u in r.units
              if u.core == "block-diagonal"}
    if len(blocks) > 1:
        params.pop("block", None)  # units disagree: their block sizes, not one block
    if core == "block-diagonal" and all(
            u.params.get("causal_within_blocks") or u.core == "causal" for u in r.units
            if u.core != "empty"):
        tags.append("causal")  # packed documents or chunks (Llama4), causal inside each
    if core != "custom" or named:
        if any(left):
            tags.append("padding-left")
        if any(right):
            tags.append("padding-right")
        if any(left) or any(right) or "empty" in cores:
            params["padding"] = [
                {"left": lft, "right": rgt} if c != "empty" else {"all": True}
                for lft, rgt, c in zip(left, right, cores, strict=True)
            ][:64]
            params["padding_side"] = (
                "both" if any(left) and any(right) else "left" if any(left) else "right")
        if core == "full" and not tags:
            tags.append("full")
    if s.matrix_rows > 1 and s.cols != s.matrix_rows and core in ("causal", "sliding-window"):
        params["aligned"] = params.get("aligned", "upper-left")
    return tags, params


def merged_core(units: list[MatrixPattern]) -> str:
    """The one core of all non-empty units, or "custom". A window or chunk that never bites
    in a short (padded) sequence leaves it plain causal: causal + sliding-window is a sliding
    window, causal + causal block-diagonal is block-diagonal."""
    cores = {u.core for u in units} - {"empty"}
    if len(cores) == 1:
        return next(iter(cores))
    if cores == {"causal", "sliding-window"}:
        return "sliding-window"
    if cores == {"causal", "block-diagonal"} and all(
            u.params.get("causal_within_blocks") for u in units if u.core == "block-diagonal"):
        return "block-diagonal"
    return "custom"


def _score(r: Reading) -> float:
    cores = r.cores - {"empty"}
    if not cores:
        return -3.0
    merged = merged_core(r.units)
    if merged == "custom" and len(cores) > 1:
        base = 0.0
    else:
        core = merged
        if core == "full":
            padded = any(u.pad_left or u.pad_right for u in r.units)
            unpadded = any(u.core == "full" and not (u.pad_left or u.pad_right) for u in r.units)
            base = (2.0 if unpadded else 1.5) if padded else 2.0
        elif core in PLAUSIBLE_CORES:
            base = 3.0
        elif core in SUSPECT_CORES:
            base = 0.5
        else:
            base = 0.0
    # Rows with nothing to attend that the pattern does not explain.
    unexplained = 0
    for i, u in enumerate(r.units):
        sl = slice(i * r.unit_rows, (i + 1) * r.unit_rows)
        empty = r.kept_count[sl] == 0
        if u.expected_empty.size:
            empty = empty & ~u.expected_empty
        unexplained += int(empty.sum())
    if unexplained:
        base -= 1.0
    if "empty" in r.cores:
        base -= 1.0
    if r.unit_rows == 1 and len(r.units) > 1:
        # A padded batch is padded to its longest sequence, which keeps every key; no
        # sequence is all padding. A reading with such a row and no empty one is the batch.
        full = any(u.core == "full" and not (u.pad_left or u.pad_right) for u in r.units)
        empty = "empty" in r.cores
        if full and not empty:
            base += 1.0
        elif empty and not full:
            base -= 1.0
    return base


def _prefers_padding(as_matrix: list[Reading], as_rows: list[Reading]) -> bool:
    structural = PLAUSIBLE_CORES[1:] + SUSPECT_CORES
    if any(r.cores & set(structural) for r in as_matrix):
        return False
    return any(r.cores <= {"full", "empty"} and any(u.pad_left or u.pad_right for u in r.units)
               for r in as_rows)


def _role(s: MaskSummary, hint_role: str | None, declared: str | None, padding: bool) -> Role:
    nd = len(s.shape)
    if padding:
        if is_int(s.dtype) and (declared in (None, "hf") and hint_role != "key_padding_mask"):
            return "hf_attention_mask"
        if hint_role == "hf_attention_mask" or declared == "hf":
            return "hf_attention_mask"
        return "key_padding_mask"
    if nd in (2, 3, 4):
        return "attn_mask"
    return "unknown"


def _expected(
    s: MaskSummary, kind: str, declared: str | None, hint: object, role: str
) -> tuple[Convention | None, str]:
    from maskcheck.conventions import NameHint

    if kind in ("additive", "multiplicative"):
        if role == "hf_attention_mask" and kind == "additive" and (declared == "hf" or (
                isinstance(hint, NameHint) and hint.api == "hf")):
            # HF casts a 2-D mask with .to(bool): any nonzero is "keep" (conventions.md §2.9).
            src = f"--api {declared}" if declared else f"the name {s.name.rsplit('.', 1)[-1]!r}"
            return "multiplicative", src
        return None, ""
    int_like = is_int(s.dtype)
    if declared:
        spec = APIS[declared]
        conv = spec.int_convention if int_like else spec.bool_convention
        if int_like and conv is None and spec.bool_convention:
            masked = spec.bool_convention == "bool-true-masked"
            conv = "int-one-masked" if masked else "int-one-keep"
        return conv, f"--api {declared}"
    if isinstance(hint, NameHint):
        conv = hint.int_convention if int_like else hint.bool_convention
        if conv:
            return conv, f"the name {s.name.rsplit('.', 1)[-1]!r}"
    return None, ""


def _convention_of(kind: str, dtype: str, nonzero_means: str) -> Convention:
    if kind == "multiplicative":
        return "multiplicative"
    if kind == "additive":
        return "additive"
    if is_int(dtype):
        return "int-one-keep" if nonzero_means == "keep" else "int-one-masked"
    return "bool-true-keep" if nonzero_means == "keep" else "bool-true-masked"


def _decide(
    s: MaskSummary, kind: str, readings: list[Reading], expected: Convention | None,
    evidence: list[str],
) -> tuple[Reading | None, Reading | None, Convention, float, bool]:
    if len(readings) == 1:
        r = readings[0]
        conv = _convention_of(kind, s.dtype, r.nonzero_means)
        inverted = expected is not None and expected != conv
        return r, None, conv, 0.9 if r.score > 0 else 0.7, inverted
    keep, masked = readings
    if is_int(s.dtype):
        keep.score += 0.5  # integer masks are overwhelmingly HF/Keras style, 1 = keep
    _structure_signals(s, keep, masked, evidence)
    best, worse = (keep, masked) if keep.score >= masked.score else (masked, keep)
    margin = best.score - worse.score
    strong = margin >= STRONG_MARGIN and best.score >= 2.5
    value_conv = _convention_of(kind, s.dtype, best.nonzero_means)
    if strong:
        evidence.append(_structure_words(best, s))
    if expected is not None:
        exp_reading = keep if CONVENTIONS[expected].nonzero_means == "keep" else masked
        if expected == value_conv or not strong:
            conf = 0.95 if expected == value_conv else 0.75
            if expected != value_conv and margin > 0.5:
                evidence.append(
                    f"the opposite reading would look more regular ({_structure_words(best, s)})")
            other = masked if exp_reading is keep else keep
            return exp_reading, other, expected, conf, False
        return best, worse, value_conv, min(0.95, 0.6 + 0.1 * margin), True
    if margin < 0.5:
        evidence.append("the values fit both readings of True equally well")
        return best, worse, "ambiguous", 0.4, False
    conf = min(0.95, 0.5 + 0.12 * margin)
    if not strong:
        evidence.append(_structure_words(best, s))
    return best, worse, value_conv, conf, False


# Weights of the structural polarity signals (issue 9, step 4).
OWN_KEY_BONUS = 1.0
LAYOUT_4D_BONUS = 0.5
CAUSAL_BONUS = 0.5


def _structure_signals(
    s: MaskSummary, keep: Reading, masked: Reading, evidence: list[str]
) -> None:
    """Signals beyond the pattern: every real query keeps its own key in a self-attention
    mask (causal, windows, sinks, strided, image blocks all do), and a 4-D bool mask is in
    SDPA/HF/FlexAttention's layout (MHA takes no 4-D mask), where True = keep."""
    both_attend = bool(np.any(keep.kept_count > 0) and np.any(masked.kept_count > 0))
    if s.matrix_rows > 1 and s.cols == s.matrix_rows and both_attend:
        # (an all-False or all-True mask says nothing about polarity: both readings must
        # have queries that attend)
        ok = {id(r): _keeps_own_keys(s, r) for r in (keep, masked)}
        if ok[id(keep)] != ok[id(masked)]:
            best = keep if ok[id(keep)] else masked
            best.score += OWN_KEY_BONUS
            what = "True" if is_bool(s.dtype) else "1"
            means = "kept" if best.nonzero_means == "keep" else "masked"
            evidence.append(f"read with {what} = {means}, every query that attends keeps its "
                            "own key")
    if len(s.shape) == 4 and is_bool(s.dtype):
        keep.score += LAYOUT_4D_BONUS
    if s.matrix_rows > 1 and s.cols != s.matrix_rows:
        # L != S: a triangle reads as causal one way and as a wide window the other; causal
        # (SDPA's is_causal, KV-cache decoding) is by far the more common mask.
        for r in (keep, masked):
            if r.cores - {"empty"} <= {"causal", "causal-lower-right"} and r.cores - {"empty"}:
                r.score += CAUSAL_BONUS


def _keeps_own_keys(s: MaskSummary, r: Reading) -> bool:
    own = own_key_kept(s, r)
    if own is None:
        return False
    attends = r.kept_count > 0
    return bool(attends.any() and np.all(own[attends]))


def _structure_words(r: Reading, s: MaskSummary) -> str:
    what = "True" if is_bool(s.dtype) else "1"
    means = "kept" if r.nonzero_means == "keep" else "masked"
    shape = ", ".join(r.tags) or "no clear pattern"
    return f"read with {what} = {means}, the mask is {shape}"
