"""The one interception layer: every attention call a block runs, as maskcheck sees it.

What is seen, inside `with Interceptor(handler):`
- transformers' attention-function registry: every `AttentionInterface.get_interface(...)`
  lookup (eager, sdpa, flex_attention, paged, flash and user-registered functions, and the
  module-level `eager_attention_forward` a modeling file passes as the default) returns a
  wrapper, so the call is seen with the module that made it and the mask (or `BlockMask`) the
  implementation receives. Only patched when transformers is already imported: maskcheck never
  imports it. Calls made inside a seen registry call (HF's sdpa function calling
  `F.scaled_dot_product_attention`) are not seen a second time;
- `F.scaled_dot_product_attention` and `F.multi_head_attention_forward`
  (`nn.MultiheadAttention.forward` calls the latter on its regular path), looked up through
  `torch.nn.functional` during the block: the module attributes are wrapped and restored on
  exit. A name imported with `from torch.nn.functional import scaled_dot_product_attention`
  before the block is the original function and is not seen. Not a TorchFunctionMode: on
  torch 2.13 an active mode plus a graph break inside a compiled transformers model makes
  dynamo resume with wrong values (`tensor.device` read as a `torch.Size`; checked with a
  bare pass-through mode on a tiny Llama), and the handler must break the graph;
- `torch.nn.attention.flex_attention.flex_attention`, looked up through its module during the
  block (a name imported with `from ... import flex_attention` before the block is the
  original function and is not seen; HF's flex path is seen through the registry).

Each call gets its index in the block (1-based), the dotted name of the nn.Module that made it
(`model.layers.3.self_attn`, found from the module objects on the Python stack) and that
module's own call count.

torch.compile: the handler runs outside any traced graph (`torch.compiler.disable`, a graph
break) when dynamo may break the graph; under `fullgraph=True` (or `error_on_graph_break`),
where a break would fail the user's compile, the call passes through unchecked and is counted
in `UNCHECKED_COMPILED` so the block can say so once.

nn.MultiheadAttention's eval fast path (`torch._native_multi_head_attention`) never calls
`F.multi_head_attention_forward`, so the block turns it off
(`torch.backends.mha.set_fastpath_enabled(False)`, restored on exit): inside `capture`/`guard`
a module in eval + no_grad runs the regular path instead (which returns zeros, not NaN, for
fully-masked rows on torch 2.13). `replay` still runs the recorded call on the fast path.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

import torch
import torch.nn.functional as F

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

# Calls that ran inside a torch.compile graph that could not be broken (fullgraph=True):
# appended to from inside the graph (dynamo replays list appends as side effects), read and
# cleared by the block that owns the interception.
UNCHECKED_COMPILED: list[int] = []


@dataclass
class SeenCall:
    """One attention call as the interception layer saw it."""

    impl: str  # "sdpa", "mha", "flex", "hf:eager", "hf:sdpa", "hf:flex_attention", "hf:<name>"
    call: AttentionCall | None  # None when the call's arguments cannot be read as one
    index: int = 0  # 1-based, within the block
    module: str = ""  # dotted module name, "" when no nn.Module made the call
    module_index: int = 0  # 1-based, among this module's calls in the block
    block_mask: Any = None  # the FlexAttention BlockMask the call got, if any
    # Where the output puts (batch, query) rows: "blhd" for HF functions (already transposed
    # back), "bhld" for SDPA and flex, "lbe" for F.multi_head_attention_forward (seq-first).
    output_layout: str = "bhld"
    position_bias: Any = None  # the additive bias an HF function got besides the mask (T5)
    training: bool | None = None  # the calling module's training flag, when known

    @property
    def eager(self) -> bool:
        """A path that computes softmax(scores + mask) in Python, with no kernel of its own."""
        return self.impl in ("hf:eager", "hf:paged|eager")


Handler = Callable[[SeenCall, Callable[[], Any]], Any]
# What a seen call is read as: (call, BlockMask or None, SeenCall field overrides).
Built = tuple[AttentionCall, Any, dict[str, Any]]


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


def hf_call(impl: str, module: Any, query: Any, key: Any, value: Any, mask: Any,
            kwargs: dict[str, Any]) -> AttentionCall:
    """A transformers attention-function call as the SDPA call it is equivalent to.

    Every registry function gets q (B, H, L, D), k/v (B, H_kv, S, D), the mask the model built
    (additive float for eager, bool or float for sdpa, a BlockMask for flex) and `scaling`,
    `dropout`; HF's sdpa function passes is_causal when there is no mask and the module is
    causal (transformers/integrations/sdpa_attention.py).
    """
    dense = None if _is_block_mask(mask) else mask
    # HF's sdpa function: is_causal = q_len > 1 and no mask and (the is_causal argument, else
    # the module's flag, default True). Eager and flex apply no causal triangle of their own.
    flag = kwargs.get("is_causal")
    if flag is None:
        flag = getattr(module, "is_causal", True)
    causal = (impl not in ("hf:eager", "hf:paged|eager", "hf:flex_attention")
              and mask is None and int(query.shape[-2]) > 1 and bool(flag))
    scale = kwargs.get("scaling", kwargs.get("scale"))
    kw = {"dropout_p": float(kwargs.get("dropout", 0.0) or 0.0),
          "is_causal": causal,
          "scale": None if scale is None else float(scale),
          "enable_gqa": bool(query.dim() >= 3 and key.dim() >= 3
                             and query.shape[-3] != key.shape[-3])}
    return AttentionCall("sdpa", query, key, value, dense, None, kw, {},
                         _aliases(query, key, value))


def _restorer(owner: Any, attr: str, value: Any) -> Callable[[], None]:
    def restore() -> None:
        setattr(owner, attr, value)

    return restore


def attr_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", "attention"))


def _is_block_mask(obj: Any) -> bool:
    return type(obj).__name__ == "BlockMask" and hasattr(obj, "kv_indices")


def flex_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[AttentionCall, Any]:
    names = ("query", "key", "value", "score_mod", "block_mask", "scale", "enable_gqa")
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    q, k, v = bound["query"], bound["key"], bound["value"]
    scale = bound.get("scale")
    kw = {"dropout_p": 0.0, "is_causal": False,
          "scale": None if scale is None else float(scale),
          "enable_gqa": bool(bound.get("enable_gqa", False)),
          "score_mod": bound.get("score_mod") is not None}
    return AttentionCall("sdpa", q, k, v, None, None, kw, {}, _aliases(q, k, v)), \
        bound.get("block_mask")


# --------------------------------------------------------------------------- compile


def _note_graph_cannot_break(ctx: Any) -> None:
    """Runs while dynamo traces (comptime): can this frame break its graph?"""
    try:
        tx = ctx._i_will_not_complain_if_bc_breaks_InstructionTranslator()
        _COMPILE_STATE["no_break"] = bool(getattr(tx, "one_graph", True)
                                          or getattr(tx, "error_on_graph_break", True))
    except Exception:  # an unknown dynamo: assume the worst, never fail the user's compile
        _COMPILE_STATE["no_break"] = True


_COMPILE_STATE: dict[str, bool] = {"no_break": True}


def _compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


# ------------------------------------------------------------------------- the layer


class Interceptor:
    """Calls `handler(seen, run)` for every attention call in the block; it must call run()."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.depth = 0  # > 0 while a seen call runs: its inner calls are not seen again
        self.count = 0
        self.per_module: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._roots: dict[int, tuple[Any, dict[int, str]]] = {}
        self._restore: list[Callable[[], None]] = []
        self._unchecked_at_entry = 0

    # ---------------------------------------------------------------- enter / exit
    def __enter__(self) -> Interceptor:
        self._unchecked_at_entry = len(UNCHECKED_COMPILED)
        self._patch_functional()
        self._patch_registry()
        self._patch_flex()
        # nn.MultiheadAttention's (and TransformerEncoderLayer's) eval fast path runs a fused
        # kernel that never calls F.multi_head_attention_forward: off inside the block.
        fastpath = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        self._restore.append(lambda: torch.backends.mha.set_fastpath_enabled(fastpath))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        while self._restore:
            self._restore.pop()()
        self._roots.clear()
        self._names.clear()

    def unchecked_compiled(self) -> int:
        """Calls that ran in an unbreakable compiled graph since the block began."""
        n = len(UNCHECKED_COMPILED) - self._unchecked_at_entry
        if self._unchecked_at_entry == 0:
            UNCHECKED_COMPILED.clear()
        return max(n, 0)

    def _patch_functional(self) -> None:
        interceptor = self
        for attr, impl, original in (("scaled_dot_product_attention", "sdpa", _SDPA),
                                     ("multi_head_attention_forward", "mha", _MHA_F)):
            current = getattr(F, attr)
            interceptor._restore.append(_restorer(F, attr, current))
            setattr(F, attr, self._functional_wrapper(impl, original, current))

    def _functional_wrapper(self, impl: str, original: Callable[..., Any],
                            current: Callable[..., Any]) -> Callable[..., Any]:
        interceptor = self

        def attention(*args: Any, **kwargs: Any) -> Any:
            if interceptor.depth:
                return current(*args, **kwargs)
            return interceptor.dispatch(impl, None, lambda: current(*args, **kwargs),
                                        lambda: (to_call(original, args, kwargs), None, {}))

        attention.__name__ = attention.__qualname__ = attr_name(original)
        attention.__doc__ = original.__doc__
        return attention

    def _patch_registry(self) -> None:
        mu = sys.modules.get("transformers.modeling_utils")
        cls = getattr(mu, "AttentionInterface", None)
        original = getattr(cls, "get_interface", None)
        if cls is None or original is None:
            return
        interceptor = self

        def get_interface(registry: Any, attn_implementation: str, default: Callable[..., Any]
                          ) -> Callable[..., Any]:
            fn = original(registry, attn_implementation, default)
            return interceptor.wrap_registry_function(f"hf:{attn_implementation}", fn)

        cls.get_interface = get_interface
        self._restore.append(lambda: setattr(cls, "get_interface", original))

    def _patch_flex(self) -> None:
        mod = sys.modules.get("torch.nn.attention.flex_attention")
        original = getattr(mod, "flex_attention", None)
        if mod is None or original is None:
            return
        interceptor = self

        def flex_attention(*args: Any, **kwargs: Any) -> Any:
            if interceptor.depth:
                return original(*args, **kwargs)
            return interceptor.dispatch("flex", None, lambda: original(*args, **kwargs),
                                        lambda: (*flex_call(args, kwargs), {}))

        mod.flex_attention = flex_attention  # type: ignore[attr-defined]
        self._restore.append(lambda: setattr(mod, "flex_attention", original))

    def wrap_registry_function(self, impl: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        interceptor = self

        def attention_function(module: Any, query: Any, key: Any, value: Any,
                               attention_mask: Any, *args: Any, **kwargs: Any) -> Any:
            def run() -> Any:
                return fn(module, query, key, value, attention_mask, *args, **kwargs)

            if interceptor.depth:
                return run()

            def build() -> Built:
                call = hf_call(impl, module, query, key, value, attention_mask, kwargs)
                extras = {"position_bias": kwargs.get("position_bias"),
                          "training": bool(getattr(module, "training", False))}
                block_mask = attention_mask if _is_block_mask(attention_mask) else None
                return call, block_mask, extras

            return interceptor.dispatch(impl, module, run, build, layout="blhd")

        return attention_function

    # --------------------------------------------------------------------- per call
    def dispatch(self, impl: str, module: Any, run: Callable[[], Any],
                 build: Callable[[], Built], layout: str = "") -> Any:
        if _compiling():
            from torch._dynamo.comptime import comptime

            comptime(_note_graph_cannot_break)
            if _COMPILE_STATE["no_break"]:
                UNCHECKED_COMPILED.append(1)
                return run()
            return _outside_graph(self, impl, module, run, build, layout)
        return self.see(impl, module, run, build, layout)

    def see(self, impl: str, module: Any, run: Callable[[], Any],
            build: Callable[[], Built], layout: str) -> Any:
        try:
            call, block_mask, extras = build()
        except Exception:  # a call maskcheck cannot read is still the user's call to make
            call, block_mask, extras = None, None, {}
        self.count += 1
        name = self.module_name(module)
        self.per_module[name] = self.per_module.get(name, 0) + 1
        seen = SeenCall(impl, call, self.count, name, self.per_module[name], block_mask,
                        layout or ("lbe" if impl == "mha" else "bhld"), **extras)

        def guarded_run() -> Any:
            self.depth += 1
            try:
                return run()
            finally:
                self.depth -= 1

        return self.handler(seen, guarded_run)

    # ------------------------------------------------------------------ module names
    def module_name(self, module: Any) -> str:
        frames = _module_frames(sys._getframe(1))
        if module is None:
            module = frames[0] if frames else None
            if module is None:
                return ""
        known = self._names.get(id(module))
        if known is not None:
            return known
        root = frames[-1] if frames else module
        table = self._roots.get(id(root))
        if table is None or table[0] is not root:
            table = (root, {id(m): n for n, m in root.named_modules()})
            self._roots[id(root)] = table
        name = table[1].get(id(module))
        if name is not None:  # torch.compile's OptimizedModule holds the model as _orig_mod
            name = ".".join(p for p in name.split(".") if p != "_orig_mod")
        if name is None:
            name = type(module).__name__
        elif name == "":
            name = type(module).__name__  # the root itself
        self._names[id(module)] = name
        return name


@torch.compiler.disable  # type: ignore[untyped-decorator]
def _outside_graph(owner: Interceptor, impl: str, module: Any, run: Callable[[], Any],
                   build: Callable[[], Built], layout: str) -> Any:
    return owner.see(impl, module, run, build, layout)


def _module_frames(frame: FrameType | None) -> list[Any]:
    """nn.Module objects whose methods are on the stack, innermost first."""
    out: list[Any] = []
    while frame is not None:
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            obj = frame.f_locals.get("self")
            if isinstance(obj, torch.nn.Module) and (not out or out[-1] is not obj):
                out.append(obj)
        frame = frame.f_back
    return out


def _package_dirs() -> tuple[str, ...]:
    dirs = []
    for name in ("torch", "transformers", "maskcheck"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__file__", None):
            dirs.append(os.path.dirname(os.path.abspath(mod.__file__ or "")) + os.sep)
    return tuple(dirs)


def user_site() -> tuple[str, int]:
    """File and line of the first frame outside torch, transformers and maskcheck."""
    skip = _package_dirs()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(skip) and not filename.startswith("<frozen"):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


def output_tensor(result: Any) -> torch.Tensor | None:
    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, tuple) and result and isinstance(result[0], torch.Tensor):
        return result[0]
    return None
