"""The source rules: one iterative walk over a whole module's `ast`, with a value table per scope.

Every rule aims at high precision: it fires only on shapes of code that are wrong whatever
the surrounding program does, on positive evidence about a value (see `values.py`), and a
name that was reassigned (or handed to another function) before the suspicious use is given
the benefit of the doubt.
"""

from __future__ import annotations

import ast
import bisect
import copy
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, NamedTuple

from maskcheck.conventions import KEEP_WORDS, NOT_A_MASK_WORDS, declares_keep, name_hint
from maskcheck.lint.inline import template as inline_template
from maskcheck.lint.project import FLOAT16_WORDS, casts_half, mentions_float16
from maskcheck.lint.values import (
    ATTENTION_CLASSES,
    AUTOCAST,
    BF16_MAX,
    BOOL_ANNOTATED,
    COLLATED_MASK_KEYS,
    F_PAD_NAMES,
    FIELD,
    FLOAT_DTYPES,
    FOREIGN,
    FP16_MAX,
    HALF_DTYPES,
    KEEPS_VALUES,
    MODULE_ALIASES,
    PARAMETER_VALUES,
    TENSOR,
    UNKNOWN,
    Value,
    argument,
    call_name,
    describe,
    dotted,
    dtype_of,
    einops_operand,
    inline_parts,
    is_eq_zero,
    is_finfo_min,
    is_masking_value,
    is_module_call,
    is_neg_inf,
    is_none,
    is_true,
    is_wide_finfo_min,
    is_zero,
    key_axes_added,
    kwarg,
    last_name,
    mentions_mask,
    module_dotted,
    names_a_cache,
    names_log_sum_exp,
    note_import,
    number,
    one_minus,
    receiver,
    replace,
    root_name,
    self_attr,
    site,
    starts_at_zero,
    token_ids_name,
    torch_attention_class,
)
from maskcheck.lint.walk import FIELDS as WALK_FIELDS
from maskcheck.lint.walk import subnodes

MASK_KWARGS = frozenset(
    {"attn_mask", "mask", "src_mask", "tgt_mask", "memory_mask", "attention_mask"}
)
KEY_PADDING_KWARGS = frozenset(
    {"key_padding_mask", "src_key_padding_mask", "tgt_key_padding_mask",
     "memory_key_padding_mask"}
)
_ZEROS_FUNCS = frozenset({"zeros", "zeros_like", "new_zeros"})
_TRANSPOSES = frozenset({"T", "mT", "t", "transpose", "transpose_", "flip", "fliplr", "flipud"})
_NO_GRAD = frozenset({"no_grad", "inference_mode"})
# Functions whose aliases the value table follows (`from torch import triu as tu`).
_API_NAMES = frozenset({"scaled_dot_product_attention", "triu", "tril", "masked_fill",
                        "MultiheadAttention", "finfo", "where", "full", "ones", "zeros"})
# Names of score tensors: a bool mask added to one of these is a bug (MC509).
# nn.MultiheadAttention / nn.Transformer* keywords whose bool mask means True = masked.
_MHA_MASK_KWARGS = frozenset({"attn_mask", "mask", "src_mask", "tgt_mask", "memory_mask"})
_TORCH_KEY_PADDING_FUNCS = frozenset({"multi_head_attention_forward"})
_SCORE_WORDS = ("score", "logit", "attn", "att_", "weights", "dots", "energy", "sim")
# Words of a name that make it a count, a size or an index, whatever score word it holds.
_NOT_SCORE_TOKENS = frozenset({
    "len", "lens", "length", "lengths", "count", "counts", "num", "n", "total", "correct",
    "size", "sizes", "idx", "index", "indices", "ids", "loss", "losses", "acc", "sample",
    "samples", "class", "token", "tokens", "pos", "position", "positions"})
_SIM_TOKENS = frozenset({"sim", "sims", "similarity", "similarities", "cos"})
# nn.MultiheadAttention.forward's keywords (torch 2.13)
_MHA_FORWARD_KEYWORDS = frozenset({"query", "key", "value", "key_padding_mask", "need_weights",
                                   "attn_mask", "average_attn_weights", "is_causal"})
# nn.MultiheadAttention.forward(query, key, value, key_padding_mask, need_weights, attn_mask)
_MHA_KEY_PADDING_INDEX = 3
_MHA_ATTN_MASK_INDEX = 5
# Positional arguments of torch's attention modules: key padding masks (True = padding) by
# position and the name the documentation gives them, then the bool attn_mask positions.
_MODULE_MASK_POSITIONS: dict[str, tuple[dict[int, str], tuple[int, ...]]] = {
    "MultiheadAttention": ({_MHA_KEY_PADDING_INDEX: "key_padding_mask"},
                           (_MHA_ATTN_MASK_INDEX,)),
    "TransformerEncoder": ({2: "src_key_padding_mask"}, (1,)),
    "TransformerEncoderLayer": ({2: "src_key_padding_mask"}, (1,)),
    "TransformerDecoder": ({4: "tgt_key_padding_mask", 5: "memory_key_padding_mask"}, (2, 3)),
    "TransformerDecoderLayer": ({4: "tgt_key_padding_mask", 5: "memory_key_padding_mask"},
                                (2, 3)),
    "Transformer": ({5: "src_key_padding_mask", 6: "tgt_key_padding_mask",
                     7: "memory_key_padding_mask"}, (2, 3, 4)),
}
# Roots of GPU-kernel languages written in Python syntax (Triton, CuTe DSL, TileLang, Numba,
# Pallas, Helion): a function they decorate is not torch code (`1 - mask` on a Triton int1
# tensor is valid Triton; vllm's minimax_m3 index_topk kernels).
_KERNEL_DSLS = frozenset({"triton", "tl", "cute", "tilelang", "numba", "nb", "pl", "helion"})
# ... and the last names of their decorators under another root (`@cuda.jit`, `@T.prim_func`),
# never under torch's (`@torch.jit.script` is TorchScript: torch code).
_KERNEL_DECORATORS = frozenset({"jit", "autotune", "heuristics", "kernel", "prim_func"})
# Functions whose backward reads their output: filling it in place breaks autograd (MC505).
_SAVES_OUTPUT = frozenset({"softmax", "log_softmax", "sigmoid", "tanh", "exp", "relu"})
# Fills that raise on a float16 tensor (value cannot be converted without overflow).
_RAISING_FILLS = frozenset({"masked_fill", "masked_fill_", "full", "full_like", "new_full",
                            "fill_"})
_SUMMED_MIN = ("two masks filled with finfo.min added together: the sum overflows to -inf "
               "where both hide a key, so a row both hide everywhere becomes NaN (and one they "
               "hide in part no longer spreads evenly); combine them with torch.minimum or a "
               "bool mask")
# MC501's forms that give -inf in float16 instead of raising.
_NON_RAISING = frozenset({"an additive mask", "torch.where", "an indexed assignment"})
# A file that never mentions a half dtype, in a test directory, runs in float32 (MC501).
_HALF_WORDS = re.compile(r"float16|bfloat16|half|fp16|bf16|autocast|\bamp\b")


# Out-of-place torch functions and methods whose whole effect is their result (MC525).
_DISCARDED_FILLS = frozenset({"masked_fill", "triu", "tril", "where", "masked_scatter",
                              "index_fill", "logical_not", "bitwise_not"})
_FILLS_A_MASK = frozenset({"masked_fill", "where", "masked_scatter", "index_fill"})
# The positional arguments each of them takes as a tensor's method: a call with more is another
# object's method of the same name (moe_peft's `executor.index_fill(input, dim, index, value)`,
# which fills `input` in place).
_TENSOR_METHOD_ARGS = {"masked_fill": 2, "triu": 1, "tril": 1, "masked_scatter": 2,
                       "index_fill": 3, "logical_not": 0, "bitwise_not": 0}
_CELL_MARKER = re.compile(r"^# ?(?:%%|In\[)", re.MULTILINE)

class Edit(NamedTuple):
    """Replace the text between two (line, UTF-8 byte column) positions; lines are 1-based."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str


class Hit(NamedTuple):
    code: str
    line: int
    col: int  # 0-based UTF-8 byte offset, as ast gives it
    end_line: int
    message: str
    edit: Edit | None = None
    # A call's report of what the callee does with the argument, and the line of that use:
    # dropped when the use is reported with the same code (the mask read against its own name);
    # `echo_also`: the callee's own use where `echo_of` is a deeper one (the layer it hands to)
    echo_of: int | None = None
    echo_also: int | None = None
    # ... and the hand-overs between them (a model's forward -> its encoder -> a layer): the
    # encoder may be where the mask is read against its name (morse_cw_decoder's `== 0`)
    echo_via: tuple[int, ...] = ()


class _Product(NamedTuple):
    """MC520: a product of scores and a 0/1 mask, and the mask's text for the message."""

    node: ast.BinOp
    mask: str


@dataclass
class _Scope:
    kind: str  # "module" | "function" | "class"
    name: str = ""
    no_grad: bool = False
    fp16_guard: bool = False
    autocast: str | None = None  # the dtype of an enclosing `with torch.autocast(...)` block
    kernel: bool = False  # inside a Triton/CuTe/... kernel: not torch code, no rule applies
    # function scopes: (class name or "", function name), as calls of it are keyed (`_Callee`)
    key: tuple[str, str] | None = None
    params: tuple[str, ...] = ()  # function scopes: positional parameters, in order
    # function scopes: parameters rebound only to a reshape of themselves (`mask =
    # mask[:, None, None, :]`): still what the caller passed, laid out for the scores
    # (computed on first need, see `Linter._reshaped`)
    reshaped: frozenset[str] | None = None
    # ... or also to `p & other` (x-transformers' `mask = mask & ~causal_mask`):
    # what True means is the caller's still, for the roles that read a direction
    directed: frozenset[str] | None = None
    # function scopes: parameters whose default is a masking value (`fill=-1e10`)
    masking_defaults: dict[str, float] = field(default_factory=dict)
    method: bool = False  # a function defined in a class body that takes self (or cls) first
    in_class: bool = False  # defined in a class body: called as self.name(...), static or not
    values: dict[str, Value] = field(default_factory=dict)
    bool_triu: dict[str, ast.Call] = field(default_factory=dict)  # name -> triu(ones bool)
    assigned: set[str] = field(default_factory=set)
    zero_masks: dict[str, bool] = field(default_factory=dict)  # name -> nothing non-zero written
    param_attrs: set[str] = field(default_factory=set)  # class scopes: self.X = nn.Parameter
    buffer_attrs: set[str] = field(default_factory=set)  # class scopes: register_buffer("X")
    self_fills: list[tuple[str, ast.Call]] = field(default_factory=list)
    # Names written in place since they were bound (`m[m == 0] = -inf`, `m.masked_fill_(...)`,
    # handed to another function): what the value table says of them may be stale (MC508/MC520).
    mutated: set[str] = field(default_factory=set)
    # MC520: name -> the product that bound it (`a = a * keep`), a 0/1 mask times scores.
    zeroed: dict[str, _Product] = field(default_factory=dict)
    # MC520: softmax results of such a product -> the product; reported when the scope ends
    # unless the result is multiplied by a mask again (allennlp's masked_softmax renormalises).
    softmaxed: dict[str, _Product] = field(default_factory=dict)
    # Names handed on as `name[:, None, None, :]`, or to a function of this file that adds those
    # axes to its parameter (see `Linter._note_key_axes`): where, the value the name held then (a
    # rebinding since makes it another tensor), and that function's name (None for the former).
    key_axes: dict[str, tuple[tuple[int, int, int], Value | None, str | None]] = field(
        default_factory=dict)
    returns: list[Value] = field(default_factory=list)  # function scopes: what each return gives
    # Function scopes: each return that is a tuple, as what each of its elements gives.
    tuple_returns: list[tuple[Value, ...]] = field(default_factory=list)
    # Function scopes: each `yield` as what each element of its tuple gives (None: not a tuple).
    yields: list[tuple[Value, ...] | None] = field(default_factory=list)
    returns_none: bool = False  # function scopes: some return gives None (`return None`, `return`)
    node: ast.AST | None = None  # the function (or module) whose body this scope reads
    # Names this scope hands to softmax somewhere (read on demand): score tensors by their use.
    softmax_inputs: frozenset[str] | None = None
    # Names declared `nonlocal` / `global` here: a binding of them lands in the outer scope.
    outer_names: dict[str, str] = field(default_factory=dict)  # name -> "nonlocal" | "global"
    # Function scopes: what the body does with a parameter it has not rebound, as `_Role`s.
    param_roles: dict[tuple[int, str], _Role] = field(default_factory=dict)
    # Function scopes: name -> the expression it was bound to, read when a role asks whether
    # the name is a parameter as it is or inverted (`pad = attention_mask == 0`), and where a
    # finding goes to that expression (MC511's `key_mask = attention_mask[...] == 0`).
    derived: dict[str, ast.expr] = field(default_factory=dict)
    # Function scopes: parameter -> its default when that is a constant (`causal=True`,
    # `mask_value=-1e10`).
    defaults: dict[str, ast.expr] = field(default_factory=dict)
    # Names bound to a call of a function that may return None -> what it gives otherwise
    # (see `Value.result_unless_none`), read under `if name is not None:`.
    maybe_none: dict[str, Value] = field(default_factory=dict)
    # Function scopes: a parameter annotated with a class of this file -> the constants its
    # class body gives its fields (`cfg: DecoderConfig` with `causal: bool = True`).
    fields: dict[str, dict[str, Value]] = field(default_factory=dict)


class _Role(NamedTuple):
    """What a function does with a parameter: `role` is "key" / "causal" (SDPA's key and
    is_causal), "keep-sdpa" / "keep-fill" (a mask read as True = keep: SDPA's bool attn_mask,
    `masked_fill(m == 0, ...)`), "drop-sdpa" / "drop-fill" (read as True = masked: inverted into
    SDPA, or the fill condition itself). `use` is the expression where the body does it."""

    position: int  # among the arguments a caller passes (after self)
    role: str
    use: ast.AST
    param: str
    # False where the function only passes the parameter on to another function of this file
    # that does it (a wrapper): the use is then a hand-over, not a reading of the mask.
    direct: bool = True
    # For an attn_mask's layout handed on (see `Linter._note_layout_role`): the expression in
    # this function's own body that hands it on (`use` may be deeper).
    handed: ast.AST | None = None
    # For a mask handed on: where the function at the end of the chain reads it (THP's SDPA
    # under `EncoderLayer.slf_attn`), as `use` is for a direct role.
    deep: ast.AST | None = None
    # For an attn_mask's layout: the function is SDPA under another name (its body returns the
    # call, `attend = lambda q, k, v, m: sdpa(q, k, v, attn_mask=m)`), so its parameter takes
    # what SDPA's does and a caller's bare padding mask is the caller's slip.
    alias: bool = False
    # For a mask handed on: the lines of the hand-overs between `use` and `deep`.
    via: tuple[int, ...] = ()


# The `position` of a role a function's `**kwargs` carry to torch's attention (see
# `_note_forwarded_kwargs`): matched by no positional argument and no parameter name.
_KWARGS_POSITION = 1 << 20
# ... and of a role a function's `**kwargs` carry to a function of this file by one keyword
# (`def forward(self, x, **kwargs): self.attn(x, **kwargs)`, the attention's `attention_mask`):
# matched by that keyword at the calls.
_KWARGS_NAMED = _KWARGS_POSITION + 1


class _Param(NamedTuple):
    """A function's parameter, as its callers pass it: `position` counts after `self` (a
    @staticmethod has none); `owner` is the class whose methods call it as
    `self.function(...)` ("" for a function called by its name)."""

    function: str
    owner: str
    position: int
    name: str


class _Signature(NamedTuple):
    """A function's parameters as its callers fill them: positional ones after self (or cls),
    keyword-only ones, and the defaults (parameter -> expression)."""

    positional: tuple[str, ...]
    keyword_only: tuple[str, ...]
    defaults: dict[str, ast.expr]
    open_ended: bool  # takes *args or **kwargs
    # the tokenizer-named masks whose docstring gives them other axes (`_stated_other_axes`)
    stated_axes: frozenset[str] = frozenset()


# Where an argument comes from: (caller key's owner, its name, the caller's parameter, how):
# "" the parameter itself, an attribute name (`args.mask_value`), `_SLICED` (a range of it), or
# the argument's expression where it reshapes the parameter (`pad.repeat_interleave(n, 0)`),
# read again with the parameter's own seed.
_Origin = tuple[str, str, str, "str | ast.expr"]


class _Passed(NamedTuple):
    """One call of a function of this file: each argument's facts and, where the caller passes
    its own untouched parameter on, that parameter (caller key, name)."""

    args: tuple[tuple[Value, _Origin | None], ...]
    keywords: dict[str, tuple[Value, _Origin | None]]
    spread: bool  # `*args` / `**kw`: what it passes is not known
    # The calling function (its key) when the call hands on that function's own `**kwargs`:
    # the other keywords are what its callers gave it
    forwarded: tuple[str, str] | None = None


# What `_Passed` records as the origin of a literal None argument (or a None default left out).
_PASSED_NONE = ("", "", "", "<None>")


class _Exit(NamedTuple):
    what: str  # "scope" | "no_grad" | "fp16_guard" | "autocast" | "bind" | ...
    node: ast.AST | None = None


_Stack = list[tuple[ast.AST | _Exit, ast.AST | None]]
_Handler = Callable[[Any, ast.AST | None, _Stack], None]
# Nodes with nothing below them that a rule reads: never pushed (half of all nodes are these).
_LEAVES: frozenset[type] = frozenset({
    ast.Name, ast.Constant, ast.Load, ast.Store, ast.Del, ast.alias, ast.Pass, ast.Break,
    ast.Continue,
    *ast.operator.__subclasses__(), *ast.unaryop.__subclasses__(),
    *ast.cmpop.__subclasses__(), *ast.boolop.__subclasses__(),
})
# Fields that never hold a node worth walking: names and other strings or numbers, and the
# operator/context leaves. Leaving them out of the walk saves a getattr and two type tests each.
_NOT_WALKED = frozenset({
    "ctx", "id", "attr", "arg", "name", "asname", "module", "level", "names", "op", "ops",
    "is_async", "kind", "type_comment", "conversion", "simple", "tag", "kwd_attrs", "rest",
})
# `ast.If` pushes its own children (`Linter._enter_if`).
_FIELDS_CACHE: dict[type, tuple[str, ...]] = {ast.If: ()}


def _child_fields(kind: type) -> tuple[str, ...]:
    """A node type's walked fields, last first (the stack pops them in source order)."""
    fields = _FIELDS_CACHE.get(kind)
    if fields is None:
        fields = _FIELDS_CACHE[kind] = tuple(
            f for f in reversed(getattr(kind, "_fields", ())) if f not in _NOT_WALKED)
    return fields


# --- helpers over nodes -------------------------------------------------------------------


def decorated_no_grad(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if last_name(target) in _NO_GRAD:
            return True
    return False


def decorated_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`@triton.jit`, `@triton.autotune(...)`, `@cute.kernel`, `@cuda.jit`, a bare `@jit`: a GPU
    kernel. `@T.no_grad()` (torch imported as T) is not one."""
    for dec in node.decorator_list:
        name = dotted(dec.func if isinstance(dec, ast.Call) else dec)
        if name is None:
            continue
        parts = name.split(".")
        if parts[0] in _KERNEL_DSLS or (parts[-1] in _KERNEL_DECORATORS and parts[0] not in {
                "torch", "th"}):
            return True
    return False


def _is_static(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> bool:
    """A @staticmethod: its callers' arguments start at its first parameter (no self)."""
    return not isinstance(node, ast.Lambda) and any(
        last_name(dec) == "staticmethod" for dec in node.decorator_list)


def with_no_grad(node: ast.With | ast.AsyncWith) -> bool:
    for item in node.items:
        expr = item.context_expr
        if isinstance(expr, ast.Call):
            name = call_name(expr)
            if name in _NO_GRAD:
                return True
            if name == "set_grad_enabled" and expr.args and is_zero(expr.args[0]):
                return True
    return False


# Where autocast's device is named but not its dtype, the device's default (torch 2.13:
# torch.get_autocast_dtype("cuda") is float16, "cpu" bfloat16).
_AUTOCAST_DEVICE_DTYPE = {"cuda": "half", "cpu": "bf16", "xpu": "half"}
_AUTOCAST_VALUES = {None: UNKNOWN, "half": Value(dtype="half"), "bf16": Value(dtype="bf16"),
                    "maybe": Value(maybe_half=True)}


def autocast_dtype(node: ast.With | ast.AsyncWith) -> str | None:
    """The dtype `with torch.autocast(...)` (or `torch.cuda.amp.autocast()`) runs matmuls in;
    None where it is off (`enabled=False`) or the dtype cannot be told."""
    for item in node.items:
        expr = item.context_expr
        if not isinstance(expr, ast.Call) or call_name(expr) != "autocast":
            continue
        enabled = kwarg(expr, "enabled")
        if enabled is not None and isinstance(enabled, ast.Constant) and not enabled.value:
            return None
        dtype = kwarg(expr, "dtype")
        if dtype is not None:
            told = dtype_of(dtype)
            if told is None:
                # `dtype=amp_dtype`: autocast lowers only to float16 or bfloat16 (torch 2.13
                # disables itself with a warning for any other dtype), so one of the two
                return "maybe"
            return told if told in HALF_DTYPES else None
        where = module_dotted(expr.func) or ""
        if ".cuda.amp." in f".{where}" or ".cpu.amp." in f".{where}":
            return "half" if ".cuda." in f".{where}" else "bf16"
        device = expr.args[0] if expr.args else kwarg(expr, "device_type")
        if isinstance(device, ast.Constant) and isinstance(device.value, str):
            return _AUTOCAST_DEVICE_DTYPE.get(device.value)
        if device is not None:
            return "maybe"  # `torch.autocast(x.device.type)`: CUDA's float16 or the CPU's bf16
    return None


def _autocast_entered(node: ast.AST | None) -> str | None:
    """The dtype a `@contextmanager` function enters torch.autocast in (`with precision():`
    then runs its block under it); None for any other function."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not any(
            last_name(d) in {"contextmanager", "asynccontextmanager"}
            for d in node.decorator_list):
        return None
    for sub in ast.walk(node):
        if isinstance(sub, (ast.With, ast.AsyncWith)):
            lowered = autocast_dtype(sub)
            if lowered is not None:
                return lowered
    return None


def mentions_half(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in {"float16", "half"})
        or (isinstance(n, ast.Constant) and n.value in {"float16", "fp16", "half"})
        for n in subnodes(node)
    )


def is_ones(node: ast.AST, *, plain: bool = False) -> bool:
    if not (isinstance(node, ast.Call) and call_name(node) in {"ones", "ones_like", "new_ones"}):
        return False
    return is_module_call(node) and (not plain or kwarg(node, "dtype") is None)


def _is_true_matrix(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = call_name(node)
    if name in {"full", "full_like", "new_full"}:
        fill = argument(node, 1, "fill_value")
        return fill is not None and is_true(fill)
    if name in {"ones", "ones_like", "new_ones"} and is_module_call(node):
        return _is_bool_dtype(kwarg(node, "dtype"))
    base = receiver(node)
    if base is not None and is_ones(base, plain=True):
        if name == "bool":
            return True
        if name == "to" and node.args:
            return _is_bool_dtype(node.args[0])
        if name == "to":
            return _is_bool_dtype(kwarg(node, "dtype"))
    return False


def _literal_sum(node: ast.AST) -> float | None:
    """`-2 ** 32 + 1` (SASRec's and TiSASRec's padding score): a sum of number literals, read
    only as a hiding value (MC501 reads the literals it is given, not this sum)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))):
        return None
    left = number(node.left) if not isinstance(node.left, ast.BinOp) or isinstance(
        node.left.op, (ast.Pow, ast.Mult)) else _literal_sum(node.left)
    right = number(node.right)
    if left is None or right is None:
        return None
    total = left + right if isinstance(node.op, ast.Add) else left - right
    return None if math.isnan(total) else total


def _comprehended_module(value: ast.expr) -> ast.expr | None:
    """The element expression of `nn.ModuleList(<element> for _ in range(n))` (or of a list
    comprehension, or of nn.Sequential); None for anything else."""
    if isinstance(value, ast.Call) and call_name(value) in {"ModuleList", "Sequential"} and len(
            value.args) == 1 and not value.keywords and isinstance(
            value.args[0], (ast.ListComp, ast.GeneratorExp)):
        return value.args[0].elt
    return None


# Methods whose result is a view of the tensor they are called on: an in-place write to it is
# one to that tensor's storage, and bumps the version autograd checks (torch 2.13: a
# `sigmoid().view(...).permute(...)` filled in place makes backward raise). `reshape` is a view
# of a contiguous tensor, which a fresh activation is; `contiguous` after a permute copies.
_VIEW_METHODS = frozenset({"view", "view_as", "permute", "transpose", "unsqueeze", "squeeze",
                           "reshape", "t", "unflatten", "narrow", "select", "movedim"})


def _shared_storage_source(call: ast.Call) -> tuple[ast.Call, str]:
    """The call whose output `call`'s result shares storage with, through same-dtype casts
    (`_same_dtype_cast_source`) and views (`_VIEW_METHODS`), and a note for the message."""
    note = ""
    while True:
        source = _same_dtype_cast_source(call)
        if source is not call:
            call, note = source, note or (
                " (a cast to the dtype it already has returns the same tensor)")
            continue
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _VIEW_METHODS and isinstance(
                func.value, ast.Call):
            call, note = func.value, note or " (a view of it shares its storage)"
            continue
        return call, note


def _softmax_dims(node: ast.AST) -> set[float | None]:
    """The `dim` of every softmax / log_softmax under `node` (None where it is not given)."""
    dims: set[float | None] = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and call_name(call) in {"softmax", "log_softmax"}:
            method = receiver(call) is not None and not is_module_call(call)
            dim = argument(call, 0 if method else 1, "dim")
            dims.add(number(dim) if dim is not None else None)
    return dims


def _outer_axes(column: ast.AST, row: ast.AST) -> bool:
    """`a[:, None]` and `b[None, :]` (or `a.unsqueeze(-1)` / `.unsqueeze(1)` and
    `b.unsqueeze(0)` / `.unsqueeze(-2)`): a column and a row, whose sum is an outer one."""
    def index(node: ast.AST) -> list[str] | None:
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
            return ["N" if is_none(p) else ":" if isinstance(p, ast.Slice) and p.lower is None
                    and p.upper is None and p.step is None else "?" for p in node.slice.elts]
        if isinstance(node, ast.Call) and call_name(node) == "unsqueeze" and len(
                node.args) == 1 and not node.keywords:
            d = number(node.args[0])
            return [":", "N"] if d in {1, -1} else ["N", ":"] if d in {0, -2} else None
        return None
    return index(column) == [":", "N"] and index(row) == ["N", ":"]


def _same_dtype_cast_source(call: ast.Call) -> ast.Call:
    """`softmax(s, -1, dtype=torch.float32).to(q.dtype)` -> the softmax call. `.to(dtype)` and
    `.type_as(x)` return the tensor itself when it already has that dtype (float32, the default,
    for both), so an in-place fill of the result is one of softmax's saved output: backward
    raises (checked on torch 2.13). A device or a copy=True can copy, so only a lone dtype
    argument is read through."""
    func = call.func
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Call):
        return call
    if func.attr == "type_as" and len(call.args) == 1 and not call.keywords:
        return func.value
    if func.attr != "to" or len(call.args) + len(call.keywords) != 1:
        return call
    arg = call.args[0] if call.args else (
        call.keywords[0].value if call.keywords[0].arg == "dtype" else None)
    if arg is None:
        return call
    named = dotted(arg)
    if named is not None and (named.split(".")[-1] == "dtype" or named.endswith("_dtype")
                              or dtype_of(arg) == "fp32"):
        # (not an explicit half dtype: `softmax(s, dtype=torch.float32).to(torch.float16)`
        # always copies)
        return func.value
    return call


def _is_bool_dtype(node: ast.AST | None) -> bool:
    name = None if node is None else dotted(node)
    return name is not None and name.split(".")[-1] in {"bool", "bool_"}


def _is_wide_float(node: ast.AST | None) -> bool:
    """An explicit float32/float64 dtype: a -1e9 there is a sentinel, not an fp16 hazard."""
    name = None if node is None else dotted(node)
    return name is not None and name.split(".")[-1] in {"float", "float32", "float64", "double"}


def _is_transposed(call: ast.Call, parent: ast.AST | None) -> bool:
    if isinstance(parent, ast.Attribute) and parent.attr in _TRANSPOSES:
        return True
    return (
        isinstance(parent, ast.Call)
        and call_name(parent) in _TRANSPOSES
        and call in parent.args
    )


# A seeded parameter known only to be bool (see `_is_untouched`).
_BOOL_ONLY = Value(dtype="bool")
_INT_ONLY = Value(dtype="int")
# The roles of a mask handed to nn.MultiheadAttention's key_padding_mask, as it is or inverted.
_KEY_PADDING_ROLES = frozenset({"keep-mha", "drop-mha"})


def _attributes_written_outside(tree: ast.AST | None) -> frozenset[str]:
    """See `Linter._outside_writes`."""
    names: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            written = [t.value for t in targets if isinstance(t, ast.Subscript)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in _INPLACE_WRITES):
            written = [node.func.value]
        else:
            continue
        for base in written:
            while isinstance(base, ast.Subscript):
                base = base.value
            if isinstance(base, ast.Attribute) and not (
                    isinstance(base.value, ast.Name) and base.value.id == "self"):
                names.add(base.attr)  # (`self.router.available[i] = ...` is another object's)
    return frozenset(names)


# The list methods that add elements (`Linter._list_grows`).
_LIST_GROWS = frozenset({"append", "extend", "insert", "__setitem__"})
# In-place writes of a tensor's values (what `_attributes_written_outside` reads).
_INPLACE_WRITES = frozenset({"fill_", "masked_fill_", "copy_", "zero_", "index_fill_",
                             "scatter_", "index_put_"})


# What a tokenizer's encoding spread into a call (`model(**enc)`) gives for certain.
_TOKENIZER_KEYS = ("input_ids", "attention_mask")
# The masks a model's entry point takes as the tokenizer gives them (Hugging Face's
# `T5Stack.forward(input_ids, attention_mask, encoder_hidden_states, encoder_attention_mask)`).
_TOKENIZER_MASKS = frozenset({"attention_mask", "encoder_attention_mask"})


def _tokenizer_pair(names: Iterable[str], param: str, known: Value | None,
                    stated_axes: frozenset[str] = frozenset()) -> Value | None:
    """`forward(self, input_ids, attention_mask)`: the tokenizer's pair, 1 = real token (or
    Hugging Face's `inputs_embeds` in place of the ids, Decision Transformer's), for a mask
    parameter known no better than as a tensor; every call passing an int tensor (a
    collator's `torch.zeros(..., dtype=torch.long)`) says the same. So too the
    `encoder_attention_mask` beside them (an encoder-decoder's entry point, where a layer's
    parameter of that name is already inverted). None otherwise.

    Beside token ids it is the tokenizer's (batch, seq) mask too (DPR's BERT handing it down
    to SDPA as it is, MC515), unless the docstring gives it other axes (`stated_axes`: kornia's
    PaliGemma takes a (batch, 1, L, S) one). Not beside `inputs_embeds`: an encoder stack's
    `forward(inputs_embeds, attention_mask)` takes the model's expanded 4-D mask (CLIP's,
    vLLM's Idefics2)."""
    names = tuple(names)
    if param not in _TOKENIZER_MASKS or param not in names or "attention_mask" not in names or (
            not any(token_ids_name(n) or n == "inputs_embeds" for n in names)) or (
            known not in (*PARAMETER_VALUES, _INT_ONLY)):
        return None
    batch_seq = any(token_ids_name(n) for n in names) and param not in stated_axes
    return Value(hf_keep=True, dtype="int" if known == _INT_ONLY else None,
                 layout="BS" if batch_seq else None)


# A docstring's shape of more than two axes (`(batch, 1, L, S)`), or its words for one.
_MORE_AXES = re.compile(r"\([^()\n]*,[^()\n]*,[^()\n]*\)|\b[34]-?[dD]\b|broadcast|four.dim")


def _stated_other_axes(node: ast.FunctionDef | ast.AsyncFunctionDef,
                       params: Iterable[str]) -> frozenset[str]:
    """The tokenizer-named mask parameters whose entry in the function's docstring gives them
    more axes than (batch, seq)."""
    named = _TOKENIZER_MASKS.intersection(params)
    doc = ast.get_docstring(node, clean=True) if named and node.body else None
    if not doc:
        return frozenset()
    stated: set[str] = set()
    for param in named:
        for match in re.finditer(rf"^\s*`*{param}\b.*(?:\n(?![ \t]*`*\w+`*\s*[(:]).*)*",
                                 doc, re.MULTILINE):
            if _MORE_AXES.search(match.group(0)):
                stated.add(param)
    return frozenset(stated)


def _is_hf_mask_name(name: str) -> bool:
    # Only the canonical name: `vision_attention_mask` and friends are often already inverted
    # (grounding_dino passes `~mask_flatten`).
    return name == "attention_mask"


def _convention_base(node: ast.AST) -> ast.AST:
    """What a mask expression reads through indexing, reshapes and `.bool()`, which keep its
    convention: `attention_mask` of `attention_mask[:, None, None, :].bool()`."""
    while True:
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
            node = node.value  # `key_padding_mask[:, None, None, :]`
        elif isinstance(node, ast.Call) and receiver(node) is not None and (
                (not node.args and call_name(node) == "bool")
                or call_name(node) in _SHAPE_KEEPING or _cast_to_bool(node)):
            # `attention_mask.bool()`, `.to(torch.bool)`, `attention_mask.reshape(b * r, c)`:
            # the convention
            node = receiver(node) or node
        else:
            return node


def _cast_to_bool(call: ast.Call) -> bool:
    """`m.to(torch.bool)`, `m.to(dtype=torch.bool)`, `m.type(torch.bool)`: `.bool()` spelled out."""
    if call_name(call) not in {"to", "type"}:
        return False
    given = [*call.args, *(kw.value for kw in call.keywords if kw.arg == "dtype")]
    return len(given) == 1 and len(call.args) + len(call.keywords) == 1 and dtype_of(
        given[0]) == "bool"


def _is_key_padding_name(name: str) -> bool:
    return name == "key_padding_mask" or name.endswith("_key_padding_mask")


def _short(node: ast.AST) -> str:
    """A short text for a message: the expression, cut at 40 characters."""
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError):  # pragma: no cover - absurdly deep expressions
        return "the value"
    return text if len(text) <= 40 else text[:37] + "..."


_MASK_WORD = re.compile(r"mask|bias|causal|extended", re.IGNORECASE)
_BRACKETS = (ast.Subscript, ast.List, ast.ListComp)


def _named_mask(node: ast.AST, left: bool) -> bool:
    """`pad_mask`, `self.causal_mask`, `pad_mask[:, None]`: a mask by its own dotted name
    (MC508 asks for it on a cast float mask added to scores)."""
    if isinstance(node, ast.Subscript):
        if left and any(isinstance(n, _BRACKETS) for n in subnodes(node.slice)):
            return False
        node = node.value
    name = dotted(node)
    return name is not None and _MASK_WORD.search(name) is not None


def _names_a_mask(node: ast.AST) -> bool:
    """A mask by name (`mask`, `causal`, `extended`), not a `bias`: an additive mask times a
    mask stays a mask (LED, Funnel), but `bias * pad_bias` multiplies a learned pair bias
    (Biohub/esm's pair representation) by -inf."""
    return any(word in (dotted(n) or "").lower() for n in subnodes(node)
               for word in ("mask", "causal", "extended"))


_CLAMPS = frozenset({"clamp", "clamp_", "clip", "clamp_min", "maximum"})


def _is_clamped(node: ast.AST, parent: ast.AST | None) -> bool:
    """`(a + b).clamp(min=m)`, `torch.clamp(a + b, min=m)`: the overflow is undone at once."""
    if isinstance(parent, ast.Attribute) and parent.attr in _CLAMPS:
        return True
    return isinstance(parent, ast.Call) and call_name(parent) in _CLAMPS and node in parent.args


def _own_function_names(tree: ast.AST) -> set[str]:
    """The names of the functions the file defines (at any depth) that no import of the file
    binds: a bare call of one is that function, whatever torch name it shares."""
    defined: set[str] = set()
    imported: set[str] = set()
    for node in subnodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
    return defined - imported


def _clamps_to_finfo_min(tree: ast.AST, source: str = "") -> bool:
    """Whether the file clamps a tensor from below at finfo.min: `torch.max(w,
    torch.tensor(torch.finfo(w.dtype).min))`, `torch.maximum(...)`, `w.clamp(min=finfo.min)`,
    `w.clamp_min(finfo.min)`. A -inf there (two finfo.min masks summed) becomes finfo.min again.
    Such a call names `finfo` (`is_finfo_min` without a lookup reads the call's own text), so
    with the module's `source` only statements with a line that may name it are read."""
    def at_min(node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and call_name(node) in {"tensor", "as_tensor"} and node.args:
            node = node.args[0]
        return is_finfo_min(node)

    lines = _lines_that_may_name(source, "finfo", tree)
    if lines is not None and not lines:
        return False
    for node in _statements_on(tree, lines):
        if not isinstance(node, ast.Call):
            continue
        name = call_name(node)
        if name in {"max", "maximum"} and is_module_call(node) and len(node.args) == 2 and any(
                at_min(a) for a in node.args):
            return True
        if name in {"clamp", "clamp_", "clip"} and any(
                kw.arg == "min" and at_min(kw.value) for kw in node.keywords):
            return True
        if name in {"clamp_min", "clamp_min_"} and node.args and at_min(node.args[-1]):
            return True
    return False


def _statements_on(tree: ast.AST, lines: list[int] | None) -> Iterator[ast.AST]:
    """`subnodes(tree)`, less the statements (and all below them) without a line in `lines`
    (every node when `lines` is None), in the same order."""
    if lines is None:
        yield from subnodes(tree)
        return
    fields_of = WALK_FIELDS
    stack = [tree]
    pop, push = stack.pop, stack.append
    while stack:
        here = pop()
        if isinstance(here, ast.stmt) and not _has_line_within(
                lines, _first_line(here), here.end_lineno or here.lineno):
            continue  # no line of it names finfo
        yield here
        fields = fields_of.get(type(here))
        if fields is None:  # a node class the grammar table does not know
            stack.extend(ast.iter_child_nodes(here))
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


def _as_load(target: ast.expr) -> ast.expr:
    if isinstance(target, ast.Name):
        return ast.Name(target.id, ast.Load())
    if isinstance(target, ast.Attribute):
        return ast.Attribute(target.value, target.attr, ast.Load())
    assert isinstance(target, ast.Subscript)
    return ast.Subscript(target.value, target.slice, ast.Load())


def _is_cache_update(node: ast.AST) -> bool:
    """`cache.update(k, v, layer)` (transformers), `kv_cache.insert_kv(layer, k, v)` (nanochat),
    `k, v = cache.append(k, v)` (a dataclass cache): a cache object's method that stores the new
    keys and gives back all of them."""
    if not isinstance(node, ast.Call):
        return False
    name = call_name(node)
    if name is None or not (name in {"update", "append"} or name.startswith("insert")):
        return False
    base = receiver(node)
    text = (dotted(base) or "").lower() if base is not None else ""
    return "cache" in text or "past" in text


def _tensor_operand(node: ast.AST) -> bool:
    """Not a scalar: no number, no CONSTANT, no attribute like `self.scaling`. A single capital
    letter is a matrix in math-style code (ABMIL's attention logits `A`), not a constant."""
    if number(node) is not None or isinstance(node, ast.Attribute):
        return False
    return not (isinstance(node, ast.Name) and node.id.isupper() and len(node.id) > 1)


def _is_score_name(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return True
    if isinstance(node, ast.Call) and call_name(node) in {"matmul", "bmm", "einsum", "baddbmm"}:
        return True
    text = (last_name(node) or "").lower()
    matched = [word for word in _SCORE_WORDS if word in text]
    if not matched or "mask" in text:
        return False
    tokens = set(re.split(r"[^a-z]+", text))
    if tokens & _NOT_SCORE_TOKENS:
        return False  # `attn_lengths`, `sample_weights`, `n_correct_logits`: counts, not scores
    return matched != ["sim"] or not tokens.isdisjoint(_SIM_TOKENS)  # `sim`, not `simple`


def _is_attention_bias_name(node: ast.AST) -> bool:
    """`attn_bias`, `graph_attn_bias`, `attention_bias`: an additive bias of the attention
    scores, by name (not a mask's name: `attn_bias_mask`)."""
    tokens = set(re.split(r"[^a-z]+", (last_name(node) or "").lower()))
    return "bias" in tokens and bool(tokens & {"attn", "attention"}) and "mask" not in tokens


# A function or class about attention, by its name (`mask_attn_weights`, `SelfAttention`).
_ATTENTION_NAME = re.compile(r"(?i)attn|attention|score")


def _is_output_logits(node: ast.AST) -> bool:
    """Scores only by the word "logit" (`logit`, `action_logits`): a head's output over
    classes, tokens or actions, masked before argmax or sampling where some entry always
    survives, not an attention row that padding can empty."""
    text = (last_name(node) or "").lower()
    return "logit" in text and not any(
        word in text for word in _SCORE_WORDS if word != "logit")


class _Checkpoint(NamedTuple):
    """The walk between two top-level statements (see `Linter.rerun`)."""

    hits: int  # how many hits, `param_hits`, entered functions and recorded calls the walk
    param_hits: int  # had made
    entered: int
    calls: int
    # a copy of the module's scope and of the Linter's attributes named in `_CARRIED`; none
    # before a statement that defines no function (`_SIMPLE_STATEMENTS`)
    module: _Scope | None = None
    carried: tuple[Any, ...] | None = None


# The Linter's attributes that one top-level statement leaves to the next (besides the module's
# scope). Every other attribute is fixed for the module, a cache of what the module gives, the
# walk's output, recorded for `_seeded_parameters`, or keyed by an `if` or statement node that
# the walk sets and reads within that node (`test_rerun.py` checks that each is listed).
_CARRIED = ("_class_roles", "_class_attrs", "_class_fields", "_instance_fields", "_rebinds",
            "_roles_known",
            "_rsub_done", "_class_triu", "_nested_triu", "_triangles_told",
            "_casts_told", "_dispatches", "_anded_triangles")
# Fixed for the module or caches of it: the second walk takes the first's.
_SHARED = ("_tree", "_local_defs", "_local_classes", "_own_functions", "_clamps_to_min",
           "_lines", "_shown",
           "_softmax_inputs", "_parent_of", "_grad_methods", "_submodules", "_record_fields",
           "_file_float16", "_declared_methods", "_file_casts_half", "_registries",
           "_written_outside", "_instances", "_embedding_calls", "_key_axes_text",
           "_every_call_methods", "_set_fields", "_function_spans", "_aliases")
_CONTAINERS = (dict, set, list)
_SCOPE_CONTAINERS = tuple(f.name for f in fields(_Scope) if f.default_factory is not MISSING)
# Statements that hold no function definition: the second walk never has to start at one, so
# the first keeps no copy of the state before it (only the counts).
_SIMPLE_STATEMENTS = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign,
                      ast.Expr, ast.Pass, ast.Delete, ast.Assert, ast.Raise, ast.Global,
                      ast.Nonlocal)


def _copy_container(value: Any) -> Any:
    return value.copy() if type(value) in _CONTAINERS else value


def _copy_scope(scope: _Scope) -> _Scope:
    """A copy of the scope whose dicts, sets and lists are new (their items are not changed in
    place by the walk: Values are frozen, nodes are the module's)."""
    copy = object.__new__(_Scope)
    facts = copy.__dict__
    facts.update(scope.__dict__)
    for name in _SCOPE_CONTAINERS:
        facts[name] = facts[name].copy()
    return copy


def _same(a: Any, b: Any) -> bool:
    """`a == b`, and of the same types all the way down, dicts in the same order (iteration
    order reaches the order of some hits), floats with the same repr (-0.0 is not 0.0); nodes
    and other objects by identity unless they define equality."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        return len(a) == len(b) and all(
            x == y and type(x) is type(y) and _same(a[x], b[y]) for x, y in zip(a, b, strict=True))
    if kind is Value:
        facts, others = a.__dict__, b.__dict__
        return facts.keys() == others.keys() and all(
            _same(fact, others[name]) for name, fact in facts.items())
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if kind is float:
        return a == b and repr(a) == repr(b)
    if kind is _Scope:
        return _same(a.__dict__, b.__dict__)
    return bool(a == b)


# --- the walk -----------------------------------------------------------------------------


class Linter:
    """One pass over a module; `hits` fills in as rules fire."""

    def __init__(self, enabled: frozenset[str], source: str = "", path: str = "") -> None:
        self.enabled = enabled
        self.source = source
        self.hits: list[Hit] = []
        self.scopes: list[_Scope] = [_Scope("module")]
        self._lines: list[str] | None = None
        self.test_module = _is_test_path(path)
        # A notebook (or a `# %%` cell file) shows a cell's last expression: a top-level
        # `torch.triu(m)` there is a display, not a dropped result (MC525).
        self.displays = _CELL_MARKER.search(source) is not None
        self._shown: set[int] | None = None
        self.fp32_only = self.test_module and _HALF_WORDS.search(source) is None
        # If/else joins (see `_enter_if`): the body's last assignment of a name -> the name,
        # and the value it left.
        self._branch_marks: dict[int, list[str]] = {}
        self._branch_values: dict[tuple[int, str], Value] = {}
        self._joins: dict[int, dict[str, ast.Assign | ast.AnnAssign]] = {}
        # dtype guards (see `_enter_if`): the If -> the guarded name and its value before.
        self._narrowed: dict[int, tuple[str, bool, Value | None]] = {}
        # `if x is not None:` over a name in `_Scope.maybe_none`: the If -> x's value before.
        self._unset: dict[int, Value | None] = {}
        # `if attention_mask is None: attention_mask = torch.ones_like(input_ids)`: the
        # assignment (a default that masks nothing) -> the parameter it defaults.
        self._neutral_defaults: dict[int, str] = {}
        # Classes of this file -> what their forward does with its parameters (`_Role`s).
        self._class_roles: dict[str, tuple[_Role, ...]] = {}
        # (class, method) -> what the method does with its parameters, as `self.name(...)` calls
        # are checked; and, declared before the walk, those of methods called above their
        # definition (`forward` calling `self._attend` defined below it, see `first_walk`).
        self._method_roles: dict[tuple[str, str], tuple[_Role, ...]] = {}
        # each class's attributes bound to one of its methods (`_method_aliases`), by id
        self._aliases: dict[int, dict[str, tuple[str, ...]]] = {}
        # (class, method) -> what `self.method` gives in the methods below it (its roles, what
        # its returns give); declared, as roles are, for a call above the definition
        # (hyunwoongko/transformer's `forward` calling `self.make_src_mask` defined below it).
        self._method_values: dict[tuple[str, str], Value] = {}
        self._declared_methods: dict[str, dict[str, Value]] = {}
        self._file_casts_half: bool | None = None  # see `_casts_half`
        # The same for the module's functions (a helper at the bottom of the file).
        self._function_roles: dict[str, tuple[_Role, ...]] = {}
        # Classes of this file -> what their methods return, as `self.<method>` values.
        self._class_attrs: dict[str, dict[str, Value]] = {}
        # Classes of this file -> the constant flags and numbers their bodies bind
        # (a dataclass's `causal: bool = True`): what an instance's field holds by default.
        self._class_fields: dict[str, dict[str, Value]] = {}
        # Plain classes of this file (no base: a batch, a sample) -> the masks their
        # `__init__` binds to `self.<name>` and no other method rebinds (`batch.mask_cls` of
        # `batch = Batch(data)`).
        self._instance_fields: dict[str, dict[str, Value]] = {}
        # Names of the functions, methods and classes this file defines (see `run`).
        self._local_defs: set[str] = set()
        # Whether the module's text can hold `m[:, None, None, :]` (see `_adds_key_axes`).
        self._key_axes_text: bool | None = None
        # (line, name) of the module's calls of an embedding (see `_embedded_parameters`).
        self._embedding_calls: list[tuple[int, str]] | None = None
        self._written_outside: frozenset[str] | None = None  # see `_outside_writes`
        self._local_classes: dict[str, _ClassShape] = {}  # the classes among them
        # Names of the functions of this file (no import binds them): a bare call of one is
        # that function, not the torch API of the same name (TinyTorch's own
        # `scaled_dot_product_attention(Q, K, V, mask)` takes a 1/0 keep mask).
        self._own_functions: set[str] = set()
        # Whether the file clamps its scores back to finfo.min after adding a mask (early
        # transformers Llama / InternVL's QLLaMA: `torch.max(w, torch.tensor(finfo.min))`): the
        # -inf of two summed finfo.min masks is undone before the softmax there (MC513 silent).
        self._clamps_to_min = False
        self._roles_known = False  # whether any function or class above has `_Role`s
        self._rsub_done: set[int] = set()  # subtractions already reported by MC512 at a call
        # Functions of this file that rebind outer names (`nonlocal a; a = ...`) -> those names.
        self._rebinds: dict[str, frozenset[str]] = {}
        # Branches that end in return/raise/...: the values saved before them (see `_enter_if`).
        self._snapshots: dict[tuple[int, str], tuple[dict[str, Value], dict[str, _Product]]] = {}
        # The values the names an if/else joins held before the `if` (see `_enter_if`).
        self._before_if: dict[int, dict[str, Value | None]] = {}
        # ... and the values the names only the body binds held after the body, given back
        # after the else branch.
        self._after_body: dict[int, dict[str, Value | None]] = {}
        # MC501 on a function's own parameter: kept only if a call in this file may pass a
        # non-float32 tensor (see `lint_tree`); and, in the pass that reads the calls, the
        # parameters asked about -> the dtypes the calls pass.
        self.param_hits: list[tuple[Hit, _Param]] = []
        self.calls_to: dict[_Param, list[str | None]] | None = None
        # The module and, built only when MC510 is about to fire, each node's parent.
        self._tree: ast.AST | None = None
        self._function_spans: list[tuple[int, int]] | None = None
        # `causal & keep` expressions reported as an upper triangle AND-ed with a keep-mask
        # (MC521): SDPA given the result is the same bug, not a second one.
        self._anded_triangles: set[int] = set()
        self._set_fields: tuple[dict[str, set[str]], frozenset[str]] | None = None
        # Built on the first `is_causal=self.flag` (see `_causal_instance`).
        self._instances: dict[tuple[str, str, str], _CausalInstance] | None = None
        self._parent_of: dict[int, ast.AST] | None = None
        # Built on the first question about scores by use (see `_softmax_inputs_by_scope`).
        self._softmax_inputs: dict[int, frozenset[str]] | None = None
        # Call-site facts (see `_seeded_parameters`): in the first walk, every function and
        # class of this file by key -> how many definitions and their parameters, and every
        # call of one -> the facts of what it passes; in the second, the facts each parameter
        # holds at every call, set when its function is entered.
        self.record_calls = False
        self.defs: dict[tuple[str, str], list[_Signature]] = {}
        self.calls: dict[tuple[str, str], list[_Passed]] = {}
        # ... the same calls in the order the walk made them (a second walk that skips a
        # statement takes the first walk's calls of it: see `rerun`)
        self.call_log: list[tuple[tuple[tuple[str, str], ...], _Passed]] = []
        self.seeds: dict[tuple[str, str], dict[str, Value]] = {}
        # MC521 at the calls of a function: the triangles already reported (one bug, however
        # many calls pass the same triangle)
        self._triangles_told: set[tuple[int, int, int]] = set()
        # First walk: function key -> its parameters that have a `_Role` (checked at the calls,
        # so not given their calls' facts: one bug, one finding, where the call passes it).
        self.role_params: dict[tuple[str, str], set[str]] = {}
        # (function, parameter): a flag that chooses a triu_indices offset (`offset=0 if
        # mask_diagonal else 1`), seeded with what every call passes (see `_seeded_parameters`).
        self.offset_flags: set[tuple[tuple[str, str], str]] = set()
        # (function, parameter) read both ways in the function (`_contradicting_roles`) where
        # every call of this file passes a padding mask (True = padding): the keep reading is
        # the wrong one (set by `_seeded_parameters`, read by the seeded walks).
        self.padding_given: set[tuple[tuple[str, str], str]] = set()
        # (function, parameter): a mask parameter that defaults to None and that every call of
        # this file leaves out or passes None (`self.attn(x)` of `forward(self, x, mask=None)`):
        # its `if mask is not None:` body never runs in this file (see `_never_given`).
        self.never_given: set[tuple[tuple[str, str], str]] = set()
        # ... and the roles of each such parameter. A parameter whose only roles are arithmetic
        # on the scores (`scores + m`, `scores * m`: `_USE_SITE_ROLES`) is given its calls'
        # facts all the same, and where every call agrees the finding is made at that use in
        # the function's body, not at the calls (second walk: `use_site`).
        self.role_kinds: dict[tuple[tuple[str, str], str], set[str]] = {}
        self.use_site: frozenset[tuple[tuple[str, str], str]] = frozenset()
        # bool triu calls read inside a larger right-hand side, by node id (see `_triu`)
        self._nested_triu: dict[int, ast.Call] = {}
        # First walk: function key -> its parameters' values on entry (annotations, the
        # tokenizer pair): a call's facts that add nothing to them need no second walk.
        self.entry_values: dict[tuple[str, str], dict[str, Value]] = {}
        # argparse options of this file -> the facts of their default (None: defined twice)
        self.option_defaults: dict[str, Value | None] = {}
        self._class_triu = False  # some class holds a bool triu on self (see `_triu`)
        # Class node -> the methods its forward / __call__ / training_step reach through
        # `self.name(...)` calls (see `_on_grad_path`).
        self._grad_methods: dict[int, frozenset[str]] = {}
        # Per class (by node id): the methods that run on every call (see `_runs_every_call`).
        self._every_call_methods: dict[int, frozenset[str]] = {}
        # The classes of this file that another class of it instantiates, and those that
        # define forward (see `_file_model`; made on the first unannotated `model`).
        self._submodules: tuple[frozenset[str], frozenset[str]] | None = None
        # NamedTuple and dataclass classes of the file -> their fields (see `_note_record`).
        self._record_fields: dict[str, tuple[str, ...]] = {}
        # Registries of this file's classes (their dict literals, by id) -> the classes they
        # hold (see `_class_registries`).
        self._registries: dict[int, tuple[str, ...]] = {}
        # Casts to a float 0/1 mask reported at a direct use in their sight (see
        # `_reported_at_cast`): a hand-over of the same mask is then reported at its call.
        self._casts_told: set[tuple[int, int, int]] = set()
        # Whether a value of this walk holds definitions picked at run time (`element_defs`:
        # a registry's classes, a ModuleDict's, a function table's): only then can a call of a
        # plain name or attribute be a call of several (a shortcut, see `_callee_keys`).
        self._dispatches = False
        # Whether the file itself speaks of float16 (see `_large_negative`); read on first use.
        self._file_float16: bool | None = None
        # First walk of a module (see `rerun`): the state before each top-level statement and
        # after the last, with how many hits, `param_hits` and entered functions came before;
        # and the hits in the order the walk made them.
        self.checkpoints: list[_Checkpoint] | None = None
        self.walked_hits: list[Hit] = []
        self.entered: list[tuple[str, str]] = []

    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    # --- the value table ---

    def lookup(self, name: str) -> Value:
        """A name's value as Python would find it: this scope, enclosing functions, module."""
        if name == AUTOCAST:
            return _AUTOCAST_VALUES[self.scope.autocast]
        if name.startswith("self."):
            return self._lookup_self(name[5:])
        if name.startswith("super()."):  # the base class's method, in the class's scope
            return self._lookup_self(name[8:], "super().")
        if name.startswith(FIELD):  # `inputs.src_mask == 0` of `inputs: EncoderInputs`
            return self._record_field(name[len(FIELD):]) or UNKNOWN
        for depth, scope in enumerate(reversed(self.scopes)):
            if depth and scope.kind == "class":
                continue
            found = scope.values.get(name)
            if found is not None:
                return found
            if name in scope.assigned:
                return UNKNOWN
        return self._own_static(name)

    def _own_static(self, name: str) -> Value:
        """`SelfAttentionMask.get_mask(n)` inside SelfAttentionMask's own methods, before the
        class is done and bound: its staticmethod, as `self.get_mask(n)` reads it."""
        owner, _, attr = name.partition(".")
        cls = self._class_scope()
        if not attr or "." in attr or cls is None or cls.name != owner:
            return UNKNOWN
        shape = self._local_classes.get(owner)
        return self._lookup_self(attr) if shape is not None and attr in shape.static else UNKNOWN

    def _record_field(self, text: str) -> Value | None:
        """A field of a record by its dotted text: `inputs.src_mask` of `inputs: EncoderInputs`,
        `cfg.mask.fill_value` of `cfg: ModelConfig` whose `mask: MaskConfig` field has that
        default, or `self.cfg.x` of an `__init__` that stored `self.cfg = cfg` (see
        `_Scope.fields`); None where no record holds it, or the name was rebound."""
        parts = text.split(".")
        if parts[0] == "self":
            cls = self._class_scope()
            fields = cls.fields.get(".".join(parts[:2])) if cls is not None else None
            rest = parts[2:]
        else:
            fields = None if parts[0] in self.scope.assigned else self.scope.fields.get(
                parts[0])
            rest = parts[1:]
        return fields.get(".".join(rest)) if fields is not None and rest else None

    def _lookup_self(self, attr: str, prefix: str = "self.") -> Value:
        key = prefix + attr
        for scope in reversed(self.scopes):
            if key in scope.values:
                found = scope.values[key]
                if (found.all_ones or found.zeros) and attr in self._outside_writes():
                    # `router.expert_available[ids] = False` from outside the class: the
                    # buffer made of ones (zeros) holds other values once that runs
                    return replace(found, all_ones=False, zeros=False)
                return found
            if scope.kind == "class":
                return UNKNOWN
        return UNKNOWN

    def _outside_writes(self) -> frozenset[str]:
        """The attribute names the file writes in place through another object than `self`
        (`layer.router.expert_available[ids] = False`, `model.mask.fill_(0)`)."""
        if self._written_outside is None:
            self._written_outside = _attributes_written_outside(self._tree)
        return self._written_outside

    def value(self, node: ast.AST) -> Value:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "self":
                return self.lookup("self." + node.attr)
            if self.option_defaults and self.lookup(node.value.id).namespace:
                # `args.mask_value` of `add_argument("--mask-value", default=-1e9)`: what runs
                # unless the command line says otherwise
                return self.option_defaults.get(node.attr) or UNKNOWN
            fields = self.scope.fields.get(node.value.id)
            if fields is not None and node.attr in fields and (
                    node.value.id not in self.scope.assigned):
                return fields[node.attr]  # `cfg.causal` of `cfg: Config` (see `_Scope.fields`)
            if self._instance_fields and (held := self._instance_fields.get(
                    self.lookup(node.value.id).module or "", {}).get(node.attr)) is not None and (
                    node.attr not in self._outside_writes()):
                return held  # `batch.mask_cls` of `batch = Batch(data)`
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and (
                chain := dotted(node)) is not None:
            held = self._record_field(chain)
            if held is not None:
                return held
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.List)) and self._local_classes:
            # `Encoder([EncoderLayer(AttentionLayer(...)) for _ in range(n)])` (Informer's and
            # the Anomaly Transformer's layout): instances of a class of this file, which the
            # callee holds in a ModuleList (`_container_facts`)
            made = _made_instances(node)
            if made in self._local_classes:
                return Value(element_module=made, element_roles=self._class_roles.get(made, ()))
        if isinstance(node, ast.Call) and self._local_classes and (
                wrapped := _wrapped_module(node)) is not None:
            # `DGAExportWrapper(model.eval())`, `DDP(LithologyNet().to(device))`: the module,
            # whose forward the wrapper's call runs (read from the innermost expression only:
            # `mask.float().to(x.dtype)` chains of tensors are common and described below)
            while isinstance(wrapped, ast.Call) and (inner := _wrapped_module(wrapped)):
                wrapped = inner
            built = _built_module(wrapped)
            if built in self._local_classes:
                return Value(module=built, param_roles=self._class_roles.get(built, ()))
            held = self.lookup(wrapped.id) if isinstance(wrapped, ast.Name) else self.lookup(
                "self." + wrapped.attr) if isinstance(wrapped, ast.Attribute) and isinstance(
                wrapped.value, ast.Name) and wrapped.value.id == "self" else self.value(
                wrapped) if isinstance(wrapped, ast.Call) and isinstance(
                wrapped.func, ast.Name) and wrapped.func.id in self._local_defs else UNKNOWN
            if held.module in self._local_classes:  # (`train().eval()`: what `train` returns)
                return held
        facts = describe(node, self.lookup)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and not facts.additive:
            # an additive mask plus a finite bias that is not the scores (ALiBi's
            # `future_mask + alibi`) is still an additive mask: -inf stays -inf
            for mask, bias in ((node.left, node.right), (node.right, node.left)):
                other = describe(bias, self.lookup)
                if describe(mask, self.lookup).additive and not other.additive and (
                        other.dtype != "bool") and not self._is_scores(bias):
                    return replace(facts, additive=True)
        return facts

    def _callee_text(self, call: ast.Call) -> str:
        """How a message names the function a call calls: its name, else its text
        (`self.layers[i]` of a ModuleList element)."""
        return call_name(call) or self._text(call.func)

    def _text(self, node: ast.AST) -> str:
        """The node's own source text (cut at 40 characters), for messages and fixes."""
        text = self._segment(node)
        if text is None or "\n" in text:  # a message is one line: unparse spans of several
            return _short(node)
        return text if len(text) <= 40 else text[:37] + "..."

    def _segment(self, node: ast.AST) -> str | None:
        line, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if line is None or end is None or col is None or end_col is None or end - line > 20:
            return None
        if self._lines is None:
            self._lines = self.source.split("\n")
        if end > len(self._lines):
            return None
        chunk = [s.encode() for s in self._lines[line - 1:end]]
        if len(chunk) == 1:
            return chunk[0][col:end_col].decode("utf-8", "replace")
        chunk[0], chunk[-1] = chunk[0][col:], chunk[-1][:end_col]
        return b"\n".join(chunk).decode("utf-8", "replace")

    def _paren(self, node: ast.AST) -> str:
        text = self._segment(node) or _short(node)
        simple = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
        return text if simple else f"({text})"

    def bind(self, name: str, value: Value) -> None:
        if value:
            self.scope.values[name] = value
        else:
            self.scope.values.pop(name, None)

    def report(self, code: str, node: ast.AST, message: str, edit: Edit | None = None, *,
               echo_of: int | None = None, echo_also: int | None = None,
               echo_via: tuple[int, ...] = ()) -> None:
        if code in self.enabled and not self.scope.kernel:
            line = getattr(node, "lineno", 1)
            self.hits.append(Hit(code, line, getattr(node, "col_offset", 0),
                                 getattr(node, "end_lineno", None) or line, message, edit,
                                 echo_of, echo_also, echo_via))

    def run(self, tree: ast.AST) -> list[Hit]:
        self._prepare(tree)
        handlers = self._handlers()
        marks = self.checkpoints
        if marks is None or not isinstance(tree, ast.Module):
            self._walk([(tree, None)], handlers)
        else:
            # The module's statements one by one, as the walk of the module pops them, with
            # the state before each (see `rerun`).
            for statement in tree.body:
                marks.append(self._checkpoint(not isinstance(statement, _SIMPLE_STATEMENTS)))
                if type(statement) not in _LEAVES:
                    self._walk([(statement, tree)], handlers)
            marks.append(self._checkpoint())
            self._walk([(t, tree) for t in reversed(tree.type_ignores)], handlers)
            self.walked_hits = list(self.hits)
        return self._finish()

    def _prepare(self, tree: ast.AST) -> None:
        self._tree = tree
        self._local_defs, self._local_classes = _defined_names(tree)
        self._own_functions = _own_function_names(tree) if (
            "def scaled_dot_product_attention" in self.source) else set()
        # Result-identical text test: a base or decorator `_record_classes` accepts is spelled,
        # or imported under another name, with one of these words somewhere in the file.
        self._record_fields = _record_classes(tree) if (
            "NamedTuple" in self.source or "dataclass" in self.source) else {}
        self._registries = _class_registries(tree, self._local_classes) if isinstance(
            tree, ast.Module) and self._local_classes else {}
        self._clamps_to_min = "finfo" in self.source and (
            "clamp" in self.source or "max" in self.source) and _clamps_to_finfo_min(
                tree, self.source)
        self.scopes[0].node = tree

    def _finish(self) -> list[Hit]:
        for scope in self.scopes:
            self._flush_softmaxed(scope)
        self.hits.sort(key=lambda h: (h.line, h.col, h.code))
        # One finding per code and place, the first reported: MC514 is reported where the
        # layout is made, from every use (a second walk may take one report from the first
        # walk's statements and make another); a mask a partial binds is checked where it is
        # bound and where it is called; a fill of a parameter every call gives a keep-mask is
        # reported by its own reading and by the calls'.
        kept: list[Hit] = []
        made: set[tuple[str, int, int]] = set()
        # ... and a call's report of a use that is reported itself, with the same code
        # (anywhere in the function that holds the use: its report may sit on the line where
        # the mask it hands over is made, `pad = (attention_mask == 0)[:, None, None, :]`)
        used = {(hit.code, hit.line) for hit in self.hits if hit.echo_of is None}
        for hit in self.hits:
            key = (hit.code, hit.line, hit.col)
            if key in made or any(echo is not None and (
                    (hit.code, echo) in used or self._reported_around(hit.code, echo, used))
                    for echo in (hit.echo_of, hit.echo_also, *hit.echo_via)):
                continue
            made.add(key)
            kept.append(hit)
        self.hits = kept
        return self.hits

    def _reported_around(self, code: str, echo: int, used: set[tuple[str, int]]) -> bool:
        """Whether the innermost function around the line an echo names (`Hit.echo_of`,
        `Hit.echo_also`) holds a finding of the echo's code that is no echo itself."""
        if self._function_spans is None:  # built once, at the first echo (echoes are rare)
            self._function_spans = [
                (node.lineno, node.end_lineno or node.lineno) for node in ast.walk(self._tree)
                if isinstance(node, _FUNCTION_NODES)] if self._tree is not None else []
        around = [span for span in self._function_spans
                  if span[0] <= echo <= span[1]]
        if not around:
            return False
        start, end = max(around)  # the innermost: the one that starts last
        return any(used_code == code and start <= line <= end for used_code, line in used)

    def _walk(self, stack: _Stack, handlers: dict[type, _Handler]) -> None:
        """Walk what `stack` holds, and all below it, until it is empty."""
        push, pop = stack.append, stack.pop
        fields_of, leaves = _FIELDS_CACHE, _LEAVES
        while stack:
            node, parent = pop()
            if isinstance(node, _Exit):
                self._exit(node)
                continue
            kind = type(node)
            handler = handlers.get(kind)
            if handler is not None:
                handler(node, parent, stack)
            fields = fields_of.get(kind)
            if fields is None:
                fields = _child_fields(kind)
            for name in fields:
                value = getattr(node, name, None)
                if value is None:
                    continue
                if type(value) is list:
                    for child in reversed(value):
                        if child is not None and type(child) not in leaves:
                            push((child, node))
                elif type(value) not in leaves:
                    push((value, node))

    # --- walking again only what call-site facts change ---

    def _checkpoint(self, state: bool = True) -> _Checkpoint:
        """Between two top-level statements: the counts and (with `state`) a copy of the state
        the rest of the walk reads."""
        counts = len(self.hits), len(self.param_hits), len(self.entered), len(self.call_log)
        if not state:
            return _Checkpoint(*counts)
        (module,) = self.scopes
        return _Checkpoint(*counts, _copy_scope(module),
                           tuple(_copy_container(getattr(self, name)) for name in _CARRIED))

    def _restore(self, checkpoint: _Checkpoint) -> None:
        """Take the state of `checkpoint`: a copy where the first walk's checkpoints serve
        another walk after this one (`record_calls`: the seeded walk that may be followed by a
        third), else its containers themselves (used up: each serves once)."""
        assert checkpoint.module is not None and checkpoint.carried is not None
        if self.record_calls:
            self.scopes = [_copy_scope(checkpoint.module)]
            for name, value in zip(_CARRIED, checkpoint.carried, strict=True):
                setattr(self, name, _copy_container(value))
            return
        self.scopes = [checkpoint.module]
        for name, value in zip(_CARRIED, checkpoint.carried, strict=True):
            setattr(self, name, value)

    def _at(self, checkpoint: _Checkpoint) -> bool:
        """Whether the state now is the state of `checkpoint`, fact for fact and in order."""
        if checkpoint.module is None or checkpoint.carried is None:
            return False  # not kept: the walk goes on
        (module,) = self.scopes
        return _same(module.__dict__, checkpoint.module.__dict__) and all(
            _same(getattr(self, name), value)
            for name, value in zip(_CARRIED, checkpoint.carried, strict=True))

    def rerun(self, tree: ast.Module, first: Linter) -> list[Hit]:
        """The hits `run(tree)` gives with `self.seeds`, walking only the top-level statements
        it must: one that enters a function with seeds, or one that starts from a state the
        first walk (`first`: `record_calls` and `checkpoints` on, no argparse option, no module
        alias) did not have there, or may not have had (it kept no copy before it). Every
        other statement starts from the state the first walk had before it, and the walk of a
        statement depends on nothing else (the seeds are read only on entering a function;
        recording the calls only reads; the caches are the same for the same module): it does
        what it did in the first walk. So its hits and `param_hits` are the first walk's, in
        the same order, and the state after it is the first walk's next checkpoint."""
        for name in _SHARED:
            setattr(self, name, getattr(first, name))
        self.scopes[0].node = tree
        marks = first.checkpoints
        assert marks is not None and len(marks) == len(tree.body) + 1
        if self.record_calls:
            # What a skipped statement records is the first walk's record of it; a statement
            # walked again records its functions anew (the third walk: see `lint_tree`).
            self.defs = {key: list(signatures) for key, signatures in first.defs.items()}
            self.entry_values = dict(first.entry_values)
            self.offset_flags = set(first.offset_flags)
        handlers = self._handlers()
        synced, behind = True, False  # the state is the first walk's / it is not set yet
        for index, statement in enumerate(tree.body):
            start, end = marks[index], marks[index + 1]
            if synced and not any(key in self.seeds
                                  for key in first.entered[start.entered:end.entered]):
                self.hits.extend(first.walked_hits[start.hits:end.hits])
                self.param_hits.extend(first.param_hits[start.param_hits:end.param_hits])
                if self.record_calls:
                    for keys, passed in first.call_log[start.calls:end.calls]:
                        self.call_log.append((keys, passed))
                        for key in keys:
                            self.calls.setdefault(key, []).append(passed)
                behind = True
                continue
            if self.record_calls:
                self._forget_records(first.entered[start.entered:end.entered])
            if behind:
                self._restore(start)
                behind = False
            if type(statement) not in _LEAVES:
                self._walk([(statement, tree)], handlers)
            synced = self._at(end)
        if behind:
            self._restore(marks[-1])
        self._walk([(t, tree) for t in reversed(tree.type_ignores)], handlers)
        return self._finish()

    def _forget_records(self, entered: Sequence[tuple[str, str]]) -> None:
        """Before a statement is walked again: drop what the first walk recorded of the
        functions it enters (one signature per entry), which the walk records anew."""
        for key in entered:
            signatures = self.defs.get(key)
            if signatures:
                signatures.pop()
                if not signatures:
                    del self.defs[key]
            self.entry_values.pop(key, None)

    def _handlers(self) -> dict[type, _Handler]:
        """Node type -> what to do on entering it; every other node is only walked through."""
        bind = self._push_bind
        return {
            ast.Call: lambda n, p, s: self._call(n, p),
            ast.Assign: bind, ast.AnnAssign: bind, ast.AugAssign: bind, ast.For: self._enter_for,
            ast.AsyncFor: bind, ast.Import: bind, ast.ImportFrom: bind, ast.NamedExpr: bind,
            ast.Global: self._declare_outer, ast.Nonlocal: self._declare_outer,
            ast.BinOp: lambda n, p, s: self._binop(n, p),
            ast.UnaryOp: lambda n, p, s: self._invert(n),
            ast.Return: lambda n, p, s: self._return(n),
            ast.Yield: lambda n, p, s: self._yield(n),
            ast.FunctionDef: self._enter_function, ast.AsyncFunctionDef: self._enter_function,
            ast.Lambda: self._enter_function,
            ast.ClassDef: self._enter_class,
            ast.If: self._enter_if,
            ast.With: self._enter_with, ast.AsyncWith: self._enter_with,
            ast.Assert: bind,
        }

    @staticmethod
    def _push_bind(node: ast.AST, parent: ast.AST | None, stack: _Stack) -> None:
        # Bound after the right-hand side is read: `mask = torch.triu(mask)` reads the old one.
        stack.append((_Exit("bind", node), None))

    def _enter_for(self, node: ast.AST, parent: ast.AST | None, stack: _Stack) -> None:
        assert isinstance(node, ast.For)
        self._push_bind(node, parent, stack)
        target, source = node.target, node.iter
        if (isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(source, ast.Call)
                and isinstance(source.func, ast.Name) and source.func.id == "enumerate"
                and len(source.args) == 1 and not source.keywords):
            target, source = target.elts[1], source.args[0]  # `for i, layer in enumerate(...)`
        if (isinstance(target, ast.Tuple) and isinstance(source, ast.Call)
                and isinstance(source.func, ast.Name) and source.func.id == "zip"
                and len(source.args) == len(target.elts) and not source.keywords):
            # `for block, bias in zip(self.blocks, self.biases)`: each name, one container's
            pairs = list(zip(target.elts, source.args, strict=True))
        else:
            pairs = [(target, source)]
        batches = self.value(source).element_parts if isinstance(target, ast.Tuple) else ()
        if batches and isinstance(target, ast.Tuple) and len(batches) == len(target.elts):
            # `for x, frame_mask, y in loader:` of `DataLoader(ds, collate_fn=collate)`
            for element, part in zip(target.elts, batches, strict=True):
                if isinstance(element, ast.Name) and isinstance(part, Value) and part:
                    self.bind(element.id, part)
        for one, container in pairs:
            if isinstance(one, ast.Name):
                self._bind_element(one.id, self.value(container))

    def _bind_element(self, name: str, iterated: Value) -> None:
        """Bind a loop variable to what one element of the iterated container is."""
        for key, part in iterated.element_keys:
            self.bind(f'{name}["{key}"]', part)  # `layer["attn"](x, attn_mask=m)`
        roles, module = iterated.element_roles, iterated.element_module
        defs = iterated.element_defs if module is None else ()
        if roles or module or defs:  # `for layer in self.layers:` over instances of a class
            # (of one class of this file, or of any class a registry gives: then a call is a
            # call of each)
            self.bind(name, Value(param_roles=roles, module=module, element_defs=defs))
        elif iterated.element_mha:  # ... over torch attention modules
            self.bind(name, Value(mha=True, module=iterated.element_mha))
        elif iterated.element_grad:  # ... over the Parameters of an nn.ParameterList
            self.bind(name, Value(grad=True))

    def _enter_class(self, node: ast.AST, parent: ast.AST | None, stack: _Stack) -> None:
        assert isinstance(node, ast.ClassDef)
        self.scope.assigned.add(node.name)
        # A torch.autograd.Function runs its forward with grad disabled: in-place fills there
        # break nothing (DeBERTa's XSoftmax zeroes its softmax output in place, then saves it).
        scope = _Scope("class", name=node.name, node=node, no_grad=self.scope.no_grad or any(
            (dotted(base) or "").split(".")[-1] == "Function" and "autograd" in (
                dotted(base) or "autograd") for base in node.bases))
        for base in node.bases:  # a mixin of this file above: its methods are `self.` ones too
            if isinstance(base, ast.Name) and base.id in self._class_attrs:
                inherited = self._class_attrs[base.id]
                scope.values.update(inherited)
                scope.values.update({"super()." + key[5:]: value for key, value in (
                    inherited.items()) if key.startswith("self.")})
        for method, known in self._declared_methods.get(node.name, {}).items():
            scope.values["self." + method] = known  # defined below its calls
        self.scopes.append(scope)
        stack.append((_Exit("scope"), None))

    def _enter_if(self, node: ast.AST, parent: ast.AST | None, stack: _Stack) -> None:
        assert isinstance(node, ast.If)
        if not self.scope.fp16_guard and mentions_half(node.test):
            self.scope.fp16_guard = True
            stack.append((_Exit("fp16_guard"), None))
        tested = _not_none_test(node.test) if self.scope.kind == "function" else None
        if tested is not None and ((
                tested in self.scope.assigned and self._none_just_before(node, parent, tested))
                or (self.seeds and (self.scope.key, tested) in self.never_given
                    and tested not in self.scope.assigned)):
            # `attn_bias = None` then `if attn_bias is not None:` with nothing between that
            # binds it: the body never runs (ComfyUI's ACE-Step attention, copied from code
            # where the name was a parameter). In a function only: a module's `x = None` is
            # a setting a user edits (and what a parameter's default reads as at top level).
            # So does the body for a parameter no call of this file gives (`never_given`).
            _push_statements(stack, node.orelse, node)
            return
        # The walk reads the else branch after the body, so a name bound in both would keep the
        # else branch's value (coqui's bark: `is_causal = False` with a cache, else True).
        # After the if, such a name holds only the facts both branches agree on.
        # A branch that ends in return/raise/continue/break leaves nothing behind it: the code
        # after the `if` runs only on the other path (`if cache is not None: k = cat(...);
        # return sdpa(q, k, v, mask)` then `sdpa(q, k, v, is_causal=True)` sees the plain keys).
        guard = _not_bool_branch(node.test)
        if guard is None and (_ends_flow(node.body) or _ends_flow(node.orelse)):
            # Popped in this order: save0, body, [save1], load0, else, [load1].
            if _ends_flow(node.body):
                _push_statements(stack, node.orelse, node)  # runs from the values before
            else:
                stack.append((_Exit("load1", node), None))  # the body's values go on
                _push_statements(stack, node.orelse, node)
            stack.append((_Exit("load0", node), None))
            if not _ends_flow(node.body):
                stack.append((_Exit("save1", node), None))
            _push_statements(stack, node.body, node)
            stack.append((_Exit("save0", node), None))
            if type(node.test) not in _LEAVES:
                stack.append((node.test, node))
            return
        defaulted = _none_default(node)
        if defaulted is not None and self.scope.kind == "function" and (
                defaulted[0] in self.scope.params and defaulted[0] not in self.scope.assigned):
            self._neutral_defaults[id(defaulted[1])] = defaulted[0]
        joined = _body_assignments(node)
        if joined:
            for name, stmt in joined.items():
                self._branch_marks.setdefault(id(stmt), []).append(name)
            self._joins[id(node)] = joined
            stack.append((_Exit("join", node), None))
        # The children are pushed here, not by the walk (`_FIELDS_CACHE[ast.If]` is empty), so
        # that a dtype guard can narrow its name over the one branch where it is not bool.
        tested = _not_none_test(node.test)
        if guard is None and tested is not None and tested in self.scope.maybe_none:
            # `if causal is not None:` on a name bound to a helper that returns None or a
            # tensor: in the body it holds what the helper's other returns give
            _push_statements(stack, node.orelse, node)
            stack.append((_Exit("unset", node), None))
            _push_statements(stack, node.body, node)
            stack.append((_Exit("set", node), None))
        elif guard is None:
            if joined and node.orelse:
                # The else branch runs from the values before the `if`, not from the body's
                # (`if mask is None: mask = <additive> elif mask.ndim == 2: mask = mask[:, None,
                # None, :].to(dtype)` lifts the caller's mask; `if past is not None: k =
                # torch.cat([past_k, k]) ... else: sdpa(q, k, v, is_causal=True)` reads the
                # plain keys). After it, a name both branches bind is joined; a name only the
                # body binds gets the body's value back ("restore"), as the code after the `if`
                # read it before.
                stack.append((_Exit("restore", node), None))
            _push_statements(stack, node.orelse, node)
            if joined and node.orelse:
                self._before_if[id(node)] = {
                    name: self.scope.values.get(name) for name in joined}
                stack.append((_Exit("rewind", node), None))
            _push_statements(stack, node.body, node)
        else:
            name, in_body = guard
            if in_body:  # `if m.dtype != torch.bool:` / `if m.is_floating_point():`
                _push_statements(stack, node.orelse, node)
                stack.append((_Exit("unnarrow", node), None))
                _push_statements(stack, node.body, node)
                stack.append((_Exit("narrow", node), None))
            else:  # `if m.dtype == torch.bool: ... else: <m is not bool>`
                stack.append((_Exit("unnarrow", node), None))
                _push_statements(stack, node.orelse, node)
                stack.append((_Exit("narrow", node), None))
                _push_statements(stack, node.body, node)
            self._narrowed[id(node)] = (name, in_body, None)
        if type(node.test) not in _LEAVES:
            stack.append((node.test, node))

    def _managed_autocast(self, node: ast.With | ast.AsyncWith) -> str | None:
        """`with inference_precision(device):` over a @contextmanager of this file that enters
        torch.autocast (see `_autocast_entered`)."""
        for item in node.items:
            expr = item.context_expr
            if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
                entered = self.lookup(expr.func.id).enters_autocast
                if entered is not None:
                    return entered
        return None

    def _enter_with(self, node: ast.AST, parent: ast.AST | None, stack: _Stack) -> None:
        assert isinstance(node, (ast.With, ast.AsyncWith))
        if not self.scope.no_grad and with_no_grad(node):
            self.scope.no_grad = True
            stack.append((_Exit("no_grad"), None))
        lowered = autocast_dtype(node) or self._managed_autocast(node)
        if lowered is not None and lowered != self.scope.autocast:
            # the marker carries the dtype to restore (an outer autocast block's, or None)
            stack.append((_Exit("autocast", ast.Constant(self.scope.autocast)), None))
            self.scope.autocast = lowered
        for item in node.items:
            if item.optional_vars is not None:
                self._forget_targets(item.optional_vars)

    def _enter_function(self, node: ast.AST, parent: ast.AST | None, stack: _Stack) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        no_grad = self.scope.no_grad or (
            not isinstance(node, ast.Lambda) and decorated_no_grad(node)
        )
        name = "" if isinstance(node, ast.Lambda) else node.name
        if name:
            self.scope.assigned.add(name)
            self.scope.values.pop(name, None)
        kernel = self.scope.kernel or (
            not isinstance(node, ast.Lambda) and decorated_kernel(node))
        params = tuple(a.arg for a in [*node.args.posonlyargs, *node.args.args])
        scope = _Scope("function", name=name, no_grad=no_grad, kernel=kernel, params=params,
                       method=self.scope.kind == "class" and not _is_static(node),
                       in_class=self.scope.kind == "class", node=node)
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                scope.values[arg.arg] = UNKNOWN  # shadows outer names
                if self._torch_mha(arg.annotation):  # `layer: nn.MultiheadAttention`
                    scope.values[arg.arg] = Value(mha=True)
                elif (jax_dtype := _jaxtyping_dtype(arg.annotation)) in {"bool", "int"}:
                    # `pad: Bool[Tensor, "b s"]`: jaxtyping's dtype, which its runtime check
                    # (jaxtyped with a type checker) enforces, unlike a BoolTensor hint
                    scope.values[arg.arg] = Value(dtype=jax_dtype, tensor=True,
                                                  layout=_jaxtyping_layout(arg.annotation))
                elif _annotated_tensor(arg.annotation):  # `src: torch.Tensor`
                    scope.values[arg.arg] = TENSOR
                elif _annotated_bool(arg.annotation):  # `mask: Optional[torch.BoolTensor]`
                    scope.values[arg.arg] = BOOL_ANNOTATED
                elif self._class_roles and (
                        _annotation_name(arg.annotation) in self._class_roles):  # `m: MyModel`
                    annotated = _annotation_name(arg.annotation) or ""
                    # (an instance of the class: its calls are the forward's, and seed it)
                    scope.values[arg.arg] = Value(
                        param_roles=self._class_roles[annotated],
                        module=annotated if annotated in self._local_classes else None)
                elif (arg.arg == "model" and arg.annotation is None and self._class_roles
                      and self.scope.kind != "class"):
                    model = self._file_model()
                    if model is not None:  # `def evaluate(data_iter, model, device):`
                        scope.values[arg.arg] = Value(param_roles=self._class_roles[model])
                if self._class_fields and (
                        _annotation_name(arg.annotation) in self._class_fields):
                    # `cfg: DecoderConfig`: `cfg.causal` holds the field's default unless a
                    # caller built the config with another value (as `causal=True` defaults do)
                    scope.fields[arg.arg] = self._class_fields[
                        _annotation_name(arg.annotation) or ""]
        positional = [*args.posonlyargs, *args.args]
        with_default = positional[len(positional) - len(args.defaults):]
        defaults = [*zip(with_default, args.defaults, strict=True),
                    *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
        for arg, default in defaults:
            if default is not None and (isinstance(default, ast.Constant) or (
                    isinstance(default, ast.UnaryOp)
                    and isinstance(default.operand, ast.Constant)) or (
                    isinstance(default, ast.Attribute) and self.value(default).member)):
                scope.defaults[arg.arg] = default  # (`kind=Kind.CAUSAL`: an Enum member)
            # `def pool(h, keep, fill=-1e10)`, `__init__(self, mask_value=-1e10)`: a masking
            # value as the default is the value every call that leaves it out fills with
            # (NVIDIA/apex#1105's -1e10)
            v = number(default) if default is not None else None
            if v is not None and math.isfinite(v) and v < -FP16_MAX:
                scope.masking_defaults[arg.arg] = v
        names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        stated = _stated_other_axes(node, names) if not isinstance(node, ast.Lambda) else (
            frozenset())
        if not isinstance(node, ast.Lambda):
            self._enter_signature(node, scope, args, defaults, stated)
            for param in self._embedded_parameters(node, params):
                if scope.values.get(param) in (UNKNOWN, TENSOR):
                    scope.values[param] = Value(token_ids=True)
        for mask in _TOKENIZER_MASKS:
            if paired := _tokenizer_pair(names, mask, scope.values.get(mask), stated):
                scope.values[mask] = paired
        self.scopes.append(scope)
        stack.append((_Exit("scope"), None))

    def _enter_signature(self, node: ast.FunctionDef | ast.AsyncFunctionDef, scope: _Scope,
                         args: ast.arguments, defaults: list[tuple[ast.arg, ast.expr | None]],
                         stated: frozenset[str]) -> None:
        """Key the function as its calls are keyed; in the first walk, note its parameters (and
        the masks its docstring gives more axes, `stated`); in the second, give each parameter
        the facts every call of this file passes for it."""
        owner = self.scope.name if self.scope.kind == "class" else ""
        key = scope.key = (owner, node.name)
        if self.record_calls:
            self.entered.append(key)
            self.entry_values[key] = dict(scope.values)
            positional = [a.arg for a in [*args.posonlyargs, *args.args]]
            if scope.method:
                positional = positional[1:]
            self.defs.setdefault(key, []).append(_Signature(
                tuple(positional), tuple(a.arg for a in args.kwonlyargs),
                {a.arg: d for a, d in defaults if d is not None},
                args.vararg is not None or args.kwarg is not None, stated))
            if not self.seeds:
                return
        seeds = self.seeds.get(key)
        if seeds:
            for param, seed in seeds.items():
                if seed.dtype is not None and _dtype_tested(node, param):
                    continue  # `if m.dtype == torch.bool: ...`: the function takes either kind
                if seed.module in self._class_fields and param not in scope.fields:
                    # every call passes an instance of a record of this file (`cfg = Config()`,
                    # `Attn(cfg)`): `cfg.x` is the field's default, as for `cfg: Config`
                    scope.fields[param] = self._class_fields[seed.module or ""]
                held = scope.values.get(param)
                if held == UNKNOWN:
                    scope.values[param] = seed
                elif held == TENSOR:
                    scope.values[param] = replace(seed, tensor=True)
                elif held == BOOL_ANNOTATED:
                    scope.values[param] = replace(seed, annotated01=True)
                elif held is not None and held.param_roles and not held.module and seed.module:
                    # `def train(model, rng)` read as the file's model (its roles): every call
                    # passes an instance of that class, whose forward the calls of it call
                    scope.values[param] = replace(held, module=seed.module)

    def _note_option(self, call: ast.Call) -> None:
        """`parser.add_argument("--mask-value", type=float, default=-1e9)`: the default's facts
        under the option's attribute name (`mask_value`, or `dest=`)."""
        dest = kwarg(call, "dest")
        if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
            attr: str | None = dest.value
        else:
            flags = [a.value for a in call.args
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            long = [f for f in flags if f.startswith("--")]
            attr = (long[0][2:] if long else flags[0].lstrip("-") if flags else None)
            attr = attr.replace("-", "_") if attr else None
        default = kwarg(call, "default")
        if attr is None or default is None:
            return
        facts = self._seed_facts(default)
        self.option_defaults[attr] = facts if attr not in self.option_defaults else None

    def _record_passed(self, call: ast.Call) -> None:
        """In the first walk: what a call of a function, method, class or instance of a class
        of this file passes (see `_seeded_parameters`)."""
        keys = self._callee_keys(call)
        if not keys:
            return
        # `layer(x, **layer_kwargs)` of a dict literal, `model(**batch)` of a collate's dict
        call = self._spread_kwargs(call, returned=True)
        # (a function without a key has no calls recorded: what it forwards stays unknown)
        forwards = self._forwarded_kwargs_name(call) if self.scope.key is not None else None
        unpacked = self._unpacked_parts(call)
        args = call.args[:-1] if unpacked else call.args
        spread = any(isinstance(a, ast.Starred) for a in args) or any(
            kw.arg is None and not (isinstance(kw.value, ast.Name) and kw.value.id == forwards)
            for kw in call.keywords)
        passed = _Passed(
            tuple((self._seed_facts(a), self._passed_origin(a)) for a in args) + tuple(
                (_seedable(part or UNKNOWN), None) for part in unpacked),
            {kw.arg: (self._seed_facts(kw.value), self._passed_origin(kw.value))
             for kw in call.keywords if kw.arg is not None}, spread,
            self.scope.key if forwards is not None else None)
        self.call_log.append((tuple(keys), passed))
        for key in keys:
            self.calls.setdefault(key, []).append(passed)

    # Three shortcuts, each provably result-preserving (`tests/lint/test_shortcuts.py` compares
    # every file of the recall corpus with them switched off):
    def _may_dispatch(self) -> bool:
        """Whether a value of this walk may hold definitions picked at run time
        (`Value.element_defs`): only `_dispatch_facts`, a function table and declared methods
        make them."""
        return self._dispatches

    def _may_hide_diagonal(self) -> bool:
        """Whether the file may hold a True triangle on and above the diagonal
        (`Value.hides_above`): only a `triu` makes one."""
        return "triu" in self.source

    def _callee_keys(self, call: ast.Call) -> tuple[tuple[str, str], ...]:
        """`_callee_key`, or for `ATTENTION_FUNCTIONS[backend](...)` / `self.attn[impl](...)`
        each definition the container holds."""
        if isinstance(call.func, ast.Subscript):
            keyed = self._keyed_module(call.func)
            if keyed is not None and keyed.module in self._local_classes:
                return ((keyed.module or "", "forward"),)
            held = self.value(call.func.value)
            if not held.element_defs and held.element_module in self._local_classes:
                # `self.layers[i](x, mask)` of `nn.ModuleList(Layer(d) for _ in range(n))`
                return ((held.element_module or "", "forward"),)
            return held.element_defs
        key = self._callee_key(call)
        if key is None and self._may_dispatch() and isinstance(call.func, (
                ast.Name, ast.Attribute)):
            # an instance of a class picked from a registry: a call of each class's forward
            return self.value(call.func).element_defs
        return (key,) if key is not None else ()

    def _forwarded_kwargs_name(self, call: ast.Call) -> str | None:
        """The name of this function's own `**kwargs` when the call hands it on untouched
        (`self.attn(x, **kwargs)`)."""
        node = self.scope.node
        if self.scope.kind != "function" or not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.args.kwarg is None:
            return None
        kwargs = node.args.kwarg.arg
        if kwargs in self.scope.assigned or kwargs in self.scope.mutated or not any(
                kw.arg is None and isinstance(kw.value, ast.Name) and kw.value.id == kwargs
                for kw in call.keywords):
            return None
        return kwargs

    def _passed_origin(self, node: ast.AST) -> _Origin | None:
        """`_PASSED_NONE` for a literal None, else the caller's parameter `node` is (if one)."""
        return _PASSED_NONE if is_none(node) else self._passed_parameter(node)

    def _callee_key(self, call: ast.Call) -> tuple[str, str] | None:
        """The function, method, class or instance of a class of this file a call calls, keyed
        as `_enter_signature` keys definitions."""
        func = _module_called(call.func)
        key: tuple[str, str] | None = None
        if isinstance(func, ast.Name):
            if func.id == "self":
                cls = self._class_scope()
                key = None if cls is None else (cls.name, "forward")
            else:
                module = self.lookup(func.id).module
                if module in self._local_defs:
                    key = (module or "", "forward")  # `model(...)` of `model = Model()`
                elif func.id in self._local_defs:
                    key = ("", func.id)  # a function, or a class (its __init__)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in {"self", "cls"}:  # (`cls.helper(...)` in a classmethod)
                module = self.lookup("self." + func.attr).module
                cls = self._class_scope()
                if module in self._local_defs:
                    key = (module or "", "forward")  # `self.block(...)`
                elif cls is not None and func.attr in self._local_defs:
                    key = (_method_owner(self._local_classes, cls.name, func.attr), func.attr)
            elif func.value.id in self._local_defs and func.attr in self._local_defs:
                key = (func.value.id, func.attr)  # `Builders.causal(n)`
            elif func.attr in self._local_defs and (
                    module := self.lookup(func.value.id).module) in self._local_classes:
                # `model.generate(ids, mask)` of `model = Model()`: its method
                owner = _method_owner(self._local_classes, module or "", func.attr)
                if func.attr in self._local_classes[owner].methods:
                    key = (owner, func.attr)
        return key

    def _note_key_axes(self, call: ast.Call) -> None:
        """`layer(x, src_mask=keep[:, None, None, :])`: a name of this function handed on with
        SDPA's head and query axes added holds (batch, seq) (a tensor of more axes would give
        one of six), which a later call that passes it bare hands to SDPA as (queries, keys)
        (3DETR's `memory_mask=enc_keep`, MC515)."""
        scope = self.scope
        if scope.kind != "function" or not self._adds_key_axes():
            return
        for arg in (*call.args, *(kw.value for kw in call.keywords)):
            if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name) and (
                    key_axes_added(arg.slice)):
                # a parameter so handed on: its callers' mask is (batch, seq) too (Diffusion
                # Policy's `memory_keep=cond_keep[:, None, None, :]` in the encoder layer)
                self._note_role(arg.value, "axes-added", raw=True)
                self._note_key_axes_of(arg.value, arg, None)

    def _note_key_axes_of(self, name: ast.Name, where: ast.AST, via: str | None) -> None:
        scope = self.scope
        held = scope.values.get(name.id)  # (None for a name whose value shows nothing)
        if name.id not in scope.key_axes and (name.id in scope.assigned or (
                name.id in scope.params)) and (held is None or (
                held.layout is None and not held.tri and not held.additive)):
            scope.key_axes[name.id] = (site(where), held, via)

    def _key_axes_passed(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """A name of this function passed for a parameter that its function hands on with the
        head and query axes added (`self.encoder(x, cond_keep)`): it holds (batch, seq)."""
        if self.scope.kind != "function":
            return
        for entry in roles:
            if entry.role == "axes-added" and isinstance(
                    arg := _role_argument(call, entry), ast.Name):
                self._note_key_axes_of(arg, arg, self._callee_text(call))

    def _adds_key_axes(self) -> bool:
        """Whether the module's text can hold a `[:, None, None, :]` subscript
        (`_KEY_AXES_TEXT`): where it cannot, `_note_key_axes` has nothing to note."""
        if self._key_axes_text is None:
            self._key_axes_text = _KEY_AXES_TEXT.search(self.source) is not None
        return self._key_axes_text

    def _embedded_parameters(self, node: ast.FunctionDef | ast.AsyncFunctionDef,
                             params: tuple[str, ...]) -> set[str]:
        """The function's parameters its body hands to an embedding (`_embedding_calls`, read
        once per module): token ids."""
        if self._embedding_calls is None:
            self._embedding_calls = _embedding_calls(self._tree) if self._tree else []
        if not self._embedding_calls:
            return set()
        # the lines of the definition, decorators included, are its nodes' and no other's (a
        # compound statement has lines of its own): the same calls as a walk of `node` gives
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        last = getattr(node, "end_lineno", None) or node.lineno
        names = set(params) | {a.arg for a in node.args.kwonlyargs}
        return {name for line, name in self._embedding_calls
                if first <= line <= last and name in names}

    def _unpacked_parts(self, call: ast.Call) -> tuple[Value, ...]:
        """`model(*collate(batch))`, `model(*collate(batch)[:3])`: the positions of the tuple a
        function of this file returns, as the call's last arguments; () for any other call."""
        last = call.args[-1] if call.args else None
        if not isinstance(last, ast.Starred):
            return ()
        inner, stop = last.value, None
        if isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Slice) and (
                inner.slice.lower is None and inner.slice.step is None):
            stop = number(inner.slice.upper) if inner.slice.upper is not None else None
            if stop is None or not math.isfinite(stop) or stop != int(stop) or stop < 0:
                return ()
            inner = inner.value
        if not isinstance(inner, ast.Call):
            return ()
        parts = self._returned_parts(inner)
        return tuple(parts[:int(stop)]) if stop is not None else tuple(parts)

    def _seed_facts(self, node: ast.AST) -> Value:
        return _seedable(self._bound_facts(node) if isinstance(node, ast.expr) else self.value(
            node))

    def _passed_parameter(self, node: ast.AST) -> _Origin | None:
        """(caller key, name, "") when `node` is the calling function's own parameter,
        untouched; (caller key, name, attribute) for an attribute of it (`args.mask_value`);
        (caller key, name, `_SLICED`) for a range of it (`attention_mask[:, start:end]`, a
        segment of the caller's mask: the same values); (caller key, name, the argument) for
        a reshape of it (`frame_pad.repeat_interleave(hw, dim=0)`: the same values, laid out
        anew)."""
        scope = self.scope
        attr: str | ast.expr = ""
        if isinstance(node, ast.Name) and node.id in scope.assigned and (
                bound := scope.derived.get(node.id)) is not None and (
                _reshaped_name(bound) is not None):
            node = bound  # `temporal_mask = frame_keep.repeat_interleave(n, dim=0)[:, None]`
        if isinstance(node, (ast.Call, ast.Subscript)) and (
                reshaped := _reshaped_name(node)) is not None:
            attr, node = node, reshaped
        if isinstance(node, ast.Name) and node.id in scope.assigned and isinstance(
                bound := scope.derived.get(node.id), ast.Subscript):
            node = bound  # `seg_mask = attention_mask[:, start:end]`, then `f(seg_mask)`
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attr, node = node.attr, node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and (
                _ranges_only(node.slice)):
            attr, node = _SLICED, node.value
        if isinstance(node, ast.Name):
            # (a lambda's or nested function's free name is its maker's parameter:
            # `lambda x: self.attention(x, mask=mask)`)
            scope = self._binding_scope(node.id)
        if not (isinstance(node, ast.Name) and scope.kind == "function" and scope.key
                and node.id not in scope.assigned):
            return None
        signature = self.defs.get(scope.key)
        if not signature:
            return None
        last = signature[-1]
        if node.id in last.positional or node.id in last.keyword_only:
            return (scope.key[0], scope.key[1], node.id, attr)
        return None

    def _seeded_parameters(self) -> dict[tuple[str, str], dict[str, Value]]:
        """After the first walk: each parameter's facts where every call of this file passes
        facts that agree (a function defined once, never called with `*`/`**`). A caller's own
        parameter passed on holds what the caller's calls give it (a mask built in one module,
        handed down through two forwards). A call that leaves a parameter out gives its
        default."""
        calls: dict[tuple[str, str], list[_Passed]] = {}
        for (owner, name), passed in self.calls.items():
            key = (owner, name)
            if key not in self.defs and not owner and (name, "__init__") in self.defs:
                key = (name, "__init__")  # `Block(d, mask_value)`: its __init__
            calls.setdefault(key, []).extend(passed)
        module_values = self.scopes[0].values

        def module_lookup(name: str) -> Value:
            return module_values.get(name, UNKNOWN)

        memo: dict[tuple[str, str, str], Value] = {}
        visiting: set[tuple[str, str, str]] = set()

        def forwarded(key: tuple[str, str], param: str) -> tuple[Value, None] | None:
            """What every call of `key` gives by the keyword `param` its `**kwargs` take; None
            where no call gives it."""
            signature = self.defs.get(key)
            outer = calls.get(key)
            if not signature or len(signature) != 1 or not outer or any(
                    c.spread or c.forwarded for c in outer) or param in (
                    *signature[0].positional, *signature[0].keyword_only):
                return (UNKNOWN, None) if signature and outer else None
            given = [c.keywords[param] for c in outer if param in c.keywords]
            if not given:
                return None
            if len(given) != len(outer):
                return UNKNOWN, None
            joined: Value | None = None
            for facts, origin in given:
                if origin is _PASSED_NONE:
                    continue
                if origin is not None:
                    facts = UNKNOWN
                joined = facts if joined is None else _join(joined, facts)
            return joined or UNKNOWN, None

        def seed(key: tuple[str, str], param: str) -> Value:
            ref = (key[0], key[1], param)
            if ref in memo:
                return memo[ref]
            if ref in visiting:
                return UNKNOWN
            signature = self.defs.get(key)
            passed = calls.get(key)
            if signature and len(signature) == 1 and key not in calls and (
                    field := module_values.get(f"[{param}]")) is not None:
                # a function no call of this file reaches (a framework calls it: ignite's
                # `model_fn`, Lightning's `training_step`) whose parameter is named as a key of
                # the batch the file builds (`{"pair_mask": pair_mask}` of a collate function,
                # then `forward(self, beats, pair_mask)`): the batch's field
                return _seedable(field)
            if not signature or len(signature) != 1 or not passed or any(
                    c.spread for c in passed):
                return UNKNOWN
            sig = signature[0]
            visiting.add(ref)
            joined: Value | None = None
            for call in passed:
                index = sig.positional.index(param) if param in sig.positional else -1
                if 0 <= index < len(call.args):
                    facts, origin = call.args[index]
                elif param in call.keywords:
                    facts, origin = call.keywords[param]
                elif call.forwarded is not None and (
                        given := forwarded(call.forwarded, param)) is not None:
                    facts, origin = given  # what the caller's callers gave its `**kwargs`
                elif param in sig.defaults:
                    default = sig.defaults[param]
                    facts, origin = _seedable(describe(default, module_lookup)), (
                        _PASSED_NONE if is_none(default) else None)
                else:
                    facts, origin = UNKNOWN, None
                if origin is _PASSED_NONE:
                    # None is no tensor: a use of the parameter as one runs only on the calls
                    # that pass a tensor (`if pad is None: ... else: sdpa(attn_mask=pad)`), or
                    # hands None on to an API that takes it (SDPA's attn_mask=None)
                    continue
                if origin is not None:
                    inherited = seed((origin[0], origin[1]), origin[2])
                    if isinstance(origin[3], ast.expr):  # a reshape of it
                        inherited = _reshaped_seed(origin[3], origin[2], inherited)
                    elif origin[3] == _SLICED:  # a range of the caller's parameter
                        inherited = replace(inherited, tri=None, tri_at=None) if (
                            inherited) else inherited
                    elif origin[3]:  # an attribute of the caller's parameter
                        inherited = (self.option_defaults.get(origin[3]) or UNKNOWN) if (
                            inherited.namespace) else UNKNOWN
                    facts = inherited or facts
                joined = facts if joined is None else _join(joined, facts)
                if not joined:
                    break
            visiting.discard(ref)
            result = joined or UNKNOWN
            memo[ref] = result = _tokenizer_pair(
                (*sig.positional, *sig.keyword_only), param, result, sig.stated_axes) or result
            return result

        none_memo: dict[tuple[tuple[str, str], str], bool] = {}

        def never_given(key: tuple[str, str], param: str) -> bool:
            """See `Linter.never_given`: also where the calls hand on their own parameter that
            is never given (`self.attn(x, mask=mask)` in a `forward(self, x, mask=None)` that
            no call gives a mask)."""
            ref = (key, param)
            if ref not in none_memo:
                none_memo[ref] = False  # (a cycle gives no answer)
                signature = self.defs.get(key) or []
                none_memo[ref] = len(signature) == 1 and _never_given(
                    signature[0], calls.get(key, []), param,
                    lambda origin: never_given((origin[0], origin[1]), origin[2]))
            return none_memo[ref]

        # Flags and cached keys are read only by is_causal (MC506/MC510): not worth a second
        # walk of a file without SDPA.
        causal_read = "is_causal" in self.source or "scaled_dot_product_attention" in self.source
        seeds: dict[tuple[str, str], dict[str, Value]] = {}
        for key in calls:
            signature = self.defs.get(key)
            if not signature or len(signature) != 1:
                continue
            with_roles = self.role_params.get(key, set())
            for param in with_roles:
                if never_given(key, param):
                    self.never_given.add((key, param))
                    seeds.setdefault(key, {})  # walked again, without that body
            for param in with_roles:
                kinds = self.role_kinds.get((key, param), set())
                if {"keep-sdpa", "drop-fill"} <= kinds and (
                        given := seed(key, param)).hf_keep_inverted and not given.hf_keep:
                    # read both ways (see `_contradicting_roles`), and every call says which
                    # way is meant: the function is walked again to report the other
                    self.padding_given.add((key, param))
                    seeds.setdefault(key, {})
            names = (*signature[0].positional, *signature[0].keyword_only)
            for param in names:
                kinds = self.role_kinds.get((key, param), {""})
                bool_only = pair_only = keep_only = int_only = False
                if "add" in kinds and _names_additive(param) and any(
                        "mask" in other.lower() for other in names):
                    # `def attend(q, k, v, bias=None, mask=None)` (jax.nn.dot_product_attention
                    # and its ports): a function that takes a mask and adds its bias as the name
                    # says; a call that gives a bool or 0/1 mask as the bias is the finding
                    continue
                # (a parameter every call gives a tuple of masks is seeded whatever its roles:
                # they read `masks[1]`, the tuple's element, as a mask of the parameter's)
                if param in with_roles and not kinds <= _USE_SITE_ROLES and not seed(
                        key, param).held_parts:
                    if kinds == {"drop-fill"} and not _names_padding(param) and _keeps(
                            seed(key, param)):
                        # filled where True, and every call gives a keep-mask: the function
                        # reads its one kind of mask the wrong way round, and the fix goes at
                        # its fill (MC519 there; the calls' reports are its echoes)
                        keep_only = True
                    elif kinds <= {"drop-fill", "keep-fill"}:
                        # a fill condition only: its direction is checked at the calls; that
                        # every call gives a pair mask is read at the fill (MC507: the rows of
                        # the padded queries are empty), and that every call gives an integer
                        # mask at its `~` (MC518: CodeT5's `invert_attention_mask`), where the
                        # fix goes
                        pair_only = True
                    elif kinds <= _KEY_PADDING_ROLES and ((_tokenizer_pair(
                            names, param, UNKNOWN) and seed(key, param).dtype == "int") or (
                            seed(key, param).collated and seed(key, param).dtype in {
                                None, "int"}) or (seed(key, param).dtype == "int" and (
                                seed(key, param).pad_keep or seed(key, param).hf_keep))):
                        # handed on to a key padding mask, and every call gives the tokenizer's
                        # int64 mask (or a batch's `attention_mask`, the collator's, or an int64
                        # keep-mask the file writes, `keep[i, :n] = 1`): its dtype
                        # is read at a `~` in the body (mContriever's pooling, MC518), the
                        # convention at the calls
                        int_only = True
                    elif kinds == {"keep-sdpa"} and (_keeps(given := seed(key, param)) or (
                            given.dtype == "bool")) and not given.hf_keep_inverted:
                        # SDPA's mask only, and every call gives a keep-mask (the tokenizer's,
                        # handed down from `forward(input_ids, attention_mask)` under another
                        # name) or a bool: what the body makes of it is read there (`.to(
                        # q.dtype)`, a float 0/1 mask SDPA adds, MC508; `.bool()` is right)
                        keep_only = True
                    elif not (kinds & _USE_SITE_ROLES and kinds <= _USE_SITE_ROLES | {
                            "drop-fill", "keep-fill", "keep-sdpa", "float-sdpa"}):
                        continue
                    else:
                        # also a fill condition (MIST's `new_attn_mask.masked_fill_(attn_mask,
                        # ...)` next to `attn += attn_mask`), or SDPA's mask on its fused path
                        # (timm's Attention, `attn + attn_mask` on the eager one): only a bool
                        # dtype is given, which the fill and SDPA read as they should and the
                        # addition does not
                        bool_only = True
                facts = seed(key, param)
                if int_only:
                    # (an int64 keep-mask every call gives stays one under any name: `~` of it
                    # is MC518 whatever the parameter is called)
                    facts = Value(dtype="int", int_mask=True) if (
                        facts.dtype == "int" and (facts.pad_keep or facts.hf_keep)) else _INT_ONLY
                elif bool_only:
                    facts = Value(dtype="bool") if facts.dtype == "bool" else UNKNOWN
                elif pair_only:
                    # (a bool mask every call gives to the `attention_mask` beside `input_ids`
                    # is not the tokenizer's int one: ChatGLM's layer gets `get_masks()`'s
                    # True = hidden, which its fill reads as it should)
                    told = facts.dtype == "int" or (facts.dtype == "bool" and not _keeps(
                        facts) and _tokenizer_pair(names, param, UNKNOWN))
                    triangle = _hiding_triangle(facts) if kinds == {"drop-fill"} else {}
                    facts = Value(pair_keep=facts.pair_keep, dtype=facts.dtype if (
                        told or triangle) else None, int_on_a_path=facts.int_on_a_path,
                        **triangle)
                elif keep_only:
                    facts = Value(dtype=facts.dtype if facts.dtype in {"bool", "int"} else None,
                                  hf_keep=facts.hf_keep, pad_keep=facts.pad_keep,
                                  keep_mask=facts.keep_mask, pair_keep=facts.pair_keep)
                if facts.flag is not None and (key[1] != "__init__" or not causal_read) and (
                        (key, param) not in self.offset_flags):
                    # a flag is read through `self.causal = causal`; a function's own flag that
                    # reaches is_causal is a role, checked at its calls
                    facts = replace(facts, flag=None)
                if facts.cached and not causal_read:
                    facts = replace(facts, cached=False)
                held = self.entry_values.get(key, {}).get(param, UNKNOWN)
                if facts and any(getattr(held, name) != fact
                                 for name, fact in facts.__dict__.items()):
                    seeds.setdefault(key, {})[param] = facts
        return seeds

    def _exit(self, marker: _Exit) -> None:
        if marker.what == "bind":
            self._bind_statement(marker.node)
            return
        if marker.what == "no_grad":
            self.scope.no_grad = False
            return
        if marker.what == "fp16_guard":
            self.scope.fp16_guard = False
            return
        if marker.what == "autocast":
            assert isinstance(marker.node, ast.Constant)
            restored = marker.node.value
            self.scope.autocast = restored if isinstance(restored, str) else None
            return
        if marker.what == "join":
            self._join_branches(marker.node)
            return
        if marker.what == "rewind":
            assert isinstance(marker.node, ast.If)
            body_only = {name for name in self._before_if[id(marker.node)]
                         if not _assigns_name(marker.node.orelse, name)}
            self._after_body[id(marker.node)] = {
                name: self.scope.values.get(name) for name in body_only}
            for name, before in self._before_if.pop(id(marker.node)).items():
                if before is None:
                    self.scope.values.pop(name, None)
                else:
                    self.scope.values[name] = before
            return
        if marker.what == "restore":
            for name, after in self._after_body.pop(id(marker.node), {}).items():
                if after is None:
                    self.scope.values.pop(name, None)
                else:
                    self.scope.values[name] = after
            return
        if marker.what == "narrow":
            self._narrow(marker.node)
            return
        if marker.what == "unnarrow":
            self._unnarrow(marker.node)
            return
        if marker.what in {"set", "unset"}:
            assert isinstance(marker.node, ast.If)
            tested = _not_none_test(marker.node.test) or ""
            if marker.what == "set":
                self._unset[id(marker.node)] = self.scope.values.get(tested)
                self.scope.values[tested] = self.scope.maybe_none.get(tested, UNKNOWN)
            elif not _assigns_name(marker.node.body, tested):
                before = self._unset.pop(id(marker.node), None)
                if before is None:
                    self.scope.values.pop(tested, None)
                else:
                    self.scope.values[tested] = before
            return
        if marker.what in {"save0", "save1"}:
            self._snapshots[(id(marker.node), marker.what[-1])] = (
                dict(self.scope.values), dict(self.scope.zeroed))
            return
        if marker.what in {"load0", "load1"}:
            self.scope.values, self.scope.zeroed = self._snapshots.pop(
                (id(marker.node), marker.what[-1]))
            return
        done = self.scopes.pop()
        self._flush_softmaxed(done)
        if done.kind == "function" and done.name and done.outer_names:
            # a closure that rebinds its caller's names: calling it changes them
            self._rebinds[done.name] = frozenset(done.outer_names)
        roles = tuple(done.param_roles.values())
        if roles:
            self._contradicting_roles(done, roles)
        # (the attn_mask layout roles, and the key axes a function adds, read no value a seed
        # could give: they stay out of seeding)
        seeded_roles = [r for r in roles if r.role not in _LAYOUT_ROLES and r.role != (
            "axes-added")]
        if self.record_calls and done.key is not None and seeded_roles and not self.seeds:
            # (the roles are the unseeded walk's: a seeded walk that records its calls keeps
            # them, so a role a seed gives another parameter, `a + b` with `a` a finfo.min
            # plane, does not take `b`'s seed away)
            self.role_params.setdefault(done.key, set()).update(r.param for r in seeded_roles)
            for r in seeded_roles:
                self.role_kinds.setdefault((done.key, r.param), set()).add(r.role)
        result = _result_of(done)
        if result is None:
            facts = UNKNOWN
        else:
            facts = Value(result=result) if not done.returns_none else Value(
                result_unless_none=result)
        parts = _parts_of(done)
        if parts:
            facts = replace(facts, parts=parts)
        if yielded := _yield_parts(done):
            facts = replace(facts, yielded=yielded)
        if done.kind == "function" and done.name and (
                isinstance(done.node, (ast.FunctionDef, ast.AsyncFunctionDef))):
            written = inline_template(done.node, method=done.in_class)
            if written is not None:
                facts = replace(facts, inline=written)  # read at each call (see lint.inline)
        if done.kind == "function" and done.name and not done.method:
            # A helper of this file that returns a bool tensor (OpenNMT's sequence_mask): its
            # calls below are bool too; and whatever else every return gives (an all -inf
            # matrix, a finfo.min fill). What it does with its parameters is checked at its calls.
            returns_bool = bool(done.returns) and not done.returns_none and all(
                v.dtype == "bool" for v in done.returns)
            entered = _autocast_entered(done.node)
            if returns_bool or roles or facts or entered:
                self.bind(done.name, replace(facts, returns_bool=returns_bool,
                                             param_roles=roles, enters_autocast=entered))
                self._roles_known = self._roles_known or bool(roles)
        elif roles and self.scope.kind == "class" and done.name in {"forward", "__call__"}:
            self._class_roles[self.scope.name] = roles  # calls of an instance
            self._roles_known = True
        if roles and done.in_class and self.scope.kind == "class" and done.name:
            self._method_roles[(self.scope.name, done.name)] = roles
        elif roles and done.kind == "function" and done.name and self.scope.kind in {
                "module", "function"}:
            # (a function nested in another, as a whole file wrapped in a `def main():` holds
            # its helpers: `_functions_called_above` takes only a name defined once)
            self._function_roles[done.name] = roles
        if roles and done.in_class and done.method and self.scope.kind == "class":
            # a method called as `self.name(...)` in the methods below: its calls are checked
            # against what it does with its parameters (which start after self)
            self.scope.values["self." + done.name] = replace(
                self.scope.values.get("self." + done.name, UNKNOWN), param_roles=roles)
            self._roles_known = True
        if facts and done.in_class and self.scope.kind == "class":
            # `self.name(...)` in the methods below gives what every return of it gives; a
            # property's `self.name` gives it without a call (diffusers' `mask_fill_value`)
            read = facts.result if _is_property(done.node) and isinstance(
                facts.result, Value) else facts
            if roles and done.method and read is facts:
                read = replace(read, param_roles=roles)  # (see above)
            self.scope.values["self." + done.name] = read
        if roles and done.in_class and not done.method and self.scope.kind == "class":
            # a static method called as `self.name(...)`: its calls are checked against what it
            # does with its parameters, as a function's are (its arguments start after self)
            self.scope.values["self." + done.name] = replace(
                self.scope.values.get("self." + done.name, UNKNOWN), param_roles=roles)
        if done.in_class and self.scope.kind == "class" and done.name and (
                "self." + done.name) in self.scope.values:
            self._method_values[(self.scope.name, done.name)] = self.scope.values[
                "self." + done.name]
            if done.method and self.scope.node is not None:
                # `self.decode_fn = torch.compile(self._decode) if compile else self._decode`
                # in __init__: `self.decode_fn(...)` below is a call of the method
                aliases = self._aliases.get(id(self.scope.node))
                if aliases is None:
                    aliases = self._aliases[id(self.scope.node)] = _method_aliases(
                        self.scope.node)
                for alias in aliases.get(done.name, ()):
                    self.scope.values["self." + alias] = self.scope.values["self." + done.name]
        if done.kind == "class" and done.name:
            # `MaskBuilders.keep_causal(n)`: a static helper of a class of this file gives what
            # its returns give, called through the class (or an alias of it)
            properties = {m.name for m in getattr(done.node, "body", []) if isinstance(
                m, ast.FunctionDef) and any(isinstance(d, ast.Name) and d.id == "property"
                                            for d in m.decorator_list)}
            for key, helper in done.values.items():
                if "." not in key and (helper.returns_bool or helper.result is not None
                                       or helper.inline is not None):
                    self.bind(f"{done.name}.{key}", replace(helper, param_roles=()))
            if (item := done.values.get("self.__getitem__")) is not None and item.parts:
                # a dataset class: what a DataLoader's default batching stacks (values)
                self.bind(f"{done.name}.__getitem__", Value(parts=item.parts))
            for method in getattr(done.node, "body", []):
                # `Config.from_dict(d)`: a classmethod called through its class gives what its
                # returns give (`return cls(**d)`: an instance of the class)
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                        (module_dotted(d) or "") == "classmethod" for d in method.decorator_list):
                    held = done.values.get("self." + method.name)
                    if held is not None and held.result is not None:
                        self.bind(f"{done.name}.{method.name}", replace(held, param_roles=()))
            for key in properties:  # what `instance.name` reads (see values)
                held = done.values.get("self." + key)  # (what `self.name` reads, see above)
                if held:
                    self.bind(f"{done.name}.{key}", Value(result=held, prop=True))
        for called in ("forward", "__call__"):
            # `self.embed(x)` of another class: what its forward (or a plain class's __call__,
            # a `CausalMaskBuilder()` instance) gives
            if done.kind != "class" or not done.name or not (
                    forward := done.values.get("self." + called)):
                continue
            # a mask module: `self.attn_mask(n)` of SongNet's `SelfAttentionMask`, whose forward
            # returns a slice of the bool triangle its __init__ built (read where the call's
            # inlined forward, which sees the caller's `self`, gives nothing)
            mask_module = isinstance(forward.result, Value) and (
                forward.result.dtype == "bool") and forward.result.tri is not None
            if forward.inline is not None:
                self.bind(f"{done.name}.{called}", Value(inline=replace(
                    forward.inline, foreign=True), result=forward.result if mask_module else None))
            elif (called == "__call__" or mask_module) and isinstance(forward.result, Value):
                self.bind(f"{done.name}.{called}", Value(result=forward.result))
            elif forward.parts:
                # `x, mel_len, mel_mask = self.variance_adaptor(x, ...)`: what each position of
                # the tuple every return of its forward gives (FastSpeech2's length regulator)
                self.bind(f"{done.name}.{called}", Value(parts=forward.parts))
        if done.kind == "class" and done.name and isinstance(done.node, ast.ClassDef) and any(
                (module_dotted(b) or "").split(".")[-1] in _ENUM_BASES for b in done.node.bases):
            for stmt in done.node.body:  # `CAUSAL = "causal"`: `AttentionType.CAUSAL`
                named = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(
                    stmt.targets) == 1 else stmt.target if isinstance(
                    stmt, ast.AnnAssign) and stmt.value is not None else None
                if isinstance(named, ast.Name) and not named.id.startswith("_"):
                    member = f"{done.name}.{named.id}"
                    self.bind(member, replace(self.lookup(member), member=member))
        if done.kind == "class":
            constants = {key: value for key, value in done.values.items()
                         if "." not in key and (value.flag is not None or value.number is not None
                                                or value.names_dtype is not None
                                                # `mask_value: float = torch.finfo(
                                                # torch.float32).min` (MC517 where it fills)
                                                or value.wide_finfo)}
            for attr, default in _init_defaults(done.node).items():
                # `def __init__(self, mask_fill_value=-1e-9): self.mask_fill_value =
                # mask_fill_value` (a PretrainedConfig subclass): `config.mask_fill_value`
                facts = self.value(default)
                if attr not in constants and (facts.number is not None
                                              or facts.flag is not None):
                    constants[attr] = Value(number=facts.number, flag=facts.flag)
            for stmt in getattr(done.node, "body", []):
                # `mask: MaskConfig = field(default_factory=MaskConfig)`: the nested record's
                # defaults, as `mask.fill_value`
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and (
                        nested := self._class_fields.get(_annotation_name(stmt.annotation) or "")):
                    constants.update({f"{stmt.target.id}.{key}": value
                                      for key, value in nested.items()})
            if constants:
                node = done.node
                # (which defaults hold is settled on the first read of one: most classes'
                # fields are never read through an instance of this file, and the search for
                # what sets them walks the whole module)
                self._class_fields[done.name] = _Defaults(
                    constants, lambda fields: self._defaults_that_hold(node, fields))
                for key, value in constants.items():
                    if value.number is not None:  # `MaskValue.PAD` (see values.number)
                        self.bind(f"{done.name}.{key}", Value(number=value.number))
            if fields := _instance_fields(done.node, done.values):
                self._instance_fields[done.name] = fields
            self._class_attrs[done.name] = {
                key: value for key, value in done.values.items()
                if key.startswith("self.") and (value.result is not None
                                                or value.result_unless_none is not None)}
            for attr, call in done.self_fills:
                if attr in done.param_attrs:
                    self.report("MC505", call, f"masked_fill_ on parameter self.{attr}: in-place "
                                "fill of a tensor that requires grad; use masked_fill")

    def _narrow(self, node: ast.AST | None) -> None:
        """Entering the branch of a dtype guard where the name is not bool (mmdet's and torch's
        `if attn_mask.dtype == torch.bool: masked_fill_ ... else: weights += attn_mask`): what
        the walk believed about its dtype does not hold there."""
        name, in_body, _ = self._narrowed[id(node)]
        self._narrowed[id(node)] = (name, in_body, self.scope.values.get(name))
        self.scope.values[name] = UNKNOWN  # shadows an enclosing scope's value too

    def _unnarrow(self, node: ast.AST | None) -> None:
        assert isinstance(node, ast.If)
        name, in_body, before = self._narrowed.pop(id(node))
        if _assigns_name(node.body if in_body else node.orelse, name):
            return  # the branch bound the name anew: its value stands
        if before is None:
            self.scope.values.pop(name, None)
        else:
            self.scope.values[name] = before

    def _return(self, node: ast.Return) -> None:
        if self.scope.kind == "function":
            if node.value is None or is_none(node.value):
                # `return None` (or a bare return): the tensor the other returns give is what
                # a caller that uses the result as a tensor holds
                self.scope.returns_none = True
                return
            returned = self.value(node.value)
            if (made := self._returned_dict(node)) is not None:
                returned = replace(returned, dict_of=made)
            built = _constructed_class(node.value, self.scopes)
            if built in self._local_classes and not returned.module:
                # `return cls(**kwargs)` of a classmethod, `return Config(...)`: an instance of
                # a class of this file (a record's fields are read through it)
                returned = replace(returned, module=built)
            if returned.floated_at is not None and any(
                    value.additive for value in self.scope.values.values()):
                # a helper that builds the additive form and returns the float 0/1 mask (BERT's
                # `get_extended_attention_mask` with the bias bound to a misspelled name): the
                # return is what is wrong, not the cast
                returned = replace(returned, floated_at=site(node))
            self.scope.returns.append(returned)
            if isinstance(node.value, ast.Call) and (
                    handed := self._returned_parts(node.value)):
                # `return prepare_data(...)` (a named lambda's body): the tuple that returns
                self.scope.tuple_returns.append(handed)
            if isinstance(node.value, ast.Tuple):
                self.scope.tuple_returns.append(tuple(self.value(e) for e in node.value.elts))
                for element in node.value.elts:
                    if isinstance(element, ast.Dict):
                        self._note_fields(element)  # `return {"patches": p, ...}, targets`
            if isinstance(node.value, ast.Dict):
                self._note_fields(node.value)

    def _returned_dict(self, node: ast.Return) -> str | None:
        """The function's name where it returns a dict literal of string keys, one a mask's
        (`return {"char_ids": ids, "char_mask": keep}`), and is a plain function of this file
        (a collate function): what a call of it holds (`Value.dict_of`)."""
        value = node.value
        if not isinstance(value, ast.Dict) or self.scope.method or not self.scope.name or (
                self.scope.name not in self._local_defs) or not all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
            return None
        return self.scope.name if any(
            "mask" in k.value.lower() for k in value.keys  # type: ignore[union-attr]
        ) else None

    def _yield(self, node: ast.Yield) -> None:
        if isinstance(node.value, ast.Dict):
            self._note_fields(node.value)  # a generator collator: `yield {"mask": pad, ...}`
        if self.scope.kind == "function":
            # `yield tokens, mask`: what a loop over the generator unpacks (`_yield_parts`)
            elements = node.value.elts if isinstance(node.value, ast.Tuple) and not any(
                isinstance(e, ast.Starred) for e in node.value.elts) else None
            self.scope.yields.append(None if elements is None else tuple(
                self.value(e) for e in elements))
            for element in elements or ():
                if isinstance(element, ast.Dict):
                    self._note_fields(element)  # `yield {"ids": ids, "mask": m}, labels`

    def _note_fields(self, record: ast.Dict) -> None:
        """`return {"features": x, "padding_mask": pad.float()}` (a collate_fn, a model's
        outputs), or such a dict bound to a name: what each string key holds, read back as
        `batch["padding_mask"]` where `batch` is not known (values' `_describe_subscript`).
        Keys returned with different facts keep the facts they share."""
        module = self.scopes[0].values
        for key, value in zip(record.keys, record.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                # (a (batch, seq) layout kept: `batch["padding_mask"]` handed to SDPA bare is
                # MC515 where it is handed, as the maker's own name would be)
                facts = _seedable(self.value(value), part=True)
                name = f"[{key.value}]"
                held = module.get(name)
                module[name] = facts if held is None else _join(held, facts)

    def _join_branches(self, node: ast.AST | None) -> None:
        assert isinstance(node, ast.If)
        for name, stmt in self._joins.pop(id(node)).items():
            self._branch_marks.pop(id(stmt), None)
            body = self._branch_values.pop((id(stmt), name), UNKNOWN)
            other = self.scope.values.get(name, UNKNOWN)
            # A branch that binds None adds nothing: where the name is used as a tensor, the
            # other branch gave it (Swin-UNETR's `attn_mask = mask_matrix` / `shifted_x,
            # attn_mask = x, None`, then `self.attn(x, mask=attn_mask)`), as for `a if t else
            # None` (values' `_either`)
            # (None binds nothing, so only a join of something with nothing is looked at)
            if body and not other and _branch_binds_none(node.orelse, name) and not (
                    _branch_binds_none(node.body, name)):
                other = body
            elif other and not body and node.orelse and _branch_binds_none(
                    node.body, name) and not _branch_binds_none(node.orelse, name):
                body = other
            joined = _join(body, other)
            default = self._default_path(node, name, body, other)
            if default is not None:
                joined = replace(joined, **{fact: getattr(default, fact)
                                            for fact in _CONVENTION_FACTS})
            if not joined.float01 and joined.float01_at is None:
                made: ast.AST | None = None
                if _made_float01(body) and not _made_float01(other):
                    made = stmt
                elif _made_float01(other) and not _made_float01(body):
                    made = _last_binding(node.orelse, name)
                if made is not None:
                    joined = replace(joined, float01_at=site(made))
            self.bind(name, joined)

    def _default_path(self, node: ast.If, name: str, body: Value, other: Value) -> Value | None:
        """Under `if mask is not None: m = mask.unsqueeze(1) else: m = <built here>` (a
        parameter that defaults to None, rec4torch's DIN pooling): what the branch that runs
        without the parameter gives, when it says which convention the mask has and the
        other branch only reshapes the parameter. Both paths then read `m` alike (the author
        builds the default the way callers pass it), so its convention holds after the if."""
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(
                test.ops[0], (ast.Is, ast.IsNot)) and isinstance(test.left, ast.Name)
                and is_none(test.comparators[0])):
            return None
        param = test.left.id
        scope = self.scope
        if scope.kind != "function" or param not in scope.params or param in scope.assigned:
            return None
        given, built = (node.body, node.orelse) if isinstance(test.ops[0], ast.IsNot) else (
            node.orelse, node.body)
        given_value, built_value = (body, other) if given is node.body else (other, body)
        binding = _last_binding(given, name)
        if not isinstance(binding, (ast.Assign, ast.AnnAssign)) or binding.value is None or (
                _reshape_root(binding.value) != param) or any(
                getattr(given_value, fact) for fact in _CONVENTION_FACTS):
            return None
        if _last_binding(built, name) is None or not any(
                getattr(built_value, fact) for fact in _CONVENTION_FACTS):
            return None
        return built_value

    def _ids_layout(self, default: ast.expr | None) -> dict[str, Any]:
        """`torch.ones_like(input_ids)` as a mask's default: the token ids' (batch, seq) axes,
        and where they were given (MC515 when that mask reaches SDPA's attn_mask as it is)."""
        if isinstance(default, ast.Call) and call_name(default) == "ones_like" and (
                len(default.args) == 1) and self.value(default.args[0]).token_ids:
            return {"layout": "BS", "layout_at": site(default)}
        return {}

    def _bind_statement(self, node: ast.AST | None) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and id(node) in self._neutral_defaults:
            name = self._neutral_defaults.pop(id(node))
            facts = self.value(node.value) if node.value is not None else UNKNOWN
            if facts.all_ones or facts.zeros:
                # The default stands in for "no mask": the parameter holds what its callers
                # pass, of the default's dtype (`attention_mask = torch.ones_like(input_ids)`:
                # the tokenizer's int64 mask of 1 = real token), not "all ones".
                self.scope.assigned.add(name)
                self.bind(name, Value(dtype=facts.dtype, hf_keep=facts.all_ones and (
                    facts.dtype == "int" and "attention_mask" in name), **self._ids_layout(
                        node.value)))
                return
            given = self.scope.values.get(name, UNKNOWN)
            if facts.dtype == "bool" and given.dtype == "int" and (
                    given.hf_keep or given.int_mask):
                # `if attention_mask is None: attention_mask = input_ids.ne(pad)` where every
                # call gives the tokenizer's int64 mask: the default's bool stands for the
                # calls that give none, the int for the others (a `~` of it: MC518)
                if isinstance(node, ast.Assign):
                    self._assign(node)
                elif node.value is not None:
                    self._assign_target(node.target, node.value, self._bound_facts(node.value))
                self.bind(name, replace(self.scope.values.get(name, UNKNOWN), dtype=None,
                                        int_on_a_path=True))
                return
        if isinstance(node, ast.Assign):
            self._assign(node)
            for marked in self._branch_marks.get(id(node), ()):
                self._branch_values[(id(node), marked)] = self.scope.values.get(marked, UNKNOWN)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            if isinstance(node.value, ast.Dict):
                self._note_fields(node.value)  # `CONFIG: Config = {"mask_value": -1e9}`
            self._assign_target(node.target, node.value, self._bound_facts(node.value))
            for marked in self._branch_marks.get(id(node), ()):
                self._branch_values[(id(node), marked)] = self.scope.values.get(marked, UNKNOWN)
        elif isinstance(node, ast.NamedExpr):  # `(a := a * keep)` binds like `a = a * keep`
            self._assign_name(node.target.id, node.value, self.value(node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
                self._torch_mha(node.annotation)):
            # `layer: nn.MultiheadAttention` declared (a module or class attribute annotation)
            self.scope.values[node.target.id] = Value(mha=True)
            if self.scope.kind == "class":
                self.scope.values["self." + node.target.id] = Value(mha=True)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
                self.scope.kind == "class") and (dtype := _jaxtyping_dtype(node.annotation)):
            # `pairing_key_hash: Int32[Tensor, "depth n"]`, a dataclass field: its dtype in the
            # methods (an int32 hash filled with a -999991 sentinel is no float16 overflow)
            self.scope.values["self." + node.target.id] = Value(dtype=dtype)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
                _annotation_name(node.annotation) in self._class_roles):
            # `model: MyModel` declared: an instance, as a parameter annotated so would be
            annotated = _annotation_name(node.annotation) or ""
            self.scope.values[node.target.id] = Value(
                param_roles=self._class_roles[annotated],
                module=annotated if annotated in self._local_classes else None)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, (ast.Name, ast.Attribute, ast.Subscript)):
                # `s += mask` reads like `s = s + mask` for the rules on + and *
                left = ast.copy_location(_as_load(node.target), node.target)
                self._binop(ast.copy_location(ast.BinOp(left, node.op, node.value), node))
            self._taint(node.target)
            self._forget_targets(node.target)
            if isinstance(node.target, ast.Name) and isinstance(node.op, ast.Mult):
                product = ast.copy_location(ast.BinOp(
                    ast.Name(node.target.id, ast.Load()), ast.Mult(), node.value), node)
                zeroed = self._product_of(product)
                if zeroed is not None:
                    self._owner(node.target.id).zeroed[node.target.id] = zeroed  # `s *= keep`
                elif (scaled := self.value(product)).finfo_min:
                    # `attention_mask *= torch.finfo(dtype).min` (TimesFM's padding plane)
                    self.bind(node.target.id, scaled)
        elif isinstance(node, ast.For):
            self._forget_targets(node.target)
        elif isinstance(node, ast.Assert):
            for name in _asserted_bool(node.test):
                # `assert attn_mask.dtype == torch.bool` (MIST's multi_head_attention_forward):
                # past the assertion the name holds a bool tensor
                self.bind(name, replace(self.lookup(name), dtype="bool", zero_one=False,
                                        float01=False, cast01=False, number=None))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                note_import(alias.name, None, alias.asname)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if node.module or node.level:
                    # a relative import (`from .transformer import TransformerEncoder`) is the
                    # project's own class, whatever torch name it shares (vocex)
                    note_import("." * node.level + (node.module or ""), alias.name,
                                alias.asname)
                local = alias.asname or alias.name
                if alias.name in _API_NAMES:
                    self.scope.values[local] = Value(api=alias.name)
                    self.scope.assigned.add(local)

    # --- node handlers ---

    def _call(self, call: ast.Call, parent: ast.AST | None) -> None:
        if self.calls_to is not None:
            self._record_call(call)
        self._note_key_axes(call)
        if self.record_calls:
            self._record_passed(call)
        name = call_name(call, self.lookup)
        if name == "triu_indices" and self.record_calls and self.scope.key is not None:
            offset = argument(call, 2, "offset")
            if isinstance(offset, ast.IfExp) and isinstance(offset.test, ast.Name):
                self.offset_flags.add((self.scope.key, offset.test.id))
        if name is None:
            if isinstance(call.func, ast.Subscript) and (len(call.args) > 1 or any(
                    kw.arg in _MHA_MASK_KWARGS for kw in call.keywords)):
                module = self.value(call.func)  # `self.attention_layers[i](q, k, v, ...)`
                if module.mha:
                    self._mha_call(call, module.module)
                    self._inverted_kwargs(call)
            if isinstance(call.func, ast.Subscript) and self._roles_known:
                # `self.attn[self.impl](q, k, v, mask)`: one element of a container of modules
                picked = self.value(call.func.value).element_roles
                if picked:
                    self._helper_call(call, picked)
                elif (keyed := self._keyed_module(call.func)) is not None and (
                        roles := keyed.param_roles or self._class_roles.get(
                            keyed.module or "", ())):
                    self._helper_call(call, roles)
            return
        if name in _LIST_GROWS and isinstance(call.func, ast.Attribute) and isinstance(
                call.func.value, ast.Name):
            self._list_grows(call.func.value.id, call, name)
        if name == "partial" and len(call.args) == 1 and call.keywords and self.value(
                call.args[0]).api == "scaled_dot_product_attention":
            # `partial(F.scaled_dot_product_attention, attn_mask=m)` returned or stored: the
            # mask it binds is checked where it is bound (its calls may be out of sight); a
            # call of it in sight checks the same keywords again (one finding, see `_finish`)
            self._sdpa(ast.copy_location(ast.Call(call.args[0], [], [
                kw for kw in call.keywords if kw.arg == "attn_mask"]), call))
        if name == "scaled_dot_product_attention" and self._own_call(call):
            pass  # the file's own function of that name: what it does is read from its body
        elif name in {"masked_fill", "masked_fill_"}:
            self._masked_fill(call, name, parent)
        elif name == "where" and module_dotted(call.func) == "torch.where" and call.args and (
                mentions_mask(call.args[0]) or any(is_wide_finfo_min(a) for a in call.args[1:3])):
            self._where(call)
        elif name in {"full", "full_like", "new_full", "fill_"}:
            self._full(call, name)
        elif name in {"triu", "triu_"}:
            self._triu(call, parent)
        elif name in {"tril", "tril_"}:
            self._tril(call)
        elif name == "scaled_dot_product_attention":
            self._sdpa(call)
        elif name in {"softmax", "log_softmax"}:
            self._softmax(call, parent)
        elif name in {"add", "add_", "mul", "sub", "sub_"} and not call.keywords:
            self._arithmetic_call(call, name)
        elif name == "sum" and isinstance(call.func, ast.Name) and len(call.args) == 1:
            self._builtin_sum(call, parent)
        if isinstance(call.func, ast.Name) and call.func.id in self._record_fields:
            self._note_record(call, call.func.id)
        elif name in {"bitwise_not", "bitwise_not_"}:
            operand = call.args[0] if is_module_call(call) and len(call.args) == 1 else (
                receiver(call) if not is_module_call(call) and not call.args else None)
            if operand is not None:
                self._invert(ast.copy_location(ast.UnaryOp(ast.Invert(), operand), call), call)
        elif name == "add_argument" and self.record_calls and not self.seeds:
            self._note_option(call)
        elif name == "requires_grad_" and isinstance(call.func, ast.Attribute) and isinstance(
                call.func.value, ast.Name):
            held = call.func.value.id
            self.bind(held, self.value(call))
        elif name == "register_parameter" and self._class_scope() is not None:
            attr = call.args[0] if call.args else None
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                self._class_scope_add(attr.value, param=True)
        elif name == "append" and len(call.args) == 1 and isinstance(call.func, ast.Attribute) and (
                isinstance(call.func.value, ast.Attribute)) and isinstance(
                call.func.value.value, ast.Name) and call.func.value.value.id == "self":
            # `self.attention_layers.append(nn.MultiheadAttention(d, h))` (SASRec's __init__,
            # directly or through a name bound to the module): a list of attention modules
            added = self.value(call.args[0])
            listed = call.func.value.attr
            if added.mha:
                self._class_scope_add(listed, value=replace(
                    self.lookup("self." + listed),
                    element_mha=added.module or "MultiheadAttention"))
            elif self._local_classes and (made := _constructed_class(
                    call.args[0], self.scopes)) in self._local_classes:
                # `self.attention_layers.append(TimeAwareMultiHeadAttention(...))` in a loop
                # (TiSASRec's __init__), called as `self.attention_layers[i](...)`: instances of
                # that class; appends of different classes hold none known ("")
                cls = self._class_scope()
                known = (cls.values.get("self." + listed) if cls is not None else None) or (
                    self.lookup("self." + listed))
                self._class_scope_add(listed, value=replace(
                    known, element_module=made if known.element_module in {None, made} else "",
                    element_roles=self._class_roles.get(made or "", ())))
            elif self._local_classes and (parts := self._element_parts(call.args[0])):
                # `self.layers.append(nn.ModuleList([Attention(...), FeedForward(...)]))` in a
                # loop (lucidrains' layout, unpacked by `for attn, ff in self.layers:`); the
                # parts of appends that differ are not known
                known = self.lookup("self." + listed)
                self._class_scope_add(listed, value=replace(known, element_parts=parts if (
                    not known.element_parts or known.element_parts == parts) else ()))
        elif name == "register_buffer" and self._class_scope() is not None and len(call.args) >= 2:
            attr = call.args[0]
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                self._class_scope_add(attr.value, buffer=True, value=self.value(call.args[1]))
        func = _module_called(call.func)
        # (`cls.expand_mask(...)` in a classmethod calls the class's own method, as self. does)
        callee = func.id if isinstance(func, ast.Name) else (
            "self." + func.attr if isinstance(func, ast.Attribute) and isinstance(
                func.value, ast.Name) and func.value.id in {"self", "cls"} else None)
        if callee is not None and self._roles_known:  # a function of the file, or an instance
            callee_value = self.lookup(callee)
            roles = callee_value.param_roles or (
                # an instance a constructor was given (`self.layer = layer`, seeded)
                self._class_roles.get(callee_value.module, ()) if callee_value.module else ())
            if not roles and callee == "model" and self._class_roles and not any(
                    "model" in scope.values or "model" in scope.assigned
                    for scope in self.scopes):
                model = self._file_model()  # a free `model`, as a parameter named so (below)
                roles = self._class_roles[model] if model is not None else ()
            if callee_value.or_mha and not self._forward_takes(callee_value.module, call):
                roles = ()  # the call is the other branch's: torch's attention module
            if roles:
                self._helper_call(call, roles)
        if isinstance(call.func, (ast.Attribute, ast.Name)) and (len(call.args) > 1 or any(
                kw.arg in _MHA_MASK_KWARGS for kw in call.keywords)):
            module = self.value(call.func)
            if module.mha:
                self._mha_call(call, module.module)
            elif module.or_mha and not self._forward_takes(module.module, call):
                self._mha_call(call, "MultiheadAttention")
        self._inverted_kwargs(call)
        if type(parent) is ast.Expr and "MC525" in self.enabled and not (
                self.displays and self._at_top_level(parent)):
            self._discarded_result(call, name)
        if self.scope.bool_triu or self._class_triu or (
                name in _FILLS_BY_CONDITION and self._may_hide_diagonal()):
            self._bool_triu_use(call)
        self._zero_mask_call(call, name)
        self._note_mutations(call, name)
        if name == "masked_fill_":
            self._inplace_fill(call)

    def declare_classes(self, class_roles: dict[str, tuple[_Role, ...]],
                        methods: dict[str, dict[str, Value]] | None = None,
                        functions: dict[str, tuple[_Role, ...]] | None = None) -> None:
        """Start the walk knowing what these classes' forward does with its parameters (classes
        defined below their first use, see `lint_tree`), these methods (called as
        `self.name(...)` above their definition) and these module functions (called above
        theirs)."""
        if class_roles:
            self._class_roles.update(class_roles)
            self._roles_known = True
        if methods:
            self._declared_methods = methods
            self._roles_known = True
            self._dispatches = self._dispatches or any(
                value.element_defs for values in methods.values() for value in values.values())
        if functions:
            for name, roles in functions.items():
                self.scopes[0].values[name] = Value(param_roles=roles)
            self._roles_known = True

    def _file_model(self) -> str | None:
        """The model a training or evaluation function of this file takes as `model`: the one
        class defined above with a forward that no other class of the file instantiates (the
        top of its module tree), when that forward has `_Role`s; None when there are several
        such classes or none."""
        if self._submodules is None:
            inner: set[str] = set()
            modules: set[str] = set()
            for node in subnodes(self._tree) if self._tree is not None else ():
                if isinstance(node, ast.ClassDef):
                    inner.update(call.func.id for call in subnodes(node) if isinstance(
                        call, ast.Call) and isinstance(call.func, ast.Name))
                    if any(isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and m.name == "forward" for m in node.body):
                        modules.add(node.name)
            self._submodules = (frozenset(inner), frozenset(modules))
        inner_names, modules_names = self._submodules
        roots = [name for name in self._class_attrs
                 if name in modules_names and name not in inner_names]
        return roots[0] if len(roots) == 1 and roots[0] in self._class_roles else None

    def _at_top_level(self, statement: ast.stmt) -> bool:
        """The last top-level statement of a cell (cells split at `# %%` / `# In[` lines; a
        notebook's cells are joined with such a line between them)."""
        if self._shown is None:
            body = getattr(self._tree, "body", None)
            starts = [self.source.count("\n", 0, m.start()) + 1
                      for m in _CELL_MARKER.finditer(self.source)]
            last: dict[int, ast.stmt] = {}
            for stmt in body if isinstance(body, list) else []:
                last[bisect.bisect_right(starts, stmt.lineno)] = stmt
            self._shown = {id(stmt) for stmt in last.values()}
        return id(statement) in self._shown

    def _expects_an_error(self, node: ast.AST) -> bool:
        """Whether `node` runs inside `with pytest.raises(...)` / `self.assertRaises(...)` (or
        `assertRaisesRegex`): a statement there is there for its exception."""
        if self._tree is None:
            return False
        parents = self._parents()
        here = parents.get(id(node))
        while here is not None and not isinstance(here, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                         ast.ClassDef, ast.Module)):
            if isinstance(here, (ast.With, ast.AsyncWith)) and any(
                    isinstance(item.context_expr, ast.Call) and last_name(
                        item.context_expr.func) in _EXPECTS_ERROR for item in here.items):
                return True
            here = parents.get(id(here))
        return False

    def _none_just_before(self, node: ast.If, parent: ast.AST | None, name: str) -> bool:
        """Whether `name` is None where `node` tests it: bound to None last by the statements
        before it in its block, or, where that block binds nothing, in the blocks of the `if`,
        `with` and `try` statements around it (not a loop's: an earlier turn may bind it),
        up to the function's own body."""
        here: ast.AST = node
        path: list[ast.AST] | None = None
        while parent is not None:
            found = _none_in_block(here, parent, name)
            if found is not None:
                return found
            if not isinstance(parent, (ast.If, ast.With, ast.AsyncWith, ast.Try)) or (
                    isinstance(parent, ast.Try) and not any(s is here for s in parent.body)):
                return False  # (a try's else and finally run after its body, unread here)
            if path is None:  # the statements from the function down to `node`
                path = _statement_path(self.scope.node, node) if self.scope.node else []
            at = next((i for i, s in enumerate(path) if s is parent), 0)
            here, parent = parent, path[at - 1] if at > 0 else None
        return False

    def _parents(self) -> dict[int, ast.AST]:
        """Each node's parent in the module (built once, on first need; callers have a tree)."""
        if self._parent_of is None:
            assert self._tree is not None
            self._parent_of = {id(child): parent for parent in ast.walk(self._tree)
                               for child in ast.iter_child_nodes(parent)}
        return self._parent_of

    def _discarded_result(self, call: ast.Call, name: str) -> None:
        """`scores.masked_fill(pad, -inf)` as a statement: the filled copy is thrown away.
        Not casts: `model.float()` and `.to()` work in place on a module, and a dropped cast
        of a tensor is often harmless (type promotion) or only a device move."""
        if name not in _DISCARDED_FILLS or any(kw.arg in {"out", "inplace"}
                                               for kw in call.keywords):
            return
        if self._expects_an_error(call):
            return  # `with pytest.raises(RuntimeError): dst.masked_scatter(...)`: run to raise
        if name == "masked_fill" and self._fills_the_kept(call):
            return
        base = receiver(call)
        if is_module_call(call):
            if base is None or (module_dotted(base) or "").split(".")[0] != "torch":
                return  # numpy's triu, a bare imported name: not known to be torch's
            if name == "where" and len(call.args) != 3:
                return  # one-argument torch.where(c) is nonzero()
            # torch.where's first argument is the condition, not the tensor to keep
            shown = f"torch.{name}()"
            held = call.args[0] if call.args and name != "where" else None
            fixed = f"torch.{name}({{}}, ...)"
        else:
            if name == "where":
                return  # pandas' DataFrame.where, not a tensor's
            if len(call.args) > _TENSOR_METHOD_ARGS.get(name, len(call.args)):
                return  # more arguments than the tensor method takes: not a tensor's
            shown, held, fixed = f".{name}()", base, f"{{}}.{name}(...)"
        what = "the mask is never applied" if name in _FILLS_A_MASK else "nothing changes"
        target = self._text(held) if isinstance(held, (ast.Name, ast.Attribute)) else None
        how = f" (`{target} = {fixed.format(target)}`)" if target else ""
        self.report("MC525", call, f"{shown} returns a new tensor and this statement throws it "
                    f"away: {what}; assign the result{how}")

    def _fills_the_kept(self, call: ast.Call) -> bool:
        """`probs.masked_fill(m, 0)` thrown away in a function that already filled with `~m`
        (transformers 4.x DeBERTa: `scores.masked_fill(~(mask), min)`, softmax, then this): the
        mask is applied, and this dead line would fill the kept positions if it were assigned."""
        condition = argument(call, 0, "mask")
        node = self.scope.node
        if not isinstance(condition, ast.Name) or node is None:
            return False
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and sub is not call and call_name(sub) in {
                    "masked_fill", "masked_fill_"} and sub.lineno < call.lineno:
                other = argument(sub, 0, "mask")
                if isinstance(other, ast.UnaryOp) and isinstance(other.op, ast.Invert) and (
                        isinstance(other.operand, ast.Name)) and other.operand.id == condition.id:
                    return True
        return False

    def _assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Dict):
            self._note_fields(node.value)  # `batch = {"padding_mask": pad.float(), ...}`
        facts = self._bound_facts(node.value)
        for target in node.targets:
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(
                    target.elts) == len(node.value.elts) and not any(
                    isinstance(e, ast.Starred) for e in target.elts + node.value.elts):
                # `self.norm1, self.attn = nn.LayerNorm(d), Attention(d)`: each target what its
                # own value is (all read before any is bound, as Python does)
                pairs = [(t, v, self._bound_facts(v))
                         for t, v in zip(target.elts, node.value.elts, strict=True)]
                for element, value, known in pairs:
                    self._assign_target(element, value, known)
                continue
            self._assign_target(target, node.value, facts)

    def _bound_facts(self, value: ast.expr) -> Value:
        """What a name bound to `value` holds: its facts, and what an instance or a container
        of a class of this file (or of torch's attention modules) is."""
        if isinstance(value, ast.IfExp):
            kept = [b for b in (value.body, value.orelse) if not is_none(b)]
            if len(kept) == 1:
                # `T5CrossAttention(cfg) if is_decoder else None`: where it is called, it is
                # the instance
                value = kept[0]
        facts = self.value(value)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and (
                value.func.id in self._class_roles):  # `model = MyModel(...)`
            facts = replace(facts, param_roles=self._class_roles[value.func.id])
        if isinstance(value, ast.IfExp) and self._local_classes and (
                either := self._module_or_mha(value)) is not None:
            facts = either
        built = _built_module(value)
        if built in self._local_classes and (not facts.module or facts.mha):
            # an instance of a class of this file, also one named like torch's (the Annotated
            # Transformer's own `Transformer(...).to(device)` takes keep-masks, not
            # nn.Transformer's)
            facts = replace(facts, module=built, mha=False)
        if self._registries:
            if isinstance(value, ast.Dict) and id(value) in self._registries:
                facts = replace(facts, classes=self._registries[id(value)])
            elif picked := self._registry_choice(value):
                facts = replace(facts, classes=picked)  # `block = ATTENTION_TYPES[cfg.kind]`
        elements = _container_class(value)
        if elements is None and self._local_classes and (parts := self._nested_parts(value)):
            facts = replace(facts, element_parts=parts)
        if elements is None and self._local_classes and (keyed := self._nested_keys(value)):
            facts = replace(facts, element_keys=keyed)
        if elements is None and isinstance(value, ast.Call) and call_name(value) in {
                "ModuleList", "Sequential"} and len(value.args) == 1:
            # `nn.ModuleList(attn_layers)` of a parameter every call gives a list of instances
            # of one class of this file (seeded)
            given = value.args[0]
            given = given.value if isinstance(given, ast.Starred) else given
            if isinstance(given, ast.Name):
                elements = self.lookup(given.id).element_module
        # `nn.ModuleList(block(d) for ...)` or `self.attn = block(d)` of a registry's class
        chosen = self.lookup(elements).classes if elements is not None and (
            elements not in self._local_defs) else ()
        if not chosen and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and (
                value.func.id not in self._local_defs) and (
                built_from := self.lookup(value.func.id).classes):
            facts = replace(facts, **self._dispatch_facts(built_from, "param_roles"))
        if elements in self._class_roles:  # `nn.ModuleList(Block(d) for _ in range(n))`
            facts = replace(facts, element_roles=self._class_roles[elements or ""])
        elif chosen:
            facts = replace(facts, **self._dispatch_facts(chosen, "element_roles"))
        elif functions := _function_table(value):
            # `ATTENTION_FUNCTIONS = {Backend.EAGER: eager_attention, Backend.SDPA: sdpa}`:
            # a function picked from it at run time does what each of them does
            joined_roles: dict[tuple[int, str], _Role] = {}
            for function in functions:
                for role in self.lookup(function).param_roles:
                    joined_roles.setdefault((role.position, role.role), role)
            if joined_roles:
                self._dispatches = True
                facts = replace(facts, element_roles=tuple(joined_roles.values()), element_defs=(
                    tuple(("", f) for f in functions if f in self._local_defs)))
        elif elements is None and (classes := _dispatch_classes(value)):
            # `nn.ModuleDict({"sdpa": SdpaAttention(), "eager": EagerAttention()})`: an element
            # picked at run time may be any of them, so a call of one does what each does
            facts = replace(facts, **self._dispatch_facts(classes, "element_roles"))
        if elements is not None and elements in self._local_defs:
            facts = replace(facts, element_module=elements)
        attention = _container_attention(value)
        if attention is not None:  # `nn.ModuleList([nn.MultiheadAttention(d, h) for ...])`
            facts = replace(facts, element_mha=attention)
        return facts

    def _nested_parts(self, value: ast.expr) -> tuple[Value, ...]:
        """`nn.ModuleList([nn.ModuleList([Attention(...), FeedForward(...)]) for _ in
        range(n)])` (x-transformers' and lucidrains' layout, unpacked by `for attn, ff in
        self.layers:`): what each position of an element is, an instance of a class of this
        file (what its calls do) or unknown; () for anything else."""
        element = _comprehended_module(value)
        return () if element is None else self._element_parts(element)

    def _keyed_module(self, func: ast.Subscript) -> Value | None:
        """`layer["attn"]` of a ModuleDict element bound by a loop (`element_keys`): what the
        key holds; None for any other subscript."""
        if isinstance(func.slice, ast.Constant) and isinstance(func.slice.value, str):
            return self.value(func)
        return None

    def _nested_keys(self, value: ast.expr) -> tuple[tuple[str, Value], ...]:
        """`nn.ModuleList(nn.ModuleDict({"attn": Attention(...), "ffn": ...}) for _ in
        range(n))`: what each key of an element is, an instance of a class of this file (what
        its calls do); () for anything else, or where no key holds such an instance."""
        inner = _comprehended_module(value)
        if not (isinstance(inner, ast.Call) and call_name(inner) == "ModuleDict" and len(
                inner.args) == 1 and not inner.keywords and isinstance(inner.args[0], ast.Dict)):
            return ()
        return tuple(
            (key.value, Value(module=made.func.id,
                              param_roles=self._class_roles.get(made.func.id, ())))
            for key, made in zip(inner.args[0].keys, inner.args[0].values, strict=True)
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(
                made, ast.Call) and isinstance(made.func, ast.Name) and (
                made.func.id in self._local_classes))

    def _element_parts(self, inner: ast.expr) -> tuple[Value, ...]:
        """`nn.ModuleList([Attention(...), FeedForward(...)])` (or the bare list): what each
        position is (see `_nested_parts`); () for anything else."""
        if isinstance(inner, ast.Call) and call_name(inner) == "ModuleList" and len(
                inner.args) == 1 and not inner.keywords:
            inner = inner.args[0]
        if not isinstance(inner, (ast.List, ast.Tuple)) or any(
                isinstance(made, ast.Starred) for made in inner.elts):
            return ()
        parts = tuple(
            Value(module=made.func.id, param_roles=self._class_roles.get(made.func.id, ()))
            if isinstance(made, ast.Call) and isinstance(made.func, ast.Name) and (
                made.func.id in self._local_classes) else UNKNOWN for made in inner.elts)
        return parts if any(parts) else ()

    def _dispatch_facts(self, classes: Sequence[str], roles_field: str) -> dict[str, Any]:
        """What a module that may be an instance of any of `classes` does: their forwards'
        joined roles (under `roles_field`) and their definitions, keyed as calls are recorded
        (what the calls pass seeds each forward, whatever its roles)."""
        joined: dict[tuple[int, str], _Role] = {}
        for name in classes:
            for role in self._class_roles.get(name, ()):
                joined.setdefault((role.position, role.role), role)
        defs = tuple((name, "forward") for name in classes if name in self._local_defs)
        if not (joined or defs):
            return {}
        self._dispatches = self._dispatches or bool(defs)
        return {roles_field: tuple(joined.values()), "element_defs": defs}

    def _registry_choice(self, value: ast.expr) -> tuple[str, ...]:
        """`REGISTRY[key]` or `REGISTRY.get(key)` of a name bound to a registry of this file's
        classes: the classes it may give."""
        if isinstance(value, ast.Subscript):
            held = value.value
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and (
                value.func.attr == "get"):
            held = value.func.value
        else:
            return ()
        return self.lookup(held.id).classes if isinstance(held, ast.Name) else ()

    def _assign_target(self, target: ast.expr, value: ast.expr, facts: Value) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, ast.Call) and not facts.held_parts and (
                    held := self._returned_parts(value)):
                facts = replace(facts, held_parts=held)  # `masks = make_masks(...)`
            self._assign_name(target.id, value, facts)
        elif isinstance(target, ast.Subscript):
            self._subscript_write(target, value)
        elif isinstance(target, ast.Attribute):
            self._assign_attribute(target, value, facts)
        else:
            # what the call returns is read with the arguments as bound before this line
            returned = self._returned_parts(value) if isinstance(target, ast.Tuple) and (
                isinstance(value, ast.Call)) else ()
            if isinstance(target, ast.Tuple) and not returned:
                returned = facts.held_parts  # `chunk_blocked, valid = masks`
            if isinstance(target, ast.Tuple) and not returned:
                # `q, k, v = (t.transpose(1, 2) for t in (q, k, v))`: each name what the
                # element expression gives for its own item (read before any is rebound)
                returned = self._comprehension_parts(value, len(target.elts))
            self._forget_targets(target)
            if isinstance(target, ast.Tuple) and (_is_cache_update(value) or names_a_cache(
                    value) or (isinstance(value, ast.Call) and facts.cached)):
                # `k, v = cache.update(k, v)`: keys hold the cache; `ck, cv = cache`: the cache
                for element in target.elts:
                    if isinstance(element, ast.Name):
                        self.scope.values[element.id] = Value(cached=True)
            elif isinstance(target, ast.Tuple) and returned and len(returned) == len(target.elts):
                # `causal, padding = build_masks(...)`: each name what its position gives
                for element, part in zip(target.elts, returned, strict=True):
                    if isinstance(element, ast.Name) and part:
                        self.scope.values[element.id] = part
            elif isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(
                    isinstance(e, ast.Name) for e in target.elts) and facts.diag_indices:
                # `i, j = torch.triu_indices(n, n)`: rows and columns that hold the diagonal
                for element in target.elts:
                    if isinstance(element, ast.Name):
                        self.scope.values[element.id] = Value(diag_indices=True)

    def _comprehension_parts(self, value: ast.expr, count: int) -> tuple[Value, ...]:
        """What each item of `(f(t) for t in (a, b, c))` (or a list comprehension) gives, for a
        tuple of `count` names unpacked from it; () for any other form."""
        if not isinstance(value, (ast.GeneratorExp, ast.ListComp)) or len(
                value.generators) != 1:
            return ()
        loop = value.generators[0]
        items = loop.iter
        if loop.ifs or loop.is_async or not isinstance(loop.target, ast.Name) or not isinstance(
                items, (ast.Tuple, ast.List)) or len(items.elts) != count or any(
                isinstance(e, ast.Starred) for e in items.elts):
            return ()
        return tuple(self.value(_substituted(value.elt, loop.target.id, item))
                     for item in items.elts)

    def _returned_parts(self, call: ast.Call) -> tuple[Value, ...]:
        """What each position of the tuple a function (or `self.` method) of this file returns
        gives, for `a, b = f(...)`."""
        func = call.func
        if isinstance(func, ast.Name):
            helper = self.lookup(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
                func.value.id == "self"):
            helper = self.lookup("self." + func.attr)
            if helper.module is not None and helper.inline is None:
                helper = self.lookup(helper.module + ".forward")  # an instance: its forward
        else:
            return ()
        if helper.inline is not None and isinstance(helper.inline.expr, ast.Tuple):
            # `return x, mask[:, :-2:2]`: each position made of this call's arguments
            read = inline_parts(helper.inline, helper.parts, call, self.lookup)
            if read:
                return read
        if isinstance(func, ast.Name) and func.id == "to_dense_batch" and (
                len(helper.parts) != 2 or not helper.parts[1].layout):
            # torch_geometric.utils.to_dense_batch (or a copy of it): (dense nodes, a bool
            # (batch, max_nodes) mask, True at real nodes)
            return (UNKNOWN, Value(dtype="bool", keep_mask=True, layout="BS"))
        return helper.parts

    def _forget_targets(self, target: ast.AST) -> None:
        for sub in subnodes(target):
            if isinstance(sub, ast.Name):
                scope = self._owner(sub.id) if self.scope.outer_names else self.scope
                self._forget(sub.id, scope)
                scope.assigned.add(sub.id)

    def _owner(self, name: str) -> _Scope:
        """The scope a binding of `name` lands in: this one, or the enclosing function's (or
        the module's) for a name declared `nonlocal` (`global`) here."""
        scope = self.scope
        if name not in scope.outer_names:
            return scope
        if scope.outer_names[name] == "global":
            return self.scopes[0]
        for outer in reversed(self.scopes[:-1]):
            if outer.kind == "function" and (name in outer.values or name in outer.assigned):
                return outer
        return scope

    def _declare_outer(self, node: ast.AST, parent: ast.AST | None, stack: _Stack) -> None:
        assert isinstance(node, (ast.Global, ast.Nonlocal))
        kind = "global" if isinstance(node, ast.Global) else "nonlocal"
        for name in node.names:
            self.scope.outer_names[name] = kind

    def _assign_name(self, name: str, value: ast.expr, facts: Value) -> None:
        scope = self._owner(name) if self.scope.outer_names else self.scope
        fill = self._zero_mask_fill_of(name, value)
        pending_triu = scope.bool_triu.get(name)
        reshaped = scope.zeroed.get(name) if _reshape_of(value, name) else None
        bound_before = scope.derived.get(name)
        was_cached = not facts.cached and isinstance(value, ast.Call) and isinstance(
            value.func, ast.Name) and value.func.id in self._local_defs and any(
            isinstance(a, ast.Name) and a.id == name for a in value.args) and (
            self.lookup(name).cached)
        self._forget(name, scope)
        if reshaped is not None:  # `a = a * keep; a = a.view(-1, n, n)`: still the product
            scope.zeroed[name] = reshaped
        if pending_triu is value:  # registered while reading this very right-hand side
            scope.bool_triu[name] = pending_triu
        elif self._nested_triu or scope.bool_triu or pending_triu is not None:
            # `y_mask = F.pad(triu(ones(bool)), (x_len, 0))`, `xy = torch.cat([x_mask, y_mask])`,
            # `xy = xy.logical_or(pad)` (GPT-SoVITS's t2s mask): the True entries of the
            # triangle, its diagonal among them, are still True in the result
            carried = self._triangle_in(value, {**scope.bool_triu, **(
                {name: pending_triu} if pending_triu is not None else {})})
            if carried is not None:
                scope.bool_triu[name] = carried
        scope.assigned.add(name)
        if fill:
            return
        if isinstance(value, ast.Call) and call_name(value, self.lookup) in _ZEROS_FUNCS:
            scope.zero_masks[name] = True
        if isinstance(value, ast.Subscript) and not facts.cached and self._cache_read_to(value):
            facts = replace(facts, cached=True)
        if was_cached:
            # `k = apply_rotary_pos_emb(k, cos, sin)` of keys that hold a cache: a helper of
            # this file applied to them keeps their positions (held-out 77's sink cache)
            facts = replace(facts, cached=True)
        if "attention_mask" in name and facts.dtype == "int" and facts.zero_one:
            facts = replace(facts, hf_keep=True)  # `attention_mask = torch.tensor([[1, 1, 0]])`
        if (facts.hf_keep and facts.dtype is None and isinstance(value, ast.Subscript)
                and isinstance(value.value, ast.Name) and value.value.id == name
                and not _flattened_2d(bound_before)):
            # `attention_mask = attention_mask[:, None, None, :]` rebinds a mask of unknown value
            # to a 4-D layout (a rank switch that also takes 3-D and 4-D masks): it keeps what the
            # caller passed, which may already be additive (sglang's LTX-2 connector); BERT's
            # extended-mask idiom is a new name, `ext = attention_mask[:, None, None, :]`, or
            # the same name flattened to (batch, seq) first (GPT-2's and Decision Transformer's
            # `attention_mask = attention_mask.view(batch_size, -1)`), which no 4-D mask survives.
            facts = replace(facts, hf_keep=False)
        if facts:
            scope.values[name] = facts
        if isinstance(value, ast.Name):
            # `mb = MaskBuilders`: the alias's static helpers are the class's
            prefix = value.id + "."
            for outer in self.scopes:
                for key, helper in list(outer.values.items()):
                    if key.startswith(prefix):
                        scope.values[name + "." + key[len(prefix):]] = helper
        if scope.kind != "class" and scope is self.scope:
            scope.derived[name] = value  # `pad = attention_mask == 0` (see `_parameter_behind`)
        if isinstance(value, ast.Call):
            function = self.value(value.func) if isinstance(value.func, ast.Name) else (
                self.lookup("self." + value.func.attr) if isinstance(value.func, ast.Attribute)
                and isinstance(value.func.value, ast.Name) and value.func.value.id == "self"
                else UNKNOWN)
            if isinstance(function.result_unless_none, Value):
                scope.maybe_none[name] = function.result_unless_none
        product_node = value if isinstance(value, ast.BinOp) else _mul_call_as_binop(value)
        if product_node is not None:
            product = self._product_of(product_node)
            if product is not None:
                scope.zeroed[name] = product  # `a = a * keep`: MC520 if `a` goes into softmax next

    def _cache_read_to(self, node: ast.Subscript) -> bool:
        """`self.k_cache[:b, :, :end]` with `end = int(cache_position[-1]) + 1` bound in this
        function: a cache read up to an end computed as a sum, as `[:, :start_pos + seqlen]`
        is (`values._cache_prefix`): the cached keys and the new ones, L != S."""
        if "cache" not in (dotted(node.value) or "").lower() or self.scope.kind != "function":
            return False
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for part in parts:
            if isinstance(part, ast.Slice) and part.lower is None and isinstance(
                    part.upper, ast.Name):
                bound = self.scope.derived.get(part.upper.id)
                if isinstance(bound, ast.BinOp) and isinstance(bound.op, ast.Add) and not (
                        starts_at_zero(bound, self.lookup)):
                    return True
        return False

    def _triangle_in(self, node: ast.AST, held: dict[str, ast.Call], depth: int = 0
                     ) -> ast.Call | None:
        """The bool triu call (True = hidden) whose True entries all stay True in `node`:
        through F.pad, torch.cat/stack of a list holding it, logical_or / `|`, shape methods
        and indexing."""
        if depth > 6:
            return None
        if isinstance(node, ast.Name):
            return held.get(node.id)
        if isinstance(node, ast.Subscript):
            return self._triangle_in(node.value, held, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._triangle_in(node.left, held, depth + 1) or self._triangle_in(
                node.right, held, depth + 1)
        if not isinstance(node, ast.Call):
            return None
        if id(node) in self._nested_triu:
            return self._nested_triu[id(node)]
        name = call_name(node, self.lookup)
        base = receiver(node)
        if name == "pad" and node.args and is_module_call(node):
            return self._triangle_in(node.args[0], held, depth + 1)
        if name in {"cat", "concat", "concatenate", "stack"} and node.args and isinstance(
                node.args[0], (ast.List, ast.Tuple)):
            for part in node.args[0].elts:
                found = self._triangle_in(part, held, depth + 1)
                if found is not None:
                    return found
            return None
        if name == "logical_or":
            operands: list[ast.expr | None] = (
                list(node.args) if is_module_call(node) else [base, *node.args])
            for operand in operands:
                found = self._triangle_in(operand, held, depth + 1) if operand else None
                if found is not None:
                    return found
            return None
        if base is not None and (name in _SHAPE_KEEPING or name in {"to", "cuda", "bool"}):
            return self._triangle_in(base, held, depth + 1)
        return None

    def _forget(self, name: str, scope: _Scope | None = None) -> None:
        scope = scope or self.scope
        scope.zero_masks.pop(name, None)
        scope.bool_triu.pop(name, None)
        scope.values.pop(name, None)
        scope.mutated.discard(name)
        scope.zeroed.pop(name, None)
        scope.derived.pop(name, None)
        scope.maybe_none.pop(name, None)
        scope.key_axes.pop(name, None)  # another tensor now

    def _assign_attribute(self, target: ast.Attribute, value: ast.expr, facts: Value) -> None:
        base = target.value
        if target.attr == "requires_grad" and isinstance(base, ast.Name):
            if is_true(value):
                old = self.lookup(base.id)
                self.scope.values[base.id] = Value(**{**old.__dict__, "grad": True})
            return
        if isinstance(base, ast.Name) and base.id == "self":
            default = self.scope.defaults.get(value.id) if isinstance(value, ast.Name) and (
                self.scope.name == "__init__" and value.id not in self.scope.assigned) else None
            if default is not None and facts in PARAMETER_VALUES:
                # `self.causal = causal` of `__init__(..., causal=True)`: the default holds
                # unless a caller passes another value
                facts = self.value(default)
            cls = self._class_scope()
            if is_none(value) and cls is not None and "self." + target.attr in cls.values:
                # `else: self.temporal_bias = None` beside the branch that registers the mask
                # (MixSTE's causal option): the None path passes no mask on (`if attn_bias is
                # not None`), so the mask's facts hold wherever it is one
                return
            if cls is not None:
                cls.mutated.discard("self." + target.attr)  # bound anew
                if isinstance(value, ast.Name) and value.id in self.scope.fields and (
                        value.id not in self.scope.assigned):
                    # `self.cfg = cfg` of `cfg: ModelConfig`: `self.cfg.x` is the field's
                    # default in every method
                    cls.fields["self." + target.attr] = self.scope.fields[value.id]
                elif facts.module in self._class_fields:  # `self.cfg = Config()`
                    cls.fields["self." + target.attr] = self._class_fields[facts.module or ""]
            if facts.grad and isinstance(value, ast.Call) and (
                    call_name(value) == "Parameter" or kwarg(value, "requires_grad")):
                self._class_scope_add(target.attr, param=True)
            facts = _held_by_attribute(facts, self._read_once(target.attr, facts))
            self._class_scope_add(target.attr, value=facts)
            self.scope.values["self." + target.attr] = facts

    def _defaults_that_hold(self, node: ast.AST | None,
                            fields: dict[str, Value]) -> dict[str, Value]:
        """The class-level defaults of a record of this file that every instance keeps: not a
        field some construction of it sets (`Config(gap_fill=float("-inf"))`, positionally or
        through `**`), a `replace(cfg, gap_fill=...)` sets, or the file assigns from outside
        (`cfg.gap_fill = ...`)."""
        if not isinstance(node, ast.ClassDef):
            return fields
        if self._set_fields is None:
            self._set_fields = _fields_set_outside(self._tree)
        by_class, anywhere = self._set_fields
        set_here = by_class.get(node.name, ())
        if "**" in set_here:
            return {}
        order = _field_order(node)
        positional = {order[i] for i in range(len(order)) if f"#{i}" in set_here}
        return {key: value for key, value in fields.items() if (
            first := key.split(".")[0]) not in set_here and first not in anywhere
            and first not in positional}

    def _read_once(self, attr: str, value: Value) -> bool:
        """Whether `value`, stored in `self.<attr>`, holds a triangle a helper of the file made
        (outside the function storing it) and the class reads `self.<attr>` in one place only:
        read one way, the triangle's fix is in the helper (open_clip's `build_causal_mask`). A
        triangle made where it is stored stays reported at its use."""
        cls = self._class_scope()
        node = self.scope.node
        if value.tri_at is None or cls is None or cls.node is None or node is None or (
                getattr(node, "lineno", 0) <= value.tri_at[0] <= (
                    getattr(node, "end_lineno", None) or 0)):
            return False
        reads = 0
        for read in ast.walk(cls.node):
            if isinstance(read, ast.Attribute) and read.attr == attr and isinstance(
                    read.ctx, ast.Load) and isinstance(read.value, ast.Name) and (
                    read.value.id == "self"):
                reads += 1
                if reads > 1:
                    return False
        return reads == 1

    def _class_scope(self) -> _Scope | None:
        for scope in reversed(self.scopes):
            if scope.kind == "class":
                return scope
        return None

    def _class_scope_add(
        self, attr: str, *, param: bool = False, buffer: bool = False, value: Value | None = None
    ) -> None:
        cls = self._class_scope()
        if cls is None:
            return
        if param:
            cls.param_attrs.add(attr)
        if buffer:
            cls.buffer_attrs.add(attr)
        if value is not None:
            value = _held_by_attribute(value, self._read_once(attr, value))
            if value:
                cls.values["self." + attr] = value
            else:
                cls.values.pop("self." + attr, None)

    def _on_grad_path(self) -> bool:
        """In forward (see `_in_forward`), or in a method of the class that forward, __call__ or
        training_step calls as `self.name(...)`, directly or through other such methods (a
        loss helper of a LightningModule): it runs with grad whenever they do."""
        if self._in_forward():
            return True
        cls = method = None
        for depth in range(len(self.scopes) - 1, 0, -1):
            if self.scopes[depth].kind == "function" and self.scopes[depth - 1].kind == "class":
                method, cls = self.scopes[depth], self.scopes[depth - 1]
                break
        if cls is not None and method is not None and cls.node is not None:
            reached = self._grad_methods.get(id(cls.node))
            if reached is None:
                reached = self._grad_methods[id(cls.node)] = _reached_from_forward(cls.node)
            if method.name in reached:
                return True
        if self._tree is None:
            return False
        # a function (not a method) a forward calls (AKT's `attention(q, k, v, ...)`), at any
        # depth: defined in a method or a function, it is still the one the forward calls
        functions = self._grad_methods.get(id(self._tree))
        if functions is None:
            functions = self._grad_methods[id(self._tree)] = _functions_reached_from_forward(
                self._tree)
        return any(scope.kind == "function" and not scope.method and scope.name in functions
                   for scope in self.scopes)

    def _in_forward(self) -> bool:
        """Inside a method that runs on every call: `forward`, `forward_*`, `__call__`, or a
        closure or lambda defined in one (the method is the function directly in a class)."""
        for depth in range(len(self.scopes) - 1, 0, -1):
            scope, outer = self.scopes[depth], self.scopes[depth - 1]
            if scope.kind == "class":
                return False
            if scope.kind == "function" and outer.kind == "class":
                return scope.name == "__call__" or scope.name.lstrip("_").startswith("forward")
        return False

    def _runs_every_call(self) -> str | None:
        """Where a method runs on every call of the module: "forward" in forward (see
        `_in_forward`), "name() (run on every call)" in a method of the class that forward or
        __call__ calls as `self.name(...)`, directly or through other such methods (ClimaX's
        `aggregate_variables`); None elsewhere."""
        if self._in_forward():
            return "forward"
        for depth in range(len(self.scopes) - 1, 0, -1):
            method, cls = self.scopes[depth], self.scopes[depth - 1]
            if method.kind == "function" and cls.kind == "class":
                if cls.node is None:
                    return None
                reached = self._every_call_methods.get(id(cls.node))
                if reached is None:
                    reached = self._every_call_methods[id(cls.node)] = _reached_from_forward(
                        cls.node, roots=_EVERY_CALL_ROOTS, through_no_grad=True)
                return f"{method.name}() (run on every call)" if (
                    method.name in reached) else None
        return None

    # --- expressions ---

    def _arithmetic_call(self, call: ast.Call, name: str) -> None:
        """`torch.add(a, b)`, `torch.mul(a, b)`, `a.mul(b)`, `a.add_(b)`, `a.sub(1)`: the rules on
        +, * and -."""
        op: ast.operator = ast.Mult() if name == "mul" else (
            ast.Sub() if name in {"sub", "sub_"} else ast.Add())
        base = receiver(call)
        if is_module_call(call) and len(call.args) == 2:
            left, right = call.args
        elif base is not None and not is_module_call(call) and len(call.args) == 1:
            left, right = base, call.args[0]
        else:
            return
        self._binop(ast.copy_location(ast.BinOp(left, op, right), call))

    def _binop(self, node: ast.BinOp, parent: ast.AST | None = None) -> None:
        if isinstance(node.op, ast.Mult):
            self._product(node)
        elif isinstance(node.op, ast.Sub):
            self._difference(node, parent)
        elif isinstance(node.op, ast.Add):
            self._sum(node, clamped=_is_clamped(node, parent))
        elif isinstance(node.op, ast.BitAnd):
            self._keep_and_triangle(node)

    def _keep_and_triangle(self, node: ast.BinOp) -> None:
        """`(trg != pad_idx)[...] & torch.triu(ones).bool()`: True = keep on one side, so the
        triangle is a keep-mask too, and an upper one keeps the future."""
        left, right = self.value(node.left), self.value(node.right)
        for keep, tri, tri_node in ((left, right, node.right), (right, left, node.left)):
            keeps = keep.pad_keep or keep.keep_mask or (keep.hf_keep and not keep.hf_keep_inverted)
            if keeps and (
                    tri.dtype == "bool" and tri.tri in {"upper", "supper"}):
                self._anded_triangles.add(id(node))
                at, combined = self._anded_triangle_site(tri, tri_node, node)
                self.report("MC521", at, f"{self._text(tri_node)} is True above the diagonal, "
                            f"but it is combined with a keep-mask{combined} (True = real token): "
                            "every query keeps the future; use tril (or `triu(..., 1) == 0`)")
                return
        for padding, tri, padding_node, tri_node in (
                (left, right, node.left, node.right), (right, left, node.right, node.left)):
            if padding.hf_keep_inverted and not padding.hf_keep and (
                    tri.dtype == "bool" and tri.tri in {"lower", "slower"}):
                # `causal_keep & (attention_mask == 0)`: True only at past padding, which
                # neither convention means; the fix is the comparison, so it is reported there
                shown, triangle = self._text(padding_node), self._text(tri_node)
                self.report("MC511", self._bound_expression(padding_node), f"{shown} is True "
                            f"at padding, but it is AND-ed with {triangle}, a keep triangle "
                            "(True = may attend): the result is True only at padded past keys; "
                            "compare with `!= 0` (True = real token)")
                return

    def _bound_expression(self, node: ast.AST) -> ast.AST:
        """The expression a name read here was last bound to in this function (`key_mask =
        attention_mask[:, None, None, :] == 0`, `_Scope.derived`), else `node`."""
        if isinstance(node, ast.Name) and self.scope.kind == "function" and (
                bound := self.scope.derived.get(node.id)) is not None:
            return bound
        return node

    def _returned_binding(self, node: ast.AST) -> ast.AST | None:
        """For a name this function binds once by unpacking a call of a function of the file
        (`ids, token_mask, tags = encode_batch(tokenizer, reports)`): the expression that
        function binds the returned name to, the same in every return (`token_mask =
        enc["attention_mask"] == 0`), where a mask it returns was made; else None."""
        if not isinstance(node, ast.Name) or not isinstance(self._tree, ast.Module):
            return None
        function = _enclosing_function(node, self._parents())
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        bindings = [n for n in subnodes(function) if isinstance(n, ast.Name) and (
            n.id == node.id) and isinstance(n.ctx, ast.Store)]
        if len(bindings) != 1 or node.id in {a.arg for a in function.args.args}:
            return None
        unpacking = self._parents().get(id(bindings[0]))
        statement = self._parents().get(id(unpacking))
        if not (isinstance(unpacking, ast.Tuple) and isinstance(statement, ast.Assign) and (
                statement.targets == [unpacking]) and isinstance(statement.value, ast.Call)
                and isinstance(statement.value.func, ast.Name)):
            return None
        position = next(i for i, e in enumerate(unpacking.elts) if e is bindings[0])
        called = statement.value.func
        assert isinstance(called, ast.Name)
        # (the file's only function of that name, at any depth: a notebook's code may sit
        # inside a `def main():`)
        named = [d for d in subnodes(self._tree) if isinstance(d, ast.FunctionDef) and (
            d.name == called.id)]
        if len(named) != 1:
            return None
        callee = named[0]
        made: ast.AST | None = None
        for sub in subnodes(callee):
            if isinstance(sub, ast.Return):
                returned = sub.value
                element = returned.elts[position] if isinstance(returned, ast.Tuple) and len(
                    returned.elts) == len(unpacking.elts) else None
                if not isinstance(element, ast.Name) or _says_padding(element.id):
                    # (`pad = arange(w) >= n_kept[:, None]`: a padding mask by its name, made
                    # as it says; the call that hands it on as a keep-mask is the mistake)
                    return None
                name = element.id
                bound = [a.value for a in subnodes(callee) if (isinstance(a, ast.Assign) and [
                    t.id for t in a.targets if isinstance(t, ast.Name)] == [name]) or (
                    isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
                    and a.target.id == name)]
                if len(bound) != 1 or (made is not None and bound[0] is not made):
                    return None
                made = bound[0]
        return made

    def _is_bool(self, node: ast.AST) -> bool:
        """A comparison, `~x` or a value known to be bool."""
        return isinstance(node, ast.Compare) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert)
        ) or self.value(node).dtype == "bool"

    def _product(self, node: ast.BinOp) -> None:
        for mask_node, other in ((node.right, node.left), (node.left, node.right)):
            if self._is_scores(other) and not self._is_scores(mask_node):
                self._note_role(mask_node, "mul")  # `weights * bias`: a parameter
        softmaxed = self.scope.softmaxed
        if softmaxed:
            for result, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(result, ast.Name) and result.id in softmaxed and self._remasks(
                        other) and softmaxed[result.id].node is not node and not (
                        self._in_other_branch(softmaxed[result.id].node, node)):
                    # `p = softmax(s * m); p = p * m`: renormalised (not the product inside the
                    # softmax itself, `p = softmax(p * m)`, nor one in the if's other branch,
                    # DeepCTR's DIN: `if norm: out = softmax(out * m) else: out = out * m`)
                    del softmaxed[result.id]
        for big, other in ((node.left, node.right), (node.right, node.left)):
            # A bool tensor times a Python float is float32 (the default dtype) whatever the
            # scores' dtype, and float32 + float16 scores promotes to float32: no overflow.
            # `(1.0 - keep.to(s.dtype)) * -1e15`: the inversion of a 0/1 keep-mask is a mask
            # whatever its name (NVIDIA/apex#93)
            if self._is_large_negative(big) and (mentions_mask(other) or self._inverted_mask(
                    other)) and not self._is_bool(other) and not self._int_product(big, other):
                self._large_negative(big, "an additive mask", other)
            # `torch.eye(n) * float('-inf')` (a reformer port's self-token mask): the identity
            # is 0 off the diagonal, so that is NaN too
            eye = isinstance(other, ast.Call) and is_module_call(other) and call_name(
                other, self.lookup) == "eye" and dtype_of(kwarg(other, "dtype")) != "bool"
            held = self.value(other)
            if (is_neg_inf(big, self.lookup) or self._full_of_neg_inf(big)) and (
                    held.zero_one or mentions_mask(other) or one_minus(other) or eye
                    or held.dtype == "bool" or (isinstance(held.if_tensor, Value) and (
                        held.if_tensor.dtype == "bool"))) and not (
                    held.all_ones):  # `(~keep) * -inf`: False * -inf
                # (a comparison is NaN at False as a Python bool too: `False * -inf` is nan;
                # qorva's top-p `remove * float("-inf")`)
                # (a tensor of ones holds no 0: agilerl's `torch.ones(sz, sz,
                # device=src_mask.device) * -inf` is -inf everywhere, whatever it mentions)
                self.report("MC522", node, f"{self._text(other)} holds 0s and 1s: 0 * -inf is NaN, "
                            "so every kept position becomes NaN; use masked_fill(m.bool(), "
                            "float('-inf')) or torch.where")
            if (is_wide_finfo_min(big) or self.value(big).wide_finfo) and (
                    self.value(other).dtype in HALF_DTYPES or self.value(other).maybe_half):
                # `(1.0 - m.to(torch.bfloat16)) * torch.finfo(torch.float32).min`
                # (transformers PR #20605): the product is computed in m's dtype, where the
                # float32 minimum is -inf (and 0 * -inf is NaN where the scalar is cast first)
                how = "is" if self.value(other).dtype in HALF_DTYPES else "may be"
                self.report("MC517", big, f"{self._text(big)} is the float32 minimum and "
                            f"{self._text(other)} {how} float16/bfloat16: the product overflows "
                            "to -inf (0 * -inf is NaN); use torch.finfo(x.dtype).min")
                break
            facts = self.value(big)
            # An additive mask times a 0/1 mask (LED's `expanded * inverted`) stays a mask.
            # So does one times a bool (transformers' `causal_mask *= arange > cache_position`:
            # finfo.min * False = 0, finite).
            if facts.additive and _tensor_operand(other) and not self.value(
                    other).zero_one and not _names_a_mask(other) and not self._is_bool(other):
                self.report("MC523", node, f"{self._text(big)} is an additive mask (0 where "
                            "kept, -inf or a large negative where masked): multiplying by it "
                            "zeroes the kept scores and blows up the masked ones (-inf/NaN); "
                            "add it to the scores instead")
                break

    def _full_of_neg_inf(self, node: ast.AST) -> bool:
        """`torch.full((n, n), float('-inf'))` (also `full_like`, `x.new_full`): -inf in every
        entry, so a 0/1 selector multiplied into it is NaN wherever it is 0 (the composition
        tenstorrent/tt-metal#52038 and Jittor PR #423 fixed in their triu/tril)."""
        if not (isinstance(node, ast.Call) and call_name(node, self.lookup) in {
                "full", "full_like", "new_full"}):
            return False
        fill = argument(node, 1, "fill_value")
        return fill is not None and is_neg_inf(fill, self.lookup)

    def _int_product(self, big: ast.AST, other: ast.AST) -> bool:
        """`mask_bool.int() * -65505 * 2` (exllamav2's padding bias): an integer tensor times a
        Python int that fits int32 is an exact integer, times a Python float a float32 tensor;
        neither overflows, and a float16 tensor plus either (or `.half()` of it) holds -inf
        there without raising (checked on torch 2.13): the value the fix would write."""
        if self.value(other).dtype != "int":
            return False
        v = number(big, self.lookup)
        return v is not None and (_is_float_literal(big, self.lookup) or abs(v) < 2 ** 31)

    def _inverted_mask(self, node: ast.AST) -> bool:
        """`1 - keep`, `1.0 - keep.to(s.dtype)`: an inverted 0/1 mask of any name; not
        `1.0 - done.float()`, which is float32, so the product cannot overflow float16 (and a
        float16 score plus it is float32: texar's beam search)."""
        return one_minus(node) and isinstance(node, ast.BinOp) and self.value(
            node.right).dtype != "fp32"

    def _difference(self, node: ast.BinOp, parent: ast.AST | None = None) -> None:
        right = node.right
        if isinstance(right, ast.BinOp) and isinstance(right.op, ast.Mult):
            for big, other in ((right.left, right.right), (right.right, right.left)):
                v = number(big, self.lookup)
                if v is not None and math.isfinite(v) and v > FP16_MAX and (
                        mentions_mask(other) or self._inverted_mask(other)):
                    if self.value(other).dtype == "fp32":
                        # `emb - (1 - m.float()) * 1e9` (RecBole's max pooling): the product
                        # is float32 and a float16 tensor minus it promotes to float32
                        break
                    into = parent.targets[0] if isinstance(parent, ast.Assign) and len(
                        parent.targets) == 1 else None  # `s = x - 1e9 * (1 - m)`: s
                    if not self._meets_scores(node.left) and not (
                            into is not None and self._meets_scores(into)) and not any(
                            self.value(n).dtype in HALF_DTYPES for n in (node.left, other)):
                        # In float16 the difference is -inf, without raising (torch 2.13): a
                        # hazard where an attention row can lose every key, and elsewhere only
                        # where the file shows float16 (an empty sequence max-pooled to -inf);
                        # not DI-engine's `logit.sub_(1e8 * (1 - action_mask))` of unknown dtype
                        break
                    # `scores - 1e9 * (1 - m)`: the scores' dtype is the one that matters
                    self._large_negative(big, "an additive mask", node.left)
        left = node.left
        if self._numpy_made(right if isinstance(left, ast.Constant) else left):
            return  # numpy computes `1 - bool_array` (an int array): MC512 is torch's
        if isinstance(right, ast.Constant) and number(right) is not None and self.value(
                left).dtype == "bool":
            # `padding_mask.unsqueeze(-1) - 1` (chatglm3-base-tuning#1) raises just the same
            self.report("MC512", node, f"{self._text(left)} is a bool tensor: "
                        f"`{self._text(node)}` raises in torch (no `-` on bool); cast it "
                        "first (`.int()`) or invert it with `~`")
            return
        if isinstance(left, ast.Constant) and number(left) is not None and self.value(
                right).dtype is None:
            # `1 - valid` on a parameter: a caller passing a bool raises here (MC512 at the call)
            self._note_role(right, "rsub", follow=False, use=node)
        if isinstance(left, ast.Constant) and number(left) is not None and self.value(
                right).dtype == "bool":
            edit = self._edit(node, f"~{self._paren(right)}") if number(
                node.left) == 1 and (_takes_a_bool(node, parent) or self._bound_for_bool_uses(
                    node, parent)) else None
            self.report("MC512", node, f"{self._text(right)} is a bool tensor: "
                        f"`{self._text(node)}` "
                        "raises in torch (no `-` on bool); invert it with `~` or "
                        "logical_not()", edit)

    def _numpy_made(self, node: ast.AST) -> bool:
        """A numpy call (`np.logical_or(a, b)`), or a name this function bound to one: an
        array, not a torch tensor (opensportslib's `1 - np.logical_or(...)`)."""
        if isinstance(node, ast.Name) and node.id in self.scope.assigned:
            node = self.scope.derived.get(node.id, node)
        return isinstance(node, ast.Call) and _numpy_call(node)

    def _bound_for_bool_uses(self, node: ast.AST, parent: ast.AST | None) -> bool:
        """`inv = 1 - keep` where every read of `inv` in this function takes a bool (see
        `_takes_a_bool`), and nothing else binds it: `~keep` can stand there (MC512's fix)."""
        if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(
                parent.targets[0], ast.Name) and parent.value is node):
            return False
        name, body = parent.targets[0].id, self.scope.node
        if self.scope.kind != "function" or body is None:
            return False
        uses = 0
        for owner in ast.walk(body):
            for child in ast.iter_child_nodes(owner):
                if not (isinstance(child, ast.Name) and child.id == name):
                    continue
                if isinstance(child.ctx, ast.Load):
                    if not _takes_a_bool(child, owner):
                        return False
                    uses += 1
                elif child is not parent.targets[0]:
                    return False  # bound again (or deleted): the reads may see another value
            if isinstance(owner, (ast.Global, ast.Nonlocal)) and name in owner.names:
                return False
        return uses > 0

    def _meets_scores(self, node: ast.AST) -> bool:
        """Attention scores, or a product or sum with them (`w * b` of GPT-2's `w * b - 1e10 *
        (1 - b)`); not a head's output logits (see `_is_output_logits`)."""
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            return self._meets_scores(node.left) or self._meets_scores(node.right)
        if self._is_scores(node) and not _is_output_logits(node):
            return True
        # a parameter of attention code (GPT-2's `def mask_attn_weights(self, w)`, a method
        # of `class GPT2Attention`): the caller hands in the scores
        return isinstance(node, ast.Name) and node.id in self.scope.params and any(
            _ATTENTION_NAME.search(scope.name) for scope in self.scopes if scope.name)

    def _empty_rows(self, call: ast.Call, condition: ast.AST, value: ast.AST,
                    target: ast.AST | None, parent: ast.AST | None) -> None:
        """MC507: scores filled with -inf where a pair mask (a mask with a factor on the query
        axis: `k[:, :, None] & k[:, None, :]`, `m & q[..., None]`) is False, then softmax: the
        row of every query the factor hides is all -inf, softmax makes it NaN
        (pytorch/pytorch#103749, Biohub/esm#299), and the next layer's `weights @ v` spreads
        it to every row (0 * NaN). Not where the function mends NaN (`nan_to_num`, `isnan`, a
        later `torch.where` or zero fill)."""
        inner = _inverted_operand(condition)
        v = self._fill_number(value)
        # (an out-of-place fill thrown away fills nothing: MC525's finding)
        discarded = isinstance(parent, ast.Expr) and call_name(call) == "masked_fill"
        if inner is None or v is None or not (math.isinf(v) and v < 0) or target is None or (
                discarded):
            return
        if not self.value(inner).pair_keep or not self._fill_reaches_softmax(
                call, target, parent):
            return
        body = self.scope.node
        if body is not None and any(
                isinstance(n, ast.Call) and (call_name(n) in {"nan_to_num", "nan_to_num_", "isnan"}
                                             or (n.lineno > call.lineno and (
                                                 call_name(n) == "where" or (call_name(n) in {
                                                     "masked_fill", "masked_fill_"}
                                                     and _fills_zero(n)))))
                for n in subnodes(body)):
            # (`weights.masked_fill(~pair, 0.0)` or `torch.where(pair.any(-1, keepdim=True),
            # weights, 0)` after softmax mends the NaN rows)
            return
        self.report("MC507", condition, f"{self._text(inner)} holds a mask on the query axis "
                    "(a pair mask): the row of each query it hides is all -inf, softmax makes "
                    "it NaN, and a later `weights @ v` that reads that token spreads the NaN to "
                    "every token (0 * NaN); fill with torch.finfo(dtype).min, or mask only the "
                    "keys (`keep[:, None, :]`)")

    def _fill_reaches_softmax(self, call: ast.Call, target: ast.AST, parent: ast.AST | None
                              ) -> bool:
        """The fill's result goes to softmax: `s.masked_fill(m, v).softmax(-1)`,
        `F.softmax(s.masked_fill(m, v), -1)`, or the filled name is one this function (or an
        enclosing one) hands to softmax. Not scores by name alone: a RANSAC or top-k score
        filled with -1 is a ranking sentinel, not a mask (kornia, gliner)."""
        if isinstance(parent, ast.Attribute) and parent.attr in {"softmax", "log_softmax"}:
            return True
        if isinstance(parent, ast.Call) and (call_name(parent) in {"softmax", "log_softmax"} or (
                _softmax_module_call(parent))) and parent.args and parent.args[0] is call:
            return True
        if isinstance(target, ast.Attribute) and target.attr == "data":
            target = target.value  # `alignment.data.masked_fill_(...)` fills `alignment`
        return isinstance(target, ast.Name) and self._softmax_input(target.id)

    def _softmax_input(self, name: str) -> bool:
        """Whether the scope that binds `name` hands it to softmax (see `_is_scores`)."""
        scope = self._binding_scope(name)
        if scope.softmax_inputs is None:
            if self._softmax_inputs is None:
                self._softmax_inputs = _softmax_inputs_by_scope(self._tree, self.source)
            scope.softmax_inputs = self._softmax_inputs.get(id(scope.node), frozenset())
        return name in scope.softmax_inputs

    def _is_scores(self, node: ast.AST) -> bool:
        """Score tensors by their name (`scores`, `attn_weights`, `q @ k.T`) or by their use: a
        name this function hands to softmax (`s += inside; return s.softmax(-1)`)."""
        if _is_score_name(node):
            return True
        return isinstance(node, ast.Name) and self._softmax_input(node.id)

    def _note_record(self, call: ast.Call, cls: str) -> None:
        """`Masks(src_keep=src != pad_id, ...)` of a NamedTuple or dataclass of this file: what
        each field holds over every construction, read as `masks.src_keep` of a parameter
        annotated `masks: Masks` (see `_Scope.fields`). A field with a class-level default is
        left to that default's reading."""
        names = self._record_fields[cls]
        given = [*zip(names, call.args, strict=False),
                 *((kw.arg, kw.value) for kw in call.keywords if kw.arg is not None)]
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
                kw.arg is None for kw in call.keywords):
            return
        table = self._class_fields.setdefault(cls, {})
        for field_name, node in given:
            if field_name in table and (table[field_name].flag is not None
                                        or table[field_name].number is not None):
                continue
            facts = _seedable(self.value(node))
            held = table.get(field_name)
            table[field_name] = facts if held is None else _join(held, facts)

    def _builtin_sum(self, call: ast.Call, parent: ast.AST | None) -> None:
        """`sum(b for b in (causal, padding, segment) if b is not None)`: Python's sum adds
        the masks one by one, as `causal + padding` would (MC513)."""
        items: ast.expr = call.args[0]
        if isinstance(items, ast.GeneratorExp) and len(items.generators) == 1 and isinstance(
                items.elt, ast.Name) and isinstance(items.generators[0].target, ast.Name) and (
                items.elt.id == items.generators[0].target.id):
            items = items.generators[0].iter  # each element as it is
        if isinstance(items, ast.Name) and items.id not in self.scope.mutated:
            bound = self.scope.derived.get(items.id)
            items = bound if isinstance(bound, (ast.Tuple, ast.List)) else items
        if not isinstance(items, (ast.Tuple, ast.List)) or _is_clamped(call, parent) or (
                self._clamps_to_min):
            return
        if sum(1 for e in items.elts if self.value(e).finfo_min) >= 2:
            self.report("MC513", call, _SUMMED_MIN)

    def _is_scores_in_layout(self, node: ast.AST) -> bool:
        """Scores, or scores in another layout: `attn.view(b // nw, nw, h, n, n)` (Swin's
        shifted windows) holds the same entries."""
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in _RESHAPES):
            node = node.func.value
        return self._is_scores(node)

    def _sum(self, node: ast.BinOp, *, clamped: bool = False) -> None:
        for mask_node, other in ((node.right, node.left), (node.left, node.right)):
            if self._is_scores_in_layout(other) and not self._is_scores(mask_node):
                self._note_role(mask_node, "add")  # `scores + attention_mask`: a parameter
            elif self.value(other).finfo_min and not clamped and not self._clamps_to_min:
                self._note_role(mask_node, "addmin")  # `mask += padding_at_finfo_min`
        left, right = self.value(node.left), self.value(node.right)
        if not clamped and not self._clamps_to_min and right.finfo_min and (left.finfo_min or any(
                self.value(term).finfo_min for term in _added_terms(node.left))):
            # `scores + causal + padding` (EleutherAI/gpt-neox PR #25): the two masks meet in
            # one chain of additions, whatever comes first
            self.report("MC513", node, _SUMMED_MIN)
            return
        for mask_node, mask, other in ((node.right, right, node.left), (node.left, left,
                                                                         node.right)):
            # Any operand known to be bool: `keep4d.bool()`, `rand(n, n) > p`, `ids.eq(pad)`.
            # (A `torch.BoolTensor` parameter: bool, or the 0/1 ints the annotation calls so,
            # which mask nothing either.)
            if (mask.dtype == "bool" or mask.annotated01) and self._is_scores_in_layout(other) and (
                    self.value(other).dtype != "bool"):
                self.report("MC509", node, f"{self._text(mask_node)} is a bool mask added to the "
                            "scores: True adds 1.0 and masks nothing; use masked_fill(~m, "
                            "-inf) or torch.where")
                return
        for mask_node, other in ((node.right, node.left), (node.left, node.right)):
            bias = _is_attention_bias_name(other)
            if self._added_zero_one(mask_node) and (
                    self._is_scores_in_layout(other) or bias) and not (
                    self._zero_one_mask(other)):
                # (an attention bias is added to the scores as it is: Uni-Mol's
                # `graph_attn_bias + keep.to(dtype)` adds the keep-mask to them too)
                added = "the attention bias" if bias and not self._is_scores_in_layout(
                    other) else "the scores"
                if not self._reported_at_cast(mask_node, f"it is added to {added}"):
                    self._told_cast(mask_node)
                    self.report("MC508", node, f"{self._text(mask_node)} is a 0/1 mask added to "
                                f"{added}: it adds 1 where it is 1 and masks nothing; turn it "
                                "into 0/-inf first (`(1.0 - m) * torch.finfo(scores.dtype).min`) "
                                "or use masked_fill")
                return
            if self._is_scores_in_layout(other) and self._branch_float01(
                    mask_node, "it is added to the scores"):
                return

    def _invert(self, node: ast.UnaryOp, call: ast.Call | None = None) -> None:
        """`~m` (or `torch.bitwise_not(m)`, `m.bitwise_not()`: `call`) on an integer 0/1 mask."""
        if not isinstance(node.op, ast.Invert):
            return
        facts = self.value(node.operand)
        if (facts.dtype == "int" and (facts.hf_keep or facts.int_mask or facts.keep_mask or (
                mentions_mask(node.operand)) or _batch_attention_mask(node.operand))) or (
                facts.dtype is None and (
                    facts.collated or facts.int_on_a_path or _batch_attention_mask(
                        node.operand))):
            shown = call if call is not None else node
            edit = self._edit(shown, f"({self._paren(node.operand)} == 0)")
            where = "" if facts.dtype is not None or not facts.int_on_a_path else (
                " as the calls pass it" if isinstance(node.operand, ast.Name) and (
                    node.operand.id in self.scope.params) else " on one path of the helper "
                "that made it")
            self.report("MC518", shown, f"~ on {self._text(node.operand)}, an integer 0/1 mask"
                        f"{where}: ~1 and ~0 are both true (-2 and -1 in int64, 254 and 255 "
                        "in uint8); use `== 0` or .bool() first", edit)

    def _edit(self, node: ast.AST, text: str) -> Edit | None:
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset",
                                                                        None)
        if end_line is None or end_col is None:
            return None
        return Edit(getattr(node, "lineno", 1), getattr(node, "col_offset", 0), end_line, end_col,
                    text)

    # --- MC508 / MC520: 0/1 masks where an additive mask or a fill is needed ---

    def _binding_scope(self, name: str) -> _Scope:
        """The scope whose `name` this one reads (as `lookup` finds it)."""
        for depth, scope in enumerate(reversed(self.scopes)):
            if depth and scope.kind == "class":
                continue
            if name in scope.values or name in scope.assigned or name in scope.mutated:
                return scope
        return self.scope

    def _ones_written(self, held: str, value: ast.expr) -> bool:
        """`m = torch.zeros(b, t)` then only `m[i, :n] = 1.0`: a float 0/1 mask written by
        hand (a Kaggle collate's frame mask), not stale but 0/1 (MC508 when SDPA adds it)."""
        if held.startswith("self.") or number(value, self.lookup) != 1:
            return False
        scope = self._binding_scope(held)
        known = scope.values.get(held)
        if known is None or held in scope.mutated or not (known.zeros or known.float01) or (
                known.dtype not in {None, *FLOAT_DTYPES}):
            return False
        scope.values[held] = replace(known, zeros=False, float01=True)
        return True

    def _keep_prefix_written(self, held: str, target: ast.Subscript, value: ast.expr) -> bool:
        """`m = torch.zeros(b, t, dtype=torch.bool)` then only `m[i, :n] = True` (or an int64
        one, `= 1`): each row's first n positions, its real tokens, written 1 by hand (a
        collate function's mask): a keep-mask, 1 = real token, not a stale one."""
        upper = _row_prefix(target)
        if held.startswith("self.") or upper is None or not self._a_length(upper):
            return False
        scope = self._binding_scope(held)
        known = scope.values.get(held)
        written = value.value if isinstance(value, ast.Constant) and isinstance(
            value.value, bool) else number(value, self.lookup)  # (True == 1)
        if known is None or held in scope.mutated or written != 1 or not (
                known.zeros or known.pad_keep) or known.dtype not in {"bool", "int"}:
            return False
        scope.values[held] = replace(known, zeros=False, pad_keep=True)
        return True

    def _a_length(self, node: ast.expr) -> bool:
        """`len(s)`, `lengths[i]`, `seq_len`, or a name this function binds to `len(...)`: the
        number of a row's real tokens (not `max_len - positions[i]`, stanza's left padding, nor
        `mems.size(0)`, Emformer's memory columns)."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id == "len"):
            return True
        text = self._text(node).lower()
        if isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)) and "len" in text and not (
                "pad" in text or "max" in text):
            return True  # (not `pad_len`, a left padding's width, nor `max_len`, a whole row)
        function = self.scope.node
        if not isinstance(node, ast.Name) or self.scope.kind != "function" or function is None:
            return False
        bound = [a.value for a in ast.walk(function) if (isinstance(a, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == node.id for t in a.targets)) or (
            isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
            and a.target.id == node.id)]
        return bool(bound) and all(
            isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "len"
            for v in bound)

    def _mutate(self, name: str) -> None:
        if name.startswith("self."):  # a module attribute: every method of the class sees it
            cls = self._class_scope()
            if cls is not None:
                cls.mutated.add(name)
            return
        scope = self._binding_scope(name)
        scope.mutated.add(name)
        scope.zeroed.pop(name, None)

    def _is_mutated(self, node: ast.AST) -> bool:
        """Written in place since it was bound: the value table's facts may be stale. Not when
        the expression casts it to bool on the way (`raw.to(torch.bool).float()` is 0/1
        whatever was written into `raw`)."""
        while isinstance(node, (ast.Call, ast.Subscript)):
            if isinstance(node, ast.Call) and _casts_to_bool(node):
                return False
            node = node.value if isinstance(node, ast.Subscript) else receiver(node) or node
            if isinstance(node, ast.Call) and not isinstance(node.func, ast.Attribute):
                break
        name = _held_name(node)
        if name is None:
            return False
        if name.startswith("self."):
            cls = self._class_scope()
            return cls is not None and name in cls.mutated
        return name in self._binding_scope(name).mutated

    def _list_grows(self, held: str, call: ast.Call, name: str) -> None:
        """`masks.append(m)` of a list of tensors of one dtype (`Value.elements`): the list
        keeps that dtype while every element appended has it; any other growth forgets it."""
        before = self.lookup(held)
        if before.elements is None:
            return
        after = UNKNOWN
        if name == "append" and len(call.args) == 1 and not call.keywords and not isinstance(
                call.args[0], (ast.Constant, ast.Starred)):
            dtype = self.value(call.args[0]).dtype
            if dtype is not None and before.elements in {"", dtype}:
                after = Value(elements=dtype)
        self.bind(held, after)

    def _note_mutations(self, call: ast.Call, name: str) -> None:
        """`m.masked_fill_(...)`, `m[i].fill_(0)`, `helper(m)`: `m` may hold other values now."""
        base = receiver(call)
        if base is not None and name.endswith("_") and name != "requires_grad_":
            held = _held_name(_inplace_base(base))
            if held is not None:
                self._mutate(held)
        func = call.func
        user_function = (isinstance(func, ast.Name) and func.id not in _PURE_BUILTINS
                         and not self.lookup(func.id).api) or (
            isinstance(func, ast.Attribute) and (dotted(func.value) or "").startswith("self"))
        if not user_function or (isinstance(func, ast.Attribute) and self.value(func).mha):
            # torch functions, tensor methods, print/len/... and torch's attention modules
            # (`self.encoder(x, src_key_padding_mask=pad)`) leave their arguments be
            return
        if isinstance(func, ast.Name) and func.id in self._rebinds:
            for rebound in self._rebinds[func.id]:
                self._mutate(rebound)
        for arg in [*call.args, *(kw.value for kw in call.keywords if kw.arg is not None)]:
            if isinstance(arg, ast.Name):
                self._mutate(arg.id)

    def _float_zero_one(self, node: ast.AST) -> bool:
        """A float tensor of 0s and 1s by evidence, not written in place since."""
        facts = self.value(node)
        return facts.dtype not in {"bool", "int"} and (facts.float01 or (
            facts.zero_one and facts.dtype in FLOAT_DTYPES)) and not self._is_mutated(node)

    def _float_mask_of_attention(self, node: ast.AST) -> bool:
        """A 0/1 mask that SDPA or an attention module would add: a float 0/1 by evidence, or
        a 0/1 mask cast to another tensor's dtype (`Value.cast01`): these APIs take bool or
        float masks only, so such a cast that runs is a float one."""
        if self._float_zero_one(node):
            return True
        facts = self.value(node)
        return facts.cast01 and facts.dtype not in {"bool", "int"} and not self._is_mutated(node)

    def _float_mask_argument(self, mask: ast.expr, api: str) -> None:
        if self._float_mask_of_attention(mask):
            if not self._reported_at_cast(mask, f"{api} adds it"):
                self._told_cast(mask)
                self.report("MC508", mask, f"{self._text(mask)} is a float 0/1 mask, but {api} "
                            "adds a float attn_mask to the scores: it adds 1 to the kept "
                            "positions and masks nothing; pass it as bool (`.bool()`) or as 0/-inf")
        else:
            self._branch_float01(mask, f"{api}() adds it")

    def _in_sight(self, made: tuple[int, int, int]) -> bool:
        """Whether code at `made` is in the function being read or one that encloses it (a
        closure reads its maker's names), or is module-level code read by a module-level
        function or by the module itself; not across a class (another method's code)."""

        def spans(node: ast.AST | None) -> bool:
            return node is not None and getattr(node, "lineno", 0) <= made[0] <= (
                getattr(node, "end_lineno", None) or 0)

        for scope in reversed(self.scopes):
            if scope.kind == "class":
                return False
            if scope.kind == "function" and spans(scope.node):
                return True
            if scope.kind == "module":
                body = getattr(self._tree, "body", [])
                return not any(isinstance(statement, (
                    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and spans(statement)
                    for statement in body)
        return False

    def _told_cast(self, mask: ast.AST) -> None:
        """Note that the cast that made `mask` float is reported at a use in its sight."""
        made = self.value(mask).floated_at
        if made is not None:
            self._casts_told.add(made)

    def _reported_at_cast(self, mask: ast.AST, use: str, *, handed: bool = False) -> bool:
        """MC508 for a float 0/1 `mask` at the cast that made it float (`Value.floated_at`),
        naming the use, where the mask is added out of sight of that cast: `handed` to a
        function of this file that adds it, or added in a function that neither is nor
        encloses the one that cast it (a mask cast in a model's forward and added by its
        attention layer), or where the use takes the name as it is (`attn_mask = keep.to(
        q.dtype)` then `sdpa(..., attn_mask=attn_mask)`: the cast is the line to change). A cast
        on the use's own line, or one in sight of a use that reshapes it (`logits +
        keep[:, None, None, :]`, where the use may be the line to change), is reported at the
        use (False: the caller reports it there)."""
        made = self.value(mask).floated_at
        if made is None or self._is_mutated(mask):
            return False
        line = getattr(mask, "lineno", 0)
        if made[0] <= line <= made[2]:
            return False  # `sdpa(..., attn_mask=keep[:, None, None, :].float())`
        if not handed and not isinstance(mask, ast.Name) and self._in_sight(made):
            return False  # `bias = keep.to(q.dtype)` then `attn_mask=bias[:, None, None, :]`
        if handed and made in self._casts_told:
            return False  # the cast's own function adds it too, reported there at the use
        self.report("MC508", _placed(made), f"this makes a float 0/1 mask ({self._text(mask)} "
                    f"at line {line}), and {use} as an additive mask: it adds 1 where it is 1 "
                    "and masks nothing; turn it into 0/-inf here (`(1.0 - m) * "
                    "torch.finfo(dtype).min`) or pass it as bool")
        return True

    def _branch_float01(self, mask: ast.AST, use: str) -> bool:
        """MC508 for a mask that one branch of an `if` made a float 0/1 padding mask
        (`Value.float01_at`), reported at that branch's assignment, naming the use."""
        made = self.value(mask).float01_at
        if made is None or self._is_mutated(mask):
            return False
        self.report("MC508", _placed(made), f"this branch makes {self._text(mask)} a float 0/1 "
                    f"mask, and {use} (line {getattr(mask, 'lineno', made[0])}) as an additive "
                    "mask: it adds 1 where it is 1 and masks nothing; turn it into 0/-inf here "
                    "(`(1.0 - m) * torch.finfo(dtype).min`) or pass it as bool")
        return True

    def _added_zero_one(self, node: ast.AST) -> bool:
        """A 0/1 mask that `scores + m` would add: from a tokenizer's mask or a pad-id test,
        a float triangle of ones, or a 0/1 float named as a mask (`pad_mask.float()`)."""
        facts = self.value(node)
        if facts.dtype == "bool" or self._is_mutated(node):
            return False
        if facts.dtype == "int":
            return facts.hf_keep or facts.hf_keep_inverted
        # (a pad test cast to a dtype not known here, `keep.to(graph_attn_bias.dtype)`: added,
        # it adds 1 whatever that dtype is, a bool True too)
        cast_keep = facts.dtype is None and facts.zero_one and (facts.pad_keep or facts.hf_keep)
        return (self._float_zero_one(node) or cast_keep) and (
            facts.padding01 or facts.tri is not None or facts.keep_mask
            or _named_mask(_receiver_root(node), False))

    def _zero_one_mask(self, node: ast.AST) -> bool:
        """A mask of 0s and 1s by evidence (bool with a mask's provenance, a tokenizer's int
        mask, a 0/1 float): multiplied into logits it zeroes them instead of hiding them."""
        if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            return False
        facts = self.value(node)
        if self._is_mutated(node):
            return False
        if facts.keep_mask or facts.annotated01:  # `pad_keep[:, None, :]`: bool or 0/1 by its
            return True  # name, or by its annotation (`mask: torch.BoolTensor`)
        if facts.dtype == "bool":  # a bool tensor held in a name, or one with a mask's provenance
            return bool(facts.tri or facts.hf_keep or facts.hf_keep_inverted or facts.pad_keep
                        or _held_in_a_name(node))
        if facts.dtype == "int":
            return facts.hf_keep or facts.hf_keep_inverted or facts.zero_one
        return self._float_zero_one(node)

    def _cast_zero_one(self, node: ast.AST) -> bool:
        """A comparison cast to a dtype this function does not know (SpeechBrain's
        `length_to_mask(...)`: `torch.as_tensor(mask, dtype=dtype)`): 0s and 1s whatever the
        dtype, and a product with 0 is 0 in every one. Read as the mask of a product only (a
        later product by one is not taken for a re-masking)."""
        if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            return False
        if isinstance(node, ast.Call) and call_name(node) == "float" and not node.args and (
                (held := receiver(node)) is not None and isinstance(
                    held, (ast.Name, ast.Attribute, ast.Subscript)) and _names_a_mask(held)) and (
                not self.value(held).additive) and not self._is_mutated(held):
            # `softmax(scores * node_mask.float())`: a bool or int mask made float is its 0/1
            # (one the file shows additive is MC523's, not read here)
            return True
        facts = self.value(node)
        return facts.dtype is None and facts.zero_one and not (
            facts.additive or facts.all_ones or facts.zeros) and not self._is_mutated(node)

    def _masking_product(self, node: ast.BinOp) -> ast.expr | None:
        """`scores * keep` with `keep` a 0/1 mask and `scores` a tensor that is not one: the
        mask operand."""
        if not isinstance(node.op, ast.Mult):
            return None
        for mask, other in ((node.right, node.left), (node.left, node.right)):
            if (self._zero_one_mask(mask) or self._cast_zero_one(mask)
                    or self._untouched_hf_name(mask)) and (
                    _tensor_operand(other)) and not (
                    _names_a_mask(other) or self._zero_one_mask(other)
                    or self.value(other).dtype in {"bool", "int"}):
                return mask
        return None

    def _remasks(self, node: ast.AST) -> bool:
        return self._zero_one_mask(node) or _names_a_mask(node)

    def _product_of(self, node: ast.BinOp) -> _Product | None:
        mask = self._masking_product(node)
        return None if mask is None else _Product(node, self._text(mask))

    def _zeroed_of(self, name: str) -> _Product | None:
        scope = self._binding_scope(name)
        return None if name in scope.mutated else scope.zeroed.get(name)

    def _softmax(self, call: ast.Call, parent: ast.AST | None) -> None:
        if self.scope.kernel:
            return
        base = receiver(call)
        if base is None or is_module_call(call) or (dotted(base) or "").startswith("self"):
            logits = argument(call, 0, "input")  # torch.softmax(x), F.softmax(x), self.sm(x)
        else:
            logits = base  # x.softmax(-1)
        while isinstance(logits, ast.Call) and call_name(logits) in _RESHAPES and (
                receiver(logits) is not None):
            logits = receiver(logits)  # `softmax(align.view(b, n), -1)`: the same logits
        product: _Product | None = None
        if isinstance(logits, ast.BinOp):
            product = self._product_of(logits)
        elif isinstance(logits, ast.Name):
            product = self._zeroed_of(logits.id)
        if product is None:
            return
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mult) and (
                self._remasks(parent.right if parent.left is call else parent.left)):
            return  # `softmax(s * m) * m`, renormalised by the caller
        target = None
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
            target = parent.targets[0]
        elif isinstance(parent, ast.AnnAssign):
            target = parent.target
        if isinstance(target, ast.Name):
            self.scope.softmaxed[target.id] = product  # reported unless re-masked later
        else:
            self._report_zeroed(product)

    def _in_other_branch(self, first: ast.AST, later: ast.AST) -> bool:
        """Whether `later` sits in the other branch of an `if` whose body holds `first`."""
        if self._tree is None:
            return False
        parents = self._parents()
        line = getattr(later, "lineno", 0)
        child, here = first, parents.get(id(first))
        while here is not None and not isinstance(here, _FUNCTION_NODES):
            if isinstance(here, ast.If) and here.orelse and any(
                    child is statement for statement in here.body) and (
                    here.orelse[0].lineno <= line <= (
                        getattr(here.orelse[-1], "end_lineno", None) or line)):
                return True
            child, here = here, parents.get(id(here))
        return False

    def _flush_softmaxed(self, scope: _Scope) -> None:
        if not scope.kernel:
            for product in scope.softmaxed.values():
                self._report_zeroed(product)
        scope.softmaxed.clear()

    def _report_zeroed(self, product: _Product) -> None:
        if "MC520" in self.enabled:
            node = product.node
            line = getattr(node, "lineno", 1)
            self.hits.append(Hit(
                "MC520", line, getattr(node, "col_offset", 0),
                getattr(node, "end_lineno", None) or line,
                f"{product.mask} is a 0/1 mask multiplied into the logits before softmax: a masked "
                "logit becomes 0, not -inf, and keeps weight exp(0); fill it "
                "(`masked_fill(~m, float('-inf'))`) or multiply after softmax"))

    # --- MC501 ---

    def _is_large_negative(self, node: ast.AST) -> bool:
        return self._is_large_number(number(node, self.lookup))

    @staticmethod
    def _is_large_number(v: float | None) -> bool:
        """A finite number float16 cannot hold, negative (a fill value)."""
        return v is not None and math.isfinite(v) and v < -FP16_MAX

    def _masked_fill(self, call: ast.Call, name: str, parent: ast.AST | None = None) -> None:
        target, shift = _fill_target(call)
        value = argument(call, 1 + shift, "value")
        condition = argument(call, 0 + shift, "mask")
        target_facts = self.value(target) if target is not None else UNKNOWN
        if value is not None and self._is_large_negative(value) and not self._fill_fits(
                value, target, condition) and not self._fills_own_zeros(target, condition):
            self._large_negative(value, name, target)
        elif value is not None and target is not None and self_attr(value) is not None and (
                self._is_scores(target)):
            # `scores.masked_fill(m, self.mask_value)` with `mask_value=-1e10` given in
            # __init__: the attribute holds the constant (only on score tensors by name: CTC
            # and beam-search code keeps float32 log-domain sentinels in attributes too)
            held = self.lookup("self." + (self_attr(value) or "")).number
            if held is not None and math.isfinite(held) and held < -FP16_MAX:
                self._large_negative(value, name, target)
        elif value is not None and target is not None and isinstance(value, ast.Attribute) and (
                isinstance(value.value, ast.Attribute)) and self._is_scores(target) and (
                self._is_large_number(self.value(value).number)) and (
                self._speaks_float16() or _FLOAT16_NAMED.search(self.source) is not None):
            # `scores.masked_fill(m, self.cfg.mask_value)`: a config record's field whose
            # default is `mask_value: float = -1e9` (as the attribute case above), in a file
            # that runs float16 itself (a config default of a bfloat16 model, Gemma's
            # `attention_invalid_logits_value`, is finite there)
            self._large_negative(value, name, target)
        elif value is not None and target is not None and self._masking_default(
                value) is not None and self._is_scores(target):
            # `def pool(scores, keep, fill=-1e10): scores.masked_fill(~keep, fill)`: every call
            # that leaves the default fills the scores with it (NVIDIA/apex#1105). Only for
            # scores: a default fill of log-probs or DP tables is float32 work.
            self._large_negative(value, name, target)
        if value is not None and (is_wide_finfo_min(value) or self.value(value).wide_finfo) and (
                target_facts.dtype in HALF_DTYPES or target_facts.maybe_half or (
                    target is not None and target_facts.dtype is None
                    and self._is_scores(target) and self._casts_half())):
            how = "" if target_facts.dtype in HALF_DTYPES else " (the tensor's dtype may be one)" \
                if target_facts.maybe_half else (
                    " (this file casts its model to a half dtype or autocasts to one)")
            self.report("MC517", value, f"{self._text(value)} is the float32 minimum: filling a "
                        f"float16/bfloat16 tensor with it raises{how} (value cannot be converted "
                        "without overflow); use torch.finfo(x.dtype).min")
        weak = self._fill_number(value) if value is not None else None
        weak_masking = value is not None and weak is not None and -1 <= weak < 0 and (
            target is not None and self._fill_reaches_softmax(call, target, parent))
        if weak_masking and value is not None and weak is not None:  # (the Nones for mypy)
            # ReChorus#8 (`-1e-13`), pytorch/pytorch#26098 (`-1e-20`): exp(v) is about 1
            self.report("MC516", value, f"{self._text(value)} as the fill of attention scores "
                        "hardly masks: a masked position weighs as a score of "
                        f"{weak:g} would ({math.exp(weak):.2g} times a score of 0); use "
                        "torch.finfo(scores.dtype).min or float('-inf')")
        if name == "masked_fill_" and target is not None and (
                inside := self._runs_every_call()) is not None:
            # whatever the value: a bool buffer filled with False (WeNet's chunk mask limited
            # to the left chunks) is rewritten as surely as one filled with -inf
            attr = self._held_attr(_inplace_base(target))
            cls = self._class_scope()
            if attr is not None and cls is not None and attr in cls.buffer_attrs:
                self.report("MC524", call, f"masked_fill_ on the buffer self.{attr} inside "
                            f"{inside}: the stored mask is rewritten on every call; use "
                            "masked_fill (out of place)")
        if condition is not None and weak_masking:
            # a fill meant to mask, too weak to (MC516): which positions it picks is read too
            # (rec4torch's DIN pooling fills where its keep-mask is True, with -1e-7)
            self._keep_mask_condition(condition, self.value(condition))
        if condition is None or value is None or not self._is_fill_value(value):
            return
        self._note_role(condition, "drop-fill")  # `masked_fill(mask == 0, ...)`: keep-fill
        self._empty_rows(call, condition, value, target, parent)
        cond = self.value(condition)
        if cond.layout is None and self._key_padding_on_query_axis(condition):
            cond = replace(cond, layout="B1S1")
        if cond.layout == "B1S1" and target is not None and not self._softmax_not_last() and (
                self._is_scores(target) or self._fill_reaches_softmax(call, target, parent)
                or _assigned_to_scores(call, parent)):
            # (of scores only: a (B, C, T, 1) feature map masked by time before a max-pool
            # takes the same (B, 1, T, 1) mask on purpose)
            self._query_axis_padding(condition, "the masked_fill condition")
        if not self._keep_mask_condition(condition, cond) and cond.dtype == "bool" and (
                cond.tri in {"lower", "slower"}) and is_masking_value(
                value, self.lookup) and target is not None and not self._span_scores(target) and (
                _root_name(target) == _root_name(condition) or self._is_scores(target)
                or self._fill_reaches_softmax(call, target, parent)
                or _assigned_to_scores(call, parent)):
            # Only with -inf/finfo.min/-1e9: a global-pointer head masks its lower triangle
            # with -1e4 on purpose (transformers' pp_doclayout). Only of a mask being built
            # from the triangle (`m.float().masked_fill(m == 1, -inf)`) or of attention
            # scores, whose past and future these are: a monotonic aligner's transition
            # matrix forbids going back on purpose (yoyodyne's hard attention).
            where = _BELOW.get(cond.tri or "", "on and below")
            at, shown = self._triangle_site(condition)
            self.report("MC521", at, f"{shown} is True {where} the "
                        "diagonal: filling there masks the past, not the future; use "
                        "triu(..., diagonal=1) or `tril(...) == 0`")

    def _span_scores(self, target: ast.AST) -> bool:
        """`scores = start[:, None] + end[None, :]` bound in this function: the scores of every
        (start, end) span, an outer sum of two vectors, not queries against keys; a span ends at
        or after its start, so hiding below the diagonal is right there (held-out 80's DPR
        reader, as BiDAF's and SpanBERT's decoders)."""
        bound = self.scope.derived.get(target.id) if isinstance(target, ast.Name) and (
            target.id not in self.scope.mutated) else None
        return isinstance(bound, ast.BinOp) and isinstance(bound.op, ast.Add) and (
            _outer_axes(bound.left, bound.right) or _outer_axes(bound.right, bound.left))

    def _keep_mask_condition(self, condition: ast.expr, cond: Value) -> bool:
        """MC519: a keep-mask (True/1 = real token) as a masked_fill condition."""
        if cond.hf_keep and not cond.hf_keep_inverted and not cond.pad_keep:
            self.report("MC519", condition, f"{self._text(condition)} is a tokenizer "
                        "attention_mask "
                        "(1 = real token): as the masked_fill condition it masks the real "
                        "tokens; fill where it == 0")
            return True
        if (cond.pad_keep or cond.keep_mask) and not cond.hf_keep_inverted:
            why = "a test for real tokens" if cond.pad_keep else "a keep-mask"
            self.report("MC519", condition, f"{self._text(condition)} is {why} (True = may "
                        "attend): as the masked_fill condition it masks the positions it "
                        "keeps; fill where it is False (`~m`, `m == 0`)")
            return True
        return False

    def _held_attr(self, node: ast.AST) -> str | None:
        """`X` for `self.X`, `self.get_buffer("X")`, or a name this function bound to `self.X`
        (`bias = self.window_bias`): an in-place call on any of them writes into self.X."""
        attr = self_attr(node)
        if attr is not None:
            return attr
        if isinstance(node, ast.Call) and call_name(node) == "get_buffer" and len(
                node.args) == 1 and isinstance(node.args[0], ast.Constant) and isinstance(
                node.args[0].value, str) and self_attr(node.func) == "get_buffer":
            return node.args[0].value
        if isinstance(node, ast.Name) and node.id not in self.scope.mutated:
            bound = self.scope.derived.get(node.id)
            if isinstance(bound, (ast.Attribute, ast.Subscript)):
                return self_attr(bound)
        return None

    def _fill_fits(self, value: ast.AST, target: ast.AST | None,
                   condition: ast.AST | None) -> bool:
        """A masked_fill whose tensor cannot be float16 (checked on torch 2.13):
        `(m * 1.0).masked_fill(m, -1e9)` (Falcon's mask in petals and transformers): the fill
        condition is a bool tensor, and a bool tensor times a Python float is float32, times a
        Python int int64; an integer tensor (`ids.long()`) filled with a value that fits int32.
        A later `.to(torch.float16)` turns -1e9 into -inf without raising."""
        if target is None:
            return False
        v = number(value, self.lookup)
        if self.value(target).dtype == "int":
            return v is not None and abs(v) < 2 ** 31
        if condition is None or not isinstance(target, ast.BinOp) or not isinstance(
                target.op, (ast.Mult, ast.Add, ast.Sub)):
            return False
        shown = ast.dump(condition)
        for side, scalar in ((target.left, target.right), (target.right, target.left)):
            if ast.dump(side) == shown and number(scalar, self.lookup) is not None:
                return True
        return False

    def _fills_own_zeros(self, target: ast.AST | None, condition: ast.AST | None) -> bool:
        """`attention_mask.masked_fill(attention_mask == 0, -9e15)` (GLIP's BiAttention, copied
        into mmdet and BIP3D): the tensor filled is the 0/1 mask its condition tests, a
        tokenizer's int64 or bool mask unless this file casts it, which a project's float16
        switch elsewhere does not reach. Kept where the file itself speaks float16 or the
        tensor is known to be half."""
        if target is None or condition is None:
            return False
        inner = _inverted_operand(condition)
        if inner is None or ast.dump(inner) != ast.dump(target):
            return False
        return self.value(target).dtype not in HALF_DTYPES and not self._speaks_float16()

    def _key_padding_on_query_axis(self, node: ast.AST) -> bool:
        """`key_padding_mask.unsqueeze(1).unsqueeze(3)` / `key_padding_mask[:, None, :, None]`
        of this function's own `key_padding_mask` parameter, untouched: (batch, seq) by the
        name's own convention (nn.MultiheadAttention's (N, S)), laid out as (B, 1, S, 1). So
        too any mask parameter of the function laid out so, inverted or not
        (`~bin_mask[:, None, :, None]`): two indexed axes make it (batch, seq), a mask per
        token, and a fill of whole query rows before softmax hides no key (a row filled with
        one finite value everywhere is as uniform as one filled nowhere; with -inf it is
        NaN)."""
        while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
            node = node.operand
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(
                node.ops[0], (ast.Eq, ast.NotEq)) and number(node.comparators[0]) in {0, 1}:
            node = node.left  # `bin_mask[:, None, :, None] == 0`
        axes: list[str] = []
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr == "unsqueeze") and len(node.args) == 1 and not node.keywords:
            axes.append(str(number(node.args[0])))
            node = node.func.value
        if axes == ["3.0", "1.0"]:
            inner = node
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and [
                "None" if is_none(p) else ":" if isinstance(p, ast.Slice) and p.lower is None
                and p.upper is None else "?" for p in node.slice.elts] == [":", "None", ":",
                                                                              "None"]:
            inner = node.value
        else:
            return False
        if not isinstance(inner, ast.Name) or not (inner.id.endswith("key_padding_mask") or (
                "mask" in inner.id.lower() and self._softmax_over_last_axis())):
            return False
        scope = self._binding_scope(inner.id)
        return scope.kind == "function" and inner.id in scope.params and (
            inner.id not in scope.assigned)

    def _softmax_not_last(self, node: ast.AST | None = None) -> bool:
        """Whether this function (or the function `node`) takes a softmax and none over the
        last axis (`dim=-2` of scores laid out keys first): its third axis is then the keys',
        where a (batch, 1, seq, 1) mask belongs."""
        if node is None:
            node = self.scope.node if self.scope.kind == "function" else None
        dims = _softmax_dims(node) if node is not None else set()
        return bool(dims) and not dims & {-1, 3, None}

    def _softmax_over_last_axis(self) -> bool:
        """Whether every softmax this function takes runs over the last axis (`dim=-1`, or 3
        of (B, H, L, S) scores), and it takes one: only then is the third axis the queries'
        (scores laid out keys first are softmaxed over `dim=-2`)."""
        node = self.scope.node
        if self.scope.kind != "function" or node is None:
            return False
        dims = _softmax_dims(node)
        return bool(dims) and dims <= {-1, 3}

    def _query_axis_padding(self, mask: ast.AST, where: str) -> None:
        """MC514: a (batch, sequence) padding mask laid out as (B, 1, L, 1) hides query rows.
        Reported where that layout is made (the fix goes there), naming this use; `_finish`
        keeps the first use's report of each place."""
        made = self.value(mask).layout_at
        at: ast.AST = mask
        use = ""
        if made is not None:
            at = _placed(made)
            if made[0] != getattr(mask, "lineno", made[0]):
                use = f" (line {getattr(mask, 'lineno', 1)})"
        self.report("MC514", at, "this padding mask is laid out as (batch, 1, seq, 1): as "
                    f"{where}{use} it hides the padded query rows and leaves the padded keys "
                    "visible; put the sequence on the last axis (`[:, None, None, :]`, "
                    "`.unsqueeze(1).unsqueeze(2)`)")

    def _filled_tensor(self, node: ast.AST) -> bool:
        """A tensor of one hiding value: `torch.full(shape, -1e9)`, `torch.ones(shape) * (-2 **
        32 + 1)` (SASRec's `paddings`, the other branch of `torch.where(mask, paddings, w)`),
        or a name this function binds to one."""
        if isinstance(node, ast.Name) and isinstance(
                bound := self.scope.derived.get(node.id), ast.expr) and (
                node.id not in self.scope.mutated):
            node = bound
        if isinstance(node, ast.Call) and call_name(node) in {"full", "full_like", "new_full"}:
            fill = argument(node, 1, "fill_value") if call_name(node) != "new_full" or (
                not is_module_call(node)) else None
            return fill is not None and self._is_fill_value(fill)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return any(is_ones(a) and self._is_fill_value(b) for a, b in (
                (node.left, node.right), (node.right, node.left)))
        return False

    def _is_fill_value(self, node: ast.AST) -> bool:
        """A value that hides a position: -inf, finfo.min or anything from -1e3 down."""
        v = number(node, self.lookup)
        if v is None:
            v = _literal_sum(node)
        if v is None and self_attr(node) is not None and isinstance(node, ast.Attribute):
            v = self.value(node).number  # `self.mask_value` bound to a constant
        if v is not None:
            return v <= -1000
        # `max_neg_value(sim)` of a helper returning `-torch.finfo(t.dtype).max`
        return is_finfo_min(node, self.lookup) or (
            isinstance(node, ast.Call) and self.value(node).finfo_min)

    def _where(self, call: ast.Call) -> None:
        if len(call.args) == 3 and (self._filled_tensor(call.args[1]) or self._is_fill_value(
                call.args[1])) and self._is_scores(call.args[2]):
            # `torch.where(attn_mask, paddings, w)` (TiSASRec): a fill where the mask is True,
            # as `w.masked_fill(attn_mask, v)`
            self._note_role(call.args[0], "drop-fill")
        # `torch.tensor(-1e10, dtype=w.dtype)` is a 0-d tensor, which does not promote a
        # dimensioned one: torch.where gives w's dtype, as with the bare number (torch 2.13)
        branches = [self._zero_d_scalar(b) for b in call.args[1:3]]
        tensors = [b for b in branches if number(b, self.lookup) is None]
        if not tensors:
            return  # two Python scalars: the result is float32
        for branch in branches:
            if self._is_large_negative(branch):
                self._large_negative(branch, "torch.where", tensors[0])
            elif not (is_wide_finfo_min(branch) or self.value(branch).wide_finfo):
                continue
            elif any(self.value(t).dtype in HALF_DTYPES for t in tensors if t is not branch):
                # torch.where does not raise here: the value rounds to -inf (checked on torch
                # 2.13, float16 and bfloat16), so a row with every key masked softmaxes to NaN.
                self.report("MC517", branch, f"{self._text(branch)} is the float32 minimum: "
                            "torch.where on a float16/bfloat16 tensor turns it into -inf, so a "
                            "fully masked row gives NaN; use torch.finfo(x.dtype).min")
            elif self._casts_half() and any(self.value(t).dtype is None and self._is_scores(t)
                                            for t in tensors if t is not branch):
                self.report("MC517", branch, f"{self._text(branch)} is the float32 minimum and "
                            "this file casts its model to a half dtype: torch.where on float16 "
                            "or bfloat16 scores turns it into -inf, so a fully masked row gives "
                            "NaN; use torch.finfo(x.dtype).min")

    def _zero_d_scalar(self, node: ast.expr) -> ast.expr:
        """The number in `torch.tensor(number, ...)`, else the node itself."""
        if isinstance(node, ast.Call) and len(node.args) == 1 and is_module_call(
                node) and call_name(node, self.lookup) == "tensor" and number(
                node.args[0], self.lookup) is not None:
            return node.args[0]
        return node

    def _full(self, call: ast.Call, name: str) -> None:
        if _numpy_call(call):
            return  # `np.full(vocab, -1e10, dtype="float32")`: numpy's, no torch float16 here
        if name in {"full", "full_like", "new_full"}:
            self._wide_finfo_full(call, name)
        if name == "fill_":
            fill = call.args[0] if call.args else None
            target = receiver(call)
            if isinstance(target, ast.Name) and fill is not None and is_masking_value(
                    fill, self.lookup):
                # `mask = torch.empty(n, n); mask.fill_(float("-inf")); mask.triu_()` (CLIP's
                # build_attention_mask): from here on the name holds a matrix of -inf
                self.bind(target.id, Value(dtype=self.lookup(target.id).dtype, additive=True,
                                           finfo_min=is_finfo_min(fill, self.lookup)))
        else:
            fill = argument(call, 1, "fill_value")
            target = receiver(call) if name == "new_full" else None
        if fill is None or not self._is_large_negative(fill):
            return
        dtype = kwarg(call, "dtype")
        if _is_wide_float(dtype) or (dtype_of(dtype) == "bf16" and self._fits_bf16(fill)):
            return
        if name == "full" and dtype is None:
            return  # torch.full with a Python float and no dtype is float32
        if name == "full_like" and dtype is None and is_module_call(call) and call.args and (
                self.value(call.args[0]).dtype == "fp32"):
            return  # the like-tensor's dtype, float32 by evidence (altasr's RNN-T log-probs)
        if dtype_of(dtype) == "int":
            return  # `torch.full(size, -999999, dtype=torch.long)`: an integer table, no float16
        shape = argument(call, 0, "size")
        if name == "full" and isinstance(shape, ast.Tuple) and not shape.elts:
            return  # a 0-d fill gives -inf in float16 without raising (checked on torch 2.13)
        if target is not None and dtype is None and not (
                mentions_mask(target) or self.value(target).dtype in HALF_DTYPES):
            return  # `scores.new(size).fill_(-1e17)`: a beam-search buffer, not a mask
        self._large_negative(fill, name, target if dtype is None else None)

    def _wide_finfo_full(self, call: ast.Call, name: str) -> None:
        """`torch.full(size, torch.finfo(torch.float32).min, dtype=torch.float16)`: raises
        (samlhuillier/spider-sql-finetune#1, a half causal-mask helper)."""
        fill = argument(call, 1, "fill_value")
        dtype = dtype_of(kwarg(call, "dtype"))
        if dtype is None and kwarg(call, "dtype") is None:
            # `torch.full_like(logits, v)` / `logits.new_full(size, v)`: the tensor's dtype
            like = call.args[0] if name == "full_like" and is_module_call(call) and call.args else (
                receiver(call) if name in {"full_like", "new_full"} and not is_module_call(call)
                else None)
            dtype = self.value(like).dtype if like is not None else None
        if fill is not None and (is_wide_finfo_min(fill) or self.value(fill).wide_finfo) and (
                dtype in HALF_DTYPES):
            self.report("MC517", fill, f"{self._text(fill)} is the float32 minimum: a "
                        "float16/bfloat16 tensor cannot hold it (value cannot be converted "
                        "without overflow); use torch.finfo(dtype).min of that dtype")

    def _large_negative(self, value: ast.AST, where: str, target: ast.AST | None) -> None:
        if self.scope.fp16_guard or self.fp32_only:
            return  # the code has an fp16 branch (xlnet: `65500 if fp16 else 1e30`), or no fp16
        if self.test_module and where in _RAISING_FILLS:
            # A test that reached this fill in float16 would fail on its first run: what is
            # left in tests is a float32 reference's sentinel (vllm's kernel tests).
            return
        target_facts = UNKNOWN if target is None else self.value(target)
        target_dtype = target_facts.dtype
        if target_dtype == "fp32" or target_facts.never_half:
            # provably float32 (`.float()`, dtype=torch.float32), or int64 or float32 on every
            # path (a top-k sentinel on `arange` or `rand` values): -1e9 fits
            return
        if where in _NON_RAISING and target_dtype not in HALF_DTYPES and not self._speaks_float16():
            # In float16 these give -inf without raising (torch 2.13), which hurts only a row
            # that loses every key: reported where the file itself handles float16, not on a
            # project's fp16 switch elsewhere (bert4torch's and chatterbox's key-padding biases)
            return
        if target_dtype == "bool" and where in {"masked_fill", "masked_fill_"}:
            return  # a bool tensor filled with -9e15 holds True: no float16 ever sees it (MC509)
        if target_dtype is None and isinstance(target, ast.expr) and names_log_sum_exp(
                _inplace_base(target)):
            return  # a kernel's log-sum-exp is float32 (sglang's `lse.masked_fill_(e, -1e30)`)
        if target_dtype == "bf16" and self._fits_bf16(value):
            return  # bfloat16 has float32's range: -1e9 is finite there
        text = self._text(value)
        v = number(value, self.lookup)
        if v is None:
            v = self._masking_default(value)
        shown = text if not isinstance(value, (ast.Name, ast.Subscript)) else f"{text} ({v:g})"
        before = len(self.hits)
        self.report("MC501", value, f"{shown} in {where} overflows float16 (largest finite "
                    "65504): use torch.finfo(dtype).min or float('-inf')")
        param = self._own_parameter(target)
        if param is not None and len(self.hits) > before:
            self.param_hits.append((self.hits[-1], param))

    def _casts_half(self) -> bool:
        """The file itself casts a model or tensor to float16 or bfloat16 (`.half()`,
        `.bfloat16()`, `.to(dtype=torch.bfloat16)`, `torch_dtype=torch.float16`): scores of a
        dtype it does not show may be half (lerobot's pi0 `to_bfloat16`, PR #710)."""
        if self._file_casts_half is None:
            self._file_casts_half = casts_half(self.source)
        return self._file_casts_half

    def _torch_mha(self, annotation: ast.expr | None) -> bool:
        """Annotated as torch's attention module, not as a class of this file that shares its
        name (torchtune's own `TransformerDecoder`)."""
        return _annotated_mha(annotation) and _annotation_name(annotation) not in self._local_defs

    def _speaks_float16(self) -> bool:
        if self._file_float16 is None:
            self._file_float16 = mentions_float16(self.source.encode("utf-8", "replace"),
                                                  pattern=FLOAT16_WORDS)
        return self._file_float16

    def _fill_number(self, node: ast.AST) -> float | None:
        """The number a fill value is: a constant, or a parameter (negated or not) that this
        function has not rebound, by its constant default (hyunwoongko/transformer's
        `masked_fill(mask == 0, -e)` with `e=1e-12`)."""
        v = number(node, self.lookup)
        if v is None and isinstance(node, ast.Attribute):
            v = self.value(node).number  # `cfg.fill_value` of `cfg: MaskConfig`, by its default
        if v is not None:
            return v
        sign, name = 1.0, node
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            sign, name = -1.0, node.operand
        scope = self.scope
        if not (isinstance(name, ast.Name) and scope.kind == "function"
                and name.id in scope.params and name.id not in scope.assigned):
            return None
        default = number(scope.defaults[name.id]) if name.id in scope.defaults else None
        return None if default is None else sign * default

    def _masking_default(self, node: ast.AST) -> float | None:
        """The masking default of the parameter `node` names, while it is not rebound."""
        if not isinstance(node, ast.Name):
            return None
        for scope in reversed(self.scopes):
            if scope.kind != "function":
                continue
            if node.id in scope.masking_defaults and node.id not in scope.assigned:
                return scope.masking_defaults[node.id]
            if node.id in scope.assigned or node.id in scope.values:
                return None
        return None

    def _fits_bf16(self, value: ast.AST) -> bool:
        v = number(value, self.lookup)
        if v is None:
            v = self._masking_default(value)
        return v is not None and abs(v) <= BF16_MAX

    def _own_parameter(self, node: ast.AST | None) -> _Param | None:
        """The enclosing function's parameter that `node` still is (not rebound), if any."""
        scope = self.scope
        if not (isinstance(node, ast.Name) and scope.kind == "function" and scope.name
                and node.id in scope.params and node.id not in scope.assigned):
            return None
        index = scope.params.index(node.id) - (1 if scope.method else 0)
        cls = self._class_scope() if scope.in_class else None
        owner = "" if cls is None else cls.name
        return None if index < 0 else _Param(scope.name, owner, index, node.id)

    def _record_call(self, call: ast.Call) -> None:
        """In the pass that reads calls: the dtype each asked-about parameter receives."""
        assert self.calls_to is not None
        func = call.func
        if isinstance(func, ast.Name):
            name, owner = func.id, ""
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
                func.value.id in {"self", "cls"}):
            cls = self._class_scope()  # a method or a @staticmethod of the class
            name, owner = func.attr, "?" if cls is None else cls.name
        else:
            return
        for param, dtypes in self.calls_to.items():
            if param.function == name and param.owner == owner:
                arg = argument(call, param.position, param.name)
                dtypes.append(None if arg is None else self.value(arg).dtype)

    # --- MC502 / MC511 ---

    def _inverted_kwargs(self, call: ast.Call) -> None:
        # Only torch's own modules take key_padding_mask as True = padding; other libraries
        # reuse the name for a keep-mask (flash_attn's BertEncoder).
        if any(kw.arg in KEY_PADDING_KWARGS for kw in call.keywords) and self._is_mha(call):
            for kw in call.keywords:
                if kw.arg in KEY_PADDING_KWARGS:
                    self._key_padding_value(kw.value, kw.arg)
        padding = kwarg(call, "attention_mask")
        if padding is not None and self.value(padding).hf_keep_inverted and not self.value(
                padding).hf_keep and not self._defined_here(call):
            # `model(ids, attention_mask=(ids == pad_id).long())` (nyu-mll/jiant#465): the
            # Hugging Face argument means 1 = real token
            self.report("MC511", padding, f"{self._text(padding)} is 1 at the padding, but "
                        "attention_mask means 1 = real token (Hugging Face convention): the "
                        "model attends to the padding only; pass `ids != pad_id`")
        if call_name(call, self.lookup) != "scaled_dot_product_attention" or self._own_call(call):
            return
        mask = argument(call, 3, "attn_mask")
        if mask is not None and self._is_untouched(mask, _is_key_padding_name):
            self.report("MC502", mask, "key_padding_mask (True = padding) passed as SDPA "
                        "attn_mask (True = may attend): invert it (`~key_padding_mask`)")
        elif mask is not None and (param := self._key_padding_reshaped(mask)) is not None:
            shown = param if self._text(mask) == param else f"{self._text(mask)}, {param}"
            self.report("MC502", mask, f"{shown} (True = padding) reshaped and passed as SDPA "
                        f"attn_mask (True = may attend): invert it (`~{param}`)")

    def _key_padding_reshaped(self, mask: ast.AST) -> str | None:
        """The key-padding parameter (True = padding, by its name) that a name this function
        binds only to reshapes of it, or to None, holds: `attn_mask = key_padding_mask.
        unsqueeze(1).unsqueeze(2)` in one branch, `attn_mask = None` in the other (Kronos'
        layers), or the parameter rebound to a reshape of itself. Not through a cast, an
        inversion or any other value, which may change what True means."""
        scope = self.scope
        base = _convention_base(mask)
        if not isinstance(base, ast.Name) or scope.kind != "function" or not isinstance(
                scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        if base.id in scope.params and _is_key_padding_name(base.id):
            return base.id if base.id in scope.assigned and base.id in _reshaped_params(
                scope.node, (base.id,), padded=True) and self.lookup(
                base.id) in PARAMETER_VALUES else None
        if base.id in scope.params:
            return None
        roots: set[str] = set()
        for sub in _function_body_nodes(scope.node):
            targets = [sub.target] if isinstance(sub, ast.NamedExpr) else _binding_targets(sub)
            for target in targets:
                if not any(isinstance(n, ast.Name) and n.id == base.id for n in ast.walk(target)):
                    continue
                if not (isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(
                        target, ast.Name)):
                    return None
                if isinstance(sub.value, ast.Constant) and sub.value.value is None:
                    continue
                root = _reshape_root(_padded_false(sub.value))
                if root is None:
                    return None
                if root != base.id:  # (`attn_mask = attn_mask.expand(...)` keeps what it is)
                    roots.add(root)
        if len(roots) != 1:
            return None
        root = roots.pop()
        if root not in scope.params or not _is_key_padding_name(root) or (
                root in scope.assigned) or not self._is_untouched(
                ast.Name(id=root, ctx=ast.Load()), _is_key_padding_name):
            return None
        return root

    def _own_call(self, call: ast.Call) -> bool:
        """A bare call of a function of this file that no import binds (not an alias of a
        torch API): it is that function, whatever torch name it shares. Used for SDPA, whose
        mask convention is its own (a file's `softmax` is still a softmax)."""
        return isinstance(call.func, ast.Name) and call.func.id in self._own_functions and (
            self.lookup(call.func.id).api is None)

    def _defined_here(self, call: ast.Call) -> bool:
        """Whether the call reaches a function, method or class of this file (or an instance of
        one): code that may keep its own convention for a parameter's name (OFA's decoder in
        mmpretrain takes `attention_mask` as True = padding)."""
        func = call.func
        if isinstance(func, ast.Name):
            return func.id in self._local_defs
        if isinstance(func, ast.Attribute):
            return func.attr in self._local_defs or self.value(func).module in self._local_defs
        return False

    def _is_mha(self, call: ast.Call) -> bool:
        if call_name(call, self.lookup) in _TORCH_KEY_PADDING_FUNCS:
            return True
        if not isinstance(call.func, (ast.Attribute, ast.Name, ast.Call)):
            return False
        module = self.value(call.func)
        return module.mha or (module.or_mha and not self._forward_takes(module.module, call))

    def _key_padding_value(self, node: ast.expr, where: str) -> None:
        inverted_for = self._inverted_elsewhere(node)
        if inverted_for is not None:
            self.report("MC502", node, f"{self._text(node)} is inverted for {inverted_for} in "
                        "this function (so it is 1/True at real tokens), but passed as it is as "
                        f"{where} (True = padding): invert it here too")
            return
        if self._is_untouched(node, _is_hf_mask_name):
            self.report("MC502", node, f"HF-style attention_mask (1 = real token) passed "
                        f"as {where} (True = padding): invert it (`attention_mask == 0`)")
            return
        bound = self.scope.derived.get(node.id) if isinstance(node, ast.Name) else None
        if isinstance(node, ast.Name) and isinstance(bound, ast.Name) and (
                bound.id != node.id) and self._is_untouched(bound, _is_hf_mask_name):
            # `topeng = attention_mask` (held-out 55): the same mask under another name
            self.report("MC502", node, f"{node.id} is the HF-style attention_mask "
                        f"({self._text(bound)}, 1 = real token) passed as {where} (True = "
                        f"padding): invert it (`{node.id} == 0`)")
            return
        facts = self.value(node)
        named = node.func.value if isinstance(node, ast.Call) and isinstance(
            node.func, ast.Attribute) and ((node.func.attr == "bool" and not node.args and not (
                node.keywords)) or _cast_to_bool(node)) else node
        if facts.keep_mask and not (facts.hf_keep or facts.pad_keep) and isinstance(
                named, ast.Name) and declares_keep(named.id):
            # the name alone says keep (`key_padding_mask=available`), cast to bool or not
            # (`key_padding_mask=alive_mask.bool()`, held-out 75's TarMAC): MC502's names
            self.report("MC502", node, f"{named.id} is named as a keep-mask (True = kept) but "
                        f"{where} means True = padding: invert it (`~{self._text(node)}`)")
            return
        if _keeps(facts) and isinstance(node, ast.Name) and _is_hf_mask_name(node.id) and (
                facts.pad_keep or facts.hf_keep):
            # `ctxt_out, attention_mask = self.encoder(ids)` of `ids != null_idx` (ParlAI's
            # poly-encoder): Hugging Face's name, and a keep-mask by its value too
            self.report("MC502", node, f"{node.id} (Hugging Face's name for a keep-mask, and "
                        f"one here: 1 = real token) passed as {where} (True = padding): invert "
                        f"it (`~{node.id}`)")
            return
        if _keeps(facts):
            self.report("MC511", node, f"{self._text(node)} is a keep-mask (True/1 = real token) "
                        f"but {where} means True = padding: invert it (`== 0`)")
            return
        self._note_role(node, "float-mha", raw=True)
        self._note_role(node, "drop-mha")  # True = padding: a keep-mask passed here is inverted
        if self._float_mask_of_attention(node):
            self._told_cast(node)
            self.report("MC508", node, f"{self._text(node)} is a float 0/1 mask, but a float "
                        f"{where} is added to the scores: it adds 1 at the padding and masks "
                        "nothing; pass it as bool (True = padding)")

    def _inverted_elsewhere(self, node: ast.AST) -> str | None:
        """The key-padding keyword that this function passes `node` (a name whose value it does
        not know) to inverted, directly (`src_key_padding_mask=src_mask == 0`) or through a
        name it then passes so (`key_padding_mask = ~attention_mask`, DETR's encoder call): the
        author's own reading of its convention, True/1 = real token. A name rebound between
        that inversion and this use is another mask."""
        scope = self.scope
        if not (isinstance(node, ast.Name) and scope.kind == "function"
                and scope.node is not None):
            return None
        if node.id not in scope.assigned and self.lookup(node.id) not in PARAMETER_VALUES:
            return None
        known = self.lookup(node.id)
        if known.hf_keep_inverted or known.tri:
            return None
        stores: list[int] = []
        passed_as: dict[str, str] = {}  # name -> the key-padding keyword it is passed as
        sites: list[tuple[str, int]] = []
        assigned: list[tuple[str, ast.AST, int]] = []  # (target, value, line) of `y = ...`
        for sub in ast.walk(scope.node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.id == node.id:
                stores.append(sub.lineno)
            elif isinstance(sub, ast.keyword) and sub.arg in KEY_PADDING_KWARGS:
                if isinstance(sub.value, ast.Name):
                    passed_as.setdefault(sub.value.id, sub.arg)
                inner = _inverted_operand(sub.value)
                if isinstance(inner, ast.Name) and inner.id == node.id:
                    sites.append((sub.arg, getattr(sub.value, "lineno", 0)))
            elif isinstance(sub, (ast.Assign, ast.AnnAssign)) and sub.value is not None:
                target = sub.targets[0] if isinstance(sub, ast.Assign) and len(
                    sub.targets) == 1 else getattr(sub, "target", None)
                if isinstance(target, ast.Name) and target.id != node.id:
                    assigned.append((target.id, sub.value, sub.lineno))
        for name, value, line in assigned:
            inner = _inverted_operand(value)
            if name in passed_as and isinstance(inner, ast.Name) and inner.id == node.id:
                sites.append((passed_as[name], line))
        use = getattr(node, "lineno", 0)
        for keyword, line in sites:
            # (a store on the inversion's or the use's own line binds after the read there)
            low, high = min(line, use), max(line, use)
            if not any(low < store < high for store in stores):
                return keyword
        return None

    def _untouched_hf_name(self, node: ast.AST) -> bool:
        """A name (a parameter, through indexing and reshapes) that is still the caller's
        `attention_mask`: Hugging Face's 1 = real token by its name, as MC502 reads it. Not an
        entry of a dict (`features["attention_mask"]`), whose dict may have been handed on."""
        return isinstance(_convention_base(node), ast.Name) and self._is_untouched(
            node, _is_hf_mask_name)

    def _is_untouched(self, node: ast.AST, wanted: object) -> bool:
        node = _convention_base(node)
        name = last_name(node)
        if name is None or not callable(wanted) or not wanted(name):
            return False
        if not isinstance(node, ast.Name):
            return True
        known = self.lookup(node.id)
        if known.hf_keep and not known.hf_keep_inverted:
            return True  # `attention_mask = tokenizer(...)["attention_mask"]`: still a keep-mask
        if node.id in self.scope.assigned:
            return False
        # a parameter, or one every caller gives a keep-mask (read through their helpers), or
        # a bool whose convention no caller shows (Perceiver's `attention_mask` defaulting to
        # `torch.ones(..., dtype=torch.bool)`): its name's convention stands
        return known in PARAMETER_VALUES or ((known.pad_keep or known.keep_mask) and not (
            known.hf_keep_inverted)) or (known == _BOOL_ONLY and node.id in self.scope.params)

    def _mha_call(self, call: ast.Call, module: str | None = None) -> None:
        """nn.MultiheadAttention(q, k, v, key_padding_mask, need_weights, attn_mask), or the
        positional layout of the nn.Transformer* module the call's receiver was built as."""
        if (module or "MultiheadAttention") == "MultiheadAttention" and any(
                kw.arg is not None and kw.arg not in _MHA_FORWARD_KEYWORDS for kw in call.keywords):
            # a keyword MultiheadAttention.forward does not take (`self.self_attn(h, mask=m)`):
            # on this path the attribute holds another module (h2gb's GPS layer builds a
            # Performer or BigBird there in other branches), which would raise otherwise
            return
        self._note_forwarded_kwargs(call, "kwargs-mha")
        key_padding, attn_masks = _MODULE_MASK_POSITIONS.get(
            module or "MultiheadAttention", _MODULE_MASK_POSITIONS["MultiheadAttention"])
        for position, where in key_padding.items():
            if len(call.args) > position:
                self._key_padding_value(call.args[position], where)
        masks = [kw.value for kw in call.keywords if kw.arg in _MHA_MASK_KWARGS]
        masks += [call.args[p] for p in attn_masks if len(call.args) > p]
        for mask in masks:
            self._mha_mask(mask)

    def _anded_triangle_site(self, tri: Value, tri_node: ast.AST, node: ast.AST
                             ) -> tuple[ast.AST, str]:
        """Where an upper triangle AND-ed with a keep-mask is reported: where this function
        built it, when `&` reads it by the name it was bound to on an earlier line (`causal =
        ones(t, t).triu(1)`, then `causal & keep[:, None, None, :]`) and reads it nowhere
        else: the fix (tril) goes there. Else at the `&` (a triangle also read as it should be,
        `masked_fill(causal, -inf)`, is right where it is built). The second part names the
        `&`'s line when it is not the site."""
        made, scope = tri.tri_at, self.scope.node
        line = getattr(node, "lineno", 0)
        if made is None or scope is None or self.scope.kind != "function" or not isinstance(
                tri_node, ast.Name) or not (
                getattr(scope, "lineno", 0) <= made[0] < line) or (
                tri_node.id not in self._names_bound_at(made)):
            return node, ""
        reads = sum(isinstance(n, ast.Name) and n.id == tri_node.id and isinstance(
            n.ctx, ast.Load) for n in subnodes(scope))
        if reads != 1:
            return node, ""
        return _placed(made), f" at line {line}"

    def _triangle_site(self, mask: ast.AST) -> tuple[ast.AST, str]:
        """Where a triangle that points the wrong way for its use is reported, and how the
        message names it: where its direction was set when that is outside this function (a
        builder or a closure of the file that makes it; the fix goes there), else here."""
        made = self.value(mask).tri_at
        node = self.scope.node
        shown = self._text(mask)
        line = getattr(mask, "lineno", 0)
        if made is None or node is None or self.scope.kind != "function":
            return mask, shown
        start = getattr(node, "lineno", 0)
        if start <= made[0] <= (getattr(node, "end_lineno", None) or start) and (
                made[0] <= line <= made[2] or (root_name(
                    mask.left if isinstance(mask, ast.Compare) else mask) in self._names_bound_at(
                    made) and not self._built_and_read_as_keep(made, mask))):
            # in this function and read under the name it was bound to: the use shows it
            return mask, shown
        # made elsewhere (a builder or a closure of the file), or combined into another mask
        # since (SASRec's `blocked = attention_mask.unsqueeze(0) | timeline_mask...`)
        return _placed(made), f"this triangle ({shown} at line {line})"

    def _built_and_read_as_keep(self, made: tuple[int, int, int], mask: ast.AST) -> bool:
        """`mask = (torch.triu(torch.ones(n, n)) == 1)` then `masked_fill(mask == 0, -inf)`:
        built as a keep-mask (`== 1` of the triangle) and read as one (filled where it is 0),
        so the use is right and the triangle is what points the wrong way (the tutorial's
        `generate_square_subsequent_mask` without its `.transpose(0, 1)`): the fix goes where
        it was built."""
        if not (isinstance(mask, ast.Compare) and len(mask.ops) == 1 and isinstance(
                mask.ops[0], ast.Eq) and is_zero(mask.comparators[0])):
            return False
        assignments = self._assignments_at(made[0])
        built = assignments[0].value if assignments else None
        return isinstance(built, ast.Compare) and len(built.ops) == 1 and isinstance(
            built.ops[0], ast.Eq) and number(built.comparators[0]) == 1

    def _assignments_at(self, line: int) -> list[ast.Assign | ast.AnnAssign]:
        """The assignments of this function that start on `line` (where a fact was made)."""
        return [node for node in (ast.walk(self.scope.node) if self.scope.node is not None
                                  else ()) if isinstance(node, (ast.Assign, ast.AnnAssign))
                and node.lineno == line]

    def _names_bound_at(self, made: tuple[int, int, int]) -> set[str]:
        """The names an assignment starting on the line of `made` binds."""
        return {t.id for node in self._assignments_at(made[0]) for t in (
            node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Name)}

    def _mha_mask(self, mask: ast.expr) -> None:
        self._note_role(mask, "float-mha", raw=True)
        self._note_role(mask, "tri-mha", raw=True)  # a bool triangle passed here: True = masked
        self._note_layout_role(mask, "shape-mha")
        self._float_mask_argument(mask, "MultiheadAttention")
        facts = self.value(mask)
        if facts.layout == "BS":
            self._padding_as_attn_mask(mask, "shape-mha")
        if facts.dtype == "bool" and facts.tri in {"lower", "slower"}:
            where = _BELOW.get(facts.tri or "", "on and below")
            at, shown = self._triangle_site(mask)
            self.report("MC521", at, f"{shown} is True {where} the diagonal, "
                        "but MultiheadAttention's bool attn_mask means True = masked: it hides "
                        "the past and shows the future; use triu(..., diagonal=1)")
        elif facts.dtype == "bool" and facts.tri == "upper" and facts.tri_at is not None:
            # a True triu with diagonal 0 made elsewhere (SASRec's `causal_attention_mask`
            # helper): MultiheadAttention hides the diagonal too, reported where it is made
            self._diagonal_zero_triu_at(facts.tri_at)

    def _diagonal_zero_triu_at(self, made_at: tuple[int, int, int]) -> bool:
        """MC503 at the triu made at `made_at` when its diagonal is 0 (not an offset)."""
        made = self._call_at(made_at, "triu")
        if made is None:
            return False
        diagonal = argument(made, 1, "diagonal") if is_module_call(made) else argument(
            made, 0, "diagonal")
        if diagonal is not None and number(diagonal) != 0:
            return False  # (`triu(offset + qk_len_diff)` may be anything)
        self._triu_hit(made, diagonal)
        return True

    # --- MC503 ---

    def _triu(self, call: ast.Call, parent: ast.AST | None) -> None:
        if is_module_call(call):
            matrix, diagonal = argument(call, 0, "input"), argument(call, 1, "diagonal")
        else:
            matrix, diagonal = receiver(call), argument(call, 0, "diagonal")
        if matrix is None or (diagonal is not None and not is_zero(diagonal)):
            return
        if diagonal is None and (any(kw.arg is None for kw in call.keywords) or any(
                isinstance(a, ast.Starred) for a in call.args)):
            return  # `triu(m, **kw)` / `triu(*args)`: the diagonal may be passed there
        if _is_transposed(call, parent):
            return
        if self._is_additive_matrix(matrix):
            self._triu_hit(call, diagonal)
        elif _is_true_matrix(matrix) or self._is_true_name(matrix) or self._is_true_cast(matrix):
            # A True-filled triu is also how chunked linear attention zeroes its upper triangle
            # on purpose (masked_fill(mask, 0)); only a use as an attention mask is a bug.
            if isinstance(parent, ast.keyword) and parent.arg in MASK_KWARGS:
                self._triu_hit(call, diagonal)
            elif (isinstance(parent, ast.Assign) and len(parent.targets) == 1
                  and isinstance(parent.targets[0], ast.Name)):
                self.scope.bool_triu[parent.targets[0].id] = call
            elif isinstance(parent, ast.AnnAssign) and isinstance(parent.target, ast.Name):
                self.scope.bool_triu[parent.target.id] = call  # `mask: Tensor = triu(...)`
            else:
                attr = _stored_attribute(call, parent)
                cls = self._class_scope() if attr is not None else None
                if cls is not None:
                    # `self.register_buffer("future", ones(bool).triu())`: the methods below
                    # read it as `self.future`
                    cls.bool_triu["self." + (attr or "")] = call
                    self._class_triu = True
                else:
                    # inside a larger expression (`F.pad(triu(...), (n, 0), value=False)`):
                    # the name that expression is bound to holds the triangle (`_assign_name`)
                    self._nested_triu[id(call)] = call

    def _tril(self, call: ast.Call) -> None:
        """tril of a -inf matrix puts -inf below the diagonal: it hides the past."""
        if is_module_call(call):
            matrix, diagonal = argument(call, 0, "input"), argument(call, 1, "diagonal")
        else:
            matrix, diagonal = receiver(call), argument(call, 0, "diagonal")
        d = 0.0 if diagonal is None else number(diagonal, self.lookup)
        if matrix is not None and d in {0.0, -1.0} and self._is_additive_matrix(matrix) and (
                not (d == -1.0 and self._builds_both_directions())):
            self.report("MC521", call, "tril of a -inf matrix masks the past (below the "
                        "diagonal), not the future: a look-ahead mask is "
                        "triu(..., diagonal=1)")

    def _builds_both_directions(self) -> bool:
        """The function also takes a triu: it builds a look-ahead mask and its mirror on
        purpose (SRN's bidirectional GSRM: `attn_mask_forward = triu(full(-inf), 1)`,
        `attn_mask_backward = tril(full(-inf), -1)`)."""
        node = self.scope.node
        if self.scope.kind != "function" or node is None:
            return False
        for sub in subnodes(node):
            if isinstance(sub, ast.Call) and call_name(sub) == "triu":
                matrix, diagonal = (argument(sub, 0, "input"), argument(sub, 1, "diagonal")) if (
                    is_module_call(sub)) else (receiver(sub), argument(sub, 0, "diagonal"))
                if diagonal is not None and number(diagonal, self.lookup) == 1.0 and (
                        matrix is not None and self._is_additive_matrix(matrix)):
                    return True
        return False

    def _is_true_name(self, node: ast.AST) -> bool:
        """A name bound to an all-True matrix (`future = torch.ones(n, n, dtype=torch.bool)`)."""
        if not isinstance(node, ast.Name):
            return False
        facts = self.lookup(node.id)
        return facts.dtype == "bool" and facts.all_ones

    def _is_true_cast(self, node: ast.AST) -> bool:
        """A cast of an all-ones matrix to bool (`ones.bool()`, `torch.ones(n, n).bool()`)."""
        if not isinstance(node, ast.Call) or call_name(node) not in {"bool", "to", "type"}:
            return False
        facts = self.value(node)
        return facts.dtype == "bool" and facts.all_ones

    def _is_additive_matrix(self, node: ast.AST) -> bool:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            return (is_ones(node.left) and is_masking_value(node.right, self.lookup)) or (
                is_ones(node.right) and is_masking_value(node.left, self.lookup))
        if isinstance(node, ast.Call) and call_name(node) == "fill_" and node.args:
            return is_masking_value(node.args[0], self.lookup)
        if isinstance(node, ast.Call) and call_name(node) in {"full", "full_like", "new_full"}:
            fill = argument(node, 1, "fill_value")
            return fill is not None and is_masking_value(fill, self.lookup)
        facts = self.value(node)
        return facts.additive and facts.dtype != "bool"

    def _triu_hit(self, call: ast.Call, diagonal: ast.expr | None) -> None:
        edit = self._edit(diagonal, "1") if diagonal is not None else _append_kwarg(
            call, "diagonal=1", self.source)
        # on the line of the diagonal argument when the call spreads over lines and writes it
        # on its own (what the fix changes: GPT-SoVITS's `triu(\n ones(...),\n diagonal=0,\n)`)
        shown = diagonal if diagonal is not None and getattr(
            diagonal, "lineno", call.lineno) != call.lineno else call
        self.report("MC503", shown,
                    "triu with diagonal=0 of a -inf/True matrix masks the "
                    "diagonal too (every query loses its own key, and the first keeps no key "
                    "of the triangle: an empty row where the triangle is the whole mask): "
                    "use diagonal=1", edit)

    def _bool_triu_use(self, call: ast.Call) -> None:
        masks = self.scope.bool_triu
        name = call_name(call, self.lookup)
        if name == "scaled_dot_product_attention":
            return  # SDPA keeps where True: a triu there shows the future (MC521)
        condition = fill = None
        if name in {"masked_fill", "masked_fill_"}:
            shift = 1 if module_dotted(call.func) == "torch.masked_fill" else 0
            condition, fill = argument(call, shift, "mask"), argument(call, 1 + shift, "value")
        elif name == "where" and module_dotted(call.func) == "torch.where" and len(
                call.args) == 3:
            condition, fill = call.args[0], call.args[1]  # `where(mask, -inf, scores)`
        held = None
        if isinstance(condition, ast.Name) and condition.id in masks:
            held = condition.id
        elif self._class_triu and condition is not None and self_attr(condition) is not None:
            cls = self._class_scope()
            key = "self." + (self_attr(condition) or "")
            if cls is not None and key in cls.bool_triu:
                masks, held = cls.bool_triu, key  # `masked_fill(self.future[:T, :T], ...)`
        if held is not None and fill is not None and (
                self._is_fill_value(fill) or self._filled_tensor(fill) or (
                    isinstance(fill, ast.Call) and call_name(fill) == "tensor" and fill.args
                    and self._is_fill_value(fill.args[0]))):
            # the triangle marks what is hidden: with diagonal 0 each query loses itself
            triu = masks.pop(held)
            diagonal = argument(triu, 1, "diagonal") if is_module_call(triu) else argument(
                triu, 0, "diagonal")
            self._triu_hit(triu, diagonal)
            return
        if held is None and condition is not None and fill is not None and (
                self._is_fill_value(fill) or self._filled_tensor(fill)):
            facts = self.value(condition)
            # a triangle made elsewhere and read back through an attribute or a property
            # (Informer's `TriangularCausalMask(B, L).mask`): reported where it is made
            if facts.dtype == "bool" and facts.tri == "upper" and facts.hides_above and (
                    facts.tri_at is not None) and self._diagonal_zero_triu_at(facts.tri_at):
                return
        for kw in call.keywords:
            if kw.arg in MASK_KWARGS and isinstance(kw.value, ast.Name) and kw.value.id in masks:
                triu = masks.pop(kw.value.id)
                diagonal = argument(triu, 1, "diagonal") if is_module_call(triu) else argument(
                    triu, 0, "diagonal")
                self._triu_hit(triu, diagonal)

    def _call_at(self, made: tuple[int, int, int], name: str) -> ast.Call | None:
        """The call of `name` in this file that starts at `made` (a fact's site, see
        `values.site`; `torch.triu(m).to(device)` starts there too)."""
        for node in ast.walk(self._tree) if self._tree is not None else ():
            if isinstance(node, ast.Call) and (node.lineno, node.col_offset) == made[:2] and (
                    call_name(node) == name):
                return node
        return None

    # --- MC504 ---

    def _zero_mask_fill_of(self, name: str, value: ast.expr) -> bool:
        """`m = m.masked_fill(m == 0, -inf)` on a clean zero mask."""
        if not (isinstance(value, ast.Call) and call_name(value) == "masked_fill"):
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
        if not (self._zero_masks_of(name).get(name) and is_masking_value(value, self.lookup)):
            return False
        self.report("MC504", node, f"{name} was made by zeros and nothing non-zero was written "
                    f"to it: filling where {name} == 0 masks every position")
        return True

    def _zero_masks_of(self, name: str) -> dict[str, bool]:
        """The zero-mask table that holds `name`: this function's, or an enclosing one's."""
        for scope in reversed(self.scopes):
            if name in scope.zero_masks:
                return scope.zero_masks
            if name in scope.assigned or scope.kind != "function":
                break
        return self.scope.zero_masks

    def _note_element(self, target: ast.Subscript, value: ast.expr) -> None:
        """`self._mask_cache[n] = ones(n, n, dtype=torch.bool).triu(1)`: a mask stored in a
        dict (or list) under a key chosen at run time; `self._mask_cache[n]` read back where
        the container itself says nothing gives it (values' `_describe_subscript`). Tensors
        only: a number written by index is an entry of a tensor, not a stored mask."""
        if isinstance(target.slice, (ast.Constant, ast.Slice, ast.Tuple)):
            return
        facts = self.value(value)
        if not facts or facts.number is not None:
            return
        attr = self_attr(target.value)
        if attr is not None and self._class_scope() is not None:
            key = attr + "[]"
            held = self.lookup("self." + key)
            joined = facts if not held else _join(held, facts)
            self._class_scope_add(key, value=joined)
            self.scope.values["self." + key] = joined
        elif isinstance(target.value, ast.Name):
            key = target.value.id + "[]"
            stored = self.scope.values.get(key)
            self.scope.values[key] = facts if stored is None else _join(stored, facts)

    def _subscript_write(self, target: ast.Subscript, value: ast.expr) -> None:
        attr = self_attr(target)
        cls = self._class_scope()
        if attr is not None and cls is not None and attr in cls.buffer_attrs and (
                inside := self._runs_every_call()) is not None and is_masking_value(
                    value, self.lookup):
            self.report("MC524", target, f"writing a mask value into the buffer self.{attr} "
                        f"inside {inside}: the stored mask changes on every call; build a new "
                        "tensor instead")
        if self._is_large_negative(value) and mentions_mask(target) and ((
                _is_score_name(target.value) and not _is_output_logits(target.value))
                or self.value(target.value).dtype in HALF_DTYPES):
            # Only scores: an indexed write of -1e9 into float16 gives -inf without raising
            # (torch 2.13), which hurts a softmax row, not sentence-transformers' max pooling
            # (`token_embeddings[mask_expanded == 0] = -1e9`, then torch.max over tokens).
            self._large_negative(value, "an indexed assignment", target.value)
        self._note_element(target, value)
        if isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
            # `res["attention_mask"] = torch.tril(...)`: the file built this field (ms-swift's
            # template), so it is no tokenizer's keep-mask by its key
            written = dotted(target.value)
            if written is not None:
                self.bind(f'{written}["{target.slice.value}"]', self.value(value) or TENSOR)
        held = _held_name(target)
        if held is not None and not self._ones_written(held, value) and not (
                self._keep_prefix_written(held, target, value)):
            self._mutate(held)
            if not held.startswith("self.") and is_masking_value(value, self.lookup):
                # `bias[bias == 0] = -inf` on a block mask written 1 by hand: no longer 0/1
                # (its kept positions add one constant, which softmax ignores)
                scope = self._binding_scope(held)
                known = scope.values.get(held)
                if known is not None and (known.float01 or known.zero_one):
                    scope.values[held] = replace(known, float01=False, zero_one=False)
        if is_masking_value(value, self.lookup) and self._indexed_by_diag_indices(target) and (
                not _similarity_name(target)):
            # pbloem/former#10: `dot[:, idx[0], idx[1]] = float('-inf')` with offset=0; an
            # offset chosen by a flag (`0 if mask_diagonal else 1`, former#6) is reported
            # where it is chosen
            self.report("MC503", self._chosen_offset(target) or target,
                        "triu_indices with offset=0 holds the diagonal: "
                        "writing -inf there masks every query's own key (the first row is "
                        "empty); use offset=1")
        name = root_name(target)
        if name is None:
            return
        masks = self._zero_masks_of(name)
        if name not in masks:
            return
        if target.value is not None and isinstance(target.value, ast.Name) and (
                self._check_zero_fill(name, target.slice, value, target)):
            return
        if not is_zero(value):
            masks[name] = False  # `mask[i][j] = 1`, `mask[i, a:b] = 1`: something was kept

    def _chosen_offset(self, target: ast.Subscript) -> ast.AST | None:
        """The `triu_indices(...)` call behind `x[:, idx[0], idx[1]]` when its offset is a
        conditional expression."""
        parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        for part in parts:
            if isinstance(part, ast.Subscript) and isinstance(part.value, ast.Name):
                bound = self.scope.derived.get(part.value.id)
                if isinstance(bound, ast.Call) and isinstance(
                        argument(bound, 2, "offset"), ast.IfExp):
                    return bound
        return None

    def _indexed_by_diag_indices(self, target: ast.Subscript) -> bool:
        """`x[:, idx[0], idx[1]]` where `idx = torch.triu_indices(n, n)` (offset 0)."""
        parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        rows_cols = [p for p in parts if isinstance(p, ast.Subscript) and isinstance(
            p.value, ast.Name) and self.lookup(p.value.id).diag_indices]
        unpacked = [p for p in parts if isinstance(p, ast.Name) and self.lookup(p.id).diag_indices]
        return len(rows_cols) >= 2 or len(unpacked) >= 2  # `idx[0], idx[1]` or `i, j`

    def _zero_mask_call(self, call: ast.Call, name: str) -> None:
        base = receiver(call)
        base_name = root_name(base) if base is not None else None
        if base_name is not None and name.endswith("_"):
            masks = self._zero_masks_of(base_name)
            if base_name in masks:
                if name == "masked_fill_" and isinstance(base, ast.Name) and (
                        self._check_zero_fill(base_name, argument(call, 0, "mask"),
                                              argument(call, 1, "value"), call)):
                    return
                # a triangle of zeros is zeros (`mask.triu_(1)` on a zeros matrix)
                if not (name in {"zero_", "triu_", "tril_"} or (name == "fill_" and call.args
                                                                and is_zero(call.args[0]))):
                    masks[base_name] = False  # `mask[i, a:b].fill_(1)` writes into mask
        for arg in [*call.args, *(kw.value for kw in call.keywords)]:
            if isinstance(arg, ast.Name):
                masks = self._zero_masks_of(arg.id)
                if arg.id in masks:
                    masks[arg.id] = False  # another function may write into it

    def _taint(self, target: ast.AST) -> None:
        name = root_name(target)
        if name is not None:
            self._mutate(name)
            masks = self._zero_masks_of(name)
            if name in masks:
                masks[name] = False

    # --- MC505 ---

    def _detached(self, name: str, after: ast.AST) -> bool:
        """The first read of `name` after `after` (the in-place fill) is `name.detach()`: what
        autograd saved is then off the graph from there on, and backward never reads it
        (fairseq's teacher probabilities `p = lprobs_t.exp().masked_fill_(pad, 0)`, then
        `p = p.detach()`). Another read first (`attn = self.dropout(attn)`) keeps it on."""
        node = self.scope.node
        if node is None:
            return False
        here = (getattr(after, "end_lineno", 0) or 0, getattr(after, "end_col_offset", 0) or 0)
        first: tuple[tuple[int, int], ast.Name] | None = None
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, ast.Load):
                at = (sub.lineno, sub.col_offset)
                if at > here and (first is None or at < first[0]):
                    first = (at, sub)
        if first is None:
            return False
        parent = self._parents().get(id(first[1])) if self._tree is not None else None
        return isinstance(parent, ast.Attribute) and parent.attr in {"detach", "detach_"}

    def _fill_detached(self, call: ast.Call) -> bool:
        """`x.exp().masked_fill_(m, 0).detach()`, or `p = x.exp().masked_fill_(m, 0)` with `p`
        detached afterwards (see `_detached`)."""
        if self._tree is None:
            return False
        parent = self._parents().get(id(call))
        if isinstance(parent, ast.Attribute) and parent.attr in {"detach", "detach_", "data"}:
            return True
        return isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(
            parent.targets[0], ast.Name) and self._detached(parent.targets[0].id, call)

    def _sampled(self, name: str) -> bool:
        """`torch.multinomial(name, ...)` in this function: probabilities drawn from, which no
        backward runs through (sglang's top-k/top-p/min-p sampler zeroing them in place)."""
        node = self.scope.node
        return node is not None and any(
            isinstance(n, ast.Call) and call_name(n) == "multinomial" and n.args and isinstance(
                n.args[0], ast.Name) and n.args[0].id == name for n in ast.walk(node))

    def _inplace_fill(self, call: ast.Call) -> None:
        base = receiver(call)
        fill = argument(call, 1, "value")
        held = self._held_attr(base) if base is not None and not isinstance(
            base, ast.Subscript) else None
        key = "self." + held if held is not None else base.id if isinstance(
            base, ast.Name) else None
        if key is not None and fill is not None and is_masking_value(fill, self.lookup):
            # `self.mask.masked_fill_(future, -1e9)` on a buffer of ones (the seed's model):
            # from here on it holds large negatives, so multiplying by it is MC523
            facts = self.lookup(key)
            if facts.all_ones or facts.zeros or facts.additive:
                self.scope.values[key] = Value(dtype=facts.dtype, additive=True,
                                               finfo_min=is_finfo_min(fill, self.lookup))
        if self.scope.no_grad:
            return
        base = receiver(call)
        bound = self.scope.derived.get(base.id) if isinstance(base, ast.Name) else None
        cast = ""
        if isinstance(bound, ast.Call):
            bound, cast = _shared_storage_source(bound)
        if isinstance(base, ast.Name) and self.lookup(base.id).grad:
            self.report("MC505", call, f"masked_fill_ on {base.id}, which requires grad: "
                        "in-place fill breaks autograd; use masked_fill")
        elif isinstance(base, ast.Name) and isinstance(bound, ast.Call) and call_name(
                bound, self.lookup) in _SAVES_OUTPUT and self._on_grad_path() and not (
                self._detached(base.id, call)) and not self._sampled(base.id):
            # softmax's backward reads its own output: overwriting it in place makes
            # backward raise (checked on torch 2.13)
            self.report("MC505", call, f"masked_fill_ on {base.id}, the output of "
                        f"{call_name(bound, self.lookup)} that autograd saves for backward{cast}: "
                        "backward raises (modified by an inplace operation); use masked_fill")
        elif isinstance(base, ast.Call) and call_name(
                _shared_storage_source(base)[0], self.lookup) in _SAVES_OUTPUT and (
                self._on_grad_path()) and not self._fill_detached(call):
            base = _shared_storage_source(base)[0]
            # `torch.softmax(scores, -1).masked_fill_(mask, 0.0)`: the same, unnamed (ESPnet's
            # forward_attention once did it so)
            self.report("MC505", call, f"masked_fill_ on the output of "
                        f"{call_name(base, self.lookup)}, which autograd saves for backward: "
                        "backward raises (modified by an inplace operation); use masked_fill")
        elif isinstance(base, ast.Attribute) and base.attr == "weight" and isinstance(
                base.value, ast.Attribute):
            # `model.tok_emb.weight.masked_fill_(rows, 0.0)`: a layer's weight is a Parameter
            # (requires grad), and a leaf that requires grad refuses in-place writes (checked
            # on torch 2.13); `.weight.data` or torch.no_grad() is how it is done
            self.report("MC505", call, f"masked_fill_ on {self._text(base)}, a layer's weight "
                        "(a Parameter that requires grad): in-place fill of a leaf raises; do it "
                        "under torch.no_grad() (or on .data)")
        elif (isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name)
              and base.value.id == "self"):
            cls = self._class_scope()
            if cls is not None:
                cls.self_fills.append((base.attr, call))

    # --- MC506 / MC510 / MC511 / MC521 ---

    def _spread_kwargs(self, call: ast.Call, *, returned: bool = False) -> ast.Call:
        """The call with each `**name` whose name this function bound to a dict of constant
        keys (`kw = dict(attn_mask=m, is_causal=True)`, `{"is_causal": True}`) read as the
        keywords it spreads; other `**` stay as they are. With `returned` (the facts a call
        passes, for seeding its callee), also a name bound to a call of a function of this file
        that returns such a dict: the callee's own reading reports what it does with them."""
        keywords: list[ast.keyword] = []
        spread = False
        for kw in call.keywords:
            batched = False  # a DataLoader's batch: read by the roles at the call too
            bound = self.scope.derived.get(kw.value.id) if kw.arg is None and isinstance(
                kw.value, ast.Name) and kw.value.id not in self.scope.mutated else None
            added: list[str] = []
            if returned and kw.arg is None and isinstance(kw.value, ast.Name) and isinstance(
                    made := self.scope.derived.get(kw.value.id), ast.Call) and ((isinstance(
                    made.func, ast.Name) and made.func.id != "dict") or isinstance(
                    made.func, ast.Attribute)):
                # `batch = collate(docs); batch["labels"] = y; model(**batch)`: fields added to
                # the returned dict, the others as it made them; not a dict written otherwise
                # (`batch.update(...)`, `del batch[k]`)
                stored = self._keys_stored(kw.value.id)
                bound, added = (None, []) if stored is None else (made, stored)
            elif returned and kw.arg is None and isinstance(kw.value, ast.Call):
                bound = kw.value  # `model(**collate_fn(features))`
            position: int | None = None
            if returned and kw.arg is None and isinstance(kw.value, ast.Subscript) and (
                    isinstance(kw.value.value, ast.Call)) and isinstance(
                    kw.value.slice, ast.Constant) and type(kw.value.slice.value) is int:
                # `model(**collate(batch)[0])` of a collate returning `{...}, targets`
                bound, position = kw.value.value, kw.value.slice.value
            elif returned and kw.arg is None and isinstance(kw.value, ast.Name) and (
                    bound is None) and (unpacked := self._unpacked_from(kw.value.id)) and (
                    stored := self._keys_stored(kw.value.id)) is not None:
                # `inputs, targets = collate(batch); model(**inputs)`
                (bound, position), added = unpacked, stored
            elif not returned and kw.arg is None and isinstance(kw.value, ast.Name) and (
                    isinstance(made := self.scope.derived.get(kw.value.id), ast.Call)) and (
                    isinstance(made.func, ast.Name)) and (
                    made.func.id in self._local_defs
                    or self.lookup(made.func.id).module in self._local_classes) and (
                    self._keys_stored(kw.value.id) == []):
                # `batch = collate(docs); model(**batch)`, as a DataLoader's batch below (or
                # `inputs = preprocessor(texts)` of a callable class of this file)
                bound, batched = made, True
            elif kw.arg is None and isinstance(kw.value, ast.Name) and bound is None and (
                    kw.value.id not in self.scope.assigned) and (
                    maker := self.value(kw.value).dict_of) in self._local_defs and (
                    self._keys_stored(kw.value.id) == []):
                # `def align(model, batch): model(**batch)`, every call giving `collate(...)`'s
                # dict (a seed): that function's keys, as for the batch bound here
                bound = ast.copy_location(ast.Call(ast.Name(maker, ast.Load()), [], []),
                                          kw.value)
                batched = True
            elif kw.arg is None and isinstance(kw.value, ast.Name) and (
                    bound is None or _moved_dict(bound, kw.value.id)) and (
                    collate := self._loader_collate(call, kw.value.id)):
                # `for batch in DataLoader(ds, collate_fn=collate): model(**batch)`
                bound = ast.copy_location(ast.Call(ast.Name(collate, ast.Load()), [], []),
                                          kw.value)
                batched = True
            if isinstance(bound, ast.Call) and isinstance(bound.func, ast.Name) and (
                    bound.func.id == "dict") and not bound.args and all(
                    k.arg is not None for k in bound.keywords):
                keywords.extend(bound.keywords)
                spread = True
            elif isinstance(bound, ast.Dict) and all(
                    isinstance(k, ast.Constant) and isinstance(k.value, str) for k in bound.keys):
                keywords.extend(ast.keyword(arg=k.value, value=v)  # type: ignore[union-attr]
                                for k, v in zip(bound.keys, bound.values, strict=True))
                spread = True
            elif returned and isinstance(bound, ast.Call) and position is None and not (
                    added) and "def __call__" not in self.source and not self._dict_keys_made(
                    bound) and self.value(bound).tokens:
                # `model(**tokenizer(texts, padding=True, return_tensors="pt"))`, or the
                # encoding bound to a name first: the token ids and the tokenizer's int64 mask
                # (not in a file with a callable class of its own, which may be the tokenizer:
                # a bool mask under the same key)
                source = kw.value if not isinstance(kw.value, ast.Name) else ast.Name(
                    kw.value.id, ast.Load())
                keywords.extend(ast.keyword(arg=key, value=_spread_key(source, key, kw.value))
                                for key in _TOKENIZER_KEYS)
                spread = True
            elif (returned or batched) and isinstance(bound, ast.Call) and (
                    keys := self._dict_keys_made(bound, position)):
                # `batch = collate(docs)` of a function of this file returning a dict literal,
                # then `model(**batch)`: each key is `batch["key"]` (read as the dict returned)
                source = ast.Name(kw.value.id, ast.Load()) if isinstance(
                    kw.value, ast.Name) else kw.value
                keywords.extend(ast.keyword(arg=key, value=_spread_key(source, key, kw.value))
                                for key in (*keys, *(k for k in added if k not in keys)))
                spread = True
            else:
                keywords.append(kw)
        if not spread:
            return call
        return ast.copy_location(ast.Call(call.func, call.args, keywords), call)

    def _dict_keys_made(self, call: ast.Call, position: int | None = None) -> tuple[str, ...]:
        """The keys of the dict literal `call` returns (with `position`, at that position of
        the tuple it returns): a function of this file (`collate(b)`), a collator instance's
        `__call__` (`collator(b)`) or a method of an instance of a class of this file
        (`dataset.batch(idx)`); () where it is not known."""
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self._local_defs:
                return _returned_dict_keys(self._tree, func.id, position=position)
            owner = self.lookup(func.id).module
            return _returned_dict_keys(self._tree, "__call__", owner, position) if (
                owner in self._local_classes) else ()
        if isinstance(func, ast.Attribute) and func.attr != "__call__":
            owner = self.value(func.value).module
            if owner in self._local_classes:
                return _returned_dict_keys(self._tree, func.attr, owner, position)
        return ()

    def _loader_collate(self, call: ast.Call, name: str) -> str | None:
        """The function of this file a `DataLoader` batches with (`collate_fn=collate`) where
        `name` is the loop variable of a `for` over that loader (its call, or a name this
        function binds to it) around `call`; None otherwise."""
        if "DataLoader" not in self.source:
            return None  # (`element_dict` is only ever made from a `DataLoader(...)` call)
        parents = self._parents()
        at: ast.AST | None = call
        while at is not None and not (isinstance(at, ast.For) and _loop_batch(at) == name):
            at = parents.get(id(at))
            if isinstance(at, _FUNCTION_NODES):
                return None
        if not isinstance(at, ast.For) or name in self.scope.mutated:
            return None
        loader = at.iter
        if isinstance(loader, ast.Call) and call_name(loader) in {"enumerate", "tqdm"} and (
                loader.args):
            loader = loader.args[0]  # `for step, batch in enumerate(tqdm(loader)):`
            if isinstance(loader, ast.Call) and call_name(loader) == "tqdm" and loader.args:
                loader = loader.args[0]
        collate = self.value(loader).element_dict
        return collate if collate in self._local_defs else None

    def _unpacked_from(self, name: str) -> tuple[ast.Call, int] | None:
        """(call, position) where this function binds `name` once, as one name of a tuple a
        call returns (`inputs, targets = collate(batch)`)."""
        root = self.scope.node if self.scope.kind == "function" else self._tree
        if root is None or name in self.scope.mutated:
            return None
        found: list[tuple[ast.Call, int]] = []
        stores = 0
        for node in subnodes(root):
            if isinstance(node, ast.Name) and node.id == name and not isinstance(
                    node.ctx, ast.Load):
                stores += 1
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Tuple) and isinstance(node.value, ast.Call):
                found.extend((node.value, i) for i, e in enumerate(node.targets[0].elts)
                             if isinstance(e, ast.Name) and e.id == name)
        return found[0] if stores == 1 and len(found) == 1 else None

    def _keys_stored(self, name: str) -> list[str] | None:
        """The keys this function (or the module) writes into the dict `name` when its only
        writes are `name["key"] = ...` with constant keys; None where it is written otherwise
        (another index, `del`, an augmented assignment, a method such as `update`)."""
        root = self.scope.node if self.scope.kind == "function" else self._tree
        if root is None:
            return None
        keys: list[str] = []
        for node in ast.walk(root):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and (
                    node.value.id == name) and not isinstance(node.ctx, ast.Load):
                if not (isinstance(node.ctx, ast.Store) and isinstance(node.slice, ast.Constant)
                        and isinstance(node.slice.value, str)):
                    return None
                keys.append(node.slice.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript) and (
                    isinstance(node.target.value, ast.Name) and node.target.value.id == name):
                return None
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    isinstance(node.func.value, ast.Name) and node.func.value.id == name):
                return None  # `batch.update(...)`, `batch.pop(...)`, `batch.to(device)`
        return keys

    def _sdpa(self, call: ast.Call) -> None:
        flag = argument(call, 5, "is_causal")
        # a wrapper that sets is_causal itself (True here) and forwards its callers' keywords:
        # a caller's attn_mask meets the flag (MC506 at that call)
        self._note_forwarded_kwargs(call, "kwargs-sdpa-causal" if flag is not None and (
            is_true(flag) or self.value(flag).flag is True) else "kwargs-sdpa")
        call = self._spread_kwargs(call)
        held = dotted(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
        bound = self.lookup(held).bound if held is not None else ()
        if bound:  # `sdpa = partial(F.scaled_dot_product_attention, is_causal=True)`
            given = {kw.arg for kw in call.keywords}
            call = ast.copy_location(ast.Call(call.func, call.args, [
                *call.keywords, *(kw for kw in bound if kw.arg not in given)]), call)
        causal = argument(call, 5, "is_causal")
        mask = argument(call, 3, "attn_mask")
        self._note_role(argument(call, 1, "key"), "key", follow=False)
        self._note_role(causal, "causal", follow=False)
        if mask is None or not (self._is_untouched(mask, _is_key_padding_name) or (
                self._key_padding_reshaped(mask) is not None)):
            # (a key_padding_mask handed to SDPA is MC502 at this call: that reading is the
            # slip, not the model's convention for its other uses, held-out 61's pooling fill)
            self._note_role(mask, "keep-sdpa")
        self._note_role(mask, "float-sdpa", raw=True)
        causal_on = causal is not None and (is_true(causal) or self.value(causal).flag is True)
        if causal_on and mask is not None and not is_none(mask) and not self._causal_without_mask(
                call, causal, mask):
            self.report("MC506", call, "scaled_dot_product_attention with both attn_mask and "
                        "is_causal=True: the MATH backend raises, others combine them "
                        "differently; fold the causal part into attn_mask")
        elif causal is not None and mask is not None and not is_none(mask) and (
                instance := self._causal_instance(causal, mask)) is not None:
            # an instance flag, True on some instances (BART's decoder self-attention)
            self.report("MC506", call, f"{self._text(causal)} may be True on the instance built "
                        f"at line {instance.built.lineno}, and line {instance.called.lineno} "
                        "passes it a mask: scaled_dot_product_attention then gets both "
                        "attn_mask and is_causal=True (the MATH backend raises, others combine "
                        "them differently); fold the causal part into attn_mask")
        elif causal is not None and mask is not None and not is_none(mask):
            needs = self._flag_needs_mask(causal, mask)
            if needs is not None:
                # transformers#37807 proposes `is_causal = q_len > 1 and causal_mask is not
                # None`: the flag is True only when the mask is passed too
                self.report("MC506", needs, f"is_causal is True only when {self._text(mask)} is "
                            "passed too: scaled_dot_product_attention then gets both (the MATH "
                            "backend raises, others combine them differently); set it when "
                            "the mask is None")
        key = argument(call, 1, "key")
        # `is_causal=self.causal if attention_mask is None else False`: True on one path
        causal_may = causal_on or (isinstance(causal, ast.IfExp) and any(
            is_true(branch) or self.value(branch).flag is True
            for branch in (causal.body, causal.orelse))) or _more_than_one_query(causal) or (
            self._instance_flag_may_be_true(causal))
        query = argument(call, 0, "query")
        if causal is not None and causal_may and key is not None and self.value(key).cached and (
                not self._cache_gated(call, key)) and not self._no_cached_prefix(
                call, query, key) and not self._flag_off_with_cache(causal, key):
            self.report("MC510", causal, f"{self._text(key)} holds cached keys (L != S): "
                        "is_causal=True aligns the mask to the top-left, so new queries cannot "
                        "see most of the cache; pass an explicit mask (or is_causal=False "
                        "for one query)")
        elif causal is not None and causal_on and query is not None and key is not None and (
                self.value(query).last_position and not self.value(key).last_position):
            # pytorch/pytorch#115111: `sdpa(query[:, -1, :], key, value, is_causal=True)`
            self.report("MC510", causal, f"{self._text(query)} holds only the last position "
                        "(L = 1 < S): is_causal=True aligns the mask to the top-left, so it "
                        "sees only the first key; drop is_causal for a query that may see "
                        "every key")
        if mask is None or is_none(mask):
            return
        self._note_layout_role(mask, "shape-sdpa")
        facts = self.value(mask)
        if facts.layout == "BS":
            self._padding_as_attn_mask(mask, "shape-sdpa")
        if facts.layout == "B1S1":
            self._query_axis_padding(mask, "SDPA's attn_mask")
        elif facts.hf_keep_inverted:
            self.report("MC511", mask, f"{self._text(mask)} is True at padding, but SDPA's bool "
                        "attn_mask means True = may attend: it keeps only the padding; pass "
                        "the keep-mask (`attention_mask.bool()`)")
        elif facts.dtype == "bool" and facts.tri in {"upper", "supper"} and not (
                id(mask) in self._anded_triangles or (isinstance(mask, ast.Name) and id(
                    self.scope.derived.get(mask.id)) in self._anded_triangles)):
            # (a triangle AND-ed with a keep-mask is reported where they are AND-ed)
            at, shown = self._triangle_site(mask)
            self.report("MC521", at, f"{shown} is True above the diagonal, but "
                        "SDPA's bool attn_mask means True = may attend: every query sees the "
                        "future; use tril (or `triu(..., 1) == 0`)")
        elif facts.hides_above and facts.tri is None and facts.dtype in {"bool", None}:
            # lucidrains/x-transformers#160: `mask = mask | causal_mask` (True = hidden) handed
            # to SDPA, whose bool attn_mask keeps where True
            self.report("MC511", mask, f"{self._text(mask)} has a causal triangle OR-ed in (True "
                        "= hidden), but SDPA's bool attn_mask means True = may attend: every "
                        "query sees the future and only what the mask meant to hide; pass "
                        "`~mask` (or build it as keep-masks AND-ed)")
        self._float_mask_argument(mask, "scaled_dot_product_attention")

    def _flag_needs_mask(self, causal: ast.AST, mask: ast.AST) -> ast.AST | None:
        """The expression `causal` is (itself, or what this function bound the name to) when
        it reads True only if the mask is not None: `m is not None`, or an `and` holding that
        test, where m is the mask or a name the mask was taken from."""
        masks = {dotted(mask)}
        node: ast.AST = mask
        for _ in range(3):  # `causal_mask = attention_mask[:, :, :, :n]`
            while isinstance(node, ast.Subscript):
                node = node.value
            if not isinstance(node, ast.Name) or node.id not in self.scope.derived:
                break
            node = self.scope.derived[node.id]
            masks.add(dotted(node.value if isinstance(node, ast.Subscript) else node))
        masks.discard(None)
        flag = causal
        if isinstance(flag, ast.Name) and flag.id in self.scope.derived:
            flag = self.scope.derived[flag.id]

        def requires(test: ast.AST) -> bool:
            if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
                return any(requires(value) for value in test.values)
            return (isinstance(test, ast.Compare) and len(test.ops) == 1
                    and isinstance(test.ops[0], ast.IsNot) and is_none(test.comparators[0])
                    and dotted(test.left) in masks)

        return flag if requires(flag) else None

    def _causal_instance(self, causal: ast.AST, mask: ast.AST) -> _CausalInstance | None:
        """`is_causal=self.flag` with `attn_mask=mask` in a forward whose class has an instance
        built with the flag possibly True and called with that mask (see `_causal_instances`)."""
        scope = self.scope
        if not (isinstance(causal, ast.Attribute) and isinstance(causal.value, ast.Name)
                and causal.value.id == "self") or scope.kind != "function" or (
                scope.key is None or scope.key[1] != "forward" or self._tree is None):
            return None
        base = _convention_base(mask)
        if not isinstance(base, ast.Name) or base.id not in scope.params or (
                base.id in scope.assigned):
            return None
        if self._instances is None:
            self._instances = _causal_instances(self._tree)
        return self._instances.get((scope.key[0], causal.attr, base.id))

    def _instance_flag_may_be_true(self, causal: ast.AST | None) -> bool:
        """`is_causal=self.is_causal` (or `self.is_causal and attention_mask is None`) in a
        method of a class of which some instance is built with that flag possibly True (BART's
        decoder self-attention beside its cross-attention)."""
        if causal is None:
            return False
        flags = causal.values if isinstance(causal, ast.BoolOp) and isinstance(
            causal.op, ast.And) else [causal]
        if any(isinstance(f, ast.Constant) and not f.value for f in flags):
            return False
        cls = self._class_scope()
        if cls is None or self._tree is None:
            return False
        if self._instances is None:
            self._instances = _causal_instances(self._tree)
        return any(isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (
            f.value.id == "self") and (cls.name, f.attr, "") in self._instances for f in flags)

    def _causal_without_mask(self, call: ast.Call, causal: ast.AST | None, mask: ast.AST) -> bool:
        """Every `is_causal = True` before the call sits in a block that also sets the mask to
        None, and nothing outside that if statement binds the mask again before the call:
        funasr's SenseVoice `if not is_pad_mask: mask = None; is_causal = True`. The two never
        reach SDPA together. (`if mask is not None: is_causal = True` is still reported.)"""
        root = self.scope.node
        if not (isinstance(causal, ast.Name) and isinstance(mask, ast.Name)) or root is None:
            return False
        blocks: list[tuple[list[ast.stmt], ast.AST, str]] = []
        for owner in ast.walk(root):
            for fieldname in ("body", "orelse", "finalbody"):
                block = getattr(owner, fieldname, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    blocks.append((block, owner, fieldname))
        elif_of = {id(node.orelse[0]): node for node in ast.walk(root) if isinstance(
            node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)}
        found = False
        for block, owner, fieldname in blocks:
            for stmt in block:
                if not (stmt.lineno < call.lineno and _binds(stmt, causal.id) and isinstance(
                        stmt, ast.Assign) and is_true(stmt.value)):
                    continue
                last = [s for s in block if _stored_names(s) & {mask.id}]
                if not last and (_branch_of_none(owner, fieldname, mask.id) or (
                        fieldname == "body" and _elif_of_none(
                            owner, elif_of.get(id(owner)), mask.id))):
                    pass  # `if need_weights or mask is not None: ... else: is_causal = True`
                elif not last or not (isinstance(last[-1], ast.Assign) and is_none(
                        last[-1].value) and _binds(last[-1], mask.id)):
                    return False
                # The other branch of the same if may bind the mask: that path has no True.
                other = getattr(owner, "orelse" if fieldname == "body" else "body", [])
                exempt = {id(n) for s in block + (other if isinstance(owner, ast.If) else [])
                          for n in ast.walk(s)}
                end = block[-1].end_lineno or block[-1].lineno
                for node in ast.walk(root):
                    if (isinstance(node, ast.Name) and node.id == mask.id and isinstance(
                            node.ctx, ast.Store) and id(node) not in exempt
                            and end < node.lineno < call.lineno):
                        return False
                found = True
        return found

    def _parameter_behind(self, node: ast.AST, *, follow: bool = True) -> tuple[str, bool] | None:
        """The parameter of this function (not rebound) that `node` is, through indexing,
        reshapes, casts to bool, inversions (`~m`, `m == 0`) and names bound that way: the
        parameter and whether it was inverted an odd number of times."""
        scope = self.scope
        if scope.kind != "function" or not scope.name:
            return None
        flipped = False
        for _ in range(8):  # through at most this many names bound to one another
            found = self._parameter_or_name(node, follow)
            if found is None:
                return None
            node, inverted = found
            flipped ^= inverted
            if node.id in scope.params and (
                    node.id not in scope.assigned or node.id in self._directed(scope)):
                return node.id, flipped
            if node.id not in scope.derived:
                return None
            node = scope.derived[node.id]
        return None

    @staticmethod
    def _directed(scope: _Scope) -> frozenset[str]:
        """The function's parameters rebound only to reshapes of themselves or to themselves
        AND-ed with another mask (`_Scope.directed`), read on first need."""
        if scope.directed is None:
            scope.directed = _reshaped_params(scope.node, scope.params, combined=True) if (
                scope.node) else frozenset()
        return scope.directed

    @staticmethod
    def _reshaped(scope: _Scope) -> frozenset[str]:
        """The function's parameters rebound only to reshapes of themselves (`_Scope.reshaped`),
        read from its body the first time a rebound parameter's role is asked for."""
        if scope.reshaped is None:
            scope.reshaped = _reshaped_params(scope.node, scope.params) if scope.node else (
                frozenset())
        return scope.reshaped

    def _raw_parameter(self, node: ast.AST) -> tuple[str, bool] | None:
        """The parameter of this function (not rebound) that `node` is with its values as the
        caller passed them: through indexing, reshapes and names bound that way, not through
        casts or inversions (`mask[:, None, None, :]`, not `mask.bool()`)."""
        scope = self.scope
        if scope.kind != "function" or not scope.name:
            return None
        for _ in range(8):
            name = _reshape_root(node)
            if name is None:
                return None
            if name in scope.params and (
                    name not in scope.assigned or name in self._reshaped(scope)):
                return name, False
            if name not in scope.derived:
                return None
            node = scope.derived[name]
        return None

    def _parameter_or_name(self, node: ast.AST, follow: bool) -> tuple[ast.Name, bool] | None:
        """The name `node` reads, through indexing, reshapes, bool casts and inversions, and
        whether it was inverted an odd number of times."""
        flipped = False
        while follow:
            inner = _inverted_operand(node)
            if inner is not None:
                node, flipped = inner, not flipped
            elif isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.Call) and call_name(node) in _ROLE_KEEPING and (
                    receiver(node) is not None):
                node = receiver(node) or node
            elif (operand := einops_operand(node)) is not None:
                node = operand  # `rearrange(m, "b s -> b 1 1 s")`
            else:
                break
        return (node, flipped) if isinstance(node, ast.Name) else None

    def _note_role(self, node: ast.AST | None, role: str, *, follow: bool = True,
                   use: ast.AST | None = None, raw: bool = False, direct: bool = True,
                   deep: ast.AST | None = None, via: tuple[int, ...] = ()) -> None:
        """Record what this function does with one of its parameters (see `_Role`): checked at
        the calls of a function by its name, of a method as `self.name(...)`, and of forward /
        __call__ on an instance."""
        scope = self.scope
        if node is None:
            return
        found = self._raw_parameter(node) if raw else self._parameter_behind(node, follow=follow)
        if found is None and scope.kind == "function" and not scope.name and len(
                self.scopes) > 1 and isinstance(node, ast.Name) and node.id not in scope.values:
            # `sublayer(x, lambda _x: self.attn(_x, _x, _x, mask=mask))` (the annotated
            # transformer, BERT4Rec): the lambda hands on a parameter of the function around it
            self.scopes.pop()
            try:
                self._note_role(node, role, follow=follow, use=use, raw=raw, direct=direct,
                                deep=deep, via=via)
            finally:
                self.scopes.append(scope)
            return
        if found is None:
            return
        param, inverted = found
        if role in {"add", "mul", "addmin"} and _dtype_tested(scope.node, param):
            return  # `if m.dtype == torch.bool: ... return s + m`: the function takes either kind
        if inverted:
            role = _FLIPPED_ROLES.get(role, role)
        position = scope.params.index(param) - (1 if scope.method else 0)
        if position >= 0:
            scope.param_roles.setdefault((position, role), _Role(
                position, role, use or node, param, direct, deep=deep, via=via))

    def _note_forwarded_kwargs(self, call: ast.Call, role: str) -> None:
        """`def _attend(self, q, kv, **attn_kwargs): self.mha(q, kv, kv, **attn_kwargs)`: the
        keywords a caller gives the function reach torch's attention as they are."""
        node = self.scope.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
                node.args.kwarg is None):
            return
        kwargs = node.args.kwarg.arg
        if any(kw.arg is None and isinstance(kw.value, ast.Name) and kw.value.id == kwargs
               for kw in call.keywords):
            self.scope.param_roles.setdefault((_KWARGS_POSITION, role), _Role(
                _KWARGS_POSITION, role, call, "**" + kwargs))

    def _forward_keyword_roles(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """`def forward(self, x, **kwargs): return self.attn(x, **kwargs)`: what the callee
        does with a parameter this call leaves to the keywords it forwards, this function's
        callers do by that keyword (HF decoder layers handing `attention_mask` on)."""
        node = self.scope.node
        if self._forwarded_kwargs_name(call) is None or not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        named = {kw.arg for kw in call.keywords if kw.arg is not None}
        own = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
        callees = self._callee_keys(call) if self.use_site else ()
        for entry in roles:
            if entry.position >= _KWARGS_POSITION or entry.position < len(call.args) or (
                    entry.param in named or entry.param in own) or any(
                    (callee, entry.param) in self.use_site for callee in callees):
                # (a parameter every call gives the same mask: reported at its use)
                continue
            self.scope.param_roles.setdefault(
                (_KWARGS_NAMED, f"{entry.role}:{entry.param}"),
                _Role(_KWARGS_NAMED, entry.role, entry.use, entry.param, direct=False))

    def _forwarded_keywords(self, call: ast.Call, entry: _Role) -> None:
        """A call of a function that hands its `**kwargs` to torch's attention: its keywords
        checked as that attention call's own (sentence-transformers' pooling passing
        `key_padding_mask=features["attention_mask"].bool()` through `**attn_kwargs`)."""
        # A wrapper handing its own `**kwargs` on (a decoder layer's `self.attn(x, **kwargs)`):
        # its callers' keywords reach the same attention.
        self._note_forwarded_kwargs(call, entry.role)
        call = self._spread_kwargs(call)  # `layer(x, **{"attn_mask": m, "is_causal": True})`
        keywords = [kw for kw in call.keywords if kw.arg is not None]
        if not keywords:
            return
        if entry.role == "kwargs-mha":
            for kw in keywords:
                if kw.arg in KEY_PADDING_KWARGS:
                    self._key_padding_value(kw.value, kw.arg)
                elif kw.arg in _MHA_MASK_KWARGS:
                    self._mha_mask(kw.value)
        else:
            # Located where the mask is given: in the call, or in the dict it spreads.
            at = next((kw.value for kw in keywords if kw.arg == "attn_mask"), call)
            if entry.role == "kwargs-sdpa-causal" and all(kw.arg != "is_causal" for kw in keywords):
                keywords.append(ast.keyword("is_causal", ast.copy_location(ast.Constant(True), at)))
            sdpa = ast.copy_location(ast.Name("scaled_dot_product_attention", ast.Load()), at)
            self._sdpa(ast.copy_location(ast.Call(sdpa, [], keywords), at))

    def _helper_call(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """A call of a function of this file, checked against what the function does with its
        parameters: a cached key with a True causal flag (MC510), a triangle that points the
        wrong way for the mask the function takes (MC521), a keep-mask as its fill condition
        (MC519)."""
        if any(isinstance(a, ast.Starred) for a in call.args):
            return
        for entry in roles:
            if entry.position == _KWARGS_POSITION:
                self._forwarded_keywords(call, entry)
        self._forward_keyword_roles(call, roles)
        call = self._spread_kwargs(call)  # `block(x, **layer_kwargs)` of a dict literal
        name = self._callee_text(call)
        by_role: dict[str, list[ast.expr]] = {}
        callees = self._callee_keys(call) if self.use_site or self.seeds else ()
        if not callees and (self.use_site or self.seeds) and isinstance(call.func, ast.Name) and (
                call.func.id == "model") and (model := self._file_model()) is not None and (
                self.lookup("model").param_roles == self._class_roles.get(model)):
            # `def evaluate(model, batches)`: the file's model, whose roles the call was read by
            callees = ((model, "forward"),)
        for entry in roles:
            passed = _role_argument(call, entry)
            if passed is not None and not (entry.role in _USE_SITE_ROLES and any(
                    (callee, entry.param) in self.use_site or (
                        # handed on to such a use by a function every call gives the mask:
                        # reported there too (the Anomaly Transformer's `gap_bias`, down three
                        # layers to the product); only with a use-site parameter, where the
                        # second walk is whole (a statement rerun would read the calls apart)
                        not entry.direct and self.use_site and entry.param in self.seeds.get(
                            callee, {}))
                    for callee in callees)) and not (
                    entry.role == "addmin" and any(
                        self.seeds.get(callee, {}).get(entry.param, UNKNOWN).finfo_min
                        for callee in callees)):
                # (a parameter every call gives the same mask: reported at its use; one every
                # call gives a finfo.min plane is summed with the other in the function's body,
                # where MC513 is reported: TimesFM's `merge_masks(a, b)`)
                by_role.setdefault(entry.role.split("-")[0], []).append(passed)
        self._keep_mask_read_as_drop(call, roles)
        self._padding_mask_read_as_keep(call, roles)
        self._causal_union_read_as_keep(call, roles)
        self._bool_subtracted(call, roles)
        self._query_axis_passed(call, roles)
        self._padding_as_attn_mask_passed(call, roles)
        self._key_axes_passed(call, roles)
        for entry in roles:
            passed = _role_argument(call, entry)
            if passed is not None and (entry.role in {"add", "mul", "addmin"}
                                       or entry.role in _FLIPPED_ROLES):
                # a wrapper passing its own parameter on (inverted: the other convention); a
                # fill keeps its use, the condition where the mask is read (see `_fills_scores`)
                self._note_role(passed, entry.role, direct=False, use=entry.use if (
                    entry.role.endswith("-fill")) else None, deep=entry.deep or entry.use,
                    via=(*entry.via, getattr(entry.use, "lineno", 0)) if entry.deep is not None
                    else ())
            elif passed is not None and entry.role in {"float-sdpa", "float-mha", "tri-mha"}:
                self._note_role(passed, entry.role, raw=True)
            elif passed is not None and entry.role in _LAYOUT_ROLES:
                # The use kept is where the padding mask becomes an attn_mask: passed to a
                # parameter that says so (PaliGemma's `blk(x, attn_mask=patch_keep)`, a block
                # its decoder also calls with a 4-D mask), else where the callee hands it on,
                # however deep (PointMAE's SDPA under Block and TransformerEncoder).
                self._note_layout_role(passed, entry.role, direct=False, use=(
                    passed if "attn_mask" in entry.param.lower() else entry.use))
            elif passed is not None and entry.role == "rsub":  # reported at the subtraction
                self._note_role(passed, "rsub", follow=False, use=entry.use)
        if self._float_mask_passed(call, name, roles):
            return
        if self._mask_added_or_multiplied(call, name, by_role):
            return
        keys, flags = by_role.get("key", []), by_role.get("causal", [])
        if any(self.value(k).cached for k in keys) and any(
                is_true(f) or self.value(f).flag is True for f in flags):
            key = next(k for k in keys if self.value(k).cached)
            self.report("MC510", call, f"{self._text(key)} holds cached keys (L != S) and "
                        f"{name}() hands it to scaled_dot_product_attention with "
                        "is_causal=True, which aligns the mask to the top-left: new queries "
                        "cannot see most of the cache; pass an explicit mask")
            return
        for mask in by_role.get("keep", []):
            facts = self.value(mask)
            if facts.dtype != "fp32" and facts.tri in {"upper", "supper"} and not (
                    facts.additive):
                at, shown = self._triangle_site(mask)
                self.report("MC521", at, f"{shown} is 1 above the diagonal, "
                            f"but {name}() keeps the positions where its mask is non-zero: "
                            "every query keeps the future; use tril (or `triu(..., 1) == 0`)")
                return
        for mask in by_role.get("drop", []):
            facts = self.value(mask)
            if facts.dtype == "bool" and facts.tri in {"lower", "slower"}:
                where = _BELOW.get(facts.tri or "", "on and below")
                at, shown = self._triangle_site(mask)
                self.report("MC521", at, f"{shown} is True {where} the "
                            f"diagonal, but {name}() fills where its mask is True: it "
                            "masks the past, not the future; use triu(..., diagonal=1)")
                return
        for mask in by_role.get("tri", []):
            facts = self.value(mask)
            if facts.dtype == "bool" and facts.tri in {"lower", "slower"} and (
                    facts.tri_at not in self._triangles_told):
                if facts.tri_at is not None:
                    self._triangles_told.add(facts.tri_at)
                where = _BELOW.get(facts.tri or "", "on and below")
                at, shown = self._triangle_site(mask)
                # (once: not again where the callee, given the triangle, reports it at its site)
                self.report("MC521", at, f"{shown} is True {where} the diagonal, but {name}() "
                            "hands it to MultiheadAttention as attn_mask (True = masked): it "
                            "hides the past and shows the future; use triu(..., diagonal=1)",
                            echo_of=facts.tri_at[0] if facts.tri_at else None)
                return
            # a True triu with diagonal 0 handed to a layer that gives it to MultiheadAttention
            # (VALL-E's `layer(xy_pos, attn_mask)`): the diagonal is hidden too, reported where
            # the triangle is made (once)
            if facts.dtype == "bool" and facts.tri == "upper" and facts.tri_at is not None and (
                    facts.tri_at not in self._triangles_told) and self._diagonal_zero_triu_at(
                    facts.tri_at):
                self._triangles_told.add(facts.tri_at)
                return

    def _mask_added_or_multiplied(self, call: ast.Call, name: str,
                                  by_role: dict[str, list[ast.expr]]) -> bool:
        """A mask passed to a function (or module) of this file that adds the parameter to its
        scores (a bool: MC509; a 0/1 mask: MC508) or multiplies its scores by it (an additive
        mask: MC523). Reported at the argument: the caller passes the wrong kind of mask."""
        for mask in by_role.get("add", []):
            facts = self.value(mask)
            if facts.dtype == "bool":
                self.report("MC509", mask, f"{self._text(mask)} is a bool mask and {name}() adds "
                            "it to its scores: True adds 1.0 and masks nothing; pass an additive "
                            "mask (0 / -inf)")
                return True
            if self._added_zero_one(mask):
                if not self._reported_at_cast(mask, f"{name}() adds it to its scores",
                                              handed=True):
                    self.report("MC508", mask, f"{self._text(mask)} is a 0/1 mask and {name}() "
                                "adds it to its scores: it adds 1 where it is 1 and masks "
                                "nothing; turn it into 0/-inf first")
                return True
            if self._branch_float01(mask, f"{name}() adds it to its scores"):
                return True
        for mask in by_role.get("addmin", []):
            if self.value(mask).finfo_min:
                self.report("MC513", mask, f"{self._text(mask)} is filled with finfo.min and "
                            f"{name}() adds another finfo.min mask to it: the sum overflows to "
                            "-inf where both hide a key, so a row both hide everywhere becomes "
                            "NaN; combine them with masked_fill or a bool mask")
                return True
        for mask in by_role.get("mul", []):
            facts = self.value(mask)
            if facts.additive and facts.dtype != "bool" and not facts.zero_one:
                self.report("MC523", mask, f"{self._text(mask)} is an additive mask (0 where "
                            f"kept, -inf or a large negative where masked) and {name}() "
                            "multiplies its scores by it: the kept scores become 0, the masked "
                            "ones huge or -inf/NaN; add it instead")
                return True
        return False

    def _float_mask_passed(self, call: ast.Call, name: str, roles: tuple[_Role, ...]) -> bool:
        """A float 0/1 mask passed for a parameter that the function hands, values unchanged, to
        SDPA's attn_mask or to an attention module's mask, which add a float mask: MC508 at
        the argument (the caller passes the wrong kind of mask)."""
        for entry in roles:
            arg = _role_argument(call, entry) if entry.role in {"float-sdpa", "float-mha"} else None
            api = ("scaled_dot_product_attention" if entry.role == "float-sdpa"
                   else "an attention module")
            if arg is not None and self._float_mask_of_attention(arg):
                if not self._reported_at_cast(arg, f"{name}() hands it as {entry.param} to "
                                              f"{api}, which adds it", handed=True):
                    self.report("MC508", arg, f"{self._text(arg)} is a float 0/1 mask, and "
                                f"{name}() hands it as {entry.param} to {api}, which adds a "
                                "float mask to the scores: it adds 1 and masks nothing; pass it "
                                "as bool or as 0/-inf")
                return True
            if arg is not None and self._branch_float01(
                    arg, f"{name}() hands it as {entry.param} to {api}, which adds it"):
                return True
        return False

    def _bool_subtracted(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """A bool tensor passed for a parameter the function subtracts from a number (`1 - valid`,
        wasiahmad/context_attentive_ir#6): torch raises there (MC512). An additive mask (0 / -inf)
        passed there (harvard-edge/cs249r_book PR #1785: `(1 - mask) * MASK_VALUE` given
        `triu(full(-inf), 1)`): `1 - mask` reads it as a 1/0 keep mask, so the kept positions get
        the masking value and the masked ones +inf times it (MC523). Reported at the
        subtraction, once, naming the call."""
        name = self._callee_text(call)
        for entry in roles:
            arg = _role_argument(call, entry) if entry.role == "rsub" else None
            if arg is None or id(entry.use) in self._rsub_done:
                continue
            facts = self.value(arg)
            if facts.dtype == "bool":
                self._rsub_done.add(id(entry.use))
                self.report("MC512", entry.use, f"line {call.lineno} passes a bool tensor "
                            f"({self._text(arg)}) as {entry.param} of {name}(), and "
                            f"`{self._text(entry.use)}` raises in torch (no `-` on bool); "
                            "invert it with `~` or logical_not()")
            elif facts.additive and not facts.zero_one and not facts.all_ones and (
                    facts.dtype in {None, "fp32", "half", "bf16"}):
                self._rsub_done.add(id(entry.use))
                self.report("MC523", entry.use, f"line {call.lineno} passes an additive mask "
                            f"(0 / -inf: {self._text(arg)}) as {entry.param} of {name}(), and "
                            f"`{self._text(entry.use)}` reads it as a 1/0 keep mask: the kept "
                            "positions get the masking value and the masked ones -inf; pass "
                            "the 1/0 mask (`tril(ones)`) or add the additive one")

    def _padding_as_attn_mask(self, mask: ast.AST, role: str, passed: str = "") -> None:
        """MC515: a (batch, seq) padding mask given as it is to SDPA's or MultiheadAttention's
        attn_mask, which read a 2-D mask as (queries, keys) (conventions.md 2.6). `passed`
        says which function of this file hands it on."""
        text = self._text(mask)
        if role == "shape-sdpa":
            self.report("MC515", mask, f"{text} is a (batch, seq) padding mask{passed}, and "
                        "scaled_dot_product_attention reads a 2-D attn_mask as (queries, keys): "
                        "query i of every sequence gets sequence i's padding (it raises unless "
                        "batch == queries); add the head and query axes (`[:, None, None, :]`)")
        else:
            self.report("MC515", mask, f"{text} is a (batch, seq) padding mask{passed}, but "
                        "MultiheadAttention's attn_mask is (queries, keys): it raises unless "
                        "batch == queries, and then hides sequence i's padding from query i of "
                        "every sequence; pass it as key_padding_mask")

    def _note_layout_role(self, mask: ast.AST, role: str, *, direct: bool = True,
                          use: ast.AST | None = None) -> None:
        """A parameter this function hands to SDPA's or MHA's attn_mask with its axes as the
        caller passed them (through casts and inversions, not through indexing or reshapes):
        a caller's (batch, seq) padding mask arrives there as (queries, keys)."""
        node = mask
        for _ in range(8):
            inner = _inverted_operand(node)
            if inner is not None:
                node = inner
            elif isinstance(node, ast.Call) and receiver(node) is not None and (
                    call_name(node) in _LAYOUT_KEEPING_CASTS):
                node = receiver(node) or node
            else:
                break
        scope = self.scope
        if not isinstance(node, ast.Name) or scope.kind != "function" or not scope.name or (
                node.id not in scope.params or node.id in scope.assigned):
            return
        position = scope.params.index(node.id) - (1 if scope.method else 0)
        if position >= 0:
            scope.param_roles.setdefault((position, role), _Role(
                position, role, mask if use is None else use, node.id, direct, mask,
                alias=_returns_only_a_call(scope.node)))

    def _padding_as_attn_mask_passed(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """A (batch, seq) padding mask passed for a parameter that the function hands, axes
        unchanged, to SDPA's or MHA's attn_mask (MC515), reported at the argument."""
        for entry in roles:
            arg = _role_argument(call, entry) if entry.role in _LAYOUT_ROLES else None
            shown = self.scope.key_axes.get(arg.id) if isinstance(arg, ast.Name) else None
            if isinstance(arg, ast.Name) and shown is not None and (
                    shown[1] is self.scope.values.get(arg.id)) and (
                    self.value(arg).layout is None):
                # this function passes the same mask with the axes added elsewhere (3DETR's
                # encoder layers): the bare one here is the slip
                (line, _, _), _, via = shown
                name = self._callee_text(call)
                if via is None:
                    self._padding_as_attn_mask(arg, entry.role, f" (line {line} adds its head "
                                               f"and query axes; {name}() hands it on as "
                                               "attn_mask)")
                elif not entry.direct:
                    # Diffusion Policy: the decoder layer that takes it bare hands it to the
                    # attention its encoder layer gives the four-axis form (reported where the
                    # layer hands it on)
                    self._padding_as_attn_mask(entry.handed or entry.use, entry.role, (
                        f" (line {call.lineno} passes {arg.id} to {name}(); line {line} passes "
                        f"it to {via}(), which adds its head and query axes) handed on as "
                        "attn_mask here"))
                else:
                    self._padding_as_attn_mask(arg, entry.role, f" (line {line} passes it to "
                                               f"{via}(), which adds its head and query axes) "
                                               f"and {name}() hands it on as attn_mask")
                return
            if arg is not None and self.value(arg).layout == "BS":
                name = self._callee_text(call)
                if not entry.direct:
                    # the function hands its parameter to another one's attn_mask: reported at
                    # that hand-over, where a padding mask becomes an attn_mask
                    self._padding_as_attn_mask(entry.use, entry.role, f" (line {call.lineno} "
                                               f"passes {self._text(arg)} to {name}()) handed "
                                               "on as attn_mask here")
                elif entry.param not in _ATTN_MASK_PARAMS and not entry.alias:
                    # A parameter the function does not call attn_mask (`keep`, `maska`) is its
                    # own padding mask: handing it to SDPA bare is the function's slip, and one
                    # finding there covers every call.
                    self._padding_as_attn_mask(entry.use, entry.role, f" (line {call.lineno} "
                                               f"passes {self._text(arg)} to {name}()) handed "
                                               "on as attn_mask here")
                else:
                    self._padding_as_attn_mask(arg, entry.role, f" and {name}() hands it on "
                                               f"as attn_mask ({entry.param})")
                return

    def _query_axis_passed(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """A (B, 1, L, 1) padding mask passed to a function that fills with its parameter or
        hands it to SDPA (MC514), reported at the argument (hyunwoongko/transformer's
        `make_src_mask` result handed down to the attention that fills)."""
        for entry in roles:
            # (fill and SDPA roles are never use-site roles, and a layout is not seeded: the
            # call is where the mask is seen)
            if entry.role not in _QUERY_AXIS_ROLES:
                continue
            arg = _role_argument(call, entry)
            if arg is not None and self.value(arg).layout == "B1S1" and (
                    entry.role.endswith("sdpa") or (self._fills_scores(entry.use) and not (
                        self._softmax_not_last(self._function_around(entry.use))))):
                name = self._callee_text(call)
                self._query_axis_padding(arg, f"{entry.param} of {name}()")
                return

    def _contradicting_roles(self, done: _Scope, roles: tuple[_Role, ...]) -> None:
        """One parameter read both ways in one function: handed to SDPA as its bool attn_mask
        (True = may attend) on one path and filled where it is True on another (x-transformers'
        `Attend`: the flash path and the einsum path; lucidrains/x-transformers#240), or handed
        on as True = padding and filled where it is 0. A fill needs a bool condition, so the two
        uses read one bool mask in opposite directions; the fill is reported, naming the other
        use. Only fills this function makes itself."""
        if done.kind != "function":
            return
        held: dict[int, dict[str, _Role]] = {}
        for entry in roles:
            held.setdefault(entry.position, {})[entry.role] = entry
        for by_role in held.values():
            keep_api, drop_fill = by_role.get("keep-sdpa"), by_role.get("drop-fill")
            drop_api = by_role.get("drop-sdpa") or by_role.get("drop-mha")
            keep_fill = by_role.get("keep-fill")
            if not ((keep_api is not None and drop_fill is not None and drop_fill.direct) or (
                    drop_api is not None and keep_fill is not None and keep_fill.direct)):
                continue
            if _dtype_tested(done.node, next(iter(by_role.values())).param):
                # `if attn_mask.dtype == torch.bool: s.masked_fill_(attn_mask, -inf) else: s +=
                # attn_mask`: the eager path takes nn.MultiheadAttention's convention on purpose
                # (neuralforecast's PatchTST, whose callers pass no mask); which path is meant
                # is not for the source to say
                continue
            if keep_api is not None and drop_fill is not None and drop_fill.direct and (
                    done.key, keep_api.param) in self.padding_given and keep_api.direct:
                # every call passes a padding mask, which the fill reads as it should (ATLOP's
                # BERT: `output_attentions` takes the eager path): SDPA's is the wrong reading
                line = getattr(drop_fill.use, "lineno", 0)
                self.report("MC511", keep_api.use, f"{keep_api.param} is True at padding (every "
                            f"call passes a padding mask, and the fill at line {line} reads it "
                            "so), but scaled_dot_product_attention's bool attn_mask means True "
                            "= may attend: this path attends to the padding only; pass "
                            f"`~{keep_api.param}`")
            elif keep_api is not None and drop_fill is not None and drop_fill.direct:
                line = getattr(keep_api.use, "lineno", 0)
                self.report("MC519", drop_fill.use, f"{drop_fill.param} is a keep-mask where "
                            f"line {line} hands it to scaled_dot_product_attention (its bool "
                            "attn_mask means True = may attend), but here it is the masked_fill "
                            "condition: this path hides the tokens the other keeps; fill where "
                            f"it is False (`~{drop_fill.param}`)")
            elif drop_api is not None and keep_fill is not None and keep_fill.direct:
                line = getattr(drop_api.use, "lineno", 0)
                where = "as key_padding_mask" if drop_api.role == "drop-mha" else (
                    "inverted to scaled_dot_product_attention")
                self.report("MC511", keep_fill.use, f"{keep_fill.param} is True = padding where "
                            f"line {line} hands it {where}, but here the fill hides where it "
                            "is 0: this path hides the real tokens the other keeps; fill where "
                            "it is True")

    def _function_around(self, node: ast.AST) -> ast.AST | None:
        """The innermost function holding `node`, if any."""
        parents = self._parents()
        around = parents.get(id(node))
        while around is not None and not isinstance(around, _FUNCTION_NODES):
            around = parents.get(id(around))
        return around

    def _fills_scores(self, condition: ast.AST) -> bool:
        """Whether `condition` is the condition of a masked_fill of scores by their name
        (`score.masked_fill(mask == 0, -10000)`)."""
        parents = self._parents()
        fill = parents.get(id(condition))
        if not isinstance(fill, ast.Call) or call_name(fill) not in {"masked_fill",
                                                                      "masked_fill_"}:
            return False
        target = _fill_target(fill)[0]
        if target is None:
            return False
        if _is_score_name(target):
            return True
        # ... or by its use: a name the function that fills it hands to softmax (`skor`,
        # `puntuaciones`: scores under another language's word)
        around = self._function_around(fill)
        if not isinstance(target, ast.Name) or around is None:
            return False
        if self._softmax_inputs is None:
            self._softmax_inputs = _softmax_inputs_by_scope(self._tree, self.source)
        return target.id in self._softmax_inputs.get(id(around), frozenset())

    def _padding_mask_read_as_keep(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """A padding mask the file proves (True = padding: `arange(n)[None] >= lengths[:, None]`,
        `ids == pad_id`, a tokenizer's mask `== 0`) passed to a function that hands it to SDPA
        as its bool attn_mask (True = may attend) or fills where it is 0. Reported in the
        function when the parameter's name says padding (`pad`, `padding_mask`: the function
        reads its input against its name), else at the call."""
        name = self._callee_text(call)
        for entry in roles:
            arg = _role_argument(call, entry) if entry.role in {"keep-sdpa", "keep-fill"} else None
            if arg is None:
                continue
            facts = self.value(arg)
            if not facts.hf_keep_inverted or facts.hf_keep:
                continue
            if entry.role == "keep-sdpa" and self._read_both_ways_in_one(entry, roles):
                continue  # the function that reads it both ways says which (MC511 there)
            deep = entry.deep if entry.deep is not None else entry.use
            if not entry.direct and entry.role == "keep-sdpa" and deep is not None and (
                    _is_key_padding_name(last_name(_convention_base(deep)) or "")):
                # handed on to SDPA under torch's key-padding name: MC502 says so at the use
                continue
            behind = self._parameter_behind(arg)
            if behind is not None and behind[0] == entry.param and not behind[1]:
                # a wrapper handing its own parameter on under the same name (inverted here,
                # ColBERT's `attention_mask.eq(0)`, it is this function's own doing)
                continue
            reads = ("hands it to scaled_dot_product_attention as attn_mask (True = may attend)"
                     if entry.role == "keep-sdpa" else "fills where it is 0")
            kept = _read_at(roles, entry.position, _DROP_ROLES) if (
                entry.role == "keep-sdpa") else None
            if kept is not None:
                # the model also reads it as a padding mask (`~pad` for another SDPA call, the
                # pooling's key_padding_mask) and the call gives one: the one SDPA call that
                # reads it as a keep-mask is the slip (held-out 59's Longformer global row)
                where, use = kept.deep or kept.use, entry.deep or entry.use
                self.report("MC511", use, f"{self._text(use)} is handed to "
                            "scaled_dot_product_attention as attn_mask (True = may attend), but "
                            f"line {call.lineno} passes a padding mask ({self._text(arg)}, True "
                            f"= padding) for {entry.param}, which line "
                            f"{getattr(where, 'lineno', call.lineno)} also reads as one: it "
                            "attends to the padding only; invert it (`~`)")
            elif _says_padding(entry.param) and (entry.direct or (
                    entry.deep is not None and _says_padding(_reshape_root(entry.deep) or ""))):
                # (handed on, reported where the function at the end of the chain reads its
                # own parameter named so: held-out 64's decoder layer under `self.decode_fn`)
                read = entry.use if entry.direct or entry.deep is None else entry.deep
                shown = entry.param if entry.direct else _reshape_root(read) or entry.param
                self.report("MC511", read, f"{shown} is named as a padding mask "
                            f"(True = padding) and line {call.lineno} passes one "
                            f"({self._text(arg)}), but {name}() {reads}: it attends to the "
                            f"padding only; invert it (`~{shown}`)")
            else:
                # (at the comparison that made it, where the fix goes, when this function bound
                # the name: ColBERT's `extended_attention_mask = attention_mask.eq(0)...`, or
                # the function whose returned tuple it unpacked)
                # (also through a reshape at the call, `key_mask[:, None, None, :]`, unless the
                # name says padding: LayoutLM's `padding_mask = ~attention_mask.bool()`, right
                # for its fill, is passed the wrong way at the call)
                root = _reshape_root(arg)
                where = self._bound_expression(ast.Name(root, ast.Load()) if (
                    root is not None and not isinstance(arg, ast.Name)
                    and not _says_padding(root)) else arg)
                if where is arg or isinstance(where, ast.Name):
                    where = self._returned_binding(arg) or arg
                self.report("MC511", where, f"{self._text(arg)} is True "
                            f"at padding, but {name}() {reads} for {entry.param}: pass the "
                            "keep-mask (`~`)")
            return

    def _inverted_beside_hand_over(self, entry: _Role) -> int | None:
        """The line where the function that hands a parameter on as `entry.use` (a bare name)
        also inverts it (`~name`), the parameter never rebound there; None otherwise."""
        use = entry.use
        if not isinstance(use, ast.Name):
            return None
        node = _enclosing_function(use, self._parents())
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or use.id not in {
                a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}:
            return None
        inverted = None
        for sub in subnodes(node):
            if isinstance(sub, ast.Name) and sub.id == use.id and isinstance(sub.ctx, ast.Store):
                return None
            if inverted is None and isinstance(sub, ast.UnaryOp) and isinstance(
                    sub.op, ast.Invert) and isinstance(sub.operand, ast.Name) and (
                    sub.operand.id == use.id):
                inverted = sub.lineno
        return inverted

    def _read_both_ways_in_one(self, keep: _Role, roles: tuple[_Role, ...]) -> bool:
        """The mask `keep` hands to SDPA is also filled where it is True (a "drop-fill" role at
        the same position), both in one function's body: `_contradicting_roles` reports that
        function, at the reading its calls contradict."""
        fill = next((r for r in roles if r.position == keep.position and r.role == "drop-fill"),
                    None)
        if fill is None:
            return False
        parents = self._parents()
        where = _enclosing_function(keep.deep or keep.use, parents)
        return isinstance(where, _FUNCTION_NODES) and where is _enclosing_function(
            fill.use, parents)

    def _causal_union_read_as_keep(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """A mask with a causal triangle OR-ed in (True = hidden: `pad | subsequent`, THP's
        `slf_attn_mask`) passed to a function that hands it to SDPA as its bool attn_mask
        (True = may attend), as `_sdpa_mask` reports when the union is made beside the call.
        Reported at SDPA, where the fix goes (`~mask`); the callers keep the convention of the
        code base, whose fills read it as True = hidden."""
        name = self._callee_text(call)
        for entry in roles:
            arg = _role_argument(call, entry) if entry.role == "keep-sdpa" else None
            if arg is None:
                continue
            facts = self.value(arg)
            if not facts.hides_above or facts.tri is not None or facts.dtype not in {
                    "bool", None}:
                continue
            at = entry.deep or entry.use
            shown = self._text(at) if isinstance(at, ast.Name) else entry.param
            self.report("MC511", at, f"{shown} has a causal triangle OR-ed in (True = hidden: "
                        f"line {call.lineno} passes {self._text(arg)} to {name}()), but SDPA's "
                        "bool attn_mask means True = may attend: every query sees the future "
                        f"and only what the mask meant to hide; pass `~{shown}`")
            return

    def _keep_mask_read_as_drop(self, call: ast.Call, roles: tuple[_Role, ...]) -> None:
        """A keep-mask (a tokenizer's mask, a real-token test) passed to a function that reads
        the parameter as True = masked. Reported in the function when the parameter's own name
        says keep (`attention_mask`: the function reads its input against the convention of its
        name), else at the call (the caller passes the wrong mask)."""
        name = self._callee_text(call)
        for entry in roles:
            arg = _role_argument(call, entry) if entry.role.startswith("drop") else None
            if arg is None:
                continue
            inverted_for = self._inverted_elsewhere(arg) if entry.role == "drop-mha" else None
            if inverted_for is not None:
                self.report("MC502", arg, f"{self._text(arg)} is inverted for {inverted_for} in "
                            "this function (so it is 1/True at real tokens), but passed as it is "
                            f"to {name}() as {entry.param}, which it hands to an attention "
                            "module as key_padding_mask (True = padding): invert it here too")
                return
            facts = self.value(arg)
            if not _keeps(facts):
                continue
            behind = self._parameter_behind(arg)
            if behind is not None and behind[0] == entry.param:
                # A wrapper handing its own parameter on under the same name: one convention
                # for both. The role is noted for its callers, who pass the mask itself
                # (BertWithPretrained's BertLayer -> BertAttention, each taking
                # `attention_mask` as True = padding, is not a finding per level).
                continue
            code = "MC519" if entry.role == "drop-fill" else "MC511"
            reads = {"drop-sdpa": "inverts it for scaled_dot_product_attention (True = may "
                                  "attend)",
                     "drop-mha": "hands it to an attention module as key_padding_mask (True = "
                                 "padding)"}.get(entry.role, "fills where it is True")
            hint = name_hint(entry.param)
            inverted_at = self._inverted_beside_hand_over(entry) if (
                entry.role == "drop-mha" and not entry.direct) else None
            if inverted_at is not None:
                # the function that hands it on unchanged inverts it for another key-padding
                # use (MCAN's `lang_pad = ~attention_mask` for the decoder, `attention_mask` for
                # the encoder): its author reads it as a keep-mask, and the hand-over is the slip
                self.report("MC502", entry.use, f"{self._text(entry.use)} is inverted at line "
                            f"{inverted_at} of this function (line {call.lineno} passes a "
                            "keep-mask, 1 = real token), but handed on as it is here to a "
                            "key_padding_mask (True = padding): invert it here too")
            elif entry.direct and hint is not None and hint.bool_convention == "bool-true-keep":
                self.report(code, entry.use, f"{entry.param} is named as a keep-mask (1 = real "
                            f"token) and line {call.lineno} passes one ({self._text(arg)}), but "
                            f"{name}() {reads}: it attends to the padding only; read it as a "
                            "keep-mask")
            elif entry.role == "drop-mha" and facts.keep_mask and not (
                    facts.hf_keep or facts.pad_keep) and isinstance(arg, ast.Name) and (
                    declares_keep(arg.id)):
                # the name alone says keep, as when it goes to key_padding_mask directly
                # (`_key_padding_value`): MC502's names (MTR's `src_key_padding_mask=valid_mask`)
                self.report("MC502", arg, f"{arg.id} is named as a keep-mask (True = kept) but "
                            f"{name}() {reads} for {entry.param}: invert it (`~{arg.id}`)",
                            echo_of=getattr(entry.deep or entry.use, "lineno", None))
            elif entry.role == "drop-fill" and (
                    kept := _read_at(roles, entry.position, _KEEP_ROLES)) is not None:
                # the function also reads it as a keep-mask (the encoder's
                # `src_key_padding_mask=source_mask == 0`, a pooling weight) and the call agrees
                # with that: the one fill that reads it the other way is the slip
                where, fill = kept.deep or kept.use, entry.deep or entry.use
                self.report(code, fill, f"the fill masks where {self._text(fill)} is True, but "
                            f"line {call.lineno} passes a keep-mask ({self._text(arg)}, 1 = real "
                            f"token) for {entry.param}, which line "
                            f"{getattr(where, 'lineno', call.lineno)} also reads as one: it hides "
                            "the real tokens; fill where it is 0 (`== 0`)")
            else:
                own = name_hint(arg.id) if isinstance(arg, ast.Name) else None
                bound = self.scope.derived.get(arg.id) if isinstance(arg, ast.Name) and (
                    own is not None and own.bool_convention == "bool-true-masked") else None
                # `key_padding_mask = seq_len_to_mask(n)`: named for the callee's convention,
                # bound to the other one: reported where it is bound
                self.report(code, bound if bound is not None else arg, f"{self._text(arg)} is a "
                            f"keep-mask (1 = real token), but {name}() {reads} for "
                            f"{entry.param}: pass the padding mask (`== 0`)",
                            echo_of=getattr(entry.deep or entry.use, "lineno", None),
                            echo_also=getattr(entry.use, "lineno", None), echo_via=entry.via)
            return

    def _module_or_mha(self, value: ast.IfExp) -> Value | None:
        """`MaskedBodyAttention(d, h) if masked else nn.MultiheadAttention(d, h)` (held-out 75's
        Body Transformer): an instance of a class of this file or torch's attention module. A
        call is read as the one whose forward takes it (`_forward_takes`)."""
        built = [_built_module(branch) for branch in (value.body, value.orelse)]
        local = [b for b in built if b in self._local_classes]
        if len(local) != 1 or self._forward_def(local[0]) is None:
            return None
        other = value.orelse if built[0] == local[0] else value.body
        held = self.value(other)
        if not held.mha or (held.module or "MultiheadAttention") != "MultiheadAttention":
            return None
        return Value(module=local[0], param_roles=self._class_roles.get(local[0], ()),
                     or_mha=True)

    def _forward_def(self, cls: str | None) -> ast.FunctionDef | None:
        """The `forward` a class of this file defines in its own body."""
        if self._tree is None or cls is None:
            return None
        for node in ast.walk(self._tree):
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "forward":
                        return item
        return None

    def _forward_takes(self, cls: str | None, call: ast.Call) -> bool:
        """Whether the class's forward accepts the call's arguments: no more positional ones
        than it has parameters (after self), and only keywords it names, unless it takes
        `*args` / `**kwargs`."""
        forward = self._forward_def(cls)
        if forward is None:
            return False
        params = [a.arg for a in (*forward.args.posonlyargs, *forward.args.args)][1:]
        named = {*params, *(a.arg for a in forward.args.kwonlyargs)}
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
                kw.arg is None for kw in call.keywords):
            return True  # `f(*xs)`, `f(**kw)`: not known, read as the class's
        return (len(call.args) <= len(params) or forward.args.vararg is not None) and (
            forward.args.kwarg is not None or all(kw.arg in named for kw in call.keywords))

    def _flag_off_with_cache(self, causal: ast.AST, key: ast.expr) -> bool:
        """`is_causal=self.is_causal and past_key_value is None`: the flag is False wherever a
        name the cache concatenation of `key` is guarded by is not None."""
        name = dotted(key)
        if name is None or not (isinstance(causal, ast.BoolOp) and isinstance(
                causal.op, ast.And)):
            return False
        absent = set().union(*(_test_names(v) for v in causal.values if isinstance(
            v, ast.Compare) and len(v.ops) == 1 and isinstance(v.ops[0], ast.Is) and is_none(
            v.comparators[0])))
        if not absent:
            return False
        parents = self._parents()
        function = _enclosing_function(causal, parents)
        return any(name in _stored_dotted(node) and any(
            _test_names(i.test) & absent for i in _enclosing_ifs(node, parents)
            if _runs_when_true(i, node, parents))
            for node in ast.walk(function) if isinstance(
                node, (ast.Assign, ast.AugAssign, ast.AnnAssign)))

    def _cache_gated(self, call: ast.Call, key: ast.expr) -> bool:
        """Whether the call sits under an `if` whose test shares a name with the test that
        guards the cache concatenation of `key`: the author split the cached and the uncached
        path (lag-llama PR #84's fix: `is_causal=True` only in the branch without a cache).
        Only the `if`s the call and the assignment do not share count: code wrapped whole in
        `if TYPE_CHECKING: ... else:` still fires."""
        name = dotted(key)
        if name is None or self._tree is None:
            return False
        parents = self._parents()
        if self._cache_asserted_off(call, name, parents):
            return True
        call_ifs = _enclosing_ifs(call, parents)
        # only the `if`s where the call runs when their test is false (`else:`, `if not x:`)
        # (not the else of `if cache is None or ...:`, which runs only with the cache: nanochat)
        off = [i for i in call_ifs if not _runs_when_true(i, call, parents) and not (
            isinstance(i.test, ast.BoolOp) and isinstance(i.test.op, ast.Or) and any(
                isinstance(v, ast.Compare) and len(v.ops) == 1 and isinstance(v.ops[0], ast.Is)
                and is_none(v.comparators[0]) for v in i.test.values))]
        if not off:
            return False
        function = _enclosing_function(call, parents)
        gated = set().union(*(_test_names(node.test) for node in off))
        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and name in (
                    _stored_dotted(node)):
                own = [i for i in _enclosing_ifs(node, parents) if i not in call_ifs
                       and _runs_when_true(i, node, parents)]
                if any(_test_names(i.test) & gated for i in own):
                    return True
        return False


    def _no_cached_prefix(self, call: ast.Call, query: ast.AST | None, key: ast.AST) -> bool:
        """Whether the call sits in the body of an `if` whose test holds only without a cached
        prefix: each `or` part (or one `and` part) is `cache is None` or compares the query's
        length with the key's (nanochat: `if kv_cache is None or Tq == Tk: sdpa(q, k, v,
        is_causal=True)`, with `Tq = q.size(2)`, `Tk = k.size(2)`)."""
        names = {dotted(query) if query is not None else None, dotted(key)} - {None}
        if len(names) != 2 or self._tree is None:
            return False
        parents = self._parents()

        def length_of(node: ast.AST) -> str | None:
            if isinstance(node, ast.Name) and node.id in self.scope.derived:
                node = self.scope.derived[node.id]
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and (
                    node.value.attr == "shape"):
                return dotted(node.value.value)
            if isinstance(node, ast.Call) and call_name(node) == "size" and node.args:
                base = receiver(node)
                return dotted(base) if base is not None else None
            return None

        def safe(test: ast.AST) -> bool:
            if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
                return all(safe(value) for value in test.values)
            if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
                # ChatGLM2's `attention_mask is None and q.shape[2] == k.shape[2]`
                return any(safe(value) for value in test.values)
            if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
                return False
            if isinstance(test.ops[0], ast.Is) and is_none(test.comparators[0]):
                return names_a_cache(test.left)
            return isinstance(test.ops[0], ast.Eq) and {
                length_of(test.left), length_of(test.comparators[0])} == names

        at: ast.AST = call
        while (parent := parents.get(id(at))) is not None and not isinstance(
                parent, _FUNCTION_NODES):
            if isinstance(parent, ast.If) and any(stmt is at for stmt in parent.body) and (
                    safe(parent.test)):
                return True
            at = parent
        return False

    @staticmethod
    def _cache_asserted_off(call: ast.Call, name: str, parents: dict[int, ast.AST]) -> bool:
        """Whether every `if` that assigns `name` in the call's function needs a name that an
        earlier statement of that function asserts off (`assert past_key_value is None`,
        `assert not use_cache`): the cache concatenation cannot run before the call
        (InternVL's flash-attention patch of LlamaAttention; fresh4)."""
        function = _enclosing_function(call, parents)
        body = getattr(function, "body", None)
        if not isinstance(body, list):
            return False
        off: set[str] = set()
        for stmt in body:
            if stmt.lineno >= call.lineno:
                break
            if isinstance(stmt, ast.Assert):
                off |= _asserted_off(stmt.test)
        if not off:
            return False
        branches = [[i for i in _enclosing_ifs(node, parents) if _runs_when_true(i, node, parents)]
                    for node in ast.walk(function)
                    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                    and name in _stored_dotted(node)]
        guarded = [b for b in branches if b]
        return bool(guarded) and all(any(_needed_names(i.test) & off for i in b)
                                     for b in guarded)


_GRAD_ROOTS = frozenset({"forward", "__call__", "training_step"})
# What runs on every call of a module (MC524: a buffer rewritten there).
_EVERY_CALL_ROOTS = frozenset({"forward", "__call__"})


def _reached_from_forward(cls: ast.AST, *, roots: frozenset[str] | None = None,
                          through_no_grad: bool = False) -> frozenset[str]:
    """The methods of a class that forward / __call__ / training_step (or `roots`) call as
    `self.name(...)`, directly or through one another; not those decorated with no_grad /
    inference_mode (unless `through_no_grad`)."""
    methods = {m.name: m for m in getattr(cls, "body", [])
               if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    pending = [name for name in methods if name in (
        _GRAD_ROOTS if roots is None else roots) or name.startswith("forward")]
    reached: set[str] = set()
    while pending:
        name = pending.pop()
        if name in reached or name not in methods or (
                not through_no_grad and decorated_no_grad(methods[name])):
            continue
        reached.add(name)
        for node in ast.walk(methods[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(
                    node.func.value, ast.Name) and node.func.value.id == "self":
                pending.append(node.func.attr)
    return frozenset(reached)


def _functions_reached_from_forward(tree: ast.AST) -> frozenset[str]:
    """The functions (not methods, at any depth) that the methods of `_reached_from_forward`
    call by name, directly or through one another; not those decorated with no_grad /
    inference_mode."""
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    methods = {id(m) for cls in classes for m in cls.body}
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in methods:
            functions.setdefault(node.name, node)
    if not functions:
        return frozenset()
    pending: list[str] = []
    for cls in classes:
        reached_methods = _reached_from_forward(cls)
        for method in cls.body:
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    method.name in reached_methods):
                pending.extend(node.func.id for node in ast.walk(method) if isinstance(
                    node, ast.Call) and isinstance(node.func, ast.Name))
    reached: set[str] = set()
    while pending:
        name = pending.pop()
        if name in reached or name not in functions or decorated_no_grad(functions[name]):
            continue
        reached.add(name)
        pending.extend(node.func.id for node in ast.walk(functions[name]) if isinstance(
            node, ast.Call) and isinstance(node.func, ast.Name))
    return frozenset(reached)


def _stored_attribute(call: ast.Call, parent: ast.AST | None) -> str | None:
    """X when `call` is stored on `self.X`: `self.X = call`, `self.register_buffer("X", call)`."""
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(
            parent.targets[0], ast.Attribute):
        return self_attr(parent.targets[0])
    if isinstance(parent, ast.Call) and call_name(parent) == "register_buffer" and len(
            parent.args) >= 2 and parent.args[1] is call and isinstance(
            parent.args[0], ast.Constant) and isinstance(parent.args[0].value, str):
        return parent.args[0].value
    return None


def _mul_call_as_binop(value: ast.expr) -> ast.BinOp | None:
    """`torch.mul(a, m)` / `a.mul(m)` read as `a * m`."""
    if not (isinstance(value, ast.Call) and call_name(value) == "mul" and not value.keywords):
        return None
    if is_module_call(value) and len(value.args) == 2:
        left, right = value.args
    elif not is_module_call(value) and len(value.args) == 1 and receiver(value) is not None:
        left, right = receiver(value) or value, value.args[0]
    else:
        return None
    return ast.copy_location(ast.BinOp(left, ast.Mult(), right), value)


# Embeddings of positions, times and patches take other integers than token ids.
_NOT_TOKEN_EMBEDDINGS = ("pos", "time", "step", "patch", "rotary", "sinus", "freq", "rel")


# The text every `[:, None, None, :]` subscript holds, however written: `None`, a comma and
# `None`, with only spaces, line breaks, backslashes, parentheses (`(None)`) and comments
# between. A comment runs to its line's end: a comment that could end anywhere made the search
# backtrack exponentially over a block of commented-out code after a `None,` (yourmt3's
# pitchshift_layer.py never finished).
_KEY_AXES_TEXT = re.compile(r"None[\s)\\]*,(?:[\s(\\]|#[^\n]*\n)*None")


def _embedding_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each call that hands a bare name as the first argument to an embedding
    (`self.embedding(x)`, `self.item_emb(seq)`, `F.embedding(ids, w)`): token ids."""
    found: list[tuple[int, str]] = []
    for sub in subnodes(tree):
        if isinstance(sub, ast.Call) and sub.args and isinstance(sub.args[0], ast.Name):
            callee = (last_name(sub.func) or "").lower()
            if "emb" in callee and not any(word in callee for word in _NOT_TOKEN_EMBEDDINGS):
                found.append((sub.lineno, sub.args[0].id))
    return found


def _dtype_tested(function: ast.AST | None, name: str) -> bool:
    """Whether the function reads the dtype of `name` (`name.dtype`, `name.is_floating_point()`):
    it handles masks of more than one kind."""
    return function is not None and any(
        isinstance(n, ast.Attribute) and n.attr in {"dtype", "is_floating_point"}
        and isinstance(n.value, ast.Name) and n.value.id == name for n in subnodes(function))


def _container_class(value: ast.expr) -> str | None:
    """`nn.ModuleList(Block(d) for _ in range(n))`, `nn.ModuleList([Block(d) for ...])`,
    `nn.Sequential(*[Block(d) ...])`: the class every element is an instance of."""
    if not (isinstance(value, ast.Call) and call_name(value) in {"ModuleList", "Sequential"}
            and len(value.args) == 1):
        return None
    arg = value.args[0]
    if isinstance(arg, ast.Starred):
        arg = arg.value
    return _made_instances(arg)


def _made_instances(arg: ast.expr) -> str | None:
    """`[Block(d) for _ in range(n)]`, `(Block(d) for ...)`, `[Block(a), Block(b)]`: the class
    every element is an instance of."""
    if isinstance(arg, (ast.GeneratorExp, ast.ListComp)):
        made = [arg.elt]
    elif isinstance(arg, ast.List):
        made = list(arg.elts)
    else:
        return None
    names = {m.func.id for m in made if isinstance(m, ast.Call) and isinstance(m.func, ast.Name)}
    return names.pop() if len(names) == 1 and len(made) == sum(
        isinstance(m, ast.Call) for m in made) else None


def _class_registries(tree: ast.Module, classes: Iterable[str]) -> dict[int, tuple[str, ...]]:
    """Registries of this file's classes (the dict literals, by `id`), and the classes each
    holds: a dict literal of class names bound to a name (`BLOCKS = {"a": BlockA, "b":
    BlockB}`), items stored by a statement (`BLOCKS["c"] = BlockC`), and classes decorated with
    a function of the module that stores its argument in one (`@register("divided")`, whose
    inner `wrap(cls)` does `ATTENTION_TYPES[name] = cls`: TimeSformer's and fairseq's
    registries). Statements at any depth count (a script's `main()` may hold them all)."""
    statements = _all_statements(tree)
    literals: dict[str, ast.Dict] = {}
    held: dict[str, list[str]] = {}
    for statement, _ in statements:
        # `BLOCKS = {...}`, `BLOCKS: dict[str, type] = {...}`
        target = statement.targets[0] if isinstance(statement, ast.Assign) and len(
            statement.targets) == 1 else statement.target if isinstance(
            statement, ast.AnnAssign) else None
        literal = getattr(statement, "value", None)
        if isinstance(target, ast.Name) and isinstance(literal, ast.Dict):
            names = [v.id for v in literal.values if isinstance(v, ast.Name) and v.id in classes]
            if len(names) == len(literal.values):  # (an empty dict, filled below)
                literals[target.id] = literal
                held[target.id] = names
    if not held:
        return {}
    storing: dict[str, str] = {}  # a decorator function -> the registry it stores into
    for statement, chain in statements:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(
                target := statement.targets[0], ast.Subscript) and isinstance(
                target.value, ast.Name) and target.value.id in held and isinstance(
                statement.value, ast.Name)):
            continue
        # `ATTENTION_TYPES[name] = cls` in `wrap(cls)` of `register(name)`: each function of
        # the chain down to the one taking the stored name stores its argument
        takes = [i for i, function in enumerate(chain) if statement.value.id in {
            a.arg for a in function.args.args}]
        if takes:
            for function in chain[:takes[-1] + 1]:
                storing[function.name] = target.value.id
        elif statement.value.id in classes:
            held[target.value.id].append(statement.value.id)  # `BLOCKS["c"] = BlockC`
    if storing:
        for statement, _ in statements:
            if isinstance(statement, ast.ClassDef):
                for decorator in statement.decorator_list:
                    func = decorator.func if isinstance(decorator, ast.Call) else decorator
                    if isinstance(func, ast.Name) and func.id in storing:
                        held[storing[func.id]].append(statement.name)
    return {id(literals[name]): tuple(dict.fromkeys(names)) for name, names in held.items()
            if names}


def _all_statements(tree: ast.AST, chains: bool = True
                    ) -> list[tuple[ast.stmt, tuple[ast.FunctionDef, ...]]]:
    """Every statement of the module, at any depth, in no particular order, with the functions
    that hold it, outermost first (left empty without `chains`)."""
    found: list[tuple[ast.stmt, tuple[ast.FunctionDef, ...]]] = []
    pending: list[tuple[ast.AST, tuple[ast.FunctionDef, ...]]] = [(tree, ())]
    blocks_of = _BLOCK_FIELDS
    while pending:
        node, chain = pending.pop()
        if isinstance(node, ast.stmt):
            found.append((node, chain))
            if chains and isinstance(node, ast.FunctionDef):
                chain = (*chain, node)
        kind = type(node)
        blocks = blocks_of.get(kind)
        if blocks is None:
            blocks = blocks_of[kind] = tuple(
                f for f in _BLOCK_NAMES if f in getattr(kind, "_fields", ()))
        for block_name in blocks:  # most statements have none
            block = getattr(node, block_name, None)
            if isinstance(block, list):
                pending.extend((child, chain) for child in block)
    return found


def _function_table(value: ast.expr) -> list[str]:
    """`{Backend.EAGER: eager_attention, Backend.SDPA: sdpa_attention}` (or a list or tuple
    of names): the names it holds, when every value is a bare name."""
    if not isinstance(value, (ast.Dict, ast.List, ast.Tuple)):
        return []
    held = value.values if isinstance(value, ast.Dict) else value.elts
    names = [v.id for v in held if isinstance(v, ast.Name)]
    return names if held and len(names) == len(held) else []


def _dispatch_classes(value: ast.expr) -> list[str]:
    """`nn.ModuleDict({"sdpa": SdpaAttention(), "eager": EagerAttention()})` (or `dict(...)`
    keywords, or a ModuleList of a literal list): the classes its elements are instances of,
    when every element is a call of a name."""
    if not (isinstance(value, ast.Call) and call_name(value) in {"ModuleDict", "ModuleList"}
            and len(value.args) == 1):
        return []
    arg = value.args[0]
    made = list(arg.values) if isinstance(arg, ast.Dict) else list(arg.elts) if isinstance(
        arg, (ast.List, ast.Tuple)) else []
    names = [m.func.id for m in made if isinstance(m, ast.Call) and isinstance(m.func, ast.Name)]
    return names if made and len(names) == len(made) else []


def _container_attention(value: ast.expr) -> str | None:
    """`nn.ModuleList([nn.MultiheadAttention(d, h) for _ in range(n)])` (or a generator, or a
    list of such calls): the torch attention module every element is."""
    if not (isinstance(value, ast.Call) and call_name(value) == "ModuleList"
            and len(value.args) == 1):
        return None
    arg = value.args[0]
    made = [arg.elt] if isinstance(arg, (ast.GeneratorExp, ast.ListComp)) else list(
        arg.elts) if isinstance(arg, ast.List) else []
    names = {call_name(m) for m in made if isinstance(m, ast.Call)}
    if not made or len(names) != 1 or len(made) != sum(isinstance(m, ast.Call) for m in made):
        return None
    name, first = names.pop(), made[0]
    return name if name in ATTENTION_CLASSES and isinstance(first, ast.Call) and (
        torch_attention_class(first.func)) else None


def _asserted_bool(test: ast.expr) -> list[str]:
    """The names an assertion says are bool tensors: `x.dtype == torch.bool`, `x.dtype is
    torch.bool`, and `and` of such tests."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [name for value in test.values for name in _asserted_bool(value)]
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.Is))):
        return []
    left, right = test.left, test.comparators[0]
    for dtype_side, other in ((left, right), (right, left)):
        if isinstance(dtype_side, ast.Attribute) and dtype_side.attr == "dtype" and isinstance(
                dtype_side.value, ast.Name) and dtype_of(other) == "bool":
            return [dtype_side.value.id]
    return []


# Roles of a parameter that the function's own arithmetic on its scores gives (see
# `Linter.role_kinds`): a wrong mask there is reported where the function adds or multiplies it
# when every call passes that mask. Not "addmin" (the function adds its own finfo.min plane to
# the mask it is given): there the caller's finfo.min mask is the one to change.
_USE_SITE_ROLES = frozenset({"add", "mul"})


def _parts_of(done: _Scope) -> tuple[Value, ...]:
    """A function whose every return is a tuple of one length (none bare): the facts each
    position shares over the returns; () otherwise."""
    tuples = done.tuple_returns
    if done.kind != "function" or not tuples or len(tuples) != len(done.returns) or (
            done.returns_none or len({len(t) for t in tuples}) != 1):
        return ()
    parts = list(tuples[0])
    for other in tuples[1:]:
        parts = [_join(a, b) for a, b in zip(parts, other, strict=True)]
    return tuple(parts) if any(parts) else ()


def _substituted(expression: ast.expr, name: str, item: ast.expr) -> ast.expr:
    """A copy of `expression` with each read of `name` replaced by `item` (a comprehension's
    element expression for one of the items it loops over)."""

    class _Replace(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id == name and isinstance(node.ctx, ast.Load):
                return item
            return node

    return _Replace().visit(copy.deepcopy(expression))  # type: ignore[no-any-return]


def _yield_parts(done: _Scope) -> tuple[Value, ...]:
    """A generator whose every `yield` gives a tuple of one length: the facts each position
    shares over the yields, what `for a, b in gen(...)` binds; () otherwise."""
    yields = done.yields
    if done.kind != "function" or not yields or any(y is None for y in yields) or len(
            {len(y) for y in yields if y is not None}) != 1:
        return ()
    parts = list(yields[0] or ())
    for other in yields[1:]:
        parts = [_join(a, b) for a, b in zip(parts, other or (), strict=True)]
    return tuple(parts) if any(parts) else ()


def _method_aliases(cls: ast.AST) -> dict[str, tuple[str, ...]]:
    """The attributes a class binds, once and nowhere else, to one of its own methods
    (`self.fn = self._step`, `torch.compile(self._step)`, or either in the branches of an `if`
    expression): by method."""
    methods = {m.name for m in getattr(cls, "body", []) if isinstance(
        m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    bound: dict[str, list[str | None]] = {}
    for node in subnodes(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(
                    target.value, ast.Name) and target.value.id == "self":
                value = node.value if isinstance(node, ast.Assign) and len(
                    node.targets) == 1 else None
                bound.setdefault(target.attr, []).append(
                    _aliased_method(value, methods) if value is not None else None)
    found: dict[str, tuple[str, ...]] = {}
    for attr, picks in bound.items():
        if len(picks) == 1 and picks[0] is not None and attr not in methods:
            found[picks[0]] = (*found.get(picks[0], ()), attr)
    return found


def _aliased_method(value: ast.expr, methods: set[str]) -> str | None:
    """The method of the class `value` is (`self._step`), compiled (`torch.compile(self._step,
    ...)`), or is in every branch of an `if` expression; None for anything else."""
    if isinstance(value, ast.IfExp):
        sides = {_aliased_method(value.body, methods), _aliased_method(value.orelse, methods)}
        return sides.pop() if len(sides) == 1 else None
    if isinstance(value, ast.Call) and module_dotted(value.func) == "torch.compile" and (
            value.args):
        value = value.args[0]
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and (
            value.value.id == "self") and value.attr in methods:
        return value.attr
    return None


def _reshaped_params(node: ast.AST, params: tuple[str, ...], *, combined: bool = False,
                     padded: bool = False) -> frozenset[str]:
    """The parameters a function rebinds (and it does) only as `p = p[...]` or
    `p = p.unsqueeze(1)` and the like: reshapes of themselves, values unchanged; with
    `combined`, also as `p = p & other`, which keeps what True means; with `padded`, also as
    `p = F.pad(p, (0, n), value=False)` (see `_padded_false`)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not params:
        return frozenset()
    rebound: dict[str, bool] = {}
    for sub in _function_body_nodes(node):
        targets = [sub.target] if isinstance(sub, ast.NamedExpr) else _binding_targets(sub)
        for target in targets:
            for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                if name in params:
                    value = sub.value if (isinstance(sub, ast.Assign) and len(
                        sub.targets) == 1 and target is sub.targets[0]) or (
                        isinstance(sub, ast.AnnAssign) and target is sub.target) else None
                    rebound[name] = rebound.get(name, True) and value is not None and (
                        isinstance(target, ast.Name)) and (
                        _reshape_root(_padded_false(value) if padded else value) == name or (
                            combined and _combined_root(value) == name))
    return frozenset(name for name, only in rebound.items() if only)


def _combined_root(node: ast.AST) -> str | None:
    """The name `m & other` (or `other & m[:, None]`) combines with a mask that does not read
    it. Not `m | other`: OR-ing in a causal triangle (True = hidden) says the author reads m as
    True = hidden, whatever the API it then reaches takes (lucidrains/x-transformers#160)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd)):
        return None
    for side, other in ((node.left, node.right), (node.right, node.left)):
        name = _reshape_root(side)
        if name is not None and not any(isinstance(n, ast.Name) and n.id == name
                                        for n in ast.walk(other)):
            return name
    return None


def _reshape_root(node: ast.AST) -> str | None:
    """The name `m[:, None, :]`, `m.unsqueeze(1).expand(...)` or einops' `rearrange(m, "b j ->
    b 1 1 j")` reshapes, if one."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
            continue
        inner = (receiver(node) if call_name(node) in _SHAPE_KEEPING else einops_operand(
            node)) if isinstance(node, ast.Call) else None
        if inner is None:
            return node.id if isinstance(node, ast.Name) else None
        node = inner


def _padded_false(node: ast.AST) -> ast.AST:
    """`m` for `F.pad(m, (0, n), value=False)` (or 0, the default): a padding mask given more
    keys that are not padding, True still meaning padding; `node` itself otherwise."""
    if isinstance(node, ast.Call) and module_dotted(node.func) in F_PAD_NAMES and len(
            node.args) >= 2 and (
            not isinstance(node.args[0], ast.Starred)):
        value = argument(node, 3, "value")
        if value is None or (isinstance(value, ast.Constant) and value.value in (False, 0)
                             and not isinstance(value.value, float)):
            return node.args[0]
    return node


def _function_body_nodes(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """Every node of a function's body, not of the functions, lambdas and classes in it."""
    stack: list[ast.AST] = list(node.body)
    while stack:
        sub = stack.pop()
        yield sub
        if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(sub))


def _none_default(node: ast.If) -> tuple[str, ast.Assign | ast.AnnAssign] | None:
    """`if x is None: x = value` (nothing else, no else branch): x and the assignment."""
    test = node.test
    if node.orelse or len(node.body) != 1 or not (
            isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is)
            and isinstance(test.left, ast.Name) and is_none(test.comparators[0])):
        return None
    stmt = node.body[0]
    target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else (
        stmt.target if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else None)
    if isinstance(target, ast.Name) and target.id == test.left.id:
        return test.left.id, stmt  # type: ignore[return-value]
    return None


def _none_in_block(node: ast.AST, parent: ast.AST, name: str) -> bool | None:
    """Whether the statements before `node` in its block of `parent` bind `name` to None last
    (`name = None`) with nothing after that storing to it: True; False where something else
    binds it last; None where nothing in the block binds it."""
    block = next((stmts for field in _BLOCK_NAMES if isinstance(
        stmts := getattr(parent, field, None), list) and any(s is node for s in stmts)), None)
    if block is None:
        return False
    for stmt in reversed(block[:next(i for i, s in enumerate(block) if s is node)]):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], ast.Name) and stmt.targets[0].id == name:
            return is_none(stmt.value)
        if any(_stores(n, name) for n in ast.walk(stmt)):
            return False
    return None


def _statement_path(root: ast.AST, target: ast.AST) -> list[ast.AST]:
    """The statements from `root` down to `target` (both included), searched through statement
    blocks only; [] where `target` is not below `root`."""
    pending: list[tuple[ast.AST, list[ast.AST]]] = [(root, [root])]
    while pending:
        node, path = pending.pop()
        if node is target:
            return path
        for block_name in _BLOCK_NAMES:
            for child in getattr(node, block_name, None) or ():
                if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                    pending.append((child, [*path, child]))
    return []


def _stores(node: ast.AST, name: str) -> bool:
    """Whether `node` binds `name` (an assignment target, a definition, a global)."""
    if isinstance(node, ast.Name):
        return node.id == name and not isinstance(node.ctx, ast.Load)
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return name in node.names
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
        node.name == name)


def _never_given(signature: _Signature, passed: list[_Passed], param: str,
                 none_upstream: Callable[[_Origin], bool]) -> bool:
    """Whether every call (there is one at least) leaves `param` out where it defaults to
    None, passes None, or hands on its caller's own parameter that is never given
    (`none_upstream`): see `Linter.never_given`."""
    default = signature.defaults.get(param)
    if not passed or any(call.spread or call.forwarded is not None for call in passed):
        return False
    index = signature.positional.index(param) if param in signature.positional else -1
    for call in passed:
        if 0 <= index < len(call.args):
            _, origin = call.args[index]
        elif param in call.keywords:
            _, origin = call.keywords[param]
        elif default is not None and is_none(default):
            continue
        else:
            return False
        if origin is not _PASSED_NONE and (origin is None or not none_upstream(origin)):
            return False
    return True


def _not_none_test(test: ast.expr) -> str | None:
    """The name an `if name is not None:` test is about."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(
            test.ops[0], ast.IsNot) and isinstance(test.left, ast.Name) and is_none(
            test.comparators[0]):
        return test.left.id
    return None


def _fill_target(call: ast.Call) -> tuple[ast.expr | None, int]:
    """The tensor a masked_fill call fills, and where its own arguments start: `x.masked_fill(m,
    v)` (0) or `torch.masked_fill(x, m, v)` (1)."""
    if module_dotted(call.func) == "torch.masked_fill":
        return (call.args[0] if call.args else None), 1
    return receiver(call), 0


def _assigned_to_scores(call: ast.Call, parent: ast.AST | None) -> bool:
    """`scores = <call>` (or `scores: T = <call>`): the fill's result is bound to a name of
    scores."""
    if isinstance(parent, ast.AnnAssign):
        return parent.value is call and _is_score_name(parent.target)
    return isinstance(parent, ast.Assign) and parent.value is call and any(
        _is_score_name(t) for t in parent.targets)


def _says_padding(name: str) -> bool:
    """`pad`, `padding_mask`, `is_pad`, `src_pad`: a name that says True marks padding."""
    hint = name_hint(name)
    if hint is not None and hint.bool_convention is not None:
        return hint.bool_convention == "bool-true-masked"
    words = set(re.split(r"[^a-z]+", name.lower()))
    return bool(words & {"pad", "padding", "padded"}) and words.isdisjoint(
        KEEP_WORDS | NOT_A_MASK_WORDS)


def _role_argument(call: ast.Call, entry: _Role) -> ast.expr | None:
    """What a call passes for the parameter of a `_Role`: by position, or by its name
    (`self.attn(x, mask=keep)`)."""
    if entry.position < len(call.args):
        return call.args[entry.position]
    for kw in call.keywords:
        if kw.arg == entry.param:
            return kw.value
    return None


def _result_of(scope: _Scope) -> Value | None:
    """The facts every return of a function scope gives (None when they share none, or when
    some path returns nothing or the function is a generator)."""
    if scope.kind != "function" or not scope.name or not scope.returns:
        return None
    joined = scope.returns[0]
    for value in scope.returns[1:]:
        joined = _join(joined, value)
    joined = _int_mask_on_one_path(scope.returns, _triangle_on_one_path(scope.returns, joined))
    if not joined or (joined.param_roles and not joined.module) or joined.mha or joined.api:
        # (an instance of a class of the file keeps its forward's roles: `detector = train()`,
        # then `export_onnx(detector)` passes the model that `train` built)
        return None
    # Last: most functions' returns share nothing, and this walks the whole function.
    node = scope.node
    if node is not None and any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in subnodes(node)):
        return None
    return joined


class _CausalInstance(NamedTuple):
    """An instance of a class of the file built with its causal flag possibly True
    (`self.self_attn = Attention(d, is_causal=is_decoder)` in a layer some stack builds with
    `is_decoder=True`) and called with a mask: where it was built and where it was called."""
    built: ast.Call
    called: ast.Call


def _causal_instances(tree: ast.AST) -> dict[tuple[str, str, str], _CausalInstance]:
    """(class, flag attribute, mask parameter of its forward) -> an instance of the class built
    with the `__init__` parameter it stores in that attribute possibly True and called with that
    mask not None. "Possibly True": True, or a parameter of the `__init__` that builds it which
    some construction of that class gives possibly True (BART's `is_decoder`)."""
    classes: dict[str, ast.ClassDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            classes.setdefault(node.name, node)
    # Every function of the file with its class, and every call each one makes (at any depth:
    # a comprehension's, a nested function's too).
    owners: list[tuple[str, ast.AST]] = [("", tree)]
    for name, cls in classes.items():
        owners.extend((name, m) for m in cls.body if isinstance(
            m, (ast.FunctionDef, ast.AsyncFunctionDef)))

    def method(cls: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        node = classes.get(cls)
        for m in node.body if node is not None else ():
            if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == name:
                return m
        return None

    def params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
        return [a.arg for a in (*func.args.posonlyargs, *func.args.args)][1:]

    def given(call: ast.Call, func: ast.FunctionDef | ast.AsyncFunctionDef, name: str
              ) -> ast.expr | None:
        """What `call` gives `func`'s parameter `name` (its default where it gives none)."""
        names = params(func)
        if name in names and names.index(name) < len(call.args):
            arg = call.args[names.index(name)]
            return None if isinstance(arg, ast.Starred) else arg
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        every = [*func.args.posonlyargs, *func.args.args]
        defaults = dict(zip([a.arg for a in every][len(every) - len(func.args.defaults):],
                            func.args.defaults, strict=True))
        defaults.update((a.arg, d) for a, d in zip(
            func.args.kwonlyargs, func.args.kw_defaults, strict=True) if d is not None)
        return defaults.get(name)

    constructions: dict[str, list[tuple[ast.Call, str, ast.AST]]] = {}
    for owner, func in owners:
        for node in (ast.walk(func) if owner else _module_level_nodes(func)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                    node.func.id in classes):
                constructions.setdefault(node.func.id, []).append((node, owner, func))

    visiting: set[tuple[str, str]] = set()

    def possibly_true(expr: ast.expr | None, owner: str, func: ast.AST) -> bool:
        if expr is None:
            return False
        if is_true(expr):
            return True
        if not (isinstance(expr, ast.Name) and owner and isinstance(func, ast.FunctionDef)
                and func.name == "__init__" and expr.id in params(func)):
            return False
        key = (owner, expr.id)
        if key in visiting:
            return False
        visiting.add(key)
        try:
            return any(not _has_star(call) and possibly_true(given(call, func, expr.id), o, f)
                       for call, o, f in constructions.get(owner, ()))
        finally:
            visiting.discard(key)

    found: dict[tuple[str, str, str], _CausalInstance] = {}
    for name in classes:
        init, forward = method(name, "__init__"), method(name, "forward")
        if init is None or forward is None:
            continue
        stored = _stored_parameters(init)
        if not stored:
            continue
        for call, owner, func in constructions.get(name, ()):
            if _has_star(call):
                continue
            flags = [(attr, param) for attr, param in stored.items()
                     if possibly_true(given(call, init, param), owner, func)]
            if not flags:
                continue
            for attr, _ in flags:  # built so, whatever its calls pass (MC510 reads this)
                found.setdefault((name, attr, ""), _CausalInstance(call, call))
            for called in _instance_calls(func, owner, call, classes):
                for mask in params(forward):
                    passed = given(called, forward, mask)
                    if passed is not None and not is_none(passed) and not _has_star(called):
                        for attr, _ in flags:
                            found.setdefault((name, attr, mask), _CausalInstance(call, called))
    return found


def _has_star(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Starred) for a in call.args) or any(
        kw.arg is None for kw in call.keywords)


def _module_level_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a module outside its functions and classes."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(
            child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))


def _stored_parameters(init: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """`self.attr = param` (or a tuple of them) in an `__init__`: attr -> param."""
    names = {a.arg for a in (*init.args.args, *init.args.kwonlyargs)}
    stored: dict[str, str] = {}
    for node in ast.walk(init):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = zip(target.elts, node.value.elts, strict=False) if isinstance(
                target, ast.Tuple) and isinstance(node.value, ast.Tuple) else [
                (target, node.value)]
            for t, v in pairs:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and (
                        t.value.id == "self") and isinstance(v, ast.Name) and v.id in names:
                    stored[t.attr] = v.id
    return stored


def _instance_calls(func: ast.AST, owner: str, built: ast.Call,
                    classes: dict[str, ast.ClassDef]) -> list[ast.Call]:
    """The calls of the instance `built` makes: `self.attn = Attention(...)` (alone, in a
    conditional or in a ModuleList) in a method of `owner`, then `self.attn(...)` or `for layer
    in self.layers: layer(...)` in any method of that class; `attn = Attention(...)` at module
    level, then `attn(...)` there."""
    scope: ast.AST | None = classes.get(owner) if owner else func
    if scope is None:
        return []
    target: ast.expr | None = None
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and any(
                n is built for n in ast.walk(node.value)):
            target = node.targets[0]
            break
    if owner and isinstance(target, ast.Attribute) and isinstance(
            target.value, ast.Name) and target.value.id == "self":
        attr = target.attr

        def is_instance(node: ast.AST) -> bool:
            return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(
                node.value, ast.Name) and node.value.id == "self"
    elif not owner and isinstance(target, ast.Name):
        name = target.id

        def is_instance(node: ast.AST) -> bool:
            return isinstance(node, ast.Name) and node.id == name
    else:
        return []
    calls: list[ast.Call] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and is_instance(node.func):
            calls.append(node)
        elif isinstance(node, ast.For) and is_instance(node.iter) and isinstance(
                node.target, ast.Name):
            element = node.target.id
            calls.extend(n for stmt in node.body for n in ast.walk(stmt) if isinstance(
                n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == element)
    return calls


def _triangle_on_one_path(returns: list[Value], joined: Value) -> Value:
    """`return pad | tril` on one path and `return pad` on the other (OpenNMT's
    `_compute_dec_mask`): a bool mask that holds the lower triangle where it holds any. Every
    path's mask is read the same way by the caller, so a triangle that points the wrong way
    for that reading is wrong on the path that has it (MC521 where the caller reads it)."""
    if joined.tri is not None or joined.dtype != "bool":
        return joined
    sites = {(v.tri, v.tri_at) for v in returns if v.tri is not None}
    if len(sites) != 1:
        return joined
    ((tri, tri_at),) = sites
    if tri not in {"lower", "slower"} or any(v.tri is None and (
            v.hides_above or v.all_ones or v.additive or v.finfo_min or v.number is not None)
            for v in returns):
        return joined
    return replace(joined, tri=tri, tri_at=tri_at)


def _numpy_call(call: ast.Call) -> bool:
    """`np.full(...)`, `numpy.logical_or(...)`, `jnp.where(...)`: an array function, not torch's."""
    return (module_dotted(call.func) or "").split(".")[0] in {"np", "numpy", "jnp"}


def _int_mask_on_one_path(returns: list[Value], joined: Value) -> Value:
    """A tokenizer's (or int-cast) 0/1 mask returned on one path and bool masks on the others:
    the caller's `~` of the result is -2/-1 on that path (MC518)."""
    if joined.dtype is not None or len(returns) < 2 or not any(
            v.dtype == "int" and (v.hf_keep or v.int_mask) for v in returns) or any(
            v.dtype not in {"int", "bool"} for v in returns):
        return joined
    return replace(joined, int_on_a_path=True)


def _defined_names(tree: ast.AST) -> tuple[set[str], dict[str, _ClassShape]]:
    """The names of every function and class the module defines, at any depth, and the shape
    of each class among them. A definition is a statement, so only statement lists are
    searched, not expressions (the same set as `ast.walk` finds, for a fraction of the
    nodes)."""
    names: set[str] = set()
    classes: dict[str, _ClassShape] = {}
    for node, _ in _all_statements(tree, chains=False):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                bases = tuple(b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                              if isinstance(b, (ast.Name, ast.Attribute)))
                defined = [m for m in node.body if isinstance(
                    m, (ast.FunctionDef, ast.AsyncFunctionDef))]
                methods = frozenset(m.name for m in defined)
                static = frozenset(m.name for m in defined if _is_static(m))
                # (a class name defined twice keeps its first definition's shape)
                classes.setdefault(node.name, _ClassShape(bases, methods, static))
    return names, classes


class _ClassShape(NamedTuple):
    """A class of the file: the names of its bases, and the methods its body defines."""
    bases: tuple[str, ...]
    methods: frozenset[str]
    static: frozenset[str] = frozenset()  # the @staticmethods among them


def _hiding_triangle(facts: Value) -> dict[str, Any]:
    """The facts of a bool triangle built the right way round for a fill (True above the
    diagonal: hidden) that every call gives a fill condition: its diagonal is read at the fill
    and reported where it was built (SongNet's `SelfAttentionMask` handed down two modules);
    its direction is checked at the calls."""
    if facts.dtype == "bool" and facts.tri == "upper" and facts.tri_at is not None:
        return {"tri": facts.tri, "tri_at": facts.tri_at, "hides_above": True}
    return {}


def _method_owner(classes: dict[str, _ClassShape], cls: str, method: str) -> str:
    """The class of the file whose method `self.method` of a `cls` method calls: `cls` where
    its body defines it, else the first base (depth first, as a simple MRO) that does
    (`class BertForMaskedLM(nn.Module, ModuleUtilsMixin)` calling the mixin's
    `get_extended_attention_mask`); `cls` where none of the file does."""
    seen: set[str] = set()
    stack = [cls]
    while stack:
        name = stack.pop(0)
        shape = classes.get(name)
        if shape is None or name in seen:
            continue
        seen.add(name)
        if method in shape.methods:
            return name
        stack[:0] = shape.bases
    return cls


_BLOCK_NAMES = ("body", "orelse", "finalbody", "handlers", "cases")
# Node type -> which of `_BLOCK_NAMES` it has, filled in as types are met.
_BLOCK_FIELDS: dict[type, tuple[str, ...]] = {}


def _batch_attention_mask(node: ast.AST) -> bool:
    """`batch["attention_mask"]`: the tokenizer field of a collated batch (int64, 1 = real
    token, as Hugging Face's collators give it)."""
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and (
        node.slice.value in COLLATED_MASK_KEYS)


def _asserted_off(test: ast.expr) -> set[str]:
    """The names an assert holds None or false: `x is None`, `not x`, and `and` of them."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return set().union(*(_asserted_off(v) for v in test.values))
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        name = dotted(test.operand)
        return {name} if name is not None else set()
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is)
            and is_none(test.comparators[0])):
        name = dotted(test.left)
        return {name} if name is not None else set()
    return set()


def _needed_names(test: ast.expr) -> set[str]:
    """The names an `if` test needs set (not None, true) to read true: `x`, `x is not None`,
    and `and` of them; an `or` needs none of its sides alone."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return set().union(*(_needed_names(v) for v in test.values))
    if isinstance(test, (ast.Name, ast.Attribute)):
        name = dotted(test)
        return {name} if name is not None else set()
    if (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.IsNot) and is_none(test.comparators[0])):
        name = dotted(test.left)
        return {name} if name is not None else set()
    return set()
# Methods that keep which positions a mask marks (for `_note_role`).
# The bases of an Enum class, whose members compare as flags (`self.kind is Kind.CAUSAL`).
_ENUM_BASES = frozenset({"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"})
# The facts a parameter takes from its calls (see `Linter._seeded_parameters`): what the rules
# read of a mask, a flag or a fill value; not dtypes of data (float16 callers are MC501's own
# second walk) nor what a module or function is.
_SEED_FACTS = frozenset({
    "additive", "finfo_min", "zero_one", "flag", "int_mask", "tri", "hf_keep", "hf_keep_inverted",
    "pad_keep", "tokens", "cached", "number", "float01", "padding01", "keep_mask", "cast01",
    "wide_finfo", "dtype", "namespace", "tri_at", "floated_at",
    # a pair mask (query axis AND key axis): a padded query's row is empty (MC507)
    "pair_keep",
    # an integer mask on one path of a helper's returns (MC518 at a `~` of it)
    "int_on_a_path",
    # `batch["attention_mask"]` of a batch not known here: the collator's int64 (MC518 at a
    # `~` of it in the function it is handed to, as at one in the caller)
    "collated",
    # the integer literal 0: a cache offset every call starts at (MC510 reads no cache)
    "int_zero",
    # an instance of a class of this file, or of torch's attention modules, given to a
    # constructor (`TransformerWrapper(attn_layers=Encoder(...))`): what its calls do
    "module", "mha", "member",
    # a list of instances of a class of this file (`Encoder([EncoderLayer(...) for ...])`),
    # which the constructor holds in a ModuleList: what each element's calls do
    "element_module",
    # a (batch, 1, seq, 1) padding layout and where it was made (MC514 is reported there)
    "layout", "layout_at",
    # a tuple of masks a function returned, passed whole (`attn(x, masks)`): its positions
    "held_parts",
    # a DataLoader's collate_fn (`evaluate(model, loader)`, then `model(**batch)` in its loop)
    "element_dict",
    # a dict a function of this file returned (`align(model, collate(rows))`, `model(**batch)`)
    "dict_of",
    # a float dtype (`get_extended_attention_mask(mask, shape, hidden_states.dtype)`): a cast
    # to the parameter makes a mask float
    "float_dtype"})


# Parameter names that say the value is added to the scores: an additive bias, not a mask.
_ADDITIVE_NAME = re.compile(r"(?:^|_)(?:bias|biases)$|^additive_|_additive$|^additive$")


def _names_additive(param: str) -> bool:
    return bool(_ADDITIVE_NAME.search(param.lower()))


def _names_padding(param: str) -> bool:
    """A parameter named for True = masked (`pad`, `key_padding_mask`, `src_mask`,
    `invalid`): a helper that fills where it is True reads it as its name says, and a caller
    passing a keep-mask passes the wrong one."""
    hint = name_hint(param)
    if hint is not None and hint.bool_convention == "bool-true-masked":
        return True
    lowered = param.lower()
    return any(word in lowered for word in ("pad", "invalid", "ignore", "masked", "drop"))


def _keeps(facts: Value) -> bool:
    """A keep-mask (True / 1 = may attend) by how it was made or named."""
    return (facts.hf_keep or facts.pad_keep or facts.keep_mask) and not facts.hf_keep_inverted


class _Defaults(dict[str, Value]):
    """A record's field defaults (`Linter._class_fields`), less those the file sets, which
    `settle` removes on the first read (`Linter._defaults_that_hold`)."""

    def __init__(self, fields: dict[str, Value],
                 settle: Callable[[dict[str, Value]], dict[str, Value]]) -> None:
        super().__init__(fields)
        self._settle: Callable[[dict[str, Value]], dict[str, Value]] | None = settle

    def _settled(self) -> None:
        if self._settle is not None:
            settle, self._settle = self._settle, None
            kept = settle(dict(dict.items(self)))
            for key in [key for key in dict.__iter__(self) if key not in kept]:
                dict.__delitem__(self, key)

    def __getitem__(self, key: str) -> Value:
        self._settled()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._settled()
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._settled()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self._settled()
        return super().__iter__()

    def __len__(self) -> int:
        self._settled()
        return super().__len__()

    def keys(self) -> Any:
        self._settled()
        return super().keys()

    def values(self) -> Any:
        self._settled()
        return super().values()

    def items(self) -> Any:
        self._settled()
        return super().items()


def _fields_set_outside(tree: ast.AST | None) -> tuple[dict[str, set[str]], frozenset[str]]:
    """See `Linter._defaults_that_hold`: by class name, the fields its constructions set
    (keywords, `#i` for the i-th positional argument, `**` for a spread); and the attribute
    names set anywhere else (`cfg.x = ...` not on `self`, `replace(cfg, x=...)`)."""
    by_class: dict[str, set[str]] = {}
    anywhere: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call):
            name = call_name(node)
            if name in {"replace", "_replace", "evolve"}:
                anywhere.update(kw.arg for kw in node.keywords if kw.arg)
            elif isinstance(node.func, ast.Name):
                set_here = by_class.setdefault(node.func.id, set())
                set_here.update(kw.arg or "**" for kw in node.keywords)
                for i, arg in enumerate(node.args):
                    set_here.add("**" if isinstance(arg, ast.Starred) else f"#{i}")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            anywhere.update(t.attr for t in targets if isinstance(t, ast.Attribute) and not (
                isinstance(t.value, ast.Name) and t.value.id in {"self", "cls"}))
    return by_class, frozenset(anywhere)


def _field_order(node: ast.ClassDef) -> list[str]:
    """The names a construction's positional arguments fill, in order: `__init__`'s
    parameters after `self`, or else the annotated fields of a record's body."""
    init = next((m for m in node.body if isinstance(m, ast.FunctionDef)
                 and m.name == "__init__"), None)
    if init is not None:
        return [a.arg for a in [*init.args.posonlyargs, *init.args.args]][1:]
    return [stmt.target.id for stmt in node.body if isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)]


def _init_defaults(node: ast.AST | None) -> dict[str, ast.expr]:
    """The attributes a class's `__init__` sets straight from a parameter with a constant
    default (`self.mask_fill_value = mask_fill_value`), and no other method rebinds: their
    defaults."""
    if not isinstance(node, ast.ClassDef):
        return {}
    init = next((m for m in node.body if isinstance(m, ast.FunctionDef)
                 and m.name == "__init__"), None)
    if init is None:
        return {}
    args = init.args
    positional = [*args.posonlyargs, *args.args]
    defaults = {a.arg: d for a, d in [
        *zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
        *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
        if d is not None and isinstance(
            d.operand if isinstance(d, ast.UnaryOp) else d, ast.Constant)}
    if not defaults:
        return {}
    rebound = {t.attr for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
               and m is not init for t in subnodes(m) if isinstance(t, ast.Attribute)
               and isinstance(t.ctx, ast.Store)}
    found: dict[str, ast.expr] = {}
    for stmt in init.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(target := stmt.targets[0], ast.Attribute)
                and isinstance(target.value, ast.Name) and target.value.id == "self"
                and isinstance(stmt.value, ast.Name) and stmt.value.id in defaults
                and target.attr not in rebound):
            found[target.attr] = defaults[stmt.value.id]
    return found


def _instance_fields(node: ast.AST | None, values: dict[str, Value]) -> dict[str, Value]:
    """The masks a plain class's `__init__` binds to `self.<name>` (see
    `Linter._instance_fields`): none for a class with a base (a module, a record, a
    subclass), or an attribute another method of the class rebinds."""
    if not isinstance(node, ast.ClassDef) or node.bases or node.keywords:
        return {}
    bound: set[str] = set()
    rebound: set[str] = set()
    for method in node.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            (bound if method.name == "__init__" else rebound).update(
                t.attr for t in subnodes(method) if isinstance(t, ast.Attribute) and isinstance(
                    t.ctx, ast.Store) and isinstance(t.value, ast.Name) and t.value.id == "self")
    fields = {}
    for attr in bound - rebound:
        if (value := values.get("self." + attr)) is not None and (facts := _seedable(value)):
            fields[attr] = facts
    return fields


def _seedable(facts: Value, *, part: bool = False) -> Value:
    """What of a value a parameter may take from its calls (see `_SEED_FACTS`)."""
    if not facts:
        return facts
    kept = {name: fact for name, fact in facts.__dict__.items() if name in _SEED_FACTS}
    if facts.dtype not in {"bool", "int"}:
        kept.pop("dtype", None)  # a data tensor's float dtype: MC501's own second walk
        if facts.zero_one and facts.dtype in FLOAT_DTYPES and not facts.all_ones:
            # what the dtype said of a mask is kept: a float of 0s and 1s (`torch.tensor([[1.,
            # 0.]])` handed to a pooling that multiplies its logits by it, MC520)
            kept["float01"] = True
    if facts.number is not None and not facts.number < -FP16_MAX:
        kept.pop("number", None)  # only a masking value is read from a number
    if facts.flag is None:
        # (a False flag is kept: `A(is_causal=False)` overrides the parameter's default True)
        kept.pop("flag", None)
    if facts.layout != "B1S1" and not part:
        # (a (batch, seq) layout stays with its maker: MC515 reads it at the calls it is
        # passed to, and a seed would report it a second time inside the function; a tuple's
        # position is not read at the call that passes the tuple)
        kept.pop("layout", None)
        kept.pop("layout_at", None)
    if facts.held_parts:
        kept["held_parts"] = tuple(_seedable(p, part=True) if isinstance(p, Value) else p
                                   for p in facts.held_parts)
    return Value(**kept)


# Mask roles and the role of the same parameter read inverted (`~m`, `m == 0`): True = keep
# (SDPA's bool attn_mask, `masked_fill(m == 0, ...)`) against True = masked (a fill condition,
# the key_padding_mask of torch's attention modules).
_BELOW = {"lower": "on and below", "slower": "below"}  # where a lower triangle's True entries sit
# The roles in which a (B, 1, L, 1) padding mask hides query rows: a fill condition, SDPA's mask.
_QUERY_AXIS_ROLES = frozenset({"keep-fill", "drop-fill", "keep-sdpa", "drop-sdpa"})
# The roles in which a (B, S) padding mask is read as (queries, keys): attn_mask as it is.
_LAYOUT_ROLES = frozenset({"shape-sdpa", "shape-mha"})


def _returns_only_a_call(node: ast.AST | None) -> bool:
    """A function whose body (after its docstring) is `return f(...)`: another name for f."""
    body = getattr(node, "body", None)
    if not isinstance(body, list):
        return False
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(
        body[0].value, ast.Call)


# Parameter names that take SDPA's or MHA's attn_mask as it is: a caller that passes a
# (batch, seq) padding mask for one is the slip (HittER's `layer(ctx, attn_mask=keep)`).
_ATTN_MASK_PARAMS = frozenset({"attn_mask", "attention_bias", "attn_bias"})
# Casts that keep a tensor's axes (and a mask's meaning up to its direction).
_LAYOUT_KEEPING_CASTS = frozenset({"bool", "to", "float", "half", "bfloat16", "long", "int",
                                   "type", "type_as", "contiguous", "detach", "clone", "cuda",
                                   "cpu"})  # (`m.logical_not()` is read as an inversion first)
# Roles that read a parameter as True / 1 = may attend, and as True / 1 = masked.
_KEEP_ROLES = frozenset({"keep-sdpa", "keep-fill", "keep-mha"})
_DROP_ROLES = frozenset({"drop-sdpa", "drop-fill", "drop-mha"})


def _read_at(roles: tuple[_Role, ...], position: int, kinds: frozenset[str]) -> _Role | None:
    """The function's first reading of the parameter at `position` as one of `kinds`: where a
    model reads a mask one way, a single reading the other way is the slip (MC511, MC519)."""
    return next((r for r in roles if r.position == position and r.role in kinds), None)


_FLIPPED_ROLES = {"keep-sdpa": "drop-sdpa", "drop-sdpa": "keep-sdpa", "drop-fill": "keep-fill",
                  "keep-fill": "drop-fill", "drop-mha": "keep-mha", "keep-mha": "drop-mha"}
_ROLE_KEEPING = frozenset({"unsqueeze", "view", "reshape", "expand", "expand_as", "bool",
                           "contiguous", "to", "type_as", "repeat", "squeeze", "flatten"})
# ... of them, those that keep the values (and the dtype) as they are.
_SHAPE_KEEPING = _ROLE_KEEPING - {"bool", "to", "type_as"}


def _fills_zero(call: ast.Call) -> bool:
    """`w.masked_fill(m, 0)`, `masked_fill_(m, 0.0)`: a fill with zero."""
    shift = 1 if is_module_call(call) else 0
    value = argument(call, 1 + shift, "value")
    return value is not None and number(value) == 0


# Calls that fill where a condition holds (read by MC503 for a triangle made elsewhere).
_FILLS_BY_CONDITION = frozenset({"masked_fill", "masked_fill_", "where"})


def _held_by_attribute(value: Value, read_once: bool = False) -> Value:
    """What `self.X` holds of a value: not where a triangle was turned, since a buffer may be
    read right on one path and wrong on another (MC521 then stays at the wrong use); except a
    True triangle on and above the diagonal (`triu` of ones with diagonal 0), which no reading
    makes right: its fix is where it is made (MC503); and a triangle the class reads in one
    place only (open_clip's `build_causal_mask` buffer), whose one reading is the wrong one."""
    if value.tri_at is None or read_once or (value.tri == "upper" and value.hides_above):
        return value
    return replace(value, tri_at=None)


def _placed(made: tuple[int, int, int]) -> ast.Name:
    """A node standing at a place a fact was made (`Value.layout_at`, `Value.tri_at`), for a
    finding reported there rather than at the use."""
    return ast.Name("mask", ast.Load(), lineno=made[0], col_offset=made[1], end_lineno=made[2])


def _inverted_operand(node: ast.AST) -> ast.AST | None:
    """`m` for `m == 0`, `~m`, `m.logical_not()`, `m.eq(0)`, `torch.logical_not(m)`."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(
            node.ops[0], ast.Eq) and is_zero(node.comparators[0]):
        return node.left
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
        return node.operand
    if isinstance(node, ast.Call):
        name = call_name(node)
        base = receiver(node)
        if name == "logical_not":
            return node.args[0] if is_module_call(node) and node.args else base
        if name == "eq" and base is not None and node.args and is_zero(node.args[0]):
            return base
    return None


def _temperature(node: ast.AST) -> bool:
    """A number, or a name that says it is a temperature or a scale (`softmax_temp`, `tau`,
    `self.scale`): what scores are multiplied or divided by before softmax."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return True
    name = (last_name(node) or "").lower()
    return any(w in name for w in ("temp", "scale", "tau")) and "mask" not in name


def _softmax_names(call: ast.Call) -> list[str]:
    """The names a softmax call is given: `s.softmax(-1)`, `F.softmax(s)`,
    `torch.log_softmax(s, -1)`, and each term of a sum it is given (`softmax(s + bias, -1)`,
    `(s + m).softmax(-1)`): whatever is added there is added to the scores."""
    names: list[str] = []
    if call_name(call) in {"softmax", "log_softmax"}:
        base = receiver(call)
        if base is not None and not is_module_call(call):
            names += _summed_names(_unshifted(base))
        if call.args:  # `F.softmax(s)`, and `self.softmax(s)` of an nn.Softmax
            names += _summed_names(_unshifted(call.args[0]))
    elif _softmax_module_call(call) and call.args:
        names += _summed_names(_unshifted(call.args[0]))
    return names


def _softmax_module_call(call: ast.Call) -> bool:
    """`nn.Softmax(dim=-1)(scores)`: a softmax module built and called at once (the original
    BERT's and DNABERT's attention)."""
    return isinstance(call.func, ast.Call) and call_name(call.func) in {"Softmax", "LogSoftmax"}


def _unshifted(node: ast.AST) -> ast.AST:
    """`s` of `s - s.max()` (also `amax`, `max(...)[0]`, `.values`, `logsumexp`): the scores
    shifted for a stable softmax (ReChorus' `(scores - scores.max()).softmax(dim=-1)`); and of
    `temp * s`, `s / temperature`, `s * self.scale`: the scores at a temperature
    (fast-transformers' `softmax(softmax_temp * QK)`); and of `s.float()` (fairseq's and
    MulT's `F.softmax(attn_weights.float(), dim=-1)`): the scores upcast for the softmax."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr in {"float", "double"}) and not node.args and not node.keywords:
        node = node.func.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
        for scores, factor in ((node.left, node.right), (node.right, node.left)):
            if _temperature(factor) and not (isinstance(node.op, ast.Div) and factor is node.left):
                return scores
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        right = node.right
        while isinstance(right, ast.Subscript) or (
                isinstance(right, ast.Attribute) and right.attr == "values"):
            right = right.value
        if isinstance(right, ast.Call) and call_name(right) in {"max", "amax", "logsumexp"}:
            return node.left
    return node


# The nodes a `_Scope` can read (its `node`): the module, a class, a function or a lambda.
_SCOPE_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _softmax_inputs_by_scope(tree: ast.AST | None, source: str) -> dict[int, frozenset[str]]:
    """For each module, class, function and lambda node of the tree (by `id`) that has any:
    the names passed to softmax anywhere below it, nested definitions included (a scope's
    score tensors by their use). One walk of the module answers every scope, where a walk of
    each scope that asks would read each node once per enclosing scope; and the walk enters
    only statements whose lines can hold such a call (see `_lines_that_may_name`)."""
    found: dict[int, set[str]] = {}
    if tree is None:
        return {}
    lines = _lines_that_may_name(source, "softmax", tree)
    if lines is not None:
        # (and `nn.Softmax(dim=-1)(scores)`: see `_softmax_module_call`)
        capital = _lines_that_may_name(source, "Softmax", tree) or []
        lines = sorted({*lines, *capital})
    if lines is not None and not lines:
        return {}
    fields_of = WALK_FIELDS
    stack: list[tuple[ast.AST, tuple[int, ...]]] = [(tree, ())]
    pop, push = stack.pop, stack.append
    while stack:
        node, owners = pop()
        kind = type(node)
        if kind is ast.Call:
            names = _softmax_names(node)  # type: ignore[arg-type]
            if names:
                for owner in owners:
                    found.setdefault(owner, set()).update(names)
        elif lines is not None and isinstance(node, ast.stmt) and not _has_line_within(
                lines, _first_line(node), node.end_lineno or node.lineno):
            continue  # no line of it names softmax: no call below it does
        if kind in _SCOPE_NODES:
            owners = (*owners, id(node))
        fields = fields_of.get(kind)
        if fields is None:  # a node class the grammar table does not know
            for child in ast.iter_child_nodes(node):
                push((child, owners))
            continue
        for name in fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            if type(value) is list:
                for child in value:
                    if child is not None:
                        push((child, owners))
            else:
                push((value, owners))
    return {owner: frozenset(names) for owner, names in found.items()}


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _lines_that_may_name(source: str, word: str, tree: ast.AST) -> list[int] | None:
    """The 1-based lines of `source` (the text `tree` was parsed from) where an identifier
    `word` can be written: those with the word in them, and those with a non-ASCII character
    (Python reads identifiers in NFKC form: `ｓoftmax` is `softmax`). A node spelling the name
    sits on one of them. None when the lines cannot be counted as the parser did (a carriage
    return) or the source cannot be the tree's (it is shorter)."""
    body = getattr(tree, "body", None)
    last = body[-1].end_lineno if isinstance(body, list) and body else 0
    if not source or "\r" in source or (last or 0) > source.count("\n") + 1:
        return None
    positions = []
    start = source.find(word)
    while start >= 0:
        positions.append(start)
        start = source.find(word, start + len(word))
    if not source.isascii():
        positions += [m.start() for m in _NON_ASCII.finditer(source)]
        positions.sort()
    lines: list[int] = []
    line, at = 1, 0
    for pos in positions:
        line += source.count("\n", at, pos)
        at = pos
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def _first_line(stmt: ast.stmt) -> int:
    """A statement's first line, its decorators included (they sit above `def` / `class`)."""
    decorators = getattr(stmt, "decorator_list", None)
    return min(stmt.lineno, *(d.lineno for d in decorators)) if decorators else stmt.lineno


def _has_line_within(lines: list[int], first: int, last: int) -> bool:
    i = bisect.bisect_left(lines, first)
    return i < len(lines) and lines[i] <= last


def _summed_names(node: ast.AST) -> list[str]:
    """The plain names among the terms of `a + b + c` (or the one name `a`)."""
    return [term.id for term in _added_terms(node) if isinstance(term, ast.Name)]


def _similarity_name(node: ast.AST) -> bool:
    """`sim[...]`, `cos_sim[...]`: a similarity matrix, whose diagonal (self-pairs) is often
    dropped on purpose before a top-k of distinct pairs."""
    text = (dotted(node.value if isinstance(node, ast.Subscript) else node) or "").lower()
    return not set(re.split(r"[^a-z]+", text)).isdisjoint(_SIM_TOKENS)


def _runs_when_true(branch: ast.If, node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether `node` runs when `branch`'s test reads true: in its body (its else branch for
    `if not x:` / `if x is None:`)."""
    at = node
    while parents.get(id(at)) is not branch:
        at = parents[id(at)]
    in_body = any(stmt is at for stmt in branch.body)
    test = branch.test
    negated = (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)) or (
        isinstance(test, ast.Compare) and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Is, ast.Eq))
        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None)
    return in_body != negated


def _enclosing_ifs(node: ast.AST, parents: dict[int, ast.AST]) -> list[ast.If]:
    """The `if` statements around `node`, inside its function."""
    found: list[ast.If] = []
    at = parents.get(id(node))
    while at is not None and not isinstance(at, _FUNCTION_NODES):
        if isinstance(at, ast.If):
            found.append(at)
        at = parents.get(id(at))
    return found


def _enclosing_function(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    at = parents.get(id(node))
    while at is not None and not isinstance(at, _FUNCTION_NODES):
        node, at = at, parents.get(id(at))
    return at if at is not None else node


_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _test_names(test: ast.expr) -> set[str]:
    """The names and dotted attributes an `if` test reads (`use_kv_cache`, `self.kv_cache`)."""
    names = {dotted(n) for n in subnodes(test) if isinstance(n, (ast.Name, ast.Attribute))}
    return {n for n in names if n is not None and n != "self"}


def _stored_dotted(stmt: ast.Assign | ast.AugAssign | ast.AnnAssign) -> set[str]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return {dotted(n) or "" for t in targets for n in subnodes(t)
            if isinstance(n, (ast.Name, ast.Attribute))}


_MHA_CLASSES = frozenset({"MultiheadAttention", "Transformer", "TransformerEncoderLayer",
                          "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder"})


def _record_classes(tree: ast.AST) -> dict[str, tuple[str, ...]]:
    """The NamedTuple and dataclass classes of the file (at any depth): their fields in
    order."""
    found: dict[str, tuple[str, ...]] = {}
    for node in subnodes(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {module_dotted(b) or "" for b in node.bases}
        decorators = {module_dotted(d.func if isinstance(d, ast.Call) else d) or ""
                      for d in node.decorator_list}
        if not ({"NamedTuple", "typing.NamedTuple"} & bases or {
                "dataclass", "dataclasses.dataclass"} & decorators):
            continue
        found[node.name] = tuple(
            stmt.target.id for stmt in node.body
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name))
    return found


def _annotation_name(annotation: ast.expr | None) -> str | None:
    """`torch.Tensor`, `nn.MultiheadAttention` or its string form `"nn.MultiheadAttention"`."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value
    return None if annotation is None else module_dotted(annotation)


def _annotated_mha(annotation: ast.expr | None) -> bool:
    """A parameter annotated as one of torch's own attention modules (True = padding)."""
    name = _annotation_name(annotation)
    return name is not None and name.split(".")[-1] in _MHA_CLASSES and (
        "." not in name or name.split(".")[0] in {"nn", "torch"})


def _annotated_tensor(annotation: ast.expr | None) -> bool:
    """Annotated `torch.Tensor` / `Tensor` itself (not Optional: `None == 0` is a Python bool)."""
    return _annotation_name(annotation) in {"Tensor", "torch.Tensor"}


def _branch_of_none(owner: ast.AST, fieldname: str, name: str) -> bool:
    """Whether the `fieldname` block of `owner` runs only where `name` is None: the else of
    `if name is not None` (or of an `or` holding it), the body of `if name is None` (or of an
    `and` holding it). helical's `if need_weights or merged_mask is not None: ... else:
    sdpa_is_causal = True`."""
    if not isinstance(owner, ast.If):
        return False
    test = owner.test
    tests = test.values if isinstance(test, ast.BoolOp) else [test]
    wanted_op = ast.IsNot if fieldname == "orelse" else ast.Is
    joiner_ok = not isinstance(test, ast.BoolOp) or isinstance(
        test.op, ast.Or if fieldname == "orelse" else ast.And)
    return joiner_ok and fieldname in {"body", "orelse"} and any(
        isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], wanted_op)
        and isinstance(t.left, ast.Name) and t.left.id == name and is_none(t.comparators[0])
        for t in tests)


def _elif_of_none(branch: ast.AST, above: ast.If | None, name: str) -> bool:
    """Whether the body of `branch`, the `elif` of `above`, runs only where `name` is None:
    `if causal and mask is not None: ... elif causal: is_causal = True` (bio-attention). The
    `elif` runs where some term of the `and` is false; its own test holds every term but the
    mask's, so the mask's is the false one."""
    if above is None or not isinstance(branch, ast.If) or not (
            isinstance(above.test, ast.BoolOp) and isinstance(above.test.op, ast.And)):
        return False
    terms = above.test.values
    tests_none = [t for t in terms if isinstance(t, ast.Compare) and len(t.ops) == 1 and (
        isinstance(t.ops[0], ast.IsNot)) and isinstance(t.left, ast.Name) and (
        t.left.id == name) and is_none(t.comparators[0])]
    if len(tests_none) != 1:
        return False
    own = branch.test.values if isinstance(branch.test, ast.BoolOp) and isinstance(
        branch.test.op, ast.And) else [branch.test]
    held = {ast.dump(t) for t in own}
    return all(ast.dump(t) in held for t in terms if t is not tests_none[0])


# Context managers that expect their block to raise.
_EXPECTS_ERROR = frozenset({"raises", "assertRaises", "assertRaisesRegex"})


def _is_property(node: ast.AST | None) -> bool:
    """A method decorated `@property` or `@cached_property` (`@functools.cached_property`)."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        last_name(d) in {"property", "cached_property"} for d in node.decorator_list)


# jaxtyping's dtype annotations (`Int32[Tensor, "b n"]`), by the dtype fact they give.
_JAXTYPING_DTYPES = {
    **dict.fromkeys(("Int", "Int8", "Int16", "Int32", "Int64", "UInt", "UInt8", "UInt16",
                     "UInt32", "UInt64", "Integer"), "int"),
    "Bool": "bool", "Float32": "fp32", "Float64": "fp32", "Float16": "half",
    "BFloat16": "bf16"}


def _jaxtyping_dtype(annotation: ast.expr | None) -> str | None:
    """The dtype a jaxtyping annotation names (`Int32[Tensor, "n"]`, `Bool[torch.Tensor, ...]`),
    also inside Optional or `... | None`; None for any other annotation (`Float` is any float)."""
    annotation = _unwrap_optional(annotation)
    if not (isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple)):
        return None
    return _JAXTYPING_DTYPES.get((_annotation_name(annotation.value) or "").split(".")[-1])


def _jaxtyping_layout(annotation: ast.expr | None) -> str | None:
    """"BS" for a jaxtyping annotation of two axes whose first is the batch's (`Bool[Tensor,
    "b n"]`, `"batch seq"`): the (batch, sequence) axes of a padding mask, as stated."""
    annotation = _unwrap_optional(annotation)
    if not (isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple)
            and len(annotation.slice.elts) == 2):
        return None
    shape = annotation.slice.elts[1]
    if not (isinstance(shape, ast.Constant) and isinstance(shape.value, str)):
        return None
    axes = shape.value.split()
    return "BS" if len(axes) == 2 and axes[0] in _BATCH_AXIS_NAMES and (
        axes[1] not in _BATCH_AXIS_NAMES) and axes[0] != axes[1] else None


# The names jaxtyping annotations give a batch axis.
_BATCH_AXIS_NAMES = frozenset({"b", "B", "batch", "bsz", "batch_size", "bs"})


def _annotated_bool(annotation: ast.expr | None) -> bool:
    """Annotated `torch.BoolTensor` (AllenNLP's masks), or Optional of it / `... | None`."""
    return _annotation_name(_unwrap_optional(annotation)) in {"BoolTensor", "torch.BoolTensor"}


def _unwrap_optional(annotation: ast.expr | None) -> ast.expr | None:
    """`X` of `Optional[X]` or `X | None`; any other annotation as it is."""
    if isinstance(annotation, ast.Subscript) and (_annotation_name(annotation.value) or "").split(
            ".")[-1] == "Optional":
        return annotation.slice
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr) and (
            is_none(annotation.right)):
        return annotation.left
    return annotation


_INPLACE = frozenset({"fill_", "zero_", "masked_fill_", "copy_", "clamp_"})
# Builtins that never write into a tensor handed to them.
_PURE_BUILTINS = frozenset({"print", "len", "isinstance", "id", "type", "repr", "str", "hasattr",
                            "getattr", "bool", "int", "float", "tuple", "list", "zip", "enumerate"})


def _casts_to_bool(call: ast.Call) -> bool:
    name = call_name(call)
    if name == "bool":
        return True
    target = argument(call, 0, "dtype") if name in {"to", "type"} else None
    return target is not None and dtype_of(target) == "bool"


def _row_prefix(target: ast.Subscript) -> ast.expr | None:
    """`m[i, :n]` / `m[i][:n]` / `m[i, 0:n]`, the first n positions of row i (a loop's name) of
    a (batch, seq) tensor held in a name: n; None for any other write."""
    index, rows = target.slice, target.value
    if isinstance(index, ast.Tuple) and len(index.elts) == 2 and isinstance(rows, ast.Name):
        row, index = index.elts
    elif isinstance(rows, ast.Subscript) and isinstance(rows.value, ast.Name):
        row = rows.slice
    else:
        return None
    if isinstance(row, ast.Name) and isinstance(index, ast.Slice) and index.upper is not None and (
            index.step is None) and (index.lower is None or is_zero(index.lower)):
        return index.upper
    return None


def _held_name(node: ast.AST) -> str | None:
    """The name a tensor is held in: `m` for `m`, `m[i]`; `self.X` for `self.X[...]`."""
    name = root_name(node)
    if name is not None:
        return name
    attr = self_attr(node)
    return None if attr is None else "self." + attr


def _held_in_a_name(node: ast.AST) -> bool:
    """`keep`, `keep[:, None]`, `keep.unsqueeze(1)`: a tensor the code bound to a name, not a
    value made on the spot (`torch.rand_like(s).lt(p)` is a dropout draw, not a mask)."""
    root = _receiver_root(node)
    return isinstance(root, ast.Name) and (module_dotted(root) or "") not in _MODULES


_MODULES = frozenset({"torch", "np", "numpy", "F", "nn", "jnp", "math"})


def _receiver_root(node: ast.AST) -> ast.AST:
    """`keep` for `keep.float()[:, None].to(q.dtype)`: the tensor a method chain starts from."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return node


_RESHAPES = frozenset({"view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
                       "contiguous", "transpose", "permute", "view_as", "reshape_as"})


def _reshape_of(value: ast.expr, name: str) -> bool:
    """`name.view(...)`, `name.reshape(...).contiguous()`: the same entries in another layout."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and (
            value.func.attr in _RESHAPES):
        value = value.func.value
    return isinstance(value, ast.Name) and value.id == name


def _inplace_base(node: ast.expr) -> ast.expr:
    """`self.bias` for `self.bias.fill_(0.0)`: an in-place call returns its own receiver."""
    while isinstance(node, ast.Call) and call_name(node) in _INPLACE:
        base = receiver(node)
        if base is None:
            break
        node = base
    return node


_BOOL_CONDITIONS = frozenset({"masked_fill", "masked_fill_", "masked_select", "masked_scatter",
                              "masked_scatter_", "where", "logical_and", "logical_or",
                              "logical_not"})


def _takes_a_bool(node: ast.AST, parent: ast.AST | None) -> bool:
    """Whether `~m` can stand for `1 - m` where `node` is used (MC512's fix): as a fill or
    select condition, an index, an operand of `&`, `|`, `^`, or a factor of a finite product
    (`x * (1 - m)`). Not under `-`, `+` or a product with an infinity (`-(~m)` raises, `~m
    - x` still raises, `~m * -inf` is NaN where `~m` is False)."""
    if isinstance(parent, ast.Call):
        name = call_name(parent)
        return name in _BOOL_CONDITIONS and bool(parent.args) and parent.args[0] is node
    if isinstance(parent, ast.Subscript):
        return parent.slice is node
    if isinstance(parent, ast.BinOp):
        if isinstance(parent.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            return True
        if isinstance(parent.op, ast.Mult):
            other = parent.right if parent.left is node else parent.left
            value = number(other)
            return isinstance(other, ast.Name) or (value is not None and math.isfinite(value))
    return False


def _append_kwarg(call: ast.Call, text: str, source: str) -> Edit | None:
    """Insert `, text` before a call's closing parenthesis."""
    end_line, end_col = call.end_lineno, call.end_col_offset
    if end_line is None or end_col is None or not source:
        return None
    lines = source.split("\n")  # as the parser counts lines (the linter's source is LF-only)
    before = lines[end_line - 1].encode()[:end_col - 1].decode("utf-8", "replace").rstrip()
    sep = ", " if (call.args or call.keywords) and not before.endswith(",") else ""
    return Edit(end_line, end_col - 1, end_line, end_col - 1, sep + text)


_STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers")


def _binding_targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment-like statement binds: its targets, a loop's, a `with`'s `as`."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        return [node.target]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [i.optional_vars for i in node.items if i.optional_vars is not None]
    return []


def _stored_names(stmt: ast.stmt) -> set[str]:
    """Names a statement binds in its own scope, read from statements only (an expression
    binds a name only through `:=`, which this does not look for: a name bound there and again
    later in the same branch keeps the later value all the same)."""
    names: set[str] = set()
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        targets: list[ast.expr] = _binding_targets(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue  # its body is another scope
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        for target in targets:
            names.update(n.id for n in subnodes(target) if isinstance(n, ast.Name))
        for field_name in _STATEMENT_LISTS:
            todo.extend(getattr(node, field_name, ()))
    return names


_FLOW_ENDS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _ends_flow(body: list[ast.stmt]) -> bool:
    """A branch that binds something and then leaves (return, raise, continue, break): a
    branch that only leaves (`if x is None: raise ...`) has nothing to take back."""
    return len(body) > 1 and isinstance(body[-1], _FLOW_ENDS)


def _push_statements(stack: _Stack, body: list[ast.stmt], parent: ast.AST) -> None:
    """Push statements so that the stack pops them in source order."""
    for stmt in reversed(body):
        if type(stmt) not in _LEAVES:
            stack.append((stmt, parent))


def _not_bool_branch(test: ast.expr) -> tuple[str, bool] | None:
    """For a dtype guard on a plain name, the name and whether the If's body (True) or its
    else branch (False) is where the name is not a bool tensor: `m.dtype == torch.bool` /
    `is` (else branch), `m.dtype != torch.bool` / `is not`, `m.is_floating_point()` and
    `torch.is_floating_point(m)` (body)."""
    if isinstance(test, ast.Call) and not test.keywords:
        if (isinstance(test.func, ast.Attribute) and test.func.attr == "is_floating_point"):
            if not test.args and isinstance(test.func.value, ast.Name):
                return test.func.value.id, True
            if (len(test.args) == 1 and isinstance(test.args[0], ast.Name)
                    and module_dotted(test.func) == "torch.is_floating_point"):
                return test.args[0].id, True
        return None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    sides = (test.left, test.comparators[0])
    dtype_of_name = [s.value.id for s in sides if isinstance(s, ast.Attribute)
                     and s.attr == "dtype" and isinstance(s.value, ast.Name)]
    is_bool = [s for s in sides if module_dotted(s) == "torch.bool"]
    if len(dtype_of_name) != 1 or len(is_bool) != 1:
        return None
    op = test.ops[0]
    if isinstance(op, (ast.Eq, ast.Is)):
        return dtype_of_name[0], False
    if isinstance(op, (ast.NotEq, ast.IsNot)):
        return dtype_of_name[0], True
    return None


def _binds(stmt: ast.stmt, name: str) -> bool:
    """A plain `name = ...` (one of the targets)."""
    return isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in stmt.targets)


def _is_float_literal(node: ast.AST, lookup: Any = None) -> bool:
    """A Python number written with a float in it (`-1e9`, `float("-1e9")`, `-65505 * 2.0`)."""
    return any((isinstance(n, ast.Constant) and isinstance(n.value, float)) or (
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "float")
        for n in subnodes(node))


def _assigns_name(body: list[ast.stmt], name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               for stmt in body for n in subnodes(stmt))


def _body_assignments(node: ast.If) -> dict[str, ast.Assign | ast.AnnAssign]:
    """Names an if/else body binds last with a plain assignment -> that statement (the value
    the body leaves); joined with the value after the else branch."""
    if not node.orelse:
        return {}
    last: dict[str, ast.Assign | ast.AnnAssign] = {}  # cheap first: top-level `name = ...`
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(
                stmt.target, ast.Name):
            last[stmt.target.id] = stmt  # `mask: Tensor = ...`
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    last[target.id] = stmt
                elif isinstance(target, ast.Tuple):  # `keys, values = self.cache_k, ...`
                    for element in target.elts:
                        if isinstance(element, ast.Name):
                            last[element.id] = stmt
    # A name the else branch leaves alone keeps the body's value, so joining it changes
    # nothing: no need to find out which names the else branch binds.
    if last:  # a later body statement that binds the name again leaves another value
        position = {name: node.body.index(stmt) for name, stmt in last.items()}
        for index in range(min(position.values()) + 1, len(node.body)):
            for name in _stored_names(node.body[index]) & last.keys():
                if index > position[name]:
                    del last[name]
    return last


def _moved_dict(node: ast.AST, name: str) -> bool:
    """`{k: v.to(device) for k, v in name.items()}`: the same dict, its tensors moved."""
    if not (isinstance(node, ast.DictComp) and len(node.generators) == 1):
        return False
    loop = node.generators[0]
    if not (isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2 and all(
            isinstance(e, ast.Name) for e in loop.target.elts) and isinstance(
            loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Attribute) and (
            loop.iter.func.attr == "items") and isinstance(loop.iter.func.value, ast.Name)
            and loop.iter.func.value.id == name and not loop.ifs):
        return False
    key, value = (e.id for e in loop.target.elts)  # type: ignore[attr-defined]
    moved = node.value
    while isinstance(moved, ast.Call) and isinstance(moved.func, ast.Attribute) and (
            moved.func.attr in {"to", "cuda", "cpu"}):
        moved = moved.func.value
    return isinstance(node.key, ast.Name) and node.key.id == key and isinstance(
        moved, ast.Name) and moved.id == value


def _loop_batch(loop: ast.For) -> str | None:
    """The name a loop binds each batch to: `for batch in loader`, `for batch in
    tqdm(loader)`, `for step, batch in enumerate(loader)`."""
    if isinstance(loop.target, ast.Name):
        return loop.target.id
    if isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2 and isinstance(
            loop.iter, ast.Call) and call_name(loop.iter) == "enumerate" and isinstance(
            loop.target.elts[1], ast.Name):
        return loop.target.elts[1].id
    return None


def _spread_key(source: ast.expr, key: str, at: ast.expr) -> ast.Subscript:
    """`batch["key"]` for one key a `**batch` spreads, placed at the spread and without an end,
    so that a message shows it as `batch['key']` (unparsed) rather than the source's `batch`."""
    made = ast.copy_location(ast.Subscript(source, ast.Constant(key), ast.Load()), at)
    made.end_lineno = made.end_col_offset = None
    return made


def _returned_dict_keys(tree: ast.AST | None, name: str, owner: str | None = None,
                        position: int | None = None, depth: int = 0) -> tuple[str, ...]:
    """The keys of the dict literal that the function `name` of the file (its only definition
    of that name, at any depth; with `owner`, the only one in the file's only class of that
    name: a collator's `__call__`) returns, when each of its returns is such a dict with the
    same string keys (a collate function); with `position`, the dict at that position of the
    tuple each return gives (`return {"patches": p, ...}, targets`); () otherwise."""
    if tree is not None and owner is not None:
        classes = [n for n in subnodes(tree) if isinstance(n, ast.ClassDef) and n.name == owner]
        tree = classes[0] if len(classes) == 1 else None
    elif name == "__call__":
        return ()
    defs = [n for n in subnodes(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == name] if tree is not None else []
    if len(defs) != 1:
        return ()
    keys: tuple[str, ...] | None = None
    pending: list[ast.AST] = list(defs[0].body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Return):
            value = node.value
            if position is not None:
                value = value.elts[position] if isinstance(value, ast.Tuple) and (
                    -len(value.elts) <= position < len(value.elts)) else None
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and (
                    value.func.id != name) and depth < 2:
                # `collate = lambda b: collate_citations(b, vocab)`: the function it returns
                # the result of
                returned = _returned_dict_keys(tree, value.func.id, position=position,
                                               depth=depth + 1)
                if not returned or (keys is not None and returned != keys):
                    return ()
                keys = returned
                continue
            if not isinstance(value, ast.Dict) or not all(
                    isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
                return ()
            returned = tuple(k.value for k in value.keys)  # type: ignore[union-attr]
            if keys is not None and returned != keys:
                return ()
            keys = returned
            continue
        pending.extend(ast.iter_child_nodes(node))
    return keys or ()


# The `_Passed` origin of a range of the caller's parameter (see `_passed_parameter`); no
# attribute is spelled so.
_SLICED = "[:]"


def _flattened_2d(node: ast.expr | None) -> bool:
    """`m.view(batch_size, -1)` / `m.reshape(b, -1)`: a mask made (batch, seq) whatever its
    rank was."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
        node.func.attr in {"view", "reshape"}) and len(node.args) == 2 and not node.keywords and (
        number(node.args[1]) == -1.0)


def _more_than_one_query(flag: ast.expr | None) -> bool:
    """`is_causal=T > 1`, `is_causal=q.shape[2] > 1` (Whisper's and many decoders' flag): True
    for every step that feeds more than one new token, however many the cache holds (a prompt
    after a prefix, a speculative draft). Not where it is AND-ed with a test that the mask is
    None (Hugging Face's `attention_mask is None and q_len > 1`): with a cache a mask is passed."""
    tests = flag.values if isinstance(flag, ast.BoolOp) and isinstance(flag.op, ast.And) else [
        flag]
    if any(isinstance(t, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
           and is_none(c) for op, c in zip(t.ops, t.comparators, strict=True)) for t in tests):
        return False
    return any(isinstance(t, ast.Compare) and len(t.ops) == 1 and (
        (isinstance(t.ops[0], ast.Gt) and number(t.comparators[0]) == 1.0)
        or (isinstance(t.ops[0], ast.GtE) and number(t.comparators[0]) == 2.0)
        or (isinstance(t.ops[0], ast.NotEq) and number(t.comparators[0]) == 1.0)) for t in tests)


def _module_called(func: ast.expr) -> ast.expr:
    """What a call calls, reading `block.forward(x, m)` and `self.attention.forward(...)` as
    the module's own call (BERT4Rec's `transformer.forward(x, mask)`); `self.forward` stays a
    method of the class."""
    if isinstance(func, ast.Attribute) and func.attr == "forward" and (
            isinstance(func.value, ast.Attribute) or (isinstance(func.value, ast.Name) and (
                func.value.id not in {"self", "cls"}))):
        return func.value
    return func


def _reshaped_seed(argument: ast.expr, parameter: str, seed: Value) -> Value:
    """What `argument`, a reshape of the caller's `parameter`, gives where the parameter holds
    `seed`."""
    if not seed:
        return seed
    return describe(argument, lambda name: seed if name == parameter else UNKNOWN)


def _reshaped_name(node: ast.expr) -> ast.Name | None:
    """The name a chain of value-keeping tensor methods and new-axis indexing starts from
    (`pad.repeat_interleave(n, dim=0)`, `m.unsqueeze(1).expand(-1, n, -1)`,
    `keep.repeat_interleave(hw, dim=0)[:, None, None, :]`), when every step keeps the values:
    None for the name itself or a plain range of it (see `_SLICED`)."""
    steps = 0
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in KEEPS_VALUES):
            node = node.func.value
        elif isinstance(node, ast.Subscript) and _new_axes_only(node.slice):
            node = node.value
        else:
            break
        steps += 1
    return node if steps and isinstance(node, ast.Name) else None


def _new_axes_only(key: ast.expr) -> bool:
    """`[:, None, None, :]`, `[..., None]`: whole axes and new ones only (the values kept)."""
    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    return any(is_none(p) for p in parts) and all(
        is_none(p) or (isinstance(p, ast.Constant) and p.value is Ellipsis) or (
            isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None)
        for p in parts)


def _ranges_only(key: ast.expr) -> bool:
    """`[:, start:end]`, `[a:b]`: a key of plain ranges (no new axis, no integer index), which
    keeps the values, the dtype and the axes of what it slices."""
    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    return all(isinstance(p, ast.Slice) and p.step is None for p in parts)


def _root_name(node: ast.AST) -> str | None:
    """The name an expression reads through method calls, indexing, comparisons and
    inversions: `m` of `m.float()`, `(m == 1)`, `~m[:, None]`."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Compare):
            node = node.left
        elif isinstance(node, ast.UnaryOp):
            node = node.operand
        else:
            return node.id if isinstance(node, ast.Name) else dotted(node)


def _made_float01(value: Value) -> bool:
    """A float 0/1 mask by evidence (a comparison or a triangle of ones cast to float; a
    tokenizer's mask): what one branch of an `if` may leave where another leaves an additive
    mask (`Value.float01_at`). Not a padding mask only: UER's `(seg > 0).float()` beside its
    `(1.0 - tril) * -10000` (ET-BERT) is added to the scores as surely as a tokenizer's."""
    return value.float01 and not value.all_ones and value.dtype not in {"bool", "int"}


def _branch_binds_none(body: list[ast.stmt], name: str) -> bool:
    """Whether the last statement of a branch's block that binds `name` binds it to None
    (`x = None`, `y, x = y0, None`); False where a nested block binds it after."""
    bound = False
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    bound = is_none(stmt.value)
                elif isinstance(target, ast.Tuple) and any(
                        isinstance(e, ast.Name) and e.id == name for e in target.elts):
                    bound = isinstance(stmt.value, ast.Tuple) and len(stmt.value.elts) == len(
                        target.elts) and any(
                        isinstance(e, ast.Name) and e.id == name and is_none(v)
                        for e, v in zip(target.elts, stmt.value.elts, strict=True))
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(
                stmt.target, ast.Name) and stmt.target.id == name:
            bound = isinstance(stmt, ast.AnnAssign) and stmt.value is not None and is_none(
                stmt.value)
        elif name in _stored_names(stmt):
            bound = False  # bound inside a nested block, a loop, a with: not read here
    return bound


# What a mask's True means, as a join keeps it from the branch that builds it (`_default_path`).
_CONVENTION_FACTS = ("pad_keep", "keep_mask", "hf_keep", "hf_keep_inverted")


def _last_binding(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The last plain assignment of `name` in a branch, looking into its nested ifs (an `elif`):
    where that branch's value was made."""
    found: ast.stmt | None = None
    for stmt in body:
        if (isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in stmt.targets)) or (
                isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and stmt.target.id == name and stmt.value is not None):
            found = stmt
        elif isinstance(stmt, ast.If):
            found = _last_binding(stmt.orelse, name) or _last_binding(stmt.body, name) or found
    return found


def _join(a: Value, b: Value) -> Value:
    """The facts two values share (what is known after either branch ran), and `maybe_half`
    when either has it (a dtype that is float16/bfloat16 on some path)."""
    if a == b:
        return a
    shared = Value(**{f.name: getattr(a, f.name) for f in fields(Value)
                      if getattr(a, f.name) == getattr(b, f.name)})
    if shared.dtype is None and all(
            v.never_half or v.dtype in {"int", "fp32"} for v in (a, b)):
        shared = replace(shared, never_half=True)
    if not shared.float01 and (a.float01_at or b.float01_at):
        shared = replace(shared, float01_at=a.float01_at or b.float01_at)
    if a.pair_keep or b.pair_keep:
        # a pair mask on one path (TransformerCPI's `SelfAttention` called as `sa` with the
        # atoms' pair mask and as `ea` with the protein's key mask): a -inf fill empties the
        # padded queries' rows on that path (MC507)
        shared = replace(shared, pair_keep=True)
    if {a.elements, b.elements} - {"", None} and "" in {a.elements, b.elements}:
        # a list empty on one path and holding tensors of one dtype on the other (appended to
        # in a loop's body): the stack of it, where it runs, has that dtype
        shared = replace(shared, elements=a.elements or b.elements)
    if a.cached or b.cached:
        # keys that hold the cache on one path (`if use_cache: keys = torch.cat([self.cache_k,
        # k])`): a literal is_causal=True after the join is wrong on that path (MC510)
        shared = replace(shared, cached=True)
    return replace(shared, maybe_half=True) if a.maybe_half or b.maybe_half else shared


def _added_terms(node: ast.AST) -> list[ast.AST]:
    """The terms of a chain of additions `a + b + c` (left-nested BinOps), in order."""
    terms: list[ast.AST] = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        terms.append(node.right)
        node = node.left
    terms.append(node)
    return terms[::-1]


def _is_test_path(path: str) -> bool:
    """A pytest module by its file name (test_x.py, x_test.py): where fp32-only tests live."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith("_test.py")


def lint_tree(
    tree: ast.AST, enabled: frozenset[str], source: str = "", path: str = ""
) -> list[Hit]:
    roots = _imported_roots(tree)
    if "torch" not in roots and not roots.isdisjoint(_OTHER_FRAMEWORKS):
        return []
    if "torch" not in roots and "numpy" in roots:
        # numpy computes `1 - bool_array` and `bool_array - 1` (int results): MC512 is torch's
        enabled = enabled - {"MC512"}
    if "lambda" in source:
        _named_lambdas_as_defs(tree)
    # this file's `import torch as th` and the like; a class of the file spelled as one of
    # torch's attention classes is its own (crslab's ParlAI-style `TransformerEncoderLayer`,
    # whose forward takes `(tensor, mask)`), not torch's
    token = MODULE_ALIASES.set({name: FOREIGN + name for name in _defined_names(tree)[1]
                                if name in ATTENTION_CLASSES})
    try:
        linter, hits, declared = first_walk(tree, enabled, source, path)
        seeds = linter._seeded_parameters()
        if seeds:
            # again, each parameter holding what every call of this file passes for it
            first = linter
            linter, hits = _seeded_walk(tree, enabled, source, path, first, declared, seeds,
                                        record=True)
            # Once more where what the seeded walk's calls pass seeds a parameter the first
            # walk's calls did not: a mask a seeded helper turns into another before handing it
            # on (BLIP-2's `get_extended_attention_mask(attention_mask)`, then `layer(x,
            # extended)`). A parameter seeded already keeps its seed: the seeded walk may link
            # more calls to its function (through a seeded instance), and a call that passes
            # what no walk reads would take away what the others agree on.
            added = {key: new for key, params in linter._seeded_parameters().items()
                     if (new := {param: facts for param, facts in params.items()
                                 if param not in seeds.get(key, {})})}
            if added:
                linter, hits = _seeded_walk(tree, enabled, source, path, first, declared, {
                    key: {**seeds.get(key, {}), **added.get(key, {})}
                    for key in (*seeds, *(key for key in added if key not in seeds))})
        if linter.param_hits:
            hits = _without_float32_callers(tree, enabled, source, path, linter.param_hits, hits)
        return hits
    finally:
        MODULE_ALIASES.reset(token)


def _seeded_walk(tree: ast.AST, enabled: frozenset[str], source: str, path: str, first: Linter,
                 declared: _Declared, seeds: dict[tuple[str, str], dict[str, Value]], *,
                 record: bool = False) -> tuple[Linter, list[Hit]]:
    """A walk with each parameter holding what every call of this file passes for it (`seeds`),
    recording what its own calls pass (`record`) for a next one. The parameters' roles are the
    first (unseeded) walk's."""
    options = first.option_defaults
    use_site = frozenset((key, param) for key, params in seeds.items()
                         for param in params if param in first.role_params.get(key, ()))
    linter = Linter(enabled, source, path)
    if record:
        linter.role_params = first.role_params
        linter.role_kinds = first.role_kinds
    linter.declare_classes(*declared)
    linter.seeds = seeds
    linter.padding_given = first.padding_given
    linter.never_given = first.never_given
    linter.use_site = use_site
    linter.option_defaults = options
    linter.record_calls = record
    if isinstance(tree, ast.Module) and not options and not MODULE_ALIASES.get() and (
            not use_site):
        # Only the statements the seeds change (see `Linter.rerun`). With an argparse option
        # or a module alias, the first walk read less than this one from the start: `args.X`
        # before its `add_argument`, `th.where` before `import torch as th`; both are only ever
        # added to. With `use_site`, every call of such a helper reads differently (its finding
        # moves to the helper's body), wherever the call is: the whole file is walked again.
        return linter, linter.rerun(tree, first)
    return linter, linter.run(tree)


# The dtype named as a string (`choices=["float32", "float16"]`, `getattr(torch, "float16")`):
# with a config's masking value, the file's own word that the model may run in float16.
_FLOAT16_NAMED = re.compile(r"""["'](?:float16|fp16|half)["']""")


# Module methods that return the module itself.
_RETURNS_MODULE = frozenset({"to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16",
                             "double", "requires_grad_", "share_memory"})


# Wrappers whose call runs the wrapped module's forward (`DDP` is how DistributedDataParallel is
# imported by most training scripts).
_MODULE_WRAPPERS = frozenset({"DistributedDataParallel", "DataParallel", "DDP", "FSDP",
                              "FullyShardedDataParallel"})


def _wrapped_module(call: ast.Call) -> ast.expr | None:
    """The module a call returns as it is or wraps: `model.eval()`, `model.to(device)`,
    `DDP(model, device_ids=...)`, `torch.compile(model)`."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _RETURNS_MODULE:
        return func.value
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(
        func, ast.Attribute) else None
    if call.args and (name in _MODULE_WRAPPERS or (
            name == "compile" and dotted(func) == "torch.compile")):
        return call.args[0]
    return None


def _built_module(node: ast.AST) -> str | None:
    """The class name a construction calls, through the module methods that return the module
    (`Transformer(...).to(device).eval()` -> "Transformer")."""
    while isinstance(node, ast.Call) and (wrapped := _wrapped_module(node)) is not None:
        node = wrapped
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id
    return None


def _constructed_class(node: ast.AST, scopes: list[_Scope]) -> str | None:
    """The class a call builds by its name (`Config(...)`), or the enclosing class for
    `cls(...)` in a classmethod."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return None
    if node.func.id != "cls":
        return node.func.id
    function = scopes[-1].node if scopes else None
    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            (module_dotted(d) or "") == "classmethod" for d in function.decorator_list):
        owner = next((s.name for s in reversed(scopes[:-1]) if s.kind == "class"), None)
        return owner or None
    return None


def _named_lambdas_as_defs(tree: ast.AST) -> None:
    """`attend = lambda q, k, v, m: sdpa(q, k, v, attn_mask=m)` read as the `def` it names:
    its parameters get roles and its calls' facts like any function of the file (a padding
    mask handed to SDPA through a lambda). Rewrites the statement lists in place; only
    statements are visited (no expression holds one)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for field_name in (*_STATEMENT_LISTS, "cases"):
            body = getattr(node, field_name, None)
            if not isinstance(body, list):
                continue
            stack.extend(item for item in body if isinstance(item, ast.AST))
            for index, stmt in enumerate(body):
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    target: ast.expr = stmt.targets[0]
                elif isinstance(stmt, ast.AnnAssign):  # `attend: Callable = lambda ...`
                    target = stmt.target
                else:
                    continue
                lam = stmt.value
                if not (isinstance(lam, ast.Lambda) and isinstance(target, ast.Name)):
                    continue
                returned = ast.copy_location(ast.Return(lam.body), lam.body)
                define = ast.FunctionDef(name=target.id, args=lam.args,
                                         body=[returned], decorator_list=[], returns=None)
                if "type_params" in ast.FunctionDef._fields:  # Python 3.12+
                    setattr(define, "type_params", [])  # noqa: B010 (not in 3.10's stubs)
                body[index] = ast.copy_location(define, stmt)


_Declared = tuple[dict[str, tuple[_Role, ...]], dict[str, dict[str, Value]],
                  dict[str, tuple[_Role, ...]]]


def first_walk(tree: ast.AST, enabled: frozenset[str], source: str, path: str
               ) -> tuple[Linter, list[Hit], _Declared]:
    """The walk that records the calls (see `lint_tree`): the linter, its hits, and the
    classes and methods it had to know before their definition."""
    declared: _Declared = ({}, {}, {})
    calls_by_class: _ClassCalls | None = None

    def index() -> _ClassCalls:
        nonlocal calls_by_class
        if calls_by_class is None:
            calls_by_class = _self_calls(tree)
        return calls_by_class

    for walks in range(1, 4):  # a chain of such classes needs one more walk per link
        linter = Linter(enabled, source, path)
        linter.record_calls = True
        linter.checkpoints = [] if isinstance(tree, ast.Module) else None
        linter.declare_classes(*declared)
        hits = linter.run(tree)
        late = (_used_before_defined(tree, linter._class_roles, source),
                _methods_called_above(index(), linter._method_values),
                _functions_called_above(tree, linter._function_roles))
        if not any(late) or late == declared or walks == 3:
            break
        # A class used above its definition (`self.attn = SelfAttention(d)` in a model
        # defined first), a method called above its own (`forward` calling `self._attend`):
        # walked again with what its forward, or the method, does known from the start.
        declared = late
    return linter, hits, declared


def _functions_called_above(tree: ast.AST, function_roles: dict[str, tuple[_Role, ...]]
                            ) -> dict[str, tuple[_Role, ...]]:
    """The module functions of `function_roles` called by name on a line above their
    definition (a class calling a helper written at the bottom of the file), with their roles."""
    if not function_roles or not isinstance(tree, ast.Module):
        return {}
    # at the top of the module or nested in a function (not a method), each name defined once
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = list(_plain_functions(tree.body))
    counts: dict[str, int] = {}
    for stmt in functions:
        counts[stmt.name] = counts.get(stmt.name, 0) + 1
    defined = {stmt.name: stmt.lineno for stmt in functions
               if stmt.name in function_roles and counts[stmt.name] == 1}
    return {call.func.id: function_roles[call.func.id] for call in subnodes(tree)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id in defined and call.lineno < defined[call.func.id]}


def _plain_functions(body: list[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions a block defines and those nested in them, at any depth of plain blocks
    (`if`, `try`, `with`), also inside a method's body, never the methods themselves."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt
            yield from _plain_functions(stmt.body)
        elif isinstance(stmt, ast.ClassDef):
            for method in stmt.body:
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield from _plain_functions(method.body)
        else:
            for name in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(stmt, name, None)
                if isinstance(block, list):
                    yield from _plain_functions([s for s in block if isinstance(s, ast.stmt)]
                                                if name != "handlers" else [
                                                    s for h in block for s in h.body])


# Each class of a module (at any depth): its name, the line of each method of its body, and the
# `self.name(...)` calls anywhere in it (name, line). Read once per module (`_self_calls`).
_ClassCalls = list[tuple[str, dict[str, int], list[tuple[str, int]]]]


def _self_calls(tree: ast.AST) -> _ClassCalls:
    index: _ClassCalls = []
    for node in subnodes(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        methods: dict[str, int] = {}
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods[item.name] = item.lineno  # the last definition's line
        # (`SelfAttentionMask.get_mask(n)` in its own class: a static method, as self.'s)
        own = ("self", node.name)
        calls = [(call.func.attr, call.lineno) for call in subnodes(node)
                 if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                 and isinstance(call.func.value, ast.Name) and call.func.value.id in own]
        index.append((node.name, methods, calls))
    return index


def _methods_called_above(index: _ClassCalls, method_roles: dict[tuple[str, str], Value]
                          ) -> dict[str, dict[str, Value]]:
    """The methods of `method_roles` that a method of their class calls as `self.name(...)` on
    a line above their definition, by class, with what `self.name` gives (their roles, what
    their returns give). `index` is the module's `_self_calls`."""
    late: dict[str, dict[str, Value]] = {}
    if not method_roles:
        return late
    for cls, methods, calls in index:
        defined = {name: line for name, line in methods.items() if (cls, name) in method_roles}
        if not defined:
            continue
        for attr, line in calls:
            if attr in defined and line < defined[attr]:
                late.setdefault(cls, {})[attr] = method_roles[(cls, attr)]
    return late


def _used_before_defined(tree: ast.AST, class_roles: dict[str, tuple[_Role, ...]],
                         source: str = "") -> dict[str, tuple[_Role, ...]]:
    """The classes of `class_roles` named on a line above their definition, with their roles
    (`self.attn = SelfAttention(d)` in a model class written first)."""
    if not class_roles:
        return {}
    if source:
        # The text above a top-level class holds every use on an earlier line: when no name
        # occurs there, the walk below finds nothing (a class found only nested is walked).
        top = {stmt.name: stmt.lineno for stmt in getattr(tree, "body", [])
               if isinstance(stmt, ast.ClassDef) and stmt.name in class_roles}
        if all(name in top and not _named_above(source, name, top[name])
               for name in class_roles):
            return {}
    defined: dict[str, int] = {}
    uses: list[ast.Name] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in class_roles:
            defined[node.name] = min(node.lineno, defined.get(node.name, node.lineno))
        elif isinstance(node, ast.Name) and node.id in class_roles:
            uses.append(node)
    return {node.id: class_roles[node.id] for node in uses
            if node.id in defined and node.lineno < defined[node.id]}


def _named_above(source: str, name: str, line: int) -> bool:
    """Whether `name` occurs as a word in the lines of `source` above `line`."""
    end = -1
    for _ in range(line - 1):
        end = source.find("\n", end + 1)
        if end < 0:
            return True  # (fewer lines than that: read it all as above)
    return re.search(rf"\b{re.escape(name)}\b", source[:end + 1]) is not None


# Frameworks whose code reads like torch's and is not: in gluonts' MXNet models `F.eye`,
# `x > 0` (a float 0/1 array there) and `1 - m` follow MXNet, so no torch rule applies to a
# module that imports one of these and never torch.
_OTHER_FRAMEWORKS = frozenset({
    "mxnet", "tensorflow", "jax", "flax", "paddle", "keras", "mindspore"})


def _imported_roots(tree: ast.AST) -> set[str]:
    """The top-level packages a module imports at its top level (also under `try`/`if`)."""
    roots: set[str] = set()
    statements = list(getattr(tree, "body", []))
    for stmt in statements:
        if isinstance(stmt, ast.Import):
            roots.update(alias.name.partition(".")[0] for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
            roots.add(stmt.module.partition(".")[0])
        elif isinstance(stmt, (ast.If, ast.Try)):  # `try: import torch` / `if TYPE_CHECKING:`
            statements.extend(stmt.body)
            statements.extend(stmt.orelse)
            for handler in getattr(stmt, "handlers", []):
                statements.extend(handler.body)
    return roots


def _without_float32_callers(tree: ast.AST, enabled: frozenset[str], source: str, path: str,
                             param_hits: list[tuple[Hit, _Param]], hits: list[Hit]) -> list[Hit]:
    """Drop MC501 on a helper's parameter when the file calls the helper and every call passes
    a float32 tensor (sentence-transformers' `_fill_empty_document_scores(scores, empty)` is
    only ever given upcast scores). A second walk reads the calls with the values bound there;
    it runs only for files with such a finding."""
    reader = Linter(enabled, source, path)
    reader.calls_to = {param: [] for _, param in param_hits}
    reader.run(tree)
    dropped = {id(hit) for hit, param in param_hits
               if reader.calls_to[param] and all(d == "fp32" for d in reader.calls_to[param])}
    return [hit for hit in hits if id(hit) not in dropped]
