"""SARIF 2.1.0 for code-scanning uploads (github/codeql-action/upload-sarif)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maskcheck.model import Finding, Report, Severity
from maskcheck.rules.registry import all_rules

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/maskcheck/maskcheck"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _rule(info: Any) -> dict[str, Any]:
    help_text = f"{info.explanation}\n\nBad:\n{info.bad}\n\nGood:\n{info.good}"
    return {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary},
        "fullDescription": {"text": info.explanation},
        "help": {"text": help_text},
        "defaultConfiguration": {"level": _LEVEL[info.severity]},
        "properties": {"kind": info.kind},
    }


def _uri(path: str) -> str:
    p = Path(path)
    return p.as_posix() if not p.is_absolute() else p.as_uri()


def _result(f: Finding, path: str, index: dict[str, int], tensor: str | None) -> dict[str, Any]:
    region: dict[str, int] = {"startLine": f.line if f.line is not None else 1}
    if f.line is not None:
        region["startColumn"] = f.col or 1
    location: dict[str, Any] = {
        "physicalLocation": {"artifactLocation": {"uri": _uri(path)}, "region": region},
    }
    if tensor is not None:
        location["logicalLocations"] = [{"name": tensor, "kind": "variable"}]
    return {
        "ruleId": f.code,
        "ruleIndex": index[f.code],
        "level": _LEVEL[f.severity],
        "message": {"text": f.message if tensor is None else f"{tensor}: {f.message}"},
        "locations": [location],
    }


def render(report: Report, version: str) -> dict[str, Any]:
    rules = all_rules()
    index = {r.code: i for i, r in enumerate(rules)}
    results: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for file in report.files:
        if file.error is not None:
            notes.append({
                "level": "error",
                "message": {"text": f"{file.path}: {file.error}"},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(file.path)}}}],
            })
        for f in file.findings:
            results.append(_result(f, file.path, index, None))
        for t in file.tensors:
            results.extend(_result(f, file.path, index, t.name) for f in t.findings)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "maskcheck",
                "version": version,
                "informationUri": INFORMATION_URI,
                "rules": [_rule(r) for r in rules],
            }},
            "invocations": [{
                "executionSuccessful": not notes,
                "toolExecutionNotifications": notes,
            }],
            "results": results,
        }],
    }
