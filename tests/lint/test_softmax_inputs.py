"""Scores by their use (a name handed to softmax in the scope that binds it) are found in one
walk of the module that enters only statements whose lines can name softmax: every spelling
that reaches softmax is still seen, and a word in a comment or a string makes nothing fire."""

from __future__ import annotations

import ast

import pytest

from maskcheck.lint.checks import lint_tree
from tests.lint.conftest import SOURCE_CODES, Found

BASE = '''import torch


def attend(s, inside):
    s += inside.bool()
    return s.softmax(-1)
'''

RETURN = "return s.softmax(-1)"
SPELLINGS = {
    "over three lines": BASE.replace(RETURN, "return (\n        s\n    ).softmax(\n        -1)"),
    "NFKC": BASE.replace("s.softmax", "s.\uff53oftmax"),
    "log_softmax of a sum": BASE.replace(RETURN, "return torch.log_softmax(s + 0, dim=-1)"),
    "in a lambda": BASE.replace(RETURN, "norm = lambda: s.softmax(-1)\n    return norm"),
    "in a nested def": BASE.replace(
        RETURN, "def norm():\n        return s.softmax(-1)\n    return norm"),
    "in a decorator": BASE.replace(
        RETURN, "@register(s.softmax(-1))\n    def norm():\n        pass\n    return norm"),
    "after a non-ASCII comment": BASE.replace("def attend", "# \u00e9\ndef attend"),
    "in a method": BASE.replace("def attend(s, inside):",
                                "class A:\n  def attend(self, s, inside):"),
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_a_bool_added_to_a_name_handed_to_softmax_is_found(found: Found, name: str) -> None:
    source = SPELLINGS[name]
    line = next(i for i, text in enumerate(source.split("\n"), 1) if "+= inside" in text)
    assert found(source) == [(line, "MC509")]


def test_softmax_of_a_module_level_name(found: Found) -> None:
    source = ("import torch\ns = torch.randn(3, 3)\ns += torch.ones(3, 3).bool()\n"
              "p = s.softmax(-1)\n")
    assert found(source) == [(3, "MC509")]


def test_softmax_in_the_decorator_of_a_module_level_def(found: Found) -> None:
    source = ("import torch\ns = torch.randn(3, 3)\ns += torch.ones(3, 3).bool()\n\n\n"
              "@register(\n    s.softmax(-1))\nclass A:\n    pass\n")
    assert found(source) == [(3, "MC509")]


@pytest.mark.parametrize("where", ["# s.softmax(-1)", "note = 's.softmax(-1)'",
                                   "return s.sum(-1)  # not softmax"])
def test_softmax_only_in_a_comment_or_a_string_is_silent(found: Found, where: str) -> None:
    assert found(BASE.replace(RETURN, where)) == []


def test_a_tree_given_without_its_source_is_read_whole() -> None:
    hits = lint_tree(ast.parse(BASE), SOURCE_CODES)
    assert [(h.line, h.code) for h in hits] == [(5, "MC509")]
    crlf = BASE.replace("\n", "\r\n")
    assert [(h.line, h.code) for h in lint_tree(ast.parse(crlf), SOURCE_CODES, crlf)] == [
        (5, "MC509")]
