"""A rule name shared by several codes (MC060 and MC506: causal-flag-with-mask) stands for
all of them: in suppression comments, in selections and in `explain`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from maskcheck.lint.noqa import suppressions
from maskcheck.lint.runner import lint_source
from maskcheck.rules.registry import all_rules, rules_for

ROOT = Path(__file__).resolve().parents[2]
CALL = ("import torch.nn.functional as F\n"
        "y = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True)")


def test_the_shared_name_is_carried_by_a_call_rule_and_a_source_rule() -> None:
    codes = {r.code: r.kind for r in all_rules() if r.name == "causal-flag-with-mask"}
    assert codes == {"MC060": "call", "MC506": "source"}
    assert [r.code for r in rules_for("causal-flag-with-mask")] == ["MC060", "MC506"]
    assert [r.code for r in rules_for("mc506")] == ["MC506"]
    assert rules_for("no-such-rule") == []


def test_ignore_by_the_shared_name_suppresses_the_source_rule() -> None:
    assert [f.code for f in lint_source(CALL + "\n", frozenset({"MC506"}))] == ["MC506"]
    silenced = CALL + "  # maskcheck: ignore[causal-flag-with-mask]\n"
    assert lint_source(silenced, frozenset({"MC506"})) == []
    assert lint_source(CALL + "  # noqa: causal-flag-with-mask\n", frozenset({"MC506"})) == []
    assert suppressions("x  # noqa: causal-flag-with-mask\n") == {1: {"MC060", "MC506"}}


def _explain(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    r = subprocess.run([sys.executable, "-m", "maskcheck", "explain", *args],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_explain_by_the_shared_name_shows_both_codes() -> None:
    text = _explain("causal-flag-with-mask")
    assert "(MC060)" in text and "(MC506)" in text
    doc = json.loads(_explain("causal-flag-with-mask", "--format", "json"))
    assert [d["code"] for d in doc] == ["MC060", "MC506"]
    assert json.loads(_explain("MC506", "--format", "json"))["code"] == "MC506"
