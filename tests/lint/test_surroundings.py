"""The recall corpus in the surroundings real code bases give it (benchmarks/lint_surroundings.py):
the same findings, on the same original lines, wherever the code sits.

The suite runs every untouched file and one fixed half of the (file, surroundings) rewrites, so
that it stays within ten minutes on two cores as the corpus grows; each session's measurement
runs the whole benchmark (README, "Lint recall")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from maskcheck.lint.runner import lint_file
from maskcheck.rules.registry import all_rules

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import lint_surroundings as surroundings  # noqa: E402

ALL = frozenset(r.code for r in all_rules() if r.code.startswith("MC5"))
BUGGY = """\"\"\"A module docstring.\"\"\"

import torch


def attend(scores, n):
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return scores + causal
"""


def test_the_corpus_keeps_its_findings_in_every_surroundings() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCHMARKS)])}
    # (a guard against a hang, not a timing: the corpus grows with every held-out set, and the
    # run shares two cores with the rest of the suite)
    proc = subprocess.run([sys.executable, "-P", str(BENCHMARKS / "lint_surroundings.py"),
                           "--part", "1/2"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "lost (found untouched, not rewritten): 0" in proc.stdout
    assert "new (found rewritten, not untouched): 0" in proc.stdout
    assert "findings on correct twins: 0" in proc.stdout


def test_the_parts_are_fixed_and_together_the_whole() -> None:
    files = surroundings.corpus_files("all")
    pairs = [(path, name) for path in files for name in surroundings.TRANSFORMS]
    halves = [{pair for pair in pairs if surroundings.in_part(*pair, (k, 2))} for k in (1, 2)]
    assert halves[0].isdisjoint(halves[1]) and halves[0] | halves[1] == set(pairs)
    assert all(surroundings.in_part(*pair, (1, 1)) for pair in pairs)
    # every surroundings keeps a good share of the corpus in the suite's half
    for name in surroundings.TRANSFORMS:
        kept = sum(surroundings.in_part(path, name, (1, 2)) for path in files)
        assert 0.35 * len(files) < kept < 0.65 * len(files), (name, kept, len(files))


@pytest.mark.parametrize("name", sorted(surroundings.TRANSFORMS))
def test_each_rewrite_maps_the_finding_back_to_its_line(name: str, tmp_path: Path) -> None:
    done = surroundings.TRANSFORMS[name](BUGGY)
    if done is None:  # nothing of that kind in this source
        assert name in {"import-from", "sdpa-alias", "method-form", "functional", "nnf-alias",
                        "fill-keywords"}
        return
    path = tmp_path / f"rewritten{done.suffix}"
    path.write_bytes(done.text.encode())
    report = lint_file(str(path), ALL)
    assert report.error is None
    places = {(f.cell, f.line) if f.cell else f.line for f in report.findings}
    assert places == {done.where[8]}, (name, places, done.text)


def test_the_preamble_is_silent_although_its_docstring_holds_buggy_code(tmp_path: Path) -> None:
    path = tmp_path / "preamble.py"
    path.write_text("import torch\nimport torch.nn.functional as F\n" + surroundings.PREAMBLE)
    assert "masked_fill(mask == 0, -1e9)" in surroundings.PREAMBLE
    assert lint_file(str(path), ALL).findings == []
