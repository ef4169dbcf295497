"""Every rule's metadata, whatever checks it: mask summaries, attention calls or sources.

This module imports only the standard library and `model`, so the source linter (the
pre-commit path) can read rule metadata without numpy or torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

from maskcheck.model import Severity

RuleKind = Literal["mask", "call", "source"]


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str
    severity: Severity
    kind: RuleKind
    summary: str  # one line, as in the CONTRACT table
    explanation: str  # why it is bad; plain text paragraphs
    bad: str  # a bad example (code)
    good: str  # the same, fixed
    fix: str = ""  # the generic fix in one line
    # Off unless asked for by code, name or ALL (--select/--extend-select): a finding that is
    # true of correct stock masks too, so it would be noise by default.
    opt_in: bool = False


_RULES: dict[str, RuleInfo] = {}

# Modules that register rules when imported; `all_rules` imports them on first use.
_RULE_MODULES = (
    "maskcheck.rules.catalog_mask",
    "maskcheck.rules.catalog_calls",
    "maskcheck.lint.catalog",
)
_loaded = False


def register(info: RuleInfo) -> RuleInfo:
    if info.code in _RULES and _RULES[info.code] != info:
        raise ValueError(f"rule code {info.code} registered twice")
    _RULES[info.code] = info
    return info


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in _RULE_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # a rule family not built yet
            if e.name != mod:
                raise


def all_rules() -> list[RuleInfo]:
    _load()
    return sorted(_RULES.values(), key=lambda r: r.code)


def get_rule(code_or_name: str) -> RuleInfo | None:
    _load()
    key = code_or_name.strip()
    if key.upper() in _RULES:
        return _RULES[key.upper()]
    for r in _RULES.values():
        if r.name == key.lower():
            return r
    return None
