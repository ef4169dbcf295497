"""A file opened read-only, read with bounded positional reads (pread), never mapped.

Why not mmap: a mapped file that another process truncates while it is read kills the reader
with SIGBUS (nothing printed, exit 135; a worker of --jobs takes the pool down with it). A
pread past the new end just returns fewer bytes, which is an error line for that file.
"""

from __future__ import annotations

import errno
import os
import stat

from maskcheck.errors import FileProblem


def display(path: str) -> str:
    """A path as printable text: undecodable bytes of a non-UTF-8 name shown as U+FFFD."""
    return os.fsencode(path).decode("utf-8", "replace")


def kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def os_error_problem(e: OSError) -> str:
    if e.errno == errno.ENOENT:
        return "no such file or directory"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied (cannot open for reading)"
    if e.errno == errno.ELOOP:
        return "symlink loop (too many levels of symbolic links)"
    if e.errno == errno.EISDIR:
        return "is a directory, not a file"
    if e.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return f"cannot read: {e.strerror or e}"


class RawFile:
    """Read-only access to a regular file. Nothing here can write to it."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        try:
            # O_NONBLOCK: opening a named pipe must not hang; no effect on regular files.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as e:
            raise FileProblem(path, os_error_problem(e)) from None
        except ValueError:
            raise FileProblem(path, "invalid path (contains a NUL byte)") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            kind = kind_of(st.st_mode)
            raise FileProblem(path, f"is {kind}, not a {what} file" if kind.startswith("a ")
                              else f"{kind}, not a {what} file")
        self.fd: int | None = fd
        self.size = st.st_size

    def read(self, offset: int, length: int) -> memoryview:
        """`length` bytes at `offset` (a read-only copy; memory is what the caller asks for).

        Raises FileProblem when the file has fewer bytes (it shrank after it was opened).
        """
        if length <= 0:
            return memoryview(b"")
        if offset < 0 or offset + length > self.size:
            raise FileProblem(self.path, f"read of {length} bytes at byte {offset} is past the "
                                         f"end of the file ({self.size} bytes)")
        if self.fd is None:
            raise FileProblem(self.path, "read after the file was closed")
        buf = bytearray(length)
        view = memoryview(buf)
        got = 0
        while got < length:
            try:
                n = os.preadv(self.fd, [view[got:]], offset + got)
            except OSError as e:
                raise FileProblem(self.path, os_error_problem(e)) from None
            if n <= 0:
                raise FileProblem(self.path, _shrunk(offset + got, self.size, self._now()))
            got += n
        return view.toreadonly()

    def _now(self) -> int | None:
        try:
            return os.fstat(self.fd).st_size if self.fd is not None else None
        except OSError:
            return None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _shrunk(at: int, opened: int, now: int | None) -> str:
    size = f"now {now} bytes" if now is not None else "now shorter"
    return (f"file ends at byte {at} but had {opened} bytes when opened ({size}: it was "
            "truncated or replaced while being read)")


def quote(name: str, limit: int = 60) -> str:
    """A tensor name for a one-line message: escaped (no newlines from a hostile file), short."""
    if len(name) > limit:
        return repr(name[:limit])[:-1] + "...'"
    return repr(name)


def sniff(head: bytes) -> str | None:
    """What a file that is not what its suffix says looks like, from its first bytes."""
    stripped = head.lstrip()[:64].lower()
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "a zip archive (torch.save or .npz?)"
    if head.startswith(b"\x93NUMPY"):
        return "a .npy file"
    if head[8:10] in (b'{"', b"{}") and int.from_bytes(head[:8], "little") < 1 << 27:
        return "a safetensors file (rename it to .safetensors)"
    if stripped.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml", b"<")):
        return "HTML/XML text (a saved web page or error page?)"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "a Python pickle"
    if stripped.startswith((b"{", b"[")):
        return "JSON text"
    if head.startswith(b"\x1f\x8b"):
        return "gzip data"
    if head.startswith(b"version https://git-lfs"):
        return "a Git LFS pointer (run git lfs pull)"
    return None


def with_hint(problem: str, head: bytes) -> str:
    looks = sniff(head)
    return f"{problem}; the file looks like {looks}" if looks else problem
