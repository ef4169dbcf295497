"""Acceptance test: `maskcheck inspect` on every fixture reaches the verdict in expected.json.

The verdicts come from ../shared/CONTRACT.md and the facts in conventions.md, written
independently of maskcheck's analysis code (see fixtures/README.md for the table).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
EXPECTED: dict[str, Any] = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = EXPECTED["cases"]
CASES_BY_ID = {case["id"]: case for case in CASES}
NOT_FIXTURES = {"make_fixtures.py", "expected.json", "README.md"}

TENSOR_PARAMS = [
    pytest.param(case["id"], name, id=f"{case['id']}::{name}")
    for case in CASES
    for name in case["tensors"]
]


@functools.cache
def inspect_case(case_id: str) -> tuple[int, str, str]:
    case = CASES_BY_ID[case_id]
    cmd = [sys.executable, "-m", "maskcheck", "inspect", str(FIXTURES / case["file"]),
           "--format", "json", "--api", case["api"], *case["args"]]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def report_for(case_id: str) -> dict[str, Any]:
    rc, stdout, stderr = inspect_case(case_id)
    assert rc in (0, 1), f"exit {rc} for {case_id}; stderr: {stderr.strip()[-2000:]}"
    try:
        report: dict[str, Any] = json.loads(stdout)
    except json.JSONDecodeError as exc:
        pytest.fail(f"stdout is not JSON for {case_id} ({exc}): {stdout[:500]!r}")
    assert len(report["files"]) == 1, report["files"]
    file_report: dict[str, Any] = report["files"][0]
    assert file_report["error"] is None, file_report["error"]
    return file_report


def tensor_report(case_id: str, name: str) -> dict[str, Any]:
    tensors = report_for(case_id)["tensors"]
    if name == "*":
        assert len(tensors) == 1, [t["name"] for t in tensors]
        return dict(tensors[0])
    matches = [t for t in tensors if t["name"] == name]
    assert len(matches) == 1, f"{name!r} not reported once; got {[t['name'] for t in tensors]}"
    return dict(matches[0])


def codes_of(findings: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for finding in findings:
        out.setdefault(finding["code"], []).append(finding["severity"])
    return out


def brief(tensor: dict[str, Any]) -> str:
    keep = ("name", "convention", "confidence", "role", "pattern", "masked_fraction")
    shown = {k: tensor.get(k) for k in keep}
    shown["findings"] = [(f["code"], f["severity"]) for f in tensor.get("findings", [])]
    return json.dumps(shown)


def assert_one_of(field: str, got: Any, want: str | list[str] | None, context: str) -> None:
    if want is None:
        return
    allowed = [want] if isinstance(want, str) else want
    assert got in allowed, f"{field}: got {got!r}, want one of {allowed}; {context}"


@pytest.mark.parametrize("case_id", [c["id"] for c in CASES])
def test_inspect_reports_exactly_the_stored_tensors(case_id: str) -> None:
    file_report = report_for(case_id)
    names = {t["name"] for t in file_report["tensors"]}
    expected = set(CASES_BY_ID[case_id]["tensors"])
    if expected == {"*"}:
        assert len(names) == 1, names
    else:
        # Non-tensor entries of a .pt file (ints, strings) must not show up as tensors.
        assert names == expected


@pytest.mark.parametrize(("case_id", "name"), TENSOR_PARAMS)
def test_tensor_verdict(case_id: str, name: str) -> None:
    want = CASES_BY_ID[case_id]["tensors"][name]
    got = tensor_report(case_id, name)
    context = f"{case_id}::{name} reported {brief(got)}; why: {want['why']}"

    assert_one_of("convention", got["convention"], want["convention"], context)
    assert_one_of("role", got["role"], want["role"], context)

    tags = set(got["pattern"])
    if "patterns_exact" in want:
        assert tags == set(want["patterns_exact"]), context
    missing = set(want["patterns_required"]) - tags
    assert not missing, f"pattern tags missing {sorted(missing)}; {context}"
    wrong = set(want["patterns_forbidden"]) & tags
    assert not wrong, f"pattern tags must not include {sorted(wrong)}; {context}"

    if "masked_fraction" in want:
        assert got["masked_fraction"] == pytest.approx(want["masked_fraction"], abs=1e-3), context

    found = codes_of(got["findings"])
    if want.get("no_findings"):
        assert not found, f"expected no findings; {context}"
    for code, severity in want["codes_required"].items():
        assert code in found, f"{code} must fire; {context}"
        if severity is not None:
            assert set(found[code]) == {severity}, f"{code} must be {severity}; {context}"
    false_alarms = sorted(set(want["codes_forbidden"]) & set(found))
    assert not false_alarms, f"must not fire: {false_alarms}; {context}"


@pytest.mark.parametrize(
    "case_id",
    [c["id"] for c in CASES if c["file_codes_required"] or c["file_codes_forbidden"]],
)
def test_file_level_verdict(case_id: str) -> None:
    case = CASES_BY_ID[case_id]
    file_report = report_for(case_id)
    file_level = codes_of(file_report["findings"])
    anywhere = dict(file_level)
    for tensor in file_report["tensors"]:
        for code, severities in codes_of(tensor["findings"]).items():
            anywhere.setdefault(code, []).extend(severities)
    context = f"{case_id}: file findings {file_level}, all {anywhere}; why: {case['why']}"
    for code, severity in case["file_codes_required"].items():
        assert code in anywhere, f"{code} must fire for this file; {context}"
        if severity is not None:
            assert set(anywhere[code]) == {severity}, context
    wrong = sorted(set(case["file_codes_forbidden"]) & set(file_level))
    assert not wrong, f"file-level findings must not include {wrong}; {context}"


def test_every_fixture_file_has_a_verdict() -> None:
    on_disk = {p.name for p in FIXTURES.iterdir() if p.is_file()} - NOT_FIXTURES
    listed = {case["file"] for case in CASES}
    assert on_disk - listed == set(), "fixtures without a verdict in expected.json"
    assert listed - on_disk == set(), "expected.json names files that do not exist"
    assert len(CASES_BY_ID) == len(CASES), "duplicate case ids"


def test_expected_json_is_well_formed() -> None:
    codes = {f"MC0{n:02d}" for n in (1, 2, 10, 11, 12, 13, 14, 20, 21, 22, 23, 30, 31, 32, 40,
                                     41, 42, 50, 51)}
    for case in CASES:
        assert case["api"] in {"mha", "sdpa", "hf", "eager", "flex", "auto"}, case["id"]
        for name, want in case["tensors"].items():
            required = set(want["codes_required"])
            debatable = set(want["codes_debatable"])
            forbidden = set(want["codes_forbidden"])
            assert required | debatable | forbidden == codes, (case["id"], name)
            assert not (required & forbidden or required & debatable or debatable & forbidden)
            assert want["why"], (case["id"], name)


def test_make_fixtures_is_deterministic(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    proc = subprocess.run(
        [sys.executable, str(FIXTURES / "make_fixtures.py"), "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    committed = sorted(p.name for p in FIXTURES.glob("*.safetensors"))
    regenerated = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert regenerated == committed
    changed = [n for n in committed if (tmp_path / n).read_bytes() != (FIXTURES / n).read_bytes()]
    assert changed == [], "regenerated safetensors differ from the committed ones"
    for generated in ("expected.json", "README.md"):
        assert (tmp_path / generated).read_bytes() == (FIXTURES / generated).read_bytes(), (
            f"fixtures/{generated} is stale: rerun fixtures/make_fixtures.py"
        )
