"""Capture files (CONTRACT "Capture files") and plain mask files, as AttentionCalls.

Extension of the CONTRACT format, written by `maskcheck.capture` and read by `replay`:
- tensors `mha.in_proj_weight`, `mha.in_proj_bias`, `mha.q_proj_weight`, `mha.k_proj_weight`,
  `mha.v_proj_weight`, `mha.out_proj_weight`, `mha.out_proj_bias`, `mha.bias_k`, `mha.bias_v`:
  the nn.MultiheadAttention parameters an `mha` call needs (those the call had);
- metadata `maskcheck.aliases`: JSON object such as {"key": "query", "value": "query"} when
  the call passed the same tensor object more than once (self-attention). safetensors refuses
  shared storage, so each is stored as its own copy and replay passes one object again;
- metadata `maskcheck.layout`: "batch_first" (N, L, E) or "seq_first" (L, N, E) for `mha`
  calls (F.multi_head_attention_forward is seq-first); replay works batch-first;
- metadata `maskcheck.torch`, `maskcheck.device`, `maskcheck.dtype`, `maskcheck.when`: where the
  call was recorded (informational).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maskcheck.attention.call import AttentionCall
from maskcheck.errors import FileProblem, UsageError

CALL_TENSORS = ("query", "key", "value", "attn_mask", "key_padding_mask")
MASK_NAMES = ("attn_mask", "key_padding_mask")


def save_capture(path: str | os.PathLike[str], call: AttentionCall,
                 extra_metadata: dict[str, str] | None = None, *,
                 layout: str = "batch_first") -> None:
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    for name in CALL_TENSORS:
        t = getattr(call, name)
        if t is not None:
            tensors[name] = _storable(t)
    for name, t in call.weights.items():
        tensors[f"mha.{name}"] = _storable(t)
    meta = {
        "maskcheck.api": call.api,
        "maskcheck.kwargs": json.dumps(call.kwargs, sort_keys=True),
        "maskcheck.aliases": json.dumps(call.aliases, sort_keys=True),
        "maskcheck.torch": str(torch.__version__),
        "maskcheck.device": call.query.device.type,
        "maskcheck.dtype": str(call.query.dtype).removeprefix("torch."),
    }
    if call.api == "mha":
        meta["maskcheck.layout"] = layout
    meta.update(extra_metadata or {})
    save_file(tensors, str(path), metadata=meta)


def _storable(t: torch.Tensor) -> torch.Tensor:
    # Separate, contiguous CPU copies: safetensors refuses views and shared storage.
    return t.detach().to("cpu").contiguous().clone()


# -------------------------------------------------------------------------------- loading


def read_tensors(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """All tensors of a file as torch tensors (CPU) and its string metadata.

    .safetensors/.npy/.npz go through the same loaders as `inspect` (every header claim
    checked, bounded positional reads, never a map a truncated file could SIGBUS through).
    """
    suffix = Path(path).suffix.lower()
    if suffix in (".safetensors", ".npy", ".npz"):
        return _read_with_loaders(path)
    p = Path(path)
    if not p.exists():
        raise FileProblem(path, "no such file")
    if p.is_dir():
        raise FileProblem(path, "is a directory, not a capture file")
    try:
        if suffix in (".pt", ".pth", ".bin"):
            obj = torch.load(path, map_location="cpu", weights_only=True)
            return _flatten(obj), {}
    except Exception as e:
        raise FileProblem(path, f"cannot read: {_line(e)}") from None
    raise FileProblem(path, f"unsupported file type {suffix or '(none)'}: "
                            "expected .safetensors, .npy, .npz or .pt")


def _read_with_loaders(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from maskcheck.io import open_file
    from maskcheck.io.base import rows_cols

    out: dict[str, torch.Tensor] = {}
    with open_file(path) as loaded:
        if loaded.tensor_errors:
            name, problem = loaded.tensor_errors[0]
            raise FileProblem(path, f"tensor {name!r}: {problem}")
        for source in loaded.tensors:
            rows = rows_cols(source.shape)[0]
            array = np.array(source.read_rows(0, rows)).reshape(source.shape)
            t = torch.from_numpy(array)
            # The loaders widen bfloat16/float8 exactly to float32: narrowing back is exact.
            wanted = getattr(torch, source.dtype, None)
            out[source.name] = t.to(wanted) if isinstance(wanted, torch.dtype) else t
        return out, dict(loaded.metadata)


def _flatten(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return {prefix or "tensor": obj}
    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _line(e: BaseException) -> str:
    lines = [x for x in str(e).strip().splitlines() if x.strip()]
    return lines[0].strip() if lines else type(e).__name__


def load_call(path: str, *, api: str = "auto", heads: int = 2, dim: int = 8,
              seed: int = 0) -> tuple[AttentionCall, dict[str, str], bool]:
    """(call, metadata, generated): a capture file, or a mask file with generated q/k/v."""
    tensors, meta = read_tensors(path)
    if not tensors:
        raise FileProblem(path, "holds no tensors")
    if "query" in tensors:
        return _capture_call(path, tensors, meta, api), meta, False
    return _mask_call(path, tensors, api, heads, dim, seed), meta, True


def _json_meta(path: str, meta: dict[str, str], key: str) -> dict[str, Any]:
    raw = meta.get(key)
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise FileProblem(path, f"metadata {key} is not JSON: {e.msg}") from None
    if not isinstance(value, dict):
        raise FileProblem(path, f"metadata {key} must be a JSON object")
    return value


def _capture_call(path: str, tensors: dict[str, torch.Tensor], meta: dict[str, str],
                  api_opt: str) -> AttentionCall:
    api = meta.get("maskcheck.api", "sdpa") if api_opt in ("auto", "hf", "eager") else api_opt
    if api not in ("sdpa", "mha", "manual"):
        raise FileProblem(path, f"maskcheck.api is {api!r}; replay runs sdpa, mha or manual")
    kwargs = _json_meta(path, meta, "maskcheck.kwargs")
    aliases = {k: str(v) for k, v in _json_meta(path, meta, "maskcheck.aliases").items()}
    q = tensors["query"]
    k = tensors.get("key")
    v = tensors.get("value")
    if k is None:
        if aliases.get("key") != "query":
            raise FileProblem(path, "capture has a query but no key tensor")
        k = q
    if v is None:
        v = q if aliases.get("value") == "query" else k if aliases.get("value") == "key" else None
        if v is None:
            raise FileProblem(path, "capture has no value tensor")
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not t.is_floating_point():
            raise FileProblem(path, f"{name} has dtype {str(t.dtype)[6:]}; attention needs float")
    if "maskcheck.aliases" not in meta and _same(q, k) and _same(k, v):
        # Without alias metadata, identical q/k/v were one tensor (self-attention) that
        # safetensors made the writer store three times: MHA's fast path needs one object.
        aliases = {"key": "query", "value": "query"}
    weights = {n[4:]: t for n, t in tensors.items() if n.startswith("mha.")}
    call = AttentionCall(api, q, k, v,  # type: ignore[arg-type]
                         tensors.get("attn_mask"), tensors.get("key_padding_mask"),
                         kwargs, weights, aliases)
    if api == "mha":
        call = _mha_batch_first(path, call, meta.get("maskcheck.layout"))
        _check_mha(path, call)
    else:
        _check_sdpa(path, call)
    return call


def _guess_seq_first(call: AttentionCall, layout: str | None) -> bool:
    if layout in ("seq_first", "batch_first"):
        return layout == "seq_first"
    if "batch_first" in call.kwargs:
        return not call.kwargs["batch_first"]
    kpm, q, k = call.key_padding_mask, call.query, call.key
    batch_first_kpm = (kpm is not None and kpm.dim() == 2 and q.dim() == 3 and k.dim() == 3
                       and tuple(kpm.shape) == (q.shape[0], k.shape[1])
                       != (q.shape[1], k.shape[0]))
    return not batch_first_kpm  # else nn.MultiheadAttention's default layout: (L, N, E)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b)))


def _mha_batch_first(path: str, call: AttentionCall, layout: str | None) -> AttentionCall:
    seq_first = _guess_seq_first(call, layout)
    q, k, v = call.query, call.key, call.value
    if q.dim() == 2:  # unbatched (L, E)
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        seq_first = False
        if call.key_padding_mask is not None and call.key_padding_mask.dim() == 1:
            call.key_padding_mask = call.key_padding_mask.unsqueeze(0)
    elif q.dim() != 3:
        raise FileProblem(path, f"mha query must be 2-D or 3-D, got shape {tuple(q.shape)}")
    if seq_first:
        q, k, v = (t.transpose(0, 1).contiguous() if t.dim() == 3 else t for t in (q, k, v))
    call.query, call.key, call.value = q, k, v
    call.kwargs = {**call.kwargs, "batch_first": True}
    return call


def _check_mha(path: str, call: AttentionCall) -> None:
    if "num_heads" not in call.kwargs:
        raise FileProblem(path, "mha capture lacks num_heads in maskcheck.kwargs")
    n, l_len, e = call.query.shape
    h = int(call.kwargs["num_heads"])
    if h <= 0 or e % h:
        raise FileProblem(path, f"embed dim {e} is not divisible by num_heads {h}")
    if call.key.dim() != 3 or call.key.shape[0] != n or call.value.shape[:2] != call.key.shape[:2]:
        raise FileProblem(path, f"query {tuple(call.query.shape)}, key {tuple(call.key.shape)} "
                                f"and value {tuple(call.value.shape)} do not fit one call")
    w = call.weights
    if "out_proj_weight" not in w or not ("in_proj_weight" in w or "q_proj_weight" in w):
        # A capture written by other tools may carry no module: replay with seeded weights.
        call.weights = seeded_mha_weights(e, h, call.key.shape[-1], call.value.shape[-1],
                                          call.query.dtype)
        call.kwargs = {**call.kwargs, "weights_generated": True}
    s_len = call.key.shape[1]
    kpm = call.key_padding_mask
    if kpm is not None and tuple(kpm.shape) != (n, s_len):
        raise FileProblem(path, f"key_padding_mask has shape {tuple(kpm.shape)}; "
                                f"this call needs ({n}, {s_len})")
    am = call.attn_mask
    if am is not None and tuple(am.shape) not in ((l_len, s_len), (n * h, l_len, s_len)):
        raise FileProblem(path, f"attn_mask has shape {tuple(am.shape)}; MHA takes "
                                f"({l_len}, {s_len}) or ({n * h}, {l_len}, {s_len})")


def seeded_mha_weights(e: int, h: int, kdim: int, vdim: int, dtype: torch.dtype,
                       seed: int = 0) -> dict[str, torch.Tensor]:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        m = torch.nn.MultiheadAttention(e, h, kdim=kdim, vdim=vdim, batch_first=True)
    out = {"out_proj_weight": m.out_proj.weight, "out_proj_bias": m.out_proj.bias,
           "in_proj_bias": m.in_proj_bias}
    if m.in_proj_weight is not None:
        out["in_proj_weight"] = m.in_proj_weight
    else:
        out.update(q_proj_weight=m.q_proj_weight, k_proj_weight=m.k_proj_weight,
                   v_proj_weight=m.v_proj_weight)
    return {k: t.detach().to(dtype) for k, t in out.items()}


def _check_sdpa(path: str, call: AttentionCall) -> None:
    q, k, v = call.query, call.key, call.value
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise FileProblem(path, "query, key and value need at least 2 dimensions (…, L, E)")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise FileProblem(path, f"query {tuple(q.shape)}, key {tuple(k.shape)} and value "
                                f"{tuple(v.shape)} do not fit one call (E of q and k, S of k "
                                "and v must match)")
    m = call.attn_mask
    if m is not None:
        try:
            lead = q.shape[:-2] if call.kwargs.get("enable_gqa") else \
                torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])  # type: ignore[no-untyped-call]
        except RuntimeError:
            raise FileProblem(path, f"query {tuple(q.shape)} and key {tuple(k.shape)} have "
                                    "batch/head dims that do not broadcast") from None
        shape = (*lead, q.shape[-2], k.shape[-2])
        try:
            full = torch.broadcast_shapes(tuple(m.shape), shape)  # type: ignore[no-untyped-call]
            if full != torch.Size(shape):
                raise RuntimeError("mask is larger than the scores")
        except RuntimeError:
            raise FileProblem(path, f"attn_mask of shape {tuple(m.shape)} does not broadcast "
                                    f"to the scores {tuple(shape)}") from None


# --------------------------------------------------------------------- plain mask files


def _pick_mask(path: str, tensors: dict[str, torch.Tensor]) -> tuple[str, torch.Tensor]:
    for name in MASK_NAMES:
        if name in tensors:
            return name, tensors[name]
    if len(tensors) == 1:
        return next(iter(tensors.items()))
    names = ", ".join(sorted(tensors)[:6])
    raise FileProblem(path, f"no query tensor and no attn_mask/key_padding_mask among {names}: "
                            "cannot tell which tensor is the mask")


def mask_api(name: str, mask: torch.Tensor, api: str) -> str:
    if api != "auto":
        return api
    from maskcheck.conventions import name_hint

    hint = name_hint(name)
    if hint is not None and hint.api in ("mha", "hf", "eager", "sdpa"):
        return hint.api
    if hint is not None and hint.role == "key_padding_mask":
        return "mha"
    return "sdpa"


def _mask_call(path: str, tensors: dict[str, torch.Tensor], api_opt: str, heads: int,
               dim: int, seed: int) -> AttentionCall:
    if "key_padding_mask" in tensors and "attn_mask" in tensors and api_opt in ("auto", "mha"):
        # The pair nn.MultiheadAttention takes (pytorch/pytorch#41508): replay them together.
        gen = torch.Generator().manual_seed(seed)
        kpm, am = tensors["key_padding_mask"], tensors["attn_mask"]
        for n, t in (("key_padding_mask", kpm), ("attn_mask", am)):
            if not (t.dtype == torch.bool or t.is_floating_point()):
                raise FileProblem(path, f"{n} has dtype {str(t.dtype)[6:]}, which MHA refuses")
        dtype = am.dtype if am.is_floating_point() else (
            kpm.dtype if kpm.is_floating_point() else torch.float32)
        call = _mha_from_mask(path, "key_padding_mask", kpm, heads, dim, gen, dtype)
        n_batch, l_len, _ = call.query.shape
        if am.dim() == 3 and am.shape[0] % n_batch == 0:
            heads = am.shape[0] // n_batch
            call = _mha_from_mask(path, "key_padding_mask", kpm, heads, dim,
                                  torch.Generator().manual_seed(seed), dtype)
        if tuple(am.shape) not in ((l_len, l_len), (n_batch * heads, l_len, l_len)):
            raise FileProblem(path, f"attn_mask {tuple(am.shape)} does not fit key_padding_mask "
                                    f"{tuple(kpm.shape)}: MHA takes ({l_len}, {l_len}) or "
                                    f"({n_batch * heads}, {l_len}, {l_len})")
        call.attn_mask = am
        return call
    name, mask = _pick_mask(path, tensors)
    api = mask_api(name, mask, api_opt)
    if mask.dtype == torch.bool or mask.is_floating_point() or api == "hf":
        pass
    else:
        raise FileProblem(path, f"{name} has dtype {str(mask.dtype)[6:]}, which {api} refuses "
                                "(bool or float masks only); pass --api hf for a 0/1 mask")
    if mask.dim() == 0 or mask.numel() == 0:
        raise FileProblem(path, f"{name} has shape {tuple(mask.shape)}: not a mask")
    if heads <= 0 or dim <= 0:
        raise UsageError("--heads and --dim must be positive")
    gen = torch.Generator().manual_seed(seed)
    dtype = mask.dtype if mask.is_floating_point() else torch.float32
    if api == "mha":
        return _mha_from_mask(path, name, mask, heads, dim, gen, dtype)
    if api in ("hf",):
        if mask.dim() != 2:
            raise FileProblem(path, f"a Hugging Face attention_mask is (N, S); {name} has shape "
                                    f"{tuple(mask.shape)}")
        mask = mask.to(torch.bool)[:, None, None, :]  # HF 5.x: .to(bool), 1 = real token
    return _sdpa_from_mask(path, name, mask, heads, dim, gen, dtype,
                           "manual" if api in ("eager", "manual") else "sdpa")


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype)


def _sdpa_from_mask(path: str, name: str, mask: torch.Tensor, heads: int, dim: int,
                    gen: torch.Generator, dtype: torch.dtype, api: str) -> AttentionCall:
    l_len, s_len = (1, mask.shape[-1]) if mask.dim() == 1 else mask.shape[-2:]
    if mask.dim() <= 2:
        n, h = 1, heads
    elif mask.dim() == 3:
        n, h = 1, max(heads, mask.shape[0]) if mask.shape[0] != 1 else heads
        if mask.shape[0] not in (1, h):
            h = mask.shape[0]
    elif mask.dim() == 4:
        n = mask.shape[0]
        h = mask.shape[1] if mask.shape[1] != 1 else heads
    else:
        raise FileProblem(path, f"{name} has shape {tuple(mask.shape)}: SDPA masks have 2-4 dims")
    q = _randn(gen, n, h, l_len, dim, dtype=dtype)
    k = _randn(gen, n, h, s_len, dim, dtype=dtype)
    v = _randn(gen, n, h, s_len, dim, dtype=dtype)
    return AttentionCall(api, q, k, v, attn_mask=mask, kwargs={})  # type: ignore[arg-type]


def _mha_from_mask(path: str, name: str, mask: torch.Tensor, heads: int, dim: int,
                   gen: torch.Generator, dtype: torch.dtype) -> AttentionCall:
    e = heads * max(1, math.ceil(dim / heads)) if dim % heads else dim
    if mask.dim() == 2 and ("padding" in name or name.endswith("kpm")):
        n, s_len = mask.shape
        kpm, am, l_len = mask, None, s_len
    elif mask.dim() == 2:
        l_len, s_len = mask.shape
        n, kpm, am = 1, None, mask
    elif mask.dim() == 3:
        nh, l_len, s_len = mask.shape
        if nh % heads:
            raise FileProblem(path, f"{name} has {nh} matrices, not a multiple of --heads {heads}")
        n, kpm, am = nh // heads, None, mask
    else:
        raise FileProblem(path, f"{name} has shape {tuple(mask.shape)}: MHA takes (N,S) "
                                "key_padding_mask, (L,S) or (N*H,L,S) attn_mask")
    x = _randn(gen, n, l_len, e, dtype=dtype)
    mem = x if l_len == s_len else _randn(gen, n, s_len, e, dtype=dtype)
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
        module = torch.nn.MultiheadAttention(e, heads, batch_first=True, dtype=dtype)
    weights = {"in_proj_weight": module.in_proj_weight.detach(),
               "in_proj_bias": module.in_proj_bias.detach(),
               "out_proj_weight": module.out_proj.weight.detach(),
               "out_proj_bias": module.out_proj.bias.detach()}
    aliases = {"key": "query", "value": "query"} if mem is x else {}
    return AttentionCall("mha", x, mem, mem, attn_mask=am, key_padding_mask=kpm,
                         kwargs={"num_heads": heads, "batch_first": True}, weights=weights,
                         aliases=aliases)
