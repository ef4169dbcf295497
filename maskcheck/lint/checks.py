"""The source rules MC501-MC506: one iterative walk over a module's `ast`, per-scope state.

Every rule aims at high precision: it fires only on shapes of code that are wrong whatever
the surrounding program does, and a name that was reassigned (or handed to another function)
before the suspicious use is given the benefit of the doubt.
"""

from __future__ import annotations

import ast
import bisect
import math
import re
from dataclasses import dataclass, field
from typing import NamedTuple

FP16_MAX = 65504.0
MASK_KWARGS = frozenset(
    {"attn_mask", "mask", "src_mask", "tgt_mask", "memory_mask", "attention_mask"}
)
KEY_PADDING_KWARGS = frozenset(
    {"key_padding_mask", "src_key_padding_mask", "tgt_key_padding_mask",
     "memory_key_padding_mask"}
)
_INF_NAMES = frozenset({"math.inf", "torch.inf", "np.inf", "numpy.inf", "np.Inf", "np.PINF"})
_FULL_FUNCS = frozenset({"full", "full_like", "new_full"})
_ZEROS_FUNCS = frozenset({"zeros", "zeros_like", "new_zeros"})
_ONES_FUNCS = frozenset({"ones", "ones_like", "new_ones"})
_TRANSPOSES = frozenset({"T", "mT", "t", "transpose", "transpose_", "flip", "fliplr", "flipud"})
_NO_GRAD = frozenset({"no_grad", "inference_mode"})


class Hit(NamedTuple):
    code: str
    line: int
    col: int  # 0-based UTF-8 byte offset, as ast gives it
    end_line: int
    message: str


@dataclass
class _Scope:
    kind: str  # "module" | "function" | "class"
    no_grad: bool = False
    fp16_guard: bool = False
    bool_triu: dict[str, ast.Call] = field(default_factory=dict)  # name -> triu(ones bool)
    assigned: set[str] = field(default_factory=set)
    zero_masks: dict[str, bool] = field(default_factory=dict)  # name -> nothing non-zero written
    masking_matrices: set[str] = field(default_factory=set)
    grad_names: set[str] = field(default_factory=set)
    param_attrs: set[str] = field(default_factory=set)  # class scopes: self.X = nn.Parameter
    self_fills: list[tuple[str, ast.Call]] = field(default_factory=list)


class _Exit(NamedTuple):
    what: str  # "scope" | "no_grad"


# --- expression helpers -------------------------------------------------------------------


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        key = node.slice.value
        return key if isinstance(key, str) else None
    return None


def func_name(call: ast.Call) -> str | None:
    return last_name(call.func) if not isinstance(call.func, ast.Subscript) else None


def receiver(call: ast.Call) -> ast.expr | None:
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def is_module_call(call: ast.Call) -> bool:
    """`torch.zeros(...)` rather than `x.zeros(...)`: the receiver is a module-like name."""
    base = receiver(call)
    return base is None or (dotted(base) or "").split(".")[0] in {"torch", "np", "numpy", "jnp"}


def number(node: ast.AST) -> float | None:
    """The value of a constant numeric expression (-1e9, -10**9, float('-inf'), -math.inf)."""
    if isinstance(node, ast.Constant):
        v = node.value
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = number(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.Mult)):
        left, right = number(node.left), number(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Mult):
            return left * right
        if abs(right) > 400 or (left == 0 and right < 0):
            return None
        try:
            return float(left**right)
        except (OverflowError, ZeroDivisionError):
            return None
    if isinstance(node, ast.Call) and func_name(node) == "float" and len(node.args) == 1:
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            try:
                return float(arg.value)
            except ValueError:
                return None
        return number(arg)
    if dotted(node) in _INF_NAMES:
        return math.inf
    return None


def is_large_negative(node: ast.AST) -> bool:
    v = number(node)
    return v is not None and math.isfinite(v) and v < -FP16_MAX


def is_masking_value(node: ast.AST) -> bool:
    """-inf, a large negative literal or finfo(...).min: a value meant to mask."""
    v = number(node)
    if v is not None:
        return v < -FP16_MAX
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "min"
        and isinstance(node.value, ast.Call)
        and func_name(node.value) == "finfo"
    )


def is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def is_zero(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value is False:
        return True
    return number(node) == 0


def kwarg(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def argument(call: ast.Call, index: int, name: str) -> ast.expr | None:
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[:index]):
        return call.args[index]
    return kwarg(call, name)


def mentions_mask(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and "mask" in n.id.lower())
        or (isinstance(n, ast.Attribute) and "mask" in n.attr.lower())
        for n in ast.walk(node)
    )


def is_bool_dtype(node: ast.AST | None) -> bool:
    name = None if node is None else dotted(node)
    return name is not None and name.split(".")[-1] in {"bool", "bool_"}


def is_eq_zero(node: ast.AST, name: str) -> bool:
    """`name == 0` (either order), the test that picks the untouched zeros."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return False
    if not isinstance(node.ops[0], ast.Eq):
        return False
    left, right = node.left, node.comparators[0]
    return (isinstance(left, ast.Name) and left.id == name and is_zero(right)) or (
        isinstance(right, ast.Name) and right.id == name and is_zero(left)
    )


def decorated_no_grad(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if last_name(target) in _NO_GRAD:
            return True
    return False


def with_no_grad(node: ast.With | ast.AsyncWith) -> bool:
    for item in node.items:
        expr = item.context_expr
        if isinstance(expr, ast.Call):
            name = func_name(expr)
            if name in _NO_GRAD:
                return True
            if name == "set_grad_enabled" and expr.args and number(expr.args[0]) == 0:
                return True
            if name == "set_grad_enabled" and expr.args and (
                isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False
            ):
                return True
    return False


def requires_grad_value(value: ast.AST) -> bool:
    if not isinstance(value, ast.Call):
        return False
    if func_name(value) == "Parameter":
        rg = kwarg(value, "requires_grad")
        return rg is None or not (isinstance(rg, ast.Constant) and rg.value is False)
    rg = kwarg(value, "requires_grad")
    return rg is not None and is_true(rg)


def is_masking_matrix(node: ast.AST, known: set[str], kind: str = "any") -> bool:
    """A matrix of -inf / large negatives (kind "additive") or of True (kind "bool")."""
    if kind == "any":
        return is_masking_matrix(node, known, kind="additive") or is_masking_matrix(
            node, known, kind="bool")
    if isinstance(node, ast.Name):
        return kind == "additive" and node.id in known
    if kind == "bool":
        return _is_true_matrix(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return (is_ones(node.left) and is_masking_value(node.right)) or (
            is_ones(node.right) and is_masking_value(node.left)
        )
    if not isinstance(node, ast.Call):
        return False
    name = func_name(node)
    if name in _FULL_FUNCS:
        fill = argument(node, 1, "fill_value")
        return fill is not None and is_masking_value(fill)
    if name == "fill_" and node.args:
        return is_masking_value(node.args[0])
    return False


def _is_true_matrix(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = func_name(node)
    if name in _FULL_FUNCS:
        fill = argument(node, 1, "fill_value")
        return fill is not None and is_true(fill)
    if name in _ONES_FUNCS and is_module_call(node):
        return is_bool_dtype(kwarg(node, "dtype"))
    base = receiver(node)
    if base is not None and is_ones(base, plain=True):
        if name == "bool":
            return True
        if name == "to" and node.args:
            return is_bool_dtype(node.args[0])
        if name == "to":
            return is_bool_dtype(kwarg(node, "dtype"))
    return False


def is_wide_float(node: ast.AST | None) -> bool:
    """An explicit float32/float64 dtype: a -1e9 there is a sentinel, not an fp16 hazard."""
    name = None if node is None else dotted(node)
    return name is not None and name.split(".")[-1] in {"float", "float32", "float64", "double"}


def mentions_half(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in {"float16", "half"})
        or (isinstance(n, ast.Constant) and n.value in {"float16", "fp16", "half"})
        for n in ast.walk(node)
    )


def is_ones(node: ast.AST, *, plain: bool = False) -> bool:
    if not (isinstance(node, ast.Call) and func_name(node) in _ONES_FUNCS):
        return False
    return is_module_call(node) and (not plain or kwarg(node, "dtype") is None)


# --- the walk -----------------------------------------------------------------------------


class Linter:
    """One pass over a module; `hits` fills in as rules fire."""

    def __init__(self, enabled: frozenset[str], source: str = "") -> None:
        self.enabled = enabled
        self.source = source
        self.hits: list[Hit] = []
        self.scopes: list[_Scope] = [_Scope("module")]
        self.hot: set[int] | None = None

    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    def report(self, code: str, node: ast.AST, message: str) -> None:
        if code in self.enabled:
            line = getattr(node, "lineno", 1)
            self.hits.append(Hit(code, line, getattr(node, "col_offset", 0),
                                 getattr(node, "end_lineno", None) or line, message))

    def run(self, tree: ast.AST, hot: set[int] | None = None) -> list[Hit]:
        if hot is not None:
            self.hot = set(hot)
        elif self.source:
            self.hot = hot_lines(self.source, self.enabled)
        stack: list[tuple[ast.AST | _Exit, ast.AST | None]] = [(tree, None)]
        push = stack.append
        while stack:
            node, parent = stack.pop()
            if isinstance(node, _Exit):
                self._exit(node)
                continue
            self._enter(node, parent, stack)
            is_stmt = isinstance(node, (ast.stmt, ast.Module))
            for name in reversed(node._fields):
                value = getattr(node, name, None)
                if isinstance(value, list):
                    for child in reversed(value):
                        if isinstance(child, ast.AST) and (not is_stmt or self._worth(child)):
                            push((child, node))
                elif isinstance(value, ast.AST) and (not is_stmt or self._worth(value)):
                    push((value, node))
        self.hits.sort(key=lambda h: (h.line, h.col, h.code))
        return self.hits

    def _worth(self, child: ast.AST) -> bool:
        """Whether to descend into a statement's expression: only if its lines hold a trigger.

        Statements themselves are always visited (scopes, assignments, `with no_grad()`), so
        only expressions whose text cannot match any enabled rule are skipped.
        """
        if self.hot is None or not isinstance(child, ast.expr):
            return True
        hot = self.hot
        return any(line in hot for line in range(child.lineno, (child.end_lineno or 0) + 1))

    def _mark_name(self, name: str) -> None:
        """Lines that mention a tracked zero mask: a call there may write into it."""
        if self.hot is not None:
            self.hot |= occurrence_lines(self.source, (name,))

    def _enter(
        self, node: ast.AST, parent: ast.AST | None,
        stack: list[tuple[ast.AST | _Exit, ast.AST | None]],
    ) -> None:
        if isinstance(node, ast.Call):
            self._call(node, parent)
        elif isinstance(node, ast.Assign):
            self._assign(node)
        elif isinstance(node, ast.AugAssign):
            self._taint(node.target)
        elif isinstance(node, ast.BinOp):
            self._binop(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            no_grad = self.scope.no_grad or (
                not isinstance(node, ast.Lambda) and decorated_no_grad(node)
            )
            self.scopes.append(_Scope("function", no_grad=no_grad))
            stack.append((_Exit("scope"), None))
        elif isinstance(node, ast.ClassDef):
            self.scopes.append(_Scope("class"))
            stack.append((_Exit("scope"), None))
        elif isinstance(node, ast.If) and not self.scope.fp16_guard and mentions_half(node.test):
            self.scope.fp16_guard = True
            stack.append((_Exit("fp16_guard"), None))
        elif (isinstance(node, (ast.With, ast.AsyncWith)) and not self.scope.no_grad
              and with_no_grad(node)):
            self.scope.no_grad = True
            stack.append((_Exit("no_grad"), None))

    def _exit(self, marker: _Exit) -> None:
        if marker.what == "no_grad":
            self.scope.no_grad = False
            return
        if marker.what == "fp16_guard":
            self.scope.fp16_guard = False
            return
        done = self.scopes.pop()
        if done.kind == "class":
            for attr, call in done.self_fills:
                if attr in done.param_attrs:
                    self.report("MC505", call, f"masked_fill_ on parameter self.{attr}: in-place "
                                "fill of a tensor that requires grad; use masked_fill")

    # --- node handlers ---

    def _call(self, call: ast.Call, parent: ast.AST | None) -> None:
        name = func_name(call)
        if name is None:
            return
        if name in {"masked_fill", "masked_fill_"}:
            self._masked_fill_value(call, name)
        elif (name == "where" and dotted(call.func) == "torch.where" and call.args
              and mentions_mask(call.args[0])):
            for branch in call.args[1:3]:
                if is_large_negative(branch):
                    self._large_negative(branch, "torch.where")
        elif name in _FULL_FUNCS or name == "fill_":
            fill = call.args[0] if name == "fill_" and call.args else argument(
                call, 1, "fill_value")
            if fill is not None and is_large_negative(fill) and not is_wide_float(
                    kwarg(call, "dtype")):
                self._large_negative(fill, name)
        elif name in {"triu", "triu_"}:
            self._triu(call, parent)
        elif name == "scaled_dot_product_attention":
            self._sdpa(call)
        elif name == "requires_grad_":
            base = receiver(call)
            if isinstance(base, ast.Name) and (not call.args or not is_zero(call.args[0])):
                self.scope.grad_names.add(base.id)
        elif name == "register_parameter" and self._in_method_of_class():
            attr = call.args[0] if call.args else None
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                self._class_scope_add_param(attr.value)
        self._inverted_kwargs(call)
        if self.scope.bool_triu:
            self._bool_triu_use(call)
        self._zero_mask_call(call, name)
        if name == "masked_fill_":
            self._inplace_fill(call)

    def _assign(self, node: ast.Assign) -> None:
        value = node.value
        for target in node.targets:
            if isinstance(target, ast.Name):
                self._assign_name(target.id, value)
            elif isinstance(target, ast.Subscript):
                if is_large_negative(value) and mentions_mask(target):
                    self._large_negative(value, "an indexed assignment")
                self._zero_mask_write(target, value)
            elif isinstance(target, ast.Attribute):
                self._assign_attribute(target, value)
            else:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        self._forget(sub.id)

    def _assign_name(self, name: str, value: ast.expr) -> None:
        scope = self.scope
        fill = self._zero_mask_fill_of(name, value)
        self._forget(name)
        scope.assigned.add(name)
        if fill:
            return
        if isinstance(value, ast.Call) and func_name(value) in _ZEROS_FUNCS:
            scope.zero_masks[name] = True
            self._mark_name(name)
        if is_masking_matrix(value, scope.masking_matrices):
            scope.masking_matrices.add(name)
        if requires_grad_value(value):
            scope.grad_names.add(name)

    def _forget(self, name: str) -> None:
        scope = self.scope
        scope.zero_masks.pop(name, None)
        scope.masking_matrices.discard(name)
        scope.bool_triu.pop(name, None)
        scope.grad_names.discard(name)

    def _assign_attribute(self, target: ast.Attribute, value: ast.expr) -> None:
        base = target.value
        if target.attr == "requires_grad" and isinstance(base, ast.Name):
            if is_true(value):
                self.scope.grad_names.add(base.id)
            return
        if isinstance(base, ast.Name) and base.id == "self" and requires_grad_value(value):
            self._class_scope_add_param(target.attr)

    def _binop(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Mult):
            for big, other in ((node.left, node.right), (node.right, node.left)):
                if is_large_negative(big) and mentions_mask(other):
                    self._large_negative(big, "an additive mask")
        elif isinstance(node.op, ast.Sub) and isinstance(node.right, ast.BinOp):
            inner = node.right
            if isinstance(inner.op, ast.Mult):
                for big, other in ((inner.left, inner.right), (inner.right, inner.left)):
                    v = number(big)
                    if v is not None and math.isfinite(v) and v > FP16_MAX and mentions_mask(other):
                        self._large_negative(big, "an additive mask")

    # --- MC501 ---

    def _masked_fill_value(self, call: ast.Call, name: str) -> None:
        index = 2 if dotted(call.func) == "torch.masked_fill" else 1
        value = argument(call, index, "value")
        if value is not None and is_large_negative(value):
            self._large_negative(value, name)

    def _large_negative(self, value: ast.AST, where: str) -> None:
        if self.scope.fp16_guard:
            return  # the code already has an fp16 branch (xlnet: `65500 if fp16 else 1e30`)
        text = ast.get_source_segment(self.source, value) or ast.unparse(value)
        self.report("MC501", value, f"{text} in {where} overflows float16 (largest finite "
                    "65504): use torch.finfo(dtype).min or float('-inf')")

    # --- MC502 ---

    def _inverted_kwargs(self, call: ast.Call) -> None:
        for kw in call.keywords:
            if kw.arg in KEY_PADDING_KWARGS and self._is_untouched(kw.value, _is_hf_mask_name):
                self.report("MC502", kw.value, f"HF-style attention_mask (1 = real token) passed "
                            f"as {kw.arg} (True = padding): invert it (`attention_mask == 0`)")
        if func_name(call) != "scaled_dot_product_attention":
            return
        mask = argument(call, 3, "attn_mask")
        if mask is not None and self._is_untouched(mask, _is_key_padding_name):
            self.report("MC502", mask, "key_padding_mask (True = padding) passed as SDPA "
                        "attn_mask (True = may attend): invert it (`~key_padding_mask`)")

    def _is_untouched(self, node: ast.AST, wanted: object) -> bool:
        name = last_name(node)
        if name is None or not callable(wanted) or not wanted(name):
            return False
        return not (isinstance(node, ast.Name) and node.id in self.scope.assigned)

    # --- MC503 ---

    def _triu(self, call: ast.Call, parent: ast.AST | None) -> None:
        if is_module_call(call):
            matrix, diagonal = argument(call, 0, "input"), argument(call, 1, "diagonal")
        else:
            matrix, diagonal = receiver(call), argument(call, 0, "diagonal")
        if matrix is None or (diagonal is not None and not is_zero(diagonal)):
            return
        if _is_transposed(call, parent):
            return
        if is_masking_matrix(matrix, self.scope.masking_matrices, kind="additive"):
            self._triu_hit(call)
        elif is_masking_matrix(matrix, self.scope.masking_matrices, kind="bool"):
            # A True-filled triu is also how chunked linear attention zeroes its upper triangle
            # on purpose (masked_fill(mask, 0)); only a use as an attention mask is a bug.
            if isinstance(parent, ast.keyword) and parent.arg in MASK_KWARGS:
                self._triu_hit(call)
            elif (isinstance(parent, ast.Assign) and len(parent.targets) == 1
                  and isinstance(parent.targets[0], ast.Name)):
                self.scope.bool_triu[parent.targets[0].id] = call

    def _triu_hit(self, call: ast.Call) -> None:
        self.report("MC503", call, "triu with diagonal=0 of a -inf/True matrix masks the "
                    "diagonal too (every query loses itself, the first row is empty): "
                    "use diagonal=1")

    def _bool_triu_use(self, call: ast.Call) -> None:
        masks = self.scope.bool_triu
        for kw in call.keywords:
            if kw.arg in MASK_KWARGS and isinstance(kw.value, ast.Name) and kw.value.id in masks:
                self._triu_hit(masks.pop(kw.value.id))

    # --- MC504 ---

    def _zero_mask_fill_of(self, name: str, value: ast.expr) -> bool:
        """`m = m.masked_fill(m == 0, -inf)` on a clean zero mask."""
        if not (isinstance(value, ast.Call) and func_name(value) == "masked_fill"):
            return False
        base = receiver(value)
        if not (isinstance(base, ast.Name) and base.id == name):
            return False
        return self._check_zero_fill(name, argument(value, 0, "mask"),
                                     argument(value, 1, "value"), value)

    def _check_zero_fill(
        self, name: str, test: ast.AST | None, value: ast.AST | None, node: ast.AST
    ) -> bool:
        if test is None or value is None or not is_eq_zero(test, name):
            return False
        if not (self.scope.zero_masks.get(name) and is_masking_value(value)):
            return False
        self.report("MC504", node, f"{name} was made by zeros and nothing non-zero was written "
                    f"to it: filling where {name} == 0 masks every position")
        return True

    def _zero_mask_write(self, target: ast.Subscript, value: ast.expr) -> None:
        base = target.value
        if not (isinstance(base, ast.Name) and base.id in self.scope.zero_masks):
            return
        if self._check_zero_fill(base.id, target.slice, value, target):
            return
        if not is_zero(value):
            self.scope.zero_masks[base.id] = False

    def _zero_mask_call(self, call: ast.Call, name: str) -> None:
        masks = self.scope.zero_masks
        if not masks:
            return
        base = receiver(call)
        if isinstance(base, ast.Name) and base.id in masks and name.endswith("_"):
            if name == "masked_fill_" and self._check_zero_fill(
                base.id, argument(call, 0, "mask"), argument(call, 1, "value"), call
            ):
                return
            masks[base.id] = False
        for arg in [*call.args, *(kw.value for kw in call.keywords)]:
            if isinstance(arg, ast.Name) and arg.id in masks:
                masks[arg.id] = False  # another function may write into it

    def _taint(self, target: ast.AST) -> None:
        node = target.value if isinstance(target, ast.Subscript) else target
        if isinstance(node, ast.Name) and node.id in self.scope.zero_masks:
            self.scope.zero_masks[node.id] = False

    # --- MC505 ---

    def _inplace_fill(self, call: ast.Call) -> None:
        if self.scope.no_grad:
            return
        base = receiver(call)
        if isinstance(base, ast.Name) and base.id in self.scope.grad_names:
            self.report("MC505", call, f"masked_fill_ on {base.id}, which requires grad: "
                        "in-place fill breaks autograd; use masked_fill")
        elif (isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
              and base.value.id == "self"):
            cls = self._class_scope()
            if cls is not None:
                cls.self_fills.append((base.attr, call))

    def _class_scope(self) -> _Scope | None:
        for scope in reversed(self.scopes):
            if scope.kind == "class":
                return scope
        return None

    def _in_method_of_class(self) -> bool:
        return self._class_scope() is not None

    def _class_scope_add_param(self, attr: str) -> None:
        cls = self._class_scope()
        if cls is not None:
            cls.param_attrs.add(attr)

    # --- MC506 ---

    def _sdpa(self, call: ast.Call) -> None:
        causal = argument(call, 5, "is_causal")
        mask = argument(call, 3, "attn_mask")
        if causal is not None and is_true(causal) and mask is not None and not is_none(mask):
            self.report("MC506", call, "scaled_dot_product_attention with both attn_mask and "
                        "is_causal=True: the MATH backend raises, others combine them "
                        "differently; fold the causal part into attn_mask")


# Substrings on a line that make its expressions worth a look, per rule.
TRIGGERS: dict[str, tuple[str, ...]] = {
    "MC502": ("key_padding_mask",),
    "MC503": ("triu",),
    "MC504": ("masked_fill",),
    "MC505": ("masked_fill_", "requires_grad", "register_parameter"),
    "MC506": ("scaled_dot_product_attention",),
}
LARGE_LITERAL = re.compile(r"-\s*(?:\d[\d.]*[eE]\+?0*(?:[5-9]|[1-9]\d)|\d{6}|10\s*\*\*)")
FLOAT_STRING = re.compile(r"float\(\s*['\"]\s*-\s*\d")


def _line_of(starts: list[int], offset: int) -> int:
    return bisect.bisect_right(starts, offset)


def _line_starts(source: str) -> list[int]:
    return [0, *(m.end() for m in re.finditer("\n", source))]


def occurrence_lines(source: str, tokens: tuple[str, ...]) -> set[int]:
    starts = _line_starts(source)
    out: set[int] = set()
    for token in tokens:
        at = source.find(token)
        while at != -1:
            out.add(_line_of(starts, at))
            at = source.find(token, at + 1)
    return out


def hot_lines(source: str, enabled: frozenset[str]) -> set[int]:
    tokens = tuple(t for code in sorted(enabled) for t in TRIGGERS.get(code, ()))
    out = occurrence_lines(source, tokens)
    if "MC501" in enabled:
        starts = _line_starts(source)
        for rx in (LARGE_LITERAL, FLOAT_STRING):
            out.update(_line_of(starts, m.start()) for m in rx.finditer(source))
    return out


def _is_hf_mask_name(name: str) -> bool:
    # Only the canonical name: `vision_attention_mask` and friends are often already inverted
    # (grounding_dino passes `~mask_flatten`).
    return name == "attention_mask"


def _is_key_padding_name(name: str) -> bool:
    return name == "key_padding_mask" or name.endswith("_key_padding_mask")


def _is_transposed(call: ast.Call, parent: ast.AST | None) -> bool:
    if isinstance(parent, ast.Attribute) and parent.attr in _TRANSPOSES:
        return True
    return (
        isinstance(parent, ast.Call)
        and func_name(parent) in _TRANSPOSES
        and call in parent.args
    )


def lint_tree(
    tree: ast.AST, enabled: frozenset[str], source: str = "", hot: set[int] | None = None
) -> list[Hit]:
    return Linter(enabled, source).run(tree, hot)


