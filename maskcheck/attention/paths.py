"""Run one attention call on every code path torch has for it, and measure each result.

SDPA: each `SDPBackend` usable on the device (tried with a plain call first; a backend that
refuses even that is listed in `unavailable`), plus `default` (torch's own pick, named via
`torch._fused_sdp_choice` where it exists). MHA: `need_weights`, `no_weights` (eval with
grad enabled) and `fast_path` (eval + no_grad; whether torch really took it is detected by
wrapping `torch._native_multi_head_attention`). `reference`: maskcheck's float64 computation.

`masked_weight` is measured, never assumed:
- SDPA backends: the same backend is run again with `value` replaced by one-hot key columns
  (E keys per run), so the output *is* the weight matrix that kernel used;
- MHA need_weights: the weights torch returns (average_attn_weights=False);
- MHA no_weights: the inner F.scaled_dot_product_attention call MHA makes is re-run with the
  same q, k and mask and a one-hot value (so: the kernel's weights, with torch's merged mask);
- MHA fast_path: torch._native_multi_head_attention re-run with need_weights=True on the same
  inputs (the native kernel's own weights).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from maskcheck.attention.call import AttentionCall, Reference, dtype_name, reference
from maskcheck.model import Index, Run

BACKENDS = ("math", "flash", "efficient", "cudnn")
_MAX_PROBE_RUNS = 64
_UNIFORM_TOL = 2e-3
TOLERANCE = {"float16": 1e-2, "bfloat16": 6e-2, "float32": 1e-4, "float64": 1e-9}


def _backend(name: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {
        "math": SDPBackend.MATH,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }[name]


def first_line(e: BaseException) -> str:
    for line in str(e).strip().splitlines():
        if line.strip():
            return line.strip()
    return type(e).__name__


@dataclass
class PathResult:
    run: Run
    output: torch.Tensor | None = None  # float64 on cpu
    weights: torch.Tensor | None = None  # float64 (…, L, S) on cpu, per head
    # Per output row: nan | zero | uniform | attends (row with nothing to attend),
    # correct | wrong (row with keys).
    classes: dict[Index, str] = field(default_factory=dict)


@dataclass
class PathsResult:
    call: AttentionCall
    ref: Reference | None
    ref_error: str | None
    paths: list[PathResult]
    unavailable: dict[str, str] = field(default_factory=dict)
    picked: str | None = None  # the backend torch's default picks, when it says

    @property
    def runs(self) -> list[Run]:
        return [p.run for p in self.paths]

    def by_path(self, name: str) -> PathResult | None:
        return next((p for p in self.paths if p.run.path == name), None)


# ------------------------------------------------------------------------------ helpers


@contextlib.contextmanager
def _quiet() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _warning_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    out: list[str] = []
    for w in caught:
        line = first_line(Exception(str(w.message)))
        if line not in out:
            out.append(line)
    return out[:3]


def _sdpa_kwargs(call: AttentionCall) -> dict[str, Any]:
    kw: dict[str, Any] = {"attn_mask": call.attn_mask, "dropout_p": 0.0,
                          "is_causal": call.is_causal}
    if call.kwargs.get("scale") is not None:
        kw["scale"] = float(call.kwargs["scale"])
    if call.kwargs.get("enable_gqa"):
        kw["enable_gqa"] = True
    return kw


def _one_hot_values(v: torch.Tensor, start: int, width: int) -> torch.Tensor:
    """Value tensor whose column c is 1 exactly at key start + c: out[..., c] = w[..., start+c]."""
    s_len = v.shape[-2]
    probe = torch.zeros(*v.shape[:-2], s_len, width, dtype=v.dtype, device=v.device)
    idx = torch.arange(start, min(start + width, s_len), device=v.device)
    probe[..., idx, idx - start] = 1
    return probe


def probe_weights(run: Callable[[torch.Tensor], torch.Tensor], v: torch.Tensor,
                  s_len: int) -> torch.Tensor | None:
    """The weights a kernel applies, read by running it on one-hot values."""
    width = v.shape[-1]
    if math.ceil(s_len / width) > _MAX_PROBE_RUNS:
        return None
    parts = []
    for start in range(0, s_len, width):
        out = run(_one_hot_values(v, start, width)).detach().to("cpu", torch.float64)
        parts.append(out[..., : min(width, s_len - start)])
    return torch.cat(parts, dim=-1)


def sdpa_backend_available(name: str, device: torch.device) -> str | None:
    """None if the backend runs a plain call on this device, else torch's refusal."""
    from torch.nn.attention import sdpa_kernel

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    x = torch.randn(1, 1, 8, 16, device=device, dtype=dtype)
    try:
        with _quiet(), sdpa_kernel(_backend(name)):
            F.scaled_dot_product_attention(x, x, x)
    except Exception as e:  # torch's refusal is the answer
        return first_line(e)
    return None


def fused_choice(call: AttentionCall) -> str | None:
    fn = getattr(torch, "_fused_sdp_choice", None)
    if fn is None:
        return None
    q, k, v = call.tensors()
    kw = _sdpa_kwargs(call)
    try:
        with _quiet():
            code = int(fn(q, k, v, kw["attn_mask"], 0.0, kw["is_causal"], scale=kw.get("scale"),
                          **({"enable_gqa": True} if kw.get("enable_gqa") else {})))
    except Exception:  # a private API; its absence or refusal just means "unknown"
        return None
    names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}
    return names.get(code, str(code))


# ----------------------------------------------------------------------- measuring a run


def measure(
    api: str, path: str, device: str, dtype: str, output: torch.Tensor,
    weights: torch.Tensor | None, ref: Reference | None, *, zero_row: torch.Tensor | None = None,
) -> PathResult:
    out = output.detach().to("cpu", torch.float64)
    nan = torch.isnan(out).any(-1)
    base = zero_row.detach().to("cpu", torch.float64) if zero_row is not None else None
    zero = ((out - base).abs() <= 1e-6 * (1 + base.abs())).all(-1) if base is not None else \
        (out == 0).all(-1)
    run = Run(api=api, path=path, device=device, dtype=dtype,
              status="nan" if bool(nan.any()) else "ok",
              nan_rows=_rows(nan), zero_rows=_rows(zero & ~nan))
    result = PathResult(run, out, weights)
    if ref is None:
        return result
    empty = ref.empty.to("cpu")
    valid = ~empty & ~torch.isnan(ref.output.to("cpu")).any(-1)
    err = (out - ref.output.to("cpu")).abs().amax(-1)
    if bool((valid & ~nan).any()):
        run.max_abs_err = _round(float(err[valid & ~nan].max()))
    scale = float(ref.output.to("cpu")[valid].abs().max()) if bool(valid.any()) else 1.0
    tol = TOLERANCE.get(dtype, 1e-4) * max(1.0, scale)
    hidden = ref.hidden.to("cpu")
    w_hidden = None
    if weights is not None and weights.shape == hidden.shape:
        w_hidden = torch.where(hidden, torch.nan_to_num(weights, nan=0.0), 0.0).sum(-1)
        finite_rows = ~torch.isnan(weights).any(-1)
        run.masked_weight = _round_weight(float(w_hidden[finite_rows].max())) \
            if bool(finite_rows.any()) else None
    for idx in _indices(nan.shape):
        if bool(nan[idx]):
            result.classes[idx] = "nan"
        elif bool(empty[idx]):
            result.classes[idx] = _empty_row_class(idx, bool(zero[idx]), weights, hidden, api)
        elif bool(err[idx] > tol) or (w_hidden is not None and _row_leak(w_hidden, idx, api)):
            # a row that should attend but came out as zeros says more than "wrong"
            result.classes[idx] = "zero" if bool(zero[idx]) else "wrong"
        else:
            result.classes[idx] = "correct"
    run.extra["uniform_rows"] = [list(i) for i, c in result.classes.items() if c == "uniform"]
    run.extra["leak_rows"] = [list(i) for i, c in result.classes.items()
                              if c == "attends" or (c == "wrong" and w_hidden is not None
                                                    and _row_leak(w_hidden, i, api))]
    return result


def _row_leak(w_hidden: torch.Tensor, idx: Index, api: str) -> bool:
    val = w_hidden[idx[0], :, idx[1]].max() if api == "mha" else w_hidden[idx]
    return bool(val > 1e-3)


def _empty_row_class(idx: Index, zero: bool, weights: torch.Tensor | None,
                     hidden: torch.Tensor, api: str) -> str:
    if weights is None or weights.shape != hidden.shape:
        return "zero" if zero else "attends"
    if api == "mha":
        heads = hidden[idx[0], :, idx[1]].all(-1)  # the heads of this row that see nothing
        w = weights[idx[0], heads, idx[1]]
    else:
        w = weights[idx].unsqueeze(0)
    if bool((w.abs() <= 1e-6).all()) or zero:
        return "zero"
    s_len = w.shape[-1]
    if bool(((w - 1.0 / s_len).abs() <= max(_UNIFORM_TOL, 2.0 / s_len * 1e-2)).all()):
        return "uniform"
    return "attends"


def _indices(shape: torch.Size) -> Iterator[Index]:
    for flat in range(math.prod(shape)):
        idx: list[int] = []
        for d in reversed(shape):
            idx.append(flat % d)
            flat //= d
        yield tuple(reversed(idx))


def _rows(flags: torch.Tensor) -> list[Index]:
    return [tuple(int(x) for x in row) for row in torch.nonzero(flags).tolist()]


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def _round_weight(x: float) -> float:
    return round(x, 4)


def error_run(api: str, path: str, device: str, dtype: str, e: BaseException) -> PathResult:
    return PathResult(Run(api=api, path=path, device=device, dtype=dtype, status="error",
                          error=first_line(e)))


def reference_run(call: AttentionCall, ref: Reference) -> PathResult:
    empty_rows = _rows(ref.empty.to("cpu"))
    run = Run(api=call.api, path="reference", device="cpu", dtype="float64",
              status="nan" if empty_rows else "ok", nan_rows=empty_rows, zero_rows=[],
              max_abs_err=0.0, masked_weight=0.0)
    run.extra["note"] = "rows with no key to attend are NaN by definition" if empty_rows else ""
    return PathResult(run, ref.output.to("cpu"), ref.weights.to("cpu"))


# --------------------------------------------------------------------------------- SDPA


def run_sdpa_path(call: AttentionCall, backend: str | None, ref: Reference | None) -> PathResult:
    from torch.nn.attention import sdpa_kernel

    q, k, v = call.tensors()
    kw = _sdpa_kwargs(call)
    name = backend or "default"
    ctx: contextlib.AbstractContextManager[Any] = (
        sdpa_kernel(_backend(backend)) if backend else contextlib.nullcontext())
    try:
        with _quiet() as caught, ctx:
            out = F.scaled_dot_product_attention(q, k, v, **kw)
            weights = probe_weights(
                lambda pv: F.scaled_dot_product_attention(q, k, pv, **kw), v, k.shape[-2])
    except Exception as e:  # a refusal is a result
        return error_run(call.api, name, call.device, call.dtype, e)
    result = measure(call.api, name, call.device, call.dtype, out, weights, ref)
    if caught:
        result.run.extra["warnings"] = _warning_lines(caught)
    return result


def run_manual_path(call: AttentionCall, ref: Reference | None) -> PathResult:
    """An eager attention as hand-written code does it (HF eager: fp32 softmax)."""
    q, k, v = call.tensors()
    try:
        with _quiet():
            scale = call.kwargs.get("scale") or 1.0 / math.sqrt(q.shape[-1])
            scores = (q @ k.transpose(-2, -1)) * scale
            m = call.attn_mask
            if m is not None:
                scores = scores.masked_fill(~m, -math.inf) if m.dtype == torch.bool \
                    else scores + m
            if call.is_causal:
                causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
                scores = scores.masked_fill(~causal, -math.inf)
            w = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = w @ v
    except Exception as e:
        return error_run(call.api, "eager", call.device, call.dtype, e)
    return measure(call.api, "eager", call.device, call.dtype, out,
                   w.detach().to("cpu", torch.float64), ref)


# ---------------------------------------------------------------------------------- MHA


def build_mha(call: AttentionCall) -> torch.nn.MultiheadAttention:
    w = call.weights
    e = call.query.shape[-1]
    kdim, vdim = call.key.shape[-1], call.value.shape[-1]
    mha = torch.nn.MultiheadAttention(
        e, call.num_heads, dropout=0.0, bias="in_proj_bias" in w,
        add_bias_kv="bias_k" in w, add_zero_attn=bool(call.kwargs.get("add_zero_attn")),
        kdim=kdim, vdim=vdim, batch_first=True, device=call.query.device,
        dtype=call.query.dtype)
    params = dict(mha.named_parameters())
    with torch.no_grad():
        for name, tensor in w.items():
            target = "out_proj.weight" if name == "out_proj_weight" else (
                "out_proj.bias" if name == "out_proj_bias" else name)
            if target not in params:
                raise ValueError(f"capture holds mha.{name} but the module has no {target}")
            params[target].copy_(tensor.reshape(params[target].shape))
    return mha


@contextlib.contextmanager
def _patched(owner: Any, attr: str, replacement: Any) -> Iterator[None]:
    original = getattr(owner, attr)
    setattr(owner, attr, replacement)
    try:
        yield
    finally:
        setattr(owner, attr, original)


def run_mha_path(call: AttentionCall, path: str, ref: Reference | None) -> PathResult:
    q, k, v = call.tensors()
    try:
        mha = build_mha(call)
    except Exception as e:
        return error_run("mha", path, call.device, call.dtype, e)
    mha.eval()
    kw: dict[str, Any] = {"key_padding_mask": call.key_padding_mask,
                          "attn_mask": call.attn_mask, "need_weights": path == "need_weights",
                          "average_attn_weights": False}
    if call.is_causal:
        kw["is_causal"] = True
    as_bool = False
    if path == "fast_path" and call.kwargs.get("masks_canonicalised"):
        # nn.MultiheadAttention turns bool masks into 0/-inf floats before calling
        # F.multi_head_attention_forward (where capture sees them), and float masks disable
        # the fast path; the equivalent bool mask gives the call the user made.
        for name in ("key_padding_mask", "attn_mask"):
            m = kw[name]
            if m is not None and m.is_floating_point() and _zero_neginf(m):
                kw[name], as_bool = torch.isneginf(m), True
    probed: list[torch.Tensor] = []
    native_ran: list[bool] = []
    bias = mha.out_proj.bias
    try:
        with _quiet() as caught, _mha_probe(path, probed, native_ran):
            grad = torch.no_grad() if path == "fast_path" else torch.enable_grad()
            with grad:
                out, weights = mha(q, k, v, **kw)
    except Exception as e:
        return error_run("mha", path, call.device, call.dtype, e)
    w64: torch.Tensor | None = None
    if weights is not None:
        w64 = weights.detach().to("cpu", torch.float64)
    elif probed:
        w64 = probed[0]
    zero_row = bias.detach() if bias is not None else None
    result = measure("mha", path, call.device, call.dtype, out, w64, ref, zero_row=zero_row)
    if path == "fast_path":
        result.run.extra["fast_path_ran"] = bool(native_ran)
        if as_bool:
            result.run.extra["note"] = "0/-inf float masks passed as the bool masks they encode"
    if caught:
        result.run.extra["warnings"] = _warning_lines(caught)
    return result


def _zero_neginf(m: torch.Tensor) -> bool:
    return bool(((m == 0) | torch.isneginf(m)).all())


@contextlib.contextmanager
def _mha_probe(path: str, probed: list[torch.Tensor], native_ran: list[bool]) -> Iterator[None]:
    if path == "no_weights":
        real = F.scaled_dot_product_attention

        def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *a: Any,
                 **kw: Any) -> torch.Tensor:
            if not probed:
                w = probe_weights(lambda pv: real(q, k, pv, *a, **kw), v, k.shape[-2])
                if w is not None:
                    probed.append(w)
            return real(q, k, v, *a, **kw)

        # multi_head_attention_forward looks SDPA up in torch.nn.functional's globals.
        with _patched(F, "scaled_dot_product_attention", sdpa):
            yield
    elif path == "fast_path":
        real_native = torch._native_multi_head_attention

        def native(*a: Any, **kw: Any) -> Any:
            native_ran.append(True)
            out = real_native(*a, **kw)
            args = list(a)
            # (q, k, v, embed_dim, num_heads, qkv_w, qkv_b, proj_w, proj_b, mask,
            #  need_weights, average_attn_weights, mask_type)
            if len(args) >= 12:
                args[10], args[11] = True, False
            else:
                kw = {**kw, "need_weights": True, "average_attn_weights": False}
            try:
                w = real_native(*args, **kw)[1]
                if w is not None and w.dim() == 4:
                    probed.append(w.detach().to("cpu", torch.float64))
            except Exception:  # weights are a measurement aid; the real call already ran
                pass
            return out

        with _patched(torch, "_native_multi_head_attention", native):
            yield
    else:
        yield


# -------------------------------------------------------------------------------- entry


def run_all_paths(call: AttentionCall, *, manual: bool = False, only_manual: bool = False,
                  ref: Reference | None = None) -> PathsResult:
    """Every path; `ref` overrides the reference (simulate measures mistakes against the
    mask that was meant, not the one passed)."""
    ref_error = None
    if ref is None:
        try:
            ref = reference(call)
        except Exception as e:
            ref, ref_error = None, first_line(e)
    if only_manual:
        manual_paths = [run_manual_path(call, ref)]
        if ref is not None:
            manual_paths.append(reference_run(call, ref))
        return PathsResult(call, ref, ref_error, manual_paths)
    device = call.query.device
    paths: list[PathResult] = []
    unavailable: dict[str, str] = {}
    picked = None
    if call.api == "mha":
        for path in ("need_weights", "no_weights", "fast_path"):
            paths.append(run_mha_path(call, path, ref))
    else:
        for backend in BACKENDS:
            refusal = sdpa_backend_available(backend, device)
            if refusal is not None:
                unavailable[backend] = refusal
                continue
            paths.append(run_sdpa_path(call, backend, ref))
        default = run_sdpa_path(call, None, ref)
        picked = fused_choice(call)
        if picked is not None:
            default.run.extra["picked"] = picked
        paths.append(default)
        if manual or call.api == "manual":
            paths.append(run_manual_path(call, ref))
    if ref is not None:
        paths.append(reference_run(call, ref))
    else:
        paths.append(PathResult(Run(api=call.api, path="reference", device="cpu",
                                    dtype="float64", status="error", error=ref_error)))
    return PathsResult(call, ref, ref_error, paths, unavailable, picked)


def torch_version() -> str:
    return str(torch.__version__)


__all__ = ["PathResult", "PathsResult", "dtype_name", "first_line", "run_all_paths"]
