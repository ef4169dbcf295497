"""The only exceptions the CLI catches; everything else is a bug (exit 3)."""

from __future__ import annotations

import os

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
