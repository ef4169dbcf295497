"""The walk's three shortcuts (`Linter._may_dispatch`, `Linter._may_hide_diagonal`,
`Linter._adds_key_axes`) skip work that cannot change a finding; with all switched off every
file of the recall corpus and of the rule fixtures gives the same findings, hit for hit."""

from __future__ import annotations

import ast
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
