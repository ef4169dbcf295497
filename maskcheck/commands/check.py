"""`maskcheck check PATH...`: the pre-commit / CI gate over Python sources and mask files.

The path over `.py` files imports neither torch nor numpy: mask files (and with them
`maskcheck.analysis`) are only touched when some are among the inputs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from maskcheck.commands.options import parse_api
from maskcheck.config import Config, common_start, discover
from maskcheck.errors import UsageError, discard_stdout, output_error
from maskcheck.model import FileReport, Report, Severity
from maskcheck.selection import Selection, option_codes, parse_severity

FORMATS = ("concise", "text", "json", "sarif", "github")


@dataclass(frozen=True)
class CheckOptions:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    fail_on: str | None = None
    api: str | None = None
    jobs: int | None = None
    fix: bool = False  # apply safe fixes before reporting what is left
    diff: bool = False  # print the safe fixes as a unified diff; change nothing


def build_report(paths: list[Path], opts: CheckOptions) -> tuple[Report, Severity]:
    """Collect, lint and analyse; the failing severity comes from the CLI or the config."""
    from maskcheck.lint.files import collect
    from maskcheck.lint.runner import lint_files

    config = discover(common_start(paths))
    selection = _selection(config, opts)
    fail_on = parse_severity(opts.fail_on) if opts.fail_on else config.fail_on or Severity.ERROR
    api = parse_api(opts.api or config.api or "auto")
    inputs = collect(paths, config)
    items = [(str(p), _enabled_for(p, selection, config)) for p in inputs.lintable()]
    reports = {r.path: r for r in lint_files(items, jobs=opts.jobs)}
    files = [FileReport(path=str(p), error=why) for p, why in inputs.problems]
    files += [reports[path] for path, _ in items]
    for p in inputs.masks:
        walked = p in inputs.walked
        if walked and (is_torchscript(p) or is_script(p) or (
                p.suffix == ".npy" and not names_a_mask(p.stem))):
            continue
        report = _analyze_mask(p, api, selection, config)
        if walked and (report.error or "").startswith(REFUSED_PICKLE):
            continue
        if walked and not report.error and not names_a_mask(p.stem):
            report.tensors = [t for t in report.tensors if names_a_mask(t.name)]
            if not report.tensors:
                continue
        files.append(report)
    return Report(files=files), fail_on


# Arrays found by walking a directory are mostly data: features, one-hot labels, images (fairseq
# ships hubert activations as .npy; a one-hot float matrix reads as a 0/1 mask). A walk checks a
# tensor only when its file or tensor name says it is a mask; named on the command line, every
# tensor is checked.
MASK_NAME_WORDS = ("mask", "attn", "attention", "causal", "alibi", "bias", "padding")


def names_a_mask(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in MASK_NAME_WORDS)


# A .pt/.pth found by walking a directory is often not a mask at all: a TorchScript model
# (`torch.jit.save`), or a pickled module or optimizer that torch.load(weights_only=True)
# refuses to build. Neither can hold a mask maskcheck could read, so a directory walk skips
# them (nothing is executed either way); named on the command line they are still errors.
REFUSED_PICKLE = "refused by torch.load(weights_only=True)"


def is_script(path: Path) -> bool:
    """A text script that only borrows the suffix (deepspeed 0.9's launcher `bin/deepspeed.pt`
    starts with `#!/usr/bin/env python3`); a torch.save file starts with a zip or pickle header."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def is_torchscript(path: Path) -> bool:
    """A zip archive laid out by torch.jit.save (a `code/` folder and `constants.pkl`)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, NotImplementedError):
        return False
    return any(n.endswith("/constants.pkl") or "/code/" in n for n in names)


def _fix(paths: list[Path], opts: CheckOptions) -> list[Any]:
    from maskcheck.lint.files import collect
    from maskcheck.lint.fix import fix_files

    config = discover(common_start(paths))
    selection = _selection(config, opts)
    items = [(str(p), _enabled_for(p, selection, config)) for p in collect(paths, config).sources]
    return list(fix_files(items, write=not opts.diff))


def _report_unfixed(report: Report, *, errors: bool = True) -> int:
    """On stderr: each file that could not be read (with `errors`), and each notebook that
    holds findings with a safe fix (--fix does not rewrite a notebook's JSON). Returns how
    many files could not be read."""
    from maskcheck.render.concise import printable, printable_path
    from maskcheck.rules.registry import get_rule

    unread = 0
    for file in report.files:
        if file.error is not None:
            unread += 1
            if errors:
                sys.stderr.write(f"{printable_path(file.path)}: error: {printable(file.error)}\n")
            continue
        fixable = sum(1 for f in file.findings
                      if (rule := get_rule(f.code)) is not None and rule.safe_fix)
        if fixable and file.path.endswith(".ipynb"):
            sys.stderr.write(f"{printable_path(file.path)}: not edited: --fix does not rewrite "
                             f"notebooks ({fixable} finding{'s' * (fixable != 1)} with a safe "
                             "fix; apply it in the cell)\n")
    return unread


def _selection(config: Config, opts: CheckOptions) -> Selection:
    select = list(opts.select) or (list(config.select) if config.select is not None else None)
    origin = "the command line" if opts.select else f"{config.path} [tool.maskcheck]"
    return Selection.build(
        select,
        [*config.ignore, *opts.ignore],
        [*config.extend_select, *opts.extend_select],
        origin=origin if config.path is not None else "the command line",
    )


def _enabled_for(path: Path, selection: Selection, config: Config) -> frozenset[str]:
    enabled = frozenset(c for c in selection.enabled if c.startswith("MC5"))
    ignored = config.ignored_for(path)
    if not ignored:
        return enabled
    from maskcheck.selection import expand

    drop: set[str] = set()
    for sel in ignored:
        drop |= expand(sel, origin=f"{config.path} per-file-ignores")
    return enabled - drop


def _analyze_mask(path: Path, api: str, selection: Selection, config: Config) -> FileReport:
    from maskcheck.analysis import analyze_file

    ignored = config.ignored_for(path)
    if ignored:
        selection = Selection(selection.enabled - Selection.build(ignored).enabled)
    report = analyze_file(str(path), api=api, selection=selection)
    for t in report.tensors:
        t.summary = None
    return report


def render(report: Report, fmt: str, *, statistics: bool) -> str:
    from maskcheck import __version__

    if fmt == "json":
        return json.dumps(report.to_json(__version__), indent=2) + "\n"
    if fmt == "sarif":
        from maskcheck.render import sarif

        return json.dumps(sarif.render(report, __version__), indent=2) + "\n"
    if fmt == "github":
        from maskcheck.render import github

        return github.render(report)
    from maskcheck.render import concise

    return concise.render(report, statistics=statistics)


def write_output(text: str) -> None:
    """Write to stdout in its encoding, escaping what it cannot hold (`\\xe9` for `é` with
    PYTHONIOENCODING=ascii or LC_ALL=C) instead of failing on a file name.

    A reader that stops reading (`| head`) is not an error: the rest is dropped and the exit
    code still says what was found. Any other failure to write (`> /dev/full`) is OutputError.
    """
    stream = sys.stdout
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:
            stream.write(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))
        stream.flush()
    except BrokenPipeError:
        discard_stdout()
    except OSError as e:
        raise output_error(e) from None


def run_check(
    paths: list[Path], opts: CheckOptions, *, fmt: str = "concise", statistics: bool = False,
    exit_zero: bool = False,
) -> int:
    fmt = fmt.strip().lower()
    if fmt not in FORMATS:
        raise UsageError(f"--format takes {'|'.join(FORMATS)}, not {fmt!r}")
    if not paths:
        raise UsageError("check needs at least one PATH")
    if opts.diff and fmt != "concise":
        raise UsageError(f"--diff prints a unified diff, not {fmt}: drop --format or --diff")
    if opts.fix or opts.diff:
        fixes = _fix(paths, opts)
        if opts.diff:
            # As ruff: the diff only, exit 1 when something would change; a file that cannot
            # be read still gets its one error line (on stderr: stdout is the diff) and exit 2.
            report, _ = build_report(paths, opts)
            write_output("".join(f.diff() for f in fixes))
            unread = _report_unfixed(report)
            return 2 if unread else (1 if fixes else 0)
    report, fail_on = build_report(paths, opts)
    write_output(render(report, fmt, statistics=statistics))
    if opts.fix:
        fixed = sum(f.fixed for f in fixes)
        if fixes:  # (on stderr: stdout stays the report in its format)
            sys.stderr.write(f"Fixed {fixed} problem{'s' * (fixed != 1)} in {len(fixes)} "
                             f"file{'s' * (len(fixes) != 1)}.\n")
        _report_unfixed(report, errors=False)
    code = report.exit_code(fail_on)
    return 0 if exit_zero and code == 1 else code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="maskcheck check",
        description="Lint Python sources and check mask files; findings only, exit code for "
        "gating.",
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    p.add_argument("--format", "--output-format", dest="fmt", default="concise",
                   metavar="FORMAT", help="concise, json, sarif or github")
    for flag in ("--select", "--ignore", "--extend-select"):
        p.add_argument(flag, action="append", default=[], metavar="CODES")
    p.add_argument("--fail-on", metavar="SEVERITY")
    p.add_argument("--api", metavar="API")
    p.add_argument("--statistics", action="store_true")
    p.add_argument("--exit-zero", action="store_true")
    p.add_argument("--jobs", "-j", type=int, metavar="N")
    p.add_argument("--fix", action="store_true")
    p.add_argument("--diff", action="store_true")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return p


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message, command="check")


def main(argv: Sequence[str] | None = None) -> int:
    """`maskcheck check` without Typer: the pre-commit path, where start-up time matters.

    Same options and exit codes as the Typer command; errors are mapped as `cli.main` does.
    """
    from maskcheck.cli import debug_requested, guarded

    args_list = list(sys.argv[1:] if argv is None else argv)

    def run() -> int:
        parser = _parser()
        parser.__class__ = _Parser
        ns = parser.parse_args(args_list)
        if ns.jobs is not None and ns.jobs < 1:
            raise UsageError("--jobs takes a number >= 1")
        opts = CheckOptions(
            select=option_codes(ns.select, "--select"),
            ignore=option_codes(ns.ignore, "--ignore"),
            extend_select=option_codes(ns.extend_select, "--extend-select"), fail_on=ns.fail_on,
            api=ns.api, jobs=ns.jobs, fix=ns.fix, diff=ns.diff,
        )
        return run_check(ns.paths, opts, fmt=ns.fmt, statistics=ns.statistics,
                         exit_zero=ns.exit_zero)

    return guarded(run, debug=debug_requested(args_list))


def register(app: Any) -> None:
    """Add `check` to the Typer app; Typer is imported here, not on the fast path."""
    import typer

    opt = typer.Option

    def check_command(
        paths: list[Path] = typer.Argument(  # noqa: B008
            ..., metavar="PATH", help="Python sources, mask files or directories."),
        output_format: str = opt("concise", "--format", "--output-format", metavar="FORMAT",
                                 help="concise, json, sarif or github."),
        select: list[str] = opt([], metavar="CODES", help="Only these rules."),  # noqa: B008
        ignore: list[str] = opt([], metavar="CODES", help="Skip these rules."),  # noqa: B008
        extend_select: list[str] = opt(  # noqa: B008
            [], metavar="CODES", help="Add rules to the selection."),
        fail_on: str | None = opt(
            None, metavar="SEVERITY", help="Fail at: error|warning|info (default error)."),
        api: str | None = opt(None, metavar="API", help="The API mask files are meant for."),
        statistics: bool = opt(False, "--statistics", help="Counts per rule."),
        exit_zero: bool = opt(False, "--exit-zero", help="Exit 0 even with findings."),
        jobs: int | None = opt(None, "--jobs", "-j", min=1, metavar="N",
                               help="Processes for many files."),
        fix: bool = opt(False, "--fix", help="Apply safe fixes (see `maskcheck rules`)."),
        diff: bool = opt(False, "--diff", help="Show safe fixes as a diff; change nothing."),
    ) -> int:
        """Lint Python sources and check mask files; findings only, exit code for gating."""
        opts = CheckOptions(
            select=option_codes(select, "--select"), ignore=option_codes(ignore, "--ignore"),
            extend_select=option_codes(extend_select, "--extend-select"), fail_on=fail_on,
            api=api,
            jobs=jobs, fix=fix, diff=diff,
        )
        return run_check(list(paths), opts, fmt=output_format, statistics=statistics,
                         exit_zero=exit_zero)

    app.command("check")(check_command)


if __name__ == "__main__":
    raise SystemExit(main())
