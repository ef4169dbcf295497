"""Does the project a file belongs to ever run in float16? (MC501's project gate.)

`scores.masked_fill(mask, -1e9)` raises only on a float16 tensor. Whether the scores can be
float16 is rarely written in the file that fills them: fairseq's `--fp16`, mmf's
`training.fp16`, a Lightning `precision=16` live elsewhere in the project. A project that
never mentions float16 anywhere (a CPU tutorial, a float32-only library) runs the fill in
float32 or bfloat16, where -1e9 is finite; reporting it there is a false alarm.

The project is the nearest folder above the file holding `.git`, `pyproject.toml`, `setup.py`
or `setup.cfg`. Its sources, notebooks, configs, scripts and docs are searched for float16
evidence, stopping at the first. A file outside any project, or a project too big to read
whole (50,000 files or 256 MiB), counts as one that may run float16: the finding is kept.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from maskcheck.config import skipped_directory

PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
# What says that code may run in float16: the dtype (torch's, not numpy's: a pandas downcast
# is not a model's), `.half()`, an fp16 flag or config key (`--fp16`, `use_fp16`,
# `training.fp16`), autocast and its GradScaler, apex's amp (not apex itself: its fused
# LayerNorm runs in float32, and allennlp 0.9.0 names it only in a warning's URL),
# Lightning's `precision=16`/"16-mixed", and prose about mixed precision.
FLOAT16_EVIDENCE = re.compile(
    rb"(?i:fp16|mixed.precision|16-mixed|autocast|gradscaler)|torch\.float16"
    rb"|torch\.half\b"
    rb"|\.half\(\)|torch_dtype\W{1,4}float16|torch\.(?:cuda\.)?amp\b|apex\.amp\b"
    rb"|from\s+apex\s+import\s+amp\b|amp\.initialize\("
    rb"|precision\s*=\s*16\b")
# The same words in a decoded source, and its own prose about half precision: what MC501's
# non-raising forms ask of the file itself. (Prose is not project evidence: allennlp 0.9.0's
# masked_softmax warns that half precision breaks it, in a project that never runs float16.)
FLOAT16_WORDS = re.compile(FLOAT16_EVIDENCE.pattern.decode() + r"|(?i:half.precision)")
SEARCHED_SUFFIXES = frozenset({".py", ".pyi", ".ipynb", ".yaml", ".yml", ".json", ".toml",
                               ".cfg", ".ini", ".sh", ".md", ".rst", ".txt"})
# Past these, the project is not read further and counts as one that may run float16.
MAX_FILES = 50_000
MAX_BYTES_PER_FILE = 1 << 20
MAX_BYTES = 256 << 20


def project_root(path: str) -> Path | None:
    """The nearest folder above `path` holding a project marker; None outside any project."""
    here = Path(os.path.realpath(path)).parent
    for directory in (here, *here.parents):
        for marker in PROJECT_MARKERS:
            if os.path.lexists(directory / marker):
                return directory
    return None


def may_run_float16(path: str) -> bool:
    """False only when `path` is in a project that nowhere mentions float16."""
    root = project_root(path)
    return root is None or _project_mentions_float16(str(root))


@lru_cache(maxsize=64)
def _project_mentions_float16(root: str) -> bool:
    seen = read = 0
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # an unreadable folder says nothing either way
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not skipped_directory(entry.name):
                        stack.append(entry.path)
                    continue
                # Regular files only: a FIFO would block the read, a symlink may leave the
                # project.
                if not entry.is_file(follow_symlinks=False) or os.path.splitext(
                        entry.name)[1].lower() not in SEARCHED_SUFFIXES:
                    continue
                seen += 1
                if seen > MAX_FILES:
                    return True
                with open(entry.path, "rb") as f:
                    data = f.read(MAX_BYTES_PER_FILE)
                if FLOAT16_EVIDENCE.search(data):
                    return True
                read += len(data)
                if read > MAX_BYTES:
                    return True
            except OSError:
                continue
    return False
