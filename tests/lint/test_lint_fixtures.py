"""torchfix-style snapshots: fixtures/<CODE>_*.py next to *.expected (`line:col CODE`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from maskcheck.lint.runner import lint_file
from maskcheck.rules.registry import all_rules

FIXTURES = Path(__file__).parent / "fixtures"
SOURCE_CODES = frozenset(r.code for r in all_rules() if r.kind == "source")
BAD = sorted(FIXTURES.glob("MC5*.py"))
GOOD = sorted(FIXTURES.glob("good_*.py"))


def _lines(path: Path) -> list[str]:
    report = lint_file(str(path), SOURCE_CODES)
    assert report.error is None, report.error
    return [f"{f.line}:{f.col} {f.code}" for f in report.findings]


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_fixture_matches_expected(path: Path) -> None:
    expected = path.with_suffix(".expected").read_text().split("\n")
    assert _lines(path) == [line for line in expected if line]


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_fixture_fires_its_own_rule(path: Path) -> None:
    code = path.name.split("_")[0]
    assert any(line.endswith(code) for line in _lines(path))


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_good_fixture_is_silent(path: Path) -> None:
    assert _lines(path) == []


def test_every_source_rule_has_a_bad_fixture() -> None:
    covered = {p.name.split("_")[0] for p in BAD}
    assert covered == set(SOURCE_CODES)


@pytest.mark.parametrize("code", sorted(SOURCE_CODES))
def test_rule_examples_behave(code: str, tmp_path: Path) -> None:
    """Each rule's own bad example fires it and its good example does not."""
    rule = next(r for r in all_rules() if r.code == code)
    prelude = "import torch\nimport torch.nn.functional as F\n"
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(prelude + _in_function(rule.bad))
    good.write_text(prelude + _in_function(rule.good))
    assert code in {f.code for f in lint_file(str(bad), frozenset({code})).findings}
    assert lint_file(str(good), frozenset({code})).findings == []


def _in_function(body: str) -> str:
    indented = "\n".join("    " + line for line in body.splitlines())
    params = "scores, mask, n, b, mha, x, attention_mask, q, k, v, pad, causal"
    return f"def example({params}):\n{indented}\n"
