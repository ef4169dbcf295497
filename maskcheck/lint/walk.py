"""A faster `ast.walk` for the rules' predicates over a subtree.

`ast.walk` goes through three generators per node (`walk`, `iter_child_nodes`, `iter_fields`)
and a getattr and two type tests per field, strings and numbers included. `subnodes` yields the
same nodes but the operator and expression-context singletons (`ast.Add()`, `ast.Load()`), which
hold nothing and which no predicate here looks at, depth first instead of breadth first: the
fields it follows for each node type are read once from the grammar (the node classes'
signatures, `FunctionDef(identifier name, arguments args, stmt* body, ...)`), leaving out
identifiers, strings, constants and integers. A test compares it with `ast.walk` on real code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

# Grammar types whose values are not nodes, or are nodes that hold nothing.
_NOT_NODES = frozenset({"identifier", "string", "constant", "int", "operator", "unaryop",
                        "cmpop", "boolop", "expr_context"})
_SIGNATURE = re.compile(r"\w+\((.*)\)$")


def _node_fields(kind: type) -> tuple[str, ...] | None:
    """The fields of a node type that may hold other nodes, from its grammar signature; None
    when the class has none to read (the deprecated `ast.Num` and the like)."""
    lines = (kind.__doc__ or "").strip().splitlines()
    match = _SIGNATURE.match(lines[0]) if lines else None
    if match is None:
        return None
    out: list[str] = []
    for part in match.group(1).split(","):
        words = part.split()
        if len(words) != 2:
            continue
        grammar_type, name = words
        if grammar_type.rstrip("*?") not in _NOT_NODES:
            out.append(name)
    declared = tuple(w.split()[-1] for w in match.group(1).split(",") if w.split())
    if declared != getattr(kind, "_fields", ()):
        return None
    return tuple(reversed(out))  # the stack pops them in source order


def _all_node_types() -> dict[type, tuple[str, ...]]:
    table: dict[type, tuple[str, ...]] = {}
    pending = [ast.AST]
    while pending:
        kind = pending.pop()
        pending.extend(kind.__subclasses__())
        if kind._fields or kind.__module__ == "ast":
            fields = _node_fields(kind) if kind._fields else ()
            if fields is not None:
                table[kind] = fields
    return table


FIELDS: dict[type, tuple[str, ...]] = _all_node_types()


def subnodes(node: ast.AST) -> Iterator[ast.AST]:
    """`node` and every node below it, as `ast.walk` gives them but the operator and context
    singletons, in depth-first order."""
    fields_of = FIELDS
    stack = [node]
    pop, push = stack.pop, stack.append
    while stack:
        here = pop()
        yield here
        fields = fields_of.get(type(here))
        if fields is None:  # a node class the grammar table does not know: read it as ast does
            stack.extend(c for c in ast.iter_child_nodes(here)
                         if not isinstance(c, (ast.expr_context, ast.operator, ast.unaryop,
                                               ast.cmpop, ast.boolop)))
            continue
        for name in fields:
            value = getattr(here, name, None)
            if value is None:
                continue
            if type(value) is list:
                for child in reversed(value):
                    if child is not None:
                        push(child)
            else:
                push(value)
