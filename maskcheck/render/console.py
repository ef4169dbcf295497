"""The one place that builds a Rich Console for maskcheck's output."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from rich.console import Console, RenderableType
from rich.text import Text

from maskcheck.errors import UsageError


def no_color_requested(env: Mapping[str, str] | None = None) -> bool:
    """NO_COLOR (https://no-color.org): present and not empty disables colour."""
    env = os.environ if env is None else env
    return bool(env.get("NO_COLOR", ""))


def make_console(
    *,
    file: IO[str] | None = None,
    width: int | None = None,
    record: bool = False,
    stderr: bool = False,
    env: Mapping[str, str] | None = None,
) -> Console:
    """stdout (or stderr) Console: colour only on a terminal and without NO_COLOR.

    Rich already sends no ANSI codes to a file or pipe; NO_COLOR goes further than Rich's own
    handling (which keeps bold and dim) and drops every escape code.
    """
    plain = no_color_requested(env)
    return Console(
        file=file if file is not None else (sys.stderr if stderr else sys.stdout),
        width=width,
        record=record,
        color_system=None if plain else "auto",
        no_color=plain,
        highlight=False,
        emoji=False,
        markup=False,
        soft_wrap=False,
        stderr=stderr and file is None,
    )


def recording_console(width: int) -> Console:
    """An off-screen, full-colour Console whose output is exported with --svg/--html."""
    import io

    return Console(
        file=io.StringIO(),
        width=width,
        record=True,
        force_terminal=True,
        color_system="truecolor",
        highlight=False,
        emoji=False,
        markup=False,
    )


def progress_console() -> Console | None:
    """A stderr Console for a spinner, or None when stderr is not an interactive terminal."""
    console = make_console(stderr=True)
    return console if console.is_terminal and not console.is_dumb_terminal else None


def unicode_ok(console: Console) -> bool:
    return console.encoding.lower().replace("-", "").startswith("utf")


def print_parts(console: Console, renderable: RenderableType | Sequence[RenderableType]) -> None:
    """Print a renderable or a sequence of them; a Text marked no_wrap with overflow="ignore"
    is printed whole on one line whatever the width (a path with its error, a file header)."""
    parts = (renderable if isinstance(renderable, Sequence) and not isinstance(renderable, str)
             else [renderable])
    for part in parts:
        one_line = isinstance(part, Text) and part.no_wrap and part.overflow == "ignore"
        console.print(part, soft_wrap=one_line, crop=not one_line)


def print_clean(console: Console, renderable: RenderableType | Sequence[RenderableType]) -> None:
    """`print_parts` without the trailing blanks Rich pads lines with (they litter pipes and
    diffs). Nothing is recorded: give a `recording_console` to `print_parts` instead."""
    with console.capture() as captured:
        print_parts(console, renderable)
    lines = captured.get().splitlines()
    write_safely(console.file, "".join(line.rstrip() + "\n" for line in lines))


def save_recording(
    renderable: RenderableType | Sequence[RenderableType], *, width: int,
    svg: Path | None, html: Path | None, title: str,
) -> None:
    """Render once more on a recording console and save it for --svg / --html."""
    if svg is None and html is None:
        return
    recorder = recording_console(width)
    print_parts(recorder, renderable)
    if svg is not None:
        _write_output(str(svg), recorder.export_svg(title=title, clear=False))
    if html is not None:
        _write_output(str(html), recorder.export_html(clear=False))


def _write_output(path: str, text: str) -> None:
    # The path comes from here, not from the OSError: a failed flush (ENOSPC on /dev/full)
    # carries no file name.
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def write_safely(file: IO[str], text: str) -> None:
    """Write, replacing what the stream's encoding cannot hold (an ASCII pipe) with '?'."""
    try:
        file.write(text)
    except UnicodeEncodeError:
        encoding = getattr(file, "encoding", None) or "ascii"
        file.write(text.encode(encoding, "replace").decode(encoding))
    file.flush()


# Below this much data the work takes well under a second: no bar.
PROGRESS_MIN_BYTES = 256 << 20


@contextmanager
def progress_bar(*, enabled: bool = True) -> Iterator[Callable[[int, int], None] | None]:
    """A byte-count progress bar on stderr, shown only on a terminal and for big inputs."""
    console = progress_console() if enabled else None
    if console is None:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    bar = Progress("inspecting", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn(), console=console, transient=True)
    task = bar.add_task("inspect", total=None, start=False)
    started = False

    def update(done: int, total: int) -> None:
        nonlocal started
        if total < PROGRESS_MIN_BYTES:
            return
        if not started:
            bar.start()
            bar.start_task(task)
            started = True
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if started:
            bar.stop()
