"""Precision of `maskcheck check` on real code bases nobody here wrote, per set and per rule.

    python benchmarks/lint_precision.py [--set dev|heldout|fresh|fresh2|...|fresh19|all]
                                        [--corpus NAME ...] [--unread FILE] [--timing]

The code bases are listed in benchmarks/lint_corpora.toml (pinned PyPI release files, each in a
set: "dev", "heldout", "fresh", "fresh2", ...; see --set); what is missing is downloaded into
benchmarks/_work/ (git-ignored) and checked against its sha256. A GitHub code base is pinned by
its repository and commit instead: its archive comes from codeload.github.com for that commit
(the bytes of GitHub's archives are not stable, so no sha256; the commit names the tree).
`maskcheck check --format json` runs with the maskcheck that this Python imports (set PYTHONPATH
to measure a worktree). Every finding is matched against benchmarks/lint_verdicts.json, whose keys
are `codebase/path:line:code` and whose values start with `real:` or `false:` followed by a one-line
reason, written by a person who read the code.

Exit status: 0 when every finding has a verdict, 1 when some finding is unread (no precision
figure may be reported then; `--unread FILE` writes each one with its source lines for reading),
2 when a code base cannot be downloaded or check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import tomllib
from _lint_bench import MASKCHECK, maskcheck_location
from _machine import machine

from maskcheck.lint.project import PROJECT_MARKERS, SEARCHED_SUFFIXES

HERE = Path(__file__).resolve().parent
CORPORA_FILE = HERE / "lint_corpora.toml"
VERDICTS_FILE = HERE / "lint_verdicts.json"
WORK = HERE / "_work"
BIN = Path(sys.executable).parent
# Only what `check` reads is unpacked: sources and notebooks, and the project files, configs,
# scripts and docs that MC501's project gate searches for float16 evidence. A code base without a
# project file at its root (a GitHub archive, a wheel) gets an empty `.git` folder there, as a
# clone has: that is where the gate's project ends (else the search would climb into this
# repository).
LINTED_SUFFIXES = (".py", ".pyi", ".ipynb")
UNPACKED_SUFFIXES = tuple(sorted(set(LINTED_SUFFIXES) | SEARCHED_SUFFIXES))
# Bumped when what is unpacked changes: older unpacked trees are unpacked again.
UNPACK_LAYOUT = "2"


@dataclass(frozen=True)
class Corpus:
    name: str
    version: str
    set: str
    file: str = ""
    sha256: str = ""  # empty for a GitHub commit
    url: str = ""
    repo: str = ""  # owner/name, for a GitHub commit
    commit: str = ""

    def __post_init__(self) -> None:
        if self.repo:
            if len(self.commit) != 40 or self.file or self.sha256 or self.url:
                raise SystemExit(f"lint_corpora.toml: {self.name}: a GitHub code base takes "
                                 "repo and a full 40-digit commit, no file/sha256/url")
            object.__setattr__(self, "file", f"{self.name}-{self.commit}.tar.gz")
            object.__setattr__(self, "url", f"https://codeload.github.com/{self.repo}/tar.gz/"
                                            f"{self.commit}")
        elif not (self.file and self.sha256 and self.url):
            raise SystemExit(f"lint_corpora.toml: {self.name}: file, sha256 and url are needed")

    @property
    def root(self) -> Path:
        return WORK / "corpora" / f"{self.name}-{self.version}"


@dataclass(frozen=True)
class Finding:
    corpus: Corpus
    key: str  # codebase/path:line:code, the verdicts file's key
    code: str
    path: Path
    line: int
    message: str


def load_corpora() -> list[Corpus]:
    with CORPORA_FILE.open("rb") as f:
        return [Corpus(**entry) for entry in tomllib.load(f)["corpus"]]


def load_verdicts() -> dict[str, str]:
    if not VERDICTS_FILE.exists():
        return {}
    verdicts: dict[str, str] = json.loads(VERDICTS_FILE.read_text())
    bad = [k for k, v in verdicts.items() if not v.startswith(("real:", "false:"))]
    if bad:
        raise SystemExit(f"{VERDICTS_FILE.name}: a verdict must start with 'real:' or 'false:': "
                         f"{bad[0]}")
    return verdicts


def download(corpus: Corpus) -> Path:
    archive = WORK / "downloads" / corpus.file
    if archive.exists() and (not corpus.sha256 or
                             hashlib.sha256(archive.read_bytes()).hexdigest() == corpus.sha256):
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(corpus.url, timeout=120) as response:
            data = response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SystemExit(f"lint_precision: cannot download {corpus.name}=={corpus.version} "
                         f"({reason}); are you offline? Put {corpus.file} in "
                         f"{archive.parent}") from None
    digest = hashlib.sha256(data).hexdigest()
    if corpus.sha256 and digest != corpus.sha256:
        raise SystemExit(f"lint_precision: {corpus.file}: sha256 {digest} is not the pinned "
                         f"{corpus.sha256}")
    archive.write_bytes(data)
    return archive


def safe_member(name: str) -> PurePosixPath | None:
    """The member's path below the archive's top folder, or None to skip it."""
    parts = PurePosixPath(name).parts
    if not name.endswith(UNPACKED_SUFFIXES) or ".." in parts or name.startswith("/"):
        return None
    return PurePosixPath(*parts[1:]) if len(parts) > 1 else PurePosixPath(name)


def unpack(corpus: Corpus) -> Path:
    stamp = f"{corpus.file} layout {UNPACK_LAYOUT}"
    done = corpus.root / ".unpacked"
    if done.exists() and done.read_text() == stamp:
        return corpus.root
    archive = download(corpus)
    tmp = corpus.root.with_name(corpus.root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if corpus.file.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                # A wheel has no top folder: keep the whole path.
                if (name.endswith(UNPACKED_SUFFIXES) and ".." not in name
                        and not name.startswith("/")):
                    dest = tmp / name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(zf.read(name))
    else:
        with tarfile.open(archive) as tf:
            for member in tf.getmembers():
                rel = safe_member(member.name)
                if rel is None or not member.isfile():
                    continue
                source = tf.extractfile(member)
                if source is None:
                    continue
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(source.read())
    if not any((tmp / marker).exists() for marker in PROJECT_MARKERS):
        (tmp / ".git").mkdir()  # a GitHub archive or a wheel: checked as its checkout would be
    (tmp / ".unpacked").write_text(stamp)
    shutil.rmtree(corpus.root, ignore_errors=True)
    tmp.rename(corpus.root)
    return corpus.root


def run_check(corpus: Corpus, timeout: float) -> tuple[list[Finding], int, float]:
    """Findings of `maskcheck check` on the code base, the number of files it could not read
    (-1: check did not finish within `timeout` seconds), and the wall seconds it took."""
    start = time.perf_counter()
    # Own session: on a timeout the whole group (check and its worker processes) is ended.
    with subprocess.Popen([*MASKCHECK, "check", "--format", "json", "--exit-zero", "."],
                          cwd=corpus.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            # A hang is a result to report, not a reason to stop measuring the other code bases.
            return [], -1, time.perf_counter() - start
        except BaseException:
            # Ctrl-C or a SIGTERM of this script (see main): the check runs in its own session,
            # so it and its workers would outlive us
            os.killpg(child.pid, signal.SIGKILL)
            raise
    proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    seconds = time.perf_counter() - start
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"lint_precision: check on {corpus.name} gave no JSON "
                         f"(exit {proc.returncode}): {proc.stderr.strip()[-300:]}") from None
    findings: list[Finding] = []
    unreadable = 0
    for entry in report["files"]:
        if entry.get("error"):
            unreadable += 1
        rel = Path(entry["path"])
        rel = rel.relative_to(corpus.root) if rel.is_absolute() else rel
        for f in entry["findings"]:
            where = rel.as_posix()
            if f.get("cell") is not None:  # notebooks: path:cell N:line
                where += f":cell {f['cell']}"
            line = int(f.get("line") or 0)
            findings.append(Finding(corpus, f"{corpus.name}/{where}:{line}:{f['code']}", f["code"],
                                    corpus.root / rel, line, f["message"]))
    return findings, unreadable, seconds


def ruff_seconds(corpus: Corpus) -> float | None:
    ruff = shutil.which("ruff", path=str(BIN)) or shutil.which("ruff")
    if ruff is None:
        return None
    start = time.perf_counter()
    subprocess.run([ruff, "check", "--select", "E,F", "--no-cache", "--isolated", "--exit-zero",
                    "-q", "."], cwd=corpus.root, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def context(finding: Finding, around: int = 3) -> str:
    try:
        lines = finding.path.read_text(errors="replace").splitlines()
    except OSError:
        return "    (source not readable)"
    lo, hi = max(finding.line - 1 - around, 0), min(finding.line + around, len(lines))
    return "\n".join(f"  {'>' if i + 1 == finding.line else ' '}{i + 1:5d} {lines[i]}"
                     for i in range(lo, hi))


def precision(real: int, false: int) -> str:
    return f"{real / (real + false):.0%}" if real + false else "-"


def print_table(title: str, findings: list[Finding], verdicts: dict[str, str]) -> None:
    rows: dict[str, Counter[str]] = {}
    for f in findings:
        verdict = verdicts.get(f.key, "unread:").split(":", 1)[0]
        rows.setdefault(f.code, Counter())[verdict] += 1
        rows.setdefault("all", Counter())[verdict] += 1
    print(f"\n{title}")
    print(f"  {'rule':<7} {'findings':>8} {'real':>5} {'false':>5} {'unread':>6} {'precision':>9}")
    for code in sorted(rows, key=lambda c: (c == "all", c)):
        c = rows[code]
        total = c["real"] + c["false"] + c["unread"]
        print(f"  {code:<7} {total:>8} {c['real']:>5} {c['false']:>5} {c['unread']:>6} "
              f"{precision(c['real'], c['false']):>9}")
    if not rows:
        print("  (no findings)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sets = list(dict.fromkeys(c.set for c in load_corpora()))  # as lint_corpora.toml names them
    ap.add_argument("--set", choices=[*sets, "all"], default="dev")
    ap.add_argument("--corpus", nargs="*", default=[], help="only these code bases (by name)")
    ap.add_argument("--unread", type=Path, help="write each unread finding with its source here")
    ap.add_argument("--timing", action="store_true", help="also time ruff check --select E,F")
    ap.add_argument("--show", action="store_true", help="list every finding with its verdict")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds check may take on one code base (default 600)")
    ap.add_argument("--download-only", action="store_true",
                    help="fetch and unpack the code bases, run nothing (no finding is seen)")
    args = ap.parse_args()
    corpora = [c for c in load_corpora()
               if (args.set == "all" or c.set == args.set)
               and (not args.corpus or c.name in args.corpus)]
    if args.download_only:
        for corpus in corpora:
            print(f"{corpus.name}=={corpus.version}: {unpack(corpus)}", flush=True)
        return 0
    # a SIGTERM unwinds like Ctrl-C, so the running check's process group is ended too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    verdicts = load_verdicts()
    print(f"maskcheck from {maskcheck_location()}")
    print(machine() + " (shared machine: compare ratios, not seconds)")
    by_set: dict[str, list[Finding]] = {}
    totals: list[tuple[float, float]] = []
    timeouts: list[str] = []
    print(f"\n  {'code base':<32} {'set':<8} {'files':>6} {'unread.':>7} {'findings':>8} "
          f"{'check s':>8}" + (f" {'ruff s':>7} {'ratio':>6}" if args.timing else ""))
    for corpus in corpora:
        root = unpack(corpus)
        findings, unreadable, seconds = run_check(corpus, args.timeout)
        by_set.setdefault(corpus.set, []).extend(findings)
        files = sum(1 for p in root.rglob("*") if p.suffix in LINTED_SUFFIXES)
        row = (f"  {corpus.name + '==' + corpus.version:<32} {corpus.set:<8} {files:>6} "
               f"{unreadable:>7} {len(findings):>8} {seconds:>8.2f}")
        if unreadable < 0:
            row += f"  TIMEOUT: check did not finish in {args.timeout:.0f} s"
            timeouts.append(corpus.name)
        if args.timing:
            ruff = ruff_seconds(corpus)
            row += f" {ruff:>7.2f} {seconds / ruff:>6.2f}" if ruff else "  (no ruff)"
            totals.append((seconds, ruff or 0.0))
        print(row, flush=True)
    if totals and all(r for _, r in totals):
        check_s, ruff_s = sum(c for c, _ in totals), sum(r for _, r in totals)
        print(f"  {'total':<32} {'':<8} {'':>6} {'':>7} {'':>8} {check_s:>8.2f} {ruff_s:>7.2f} "
              f"{check_s / ruff_s:>6.2f}")
    everything: list[Finding] = []
    for name, findings in by_set.items():
        print_table(f"set {name}", findings, verdicts)
        everything.extend(findings)
    if len(by_set) > 1:
        print_table("all sets", everything, verdicts)
    if args.show:
        print("\nfindings:")
        for f in everything:
            print(f"  {f.key}  {verdicts.get(f.key, 'UNREAD')}")
    unread = [f for f in everything if f.key not in verdicts]
    if args.unread is not None:
        args.unread.write_text("".join(f"{f.key}\n    {f.message}\n{context(f)}\n\n"
                                       for f in unread))
    if timeouts:
        print(f"\ncheck did not finish on: {', '.join(timeouts)}: no figure for them")
        return 2
    if unread:
        print(f"\n{len(unread)} finding(s) have no verdict in {VERDICTS_FILE.name}: no precision "
              "figure may be reported" + (f"; listed in {args.unread}" if args.unread else
                                          " (--unread FILE lists them)"))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
