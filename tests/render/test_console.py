"""The Console factory: NO_COLOR, non-terminals, width, recording."""

from __future__ import annotations

import io

from rich.text import Text

from maskcheck.render.console import (
    make_console,
    no_color_requested,
    print_clean,
    recording_console,
    unicode_ok,
)


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_color_means_present_and_not_empty() -> None:
    assert no_color_requested({"NO_COLOR": "1"})
    assert not no_color_requested({"NO_COLOR": ""})
    assert not no_color_requested({})


def test_no_color_drops_every_escape_code_even_on_a_terminal() -> None:
    out = FakeTTY()
    console = make_console(file=out, width=60, env={"NO_COLOR": "1"})
    console.print(Text("error", style="bold red"), Text(" dim", style="dim"))
    assert out.getvalue() == "error  dim\n"


def test_terminal_gets_colour_and_pipe_does_not() -> None:
    tty = FakeTTY()
    make_console(file=tty, width=60, env={}).print(Text("error", style="bold red"))
    assert "\x1b[" in tty.getvalue()
    pipe = io.StringIO()
    make_console(file=pipe, width=60, env={}).print(Text("error", style="bold red"))
    assert pipe.getvalue() == "error\n"


def test_width_override() -> None:
    assert make_console(file=io.StringIO(), width=61, env={}).width == 61


def test_print_clean_strips_trailing_blanks() -> None:
    out = io.StringIO()
    console = make_console(file=out, width=40, env={})
    print_clean(console, Text("a   \nb"))
    assert out.getvalue() == "a\nb\n"


def test_recording_console_exports_styled_svg() -> None:
    rec = recording_console(50)
    rec.print(Text("MC002", style="bold red"))
    assert "MC002" in rec.export_text(clear=False)
    svg = rec.export_svg(title="maskcheck")
    assert svg.startswith("<svg") and "MC002" in svg


def test_unicode_detection() -> None:
    assert unicode_ok(make_console(file=io.StringIO(), env={}))
    latin = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    assert not unicode_ok(make_console(file=latin, env={}))


def test_ascii_stream_gets_replacement_not_a_crash() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    print_clean(make_console(file=stream, width=40, env={}), Text("x ≥ 1"))
    stream.flush()
    assert raw.getvalue() == b"x ? 1\n"


def test_print_clean_takes_a_plain_string_whole() -> None:
    out = io.StringIO()
    print_clean(make_console(file=out, width=40, env={}), "abc")
    assert out.getvalue() == "abc\n"
