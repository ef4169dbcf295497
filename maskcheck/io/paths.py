"""Which files to check: explicit paths as given, directories walked for mask suffixes."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

from maskcheck.io.rawfile import display, kind_of, os_error_problem

SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".npy", ".npz")
TORCH_SUFFIXES = (".pt", ".pth", ".bin")
_LISTED = ", ".join(SUFFIXES)


def suffix_of(path: str) -> str:
    return os.path.splitext(path.rstrip("/" + os.sep))[1].lower()


def expand_paths(paths: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(mask files to check, (path, problem) for paths that cannot be read). Never raises."""
    files: list[str] = []
    problems: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path in paths:
        found, bad = _expand_one(path)
        for f in found:
            if f not in seen:
                seen.add(f)
                files.append(f)
        problems.extend(bad)
    return files, problems


def _stat_problem(path: str, e: OSError) -> str:
    if e.errno == errno.ENOENT and os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            return "broken symlink"
        return f"broken symlink (points to {display(target)!r}, which does not exist)"
    return os_error_problem(e)


def _readable(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        return os_error_problem(e)
    os.close(fd)
    return None


def _expand_one(path: str) -> tuple[list[str], list[tuple[str, str]]]:
    try:
        st = os.stat(path)
    except OSError as e:
        return [], [(path, _stat_problem(path, e))]
    except ValueError:  # an embedded NUL byte
        return [], [(path, "invalid path (contains a NUL byte)")]
    if stat.S_ISDIR(st.st_mode):
        files, problems, empty_like_files = _walk(path, st)
        if not files and not problems:
            if suffix_of(path) in SUFFIXES:
                problems.append((path, f"is a directory, not a {suffix_of(path)} file (and it "
                                       "holds no mask files)"))
            else:
                problems.append((path, f"directory holds no mask files ({_LISTED})"))
        return files, problems + empty_like_files
    if not stat.S_ISREG(st.st_mode):
        return [], [(path, f"is {kind_of(st.st_mode)}, not a mask file")]
    why = _readable(path)
    return ([], [(path, why)]) if why else ([path], [])


def _walk(root: str, root_st: os.stat_result,
          ) -> tuple[list[str], list[tuple[str, str]], list[tuple[str, str]]]:
    """Depth-first, symlinks followed, each directory (device, inode) entered once."""
    files: list[str] = []
    problems: list[tuple[str, str]] = []
    named_like_files: list[str] = []
    visited = {(root_st.st_dev, root_st.st_ino)}
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            problems.append((directory, f"cannot list directory: {os_error_problem(e)}"))
            continue
        subdirs: list[str] = []
        for entry in entries:
            maskish = suffix_of(entry.name) in SUFFIXES
            try:
                st = os.stat(entry.path)
            except OSError as e:
                if maskish:
                    problems.append((entry.path, _stat_problem(entry.path, e)))
                continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key not in visited:  # a symlink back up the tree is entered only once
                    visited.add(key)
                    subdirs.append(entry.path)
                    if maskish:
                        named_like_files.append(entry.path)
            elif maskish:
                if not stat.S_ISREG(st.st_mode):
                    problems.append((entry.path, f"is {kind_of(st.st_mode)}, not a mask file"))
                elif (why := _readable(entry.path)) is not None:
                    problems.append((entry.path, why))
                else:
                    files.append(entry.path)
        stack.extend(reversed(subdirs))
    files.sort()
    empty = [
        (d, f"is a directory, not a {suffix_of(d)} file (and it holds no mask files)")
        for d in named_like_files
        if not any(f.startswith(d + os.sep) for f in files)
    ]
    return files, problems, empty
