"""maskcheck: the attention-mask linter and debugger for PyTorch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from maskcheck.model import TensorReport

__all__ = ["__version__", "analyze", "capture", "guard", "probe"]


def analyze(tensor: Any, api: str = "auto", name: str = "mask", **kwargs: Any) -> TensorReport:
    """Analyse one mask (numpy array or torch tensor on any device)."""
    from maskcheck.analysis import analyze as _analyze

    return _analyze(tensor, api=api, name=name, **kwargs)


def capture(*args: Any, **kwargs: Any) -> Any:
    """Record the next attention call into a capture file (needs torch)."""
    from maskcheck.attention.capture import capture as _capture

    return _capture(*args, **kwargs)


def guard(*args: Any, **kwargs: Any) -> Any:
    """Run the mask rules on every attention call inside the block (needs torch)."""
    from maskcheck.attention.guard import guard as _guard

    return _guard(*args, **kwargs)


def __getattr__(name: str) -> Any:
    # `maskcheck.probe(...)`: the probe package is callable; imported on first use (no torch).
    if name == "probe":
        import importlib

        return importlib.import_module("maskcheck.probe")
    raise AttributeError(f"module 'maskcheck' has no attribute {name!r}")
