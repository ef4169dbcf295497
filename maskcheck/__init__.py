"""maskcheck: the attention-mask linter and debugger for PyTorch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from maskcheck.errors import MaskcheckError

__version__ = "0.1.0"

if TYPE_CHECKING:
    from maskcheck.model import TensorReport

__all__ = ["MaskcheckError", "__version__", "analyze", "capture", "guard", "probe", "show"]


def analyze(tensor: Any, api: str = "auto", name: str = "mask", **kwargs: Any) -> TensorReport:
    """Analyse one mask (numpy array, torch tensor on any device, or FlexAttention BlockMask).

    A BlockMask is expanded to its token-level keep-mask (at most 16 M cells; larger ones are
    expanded for batch 0, head 0) and read with the flex convention unless `api` says
    otherwise; its block structure (full, partial, skipped blocks) is added to the evidence.
    Raises MaskcheckError (one-line message) for a bad `api` or a tensor that cannot hold a
    mask. The report shows itself in a REPL, a notebook (`_repr_html_`) and `rich.print`.
    """
    from maskcheck.analysis import analyze as _analyze
    from maskcheck.commands.options import API_CHOICES, parse_choice

    api = parse_choice("api", str(api), API_CHOICES)
    query_dtype = kwargs.get("query_dtype")
    if query_dtype is not None:
        from maskcheck.conventions import float_dtype_name

        kwargs["query_dtype"] = float_dtype_name(str(query_dtype))
        if kwargs["query_dtype"] is None:
            raise MaskcheckError(f"query_dtype takes a float dtype (float16, bfloat16, "
                                 f"float32, float64), not {query_dtype!r}")
    if type(tensor).__name__ == "BlockMask" and hasattr(tensor, "kv_indices"):
        from maskcheck.attention.blockmask import analyze_block_mask

        report: TensorReport = analyze_block_mask(tensor, api=api, name=name, **kwargs)
        return report
    return _analyze(tensor, api=api, name=name, **kwargs)


def show(tensor: Any, api: str = "auto", name: str = "mask", **kwargs: Any) -> None:
    """Print what `maskcheck inspect` prints for one mask (numpy array or torch tensor)."""
    from maskcheck.render.console import make_console, print_clean
    from maskcheck.render.notebook import tensor_renderable

    report = analyze(tensor, api=api, name=name, **kwargs)
    console = make_console()
    print_clean(console, tensor_renderable(report, width=console.width))


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
