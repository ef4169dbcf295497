"""`maskcheck.guard()`: run the mask rules on every attention call inside a block.

    with maskcheck.guard(action="raise"):          # or "warn" (default)
        model(batch)

Each F.scaled_dot_product_attention / F.multi_head_attention_forward call (nn.MultiheadAttention
included) has its attn_mask / key_padding_mask analysed with the API it is passed to; findings
at or above `fail_on` are reported as `file:line: CODE name: message`, naming the first frame
outside torch and maskcheck. SDPA calls with is_causal=True and an attn_mask give MC060.
`check_output=True` also looks at the output: NaN rows caused by fully-masked rows (MC002)
or by NaN/inf in masked key/value slots (MC061) are reported.

The same mask object is analysed once per guard block while it is unchanged (cached on
identity and torch's in-place version counter). Analysing a mask copies it to the CPU, which
synchronises a GPU. See `intercept` for why MHA's eval fast path does not run inside the block.
"""

from __future__ import annotations

import warnings
from types import TracebackType
from typing import Any, Literal

import torch

from maskcheck.attention.call import AttentionCall, call_hidden
from maskcheck.attention.intercept import (
    AttentionMode,
    GuardError,
    MaskcheckWarning,
    output_tensor,
    user_site,
)
from maskcheck.errors import UsageError
from maskcheck.model import Finding, Severity
from maskcheck.rules.registry import get_rule
from maskcheck.selection import Selection, parse_severity

__all__ = ["GuardError", "MaskcheckWarning", "guard"]

_CACHE_SIZE = 32


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
        self.calls = 0
        self.findings: list[tuple[str, Finding]] = []
        # The mask is kept in its entry so that its id cannot be reused while cached.
        self._cache: dict[tuple[int, int], tuple[torch.Tensor, list[Finding]]] = {}
        self._mode = AttentionMode(self._handle)

    def __enter__(self) -> guard:
        self._mode.__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._mode.__exit__(exc_type, exc, tb)  # type: ignore[no-untyped-call]
        self._cache.clear()

    # ------------------------------------------------------------------------ per call

    def _handle(self, func: Any, call: AttentionCall, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        found = self._mask_findings(call)
        if call.api == "sdpa" and call.is_causal and call.attn_mask is not None:
            found.append(_finding("MC060", "is_causal=True together with an attn_mask: MATH "
                                  "raises, other kernels combine both (see maskcheck replay)"))
        self._report(found)
        result = func(*args, **kwargs)
        if self.check_output:
            self._report(self._output_findings(call, output_tensor(result)))
        return result

    def _mask_findings(self, call: AttentionCall) -> list[Finding]:
        out: list[Finding] = []
        api = "mha" if call.api == "mha" else "sdpa"
        for name in ("attn_mask", "key_padding_mask"):
            mask = getattr(call, name)
            if not isinstance(mask, torch.Tensor):
                continue
            key = (id(mask), int(getattr(mask, "_version", 0)))
            hit = self._cache.get(key)
            if hit is None or hit[0] is not mask:
                hit = (mask, self._analyse(mask, name, api, call.dtype))
                self._cache[key] = hit
                while len(self._cache) > _CACHE_SIZE:  # the oldest entry goes first
                    self._cache.pop(next(iter(self._cache)))
            out.extend(hit[1])
        return out

    def _analyse(self, mask: torch.Tensor, name: str, api: str, query_dtype: str) -> list[Finding]:
        from maskcheck.analysis import analyze_source
        from maskcheck.attention.replay import to_numpy
        from maskcheck.io.base import ArraySource

        arr, dtype = to_numpy(mask)
        report = analyze_source(ArraySource(name, arr, dtype=dtype), api=api,
                                query_dtype=query_dtype, selection=self.selection)
        return [f if f.tensor else _with_tensor(f, name) for f in report.findings]

    def _output_findings(self, call: AttentionCall, out: torch.Tensor | None) -> list[Finding]:
        if out is None or not bool(torch.isnan(out.detach()).any()):
            return []
        try:
            hidden = call_hidden(call)
        except Exception:  # an output check must never break the user's call
            return []
        nan_rows = torch.isnan(out.detach()).any(-1)
        _, k, v = call.tensors()
        bad = ~torch.isfinite(k.detach()).all(-1) | ~torch.isfinite(v.detach()).all(-1)
        if call.api == "mha":
            if call.kwargs.get("batch_first") is False and out.dim() == 3:
                nan_rows = nan_rows.transpose(0, 1)
                bad = bad.transpose(0, 1)
            bad = bad.unsqueeze(1)
        found: list[Finding] = []
        try:
            if bool((bad.expand(hidden.shape[:-2] + bad.shape[-1:]) & hidden.any(-2)).any()):
                found.append(_finding("MC061", "the output holds NaN and key/value hold NaN or "
                                      "inf at masked positions (pytorch/pytorch#101967)"))
        except RuntimeError:
            pass
        empty = hidden.all(-1)
        if call.api == "mha":
            empty = empty.any(1)
        if empty.shape == nan_rows.shape and bool((empty & nan_rows).any()):
            rows = [tuple(r) for r in torch.nonzero(empty & nan_rows).tolist()[:20]]
            found.append(_finding("MC002", f"{len(rows)} NaN output row(s) have no key to "
                                  "attend", tuple(rows)))
        return found

    def _report(self, found: list[Finding]) -> None:
        hits = [f for f in found if f.severity.at_least(self.fail_on)
                and self.selection.allows(f.code)]
        if not hits:
            return
        file, line = user_site()
        site = f"{file}:{line}"
        for f in hits:
            self.findings.append((site, f))
        text = "; ".join(f"{f.code} {f.name}" + (f" [{f.tensor}]" if f.tensor else "")
                         + f": {f.message}" for f in hits)
        if self.action == "raise":
            raise GuardError(f"{site}: {text}", hits, site)
        warnings.warn_explicit(text, MaskcheckWarning, file, line, module="maskcheck.guard")


def _finding(code: str, message: str, where: tuple[tuple[int, ...], ...] = ()) -> Finding:
    rule = get_rule(code)
    assert rule is not None, code
    return Finding(code, rule.name, rule.severity, message, where, rule.fix or None)


def _with_tensor(f: Finding, name: str) -> Finding:
    from dataclasses import replace

    return replace(f, tensor=name)
