"""`maskcheck rules` (every rule, a table) and `maskcheck explain CODE` (one, as `ruff rule`)."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from maskcheck.errors import UsageError
from maskcheck.model import Severity
from maskcheck.rules.registry import RuleInfo, all_rules, rules_for

_SEVERITY_STYLE = {
    Severity.ERROR: "bold red",
    Severity.WARNING: "bold yellow",
    Severity.INFO: "bold blue",
}
# Below this width the table would fold every summary: list the rules instead.
WIDE = 100
_KIND_TITLE = {"mask": "mask tensors", "call": "attention calls", "source": "Python sources",
               "probe": "a module's outputs (maskcheck probe)"}


def rule_json(rule: RuleInfo) -> dict[str, Any]:
    return {
        "code": rule.code,
        "name": rule.name,
        "severity": rule.severity.value,
        "kind": rule.kind,
        "summary": rule.summary,
        "explanation": rule.explanation,
        "bad": rule.bad,
        "good": rule.good,
        "fix": rule.fix,
        "safe_fix": rule.safe_fix,
    }


def rules_table(rules: list[RuleInfo], unicode: bool = True) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD if unicode else box.ASCII2,
        show_edge=False,
        pad_edge=False,
        header_style="bold dim",
        padding=(0, 1, 0, 0),
    )
    table.add_column("code", style="bold", no_wrap=True)
    table.add_column("name", no_wrap=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("kind", no_wrap=True, style="dim")
    table.add_column("fix", no_wrap=True)
    table.add_column("summary", overflow="fold", ratio=1)
    previous = None
    for rule in rules:
        if previous is not None and rule.kind != previous:
            table.add_section()
        previous = rule.kind
        table.add_row(
            rule.code,
            rule.name,
            Text(rule.severity.value, style=_SEVERITY_STYLE[rule.severity]),
            rule.kind,
            "safe" if rule.safe_fix else "",
            rule.summary,
        )
    return table


def rules_list(rules: list[RuleInfo]) -> Group:
    """The narrow-terminal form of the table: one heading line and the summary per rule."""
    lines: list[RenderableType] = []
    for rule in rules:
        head = Text()
        head.append(rule.code, style="bold")
        head.append("  ")
        head.append(rule.severity.value.ljust(8), style=_SEVERITY_STYLE[rule.severity])
        head.append(rule.name)
        head.append(f"  ({rule.kind})", style="dim")
        if rule.safe_fix:
            head.append("  [safe fix]")
        lines.append(head)
        lines.append(Padding(Text(rule.summary, style="dim"), (0, 0, 0, 7), expand=False))
    return Group(*lines)


def explanation_markdown(rule: RuleInfo) -> str:
    """The rule as Markdown, laid out as `ruff rule` lays its rules out."""
    checks = _KIND_TITLE.get(rule.kind, rule.kind)
    parts = [
        f"# {rule.name} ({rule.code})",
        "",
        f"Default severity: **{rule.severity.value}**. Checks {checks}.",
        "",
        "## What it does",
        rule.summary,
        "",
        "## Why is this bad?",
        rule.explanation.strip(),
    ]
    if rule.bad.strip():
        parts += ["", "## Example", "```python", rule.bad.rstrip(), "```"]
    if rule.good.strip():
        parts += ["", "Use instead:", "```python", rule.good.rstrip(), "```"]
    if rule.fix.strip():
        parts += ["", "## Fix", rule.fix.strip()]
    if rule.safe_fix and rule.fix_covers:
        parts += ["", "Fix is sometimes available: `maskcheck check --fix` (or `--diff`) "
                  f"rewrites {rule.fix_covers}."]
    elif rule.safe_fix:
        parts += ["", "Fix is always available: `maskcheck check --fix` (or `--diff`)."]
    return "\n".join(parts) + "\n"


def styled_markdown(markdown: str) -> RenderableType:
    """The same text as `explanation_markdown`, with headings bold and code highlighted."""
    pieces: list[RenderableType] = []
    code: list[str] | None = None
    for line in markdown.splitlines():
        if code is not None:
            if line.startswith("```"):
                pieces.append(Syntax("\n".join(code), "python", theme="ansi_dark",
                                     background_color="default", word_wrap=True))
                pieces.append(Text(line, style="dim"))
                code = None
            else:
                code.append(line)
        elif line.startswith("```"):
            pieces.append(Text(line, style="dim"))
            code = []
        elif line.startswith("#"):
            pieces.append(Text(line, style="bold"))
        else:
            pieces.append(Text(line.replace("**", "")))
    return Group(*pieces)


def _console() -> Console:
    from maskcheck.render.console import make_console

    return make_console()


def _check_format(value: str) -> str:
    fmt = value.strip().lower()
    if fmt not in ("text", "json"):
        raise UsageError(f"--format takes text|json, not {value!r}")
    return fmt


def rules_command(
    output_format: str = typer.Option("text", "--format", metavar="FORMAT", help="text or json."),
) -> int:
    """List every rule: code, name, default severity, what it checks."""
    rules = all_rules()
    if _check_format(output_format) == "json":
        sys.stdout.write(json.dumps([rule_json(r) for r in rules], indent=2) + "\n")
        return 0
    from maskcheck.render.console import print_clean, unicode_ok

    console = _console()
    if console.width >= WIDE:
        print_clean(console, rules_table(rules, unicode_ok(console)))
    else:
        print_clean(console, rules_list(rules))
    return 0


def explain_command(
    code: str = typer.Argument(..., metavar="CODE", help="A code (MC002) or a name."),
    output_format: str = typer.Option("text", "--format", metavar="FORMAT", help="text or json."),
) -> int:
    """Explain one rule, with a bad and a good example."""
    fmt = _check_format(output_format)
    # A name shared by several codes (causal-flag-with-mask: MC060 and MC506) explains each.
    rules = rules_for(code)
    if not rules:
        raise UsageError(f"unknown rule {code!r} (see `maskcheck rules`)")
    if fmt == "json":
        doc: Any = rule_json(rules[0]) if len(rules) == 1 else [rule_json(r) for r in rules]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    markdown = "\n\n".join(explanation_markdown(rule) for rule in rules)
    console = _console()
    if console.no_color or not console.is_terminal:
        from maskcheck.render.console import write_safely

        write_safely(sys.stdout, markdown)
    else:
        console.print(styled_markdown(markdown))
    return 0


def register(app: typer.Typer) -> None:
    app.command("rules")(rules_command)
    app.command("explain")(explain_command)
