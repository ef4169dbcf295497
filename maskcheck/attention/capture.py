"""`maskcheck.capture(path)`: record one attention call into a capture file.

    with maskcheck.capture("call.safetensors"):            # the first call
        model(batch)
    with maskcheck.capture("bad.safetensors", when="nan"):  # the first whose output has NaN
        model(batch)
    with maskcheck.capture("dec.safetensors", module="decoder.layers.0.self_attn"):
        model(batch)

`nth` picks the Nth call (1-based) of the block, or with `module` the Nth call of the modules
whose dotted name is `module` or ends with `.module` (`"layers.0.self_attn"`, or a glob such
as `"decoder.*.self_attn"`). Every call the interception layer sees can be captured
(`intercept`): a transformers attention function is stored as the SDPA call it computes (its
q/k/v, mask, scale, dropout, GQA; an eager call's `position_bias` is added into the stored
float mask, as the eager function adds it), a FlexAttention BlockMask as its token-level bool
keep-mask (`maskcheck.block_mask` metadata keeps its block structure).

Tensors are copied to the CPU (contiguous, separate: self-attention's q is k is v is stored
three times and recorded in `maskcheck.aliases`), nn.MultiheadAttention weights go in as
`mha.*` tensors; see `capture_file` for the format. See `intercept` for why MHA's eval fast
path does not run inside the block, and for torch.compile.
"""

from __future__ import annotations

import fnmatch
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Literal

import torch

from maskcheck.attention.call import AttentionCall
from maskcheck.attention.capture_file import save_capture
from maskcheck.attention.intercept import (
    Interceptor,
    MaskcheckWarning,
    SeenCall,
    output_tensor,
    user_site,
)
from maskcheck.errors import UsageError


def portable_path(file: str) -> str:
    """`file` relative to the working directory when inside it, else its name alone: a
    capture file is shared, and must not record the home or layout of the machine."""
    try:
        rel = os.path.relpath(file)
    except ValueError:  # another drive (Windows)
        return os.path.basename(file)
    return os.path.basename(file) if rel.startswith(os.pardir) else rel


@dataclass
class CaptureState:
    path: str
    nth: int
    when: str
    module: str | None = None
    calls: int = 0  # calls seen in the block (of `module` when given)
    saved: bool = False
    site: str = ""
    saved_module: str = ""
    saved_index: int = 0  # the saved call's index among all calls of the block


def module_matches(name: str, pattern: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return name == pattern or name.endswith("." + pattern)


class capture:
    def __init__(self, path: str | os.PathLike[str], *, nth: int = 1,
                 when: Literal["call", "nan"] = "call", module: str | None = None) -> None:
        if nth < 1:
            raise UsageError("capture(nth=...) counts from 1")
        if when not in ("call", "nan"):
            raise UsageError("capture(when=...) takes 'call' or 'nan'")
        if module is not None and not module.strip():
            raise UsageError("capture(module=...) takes a module name such as "
                             "'model.layers.0.self_attn'")
        self.state = CaptureState(os.fspath(path), nth, when, module)
        self._layer = Interceptor(self._handle)
        self._seen_modules: list[str] = []

    def __enter__(self) -> CaptureState:
        self._layer.__enter__()
        return self.state

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._layer.__exit__(exc_type, exc, tb)
        unchecked = self._layer.unchecked_compiled()
        if not self.state.saved and exc_type is None:
            st = self.state
            what = "with NaN in its output" if st.when == "nan" else f"number {st.nth}"
            of = f" of module {st.module!r}" if st.module else ""
            hint = ""
            if st.module and self._seen_modules:
                hint = f"; modules seen: {', '.join(self._seen_modules[:6])}" + (
                    ", ..." if len(self._seen_modules) > 6 else "")
            if unchecked:
                hint += ("; attention calls ran inside a torch.compile(fullgraph=True) graph, "
                         "where nothing can be recorded: capture the uncompiled model")
            warnings.warn(f"maskcheck.capture: no attention call {what}{of} in the block "
                          f"({st.calls} seen){hint}; nothing written to {st.path}",
                          MaskcheckWarning, stacklevel=2)

    def _handle(self, seen: SeenCall, run: Callable[[], Any]) -> Any:
        st = self.state
        if seen.module and seen.module not in self._seen_modules:
            self._seen_modules.append(seen.module)
        if st.saved or seen.call is None:
            return run()
        if st.module is not None and not module_matches(seen.module, st.module):
            return run()
        st.calls += 1
        if st.when == "call":
            if st.calls == st.nth:
                self._save(seen)
            return run()
        result = run()
        out = output_tensor(result)
        if out is not None and bool(torch.isnan(out.detach()).any()):
            self._save(seen)
        return result

    def _save(self, seen: SeenCall) -> None:
        file, line = user_site()
        st = self.state
        st.site = f"{portable_path(file)}:{line}"
        st.saved_module, st.saved_index = seen.module, seen.index
        call, meta = stored_call(seen)
        layout = "seq_first" if call.api == "mha" else "batch_first"
        meta.update({"maskcheck.when": st.when, "maskcheck.call_site": st.site,
                     "maskcheck.impl": seen.impl, "maskcheck.call_index": str(seen.index)})
        if seen.module:
            meta["maskcheck.module"] = seen.module
            meta["maskcheck.module_call"] = str(seen.module_index)
        save_capture(st.path, call, meta, layout=layout)
        st.saved = True


def stored_call(seen: SeenCall) -> tuple[AttentionCall, dict[str, str]]:
    """The call as it is written: a BlockMask expanded, an eager position bias added in."""
    call = seen.call
    assert call is not None
    meta: dict[str, str] = {}
    if seen.block_mask is not None:
        from maskcheck.attention.blockmask import expand_block_mask

        expanded = expand_block_mask(seen.block_mask)
        keep = expanded.keep.to(call.query.device)
        call = replace(call, attn_mask=keep)
        meta["maskcheck.block_mask"] = json.dumps(
            {"block_size": list(expanded.block_size), "full": expanded.full_blocks,
             "partial": expanded.partial_blocks, "skipped": expanded.skipped_blocks,
             "notes": expanded.notes})
    bias = seen.position_bias
    if isinstance(bias, torch.Tensor):
        mask = call.attn_mask
        if mask is None:
            folded = bias
        elif mask.dtype == torch.bool:  # SDPA bool: True = keep
            folded = bias.masked_fill(~mask, float("-inf"))
        else:
            folded = bias + mask
        call = replace(call, attn_mask=folded,
                       kwargs={**call.kwargs, "position_bias_added": True})
    training = seen.training
    if training is not None:
        call = replace(call, kwargs={**call.kwargs, "training": training})
    return call, meta
