"""MC501 asks the file for a half-precision path, unless the project says it runs in float16.

On eight sets of real code bases most -1e9 fills sat in code that never meets float16 (tutorials,
float32-only research code); the real ones were in files that show half precision, or in
projects that switch it on from another file (fairseq's `--fp16`, which `assume-fp16` covers).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from maskcheck.lint.runner import lint_file, lint_source

ROOT = Path(__file__).resolve().parents[2]
MC501 = frozenset({"MC501"})
# fairseq's transformer layer before its fix, as fairseq 0.12's xmod layer still has it.
LAYER = '''import torch


class EncoderLayer(torch.nn.Module):
    def forward(self, x, attn_mask):
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8)
        return self.self_attn(x, x, x, attn_mask=attn_mask)
'''


def _lines(source: str, **kw: bool) -> list[int]:
    return [f.line for f in lint_source(source, MC501, **kw)]


def test_a_file_that_never_mentions_half_precision_is_silent() -> None:
    assert _lines(LAYER) == []


@pytest.mark.parametrize("evidence", [
    "x = x.half()",
    "x = x.to(torch.float16)",
    "scaler = torch.cuda.amp.GradScaler()",
    "ctx = torch.autocast('cuda')",
    "from apex import amp",
    "# trained with --fp16",
])
def test_any_half_precision_path_in_the_file_makes_it_fire(evidence: str) -> None:
    source = LAYER.replace("import torch\n", f"import torch\n{evidence}\n", 1)
    assert _lines(source) == [8]


def test_assume_half_fires_on_every_fill_of_unknown_dtype() -> None:
    assert _lines(LAYER, assume_half=True) == [7]


def test_assume_half_keeps_what_the_file_proves_float32() -> None:
    upcast = LAYER.replace("attn_mask.masked_fill(", "attn_mask.float().masked_fill(")
    assert _lines(upcast, assume_half=True) == []


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "maskcheck", "check", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env=env)


def test_the_flag_and_the_config_key_reach_the_linter(tmp_path: Path) -> None:
    (tmp_path / "layer.py").write_text(LAYER)
    assert "MC501" not in _cli("layer.py", cwd=tmp_path).stdout
    assert "layer.py:7:" in _cli("--assume-fp16", "layer.py", cwd=tmp_path).stdout
    (tmp_path / "pyproject.toml").write_text("[tool.maskcheck]\nassume-fp16 = true\n")
    many = [tmp_path / f"copy{i}.py" for i in range(60)]  # enough files for worker processes
    for path in many:
        path.write_text(LAYER)
    r = _cli(".", "--jobs", "2", cwd=tmp_path)
    assert r.stdout.count(": MC501 ") == 61, r.stdout[-500:]


def test_a_config_value_that_is_not_a_bool_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "layer.py").write_text(LAYER)
    (tmp_path / "pyproject.toml").write_text('[tool.maskcheck]\nassume-fp16 = "yes"\n')
    r = _cli("layer.py", cwd=tmp_path)
    assert r.returncode == 2
    assert "assume-fp16: expected true or false, got 'yes'" in r.stderr


def test_a_notebook_takes_the_setting_too(tmp_path: Path) -> None:
    import json

    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": LAYER}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "layer.ipynb"
    path.write_text(json.dumps(nb))
    assert lint_file(str(path), MC501).findings == []
    (finding,) = lint_file(str(path), MC501, assume_half=True).findings
    assert (finding.cell, finding.line) == (1, 7)
