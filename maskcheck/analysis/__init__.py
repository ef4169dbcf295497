"""Analysis: one streaming pass per tensor -> MaskSummary -> inference -> rules -> reports.

The entry points import the pipeline when called, not here: the rules import
`analysis.infer`, and the pipeline imports the rules, so an eager import here would make
`import maskcheck.rules.mask_rules` circular.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from maskcheck.io.base import ArraySource, TensorSource
from maskcheck.model import FileReport, Report, TensorReport
from maskcheck.selection import Selection


def analyze_source(
    source: TensorSource,
    *,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    block_rows: int | None = None,
    real_keys: Any = None,
) -> TensorReport:
    """Summarise one tensor in row blocks, infer what it is and run the mask rules.

    `real_keys`: optional (N, S) bool array, True = real token (an HF attention_mask, or
    ~key_padding_mask) of the same call: its pad positions are pad queries (info, not error).
    """
    from maskcheck.analysis.pipeline import analyze_source as _impl

    return _impl(source, api=api, query_dtype=query_dtype, selection=selection,
                 block_rows=block_rows, real_keys=_as_bool_array(real_keys))


def _as_bool_array(x: Any) -> Any:
    if x is None:
        return None
    import numpy as np

    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu().numpy()
    return np.asarray(x).astype(bool)


def analyze(
    tensor: Any,
    *,
    api: str = "auto",
    name: str = "mask",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    real_keys: Any = None,
) -> TensorReport:
    """Analyse a numpy array or a torch tensor (any device); `real_keys` as in analyze_source."""
    return analyze_source(as_source(tensor, name), api=api, query_dtype=query_dtype,
                          selection=selection, real_keys=real_keys)


def as_source(tensor: Any, name: str) -> TensorSource:
    import numpy as np

    if isinstance(tensor, np.ndarray):
        return ArraySource(name, tensor)
    mod = type(tensor).__module__
    if mod.startswith("torch"):
        from maskcheck.io.torch_files import torch_tensor_source

        return torch_tensor_source(name, tensor)
    return ArraySource(name, np.asarray(tensor))


def analyze_file(
    path: str,
    *,
    keys: Sequence[str] | None = None,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    block_rows: int | None = None,
) -> FileReport:
    """Every tensor of one file; a file that cannot be read gives FileReport.error."""
    from maskcheck.analysis.pipeline import analyze_file as _impl

    return _impl(path, keys=keys, api=api, query_dtype=query_dtype, selection=selection,
                 block_rows=block_rows)


def analyze_paths(
    paths: Iterable[str],
    *,
    keys: Sequence[str] | None = None,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Every mask file under `paths`; `progress(bytes_done, bytes_total)` as work goes."""
    from maskcheck.analysis.pipeline import analyze_paths as _impl

    return _impl(paths, keys=keys, api=api, query_dtype=query_dtype, selection=selection,
                 jobs=jobs, progress=progress)
