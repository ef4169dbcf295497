"""The mask rules: each reads the summary and the inference, never the tensor."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from maskcheck import conventions as cv
from maskcheck.analysis.infer import Inference, Reading
from maskcheck.analysis.summary import MAX_SAMPLE, MaskSummary
from maskcheck.model import Finding, Index, Severity
from maskcheck.rules.registry import get_rule


@dataclass(frozen=True)
class MaskContext:
    summary: MaskSummary
    inf: Inference
    declared_api: str | None
    query_dtype: str | None

    @property
    def api(self) -> str:
        """The API for messages and fixes: declared, from the name, or guessed."""
        if self.declared_api:
            return self.declared_api
        if self.inf.api != "auto":
            return self.inf.api
        if self.inf.convention in ("bool-true-masked", "int-one-masked"):
            return "mha"
        if self.inf.role == "hf_attention_mask":
            return "hf"
        return "sdpa"

    def finding(self, code: str, message: str, where: list[Index] | None = None,
                fix: str | None = None) -> Finding:
        info = get_rule(code)
        assert info is not None, code
        return Finding(code, info.name, info.severity, message,
                       tuple((where or [])[:MAX_SAMPLE]), fix if fix is not None else info.fix,
                       tensor=self.summary.name)


Check = Callable[[MaskContext], Iterator[Finding]]
CHECKS: dict[str, Check] = {}


def check(code: str) -> Callable[[Check], Check]:
    def deco(fn: Check) -> Check:
        CHECKS[code] = fn
        return fn
    return deco


def run_checks(ctx: MaskContext, allows: Callable[[str], bool]) -> list[Finding]:
    out: list[Finding] = []
    for code in sorted(CHECKS):
        if allows(code):
            out.extend(CHECKS[code](ctx))
    return out


def _rows_where(s: MaskSummary, rows: np.ndarray) -> list[Index]:
    return [s.row_index(int(r)) for r in rows[:MAX_SAMPLE]]


def _units_rows(r: Reading, unit: int) -> slice:
    return slice(unit * r.unit_rows, (unit + 1) * r.unit_rows)


def _describe_rows(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


@check("MC001")
def nan_in_mask(ctx: MaskContext) -> Iterator[Finding]:
    s = ctx.summary
    if s.nan_count:
        yield ctx.finding(
            "MC001", f"{s.nan_count} NaN value(s) in the mask: every score row they touch "
            "becomes NaN", [(*s.row_index(r), c) for r, c in s.nan_where])


@check("MC002")
def fully_masked_rows(ctx: MaskContext) -> Iterator[Finding]:
    inf, s, r = ctx.inf, ctx.summary, ctx.inf.reading
    if r is None or inf.convention == "ambiguous":
        return
    empty = r.kept_count == 0
    if not empty.any():
        return
    pad = inf.pad_queries if inf.pad_queries is not None else np.zeros_like(empty)
    real = np.flatnonzero(empty & ~pad)
    padded = np.flatnonzero(empty & pad)
    effect = _empty_row_effect(s, inf)
    if real.size:
        if r.unit_rows == 1 and inf.padding_role:
            what = _describe_rows(real.size, "sequence") + " with every key masked"
        else:
            what = _describe_rows(real.size, "query row") + " with no key to attend"
        fix = ("drop sequences that are all padding from the batch (or unmask one key for "
               "them and zero their output)") if inf.padding_role else None
        yield ctx.finding("MC002", f"{what}: {effect}", _rows_where(s, real), fix)
    if padded.size:
        f = ctx.finding(
            "MC002",
            f"{_describe_rows(padded.size, 'pad query row')} (padding positions) attend to "
            f"nothing, as expected: their outputs are discarded; {effect}",
            _rows_where(s, padded),
            "nothing to do if pad outputs are discarded; to keep them finite for MHA or an "
            "eager softmax: out = out.masked_fill(~row_has_key[..., None], 0)")
        yield replace(f, severity=Severity.INFO)


def _empty_row_effect(s: MaskSummary, inf: Inference) -> str:
    if inf.value_kind != "additive" or not s.finfo_min_count:
        return cv.empty_row_behaviour()
    if s.dtype == "float16":
        # conventions.md §2.2: SDPA kernels accumulate in fp32, so score + (-65504) keeps the
        # score differences and softmax renormalises them.
        effect = ("in float16, finfo.min rows attend as if unmasked on SDPA (the kernels "
                  "accumulate in fp32); in an eager softmax they are uniform")
    else:
        effect = "finfo.min rows give uniform attention over the masked keys"
    if s.neginf_count:
        effect += ", and where two masks summed to -inf the weight lands on arbitrary keys (MC023)"
    return effect


@check("MC010")
def inverted_convention(ctx: MaskContext) -> Iterator[Finding]:
    inf = ctx.inf
    if not inf.inverted or inf.expected is None:
        return
    if inf.value_kind == "additive" and inf.role == "hf_attention_mask":
        yield ctx.finding(
            "MC010", f"an additive mask given as a 2-D attention_mask ({inf.expected_from}): "
            "Hugging Face casts it with .to(bool), so every -inf/negative key becomes 'keep' "
            "and every 0 key 'padding': the mask is inverted",
            fix="attention_mask = (mask == 0).long()  # 1 = real token")
        return
    exp = cv.CONVENTIONS[inf.expected]
    words = ", ".join(inf.pattern) or "structured"
    yield ctx.finding(
        "MC010", f"the values follow {inf.convention} (a {words} mask when read that way), but "
        f"{inf.expected_from} means {exp.title}: read like that, it keeps exactly the keys it "
        "should hide", fix=cv.invert_fix(ctx.api, inf.role))


@check("MC011")
def wrong_sign(ctx: MaskContext) -> Iterator[Finding]:
    s, inf = ctx.summary, ctx.inf
    if inf.value_kind != "additive" or s.strong_count:
        return  # beside strongly masked values, large positives are kept (Longformer globals)
    if s.max_value >= cv.WEAK_MASK_MAGNITUDE:
        yield ctx.finding(
            "MC011", f"additive mask holds {cv_fmt(s.max_value)}: softmax puts the weight ON "
            "the keys it should hide", fix="mask = -mask  # masked = -inf or finfo(dtype).min")


def cv_fmt(v: float) -> str:
    from maskcheck.analysis.infer import _fmt

    return _fmt(v)


@check("MC012")
def multiplicative_as_additive(ctx: MaskContext) -> Iterator[Finding]:
    s, inf = ctx.summary, ctx.inf
    if inf.value_kind != "multiplicative" or set(s.distinct) != {0.0, 1.0}:
        return
    if inf.role == "hf_attention_mask" and (ctx.declared_api in (None, "hf")):
        return  # HF casts 2-D masks to bool: 1 = keep, fine
    api = cv.APIS.get(ctx.api)
    title = api.title if api else "torch attention"
    fix = ("attn_mask = mask.bool()  # SDPA: True = keep" if ctx.api in ("sdpa", "flex")
           else "attn_mask = torch.zeros_like(mask).masked_fill(mask == 0, float('-inf'))")
    yield ctx.finding(
        "MC012", f"float 0/1 mask: {title} adds float masks to the scores, so 1 adds +1 to kept "
        "keys and 0 hides nothing", fix=fix)


@check("MC013")
def weak_mask_value(ctx: MaskContext) -> Iterator[Finding]:
    inf = ctx.inf
    if inf.value_kind != "additive":
        return
    limit = cv.strong_mask_magnitude(ctx.summary.dtype)
    weak = [v for v in inf.masked_values if v < 0 and math.isfinite(v) and -v < limit]
    if weak and len(weak) == len([v for v in inf.masked_values if v < 0]):
        worst = max(weak)
        yield ctx.finding(
            "MC013", f"masked value {cv_fmt(worst)} is smaller in magnitude than {limit:g} "
            f"(for {ctx.summary.dtype}): a masked key still gets weight exp(score {worst:+g}), "
            "which matters once raw scores span that much",
            fix="use float('-inf') (SDPA) or torch.finfo(dtype).min")


def _mixed_convention(ctx: MaskContext) -> bool:
    """Kept cells hold 1 beside large negatives (MC014)."""
    s = ctx.summary
    if ctx.inf.value_kind != "additive" or 1.0 not in s.distinct:
        return False
    kept = {v for v in s.distinct if v > cv.ADDITIVE_MASKED_BELOW and v != 0}
    return kept == {1.0} and s.min_value <= -cv.WEAK_MASK_MAGNITUDE


@check("MC014")
def mixed_convention(ctx: MaskContext) -> Iterator[Finding]:
    s = ctx.summary
    if _mixed_convention(ctx):
        yield ctx.finding(
            "MC014", f"kept positions hold 1 (multiplicative) and masked ones "
            f"{cv_fmt(s.min_value)} (additive)",
            fix="mask = torch.where(keep, 0.0, float('-inf'))")


@check("MC020")
def dtype_overflow(ctx: MaskContext) -> Iterator[Finding]:
    s, qd = ctx.summary, ctx.query_dtype
    if ctx.inf.value_kind != "additive" or not qd or qd not in cv.FINFO_MIN:
        return
    bad = [v for v in s.distinct if math.isfinite(v) and not cv.representable(v, qd)]
    if bad:
        yield ctx.finding(
            "MC020", f"masked value {cv_fmt(min(bad))} is not representable in the query dtype "
            f"{qd} (min {cv.FINFO_MIN[qd]:.5g}): cast, it becomes -inf",
            fix=f"mask = mask.clamp(min=torch.finfo(torch.{qd}).min).to(torch.{qd})")


@check("MC021")
def finfo_min_sum(ctx: MaskContext) -> Iterator[Finding]:
    s = ctx.summary
    if ctx.inf.value_kind == "additive" and s.finfo_min_count:
        yield ctx.finding(
            "MC021", f"{s.finfo_min_count} value(s) at finfo({s.dtype}).min: adding another "
            "such mask overflows to -inf", _rows_where(s, np.array(s.finfo_min_rows)))


@check("MC022")
def dtype_mismatch(ctx: MaskContext) -> Iterator[Finding]:
    s, inf = ctx.summary, ctx.inf
    if inf.reading is None:
        return
    if cv.is_int(s.dtype):
        if inf.role == "hf_attention_mask" and ctx.declared_api in (None, "hf"):
            return
        api = cv.APIS.get(ctx.api)
        title = api.title if api else "torch attention"
        conv = "~mask.bool()" if (inf.convention == "int-one-keep") == (ctx.api == "mha") \
            else "mask.bool()"
        yield ctx.finding(
            "MC022", f"{s.dtype} mask: {title} takes bool or float masks and raises for "
            "integer ones", fix=f"mask = {conv}")
        return
    qd = ctx.query_dtype
    if qd and cv.is_float(s.dtype) and s.dtype != qd and s.dtype != "float32":
        yield ctx.finding(
            "MC022", f"{s.dtype} mask with {qd} queries: SDPA accepts a float mask only in the "
            "query's dtype or float32", fix=f"mask = mask.to(torch.{qd})")


@check("MC023")
def summed_mask_overflow(ctx: MaskContext) -> Iterator[Finding]:
    s = ctx.summary
    if ctx.inf.value_kind == "additive" and s.finfo_min_count and s.neginf_count:
        yield ctx.finding(
            "MC023", f"{s.neginf_count} -inf value(s) beside {s.finfo_min_count} at "
            f"finfo({s.dtype}).min: two finfo.min masks were added and overflowed",
            _rows_where(s, np.array(s.neginf_rows)),
            fix="mask = torch.where(mask_a_bool | mask_b_bool, torch.finfo(dtype).min, 0.0)")


@check("MC030")
def shape_mismatch(ctx: MaskContext) -> Iterator[Finding]:
    api = ctx.declared_api
    if not api or api not in cv.APIS or ctx.inf.reading is None:
        return
    nd = len(ctx.summary.shape)
    if nd not in cv.APIS[api].ranks:
        layouts = " or ".join("(" + ", ".join(lay) + ")" for lay in cv.APIS[api].layouts[:4])
        yield ctx.finding(
            "MC030", f"{nd}-D mask {tuple(ctx.summary.shape)}: {cv.APIS[api].title} takes "
            f"{layouts}")


@check("MC031")
def broadcast_trap(ctx: MaskContext) -> Iterator[Finding]:
    s, inf, r = ctx.summary, ctx.inf, ctx.inf.reading
    if r is None:
        return
    api = ctx.declared_api
    sdpa_like = api in ("sdpa", "flex") or (api is None and inf.role == "attn_mask"
                                            and inf.api == "auto" and _named_attn_mask(s.name))
    nd = len(s.shape)
    if nd == 3 and s.shape[1] == 1 and s.shape[0] > 1 and sdpa_like and s.cols > 1:
        yield ctx.finding(
            "MC031", f"{tuple(s.shape)} mask: SDPA aligns dims from the right and reads "
            "(N, 1, S) as (heads, 1, S), not as batch", fix=cv.padding_fix("sdpa"))
        return
    if nd != 2 or not (sdpa_like or api == "mha"):
        return
    if inf.padding_role and api in ("sdpa", "flex"):
        yield ctx.finding(
            "MC031", f"(N, S) = {tuple(s.shape)} padding mask as attn_mask: SDPA reads a 2-D "
            "mask as (L, S), so row i masks query i of every sequence", fix=cv.padding_fix("sdpa"))
        return
    if inf.padding_role or r.cores & {"causal", "causal-lower-right", "sliding-window",
                                       "block-diagonal", "anti-causal", "prefix-lm",
                                       "causal-diagonal-masked"}:
        return
    c, f, la = r.kept_count, r.first_kept, r.last_kept
    padding_rows = (c == 0) | ((la - f + 1 == c) & ((f == 0) | (la == s.cols - 1)))
    if s.rows == s.cols:
        # A self-attention mask keeps each query's own key (causal, prefix-LM, windows,
        # blocks); padding rows misread as queries lose it once a length is <= its row.
        diag = np.arange(s.rows)
        if np.all((f <= diag) & (diag <= la) & (c > 0)):
            return
    if padding_rows.all() and len(set(c.tolist())) > 1 and s.rows > 1 and c.any():
        yield ctx.finding(
            "MC031", f"rows of this {tuple(s.shape)} mask look like per-sequence padding: as a "
            "2-D attn_mask it is (L, S), so row i masks query i of every sequence "
            f"({'silently, since N == L' if s.rows == s.cols else 'wrong whatever N is'})",
            fix=cv.padding_fix(ctx.api if ctx.api != "mha" else "sdpa"))


def _named_attn_mask(name: str) -> bool:
    return name.rsplit(".", 1)[-1].lower().endswith("attn_mask")


@check("MC032")
def query_axis_padding(ctx: MaskContext) -> Iterator[Finding]:
    s, r = ctx.summary, ctx.inf.reading
    if r is None or _mixed_convention(ctx):
        return  # with 1 beside large negatives, which rows are "masked" is MC014's question
    nd = len(s.shape)
    if nd >= 3 and s.cols == 1 and s.shape[-2] > 1 and 0 < s.nonzero_count < s.size:
        yield ctx.finding(
            "MC032", f"{tuple(s.shape)} mask varies along the query axis with a size-1 key "
            "axis: it hides padded queries' rows and leaves padded keys visible",
            fix="mask = (ids != pad)[:, None, None, :]  # (N, 1, 1, S)")
        return
    hits: list[int] = []
    for u, unit in enumerate(r.units):
        if unit.core != "custom" or r.unit_rows < 2:
            continue
        sl = _units_rows(r, u)
        c = r.kept_count[sl]
        empty = c == 0
        if not empty.any() or empty.all() or not np.all(c[~empty] == s.cols):
            continue
        idx = np.flatnonzero(empty)
        run = idx[-1] - idx[0] + 1 == idx.size
        if run and (idx[0] == 0 or idx[-1] == r.unit_rows - 1):
            hits.extend((idx + u * r.unit_rows).tolist())
    if hits:
        yield ctx.finding(
            "MC032", "whole query rows are masked while every key stays visible: padding laid "
            "along the query axis instead of the key axis", _rows_where(s, np.array(hits)),
            fix="mask = (ids != pad)[:, None, None, :]  # (N, 1, 1, S)")


def _units_with(r: Reading, core: str) -> list[int]:
    return [i for i, u in enumerate(r.units) if u.core == core]


@check("MC040")
def causal_diagonal_masked(ctx: MaskContext) -> Iterator[Finding]:
    s, r = ctx.summary, ctx.inf.reading
    if r is None or ctx.inf.convention == "ambiguous":
        return
    units = _units_with(r, "causal-diagonal-masked")
    if units and r.unit_rows > 1:
        rows = np.array([u * r.unit_rows for u in units])
        yield ctx.finding(
            "MC040", "causal mask that also hides the diagonal: no token sees itself and the "
            "first query sees nothing", _rows_where(s, rows),
            fix="torch.triu(..., diagonal=1)  # mask strictly above the diagonal")
        return
    if _hides_every_own_key(ctx):
        yield ctx.finding(
            "MC040", f"no query keeps its own key: the diagonal of this {s.matrix_rows}x"
            f"{s.cols} self-attention mask is hidden for every query that attends anything "
            "(in at least one batch/head matrix) "
            f"({', '.join(ctx.inf.pattern) or 'custom'} as read): an inverted mask, or one "
            "built with the wrong diagonal",
            fix=cv.invert_fix(ctx.api, ctx.inf.role))


def _hides_every_own_key(ctx: MaskContext) -> bool:
    from maskcheck.analysis.infer import own_key_kept

    s, r = ctx.summary, ctx.inf.reading
    if r is None or ctx.inf.padding_role or r.unit_rows < 2 or s.matrix_rows != s.cols:
        return False
    own = own_key_kept(s, r)
    if own is None:
        return False
    # Per matrix: a correct one has a real query, and real queries keep their own keys; pad
    # queries may not, so one matrix whose every attending query hides its own key is enough.
    attends = (r.kept_count > 0).reshape(s.matrices, s.matrix_rows)
    hides = ~own.reshape(s.matrices, s.matrix_rows)
    return bool(np.any(attends.any(axis=1) & np.all(hides | ~attends, axis=1)))


@check("MC041")
def anti_causal(ctx: MaskContext) -> Iterator[Finding]:
    s, r = ctx.summary, ctx.inf.reading
    if r is None or ctx.inf.convention == "ambiguous" or r.unit_rows < 2:
        return
    units = _units_with(r, "anti-causal")
    if units:
        yield ctx.finding(
            "MC041", "triangular the wrong way round: each query attends to itself and the "
            "FUTURE, not the past", _rows_where(s, np.array([u * r.unit_rows for u in units])),
            fix="mask = mask.transpose(-2, -1)  # or build it with triu(diagonal=1)")


@check("MC042")
def scattered_padding(ctx: MaskContext) -> Iterator[Finding]:
    s, r = ctx.summary, ctx.inf.reading
    if r is None or ctx.inf.convention == "ambiguous" or r.unit_rows != 1:
        return
    c, f, la = r.kept_count, r.first_kept, r.last_kept
    bad = (c > 0) & ((la - f + 1 != c) | ((f > 0) & (la < s.cols - 1)))
    if bad.any():
        yield ctx.finding(
            "MC042", f"{_describe_rows(int(bad.sum()), 'sequence')} with masked keys not in one "
            "run at either end", _rows_where(s, np.flatnonzero(bad)),
            fix="key_padding_mask = torch.arange(S)[None, :] >= lengths[:, None]")


@check("MC050")
def dense_causal_mask(ctx: MaskContext) -> Iterator[Finding]:
    s, r, inf = ctx.summary, ctx.inf.reading, ctx.inf
    if r is None or inf.role != "attn_mask" or r.unit_rows < 2 or s.matrix_rows != s.cols:
        return
    if inf.convention == "ambiguous" or inf.inverted or "bias" in inf.params:
        return
    api = cv.APIS.get(ctx.api)
    if api is None or not api.has_is_causal:
        return  # eager attention, FlexAttention, a 2-D HF mask: there is no is_causal to pass
    if all(u.core == "causal" and not (u.pad_left or u.pad_right) for u in r.units) and \
            len(set(s.matrix_crc.tolist())) == 1:
        yield ctx.finding(
            "MC050", "exactly causal: is_causal=True gives the same result without a "
            f"{s.matrix_rows}x{s.cols} tensor and lets fused kernels run",
            fix="F.scaled_dot_product_attention(q, k, v, is_causal=True)")


@check("MC051")
def redundant_broadcast_dims(ctx: MaskContext) -> Iterator[Finding]:
    s = ctx.summary
    lead = s.shape[:-2]
    if len(s.shape) < 3 or s.matrices < 2 or ctx.inf.reading is None:
        return
    crc = s.matrix_crc.reshape(lead)
    axes = [d for d, n in enumerate(lead) if n > 1 and bool(np.all(crc == crc.take([0], axis=d)))]
    if axes:
        new = tuple(1 if d in axes else n for d, n in enumerate(lead)) + s.shape[-2:]
        yield ctx.finding(
            "MC051", f"identical across dim{'s' if len(axes) > 1 else ''} "
            f"{', '.join(map(str, axes))}: store it as {new} and let broadcasting expand it",
            fix=f"mask = mask[{', '.join(':1' if d in axes else ':' for d in range(len(lead)))}]")
