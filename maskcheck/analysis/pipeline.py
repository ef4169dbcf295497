"""Files -> tensors -> summaries -> inference -> findings -> reports."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from maskcheck.analysis.combine import padding_with_attn_mask
from maskcheck.analysis.infer import Inference, infer
from maskcheck.analysis.summary import MaskSummary, summarize
from maskcheck.conventions import CONVENTIONS
from maskcheck.errors import FileProblem, UsageError
from maskcheck.io.base import TensorSource, element_size, rows_cols
from maskcheck.model import FileReport, Report, TensorReport
from maskcheck.rules.mask_rules import MaskContext, run_checks
from maskcheck.selection import Selection

CAPTURE_APIS = ("sdpa", "mha")


def analyze_source(
    source: TensorSource,
    *,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    block_rows: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> TensorReport:
    summary = summarize(source, block_rows, progress=progress)
    report = report_from_summary(summary, api=api, query_dtype=query_dtype, selection=selection)
    _preview_worst_matrix(report, source, summary)
    return report


def _preview_worst_matrix(report: TensorReport, source: TensorSource, s: MaskSummary) -> None:
    """Draw the matrix the most severe finding points at, not always batch 0, head 0."""
    if report.preview is None or len(s.shape) < 3:
        return
    ranked = sorted((f for f in report.findings if f.where),
                    key=lambda f: -f.severity.rank)
    if not ranked:
        return
    first = ranked[0].where[0]
    lead = s.shape[:-2]
    if len(first) < len(lead):
        return
    origin = tuple(int(i) for i in first[: len(lead)])
    matrix = int(np.ravel_multi_index(origin, lead))
    if matrix == 0:
        return
    cell_r, cell_c = s.preview_scale
    L, S = s.matrix_rows, s.cols
    grid = np.zeros_like(np.asarray(report.preview, float))
    step = max(cell_r, (4 << 20) // max(1, S))
    step -= step % cell_r
    for start in range(0, L, step):
        stop = min(L, start + step)
        block = source.read_rows(matrix * L + start, matrix * L + stop)
        nz = block if block.dtype == np.bool_ else block != 0
        padded = np.zeros((stop - start, grid.shape[1] * cell_c), bool)
        padded[:, :S] = nz
        per_cell = padded.reshape(stop - start, grid.shape[1], cell_c).sum(axis=2)
        np.add.at(grid, np.arange(start, stop) // cell_r, per_cell)
    rows_in = np.minimum(cell_r, L - np.arange(grid.shape[0]) * cell_r)
    cols_in = np.minimum(cell_c, S - np.arange(grid.shape[1]) * cell_c)
    frac = grid / np.outer(rows_in, cols_in)
    keep = CONVENTIONS[report.convention].nonzero_means != "masked"
    report.preview = np.round(frac if keep else 1.0 - frac, 4).tolist()
    report.preview_origin = origin


def report_from_summary(
    summary: MaskSummary,
    *,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
) -> TensorReport:
    inference = infer(summary, api=api)
    ctx = MaskContext(summary, inference, None if api == "auto" else api, query_dtype)
    allows = selection.allows if selection is not None else (lambda code: True)
    findings = run_checks(ctx, allows) if inference.reading is not None else []
    report = TensorReport(
        name=summary.name,
        shape=summary.shape,
        dtype=summary.dtype,
        convention=inference.convention,
        confidence=inference.confidence,
        role=inference.role,
        pattern=inference.pattern,
        masked_fraction=_masked_fraction(summary, inference),
        findings=findings,
        evidence=inference.evidence,
        params=dict(inference.params),
        api=ctx.api if inference.reading is not None else inference.api,
        summary=summary,
    )
    _attach_preview(report, summary, inference)
    return report


def _masked_fraction(s: MaskSummary, inf: Inference) -> float | None:
    if inf.reading is None or s.size == 0:
        return None
    kept = int(inf.reading.kept_count.sum())
    return 1.0 - kept / s.size


def _attach_preview(report: TensorReport, s: MaskSummary, inf: Inference) -> None:
    if inf.reading is None or s.preview_nz.size == 0:
        return
    grid = s.preview_nz if inf.reading.nonzero_means == "keep" else 1.0 - s.preview_nz
    report.preview = np.round(grid, 4).tolist()
    report.preview_scale = s.preview_scale
    report.preview_origin = tuple(0 for _ in s.shape[:-2])


def analyze_file(
    path: str,
    *,
    keys: Sequence[str] | None = None,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    block_rows: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> FileReport:
    """`progress`, if given, is called with the bytes of tensor data read so far."""
    from maskcheck.io import open_file

    report = FileReport(path=path)
    try:
        loaded = open_file(path, keys)
    except FileProblem as e:
        report.error = e.problem
        return report
    with loaded:
        report.metadata = dict(loaded.metadata)
        file_api = api
        if api == "auto" and loaded.metadata.get("maskcheck.api") in CAPTURE_APIS:
            file_api = loaded.metadata["maskcheck.api"]
        try:
            done = 0
            for source in loaded.tensors:
                row_bytes = rows_cols(source.shape)[1] * element_size(source.dtype)
                on_rows = None
                if progress is not None:
                    def on_rows(rows: int, base: int = done, size: int = row_bytes) -> None:
                        progress(base + rows * size)
                report.tensors.append(analyze_source(
                    source, api=file_api, query_dtype=query_dtype, selection=selection,
                    block_rows=block_rows, progress=on_rows))
                done += rows_cols(source.shape)[0] * row_bytes
            if selection is None or selection.allows("MC002"):
                report.findings.extend(
                    padding_with_attn_mask(loaded.tensors, report.tensors))
        except (OSError, ValueError) as e:
            report.error = f"could not read tensor data: {e}"
        except FileProblem as e:
            report.error = e.problem
    if loaded.tensor_errors:
        msg = "; ".join(f"tensor {n!r}: {p}" for n, p in loaded.tensor_errors[:3])
        report.error = report.error or msg
    if report.error is not None:
        # CONTRACT: a file that could not be read (wholly) reports no tensors.
        report.tensors, report.findings = [], []
    return report


Progress = Callable[[int, int], None]


def usable_cpus() -> int:
    """CPUs this process may run on: the bound for --jobs (more workers only cost memory)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _analyze_file_detached(
    path: str, keys: Sequence[str] | None, api: str, query_dtype: str | None,
    selection: Selection | None,
) -> FileReport:
    report = analyze_file(path, keys=keys, api=api, query_dtype=query_dtype, selection=selection)
    for t in report.tensors:
        t.summary = None  # numpy arrays stay in the worker
    return report


def analyze_paths(
    paths: Iterable[str],
    *,
    keys: Sequence[str] | None = None,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> Report:
    """All files under `paths`; `progress` hears of the bytes done out of the files' total."""
    from maskcheck.io import expand_paths

    files, problems = expand_paths(list(paths))
    reports: dict[str, FileReport] = {p: FileReport(path=p, error=why) for p, why in problems}
    sizes = [_size(f) for f in files]
    total = sum(sizes)
    workers = min(usable_cpus() if jobs is None else min(jobs, usable_cpus()), len(files))
    if workers > 1:
        # Imported here: multiprocessing's import is a tenth of a second of start-up that a
        # one-file run never needs.
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(_analyze_file_detached, f, keys, api, query_dtype, selection):
                       (f, size) for f, size in zip(files, sizes, strict=True)}
            done = 0
            for fut in as_completed(futures):
                f, size = futures[fut]
                try:
                    reports[f] = fut.result()
                except BrokenProcessPool:
                    # A worker was killed (out of memory, a signal): the files it had are
                    # one error line each, the reports already received stay.
                    reports[f] = FileReport(path=f, error="not analysed: a worker process "
                                                          "died (killed by the system?)")
                done += size
                if progress is not None:
                    progress(done, total)
    else:
        base = 0
        for f, size in zip(files, sizes, strict=True):
            on_bytes = None
            if progress is not None:
                def on_bytes(n: int, base: int = base, size: int = size) -> None:
                    progress(base + min(n, size), total)
            reports[f] = analyze_file(f, keys=keys, api=api, query_dtype=query_dtype,
                                      selection=selection, progress=on_bytes)
            base += size
    order = [p for p, _ in problems] + files
    return Report(files=_drop_unmatched([reports[p] for p in order], keys))


def _drop_unmatched(files: list[FileReport], keys: Sequence[str] | None) -> list[FileReport]:
    """Files --key filtered out are left out; --key matching nothing anywhere is a usage error."""
    from maskcheck.io.sources import NO_MATCH

    if keys is None:
        return files
    unmatched = [f for f in files if f.error is not None and f.error.startswith(NO_MATCH)]
    if unmatched and len(unmatched) == len(files):
        first = unmatched[0]
        also = f"--key matches no tensor in any of the {len(files)} files; " if files[1:] else ""
        raise UsageError(f"{also}{first.path}: {first.error}")
    dropped = {id(f) for f in unmatched}
    return [f for f in files if id(f) not in dropped]
