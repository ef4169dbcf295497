"""Option values shared by the commands, checked one way (no Typer here: `check` imports it)."""

from __future__ import annotations

from typing import get_args

from maskcheck.conventions import float_dtype_name
from maskcheck.errors import UsageError
from maskcheck.model import Api

API_CHOICES: tuple[str, ...] = get_args(Api)


def parse_choice(option: str, value: str, choices: tuple[str, ...]) -> str:
    picked = value.strip().lower()
    if picked not in choices:
        raise UsageError(f"{option} takes {'|'.join(choices)}, not {value!r}")
    return picked


def parse_api(value: str, choices: tuple[str, ...] = API_CHOICES) -> str:
    return parse_choice("--api", value, choices)


def parse_format(value: str, choices: tuple[str, ...] = ("text", "json")) -> str:
    return parse_choice("--format", value, choices)


def parse_float_dtype(value: str | None, *, allowed: tuple[str, ...] | None = None) -> str | None:
    """The torch name of the dtype given to --dtype; None when the option was not given."""
    if value is None:
        return None
    name = float_dtype_name(value)
    if name is None or (allowed is not None and name not in allowed):
        names = ", ".join(allowed or ("float16", "bfloat16", "float32", "float64"))
        raise UsageError(f"--dtype takes a float dtype ({names}), not {value!r}")
    return name


DEVICES = ("cpu", "cuda", "mps", "auto")


def parse_device(value: str) -> str:
    """cpu|cuda|cuda:N|mps|auto, checked without torch (whether it exists is torch's to say)."""
    name = value.strip().lower()
    index = name.removeprefix("cuda:")
    if name in DEVICES or (name.startswith("cuda:") and index.isdigit()):
        return name
    raise UsageError(f"--device takes {'|'.join(DEVICES)} (or cuda:N), not {value!r}")
