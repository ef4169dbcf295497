"""`lint.walk.subnodes` yields what `ast.walk` yields but the operator and context singletons."""

from __future__ import annotations

import ast
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

import maskcheck
from maskcheck.lint.walk import FIELDS, subnodes

_SINGLETONS = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)

EVERY_SHAPE = textwrap.dedent('''
    import torch as th, torch.nn.functional as F
    from . import x as y
    global_thing: int = 3
    @decorator(arg=1)
    class A(Base, metaclass=M):
        x: "int"
        async def f(self, a, /, b=1, *c, d: int = 2, **e) -> None:
            global g
            async with ctx() as (p, q), other:
                async for i in aiter():
                    await i
            yield from gen()
            r = yield
            del r[0], self.z
            lam = lambda u, *, v=1: u + v
            w = [i for i in range(3) if i if not i] + list({k: v for k, v in {}.items()})
            s = {*a, *b}; t = {**d, 1: 2}; gen2 = (j async for j in k)
            f"{a!r:>{width}} {b}" + b"x" + ...
            assert a, "msg"
            raise E from e
            try:
                pass
            except (A, B) as err:
                nonlocal_thing = err
            else:
                pass
            finally:
                pass
            while (n := n - 1) > 0:
                break
            else:
                continue
            match command:
                case [1, 2, *rest]:
                    pass
                case {"k": v, **kw}:
                    pass
                case Point(x=0, y=yy) | None if yy > 0:
                    pass
                case (str() as s2) | True:
                    pass
            x[1:2, ::3] += -a if b else ~c
            return a @ b is not c < d
''')


def _same_nodes(tree: ast.AST) -> None:
    expected = Counter(id(n) for n in ast.walk(tree) if not isinstance(n, _SINGLETONS))
    got = Counter(id(n) for n in subnodes(tree))
    assert got == expected


def test_every_shape_of_the_grammar() -> None:
    tree = ast.parse(EVERY_SHAPE)
    _same_nodes(tree)
    kinds = {type(n) for n in ast.walk(tree)}
    assert {ast.Match, ast.MatchClass, ast.MatchMapping, ast.MatchStar, ast.MatchAs,
            ast.MatchOr, ast.JoinedStr, ast.AsyncWith, ast.NamedExpr, ast.Lambda} <= kinds


@pytest.mark.skipif(sys.version_info < (3, 11), reason="except* is Python 3.11")
def test_except_star() -> None:
    _same_nodes(ast.parse("try:\n    pass\nexcept* (A, B) as e:\n    f(e)\n"))


def test_type_comments_and_synthesised_nodes() -> None:
    _same_nodes(ast.parse("def f(a):  # type: (int) -> None\n    x = 1  # type: ignore\n",
                          type_comments=True))
    # nodes built by the linter carry no positions and may lack optional fields
    _same_nodes(ast.BinOp(ast.Name("a", ast.Load()), ast.Add(), ast.Constant(1)))


def test_this_package() -> None:
    for path in sorted(Path(maskcheck.__file__).parent.rglob("*.py")):
        _same_nodes(ast.parse(path.read_text(encoding="utf-8")))


def test_every_concrete_node_class_is_read_from_the_grammar() -> None:
    concrete = [c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.AST)
                and c._fields and (c.__doc__ or "").split("(")[0] == c.__name__]
    assert concrete
    assert all(c in FIELDS for c in concrete)
