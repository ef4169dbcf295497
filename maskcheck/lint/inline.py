"""What a small helper of the file returns, read at each call with the caller's arguments.

A reader who meets `ext = self.get_extended_attention_mask(attention_mask, self.dtype)` opens
the helper, reads `ext = attention_mask[:, None, None, :]` and `return ext.to(dtype=dtype)`,
and takes the call for that, made of the caller's own arguments. `template` keeps a helper's
lines once; `evaluate` reads them at a call: each parameter is the argument's expression (so
what the caller knows of it carries through), each local name what its line made (so what its
name says still counts, as in any other function).

Only helpers whose body is assignments to plain names followed by one return are read so: a
branch or a loop would make the return depend on which way it went.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

# Past this many nodes a helper is not a small expression of its parameters any more.
_MOST_NODES = 160

# Nodes that bind names of their own: a helper holding one is not read at its calls.
_OWN_SCOPE = (ast.Lambda, ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await, ast.ListComp,
              ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class Template:
    """A helper's lines: `steps` bind local names (one expression for one name, or None for
    names unpacked from a value nobody here can describe), `expr` is what it returns.
    `params` come after `self` for a method; `defaults` are those that have one."""

    params: tuple[str, ...]
    defaults: tuple[tuple[str, ast.expr], ...]
    steps: tuple[tuple[str, ast.expr | None], ...]
    expr: ast.expr
    # The forward of another class, called on an instance held as `self.embed`: its `self.X`
    # are that instance's, which the caller's scope does not hold.
    foreign: bool = False


def template(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> Template | None:
    """The lines of a helper whose body is `name = ...` lines and one final `return ...`;
    None for any other body, and for a return that reads none of its parameters."""
    args = node.args
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if args.vararg or args.kwarg or args.posonlyargs or (node.decorator_list and not static):
        return None
    positional = list(args.args)
    if method and not static:
        if not positional or positional[0].arg != "self":
            return None
        positional = positional[1:]
    params = [a.arg for a in positional + args.kwonlyargs]
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return None
    steps: list[tuple[str, ast.expr | None]] = []
    for stmt in body[:-1]:
        read = _step(stmt)
        if read is None:
            return None
        steps.extend(read)
    expr = body[-1].value
    exprs = [e for _, e in steps if e is not None] + [expr]
    if sum(1 for e in exprs for _ in ast.walk(e)) > _MOST_NODES or any(
            isinstance(n, _OWN_SCOPE) for e in exprs for n in ast.walk(e)):
        return None
    if not {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)} & set(params):
        return None  # what it returns does not depend on its arguments: its result says it
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):],
                        args.defaults, strict=True)) if args.defaults else {}
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                     if d is not None})
    return Template(tuple(params), tuple(defaults.items()), tuple(steps), expr)


def _step(stmt: ast.stmt) -> list[tuple[str, ast.expr | None]] | None:
    """The bindings one line of a helper makes, in order; None for a line of another kind."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
            stmt.targets[0], ast.Name):
        return [(stmt.targets[0].id, stmt.value)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and (
            stmt.value is not None):
        return [(stmt.target.id, stmt.value)]
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
            stmt.targets[0], ast.Tuple) and all(
            isinstance(e, ast.Name) for e in stmt.targets[0].elts):
        names = [e.id for e in stmt.targets[0].elts if isinstance(e, ast.Name)]
        value = stmt.value
        if isinstance(value, ast.Tuple) and len(value.elts) == len(names) and not (
                set(names) & {n.id for v in value.elts for n in ast.walk(v)
                              if isinstance(n, ast.Name)}):
            return list(zip(names, value.elts, strict=True))  # `a, b = x, y` (no swap)
        return [(name, None) for name in names]  # `b, c, t, f = x.size()`
    return None


_V = TypeVar("_V")


def evaluate(helper: Template, call: ast.Call, lookup: Callable[[str], _V],
             describe: Callable[[ast.AST, Callable[[str], _V]], _V], unknown: _V,
             ) -> _V | tuple[_V, ...] | None:
    """What the helper returns at this call (a tuple return: what each position gives), its
    parameters being the call's argument expressions, read in the caller's scope; None when
    the call passes `*args`/`**kwargs`, a name the helper does not take, or too few."""
    given = _arguments(helper, call)
    if given is None:
        return None
    local: dict[str, _V] = {}
    own = {name for name, _ in helper.steps}
    for param, arg in list(given.items()):
        if own & {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}:
            # the argument names what the helper calls its own (`x` passed where the helper
            # binds an `x`): read it here, in the caller's scope, not inside the helper
            local[param] = describe(arg, lookup)
            del given[param]

    def read(name: str) -> _V:
        if name in local:
            return local[name]
        if name in own or (helper.foreign and name.startswith("self.")):
            return unknown  # a local name read before its line; another instance's attribute
        return lookup(name)

    for name, expr in helper.steps:
        local[name] = unknown if expr is None else describe(_substitute(expr, given), read)
        given.pop(name, None)  # `mask = mask.float()`: the name is the helper's own from here
    result = _substitute(helper.expr, given)
    if isinstance(result, ast.Tuple):
        return tuple(describe(e, read) for e in result.elts)
    return describe(result, read)


def _arguments(helper: Template, call: ast.Call) -> dict[str, ast.expr] | None:
    if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > len(
            helper.params) or any(kw.arg is None for kw in call.keywords):
        return None
    given: dict[str, ast.expr] = dict(zip(helper.params, call.args, strict=False))
    for kw in call.keywords:
        if kw.arg not in helper.params or kw.arg in given:
            return None
        given[kw.arg] = kw.value
    for name, default in helper.defaults:
        given.setdefault(name, default)
    return given if len(given) == len(helper.params) else None


def _substitute(node: ast.expr, names: dict[str, ast.expr]) -> ast.expr:
    """A copy of `node` with each loaded name of `names` replaced by its expression (shared,
    not copied: it is only read)."""
    if isinstance(node, ast.Name):
        return names.get(node.id, node) if isinstance(node.ctx, ast.Load) else node
    if not names:
        return node
    new = copy.copy(node)
    for field, old in ast.iter_fields(node):
        if isinstance(old, ast.expr):
            setattr(new, field, _substitute(old, names))
        elif isinstance(old, list):
            setattr(new, field, [_substitute(v, names) if isinstance(v, ast.expr) else (
                _keyword(v, names) if isinstance(v, ast.keyword) else v) for v in old])
    return new


def _keyword(kw: ast.keyword, names: dict[str, ast.expr]) -> ast.keyword:
    new = copy.copy(kw)
    new.value = _substitute(kw.value, names)
    return new
