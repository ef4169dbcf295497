"""Option values are checked in one place, the same way for every command."""

from __future__ import annotations

import re

import pytest

from maskcheck.commands.options import parse_api, parse_float_dtype, parse_format
from maskcheck.errors import UsageError


@pytest.mark.parametrize(("typed", "name"), [
    ("fp16", "float16"), ("torch.half", "float16"), ("BF16", "bfloat16"),
    ("float", "float32"), ("double", "float64"), ("fp8", "float8_e4m3fn"),
])
def test_dtype_aliases(typed: str, name: str) -> None:
    assert parse_float_dtype(typed) == name


def test_dtype_outside_what_a_command_runs_is_a_usage_error() -> None:
    assert parse_float_dtype(None) is None
    with pytest.raises(UsageError, match="--dtype"):
        parse_float_dtype("fp8", allowed=("float16", "float32"))
    with pytest.raises(UsageError, match="int64"):
        parse_float_dtype("int64")


def test_choices() -> None:
    assert parse_api(" SDPA ") == "sdpa"
    assert parse_format("JSON") == "json"
    with pytest.raises(UsageError, match="--api takes mha"):
        parse_api("xformers")
    with pytest.raises(UsageError, match=re.escape("--format takes text|json|sarif, not ")):
        parse_format("xml", ("text", "json", "sarif"))
