"""`maskcheck.capture(path)`: record one attention call into a capture file.

    with maskcheck.capture("call.safetensors"):            # the first call
        model(batch)
    with maskcheck.capture("bad.safetensors", when="nan"):  # the first whose output has NaN
        model(batch)

`nth` picks the Nth call (1-based) of the block. Tensors are copied to the CPU (contiguous,
separate: self-attention's q is k is v is stored three times and recorded in
`maskcheck.aliases`), nn.MultiheadAttention weights go in as `mha.*` tensors; see
`capture_file` for the format. See `intercept` for why MHA's eval fast path does not run
inside the block.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import torch

from maskcheck.attention.call import AttentionCall
from maskcheck.attention.capture_file import save_capture
from maskcheck.attention.intercept import AttentionMode, MaskcheckWarning, output_tensor, user_site
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
    calls: int = 0
    saved: bool = False
    site: str = ""


class capture:
    def __init__(self, path: str | os.PathLike[str], *, nth: int = 1,
                 when: Literal["call", "nan"] = "call") -> None:
        if nth < 1:
            raise UsageError("capture(nth=...) counts from 1")
        if when not in ("call", "nan"):
            raise UsageError("capture(when=...) takes 'call' or 'nan'")
        self.state = CaptureState(os.fspath(path), nth, when)
        self._mode = AttentionMode(self._handle)

    def __enter__(self) -> CaptureState:
        self._mode.__enter__()  # type: ignore[no-untyped-call]
        return self.state

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._mode.__exit__(exc_type, exc, tb)  # type: ignore[no-untyped-call]
        if not self.state.saved and exc_type is None:
            st = self.state
            what = "with NaN in its output" if st.when == "nan" else f"number {st.nth}"
            warnings.warn(f"maskcheck.capture: no attention call {what} in the block "
                          f"({self.state.calls} seen); nothing written to {self.state.path}",
                          MaskcheckWarning, stacklevel=2)

    def _handle(self, func: Any, call: AttentionCall, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        st = self.state
        if st.saved:
            return func(*args, **kwargs)
        st.calls += 1
        if st.when == "call":
            if st.calls == st.nth:
                self._save(call)
            return func(*args, **kwargs)
        result = func(*args, **kwargs)
        out = output_tensor(result)
        if out is not None and bool(torch.isnan(out.detach()).any()):
            self._save(call)
        return result

    def _save(self, call: AttentionCall) -> None:
        file, line = user_site()
        self.state.site = f"{portable_path(file)}:{line}"
        layout = "seq_first" if call.api == "mha" else "batch_first"
        save_capture(self.state.path, call, {"maskcheck.when": self.state.when,
                                             "maskcheck.call_site": self.state.site},
                     layout=layout)
        self.state.saved = True
