"""SARIF 2.1.0 for code-scanning uploads (github/codeql-action/upload-sarif)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

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
    """A URI reference (RFC 3986): relative paths percent-encoded byte by byte (spaces,
    `%`, `#`, `?`, `:`, newlines, non-ASCII and undecodable names), absolute ones as file URIs."""
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()  # percent-encodes the file system bytes
    return quote(os.fsencode(p.as_posix()), safe="/")


def _result(f: Finding, path: str, index: dict[str, int], tensor: str | None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(path)}}
    location: dict[str, Any] = {"physicalLocation": physical}
    text = f.message if tensor is None else f"{tensor}: {f.message}"
    result: dict[str, Any] = {"ruleId": f.code, "ruleIndex": index[f.code],
                              "level": _LEVEL[f.severity]}
    # Code scanning (GitHub) refuses a result without `region.startLine`.
    region: dict[str, int] = {"startLine": f.line if f.line is not None else 1}
    if f.line is not None:
        region["startColumn"] = f.col or 1
    physical["region"] = region
    if f.cell is not None:
        # A notebook: the region is the line (and column) within the cell, not a line of
        # the .ipynb JSON; the cell is a logical location, and the message says where.
        text = f"cell {f.cell}, line {f.line}: {text}"
        location["logicalLocations"] = [{"name": f"cell {f.cell}", "kind": "module"}]
        result["properties"] = {"cell": f.cell, "line": f.line, "column": f.col or 1}
    if tensor is not None:
        location["logicalLocations"] = [{"name": tensor, "kind": "variable"}]
    result["message"] = {"text": text}
    result["locations"] = [location]
    return result


def render(report: Report, version: str) -> dict[str, Any]:
    rules = all_rules()
    index = {r.code: i for i, r in enumerate(rules)}
    results: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for file in report.files:
        if file.error is not None:
            physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(file.path)}}
            if file.error_line is not None:  # a syntax error: where it is, as for a result
                physical["region"] = {"startLine": file.error_line,
                                      "startColumn": file.error_col or 1}
            notes.append({
                "level": "error",
                "message": {"text": f"{file.path}: {file.error}"},
                "locations": [{"physicalLocation": physical}],
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
