"""Rule selection as ruff does it: codes, prefixes (MC0, MC5), ALL, and rule names."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from maskcheck.errors import UsageError
from maskcheck.model import Severity
from maskcheck.rules.registry import all_rules


def split_codes(values: Iterable[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or ():
        out.extend(p.strip() for p in v.split(",") if p.strip())
    return out


def option_codes(values: Iterable[str] | None, flag: str) -> tuple[str, ...]:
    """The codes of a command-line option; an empty value (`--select ''`) is a usage error,
    not "no selector" (which for --select would mean every rule)."""
    for v in values or ():
        if not v.strip(" ,"):
            raise UsageError(f"{flag} got an empty value: give codes (MC501), prefixes (MC5) "
                             "or ALL")
    return tuple(split_codes(values))


def expand(selector: str, *, origin: str = "the command line") -> set[str]:
    """Codes matched by one selector; an unknown selector is a usage error."""
    rules = all_rules()
    sel = selector.strip()
    if sel.upper() == "ALL":
        return {r.code for r in rules}
    by_name = [r.code for r in rules if r.name == sel.lower()]
    if by_name:
        return set(by_name)
    matched = {r.code for r in rules if r.code.startswith(sel.upper())}
    if not matched or not sel.upper().startswith("MC"):
        raise UsageError(f"unknown rule selector {selector!r} in {origin}")
    return matched


def _selected(selector: str, origin: str) -> set[str]:
    """expand(), less opt-in rules unless the selector names them (code, name) or is ALL."""
    codes = expand(selector, origin=origin)
    sel = selector.strip()
    if sel.upper() == "ALL" or len(codes) == 1:
        return codes
    opt_in = {r.code for r in all_rules() if r.opt_in}
    return codes - opt_in


@dataclass(frozen=True)
class Selection:
    enabled: frozenset[str]

    @classmethod
    def build(
        cls,
        select: Iterable[str] | None = None,
        ignore: Iterable[str] | None = None,
        extend_select: Iterable[str] | None = None,
        *,
        origin: str = "the command line",
    ) -> Selection:
        sel = split_codes(select)
        codes = set().union(*(_selected(s, origin) for s in sel)) if sel else {
            r.code for r in all_rules() if not r.opt_in
        }
        for s in split_codes(extend_select):
            codes |= _selected(s, origin)
        for s in split_codes(ignore):
            codes -= expand(s, origin=origin)
        return cls(frozenset(codes))

    def allows(self, code: str) -> bool:
        return code in self.enabled


def parse_severity(value: str, *, origin: str = "--fail-on") -> Severity:
    try:
        return Severity(value.strip().lower())
    except ValueError:
        raise UsageError(f"{origin} takes error, warning or info, not {value!r}") from None
