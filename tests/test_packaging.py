"""The sdist: built offline with the installed backend, carrying what a release needs."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

import maskcheck

ROOT = Path(__file__).resolve().parents[1]
_SKIP = shutil.ignore_patterns(".git", "*.egg-info", "dist", "build", "__pycache__",
                               ".*_cache", ".hypothesis", ".venv", "*.pyc")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str]:
    build_meta = pytest.importorskip("setuptools.build_meta")
    # A copy: the backend writes maskcheck.egg-info next to pyproject.toml.
    src = tmp_path_factory.mktemp("src") / "maskcheck"
    shutil.copytree(ROOT, src, ignore=_SKIP)
    out = src / "dist"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(src)
        name = build_meta.build_sdist(str(out))
    with tarfile.open(out / name) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
        member = tar.extractfile(f"{name.removesuffix('.tar.gz')}/PKG-INFO")
        assert member is not None
        pkg_info = member.read().decode()
    return names, pkg_info


def test_sdist_carries_the_release_files(sdist: tuple[list[str], str]) -> None:
    names, _ = sdist
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", ".pre-commit-hooks.yaml",
                   "pyproject.toml", "maskcheck/py.typed", "maskcheck/cli.py",
                   "fixtures/expected.json", "fixtures/sdpa_bool_causal.safetensors",
                   "fixtures/captures/sdpa_correct.safetensors"):
        assert needed in names, needed


def test_sdist_has_no_stray_test_or_cache_files(sdist: tuple[list[str], str]) -> None:
    names, _ = sdist
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", ".ci/", ".git"))]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_metadata_license_and_version_from_one_place(sdist: tuple[list[str], str]) -> None:
    _, pkg_info = sdist
    lines = pkg_info.splitlines()
    assert f"Version: {maskcheck.__version__}" in lines
    assert "License-Expression: MIT" in lines and "License-File: LICENSE" in lines
    assert not any(line.startswith("Classifier: License ::") for line in lines)
    assert any(line.startswith("Project-URL: Source, ") for line in lines)
    assert any(line.startswith("Author: ") for line in lines)
