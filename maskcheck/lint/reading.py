"""One reading discipline for every file `check` opens (sources, notebooks, pyproject.toml).

Regular files only (a named pipe, socket or device is refused from its `stat`, never opened
for reading), a size limit checked before reading, bounded `pread` blocks (no memory map, so a
file truncated by another process is an error line, never SIGBUS), and a file whose size
changes while it is read is refused. Every problem is a `FileProblem` with a one-line reason.
Standard library only: this is the pre-commit path.
"""

from __future__ import annotations

import errno
import os
import stat

from maskcheck.errors import FileProblem
from maskcheck.io.rawfile import kind_of, os_error_problem

NOTEBOOK_SUFFIXES = frozenset({".ipynb"})
# Far above any hand-written or generated module (transformers' biggest is under 0.5 MiB) and
# far below what would exhaust memory while parsing; notebooks carry their outputs (images).
MAX_SOURCE_BYTES = 16 << 20
MAX_NOTEBOOK_BYTES = 64 << 20
READ_BLOCK = 1 << 20


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _not_regular(mode: int, what: str) -> str:
    kind = kind_of(mode)
    article = "is " if kind.startswith("a ") else ""
    return f"{article}{kind}, not a {what}: not read"


def _stat_problem(path: str, e: OSError) -> str:
    if e.errno == errno.ENOENT and os.path.islink(path):
        return "broken symlink (its target does not exist)"
    return os_error_problem(e)


def regular_file_problem(path: str, *, what: str) -> str | None:
    """Why `path` is not a regular file that can be read (from `stat` only), or None."""
    try:
        st = os.stat(path)
    except OSError as e:
        return _stat_problem(path, e)
    except ValueError:
        return "invalid path (contains a NUL byte)"
    if stat.S_ISDIR(st.st_mode):
        return f"is a directory, not a {what}"
    if not stat.S_ISREG(st.st_mode):
        return _not_regular(st.st_mode, what)
    return None


def _pread(fd: int, length: int, offset: int) -> bytes:
    return os.pread(fd, length, offset)


def read_regular(path: str, *, limit: int, what: str) -> bytes:
    """All bytes of a regular file of at most `limit` bytes. Raises FileProblem.

    The file is checked with `stat` before it is opened (so a FIFO never blocks and a device
    is never read), opened O_NONBLOCK (a FIFO swapped in after the check does not block either)
    and checked again with `fstat`; then read in blocks with `pread`, one byte past the size
    `fstat` gave, to see a file that grows or shrinks meanwhile.
    """
    problem = regular_file_problem(path, what=what)
    if problem is not None:
        raise FileProblem(path, problem)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise FileProblem(path, os_error_problem(e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(path, _not_regular(st.st_mode, what))
        size = st.st_size
        if size > limit:
            raise FileProblem(path, f"{_mib(size)}, over the {_mib(limit)} limit for a {what}: "
                                    "not read")
        chunks: list[bytes] = []
        got = 0
        while got <= size:
            asked = min(READ_BLOCK, size + 1 - got)
            try:
                block = _pread(fd, asked, got)
            except OSError as e:
                raise FileProblem(path, f"read failed at byte {got}: {e.strerror or e}") from None
            chunks.append(block)
            got += len(block)
            if len(block) < asked:  # a short read of a regular file: its end
                break
        if got != size:
            change = "shrank" if got < size else "grew"
            raise FileProblem(path, f"file {change} while it was read ({size} bytes when "
                                    f"opened, {got}{'+' if got > size else ''} read)")
        return b"".join(chunks)
    finally:
        os.close(fd)


def is_notebook(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in NOTEBOOK_SUFFIXES


def source_kind(path: str) -> str:
    return "notebook" if is_notebook(path) else "Python source"


def source_limit(path: str) -> int:
    return MAX_NOTEBOOK_BYTES if is_notebook(path) else MAX_SOURCE_BYTES
