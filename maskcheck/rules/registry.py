"""Every rule's metadata, whatever checks it: mask summaries, attention calls or sources.

This module imports only the standard library and `model`, so the source linter (the
pre-commit path) can read rule metadata without numpy or torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

from maskcheck.model import Severity

RuleKind = Literal["mask", "call", "source", "probe"]


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
    safe_fix: bool = False  # `check --fix` rewrites the code (source rules only)
    # With safe_fix, when only some findings of the rule get a fix: the forms that are
    # rewritten, and what is not (explain says "sometimes" then, not "always").
    fix_covers: str = ""


_RULES: dict[str, RuleInfo] = {}

# Modules that register rules when imported; `all_rules` imports them on first use.
_RULE_MODULES = (
    "maskcheck.rules.catalog_mask",
    "maskcheck.rules.catalog_calls",
    "maskcheck.lint.catalog",
    "maskcheck.probe.catalog",
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


def rules_for(code_or_name: str) -> list[RuleInfo]:
    """The rule with this code, or every rule with this name, by code.

    Names are not unique across rule kinds: MC060 (a call seen at runtime) and MC506 (the same
    mistake in source) are both `causal-flag-with-mask`, so a name stands for all its codes.
    """
    _load()
    key = code_or_name.strip()
    if key.upper() in _RULES:
        return [_RULES[key.upper()]]
    return sorted((r for r in _RULES.values() if r.name == key.lower()), key=lambda r: r.code)


def get_rule(code_or_name: str) -> RuleInfo | None:
    _load()
    key = code_or_name.strip()
    if key.upper() in _RULES:
        return _RULES[key.upper()]
    for r in _RULES.values():
        if r.name == key.lower():
            return r
    return None
