"""Which inputs `check` looks at: Python sources, notebooks and mask files, directories walked.

Nothing here opens a file: each candidate is classified by `stat` (see `lint.reading`).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from maskcheck.config import Config, is_directory, skipped_directory
from maskcheck.io.rawfile import os_error_problem
from maskcheck.lint.reading import (
    NOTEBOOK_SUFFIXES,
    is_notebook,
    regular_file_problem,
    source_kind,
)

SOURCE_SUFFIXES = frozenset({".py", ".pyi"})
MASK_SUFFIXES = frozenset({".safetensors", ".npy", ".npz"})
TORCH_SUFFIXES = frozenset({".pt", ".pth"})
# .bin is usually model weights: only checked when named on the command line.
EXPLICIT_ONLY_SUFFIXES = frozenset({".bin"})


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


@dataclass
class Inputs:
    sources: list[Path] = field(default_factory=list)  # Python files only
    # Kept apart from `sources` so that anything that rewrites Python files (--fix) never
    # takes a notebook's JSON for Python.
    notebooks: list[Path] = field(default_factory=list)
    masks: list[Path] = field(default_factory=list)
    problems: list[tuple[Path, str]] = field(default_factory=list)
    walked: set[Path] = field(default_factory=set)  # found in a directory, not named
    order: dict[Path, int] = field(default_factory=dict)  # the order files were found in

    def lintable(self) -> list[Path]:
        """Python sources and notebooks, in the order they were found."""
        return sorted([*self.sources, *self.notebooks], key=self.order.__getitem__)


def mask_suffixes(*, explicit: bool) -> frozenset[str]:
    out = set(MASK_SUFFIXES)
    if torch_available():
        out |= TORCH_SUFFIXES
    if explicit:
        out |= TORCH_SUFFIXES | EXPLICIT_ONLY_SUFFIXES
    return frozenset(out)


def collect(paths: list[Path], config: Config) -> Inputs:
    """Files under `paths`. A path that cannot be checked (nothing there, symlink loop,
    broken link, FIFO, device, unreadable directory) is a problem line for that path, and
    the others are still collected and checked (as ruff's E902: one mistyped path in a
    list must not hide the findings in the others)."""
    inputs = Inputs()
    seen: set[Path] = set()
    walk_masks = mask_suffixes(explicit=False)
    named_masks = mask_suffixes(explicit=True)
    for p in paths:
        if _names_nothing(p):
            if p not in seen:
                seen.add(p)
                inputs.problems.append((p, "no such file or directory"))
            continue
        if is_directory(p):
            _walk(p, config, inputs, seen, walk_masks)
            continue
        if p in seen or config.is_excluded(p):
            continue
        seen.add(p)
        suffix = p.suffix.lower()
        if suffix in SOURCE_SUFFIXES or suffix in NOTEBOOK_SUFFIXES or suffix == "":
            # pre-commit hands over extensionless scripts with a python shebang
            _add_checked(inputs, p, _source_list(inputs, p.name), source_kind(p.name))
        elif suffix in named_masks:
            _add_checked(inputs, p, inputs.masks, "mask file")
        else:
            inputs.problems.append(
                (p, f"not a Python source, notebook or mask file "
                    f"({', '.join(sorted(named_masks | NOTEBOOK_SUFFIXES))})")
            )
    return inputs


def _source_list(inputs: Inputs, name: str) -> list[Path]:
    return inputs.notebooks if is_notebook(name) else inputs.sources


def _names_nothing(path: Path) -> bool:
    """True only when no file or link is there; a path under a directory that cannot be
    searched is not 'missing' (it is reported as permission denied when it is checked)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return False


def _add_checked(inputs: Inputs, file: Path, into: list[Path], what: str) -> None:
    problem = regular_file_problem(str(file), what=what)
    if problem is None:
        into.append(file)
        inputs.order[file] = len(inputs.order)
    else:
        inputs.problems.append((file, problem))


def _listing(directory: Path) -> tuple[list[str], list[str]]:
    """(subdirectories, other entries) of one directory, sorted; OSError when unlistable.
    A symlink to a directory is in neither: it is not followed, so no loop can form."""
    dirs: list[str] = []
    others: list[str] = []
    with os.scandir(directory) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir()
            except OSError:  # a symlink loop: reported when the entry is checked
                is_dir = False
            if not is_dir:
                others.append(entry.name)
            elif not entry.is_symlink():
                dirs.append(entry.name)
    return sorted(dirs), sorted(others)


def _walk(top: Path, config: Config, inputs: Inputs, seen: set[Path],
          masks: frozenset[str]) -> None:
    """Files under `top` with a suffix `check` reads, in `os.walk` top-down order, without
    recursion (os.walk recurses on Python 3.11: a tree 1,000 levels deep raised
    RecursionError); a directory that cannot be listed is a problem line.

    Paths for `exclude` are relative to the config's directory, built one name at a time
    from `top`'s (no directory symlink is entered, so they are the real paths): resolving
    every path again would cost O(depth) system calls per file.
    """
    top_rel = config.relative(top) if config.exclude else ""
    stack = [(top, "" if top_rel == "." else top_rel)]
    while stack:
        here, rel = stack.pop()
        try:
            dirnames, filenames = _listing(here)
        except OSError as e:
            inputs.problems.append((here, f"cannot list directory: {os_error_problem(e)}"))
            continue
        for name in filenames:
            file = here / name
            suffix = file.suffix.lower()
            if suffix in SOURCE_SUFFIXES or suffix in NOTEBOOK_SUFFIXES:
                into, what = _source_list(inputs, name), source_kind(name)
            elif suffix in masks:
                into, what = inputs.masks, "mask file"
            else:
                continue
            if file in seen or _excluded(config, rel, name):
                continue
            seen.add(file)
            inputs.walked.add(file)
            _add_checked(inputs, file, into, what)
        stack.extend(reversed([
            (here / d, f"{rel}/{d}" if rel else d) for d in dirnames
            if not skipped_directory(d)
            and not _excluded(config, rel, d)
        ]))


def _excluded(config: Config, rel: str, name: str) -> bool:
    return bool(config.exclude) and config.excluded_relative(f"{rel}/{name}" if rel else name)
