from __future__ import annotations

from pathlib import Path

import pytest

from maskcheck.config import ConfigError, discover
from maskcheck.errors import UsageError
from maskcheck.model import Severity


def _project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.maskcheck]\n{table}")
    sub = tmp_path / "src" / "pkg"
    sub.mkdir(parents=True)
    return sub


def test_found_upward_from_the_checked_directory(tmp_path: Path) -> None:
    sub = _project(tmp_path, 'select = ["MC5"]\nignore = ["MC506"]\nfail-on = "warning"\n'
                   'exclude = ["generated"]\napi = "sdpa"\n'
                   '[tool.maskcheck.per-file-ignores]\n"tests/*" = ["MC501"]\n')
    config = discover(sub)
    assert config.path == tmp_path / "pyproject.toml"
    assert config.select == ("MC5",) and config.ignore == ("MC506",)
    assert config.fail_on is Severity.WARNING and config.api == "sdpa"
    assert config.ignored_for(tmp_path / "tests" / "test_a.py") == ("MC501",)
    assert config.is_excluded(tmp_path / "generated" / "x.py")
    assert not config.is_excluded(tmp_path / "src" / "x.py")


def test_pyproject_without_table_is_skipped(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'inner'\n")
    (tmp_path / "pyproject.toml").write_text('[tool.maskcheck]\nignore = ["MC501"]\n')
    assert discover(inner).ignore == ("MC501",)


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ('selcet = ["MC501"]\n', ["selcet", "unknown key"]),
        ('fail_on = "warning"\n', ["fail_on", "fail-on"]),
        ('select = ["MC999"]\n', ["MC999", "select"]),
        ("select = 5\n", ["select", "list"]),
        ('fail-on = "loud"\n', ["fail-on", "loud"]),
        ('api = "keras"\n', ["api", "keras"]),
        ('exclude = "build"\n', ["exclude", "list"]),
        ('per-file-ignores = ["x"]\n', ["per-file-ignores", "table"]),
    ],
)
def test_broken_table_names_key_and_problem(tmp_path: Path, table: str, words: list[str]) -> None:
    sub = _project(tmp_path, table)
    with pytest.raises(UsageError) as info:  # ConfigError, or an unknown selector
        discover(sub)
    message = str(info.value)
    assert "pyproject.toml" in message
    for word in words:
        assert word in message


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.maskcheck\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        discover(tmp_path)
