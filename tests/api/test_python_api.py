"""The Python API: one-line MaskcheckErrors, reports that render themselves, show()."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import maskcheck
from maskcheck.analysis import analyze_paths

ROOT = Path(__file__).resolve().parents[2]


def _padded_causal() -> np.ndarray:
    keep = np.tril(np.ones((6, 6), bool))
    keep[3:, :] = False
    return keep


@pytest.mark.parametrize(("tensor", "kwargs", "message"), [
    (np.ones((2, 2), bool), {"api": "bogus"},
     "api takes mha|sdpa|hf|eager|flex|auto, not 'bogus'"),
    (np.ones((2, 2), bool), {"query_dtype": "bogus"}, "query_dtype takes a float dtype"),
    ("hello", {}, "tensor 'mask': numpy dtype <U5 cannot hold a mask"),
    (np.array([1 + 2j]), {}, "numpy dtype complex128 cannot hold a mask"),
    (None, {}, "numpy dtype object cannot hold a mask"),
])
def test_api_errors_are_one_line_maskcheck_errors(tensor: object, kwargs: dict[str, str],
                                                  message: str) -> None:
    with pytest.raises(maskcheck.MaskcheckError) as e:
        maskcheck.analyze(tensor, **kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_tensor_report_renders_itself() -> None:
    report = maskcheck.analyze(_padded_causal(), api="sdpa")
    assert repr(report) == ("<TensorReport 'mask' bool[6,6] bool-true-keep custom; "
                            "2 findings (MC002, MC031)>")
    console = Console(width=100, record=True, force_terminal=False)
    console.print(report)
    text = console.export_text()
    assert "MC002 fully-masked-row" in text and "6 queries x 6 keys" in text
    html = report._repr_html_()
    assert html.startswith("<pre") and "MC002" in html and "<script" not in html


def test_report_and_file_report_render_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    report = analyze_paths(["fixtures/sdpa_bool_causal.safetensors"])
    assert repr(report) == "<Report 1 file, 1 tensor: 0 errors, 0 warnings, 1 info, 0 unreadable>"
    assert repr(report.files[0]) == ("<FileReport 'fixtures/sdpa_bool_causal.safetensors' "
                                     "1 tensor; 1 finding (MC050)>")
    console = Console(width=100, record=True)
    console.print(report)
    assert "1 file, 1 tensor" in console.export_text()
    assert "fixtures/sdpa_bool_causal.safetensors" in report.files[0]._repr_html_()


def test_show_prints_the_inspect_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert maskcheck.show(_padded_causal(), api="sdpa") is None
    out = capsys.readouterr().out
    assert "bool-true-keep" in out and "MC002 fully-masked-row  rows 3-5" in out
