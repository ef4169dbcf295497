"""Seeing attention calls as they happen, through torch's own interception (TorchFunctionMode).

What is seen: `F.scaled_dot_product_attention` and `F.multi_head_attention_forward`
(`nn.MultiheadAttention.forward` calls the latter on its regular path). Calls made *inside* a
seen call (MHA's inner SDPA call) are not seen again: torch disables a mode while its handler
runs.

A caveat that comes from torch itself: while any TorchFunctionMode is active,
`nn.MultiheadAttention` does not take its eval fast path (`torch._native_multi_head_attention`;
its check `has_torch_function` is true under a mode), so inside `capture`/`guard` a module in
eval + no_grad runs the regular path instead (which returns zeros, not NaN, for fully-masked
rows on torch 2.13). `replay` still runs the recorded call on the fast path.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from maskcheck.attention.call import AttentionCall
from maskcheck.errors import MaskcheckError


class MaskcheckWarning(UserWarning):
    """Category of the warnings `maskcheck.guard(action="warn")` emits."""


class GuardError(MaskcheckError):
    """Raised by `maskcheck.guard(action="raise")`; `.findings` holds what was found."""

    def __init__(self, message: str, findings: list[Any], site: str) -> None:
        super().__init__(message)
        self.findings = findings
        self.site = site


_SDPA = F.scaled_dot_product_attention
_MHA_F = F.multi_head_attention_forward
_MHA_SIG = inspect.signature(_MHA_F)
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                "enable_gqa")
_MHA_WEIGHT_ARGS = {
    "in_proj_weight": "in_proj_weight", "in_proj_bias": "in_proj_bias",
    "bias_k": "bias_k", "bias_v": "bias_v", "out_proj_weight": "out_proj_weight",
    "out_proj_bias": "out_proj_bias", "q_proj_weight": "q_proj_weight",
    "k_proj_weight": "k_proj_weight", "v_proj_weight": "v_proj_weight",
}

Handler = Callable[[Callable[..., Any], AttentionCall, tuple[Any, ...], dict[str, Any]], Any]


def is_attention(func: Any) -> bool:
    return func is _SDPA or func is _MHA_F


def _aliases(q: Any, k: Any, v: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    if k is q:
        out["key"] = "query"
    if v is q:
        out["value"] = "query"
    elif v is k:
        out["value"] = "key"
    return out


def sdpa_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> AttentionCall:
    bound = dict(zip(_SDPA_PARAMS, args, strict=False))
    bound.update(kwargs)
    q, k, v = bound["query"], bound["key"], bound["value"]
    kw = {"dropout_p": float(bound.get("dropout_p", 0.0) or 0.0),
          "is_causal": bool(bound.get("is_causal", False)),
          "scale": None if bound.get("scale") is None else float(bound["scale"]),
          "enable_gqa": bool(bound.get("enable_gqa", False))}
    return AttentionCall("sdpa", q, k, v, bound.get("attn_mask"), None, kw, {},
                         _aliases(q, k, v))


def mha_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> AttentionCall:
    b = _MHA_SIG.bind(*args, **kwargs)
    b.apply_defaults()
    a = b.arguments
    q, k, v = a["query"], a["key"], a["value"]
    if a.get("static_k") is not None or a.get("static_v") is not None:
        raise MaskcheckError("static_k/static_v calls are not supported")
    weights = {name: a[arg] for arg, name in _MHA_WEIGHT_ARGS.items()
               if isinstance(a.get(arg), torch.Tensor)}
    if a.get("use_separate_proj_weight"):
        weights.pop("in_proj_weight", None)
    kw = {"num_heads": int(a["num_heads"]), "embed_dim": int(a["embed_dim_to_check"]),
          "batch_first": False, "dropout_p": float(a["dropout_p"]),
          "training": bool(a["training"]), "need_weights": bool(a["need_weights"]),
          "average_attn_weights": bool(a["average_attn_weights"]),
          "is_causal": bool(a["is_causal"]), "add_zero_attn": bool(a["add_zero_attn"]),
          # nn.MultiheadAttention.forward has already turned bool masks into 0/-inf floats
          "masks_canonicalised": True}
    return AttentionCall("mha", q, k, v, a.get("attn_mask"), a.get("key_padding_mask"), kw,
                         weights, _aliases(q, k, v))


def to_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> AttentionCall:
    return sdpa_call(args, kwargs) if func is _SDPA else mha_call(args, kwargs)


class AttentionMode(TorchFunctionMode):
    """Calls `handler(func, call, args, kwargs)` for every attention call; it must run func."""

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self.handler = handler

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if not is_attention(func):
            return func(*args, **kwargs)
        try:
            call = to_call(func, args, kwargs)
        except Exception:  # a call maskcheck cannot read is still the user's call to make
            return func(*args, **kwargs)
        return self.handler(func, call, args, kwargs)


_PACKAGE_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__ or "")) + os.sep
    for m in (torch, sys.modules["maskcheck"])
)


def user_site() -> tuple[str, int]:
    """File and line of the first frame outside torch and maskcheck."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_PACKAGE_DIRS) and not filename.startswith("<frozen"):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>", 0


def output_tensor(result: Any) -> torch.Tensor | None:
    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, tuple) and result and isinstance(result[0], torch.Tensor):
        return result[0]
    return None
