"""Replay a capture (or a mask with generated q/k/v) on a device: runs, findings, mask reports."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from maskcheck.attention.call import DTYPES, AttentionCall
from maskcheck.attention.capture_file import load_call
from maskcheck.attention.findings import call_findings
from maskcheck.attention.paths import PathsResult, run_all_paths
from maskcheck.errors import UsageError
from maskcheck.model import FileReport, TensorReport
from maskcheck.selection import Selection

DEVICES = ("cpu", "cuda", "mps", "auto")
# Attention weights per call (batch x heads x queries x keys) replay runs: every path keeps its
# weights and a float64 reference, and each row is classified. 2**20 weights take about 8 s on
# one shared core; 2**23 (batch 2 x 12 heads x 512 x 512 is 2**22.6) about a minute. A call
# past it is refused in one line before anything runs, instead of minutes and gigabytes.
MAX_WEIGHTS = 1 << 23


@dataclass
class ReplayResult:
    report: FileReport
    paths: PathsResult
    generated: bool
    info: dict[str, Any] = field(default_factory=dict)


def resolve_device(name: str) -> torch.device:
    name = name.strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: no CUDA device is available to torch "
                             f"{torch.__version__}")
        return torch.device(name)
    if name == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise UsageError("--device mps: MPS is not available to this torch")
        return torch.device("mps")
    if name == "cpu":
        return torch.device("cpu")
    raise UsageError(f"--device takes {'|'.join(DEVICES)}, not {name!r}")


def resolve_dtype(name: str | None) -> torch.dtype | None:
    from maskcheck.commands.options import parse_float_dtype

    picked = parse_float_dtype(name, allowed=tuple(DTYPES))
    return None if picked is None else DTYPES[picked]


def mask_reports(call: AttentionCall, selection: Selection | None) -> list[TensorReport]:
    from maskcheck.analysis import analyze_source
    from maskcheck.io.base import ArraySource

    api = {"mha": "mha", "sdpa": "sdpa", "manual": "eager"}.get(call.api, "auto")
    out = []
    for name in ("attn_mask", "key_padding_mask"):
        t = getattr(call, name)
        if t is None:
            continue
        arr, dtype = to_numpy(t)
        out.append(analyze_source(ArraySource(name, arr, dtype=dtype), api=api,
                                  query_dtype=call.dtype, selection=selection))
    return out


def _inspect_reports(path: str, api: str, query_dtype: str, selection: Selection | None,
                     ) -> list[TensorReport]:
    from maskcheck.analysis import analyze_file

    inspect_api = {"manual": "eager"}.get(api, api)
    report = analyze_file(path, api=inspect_api, query_dtype=query_dtype, selection=selection)
    return report.tensors


def to_numpy(t: torch.Tensor) -> tuple[np.ndarray, str]:
    dtype = str(t.dtype).removeprefix("torch.")
    t = t.detach().to("cpu")
    if t.dtype == torch.bfloat16 or (t.dtype.itemsize == 1 and t.is_floating_point()):
        t = t.to(torch.float32)  # widened exactly, as the io layer does
    return t.numpy(), dtype


def run_call(call: AttentionCall, path: str, *, selection: Selection | None = None,
             metadata: dict[str, str] | None = None) -> ReplayResult:
    paths = run_all_paths(call)
    tensors = mask_reports(call, selection)
    report = FileReport(path=path, tensors=tensors,
                        findings=call_findings(paths, selection), runs=paths.runs,
                        metadata=dict(metadata or {}))
    info = {"torch": str(torch.__version__), "device": call.device, "dtype": call.dtype,
            "api": call.api, "picked": paths.picked, "unavailable": paths.unavailable,
            "shapes": {n: list(getattr(call, n).shape) for n in
                       ("query", "key", "value", "attn_mask", "key_padding_mask")
                       if getattr(call, n) is not None},
            "kwargs": call.kwargs, "self_attention": call.self_attention(),
            "replay_differs": replay_differences(call, metadata or {})}
    return ReplayResult(report, paths, False, info)


def weights_per_call(call: AttentionCall) -> int:
    q, k = call.query, call.key
    if call.api == "mha":  # batch-first (N, L, E) here
        batch = int(q.shape[0]) if q.dim() == 3 else 1
        return batch * call.num_heads * int(q.shape[-2]) * int(k.shape[-2])
    return math.prod(int(d) for d in q.shape[:-1]) * int(k.shape[-2])


def _check_size(path: str, call: AttentionCall) -> None:
    from maskcheck.errors import FileProblem

    n = weights_per_call(call)
    if n > MAX_WEIGHTS:
        raise FileProblem(path, f"the call has {n:,} attention weights (batch x heads x queries "
                                f"x keys); replay runs at most {MAX_WEIGHTS:,}: save a slice of "
                                "the batch or of the heads (or pass fewer --heads)")
def replay_differences(call: AttentionCall, meta: dict[str, str]) -> list[str]:
    """How this replay differs from the call as it ran (empty when it runs as recorded)."""
    out: list[str] = []
    kw = call.kwargs
    dropout = float(kw.get("dropout_p", 0.0) or 0.0)
    if dropout > 0:
        mode = " in training mode" if kw.get("training") else ""
        out.append(f"the call ran with dropout_p={dropout:g}{mode}; replay runs without "
                   "dropout (deterministic), so outputs are the call's without dropout")
    impl = meta.get("maskcheck.impl", "")
    if impl.startswith("hf:") and impl != "hf:sdpa":
        out.append(f"the call ran transformers' {impl[3:]} attention function; replay runs "
                   "the SDPA call it computes (same q/k/v, mask, scale, GQA)")
    if kw.get("position_bias_added"):
        out.append("the call's position_bias is added into the stored float mask, as the "
                   "eager function adds it to the scores")
    if "maskcheck.block_mask" in meta:
        out.append("the call ran flex_attention with a BlockMask; replay runs its token-level "
                   "keep-mask as an SDPA bool mask")
    if kw.get("score_mod"):
        out.append("the call had a score_mod, which a capture cannot store; replay runs the "
                   "mask alone")
    recorded_device = meta.get("maskcheck.device")
    if recorded_device and recorded_device != call.device:
        out.append(f"recorded on {recorded_device}, replayed on {call.device}")
    recorded_dtype = meta.get("maskcheck.dtype")
    if recorded_dtype and recorded_dtype != call.dtype:
        out.append(f"recorded in {recorded_dtype}, replayed in {call.dtype}")
    return out


def replay_file(path: str, *, device: str = "cpu", dtype: str | None = None,
                api: str = "auto", heads: int = 2, dim: int = 8,
                selection: Selection | None = None) -> ReplayResult:
    dev = resolve_device(device)
    want = resolve_dtype(dtype)
    call, meta, generated = load_call(path, api=api, heads=heads, dim=dim)
    _check_size(path, call)
    call = call.to(dev, want)
    result = run_call(call, path, selection=selection, metadata=meta)
    if generated:
        # A mask file: its masks are judged exactly as `inspect --api` judges them (same
        # names, same reading), not as the renamed tensor the generated call passes on.
        result.report.tensors = _inspect_reports(path, api, call.dtype, selection)
    result.generated = generated
    result.info["generated"] = generated
    return result
