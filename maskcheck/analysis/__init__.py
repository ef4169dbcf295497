"""Analysis: one streaming pass per tensor -> MaskSummary -> inference -> rules -> reports."""

from __future__ import annotations

from typing import Any

from maskcheck.analysis.pipeline import analyze_file, analyze_paths, analyze_source
from maskcheck.io.base import ArraySource, TensorSource
from maskcheck.model import TensorReport
from maskcheck.selection import Selection

__all__ = ["analyze", "analyze_file", "analyze_paths", "analyze_source", "as_source"]


def analyze(
    tensor: Any,
    *,
    api: str = "auto",
    name: str = "mask",
    query_dtype: str | None = None,
    selection: Selection | None = None,
) -> TensorReport:
    """Analyse a numpy array or a torch tensor (any device)."""
    return analyze_source(as_source(tensor, name), api=api, query_dtype=query_dtype,
                          selection=selection)


def as_source(tensor: Any, name: str) -> TensorSource:
    import numpy as np

    if isinstance(tensor, np.ndarray):
        return ArraySource(name, tensor)
    if type(tensor).__module__.startswith("torch"):
        from maskcheck.io.torch_files import torch_tensor_source

        return torch_tensor_source(name, tensor)
    return ArraySource(name, np.asarray(tensor))
