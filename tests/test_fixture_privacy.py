"""Committed fixtures carry no absolute path of the machine that generated them."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The hostile set names /tmp/maskcheck-pwned on purpose: the marker a malicious pickle would
# create (tests assert it never appears).
MARKER = b"/tmp/maskcheck-pwned"
MACHINE_PATH = re.compile(rb"(?<![\w.])/(?:work|home|root|Users|tmp|var|opt|mnt)/[\w.+-]")


def test_no_fixture_records_an_absolute_path() -> None:
    found = []
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if path.is_file():
            data = path.read_bytes().replace(MARKER, b"")
            if MACHINE_PATH.search(data):
                found.append(str(path.relative_to(ROOT)))
    assert found == []


def test_capture_records_the_call_site_relative(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from safetensors import safe_open

    import maskcheck

    monkeypatch.chdir(tmp_path)  # this test file is outside the working directory
    q = torch.randn(1, 2, 3, 4)
    with maskcheck.capture(tmp_path / "call.safetensors"):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    with safe_open(str(tmp_path / "call.safetensors"), framework="pt") as f:
        site = (f.metadata() or {})["maskcheck.call_site"]
    assert re.fullmatch(rf"{re.escape(Path(__file__).name)}:\d+", site), site
    assert not os.path.isabs(site)
