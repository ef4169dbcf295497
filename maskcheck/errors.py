"""The only exceptions the CLI catches; everything else is a bug (exit 3)."""

from __future__ import annotations


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
