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

import io
import json
import os
import re
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from maskcheck.config import skipped_directory
from maskcheck.lint.notebook import cell_text

PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
# What says that code may run in float16: the dtype (torch's, not numpy's: a pandas downcast
# is not a model's), `.half()`, an fp16 flag or config key (`--fp16`, `use_fp16`,
# `training.fp16`), autocast, apex's amp (not apex itself: its fused LayerNorm runs in
# float32, and allennlp 0.9.0 names it only in a warning's URL), Lightning's
# `precision=16`/"16-mixed", and prose about mixed precision. Not a GradScaler alone (it scales
# a float32 loss; torch-molecule's MolGPT uses one without autocast), not `bf16-mixed`, not a
# name that merely contains "autocast" (`is_autocast_enabled`, `fp32_autocast_context`).
FLOAT16_EVIDENCE = re.compile(
    rb"(?i:fp16|mixed.precision|(?<!bf)16-mixed|\bautocast\b)|torch\.float16"
    rb"|torch\.half\b"
    rb"|\.half\(\)|torch_dtype\W{1,4}float16|apex\.amp\b"
    rb"|from\s+apex\s+import\s+amp\b|amp\.initialize\("
    rb"|precision\s*=\s*16\b")
# A mention that does not say float16 runs: an autocast (or any line) that names bfloat16 or is
# switched off (`autocast(dtype=torch.bfloat16)`, `autocast(enabled=False)`: ESMFold2 runs
# only so), and torch.float16 listed among other dtypes (`dtype in [torch.float16,
# torch.float32]`, a dtype table), which checks a dtype rather than choosing it.
_NOT_FLOAT16 = re.compile(rb"(?i:bf16|bfloat16)|enabled\s*=\s*False")
_OTHER_DTYPE = re.compile(rb"torch\.(?:float32|float64|double|bfloat16|float)\b")
# A line that is one element of a literal: `    torch.half,`.
_DTYPE_ELEMENT = re.compile(rb"\s*torch\.\w+\s*,?\s*")
_FULL_PRECISION = re.compile(rb"dtype\s*=\s*(?:torch\.)?(?:float32|float64|double|float)\b")
# An import of autocast says nothing until it is used (ESMFold2 imports it to disable it).
_IMPORT = re.compile(rb"\s*(?:from|import)\s")
# How far an autocast call's arguments are read (a call split over lines).
_CALL_SPAN = 400
# Files whose float16 words are not the project's run: tests cast to float16 to test.
_TEST_DIRECTORIES = frozenset({"test", "tests", "testing"})
# The same words in a decoded source, and its own prose about half precision: what MC501's
# non-raising forms ask of the file itself. (Prose is not project evidence: allennlp 0.9.0's
# masked_softmax warns that half precision breaks it, in a project that never runs float16.)
FLOAT16_WORDS = re.compile(FLOAT16_EVIDENCE.pattern + rb"|(?i:half.precision)")
# A source that casts a model or tensor to a half dtype itself (`.half()`, `.bfloat16()`,
# `.to(dtype=torch.bfloat16)`, `torch_dtype=torch.float16`, an autocast to one): MC517 then reads
# scores of a dtype the file does not show as possibly half (lerobot's pi0 `to_bfloat16`, PR
# #710).
# (`th.float16` of `import torch as th` is torch's too: only torch's `.to` and `torch_dtype` take
# a dtype there.)
HALF_CAST = re.compile(r"\.(?:half|bfloat16)\(\)|\.to\((?:dtype\s*=\s*)?\w+\.(?:float16|half"
                       r"|bfloat16)\b|torch_dtype\s*=\s*\w+\.(?:float16|half|bfloat16)\b"
                       # `torch.autocast(device_type=..., dtype=torch.float16)` around its model
                       r"|autocast\((?:[^()]|\([^()]*\))*?dtype\s*=\s*\w+\.(?:float16|half"
                       r"|bfloat16)\b")
_AUTOCAST_OFF = re.compile(rb"enabled\s*=\s*False")
# Any autocast call: it runs matmuls in float16 or bfloat16 whatever names its dtype
# (`dtype=cfg.amp_dtype`, or none: float16 on CUDA), unless it is switched off or asks for
# float32 (which CUDA autocast refuses, disabling itself).
_AUTOCAST_CALL = re.compile(r"\bautocast\(")


# `.to(dtype)` / `.to(dtype=dtype)` of a name, and that name given a half dtype in the same
# source (`def __init__(self, model, dtype=torch.float16)`, `dtype = torch.bfloat16`).
# (also after a device, `.to(self.device, self.dtype)` of a Triton model whose `self.dtype` is
# float16 under its precision parameter)
_CAST_TO_NAME = re.compile(r"\.to\(\s*(?:(?:device\s*=\s*)?[A-Za-z_][\w.]*\s*,\s*)?"
                           r"(?:dtype\s*=\s*)?([A-Za-z_][\w.]*)\s*\)")


# `.to(dtype=getattr(torch, dtype))` (or of torch's alias) in a source that names a half dtype
# as a string (`for dtype in ("float32", "float16")`, a `--dtype float16` choice).
_CAST_TO_NAMED = re.compile(r"\.to\((?:dtype\s*=\s*)?getattr\(\s*\w+\s*,")
_HALF_NAME = re.compile(r"[\"'](?:float16|half|bfloat16)[\"']")


def _half_binding(name: str) -> re.Pattern[str]:
    """`name = torch.float16` as a statement, or `name=torch.float16` as a default in a `def`'s
    signature (not a call's keyword: `torch.zeros(n, dtype=torch.float16)` binds no name)."""
    bound = rf"{re.escape(name)}\s*(?::\s*[\w.]+\s*)?=\s*\w+\.(?:float16|half|bfloat16)\b"
    return re.compile(rf"^[ \t]*{bound}|\bdef\s+\w+\s*\((?:[^()]|\([^()]*\))*?(?<![\w.]){bound}",
                      re.MULTILINE)


# `.to(CONFIG["precision"])`, `.to(dtype=cfg['dtype'])`: the key a cast reads its dtype from.
_CAST_TO_KEY = re.compile(
    r"\.to\(\s*(?:dtype\s*=\s*)?[A-Za-z_][\w.]*\[\s*['\"](\w+)['\"]\s*\]\s*\)")


def _bound_from_key(name: str) -> re.Pattern[str]:
    """`name = CONFIG["key"]` (or `name: T = CONFIG["key"]`) as a statement: the key."""
    return re.compile(
        rf"^[ \t]*{re.escape(name)}\s*(?::[^=\n]+)?=\s*[A-Za-z_][\w.]*\[\s*['\"](\w+)['\"]\s*\]",
        re.MULTILINE)


def _half_entry(key: str) -> re.Pattern[str]:
    """`"key": torch.bfloat16`: a dict literal's entry of a half dtype."""
    return re.compile(rf"['\"]{re.escape(key)}['\"]\s*:\s*\w+\.(?:float16|half|bfloat16)\b")


def casts_half(source: str) -> bool:
    """Whether a source casts a model or tensor to a half dtype itself (`HALF_CAST`,
    `.to(dtype)` of a name bound to one in the source, `.to(getattr(torch, name))` in a source
    that names one as a string) or runs code under an autocast, not
    counting an autocast switched off in its call (`autocast(..., dtype=torch.float16,
    enabled=False)`) or one to a full-precision dtype."""
    data: bytes | None = None
    for match in HALF_CAST.finditer(source):
        if not match.group().startswith("autocast("):
            return True
    for name in {m.group(1) for m in _CAST_TO_NAME.finditer(source)}:
        if _half_binding(name).search(source) or ("." in name and _half_binding(
                name.rsplit(".", 1)[1]).search(source)):
            # (`.to(cfg.dtype)` of a config record's field `dtype: torch.dtype =
            # torch.bfloat16`, held-out 75's pi0 policy)
            return True
        for key in {m.group(1) for m in _bound_from_key(name).finditer(source)}:
            if _half_entry(key).search(source):
                return True  # `dtype = CONFIG["precision"]` of `"precision": torch.bfloat16`
    for key in {m.group(1) for m in _CAST_TO_KEY.finditer(source)}:
        if _half_entry(key).search(source):
            return True  # `.to(CONFIG["precision"])`
    if _CAST_TO_NAMED.search(source) and _HALF_NAME.search(source):
        return True
    for match in _AUTOCAST_CALL.finditer(source):
        if data is None:
            data = source.encode("utf-8", "replace")
        start = len(source[:match.end()].encode("utf-8", "replace"))
        arguments = _call_arguments(data, start)
        if not (_AUTOCAST_OFF.search(arguments) or _FULL_PRECISION.search(arguments)):
            return True
    return False


SEARCHED_SUFFIXES = frozenset({".py", ".pyi", ".ipynb", ".yaml", ".yml", ".json", ".toml",
                               ".cfg", ".ini", ".sh", ".md", ".rst", ".txt"})
# Past these, the project is not read further and counts as one that may run float16.
MAX_FILES = 50_000
MAX_BYTES_PER_FILE = 1 << 20
MAX_NOTEBOOK_BYTES = 64 << 20  # a notebook's JSON, outputs included, read to find its cells
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
    """False only when `path` is in a project that nowhere mentions float16, or whose only
    float16 evidence is Python code (a trainer's autocast, a `.half()`) that imports neither
    this file nor a file that imports it (`MAX_IMPORT_HOPS`): a float16 switch runs the models
    its code reaches, and a sibling tool's switch (convlab's BERT runners beside its float32 DAMD)
    runs no model of this file. A config, script, notebook or document that speaks of float16
    may run any model of the project (fairseq's `--fp16`, mmf's `training.fp16`)."""
    root = project_root(path)
    if root is None:
        return True
    evidence = _project_evidence(str(root))
    if evidence.anywhere:
        return True
    if not evidence.python:
        return False
    return os.path.realpath(path) in _imported_from(str(root), evidence.python)


@dataclass(frozen=True)
class _Evidence:
    """What a project's files say of float16: `anywhere` when a non-Python file (or a project
    too big to read) says it may run, else the Python files that say so, and every Python file
    of the project (what their imports can name)."""

    anywhere: bool
    python: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


@lru_cache(maxsize=64)
def _project_evidence(root: str) -> _Evidence:
    seen = read = 0
    python: list[str] = []
    sources: list[str] = []
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # an unreadable folder says nothing either way
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if not (skipped_directory(entry.name)
                            or entry.name.lower() in _TEST_DIRECTORIES):
                        stack.append(entry.path)
                    continue
                # Regular files only: a FIFO would block the read, a symlink may leave the
                # project.
                if not entry.is_file(follow_symlinks=False) or os.path.splitext(
                        entry.name)[1].lower() not in SEARCHED_SUFFIXES:
                    continue
                seen += 1
                if seen > MAX_FILES:
                    return _Evidence(anywhere=True)
                source = entry.name.endswith((".py", ".pyi"))
                if source:
                    sources.append(os.path.realpath(entry.path))
                if _is_test_file(entry.name):
                    continue
                notebook = entry.name.lower().endswith(".ipynb")
                with open(entry.path, "rb") as f:
                    # (a notebook whole, up to its own cap: cut short, its JSON does not parse
                    # and its outputs would be read, a base64 PNG's chance "fp16" with them,
                    # recohut's 1.1 MB plotting notebook)
                    data = f.read(MAX_NOTEBOOK_BYTES if notebook else MAX_BYTES_PER_FILE)
                if notebook:
                    data = _cell_sources(data)[:MAX_BYTES_PER_FILE]
                # A .py file's comments and docstrings are prose about its own code, often
                # about another dtype ("fp32 to fp16 under AMP" in a bfloat16-only model);
                # so are a notebook's code cells' (recohut's metrics notebook: `# ... it can
                # be float if --fp16`, copied from a metrics library), not its markdown.
                if (notebook and _notebook_says_float16(data)) or (
                        not notebook and mentions_float16(data, prose=not source, python=source)):
                    if not source:
                        return _Evidence(anywhere=True)
                    python.append(sources[-1])
                read += len(data)
                if read > MAX_BYTES:
                    return _Evidence(anywhere=True)
            except OSError:
                continue
    return _Evidence(anywhere=False, python=tuple(python), sources=tuple(sources))


def _cell_sources(data: bytes) -> bytes:
    """A notebook's cells, without their outputs: a base64 PNG in an output holds "fp16" by
    chance (sbi's diagnostics tutorial). A file that is not a notebook's JSON is read whole.
    Each cell starts with a line saying whether it is code (`_CELL_KIND`)."""
    try:
        cells = json.loads(data)["cells"]
        return "\n".join(f"{_CELL_KIND}{cell.get('cell_type') == 'code'}\n" + cell_text(
            cell, number) for number, cell in enumerate(cells, start=1)).encode(
            "utf-8", "replace")
    except (ValueError, TypeError, KeyError, AttributeError):
        return data


# The line `_cell_sources` puts before each cell: a NUL, which no notebook's text holds.
_CELL_KIND = "\x00cell code="


def _notebook_says_float16(data: bytes) -> bool:
    """A notebook's float16 evidence: its markdown and raw cells read as prose (a tutorial's
    "train with --fp16"), its code cells as Python without their comments, as a .py file's."""
    marker = _CELL_KIND.encode()
    if not data.startswith(marker):
        return mentions_float16(data)  # not a notebook's JSON: read whole
    code: list[bytes] = []
    prose: list[bytes] = []
    for part in data.split(b"\n" + marker):
        kind, _, text = part.removeprefix(marker).partition(b"\n")
        (code if kind == b"True" else prose).append(text)
    return mentions_float16(b"\n".join(prose)) or mentions_float16(
        b"\n".join(code), prose=False, python=True)


# The modules a Python source imports, read off its text: `import a.b as c, d`,
# `from ..a import (b, c)`, `importlib.import_module("a.b")`. A line inside a string counts too,
# which can only add reach (and so keep a finding).
_IMPORTS = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)"
                      r"|import[ \t]+([^\n#;]*))", re.MULTILINE)
_IMPORT_MODULE = re.compile(r"import_module\(\s*[\"']([\w.]+)[\"']")


def _imported_names(text: str) -> list[tuple[int, str]]:
    """(level, dotted name) of everything `text` imports; a `from` import gives its module and
    each name under it (`from pkg import mod` imports pkg/mod.py)."""
    names: list[tuple[int, str]] = []
    for match in _IMPORTS.finditer(text):
        dots, module, imported, plain = match.groups()
        if plain is not None:
            names += [(0, part.split()[0]) for part in plain.split(",") if part.split()]
            continue
        level = len(dots)
        names.append((level, module))
        for part in imported.strip("()").split(","):
            words = part.split()
            if words and words[0] != "*":
                names.append((level, f"{module}.{words[0]}" if module else words[0]))
    names += [(0, m.group(1)) for m in _IMPORT_MODULE.finditer(text)]
    return names


# How many imports a float16 switch is followed through: a trainer runs the model it imports and
# that model's layers; further chains wander through a big project's plumbing (registries,
# dataset helpers, utilities) that ties every file to every other. Measured on the 25 MC501
# findings of 541 code bases whose project speaks of float16 only in Python: reached in one or
# two imports, 2 real of 7; in three to seven, 3 real of 18 (a figure from the sets the gate was
# written on, an upper bound).
MAX_IMPORT_HOPS = 2


@lru_cache(maxsize=64)
def _imported_from(root: str, starts: tuple[str, ...]) -> frozenset[str]:
    """The Python files of the project that `starts` import, directly or through one other
    file (`MAX_IMPORT_HOPS`), with the packages' `__init__.py` an import runs. An absolute
    import names every file whose path ends with its dotted name (the project's import roots
    are not known: `src/`, a script's folder), which can only add reach."""
    sources = _project_evidence(root).sources
    by_name: dict[str, list[str]] = {}
    for path in sources:
        parts = os.path.splitext(os.path.relpath(path, root))[0].split(os.sep)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        for i in range(len(parts)):
            by_name.setdefault(".".join(parts[i:]), []).append(path)
    known = set(sources)
    reached = set(starts)
    frontier = list(starts)
    for _ in range(MAX_IMPORT_HOPS):
        following: list[str] = []
        for path in frontier:
            for step in _imports_of(path, root, known, by_name):
                if step not in reached:
                    reached.add(step)
                    following.append(step)
        frontier = following
    return frozenset(reached)


def _imports_of(path: str, root: str, known: set[str],
                by_name: dict[str, list[str]]) -> list[str]:
    """The project files that one file's imports run: each imported module and the
    `__init__.py` of its packages."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_BYTES_PER_FILE).decode("utf-8", "replace")
    except OSError:
        return []
    here = os.path.dirname(path)
    steps: list[str] = []
    for level, name in _imported_names(text):
        if level:
            base = here
            for _ in range(level - 1):
                base = os.path.dirname(base)
            target = os.path.join(base, *name.split(".")) if name else base
            found = [p for p in (target + ".py", os.path.join(target, "__init__.py"))
                     if p in known]
        else:
            found = by_name.get(name, [])
        for module in found:
            # importing a.b.c runs a/__init__.py and a/b/__init__.py first
            steps.append(module)
            package = os.path.dirname(module)
            while len(package) > len(root) and os.path.join(package, "__init__.py") in known:
                steps.append(os.path.join(package, "__init__.py"))
                package = os.path.dirname(package)
    return steps


def mentions_float16(data: bytes, *, prose: bool = True, python: bool = True,
                     pattern: re.Pattern[bytes] = FLOAT16_EVIDENCE) -> bool:
    """Whether `data` says float16 runs: a `pattern` match that is not about bfloat16, not a
    disabled autocast, not one dtype in a list of them, (in `python` source) not the dtype's
    name in quotes, and (without `prose`, for Python source read as a project's) not in a
    comment or docstring."""
    prose_spans: list[tuple[int, int]] | None = None
    for match in pattern.finditer(data):
        if not _says_float16(data, match) or (python and _quoted_dtype_name(data, match)):
            continue
        if prose:
            return True
        if prose_spans is None:
            prose_spans = _prose_spans(data)
        if not any(start <= match.start() < end for start, end in prose_spans):
            return True
    return False


def _says_float16(data: bytes, match: re.Match[bytes]) -> bool:
    line_start = data.rfind(b"\n", 0, match.start()) + 1
    line_end = data.find(b"\n", match.end())
    context = data[line_start:len(data) if line_end < 0 else line_end]
    if match.group().lower() == b"autocast":
        # The call's arguments, when it is called: `torch.autocast(\n  "cuda",\n  dtype=...)`.
        opened = re.match(rb"\s*\(", data[match.end():match.end() + 8])
        if opened:
            context += _call_arguments(data, match.end() + opened.end())
            if _FULL_PRECISION.search(context):
                return False  # an autocast to float32 disables itself
    if _NOT_FLOAT16.search(context) or _IMPORT.match(context):
        return False
    if match.group() not in {b"torch.float16", b"torch.half"}:
        return True
    if _OTHER_DTYPE.search(context):
        return False
    # One element of a literal written a dtype per line (torchao's `if precision not in [\n
    # torch.float32,\n torch.float16,\n torch.bfloat16,\n]:`): a list of dtypes, checked
    # against rather than chosen, when a neighbouring line is another dtype's element.
    if not _DTYPE_ELEMENT.fullmatch(context):
        return True
    before = data.rfind(b"\n", 0, max(line_start - 1, 0)) + 1
    after = len(data) if line_end < 0 else data.find(b"\n", line_end + 1)
    neighbours = (data[before:max(line_start - 1, before)],
                  data[line_end + 1:len(data) if after < 0 else after] if line_end >= 0 else b"")
    return not any(_DTYPE_ELEMENT.fullmatch(line) and _OTHER_DTYPE.search(line)
                   for line in neighbours)


def _quoted_dtype_name(data: bytes, match: re.Match[bytes]) -> bool:
    """`"torch.float16"` in Python source: a dtype's name as a string (a key of a dtype-size
    table, `str(t.dtype) == "torch.float16"`), which names the dtype without choosing it."""
    return match.group() == b"torch.float16" and data[match.start() - 1:match.start()] in {
        b'"', b"'"} and data[match.end():match.end() + 1] in {b'"', b"'"}


def _call_arguments(data: bytes, start: int) -> bytes:
    depth = 1
    for i in range(start, min(len(data), start + _CALL_SPAN)):
        depth += {40: 1, 41: -1}.get(data[i], 0)  # ( and )
        if depth == 0:
            return data[start:i]
    return data[start:start + _CALL_SPAN]


def _prose_spans(data: bytes) -> list[tuple[int, int]]:
    """Byte spans of the comments and docstrings of a Python source; none where it does not
    tokenize (then every mention counts, as in any other file)."""
    line_offsets = [0]
    for line in data.splitlines(keepends=True):
        line_offsets.append(line_offsets[-1] + len(line))

    def offset(row: int, col: int) -> int:
        # tokenize counts columns in characters; lines here are bytes.
        start = line_offsets[row - 1]
        line = data[start:line_offsets[row]] if row < len(line_offsets) else b""
        return start + len(line.decode("utf-8", "replace")[:col].encode("utf-8", "replace"))

    spans: list[tuple[int, int]] = []
    statement_start = True
    try:
        tokens = list(tokenize.tokenize(io.BytesIO(data).readline))
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, ValueError):
        return spans
    for i, token in enumerate(tokens):
        if token.type == tokenize.COMMENT:
            spans.append((offset(*token.start), offset(*token.end)))
        elif token.type == tokenize.STRING and statement_start:
            following = next((t for t in tokens[i + 1:] if t.type not in (
                tokenize.NL, tokenize.COMMENT)), None)
            if following is None or following.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                spans.append((offset(*token.start), offset(*token.end)))
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            statement_start = token.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                             tokenize.ENCODING)
    return spans


def _is_test_file(name: str) -> bool:
    return name.startswith("test_") or name.endswith(("_test.py", "_tests.py")) or (
        name == "conftest.py")
