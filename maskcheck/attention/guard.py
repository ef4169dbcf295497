"""`maskcheck.guard()`: run the mask rules on every attention call inside a block.

    with maskcheck.guard(action="raise"):          # or "warn" (default)
        model(batch)

Every call the interception layer sees (`intercept`: transformers' attention registry, SDPA,
nn.MultiheadAttention / F.multi_head_attention_forward, flex_attention) has its mask analysed
with the API that reads it (a FlexAttention BlockMask is expanded to its token-level keep-mask).
A finding at or above `fail_on` is reported as
`file:line: CODE name [tensor] in model.layers.3.self_attn (call 7, hf:sdpa): message`,
naming the first frame of the user's code, the module and the call's index in the block (the
`nth` to hand to `maskcheck.capture`). The same finding at the same site is reported once per
block; when the block ends a warning says how many more calls had it.
SDPA calls with is_causal=True and an attn_mask give MC060.
`check_output=True` also looks at the output (always on for transformers' eager functions):
NaN rows of real tokens with no key to attend (MC002; pad-query rows are info), NaN in rows that
have keys to attend when the mask holds NaN (MC001) or when key/value hold NaN/inf at masked
positions (MC061).

`guard.calls` says what was seen (total, per implementation, per module); a block that saw no
attention call says so once, with the likely reason.

The same mask object is analysed once per guard block while it is unchanged (cached on
identity and torch's in-place version counter). Analysing a mask copies it to the CPU, which
synchronises a GPU. See `intercept` for torch.compile and for why MHA's eval fast path does
not run inside the block.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Literal

import torch

from maskcheck.attention.call import call_hidden
from maskcheck.attention.intercept import (
    GuardError,
    Interceptor,
    MaskcheckWarning,
    SeenCall,
    output_tensor,
    user_site,
)
from maskcheck.errors import UsageError
from maskcheck.model import Finding, Severity
from maskcheck.rules.registry import get_rule
from maskcheck.selection import Selection, parse_severity

__all__ = ["CallLog", "GuardError", "GuardReport", "MaskcheckWarning", "guard"]

_CACHE_SIZE = 32


@dataclass
class CallLog:
    """What a guard block saw: attention calls in total, per implementation, per module."""

    total: int = 0
    by_impl: dict[str, int] = field(default_factory=dict)
    by_module: dict[str, int] = field(default_factory=dict)
    # > 0 when calls ran inside a torch.compile graph that cannot break (fullgraph=True);
    # counted from inside the graph, so a count of events rather than an exact call count.
    unchecked_compiled: int = 0

    def add(self, seen: SeenCall) -> None:
        self.total += 1
        self.by_impl[seen.impl] = self.by_impl.get(seen.impl, 0) + 1
        if seen.module:
            self.by_module[seen.module] = self.by_module.get(seen.module, 0) + 1

    def __int__(self) -> int:
        return self.total


@dataclass
class GuardReport:
    """One finding at one site, with how many calls of the block had it."""

    site: str  # file:line of the user's code
    module: str  # the module that made the first call with it
    call_index: int  # that call's index in the block (capture(nth=...))
    impl: str
    finding: Finding
    count: int = 1
    modules: list[str] = field(default_factory=list)

    def line(self) -> str:
        f = self.finding
        where = f" in {self.module}" if self.module else ""
        return (f"{f.code} {f.name}" + (f" [{f.tensor}]" if f.tensor else "")
                + f"{where} (call {self.call_index}, {self.impl}): {f.message}")


_API_OF_IMPL = {"sdpa": "sdpa", "hf:sdpa": "sdpa", "mha": "mha", "hf:eager": "eager",
                "hf:paged|eager": "eager", "flex": "flex", "hf:flex_attention": "flex"}


def api_of(seen: SeenCall, mask: torch.Tensor | None = None) -> str:
    """The API whose convention reads this call's mask."""
    if seen.block_mask is not None:
        return "flex"
    api = _API_OF_IMPL.get(seen.impl)
    if api is not None:
        return api
    # flash and other registered functions get HF's 2-D (N, S) 1 = keep padding mask or a
    # 4-D mask like sdpa's.
    return "hf" if mask is not None and mask.dim() == 2 else "sdpa"


class guard:
    def __init__(self, action: Literal["warn", "raise"] = "warn", *, check_output: bool = False,
                 fail_on: str = "warning", select: list[str] | None = None,
                 ignore: list[str] | None = None) -> None:
        if action not in ("warn", "raise"):
            raise UsageError("guard(action=...) takes 'warn' or 'raise'")
        self.action = action
        self.check_output = check_output
        self.fail_on: Severity = parse_severity(fail_on, origin="guard(fail_on=...)")
        self.selection = Selection.build(select, ignore, origin="guard()")
        self.calls = CallLog()
        self.reports: list[GuardReport] = []
        self._by_key: dict[tuple[str, str, str, str], GuardReport] = {}
        # The mask is kept in its entry so that its id cannot be reused while cached.
        self._cache: dict[tuple[int, int, str, str, str | None, int],
                          tuple[Any, list[Finding], Any]] = {}
        self._by_content: dict[tuple[Any, ...], list[Finding]] = {}
        self._layer = Interceptor(self._handle)

    @property
    def findings(self) -> list[tuple[str, Finding]]:
        """(site, finding) for every finding reported, once per site."""
        return [(r.site, r.finding) for r in self.reports]

    def __enter__(self) -> guard:
        self._layer.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._layer.__exit__(exc_type, exc, tb)
        self._cache.clear()
        self._by_content.clear()
        self.calls.unchecked_compiled = self._layer.unchecked_compiled()
        if exc_type is None:
            self._summarise()

    # ------------------------------------------------------------------------ per call

    def _handle(self, seen: SeenCall, run: Callable[[], Any]) -> Any:
        self.calls.add(seen)
        found = self._call_findings(seen)
        self._report(seen, found)
        result = run()
        # Eager paths (softmax(scores + mask) in Python) are checked always: no kernel stands
        # between the mask and a NaN, and the check is one isfinite over the output.
        if (self.check_output or seen.eager) and seen.call is not None:
            self._report(seen, self._output_findings(seen, output_tensor(result)))
        return result

    def _call_findings(self, seen: SeenCall) -> list[Finding]:
        call = seen.call
        out: list[Finding] = []
        if seen.block_mask is not None:
            out.extend(self._cached(seen.block_mask, 0, "block_mask", "flex",
                                    call.dtype if call is not None else None))
        if call is None:
            return out
        kpm = call.key_padding_mask
        for name in ("attn_mask", "key_padding_mask"):
            mask = getattr(call, name)
            if isinstance(mask, torch.Tensor):
                api = api_of(seen, mask)
                companion = kpm if name == "attn_mask" else None
                out.extend(self._cached(mask, int(getattr(mask, "_version", 0)), name, api,
                                        call.dtype, companion))
        if (seen.impl in ("sdpa", "hf:sdpa") and call.is_causal
                and call.attn_mask is not None):
            out.append(_finding("MC060", "is_causal=True together with an attn_mask: MATH "
                                "raises, other kernels combine both (see maskcheck replay)"))
        return out

    def _cached(self, mask: Any, version: int, name: str, api: str,
                query_dtype: str | None, key_padding: torch.Tensor | None = None
                ) -> list[Finding]:
        # Everything the analysis reads is part of the key: the name (a name hint), the API, the
        # query dtype (MC020) and the companion key padding mask (the pad-query verdict).
        key = (id(mask), version, name, api, query_dtype,
               id(key_padding) if key_padding is not None else 0)
        hit = self._cache.get(key)
        if hit is None or hit[0] is not mask or hit[2] is not key_padding:
            real = None
            if key_padding is not None:
                from maskcheck.attention.call import hidden_by

                real = ~hidden_by(key_padding, "masked")
            hit = (mask, self._analyse(mask, name, api, query_dtype, real), key_padding)
            self._cache[key] = hit
            while len(self._cache) > _CACHE_SIZE:  # the oldest entry goes first
                self._cache.pop(next(iter(self._cache)))
        return hit[1]

    def _analyse(self, mask: Any, name: str, api: str, query_dtype: str | None,
                 real_keys: torch.Tensor | None = None) -> list[Finding]:
        from maskcheck.attention.blockmask import block_mask_source
        from maskcheck.attention.replay import to_numpy
        from maskcheck.errors import MaskcheckError
        from maskcheck.io.base import ArraySource

        if isinstance(mask, torch.Tensor):
            arr, dtype = to_numpy(mask)
            source = ArraySource(name, arr, dtype=dtype)
        else:
            try:
                source = block_mask_source(mask, name)
            except MaskcheckError:  # too large to expand: nothing to say about its tokens
                return []
        real = None if real_keys is None else real_keys.cpu().numpy()
        # Models build a new mask object every forward; equal bytes give equal findings (the
        # analysis is a function of name, bytes, shape, dtype, api, query dtype, companion and
        # selection), so a mask equal to one seen in this block reuses its findings.
        content = (name, source.shape, source.dtype, api, query_dtype, _digest(source.array),
                   None if real is None else _digest(real))
        known = self._by_content.get(content)
        if known is None:
            known = self._analyse_source(source, api, query_dtype, real, name)
            self._by_content[content] = known
            while len(self._by_content) > _CACHE_SIZE:
                self._by_content.pop(next(iter(self._by_content)))
        return known

    def _analyse_source(self, source: Any, api: str, query_dtype: str | None,
                        real: Any, name: str) -> list[Finding]:
        from maskcheck.analysis.pipeline import report_from_summary
        from maskcheck.analysis.summary import summarize

        # analyze_source without its preview picture, which only the renderers read.
        report = report_from_summary(summarize(source, None), api=api, query_dtype=query_dtype,
                                     selection=self.selection, real_keys=real)
        return [f if f.tensor else replace(f, tensor=name) for f in report.findings]

    def _output_findings(self, seen: SeenCall, out: torch.Tensor | None) -> list[Finding]:
        call = seen.call
        if call is None or out is None or not out.is_floating_point():
            return []
        bad_out = ~torch.isfinite(out.detach())
        if not bool(bad_out.any()):
            return []
        try:
            hidden = _hidden_of(seen)
            nan_rows = _rows_bhl(seen, bad_out.any(-1))
            empty = hidden.all(-1)
            if call.api == "mha":
                empty = empty.any(1)
            empty = empty.expand(nan_rows.shape) if empty.shape != nan_rows.shape else empty
        except Exception:  # an output check must never break the user's call
            return []
        found: list[Finding] = []
        if bool((empty & nan_rows).any()):
            pad = _pad_queries(seen, hidden, empty.shape)
            real_empty, pad_empty = empty & nan_rows & ~pad, empty & nan_rows & pad
            if bool(real_empty.any()):
                rows = tuple(tuple(r) for r in torch.nonzero(real_empty).tolist()[:20])
                found.append(_finding("MC002", f"{int(real_empty.sum())} NaN output row(s) "
                                      "of real tokens have no key to attend", rows))
            if bool(pad_empty.any()):
                rows = tuple(tuple(r) for r in torch.nonzero(pad_empty).tolist()[:20])
                found.append(replace(_finding(
                    "MC002", f"{int(pad_empty.sum())} NaN output row(s) of pad queries "
                    "(padding positions) have no key to attend: their outputs are discarded; "
                    "a NaN that reaches real tokens through the values is MC061", rows),
                    severity=Severity.INFO))
        real_bad = nan_rows & ~empty
        if bool(real_bad.any()):
            found.extend(_real_row_findings(seen, hidden, real_bad))
        return found

    # ------------------------------------------------------------------------ reporting

    def _report(self, seen: SeenCall, found: list[Finding]) -> None:
        hits = [f for f in found if f.severity.at_least(self.fail_on)
                and self.selection.allows(f.code)]
        if not hits:
            return
        file, line = user_site()
        site = f"{file}:{line}"
        fresh: list[GuardReport] = []
        for f in hits:
            key = (site, f.code, f.tensor or "", f.message)
            known = self._by_key.get(key)
            if known is not None:
                known.count += 1
                if seen.module and seen.module not in known.modules:
                    known.modules.append(seen.module)
                continue
            report = GuardReport(site, seen.module, seen.index, seen.impl, f,
                                 modules=[seen.module] if seen.module else [])
            self._by_key[key] = report
            self.reports.append(report)
            fresh.append(report)
        if not fresh:
            return
        text = "; ".join(r.line() for r in fresh)
        if self.action == "raise":
            raise GuardError(f"{site}: {text}", [r.finding for r in fresh], site)
        warnings.warn_explicit(text, MaskcheckWarning, file, line, module="maskcheck.guard")

    def _summarise(self) -> None:
        for r in self.reports:
            if r.count > 1:
                more = [m for m in r.modules if m != r.module]
                where = (f" (also in {', '.join(more[:4])}" + (", ..." if len(more) > 4 else "")
                         + ")") if more else ""
                _warn(f"maskcheck.guard: {r.finding.code} at {r.site} was found in "
                      f"{r.count} calls of this block, reported once{where}")
        unchecked = self.calls.unchecked_compiled
        if unchecked:
            _warn("maskcheck.guard: attention calls ran inside a torch.compile graph that "
                  "cannot break (fullgraph=True), so they were not checked; guard "
                  "the model uncompiled or compiled without fullgraph to check them")
        elif self.calls.total == 0:
            _warn("maskcheck.guard: the block made no attention call maskcheck can see. "
                  "Likely: the model computes attention with its own matmul + softmax "
                  "(not F.scaled_dot_product_attention, nn.MultiheadAttention, "
                  "transformers' attention functions or flex_attention), or calls a "
                  "flex_attention imported by name before the block")


def _digest(arr: Any) -> bytes:
    import hashlib

    import numpy as np

    return hashlib.blake2b(np.ascontiguousarray(arr).tobytes(), digest_size=16).digest()


def _warn(text: str) -> None:
    warnings.warn(text, MaskcheckWarning, stacklevel=4)  # _summarise, __exit__, the with


def _hidden_of(seen: SeenCall) -> torch.Tensor:
    """(…, L, S) bool: what the call hides, from its dense mask or its BlockMask."""
    call = seen.call
    assert call is not None
    if seen.block_mask is not None:
        from maskcheck.attention.blockmask import expand_block_mask

        return ~expand_block_mask(seen.block_mask).keep.to(call.query.device)
    return call_hidden(call)


def real_keys_of(seen: SeenCall) -> torch.Tensor | None:
    """(N, S) bool, True = real token, from the call's key padding mask (MHA)."""
    call = seen.call
    if call is None or call.key_padding_mask is None:
        return None
    from maskcheck.attention.call import hidden_by

    return ~hidden_by(call.key_padding_mask, "masked")


def _pad_queries(seen: SeenCall, hidden: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Bool over output rows: the query is a padding position (analysis.padquery)."""
    from maskcheck.analysis.padquery import pad_query_rows

    real = real_keys_of(seen)
    pad = torch.from_numpy(pad_query_rows(
        (~hidden).cpu().numpy(), None if real is None else real.cpu().numpy()))
    if seen.call is not None and seen.call.api == "mha" and pad.dim() == 3:
        pad = pad.all(1)  # (N, H, L) -> (N, L): a row is padding for every head
    return pad.to(hidden.device).expand(shape)


def _rows_bhl(seen: SeenCall, rows: torch.Tensor) -> torch.Tensor:
    """Output rows laid out as the hidden tensor's (B, H, L) (MHA: (N, L))."""
    if seen.output_layout == "blhd" and rows.dim() == 3:
        return rows.transpose(1, 2)
    if seen.output_layout == "lbe" and rows.dim() == 2:
        return rows.transpose(0, 1)
    return rows


def _real_row_findings(seen: SeenCall, hidden: torch.Tensor,
                       real_bad: torch.Tensor) -> list[Finding]:
    call = seen.call
    assert call is not None
    n = int(real_bad.sum())
    rows = tuple(tuple(r) for r in torch.nonzero(real_bad).tolist()[:20])
    out: list[Finding] = []
    mask = call.attn_mask
    if mask is not None and mask.is_floating_point() and bool(torch.isnan(mask).any()):
        out.append(_finding("MC001", f"the mask holds NaN and {n} output row(s) that have "
                            "keys to attend are NaN/inf", rows))
    _, k, v = call.tensors()
    bad_kv = ~torch.isfinite(k.detach()).all(-1) | ~torch.isfinite(v.detach()).all(-1)
    if call.api == "mha":
        bad_kv = bad_kv.unsqueeze(1)
    elif bad_kv.dim() >= 3 and bad_kv.shape[-2] != hidden.shape[-3]:
        bad_kv = bad_kv.any(-2, keepdim=True)  # GQA: fewer key/value heads than query heads
    try:
        hidden_keys = hidden.any(-2)
        if bool((bad_kv.expand(hidden_keys.shape) & hidden_keys).any()):
            out.append(_finding("MC061", f"{n} output row(s) that have keys to attend are "
                                "NaN/inf and key/value hold NaN or inf at masked positions "
                                "(pytorch/pytorch#101967)", rows))
    except RuntimeError:
        pass
    return out


def _finding(code: str, message: str, where: tuple[tuple[int, ...], ...] = ()) -> Finding:
    rule = get_rule(code)
    assert rule is not None, code
    return Finding(code, rule.name, rule.severity, message, where, rule.fix or None)
