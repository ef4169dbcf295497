"""The hooks through the real pre-commit framework (`try-repo`), against a temporary repo.

try-repo clones the hook repository's HEAD plus changes to tracked files only, so the test
commits a copy of the current tree (package, pyproject, manifest) to a scratch repository and
points try-repo at that. The hook's virtualenv installs maskcheck with its core dependencies
(no torch); building it takes tens of seconds, so each scenario runs once per module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
BAD = (
    "import torch\n\n\n"
    "def attend(scores, mask, n):\n"
    "    scores = scores.masked_fill(mask, -1e9)\n"
    '    causal = torch.triu(torch.full((n, n), float("-inf")), diagonal=0)\n'
    "    return scores + causal\n"
)
FIXED = BAD.replace("-1e9", "torch.finfo(scores.dtype).min").replace("diagonal=0", "diagonal=1")
# Only a warning (MC501): pre-commit prints nothing for a passing hook, so this must fail.
WARNING_ONLY = "def attend(scores, mask):\n    return scores.masked_fill(mask, -1e9)\n"
NOTEBOOK = json.dumps({
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# attention\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["!pip install torch\n", "s = scores.masked_fill(mask, -1e9)"]},
    ],
    "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
})

pytestmark = pytest.mark.skipif(not PRE_COMMIT.exists(), reason="pre-commit not installed")


def _git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("hook-repo")
    shutil.copytree(ROOT / "maskcheck", repo / "maskcheck",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copy2(ROOT / name, repo / name)
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "snapshot", cwd=repo)
    return repo


def _try_repo(hook_repo: Path, project: Path, hook: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRE_COMMIT")}
    return subprocess.run(
        [str(PRE_COMMIT), "try-repo", str(hook_repo), hook, "--all-files"],
        cwd=project, capture_output=True, text=True, timeout=600, env=env,
    )


def _project(tmp_path_factory: pytest.TempPathFactory, source: str,
             **others: str) -> Path:
    project = tmp_path_factory.mktemp("project")
    (project / "model.py").write_text(source)
    # A project that trains in float16, where -1e9 raises (MC501 reads the project for it).
    (project / "train.sh").write_text("python train.py --fp16\n")
    for name, text in others.items():
        (project / name.replace("_", ".")).write_text(text)
    _git("init", "-q", cwd=project)
    _git("add", "-A", cwd=project)
    return project


@pytest.fixture(scope="module")
def bad_run(
    hook_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess[str]:
    return _try_repo(hook_repo, _project(tmp_path_factory, BAD), "maskcheck")


@pytest.fixture(scope="module")
def fixed_run(
    hook_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess[str]:
    return _try_repo(hook_repo, _project(tmp_path_factory, FIXED), "maskcheck")


@pytest.fixture(scope="module")
def warning_run(
    hook_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess[str]:
    project = _project(tmp_path_factory, WARNING_ONLY, nb_ipynb=NOTEBOOK)
    return _try_repo(hook_repo, project, "maskcheck")


def test_manifest_validates() -> None:
    r = subprocess.run([str(PRE_COMMIT), "validate-manifest", str(ROOT / ".pre-commit-hooks.yaml")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_first_hook_lints_python_sources() -> None:
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    first = text.split("-   id:")[1]
    assert first.split()[0] == "maskcheck"
    assert "types_or: [python, pyi, jupyter]" in first and "entry: maskcheck check" in first
    assert "minimum_pre_commit_version" in first


def test_bad_file_fails_the_hook_naming_the_codes(
    bad_run: subprocess.CompletedProcess[str],
) -> None:
    out = bad_run.stdout + bad_run.stderr
    assert bad_run.returncode == 1, out
    assert "Failed" in out
    assert "model.py:5:" in out and "MC501" in out
    assert "model.py:6:" in out and "MC503" in out


def test_fixed_file_passes_the_hook(fixed_run: subprocess.CompletedProcess[str]) -> None:
    out = fixed_run.stdout + fixed_run.stderr
    assert fixed_run.returncode == 0, out
    assert "Passed" in out


def test_a_warning_fails_the_hook_so_the_user_sees_it(
    warning_run: subprocess.CompletedProcess[str],
) -> None:
    out = warning_run.stdout + warning_run.stderr
    assert warning_run.returncode == 1, out
    assert "Failed" in out
    assert "model.py:2:" in out and "MC501" in out
    # notebooks are handed to the hook (types_or: jupyter) and located by cell
    assert "nb.ipynb:cell 2:2:" in out
