"""Files -> tensors -> summaries -> inference -> findings -> reports."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from maskcheck.analysis.combine import padding_with_attn_mask
from maskcheck.analysis.infer import Inference, infer
from maskcheck.analysis.summary import MaskSummary, summarize
from maskcheck.conventions import ADDITIVE_MASKED_BELOW, CONVENTIONS
from maskcheck.errors import FileProblem, UsageError
from maskcheck.io.base import TensorSource, element_size, rows_cols
from maskcheck.model import FileReport, Report, Severity, TensorReport
from maskcheck.rules.mask_rules import MaskContext, run_checks
from maskcheck.selection import Selection
from maskcheck.system import usable_cpus

CAPTURE_APIS = ("sdpa", "mha")


def analyze_source(
    source: TensorSource,
    *,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    block_rows: int | None = None,
    progress: Callable[[int], None] | None = None,
    real_keys: np.ndarray | None = None,
) -> TensorReport:
    """`real_keys`: optional (N, S) bool, True = real token, from the same call (see
    analysis.padquery): its pad positions are pad queries, whose empty rows are info."""
    summary = summarize(source, block_rows, progress=progress)
    report = report_from_summary(summary, api=api, query_dtype=query_dtype, selection=selection,
                                 real_keys=real_keys)
    _preview_worst_matrix(report, source, summary)
    _describe_bias(report, source, summary)
    return report


def _describe_bias(report: TensorReport, source: TensorSource, s: MaskSummary) -> None:
    """Evidence on what a biased mask's bias looks like (ALiBi, relative positions)."""
    from maskcheck.analysis.bias import MAX_MATRICES, MAX_MATRIX_ELEMENTS, bias_look

    bias = report.params.get("bias")
    if not isinstance(bias, dict) or s.matrix_rows * s.cols > MAX_MATRIX_ELEMENTS:
        return
    count = min(s.matrices, MAX_MATRICES)
    block = source.read_rows(0, count * s.matrix_rows).reshape(count, s.matrix_rows, s.cols)
    look = bias_look(block)
    bias["looks_like"] = look
    words = {"alibi": "the bias steps by one slope per key along each row: ALiBi",
             "relative-position": "the bias is constant along each diagonal: a relative-position "
                                  "bias (T5-style)",
             "none": "the bias has no ALiBi or relative-position structure"}
    report.evidence.append(words[look])


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
        nz = nonzero_flags(block, "bias" in report.params)
        padded = np.zeros((stop - start, grid.shape[1] * cell_c), bool)
        padded[:, :S] = nz
        per_cell = padded.reshape(stop - start, grid.shape[1], cell_c).sum(axis=2)
        np.add.at(grid, np.arange(start, stop) // cell_r, per_cell)
    rows_in = np.minimum(cell_r, L - np.arange(grid.shape[0]) * cell_r)
    cols_in = np.minimum(cell_c, S - np.arange(grid.shape[1]) * cell_c)
    frac = grid / np.outer(rows_in, cols_in)
    keep = CONVENTIONS[report.convention].nonzero_means != "masked" and "bias" not in \
        report.params
    report.preview = np.round(frac if keep else 1.0 - frac, 4).tolist()
    report.preview_origin = origin


def nonzero_flags(block: np.ndarray, split: bool) -> np.ndarray:
    """The flags a reading counts: nonzero, or on the masked/kept split of a mask with a bias
    (report.params has "bias"), strongly masked (<= ADDITIVE_MASKED_BELOW, or NaN)."""
    if block.dtype == np.bool_:
        return block
    if split:
        wide = block.astype(np.float32) if block.dtype == np.float16 else block
        out: np.ndarray = ~(wide > ADDITIVE_MASKED_BELOW)
        return out
    return np.asarray(block != 0)


def report_from_summary(
    summary: MaskSummary,
    *,
    api: str = "auto",
    query_dtype: str | None = None,
    selection: Selection | None = None,
    real_keys: np.ndarray | None = None,
) -> TensorReport:
    inference = infer(summary, api=api, real_keys=real_keys)
    ctx = MaskContext(summary, inference, None if api == "auto" else api, query_dtype)
    allows = (selection or Selection.build()).allows
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
    flags = s.split if inf.reading.split and s.split is not None else s
    grid = flags.preview_nz if inf.reading.nonzero_means == "keep" else 1.0 - flags.preview_nz
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
            _with_companion_padding(loaded.tensors, report.tensors, file_api, query_dtype,
                                    selection)
            if selection is None or selection.allows("MC002"):
                report.findings.extend(
                    padding_with_attn_mask(loaded.tensors, report.tensors))
            report.tensors.extend(_not_a_mask(name, shape, dtype, why)
                                  for name, shape, dtype, why in loaded.not_masks)
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


def _not_a_mask(name: str, shape: tuple[int, ...], dtype: str, why: str) -> TensorReport:
    """A tensor no mask can be made of (complex, exotic dtype): listed, with its reason."""
    return TensorReport(name=name, shape=shape, dtype=dtype, convention="not-a-mask",
                        confidence=0.95, role="unknown", pattern=[], masked_fraction=None,
                        evidence=[why])


def _with_companion_padding(
    sources: list[TensorSource], reports: list[TensorReport], api: str,
    query_dtype: str | None, selection: Selection | None,
) -> None:
    """Re-read attention masks with empty real-query rows in the light of a padding mask of
    the same file: its pad positions are pad queries (analysis.padquery)."""
    pads = [(s, r) for s, r in zip(sources, reports, strict=True)
            if r.role in ("key_padding_mask", "hf_attention_mask") and len(s.shape) == 2]
    if not pads:
        return
    for i, (source, rep) in enumerate(zip(sources, reports, strict=True)):
        if rep.summary is None or len(source.shape) < 3 or not any(
                f.code == "MC002" and f.severity == Severity.ERROR for f in rep.findings):
            continue
        for ps, pr in pads:
            real = companion_real_keys(ps, pr)
            if real is None or real.shape[1] != source.shape[-1] or \
                    source.shape[0] % real.shape[0]:
                continue
            fresh = report_from_summary(rep.summary, api=api, query_dtype=query_dtype,
                                        selection=selection, real_keys=real)
            _preview_worst_matrix(fresh, source, rep.summary)
            fresh.evidence.append(f"pad queries also read from {pr.name!r}")
            reports[i] = fresh
            break


def companion_real_keys(source: TensorSource, report: TensorReport) -> np.ndarray | None:
    """(N, S) bool, True = real token, of a padding mask whose convention is known."""
    means = CONVENTIONS[report.convention].nonzero_means
    if means is None or any(f.code == "MC010" for f in report.findings):
        return None
    n = source.shape[0]
    data = source.read_rows(0, n)
    nz = nonzero_flags(data, "bias" in report.params)
    out: np.ndarray = nz if means == "keep" else ~nz
    return out


Progress = Callable[[int, int], None]


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
