"""The second walk (`Linter.rerun`) walks again only the top-level statements that call-site
facts change, and takes the first walk's hits and state elsewhere: it must give exactly what a
whole second walk (`Linter.run` with the same seeds) gives, hit for hit and in order."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from maskcheck.lint import checks
from maskcheck.lint.checks import Hit, Linter, _same, _Scope, lint_tree
from maskcheck.lint.values import MODULE_ALIASES, Value
from tests.lint import test_boundary_shapes
from tests.lint.conftest import SOURCE_CODES

FIXTURES = Path(__file__).parent / "fixtures"
RECALL = Path(__file__).parents[2] / "benchmarks" / "lint_recall"  # the recall corpus


def _walks(source: str) -> tuple[list[Hit], list[Hit], int, int] | None:
    """(a whole second walk's hits, rerun's, statements rerun walked, statements) for a source
    with seeds; None without."""
    tree = ast.parse(source)
    token = MODULE_ALIASES.set({})
    try:
        first, _, declared = checks.first_walk(tree, SOURCE_CODES, source, "a.py")
        seeds = first._seeded_parameters()
        if not seeds or first.option_defaults or MODULE_ALIASES.get():
            return None
        whole = Linter(SOURCE_CODES, source, "a.py")
        whole.declare_classes(*declared)
        whole.seeds = seeds
        whole.record_calls = True
        whole.role_params, whole.role_kinds = first.role_params, first.role_kinds
        expected = whole.run(tree)
        again = Linter(SOURCE_CODES, source, "a.py")
        again.declare_classes(*declared)
        again.seeds = seeds
        again.record_calls = True
        again.role_params, again.role_kinds = first.role_params, first.role_kinds
        walked: list[ast.AST] = []
        walk = again._walk

        def counting(stack: checks._Stack, handlers: dict[type, checks._Handler]) -> None:
            walked.extend(node for node, _ in stack if isinstance(node, ast.stmt))
            walk(stack, handlers)

        again._walk = counting  # type: ignore[method-assign]
        got = again.rerun(tree, first)
        assert again.param_hits == whole.param_hits
        # what the calls pass, for the walk after it: the first walk's record of a skipped
        # statement and this walk's of the others, as a whole walk records them all
        assert again._seeded_parameters() == whole._seeded_parameters()
        assert all(any(h is hit for h in got) for hit, _ in again.param_hits)
        return expected, got, len(walked), len(tree.body)
    finally:
        MODULE_ALIASES.reset(token)


# A flag seeded into one class's __init__ (a later class builds it with is_causal=True); the
# classes around it do not read it, so only that class is walked again.
SEEDED_INIT = '''import torch
import torch.nn as nn
import torch.nn.functional as F


def unrelated(x, mask):
    return x.masked_fill(mask, -1e9)


class Attention(nn.Module):
    def __init__(self, d, is_causal=False):
        super().__init__()
        self.is_causal = is_causal

    def forward(self, q, k, v, cache=None):
        if cache is not None:
            k = torch.cat([cache, k], dim=2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal)


class Other(nn.Module):
    def forward(self, s, m):
        return s.masked_fill(m, -1e9)


class Decoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = Attention(d, is_causal=True)


def later(x, mask):
    return x.masked_fill(mask, -1e9)
'''

# A helper whose return the seeds change: every statement after it that reads the helper starts
# from another state than the first walk's, and is walked again.
SEEDED_RETURN = '''import torch


def fill_value(big):
    return big


def first(scores, mask):
    return scores.masked_fill(mask, fill_value(-1e9))


def second(scores, keep):
    return scores.masked_fill(keep == 0, -1e4)


def caller(scores, mask):
    return first(scores, mask) + fill_value(-1e9)
'''


def _sources() -> list[tuple[str, str]]:
    sources = [(name, value) for name, value in vars(test_boundary_shapes).items()
               if name.isupper() and isinstance(value, str) and "import torch" in value]
    sources += [(path.name, path.read_text()) for path in sorted(FIXTURES.glob("*.py"))]
    sources += [(str(path.relative_to(RECALL)), path.read_text(encoding="utf-8"))
                for path in sorted(RECALL.rglob("*.py"))]
    sources += [("SEEDED_INIT", SEEDED_INIT), ("SEEDED_RETURN", SEEDED_RETURN)]
    return sources


def test_rerun_gives_the_whole_second_walk() -> None:
    seeded = 0
    for name, source in _sources():
        both = _walks(source)
        if both is not None:
            expected, got, _, _ = both
            assert got == expected, name
            seeded += 1
    assert seeded >= 20


def test_rerun_walks_only_the_seeded_class() -> None:
    both = _walks(SEEDED_INIT)
    assert both is not None
    expected, got, walked, statements = both
    assert got == expected
    assert walked == 1 < statements


def test_rerun_walks_what_reads_a_changed_return() -> None:
    both = _walks(SEEDED_RETURN)
    assert both is not None
    expected, got, walked, statements = both
    assert got == expected
    assert 1 < walked <= statements


def _whole_second_walk(tree: ast.Module, source: str) -> list[Hit]:
    """`lint_tree` as it was before `rerun`: the second walk goes over the whole module."""
    token = MODULE_ALIASES.set({})
    try:
        linter, hits, declared = checks.first_walk(tree, SOURCE_CODES, source, "a.py")
        seeds = linter._seeded_parameters()
        first = linter
        for walk in range(2):  # the seeded walk, and once more where its calls seed more
            if not seeds:
                break
            use_site = frozenset((key, param) for key, params in seeds.items()
                                 for param in params if param in first.role_params.get(key, ()))
            linter = Linter(SOURCE_CODES, source, "a.py")
            linter.declare_classes(*declared)
            linter.seeds = seeds
            linter.padding_given = first.padding_given
            linter.never_given = first.never_given
            linter.use_site = use_site
            linter.option_defaults = first.option_defaults
            linter.record_calls = walk == 0
            linter.role_params, linter.role_kinds = first.role_params, first.role_kinds
            hits = linter.run(tree)
            added = {key: new for key, params in linter._seeded_parameters().items()
                     if (new := {param: facts for param, facts in params.items()
                                 if param not in seeds.get(key, {})})} if walk == 0 else {}
            seeds = {key: {**seeds.get(key, {}), **added.get(key, {})}
                     for key in (*seeds, *(key for key in added if key not in seeds))
                     } if added else {}
        if linter.param_hits:
            hits = checks._without_float32_callers(tree, SOURCE_CODES, source, "a.py",
                                                   linter.param_hits, hits)
        return hits
    finally:
        MODULE_ALIASES.reset(token)


def test_lint_tree_gives_what_the_whole_second_walk_gives() -> None:
    for _, source in _sources():
        tree = ast.parse(source)
        assert lint_tree(tree, SOURCE_CODES, source, "a.py") == _whole_second_walk(tree, source)


def test_every_linter_attribute_is_classified() -> None:
    """A new attribute of the Linter must be carried from one top-level statement to the next
    (`_CARRIED`), shared as a cache (`_SHARED`), or be one of those below; otherwise the second
    walk may start a statement from a state that lacks it."""
    fixed = {"enabled", "source", "test_module", "displays", "fp32_only", "record_calls",
             "seeds", "calls_to", "option_defaults", "use_site", "padding_given",
             "never_given"}
    output = {"hits", "param_hits", "walked_hits", "scopes"}
    recorded = {"defs", "calls", "role_params", "role_kinds", "entry_values", "checkpoints",
                "offset_flags", "_method_roles", "_method_values", "_function_roles",
                "entered", "call_log"}
    # keyed by an `if` or statement node, set and read within it
    within = {"_branch_marks", "_branch_values", "_joins", "_narrowed", "_unset", "_snapshots",
              "_neutral_defaults", "_before_if", "_after_body"}
    source = (FIXTURES / "MC506_causal_with_mask.py").read_text()
    linter = Linter(SOURCE_CODES, source, "a.py")
    linter.record_calls = True
    linter.checkpoints = []
    linter.run(ast.parse(source))
    names = set(vars(linter))
    known = fixed | output | recorded | within | set(checks._CARRIED) | set(checks._SHARED)
    assert names - known == set()
    assert not (set(checks._CARRIED) & set(checks._SHARED))


def test_every_container_of_a_scope_is_copied() -> None:
    scope = _Scope("module")
    containers = {name for name, value in vars(scope).items()
                  if isinstance(value, (dict, set, list))}
    assert containers == set(checks._SCOPE_CONTAINERS)
    assert {f.name for f in dataclasses.fields(_Scope)} == set(vars(scope))


def test_same_state_is_strict() -> None:
    assert _same({"a": Value(number=1.0)}, {"a": Value(number=1.0)})
    assert not _same({"a": Value(number=1.0)}, {"a": Value(number=1)})
    assert not _same({"a": Value(number=0.0)}, {"a": Value(number=-0.0)})
    assert not _same({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not _same({"a": Value(flag=True)}, {"a": Value(number=1)})
    node = ast.Name("x")
    assert _same((node,), (node,))
    assert not _same((node,), (ast.Name("x"),))
    assert _same({"s"}, {"s"})


def test_clamp_search_reads_only_statements_that_may_name_finfo() -> None:
    """`_clamps_to_finfo_min` with the source enters only statements with a line that may name
    finfo, and answers as the walk of every node does."""
    clamped = '''import torch


def mask(w):
    return w


def clamp(w):
    return torch.max(w, torch.tensor(
        torch.
        finfo(w.dtype).min))


def other(w):
    return w.clamp(min=-1)
'''
    spelled = clamped.replace("torch.\n        finfo(", "torch.\n        \uff46info(")
    for source in (clamped, spelled, clamped.replace("torch.max", "torch.min"),
                   *(s for _, s in _sources())):
        tree = ast.parse(source)
        assert checks._clamps_to_finfo_min(tree, source) == checks._clamps_to_finfo_min(tree)
    assert checks._clamps_to_finfo_min(ast.parse(clamped), clamped)
    assert checks._clamps_to_finfo_min(ast.parse(spelled), spelled)  # NFKC: ｆinfo is finfo
    tree = ast.parse(clamped)
    entered = [n.name for n in checks._statements_on(tree, [11]) if isinstance(n, ast.FunctionDef)]
    assert entered == ["clamp"]


def test_the_first_walks_checkpoints_serve_a_second_rerun() -> None:
    """The seeded walk that records its calls restores copies of the first walk's states, so a
    third walk can start from them again (BART's MC506 was lost when they were used up)."""
    compared = 0
    for name, source in _sources():
        tree = ast.parse(source)
        token = MODULE_ALIASES.set({})
        try:
            first, _, declared = checks.first_walk(tree, SOURCE_CODES, source, "a.py")
            seeds = first._seeded_parameters()
            if not seeds or first.option_defaults or MODULE_ALIASES.get():
                continue
            hits = []
            for record in (True, False):
                linter = Linter(SOURCE_CODES, source, "a.py")
                linter.declare_classes(*declared)
                linter.seeds = seeds
                linter.record_calls = record
                linter.role_params, linter.role_kinds = first.role_params, first.role_kinds
                hits.append(linter.rerun(tree, first))
            whole = Linter(SOURCE_CODES, source, "a.py")
            whole.declare_classes(*declared)
            whole.seeds = seeds
            expected = whole.run(tree)
            assert hits[0] == hits[1] == expected, name
            compared += 1
        finally:
            MODULE_ALIASES.reset(token)
    assert compared >= 20
