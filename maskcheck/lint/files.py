"""Which inputs `check` looks at: Python sources and mask files, directories walked."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from maskcheck.config import DEFAULT_EXCLUDE, Config
from maskcheck.errors import UsageError

SOURCE_SUFFIXES = frozenset({".py", ".pyi"})
MASK_SUFFIXES = frozenset({".safetensors", ".npy", ".npz"})
TORCH_SUFFIXES = frozenset({".pt", ".pth"})
# .bin is usually model weights: only checked when named on the command line.
EXPLICIT_ONLY_SUFFIXES = frozenset({".bin"})


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


@dataclass
class Inputs:
    sources: list[Path] = field(default_factory=list)
    masks: list[Path] = field(default_factory=list)
    problems: list[tuple[Path, str]] = field(default_factory=list)


def mask_suffixes(*, explicit: bool) -> frozenset[str]:
    out = set(MASK_SUFFIXES)
    if torch_available():
        out |= TORCH_SUFFIXES
    if explicit:
        out |= TORCH_SUFFIXES | EXPLICIT_ONLY_SUFFIXES
    return frozenset(out)


def collect(paths: list[Path], config: Config) -> Inputs:
    """Files under `paths`; a path that does not exist is a usage error."""
    for p in paths:
        if not p.exists():
            raise UsageError(f"{p}: no such file or directory")
    inputs = Inputs()
    seen: set[Path] = set()
    walk_masks = mask_suffixes(explicit=False)
    named_masks = mask_suffixes(explicit=True)
    for p in paths:
        if p.is_dir():
            for file in _walk(p, config):
                _add(inputs, seen, file, walk_masks)
        elif not config.is_excluded(p) and p not in seen:
            suffix = p.suffix.lower()
            if suffix in SOURCE_SUFFIXES or suffix == "":
                # pre-commit hands over extensionless scripts with a python shebang
                inputs.sources.append(p)
                seen.add(p)
            elif suffix in named_masks:
                _add(inputs, seen, p, named_masks)
            else:
                inputs.problems.append(
                    (p, f"not a Python source or a mask file ({', '.join(sorted(named_masks))})")
                )
    return inputs


def _add(inputs: Inputs, seen: set[Path], file: Path, masks: frozenset[str]) -> None:
    if file in seen:
        return
    suffix = file.suffix.lower()
    if suffix in SOURCE_SUFFIXES:
        inputs.sources.append(file)
    elif suffix in masks:
        inputs.masks.append(file)
    else:
        return
    seen.add(file)


def _walk(top: Path, config: Config) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in DEFAULT_EXCLUDE and not d.endswith(".egg-info")
            and not config.is_excluded(here / d)
        )
        for name in sorted(filenames):
            file = here / name
            if not config.is_excluded(file):
                out.append(file)
    return out
