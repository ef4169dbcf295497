"""The walk's shortcuts (`Linter._may_dispatch`, `Linter._may_hide_diagonal`,
`Linter._adds_key_axes`, and the line gates of `_lines_that_may_name`) skip work that cannot
change a finding; with all switched off every file of the recall corpus and of the rule
fixtures gives the same findings, hit for hit."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from maskcheck.lint import checks
from maskcheck.lint.checks import Hit, lint_tree
from tests.lint.conftest import SOURCE_CODES

ROOT = Path(__file__).parents[2]
CORPUS = sorted([*(ROOT / "benchmarks" / "lint_recall").rglob("*.py"),
                 *(Path(__file__).parent / "fixtures").rglob("*.py")])


def _hits(source: str) -> list[Hit]:
    return lint_tree(ast.parse(source), SOURCE_CODES, source, "a.py")




def test_the_corpus_is_there() -> None:
    assert len(CORPUS) > 700


def test_the_shortcuts_change_no_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = [path.read_text() for path in CORPUS]
    fast = [_hits(source) for source in sources]
    monkeypatch.setattr(checks.Linter, "_may_dispatch", lambda self: True)
    monkeypatch.setattr(checks.Linter, "_may_hide_diagonal", lambda self: True)
    monkeypatch.setattr(checks.Linter, "_adds_key_axes", lambda self: True)
    # and the line gates of the one-walk readings (`finfo`, `softmax` / `Softmax`): every
    # statement entered
    monkeypatch.setattr(checks, "_lines_that_may_name", lambda source, word, tree: None)
    slow = [_hits(source) for source in sources]
    differ = [str(path) for path, a, b in zip(CORPUS, fast, slow, strict=True) if a != b]
    assert differ == []


def test_the_dispatch_shortcut_is_what_finds_a_registry_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the switch reaches the walk: with dispatch reported impossible, the registry's class is
    # no longer followed (so the comparison above compares two different walks)
    source = (ROOT / "benchmarks" / "lint_recall" / "heldout31" /
              "timesformer_frame_padding.py").read_text()
    assert [hit.code for hit in _hits(source)] == ["MC509"]
    monkeypatch.setattr(checks.Linter, "_may_dispatch", lambda self: False)
    assert _hits(source) == []


@pytest.mark.parametrize("written", [
    "m[:, None, None, :]", "m[:,None,None,:]", "m[:, None,\n   None, :]",
    "m[:, None,  # heads\n   None, :]", "m[:, None, \\\n   None, :]", "m[:, (None), None, :]",
    "m[:, ( None ), (None), :]",
])
def test_every_spelling_of_the_key_axes_passes_the_text_gate(written: str) -> None:
    # what `_note_key_axes` reads is there wherever the gate lets it run
    subscript = ast.parse(written, mode="eval").body
    assert isinstance(subscript, ast.Subscript) and checks.key_axes_added(subscript.slice)
    assert checks._KEY_AXES_TEXT.search(written) is not None


def test_the_text_gate_reads_a_block_of_commented_out_code_in_one_pass(tmp_path: Path) -> None:
    # yourmt3's pitchshift_layer.py: a `None,` then commented-out code. A comment that could
    # end anywhere let the search split each line at every space and parenthesis (about four
    # times the work per line: 12 lines took 16 s, 40 would never end); run as `check` does,
    # in a process that must finish.
    lines = "".join(f"        # x{i} = g(a, b)  (c)  # d\n" for i in range(40))
    # (the call in the function is what asks the gate)
    source = f"import torch\n\n\ndef f(a=None,\n{lines}        b=1):\n    return torch.cat([a])\n"
    path = tmp_path / "commented.py"
    path.write_text(source)
    result = subprocess.run([sys.executable, "-m", "maskcheck", "check", str(path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
