"""Files through the pipeline: cross-tensor findings, metadata, previews, progress."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from maskcheck.analysis import analyze_file, analyze_paths


def _banded_window_with_padding(path: Path) -> None:
    # pytorch/pytorch#41508: each mask alone is fine, together batch 1 query 3 sees nothing
    inf = -np.inf
    attn = np.array([[0, inf, inf, inf], [0, 0, inf, inf], [inf, 0, 0, inf],
                     [inf, inf, 0, 0]], np.float32)
    kpm = np.array([[False] * 4, [False, False, True, True]])
    save_file({"attn_mask": attn, "key_padding_mask": kpm}, str(path))


def test_padding_plus_window_leaves_an_empty_row(tmp_path: Path) -> None:
    path = tmp_path / "pair.safetensors"
    _banded_window_with_padding(path)
    report = analyze_file(str(path))
    assert not any(t.findings for t in report.tensors)
    (finding,) = report.findings
    assert finding.code == "MC002"
    assert [list(w) for w in finding.where] == [[1, 3]]


def test_correct_padding_and_causal_pair_is_clean(tmp_path: Path) -> None:
    path = tmp_path / "pair.safetensors"
    causal = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    kpm = np.array([[False] * 4, [False, False, True, True]])
    save_file({"attn_mask": causal, "key_padding_mask": kpm}, str(path))
    assert analyze_file(str(path)).findings == []


def test_capture_metadata_declares_the_api(tmp_path: Path) -> None:
    path = tmp_path / "call.safetensors"
    mha_causal = np.triu(np.ones((4, 4), bool), 1)  # True = masked: right for MHA
    save_file({"attn_mask": mha_causal}, str(path), metadata={"maskcheck.api": "sdpa"})
    (tensor,) = analyze_file(str(path)).tensors
    assert "MC010" in {f.code for f in tensor.findings}
    save_file({"attn_mask": mha_causal}, str(path), metadata={"maskcheck.api": "mha"})
    (tensor,) = analyze_file(str(path)).tensors
    assert "MC010" not in {f.code for f in tensor.findings}


def test_preview_shows_the_matrix_with_the_worst_finding(tmp_path: Path) -> None:
    keep = np.tril(np.ones((2, 1, 4, 4), bool))
    keep[1, 0, 2, :] = False  # batch 1, query 2 sees nothing
    path = tmp_path / "m.safetensors"
    save_file({"attn_mask": keep}, str(path))
    (tensor,) = analyze_file(str(path), api="sdpa").tensors
    assert tensor.preview_origin == (1, 0)
    assert tensor.preview is not None
    assert tensor.preview[2] == [0.0, 0.0, 0.0, 0.0]
    assert tensor.preview[3] == [1.0, 1.0, 1.0, 1.0]


def test_progress_reaches_the_total(tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        p = tmp_path / f"m{i}.safetensors"
        save_file({"attn_mask": np.tril(np.ones((64, 64), bool))}, str(p))
        paths.append(str(p))
    for jobs in (1, 2):
        calls: list[tuple[int, int]] = []
        analyze_paths(paths, jobs=jobs, progress=lambda done, total, calls=calls: calls.append(
            (done, total)))
        assert calls
        done, total = calls[-1]
        assert total == sum(Path(p).stat().st_size for p in paths)
        assert done <= total
        assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_block_rows_do_not_change_file_reports(tmp_path: Path) -> None:
    path = tmp_path / "pair.safetensors"
    _banded_window_with_padding(path)
    a = analyze_file(str(path), block_rows=1).to_json()
    b = analyze_file(str(path)).to_json()
    assert a == b


def test_left_padding_with_causal_mask_is_info_for_pad_queries(tmp_path: Path) -> None:
    path = tmp_path / "pair.safetensors"
    causal = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    kpm = np.array([[False] * 4, [True, True, False, False]])  # left padding of 2
    save_file({"src_mask": causal, "src_key_padding_mask": kpm}, str(path))
    (finding,) = analyze_file(str(path)).findings
    assert (finding.code, finding.severity.value) == ("MC002", "info")
    assert [list(w) for w in finding.where] == [[1, 0], [1, 1]]


@pytest.mark.parametrize("module", ["maskcheck.rules.mask_rules", "maskcheck.analysis.infer",
                                    "maskcheck.analysis.pipeline", "maskcheck.analysis"])
def test_every_module_imports_first(module: str) -> None:
    # Each must import in a fresh interpreter, whatever was imported before it.
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_every_tensor_is_listed_ids_and_complex_as_not_a_mask(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file as save_torch

    tensors = {
        "freqs_cis": torch.polar(torch.ones(4, 8), torch.zeros(4, 8)),  # RoPE table, complex64
        "token_type_ids": torch.tensor([[0, 0, 0, 1, 1, 1]]),
        "position_ids": torch.tensor([[0, 1, 0, 1, 2, 0]]),  # packed sequences
        "attention_mask": torch.tensor([[1, 1, 1, 0, 0, 0]]),
    }
    for suffix in ("safetensors", "pt"):
        path = tmp_path / f"inputs.{suffix}"
        if suffix == "pt":
            torch.save(tensors, path)
        else:
            save_torch(tensors, str(path))
        report = analyze_file(str(path))
        assert report.error is None
        got = {t.name: (t.convention, t.dtype, t.findings) for t in report.tensors}
        assert set(got) == set(tensors)
        for name in ("freqs_cis", "token_type_ids", "position_ids"):
            assert got[name][0] == "not-a-mask" and got[name][2] == []
        assert got["freqs_cis"][1] == "complex64"
        assert got["attention_mask"][0] == "int-one-keep"
