"""`[tool.maskcheck]` in pyproject.toml, found upward from the checked files."""

from __future__ import annotations

import fnmatch
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from maskcheck.errors import UsageError
from maskcheck.model import Api, Severity
from maskcheck.selection import expand, parse_severity

KEYS = ("select", "ignore", "extend-select", "per-file-ignores", "fail-on", "exclude", "api")
DEFAULT_EXCLUDE = (".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "__pycache__",
                   ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules", "build",
                   "dist", "site-packages", ".eggs")


def skipped_directory(name: str) -> bool:
    """A folder no walk enters: tool caches, virtual environments, build output, egg-info."""
    return name in DEFAULT_EXCLUDE or name.endswith(".egg-info")


class ConfigError(UsageError):
    pass


@dataclass(frozen=True)
class Config:
    path: Path | None = None  # the pyproject.toml it came from
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    fail_on: Severity | None = None
    exclude: tuple[str, ...] = ()
    api: str | None = None

    @property
    def root(self) -> Path:
        return self.path.parent if self.path is not None else Path.cwd()

    def relative(self, file: Path) -> str:
        try:
            return real(file).relative_to(real(self.root)).as_posix()
        except ValueError:
            return file.as_posix()

    def is_excluded(self, file: Path) -> bool:
        if not self.exclude:  # no realpath per file (O(depth) each) when there is nothing to match
            return False
        return self.excluded_relative(self.relative(file))

    def excluded_relative(self, rel: str) -> bool:
        """Whether a path relative to the config's directory (posix) matches `exclude`."""
        parts = rel.split("/")
        return any(
            fnmatch.fnmatch(rel, pat) or any(fnmatch.fnmatch(p, pat) for p in parts)
            for pat in self.exclude
        )

    def ignored_for(self, file: Path) -> tuple[str, ...]:
        rel = self.relative(file)
        name = file.name
        out: list[str] = []
        for pattern, codes in self.per_file_ignores:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(name, pattern):
                out.extend(codes)
        return tuple(out)


def real(path: Path) -> Path:
    """`path` with symlinks resolved as far as they go. Unlike `Path.resolve()` on Python
    3.11 (RuntimeError), a symlink loop (`ln -s loop.py loop.py`) does not raise: it is left
    as it is, and reported when the file is read."""
    return Path(os.path.realpath(path))


def _mode(path: Path) -> int:
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):  # Path.is_dir() raises PermissionError on Python 3.11
        return 0


def is_directory(path: Path) -> bool:
    """`Path.is_dir()` that is False, not an exception, where a directory cannot be searched."""
    return stat.S_ISDIR(_mode(path))


def is_regular_file(path: Path) -> bool:
    return stat.S_ISREG(_mode(path))


# A pyproject.toml bigger than this is not a project file.
MAX_PYPROJECT_BYTES = 4 << 20


def _where(path: Path, key: str) -> str:
    return f"{path}: [tool.maskcheck] {key}"


def _code_list(path: Path, key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{_where(path, key)}: expected a list of rule codes, "
                          f"got {type(value).__name__} {value!r}")
    for v in value:
        expand(v, origin=f"{path} [tool.maskcheck] {key}")
    return tuple(value)


def _str_list(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{_where(path, key)}: expected a list of strings, got {value!r}")
    return tuple(value)


def parse(table: object, path: Path) -> Config:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.maskcheck] must be a table")
    for key in table:
        if key not in KEYS:
            hint = f" (did you mean {key.replace('_', '-')!r}?)" if "_" in key else ""
            raise ConfigError(f"{_where(path, key)}: unknown key{hint}; known keys: "
                              f"{', '.join(KEYS)}")
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{_where(path, 'per-file-ignores')}: expected a table of "
                          f"glob = [codes], got {pfi!r}")
    per_file = tuple(
        (str(glob), _code_list(path, f"per-file-ignores.{glob!r}", codes))
        for glob, codes in pfi.items()
    )
    fail_on = table.get("fail-on")
    if fail_on is not None and not isinstance(fail_on, str):
        raise ConfigError(f"{_where(path, 'fail-on')}: expected error, warning or info, "
                          f"got {fail_on!r}")
    api = table.get("api")
    if api is not None and (not isinstance(api, str) or api.lower() not in get_args(Api)):
        raise ConfigError(f"{_where(path, 'api')}: expected one of "
                          f"{'|'.join(get_args(Api))}, got {api!r}")
    return Config(
        path=path,
        select=_code_list(path, "select", table["select"]) if "select" in table else None,
        ignore=_code_list(path, "ignore", table.get("ignore", [])),
        extend_select=_code_list(path, "extend-select", table.get("extend-select", [])),
        per_file_ignores=per_file,
        fail_on=None if fail_on is None else parse_severity(
            fail_on, origin=_where(path, "fail-on")),
        exclude=_str_list(path, "exclude", table.get("exclude", [])),
        api=None if api is None else api.lower(),
    )


def load(pyproject: Path) -> Config | None:
    """The [tool.maskcheck] table of one pyproject.toml, or None when it has none."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    from maskcheck.errors import FileProblem
    from maskcheck.lint.reading import read_regular

    try:
        raw = read_regular(str(pyproject), limit=MAX_PYPROJECT_BYTES, what="TOML file")
    except FileProblem as e:
        raise ConfigError(f"{pyproject}: could not read: {e.problem}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{pyproject}: not valid TOML: not UTF-8 (byte 0x{raw[e.start]:02x} "
                          f"at offset {e.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{pyproject}: not valid TOML: {e}") from None
    except (RecursionError, MemoryError):  # tomllib recurses into nested arrays and tables
        raise ConfigError(f"{pyproject}: not valid TOML: nested too deeply") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict) or "maskcheck" not in tool:
        return None
    return parse(tool["maskcheck"], pyproject)


def discover(start: Path) -> Config:
    """The nearest pyproject.toml holding [tool.maskcheck], from `start` up to the root."""
    here = real(start)
    if not is_directory(here):
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if is_regular_file(candidate):
            found = load(candidate)
            if found is not None:
                return found
    return Config()


def common_start(paths: list[Path]) -> Path:
    import os

    if not paths:
        return Path.cwd()
    resolved = [str(real(p)) for p in paths]
    return Path(os.path.commonpath(resolved))
