"""The only exceptions the CLI catches; everything else is a bug (exit 3)."""

from __future__ import annotations

import errno
import os
import sys

_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]} | {
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def one_line(text: str) -> str:
    """`text` for a one-line message: undecodable bytes of a file name as U+FFFD, control
    characters escaped (a name with a newline cannot split its error line or fake another)."""
    return os.fsencode(text).decode("utf-8", "replace").translate(_CONTROL)


class MaskcheckError(Exception):
    """An expected failure with a one-line message for the user."""


class UsageError(MaskcheckError):
    """Bad options or arguments: exit 2. `command` names where `-h` helps (None: the tool)."""

    def __init__(self, message: str, command: str | None = None) -> None:
        super().__init__(message)
        self.command = command


class FileProblem(MaskcheckError):
    """A file (or one tensor in it) could not be read: reported on that file, exit 2."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class OutputError(MaskcheckError):
    """stdout could not be written (a full disk, a quota, an I/O error): exit 2, not a bug."""


# errno values of a failed write to stdout that say something about where it goes, never
# about maskcheck: a full device (`> /dev/full`), a quota, a file size limit, an I/O error, a
# closed pipe.
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EPIPE})


def output_error(e: OSError) -> OutputError:
    return OutputError(f"cannot write the output: {e.strerror or e}")


def discard_stdout() -> None:
    """Point stdout's file descriptor at the null device once it cannot be written.

    What is still buffered in `sys.stdout` then goes nowhere, and the flush of it at
    interpreter exit cannot fail (that would print 'Exception ignored' and exit 120).
    """
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):  # no stdout, or not a file (a test's buffer)
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)
