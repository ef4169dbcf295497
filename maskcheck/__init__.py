"""maskcheck: the attention-mask linter and debugger for PyTorch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from maskcheck.model import TensorReport

__all__ = ["__version__", "analyze", "capture", "guard"]


def analyze(tensor: Any, api: str = "auto", name: str = "mask", **kwargs: Any) -> TensorReport:
    """Analyse one mask (numpy array, torch tensor on any device, or FlexAttention BlockMask).

    A BlockMask is expanded to its token-level keep-mask (at most 16 M cells; larger ones are
    expanded for batch 0, head 0) and read with the flex convention unless `api` says
    otherwise; its block structure (full, partial, skipped blocks) is added to the evidence.
    """
    if type(tensor).__name__ == "BlockMask" and hasattr(tensor, "kv_indices"):
        from maskcheck.attention.blockmask import analyze_block_mask

        report: TensorReport = analyze_block_mask(tensor, api=api, name=name, **kwargs)
        return report
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
