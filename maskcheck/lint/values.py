"""What the linter knows about a name's value, followed the way a reader follows it.

A `Value` holds the facts that the source rules need (dtype evidence, 0/1 or 0/-inf matrix,
where a triangle's True entries sit, a Hugging Face keep-mask, a constant, an alias of a torch
function). `describe` reads an expression with the names bound *before* it, so
`mask = torch.triu(mask)` reads the old `mask`. Unknown stays unknown: every rule fires only on
positive evidence, never on a missing fact.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from maskcheck.conventions import declares_keep
from maskcheck.lint.inline import evaluate
from maskcheck.lint.walk import subnodes

FP16_MAX = 65504.0
_INF_NAMES = frozenset({"math.inf", "torch.inf", "np.inf", "numpy.inf", "np.Inf", "np.PINF"})
_ONES_FUNCS = frozenset({"ones", "ones_like", "new_ones"})
_FULL_FUNCS = frozenset({"full", "full_like", "new_full"})
# Tensor methods that keep the values (and so the facts) of their receiver.
KEEPS_VALUES = frozenset({
    "cuda", "cpu", "contiguous", "view", "reshape", "unsqueeze", "expand", "expand_as",
    "repeat", "clone", "detach", "squeeze", "view_as", "reshape_as", "flatten",
    "repeat_interleave",
})
# ... and of those, the ones that keep where each axis is (a reshape does not).
_KEEPS_LAYOUT = frozenset({"cuda", "cpu", "contiguous", "expand", "expand_as", "repeat", "clone",
                           "detach"})
# Functions that keep a float tensor's dtype (not its mask facts): an upcast survives them
# (vllm's `(iq @ summary.T * s).clamp(-1e4, 1e4)` after `iq = ....float()`,
# sentence-transformers' `scores.max(dim=-1).values.float()` then `.sum(dim=-1)`).
_KEEPS_DTYPE = frozenset({
    "clamp", "clamp_", "clamp_min", "clamp_max", "clip", "nan_to_num", "nan_to_num_", "abs",
    "neg", "exp", "tanh", "sigmoid", "sqrt", "rsqrt", "square", "sum", "mean", "logsumexp",
    # picking entries keeps the input's dtype (altasr's pruned RNN-T: float32 log-probs
    # gathered at the targets, then filled with -1e30)
    "gather", "index_select", "take_along_dim",
})
_PICKS = frozenset({"gather", "index_select", "take_along_dim"})
# Methods that cast to a float dtype (by their name, or by their argument).
_FLOAT_CASTS = frozenset({"to", "type", "type_as", "float", "half", "bfloat16", "double"})
# Comparison methods: a bool result.
_COMPARE_METHODS = {"eq": "==", "ne": "!=", "gt": ">", "lt": "<", "ge": ">=", "le": "<="}
_TRANSPOSES = frozenset({"T", "mT", "t", "transpose", "transpose_"})
# Methods of tensors (and arrays) that a Python bool lacks.
_ARRAY_METHODS = KEEPS_VALUES | _TRANSPOSES | {
    "float", "double", "half", "bfloat16", "bool", "long", "int", "to", "type", "type_as", "byte",
    "char", "short", "astype"}
# torch's dtype names, by the fact they give.
_HALF = frozenset({"float16", "half", "bfloat16"})
# The float dtype facts: float32, float16 and bfloat16 (same range as float32, so -1e9 fits).
FLOAT_DTYPES = frozenset({"fp32", "half", "bf16"})
HALF_DTYPES = frozenset({"half", "bf16"})
BF16_MAX = 3.3895313892515355e38
_FP32 = frozenset({"float32", "float", "float64", "double"})
_INT = frozenset({"long", "int64", "int", "int32", "int8", "uint8", "int16", "short"})
# Where the True (or 1) entries of a triangle sit, and what `== 0` / `~` turns them into.
_COMPLEMENT = {"lower": "supper", "upper": "slower", "slower": "upper", "supper": "lower"}
_TRANSPOSED = {"lower": "upper", "upper": "lower", "slower": "supper", "supper": "slower"}
# Names of functions whose result is a tokenizer's output (input_ids, attention_mask int64).
_TOKENIZER_HINTS = ("tokenizer", "processor")


@dataclass(frozen=True)
class Value:
    dtype: str | None = None  # "bool" | "int" | "fp32" | "half" | "bf16" | None (unknown)
    additive: bool = False  # a matrix of 0 and -inf / large negatives (an additive mask)
    finfo_min: bool = False  # filled with torch.finfo(...).min
    zero_one: bool = False  # a numeric matrix of 0 and 1 (triu/tril of ones, bool.float())
    all_ones: bool = False  # torch.ones: 1 everywhere (a triangle of it is 0/1)
    zeros: bool = False  # torch.zeros: 0 everywhere (a fill of it makes an additive mask)
    flag: bool | None = None  # a True/False constant (CAUSAL = True)
    wide_finfo: bool = False  # torch.finfo(torch.float32).min held in a name
    int_mask: bool = False  # a mask cast to an integer dtype (`attention_mask.int()`)
    tri: str | None = None  # where the True/1 entries sit: lower, upper, slower, supper (strict)
    hf_keep: bool = False  # a tokenizer's attention_mask: 1 = real token, int64
    hf_keep_inverted: bool = False  # that mask turned into True = padding (`== 0`, `~m.bool()`)
    pad_keep: bool = False  # `tokens != pad_idx`: True at real tokens (a keep-mask by its test)
    tokens: bool = False  # a tokenizer's output (a BatchEncoding)
    cached: bool = False  # keys/values concatenated with a cache: L != S
    diag_indices: bool = False  # torch.triu_indices(n, n) with offset 0: holds the diagonal
    returns_bool: bool = False  # a function of this file whose every return is a bool tensor
    grad: bool = False  # requires grad
    number: float | None = None  # a constant
    api: str | None = None  # an alias of a function: `sdpa` -> scaled_dot_product_attention
    mha: bool = False  # an nn.MultiheadAttention / nn.Transformer* module
    module: str | None = None  # which of them, when the constructor call was seen
    # `A(...) if flag else nn.MultiheadAttention(...)`: `module` is the class of this file, and
    # a call that its forward cannot take goes to torch's module instead (see `Linter._call`).
    or_mha: bool = False
    tensor: bool = False  # a parameter annotated `torch.Tensor`: comparing it gives a bool tensor
    # A bool mask True on a whole triangle above a diagonal, the part a causal mask hides
    # (`ones(n, n, dtype=torch.bool).triu(d)`), or a mask OR-ed with one: a True = hidden mask.
    hides_above: bool = False
    # The outer product of a mask on the query axis and one on the key axis (`k[:, :, None] &
    # k[:, None, :]`, `q.unsqueeze(-1) * k.unsqueeze(-2)`): where the query's entry is 0, its
    # whole row is 0, so a row of every padded query is empty (MC507).
    pair_keep: bool = False
    # A property of a class of this file, bound as `Class.name`: `instance.name` gives `result`
    # (Informer's `TriangularCausalMask(B, L).mask`).
    prop: bool = False
    # Position indices: `torch.arange(n)`, through reshapes and names (fastNLP's
    # `broad_cast_seq_len = torch.arange(max_len).expand(b, -1)`), compared with lengths.
    positions: bool = False
    # Token ids by their use: a parameter the function hands to an embedding (`x ==` 0 before
    # `x = self.embedding(x)`, BERT4Rec's item ids) is compared with 0 as a padding test.
    token_ids: bool = False
    # A float tensor of 0s and 1s by evidence: a bool, 0/1 or tokenizer mask cast to a float
    # dtype (`.float()`, `.to(q.dtype)`, `.type_as(scores)`); SDPA and `scores +` add it (MC508).
    float01: bool = False
    # Derived from a padding mask whose provenance is proven: a tokenizer's attention_mask or a
    # `ids != pad_id` test (survives the cast that drops hf_keep).
    padding01: bool = False
    # A keep-mask (True / 1 = may attend) whatever its dtype, by its own name (`keep`,
    # `pad_keep`, `valid_mask`: the author's word for which way it points) or by how it was made
    # (`F.unfold` of ones). Survives indexing, reshapes and casts; an inversion or a comparison
    # makes a new value without it.
    keep_mask: bool = False
    # A function of this file, or an instance of a class of it: what it (its forward) does
    # with its parameters (`checks._Role`), checked at each call with the arguments passed.
    param_roles: tuple[Any, ...] = ()
    # A function of this file (or a method, held as `self.name`): the facts every one of its
    # returns gives, whatever the arguments (`_fill_with_neg_inf(t)`: an all -inf matrix).
    result: Any = None
    # ... the same for a function that may also return None: holds where a test of the name
    # bound to its call says the call gave a tensor (`if causal is not None:`).
    result_unless_none: Any = None
    # ... a function whose every return is a tuple of one length: what each position gives
    # (`causal, padding = build_masks(...)`).
    parts: tuple[Any, ...] = ()
    # ... a generator of this file whose every yield is a tuple of one length: what each
    # position gives (`for tokens, mask in batches(...)`); its calls iterate as such.
    yielded: tuple[Any, ...] = ()
    # ... a helper whose body is `name = ...` lines and one return (`inline.Template`): a call
    # of it reads as that return of the call's own arguments.
    inline: Any = None
    # A tuple that a function of this file returned, bound to one name (`masks =
    # make_masks(...)`): what each position gives, for `a, b = masks`, `masks[1]` and the
    # parameter every call hands it to (U2-style streaming encoders pass their masks so).
    held_parts: tuple[Any, ...] = ()
    # nn.ModuleList / nn.Sequential of instances of one class of this file: what each
    # element's forward does with its parameters (`for layer in self.layers: layer(h, m)`).
    element_roles: tuple[Any, ...] = ()
    # ... and the definitions those elements are, keyed as calls are recorded (("", function),
    # (class, "forward")): a call of one picked at run time is a call of each
    element_defs: tuple[tuple[str, str], ...] = ()
    # A class of this file picked at run time from a registry (`block = ATTENTION_TYPES[kind]`
    # of a dict filled by a class decorator, or `BLOCKS = {"a": BlockA, "b": BlockB}`): the
    # classes it may be. An instance built from it has their joined roles and `element_defs`
    # (a call of the instance is a call of each class's forward).
    classes: tuple[str, ...] = ()
    # A DataLoader whose collate_fn is a function of this file returning a tuple: what each
    # position of a batch gives (`for x, frame_mask, y in loader:`).
    element_parts: tuple[Any, ...] = ()
    # ... and the name its collate_fn is given (any name: the reader of a batch spread into a
    # call, `model(**batch)`, takes the keys of the dict it returns only if it is a function of
    # this file)
    element_dict: str | None = None
    # nn.ModuleList of nn.ModuleDict literals (`{"attn": Attention(...), "ffn": ...}`, SpeechBrain's
    # and ESPnet's layout): what each key of an element is, read as `layer["attn"]` in a loop
    element_keys: tuple[tuple[str, Any], ...] = ()
    # The dict a function of this file returns with a mask among its keys (`batch =
    # collate(rows)`), by the function's name: spread into a call (`model(**batch)`), also
    # where it is handed to another function first (`align(model, batch)`), it gives that
    # function's keys
    dict_of: str | None = None
    # A member of an Enum class of this file (`AttentionType.CAUSAL`), compared by identity
    # or equality with another: the comparison's flag (`self.kind is AttentionType.CAUSAL`).
    member: str | None = None
    # ... and the class of this file every element is an instance of (its calls are keyed by it)
    element_module: str | None = None
    # A ModuleList (or list) of torch attention modules (`nn.ModuleList([nn.MultiheadAttention(d,
    # h) for _ in range(n)])`, or filled by `.append` in __init__): the module every element is
    # (`self.layers[i](q, k, v, attn_mask=m)`, `for layer in self.layers: layer(...)`)
    element_mha: str | None = None
    # An nn.ParameterList / ParameterDict: every element is a Parameter (it wraps plain tensors
    # as Parameters that require grad), so `for bias in self.biases` holds a leaf (MC505).
    element_grad: bool = False
    # Read from a batch dict the file does not build, under a tokenizer's mask key
    # (`batch["attention_mask"]`, sliced or bound to a name): int64 where Hugging Face's
    # collators made it, though the file cannot show its dtype (MC518's `~`).
    collated: bool = False
    # A @contextmanager function of this file whose body enters torch.autocast: the dtype
    # `with name(...):` runs matmuls in ("half", "bf16", or "maybe": one of the two)
    enters_autocast: str | None = None
    # Only the last position of a sequence axis (`h[:, -1:, :]`, `query[:, -1, :]`, or a layer
    # applied to one): as the query of a causal call, L = 1 while the keys keep the whole axis.
    last_position: bool = False
    # `functools.partial(F.scaled_dot_product_attention, is_causal=True)`: the keywords it binds
    bound: tuple[ast.keyword, ...] = ()
    # Token ids (or any integer sequences) padded with this value, by how the tensor was made:
    # `torch.full((b, n), PAD_ID, dtype=torch.long)` (of two axes, the rows written later are
    # not looked at), or `torch.tensor([s + [PAD] * (n - len(s)) for s in seqs])`: the text of
    # the value, so that `ids != PAD` is a padding test under any name (a group's own word for
    # padding, `DOLGU`, `RELLENO`); never a value that names a mask (a MaskGIT canvas).
    padded_with: str | None = None
    # A Python list or tuple whose every element is a tensor of this one dtype
    # (`[torch.ones(n) for n in lengths]`, or `masks = []` and then only `masks.append(m)` of
    # such tensors): what torch.cat/stack/pad_sequence of it hold. "" for an empty list no
    # element was appended to yet (`EMPTY_LIST`).
    elements: str | None = None
    # float16/bfloat16 on some path: a torch dtype object held in a name or returned by a helper
    # (`torch.bfloat16 if on_xla else torch.float32`, `downcast_dtype() or self.dtype` with a
    # helper returning torch.bfloat16 or None), or a tensor cast to one (`m.to(dtype=dtype)`).
    # Read only where a float32-only value meets it (MC517); kept through branch joins.
    maybe_half: bool = False
    # An integer 0/1 mask on one path of the helper that returned it and a bool mask on the
    # others (BLIP-2's `get_extended_attention_mask`: the tokenizer's mask reshaped for the
    # encoder, a bool causal AND for the decoder): `~` of it is wrong on that path (MC518).
    int_on_a_path: bool = False
    # The integer literal 0 (`self._forward(x, 0)`): a cache offset every call gives it reads
    # no cache (see `starts_at_zero`)
    int_zero: bool = False
    # A torch dtype object itself (`torch.float32` held in a name or a config field,
    # `compute_dtype: torch.dtype = torch.float32`): what `.to(that)` casts to.
    names_dtype: str | None = None
    # The dtype of a float tensor held in a name (`dtype = q.dtype`, `dtype =
    # self.proj.weight.dtype`): `.to(dtype)` of a 0/1 mask is a float 0/1 mask, as `.to(q.dtype)`.
    float_dtype: bool = False
    # Integer on some paths and float32 on the others (`values = torch.arange(t)` in one branch,
    # `torch.rand(b, t)` in another): no float16 on any path, whatever the joined dtype.
    never_half: bool = False
    # Where one branch of an `if` made this name a float 0/1 padding mask and another branch
    # made something else (`if mask is None: <additive> elif mask.ndim == 2: mask =
    # mask[:, None, None, :].to(dtype)`): an addition of the joined value adds 1 on that path
    # (MC508, reported at the branch, where the fix goes). Kept through further joins.
    float01_at: tuple[int, int, int] | None = None
    # Where a 0/1 mask became a float 0/1 mask (the cast: `keep[:, None, None, :].to(q.dtype)`,
    # `.float()`, `.type_as(x)`): a function the mask is handed to adds it out of sight of the
    # cast, and MC508 is reported at the cast, where the fix goes.
    floated_at: tuple[int, int, int] | None = None
    # A comparison that may give a Python bool or a bool tensor (`timeline_mask = log_seqs ==
    # 0` of an unknown `log_seqs`): what it is as a tensor, read where it must be one (a tensor
    # method called on it, torch.cat of it, `|` / `&` with a bool tensor).
    if_tensor: Any = None
    # A parameter annotated `torch.BoolTensor` (AllenNLP's masks): 0/1, but not surely bool
    # (protenix annotates so an int indicator, `1 - is_ligand`): a float cast of it is a float
    # 0/1 mask (MC520), while `1 - it` is no proof of a bool subtraction.
    annotated01: bool = False
    # A 0/1 mask (bool, 0/1, a keep-mask) cast to the dtype of another tensor whose dtype the
    # file does not show (`pad.to(points.dtype)`, `.type_as(feats)`): float unless that tensor
    # is bool or integer. SDPA and the attention modules take only bool or float masks, so
    # there it is a float 0/1 mask that they add (MC508).
    cast01: bool = False
    # An argparse Namespace (`parser.parse_args()`): `args.X` holds the default of option X
    # unless the command line gives another (see `Linter.value`).
    namespace: bool = False
    # The axes of a (batch, sequence) padding mask whose shape the file proves (a tokenizer's
    # attention_mask, `ids != pad_id`, a lengths test): "BS", then what `unsqueeze` and `None`
    # indexing make of it: "B11S" holds the sequence on the key axis of (B, H, L, S) scores,
    # "B1S1" on the query axis (MC514). A reshape, a transpose or an integer index forgets it.
    layout: str | None = None
    # ... and where a "B1S1" layout was made (line, column, end line): MC514 is reported there,
    # where the fix goes, rather than at each use.
    layout_at: tuple[int, int, int] | None = None
    # Where a triangle's direction was last set (a triu/tril, a `~`, a transpose, an `== 0`):
    # MC521 is reported there when that is in another function of the file (a builder, a
    # closure), where the fix goes. Not kept by an attribute (a buffer may be read both ways).
    tri_at: tuple[int, int, int] | None = None

    # A file's walk makes hundreds of thousands of Values: an instance's `__dict__` holds only
    # the facts that differ from their defaults (the class attributes, which every other
    # field reads), so that making one, comparing two and testing one for truth read only
    # those, not all the fields. Same results as the generated methods.
    def __init__(self, **facts: Any) -> None:
        own = self.__dict__
        for name, fact in facts.items():
            default = _DEFAULTS.get(name, _NO_FIELD)
            if default is _NO_FIELD:
                raise TypeError(f"Value() got an unexpected keyword argument {name!r}")
            if fact is not default and fact != default:
                own[name] = fact

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __bool__(self) -> bool:
        """Whether anything is known (it is not UNKNOWN)."""
        return bool(self.__dict__)


_NO_FIELD = object()
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Value)}
# The prefix of a lookup that asks for a record's field (`inputs.src_mask` of a parameter
# annotated with a NamedTuple or dataclass of the file), which only such fields answer.
FIELD = "field:"


_T = TypeVar("_T")


def replace(value: _T, /, **changes: Any) -> _T:
    """`dataclasses.replace`, reading only a Value's known facts."""
    if not isinstance(value, Value) or value.__class__ is not Value:
        return dataclasses.replace(value, **changes)  # type: ignore[type-var]
    new = Value()
    own = new.__dict__
    own.update(value.__dict__)
    for name, fact in changes.items():
        default = _DEFAULTS.get(name, _NO_FIELD)
        if default is _NO_FIELD:
            raise TypeError(f"Value() got an unexpected keyword argument {name!r}")
        if fact is not default and fact != default:
            own[name] = fact
        else:
            own.pop(name, None)
    return new  # type: ignore[return-value]


UNKNOWN = Value()
# An empty Python list, before anything is appended to it (see `Value.elements`).
EMPTY_LIST = Value(elements="")
TENSOR = Value(tensor=True)  # all that is known of a parameter annotated `torch.Tensor`
BOOL_ANNOTATED = Value(annotated01=True)  # ... and of one annotated `torch.BoolTensor`
# What an untouched parameter holds: nothing known but its annotation.
PARAMETER_VALUES = (UNKNOWN, TENSOR, BOOL_ANNOTATED)
Lookup = Callable[[str], Value]
# The pseudo-name a lookup answers with the dtype autocast gives matmul-like ops where the walk
# is (`with torch.autocast("cuda"):` -> half); no Python name can be spelled like it.
AUTOCAST = "<autocast>"
# torch functions a file may bind to a name of its own (`attend = F.scaled_dot_product_attention`,
# `_sdpa = getattr(F, "scaled_dot_product_attention")`): the name is that API.
_ALIASED_APIS = frozenset({"scaled_dot_product_attention", "triu", "tril", "masked_fill"})
# The keys a Hugging Face collator stores its keep-masks under (1 = real token, int64).
COLLATED_MASK_KEYS = frozenset({"attention_mask", "decoder_attention_mask"})


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


def receiver(call: ast.Call) -> ast.expr | None:
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def kwarg(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def argument(call: ast.Call, index: int, name: str) -> ast.expr | None:
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[:index]):
        return call.args[index]
    return kwarg(call, name)


def root_name(node: ast.AST) -> str | None:
    """`mask` for `mask`, `mask[i][j]`, `mask[i, a:b]`: the name a write lands in."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def self_attr(node: ast.AST) -> str | None:
    """`X` for `self.X` (and `self.X[...]`)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
            node.value.id == "self"):
        return node.attr
    return None


def number(node: ast.AST, lookup: Lookup | None = None) -> float | None:
    """The value of a constant numeric expression (-1e9, -10**9, float('-inf'), NEG_INF)."""
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, int) and not isinstance(v, bool):
            # an int literal past float's range (sympy's 10**400-digit constants) is no fill value
            return float(v) if abs(v) < 2 ** 1024 else None
        return v if isinstance(v, float) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = number(node.operand, lookup)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.Mult)):
        return _product_or_power(node, lookup)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
            node.func.id == "float") and len(node.args) == 1:
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            try:
                return float(arg.value)
            except ValueError:
                return None
        return number(arg, lookup)
    if module_dotted(node) in _INF_NAMES:
        return math.inf
    if lookup is not None and isinstance(node, ast.Name):
        return lookup(node.id).number
    if lookup is not None and isinstance(node, ast.Subscript) and isinstance(
            node.slice, ast.Constant) and isinstance(node.slice.value, str):
        # `cfg["mask_value"]`: the masking value a dict literal of this file holds under that
        # key (a config's defaults; only values past float16's range are kept there)
        return lookup(f"[{node.slice.value}]").number
    if lookup is not None and isinstance(node, ast.Attribute) and isinstance(
            node.value, ast.Name) and node.value.id[:1].isupper() and (
            node.value.id not in _MODULE_ROOTS):
        # `MaskValue.PAD`, `Config.NEG_INF`: a constant of a class of this file (an Enum
        # member's value, a class attribute; a capitalised class name), bound as `Class.NAME`
        # when the class ends (not `self.x`: an instance's attribute may be set to anything;
        # the rules that read one ask for it themselves)
        return lookup(f"{node.value.id}.{node.attr}").number
    return None


def _product_or_power(node: ast.BinOp, lookup: Lookup | None) -> float | None:
    left, right = number(node.left, lookup), number(node.right, lookup)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Mult):
        # Only `-1 * 1e9`-style spellings: a large value has a large literal (or `**`) in its
        # text, and `-2 * 40000` (a shape or a count) stays unread.
        if max(abs(left), abs(right)) <= FP16_MAX and not (
                _has_pow(node.left) or _has_pow(node.right)):
            return None
        return left * right
    if abs(right) > 400 or (left == 0 and right < 0):
        return None
    try:
        return float(left**right)
    except (OverflowError, ZeroDivisionError):
        return None


def _has_pow(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow)


def is_finfo_min(node: ast.AST, lookup: Lookup | None = None) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(
            node.operand, ast.Attribute) and node.operand.attr == "max":
        node = ast.Attribute(value=node.operand.value, attr="min")
    if not (isinstance(node, ast.Attribute) and node.attr == "min"):
        return lookup is not None and isinstance(node, ast.Name) and lookup(node.id).finfo_min
    base = node.value
    if isinstance(base, ast.Call):
        return call_name(base) == "finfo"
    return lookup is not None and isinstance(base, ast.Name) and lookup(base.id).api == "finfo"


def is_wide_finfo_min(node: ast.AST) -> bool:
    """`torch.finfo(torch.float32).min` (or `-...max`, dotnet/TorchSharp#1135): the float32
    minimum, which float16 cannot hold."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(
            node.operand, ast.Attribute) and node.operand.attr == "max":
        node = ast.Attribute(value=node.operand.value, attr="min")
    if not (isinstance(node, ast.Attribute) and node.attr == "min"
            and isinstance(node.value, ast.Call) and call_name(node.value) == "finfo"):
        return False
    args = node.value.args
    return bool(args) and dtype_of(args[0]) == "fp32"


def is_masking_value(node: ast.AST, lookup: Lookup | None = None) -> bool:
    """-inf, a large negative literal or finfo(...).min: a value meant to mask."""
    v = number(node, lookup)
    if v is not None:
        return v < -FP16_MAX
    return is_finfo_min(node, lookup)


def is_neg_inf(node: ast.AST, lookup: Lookup | None = None) -> bool:
    return number(node, lookup) == -math.inf


def is_true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def is_zero(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value is False:
        return True
    return number(node) == 0


def is_eq_zero(node: ast.AST, name: str) -> bool:
    """`name == 0` (either order), or `name.eq(0)`: the test that picks the untouched zeros."""
    if isinstance(node, ast.Call) and call_name(node) == "eq" and len(node.args) == 1 and (
            not node.keywords):
        base = receiver(node)
        return isinstance(base, ast.Name) and base.id == name and is_zero(node.args[0])
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return False
    if not isinstance(node.ops[0], ast.Eq):
        return False
    left, right = node.left, node.comparators[0]
    return (isinstance(left, ast.Name) and left.id == name and is_zero(right)) or (
        isinstance(right, ast.Name) and right.id == name and is_zero(left)
    )


def call_name(call: ast.Call, lookup: Lookup | None = None) -> str | None:
    """The called function's last name, through aliases (`sdpa` -> scaled_dot_product_attention)."""
    func = call.func
    if isinstance(func, ast.Name):
        if lookup is not None:
            alias = lookup(func.id).api
            if alias is not None:
                return alias
        return func.id
    if isinstance(func, ast.Attribute):
        if lookup is not None and isinstance(func.value, ast.Name) and func.value.id == "self":
            alias = lookup("self." + func.attr).api
            if alias is not None:
                return alias  # `self.attend = partial(F.scaled_dot_product_attention, ...)`
        return func.attr
    return None


_MODULE_ROOTS = frozenset({"torch", "np", "numpy", "jnp", "F", "nn"})
# What the file being linted imports under another name: `import torch as th` -> th: torch,
# `from torch.nn import functional as fn` -> fn: F. Set per file by the linter's walk.
MODULE_ALIASES: ContextVar[dict[str, str]] = ContextVar("module_aliases")
# ... and, as `FOREIGN` + its module, a name spelled as one of torch's attention classes that it
# imports from another library.
FOREIGN = "<foreign>:"
_ALIASED = {"torch": "torch", "numpy": "np", "torch.nn": "nn", "torch.nn.functional": "F",
            "jax.numpy": "jnp",
            # `from torch.cuda.amp import autocast`: a bare `autocast()` is then float16's
            "torch.cuda.amp.autocast": "torch.cuda.amp.autocast",
            "torch.cpu.amp.autocast": "torch.cpu.amp.autocast"}


def note_import(module: str, name: str | None, asname: str | None) -> None:
    """Record `import torch as th` / `from torch import nn as tnn` for the file being linted."""
    full = module if name is None else f"{module}.{name}"
    canonical = _ALIASED.get(full)
    local = asname or (None if name is None else name)
    aliases = MODULE_ALIASES.get(None)
    if name in ATTENTION_CLASSES and local is not None and aliases is not None and (
            module.split(".")[0] != "torch"):
        # hanlp's own `TransformerEncoder` (a wrapper over a Hugging Face model): not torch's
        aliases[local] = FOREIGN + full
        return
    if canonical is not None and local is not None and local != canonical and (
            aliases is not None):
        aliases[local] = canonical


def module_dotted(node: ast.AST) -> str | None:
    """`dotted`, with an aliased module's root spelled the usual way (`th.where` -> torch.where)."""
    name = dotted(node)
    aliases = MODULE_ALIASES.get(None)
    if name is None or not aliases:
        return name
    root, _, rest = name.partition(".")
    canonical = aliases.get(root)
    return name if canonical is None else canonical + ("." + rest if rest else "")


def is_module_call(call: ast.Call) -> bool:
    """`torch.zeros(...)` rather than `x.zeros(...)`: the receiver is a module-like name."""
    base = receiver(call)
    return base is None or (module_dotted(base) or "").split(".")[0] in _MODULE_ROOTS


def dtype_of(node: ast.AST | None) -> str | None:
    """The fact a dtype expression gives: `torch.float16` -> half, `torch.bool` -> bool."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        name: str | None = node.value
    else:
        name = dotted(node)
    if name is None:
        return None
    last = name.split(".")[-1]
    if last in {"bool", "bool_"}:
        return "bool"
    if last in _HALF:
        return "bf16" if last == "bfloat16" else "half"
    if last in _FP32 and name != "float":  # the Python builtin `float` as a dtype is float64
        return "fp32"
    if name == "float":
        return "fp32"
    if last in _INT and name not in {"int"}:
        return "int"
    if name == "int":
        return "int"
    return None


def _names_mask(node: ast.AST) -> bool:
    """A name, attribute or string key with `mask` in it (`batch["attention_mask"]`)."""
    return any(
        (isinstance(n, ast.Constant) and isinstance(n.value, str) and "mask" in n.value)
        or (isinstance(n, ast.Name) and "mask" in n.id.lower())
        or (isinstance(n, ast.Attribute) and "mask" in n.attr.lower())
        for n in subnodes(node))


def names_log_sum_exp(node: ast.AST) -> bool:
    """A softmax log-sum-exp by name (`lse`, `softmax_lse`, `lse_a`, `logsumexp`). Attention
    kernels keep it in float32 whatever the inputs' dtype (FlashAttention's softmax_lse, SDPA's
    and FlexAttention's logsumexp, the -inf/-1e30 sentinels of merge-state code), so a fill of
    an LSE whose dtype the file does not show is a float32 fill."""
    text = (last_name(node) or "").lower()
    return "logsumexp" in text or "lse" in re.split(r"[^a-z]+", text)


def mentions_mask(node: ast.AST) -> bool:
    """A name that reads as an attention mask or bias (MC501's filter)."""
    for n in subnodes(node):
        text = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ""
        low = text.lower()
        if any(word in low for word in ("mask", "bias", "causal", "extended")):
            return True
    return False


def _tri_of(call: ast.Call, name: str, base: Value) -> str | None:
    if name not in {"triu", "tril"} or not (base.zero_one or base.all_ones
                                            or base.dtype == "bool"):
        return None
    diagonal = argument(call, 1, "diagonal") if is_module_call(call) else argument(
        call, 0, "diagonal")
    if diagonal is None:
        diagonal = kwarg(call, "k")  # numpy's name for it: `np.tril(ones, k=-1)`
    d = 0.0 if diagonal is None else number(diagonal)
    if d == 0:
        return "upper" if name == "triu" else "lower"
    if d == 1 and name == "triu":
        return "supper"
    if d == -1 and name == "tril":
        return "slower"
    if d is None and name == "triu" and base.dtype == "bool" and base.all_ones and (
            _offset_of_lengths(diagonal)):
        # `ones(n_new, n_total, dtype=bool).triu(n_total - n_new)`: new queries at the end of
        # a cache, True from each one's own key on (as `triu` of the square case)
        return "upper"
    return None


def _offset_of_lengths(node: ast.AST | None) -> bool:
    """`n_total - n_new`, `past + 1`, `k.size(-2) - q.size(-2)`: where the last queries' diagonal
    sits among the keys, a difference or sum of sizes (not a bare name that may be negative)."""
    return isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Sub, ast.Add)) and all(
        isinstance(side, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant))
        for side in (node.left, node.right))


def _array_mask(value: Value) -> Value | None:
    """What a tensor made from an array (`torch.from_numpy(a)`) keeps of the array's facts: a
    mask's (a triangle, a keep or padding test, 0/1 values, a dtype); None when the array is
    known as none of them. A comparison of operands not known as tensors is read as the
    elementwise one it is on arrays."""
    if value.if_tensor is not None:
        value = value.if_tensor
    if (value.zeros and not value.pad_keep) or not (
            value.dtype == "bool" or value.tri or value.zero_one or value.float01
            or value.all_ones
            or value.additive or value.pad_keep or value.hf_keep or value.hf_keep_inverted
            or value.keep_mask):
        # (an array of zeros is a buffer filled later, `src[i, :k] = elems`: not a mask)
        return None
    return value


def _triangle(call: ast.Call, name: str, base: Value) -> Value:
    tri = _tri_of(call, name, base)
    zero_one = base.zero_one or base.all_ones
    hides = name == "triu" and base.dtype == "bool" and base.all_ones
    return replace(base, tri=tri, zero_one=zero_one, all_ones=False, hides_above=hides,
                   tri_at=_tri_site(tri, call))


def site(node: ast.AST) -> tuple[int, int, int]:
    """(line, column, end line) of a node: where a fact was made (`Value.layout_at`,
    `Value.tri_at`)."""
    line = getattr(node, "lineno", 1)
    return line, getattr(node, "col_offset", 0), getattr(node, "end_lineno", None) or line


def _tri_site(tri: str | None, node: ast.AST) -> tuple[int, int, int] | None:
    """Where a triangle's direction is set: at `node`, when it makes one."""
    return site(node) if tri else None


def _turned(base: Value, tri: str | None, node: ast.AST) -> Value:
    """`base` with its triangle turned to `tri` (complemented or transposed) at `node`."""
    return replace(base, tri=tri, tri_at=_tri_site(tri, node))


def describe(node: ast.AST, lookup: Lookup) -> Value:
    """The facts about an expression's value, reading names as bound before it."""
    if isinstance(node, ast.Name):
        value = lookup(node.id)
        if _KEEP_NAMES.get(node.id) is False:  # most names: nothing to add
            return value
        return _named(node.id, value)
    if isinstance(node, ast.Attribute):
        return _describe_attribute(node, lookup)
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "float":
            v = number(node, lookup)  # `MASKED = float("-inf")`
            return Value(number=v) if v is not None else UNKNOWN
        return _describe_call(node, lookup)
    if isinstance(node, ast.Compare):
        return _describe_compare(node, lookup)
    if isinstance(node, ast.UnaryOp):
        return _describe_unary(node, lookup)
    if isinstance(node, ast.BinOp):
        return _describe_binop(node, lookup)
    if isinstance(node, ast.Subscript):
        return _describe_subscript(node, lookup)
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return Value(flag=node.value)
    if isinstance(node, ast.IfExp):
        return _either(node, lookup)
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        # `downcast_dtype() or self.dtype`: a half dtype if any operand may be one
        if any(describe(v, lookup).maybe_half for v in node.values):
            return Value(maybe_half=True)
        return UNKNOWN
    if isinstance(node, (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp)):
        return _describe_sequence(node, lookup)
    v = number(node, lookup)
    if v == 0 and isinstance(node, ast.Constant) and type(node.value) is int:
        return Value(number=v, int_zero=True)
    return Value(number=v) if v is not None else UNKNOWN


def _either(node: ast.IfExp, lookup: Lookup) -> Value:
    """`a if test else b`: the facts both branches give. A `None` branch adds nothing: where
    the value is used as a tensor, the other branch gave it (`pad = lens_to_pad(lens, n) if lens
    is not None else None`)."""
    branches = [b for b in (node.body, node.orelse) if not is_none(b)]
    values = [describe(b, lookup) for b in branches]
    if not values:
        return UNKNOWN  # `None if test else None`
    if len(values) == 1 or values[0] == values[1]:
        return values[0]
    a, b = values
    shared = Value(**{f.name: getattr(a, f.name) for f in fields(Value)
                      if getattr(a, f.name) == getattr(b, f.name)})
    return replace(shared, maybe_half=True) if a.maybe_half or b.maybe_half else shared


def _describe_sequence(
    node: ast.List | ast.Tuple | ast.ListComp | ast.GeneratorExp, lookup: Lookup
) -> Value:
    """A list or tuple of tensors that all have one dtype by evidence: `[torch.ones(n) for n
    in lengths]`, `[a.float(), b.float()]`. A comprehension's own loop names are unknown inside
    it (an outer binding of the same name says nothing about them)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        if isinstance(node, ast.List) and not node.elts:
            return EMPTY_LIST  # (`masks = []`, then `masks.append(m)`: see `Value.elements`)
        if not node.elts or any(isinstance(e, ast.Starred) for e in node.elts):
            return UNKNOWN
        dtypes = {describe(e, lookup).dtype for e in node.elts}
    else:
        bound = {n.id for gen in node.generators for n in ast.walk(gen.target)
                 if isinstance(n, ast.Name)}

        def inner(name: str) -> Value:
            return UNKNOWN if name in bound else lookup(name)

        dtypes = {describe(node.elt, inner).dtype}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    return Value(elements=dtype) if dtype is not None else UNKNOWN


_KEEP_NAMES: dict[str, bool] = {}  # name -> declares_keep(name), for the names of every file


def _named(name: str, value: Value) -> Value:
    """A name's value with what its name says: a keep-mask by name (`pad_keep`), unless what
    it holds says otherwise (an additive mask, a number, a padding test, a module)."""
    keep = _KEEP_NAMES.get(name)
    if keep is None:
        keep = _KEEP_NAMES[name] = declares_keep(name)
    if not keep or value.keep_mask:
        return value
    if value.additive or value.finfo_min or value.hf_keep_inverted or value.number is not None or (
            value.flag is not None or value.api or value.mha or value.tokens or value.cached
            or value.returns_bool or value.grad or value.result is not None
            or value.result_unless_none is not None):
        return value
    return replace(value, keep_mask=True)


def _describe_attribute(node: ast.Attribute, lookup: Lookup) -> Value:
    if isinstance(node.value, ast.Name) and node.value.id[:1].isupper():
        held = lookup(f"{node.value.id}.{node.attr}")
        if held.member is not None:
            return held  # `AttentionType.CAUSAL`: a member of an Enum of this file
    if isinstance(node.value, ast.Name) and node.value.id == "self":
        # `self.mask.bool()[:n, :n]`: the buffer or attribute as the class bound it.
        known = lookup("self." + node.attr)
        if known:
            return known
    if isinstance(node.value, ast.Attribute) and (chain := dotted(node)) is not None:
        field = lookup(FIELD + chain)
        if field:  # `self.cfg.compute_dtype`, `cfg.mask.fill_value`: a record's field
            return field
    if isinstance(node.value, ast.Name) and node.value.id not in _MODULE_ROOTS:
        field = lookup(f"{FIELD}{node.value.id}.{node.attr}")
        if field:  # `inputs.src_mask` of `inputs: EncoderInputs`, a record of this file
            return field
        owner = lookup(node.value.id).module
        if owner is not None:  # an instance of a class of this file: one of its properties
            held = lookup(f"{owner}.{node.attr}")
            if held.prop and isinstance(held.result, Value):
                return held.result
    if node.attr in _TRANSPOSES:
        base = _describe_receiver(node.value, node.attr, lookup)
        return _turned(base, _TRANSPOSED.get(base.tri or ""), node) if base.tri else base
    if node.attr == "attention_mask" and describe(node.value, lookup).tokens:
        return Value(dtype="int", hf_keep=True)
    if node.attr == "dtype" and _float_target(node, lookup):
        return Value(float_dtype=True)
    if is_finfo_min(node, lookup):
        return Value(finfo_min=True, wide_finfo=is_wide_finfo_min(node))
    v = number(node, lookup)
    if v is not None:
        return Value(number=v)
    if node.attr in _ALIASED_APIS or (
            node.attr in ATTENTION_CLASSES and module_dotted(node.value) in {"nn", "torch.nn"}):
        return Value(api=node.attr)  # `attend = F.scaled_dot_product_attention`, `MHA = nn.M...`
    if module_dotted(node.value) == "torch" and (held_dtype := dtype_of(node)) is not None:
        # `dtype = torch.bfloat16`: the dtype object
        return Value(maybe_half=held_dtype in HALF_DTYPES, names_dtype=held_dtype)
    return UNKNOWN


def _describe_subscript(node: ast.Subscript, lookup: Lookup) -> Value:
    # `(lengths <= t)[:, None]`: a Python bool cannot be indexed, so the comparison is a tensor's
    base = _describe_compare(node.value, lookup, elementwise=True) if isinstance(
        node.value, ast.Compare) else describe(node.value, lookup)
    key = node.slice
    if base.tokens and isinstance(key, ast.Constant) and key.value == "attention_mask":
        return Value(dtype="int", hf_keep=True, layout="BS")
    if (not base or base.tokens or base.dict_of) and isinstance(key, ast.Constant) and (
            isinstance(key.value, str)):
        # (`processor.pad(images)["pixel_mask"]` reads as a tokenizer's output by its names,
        # but a dict of this file returned under that key is what it holds)
        written = dotted(node.value)
        held = lookup(f'{written}["{key.value}"]') if written is not None else UNKNOWN
        if held:
            return held  # what this function wrote under the key (`res["mask"] = ...`)
        held = lookup(f"[{key.value}]")  # a field a function of this file returns in a dict
        if held and key.value in COLLATED_MASK_KEYS and ((held.dtype == "int" and not (
                held.hf_keep_inverted or held.pad_keep or held.keep_mask or held.additive
                or held.finfo_min or held.tri or held.hides_above or held.layout)) or (
                held.pad_keep and held.dtype in {"bool", "int"} and not (
                    held.hf_keep_inverted or held.tri or held.hides_above))):
            # an integer mask a tokenizer of this file returns under the tokenizer's key, built
            # as zeros with 1 written at the real tokens (sentence-transformers' layout): the
            # key's convention, 1 = real token; or a keep-mask the file wrote so under that key
            # (a bool `zeros` with True at each row's real tokens): the key's convention too
            return replace(held, hf_keep=True, collated=True)
        if held:
            return held
        if key.value in COLLATED_MASK_KEYS:
            # `batch["attention_mask"]` of a batch not known here: the key is the tokenizer's,
            # 1 = real token (its dtype is the collator's: int64 from Hugging Face's)
            return Value(hf_keep=True, collated=True, layout="BS")
    if not base and not isinstance(key, (ast.Constant, ast.Slice, ast.Tuple)):
        # `self._mask_cache[n]`: what this file stored in it under a run-time key
        name = dotted(node.value)
        held = lookup(name + "[]") if name is not None else UNKNOWN
        if held:
            return held
    if _cache_prefix(node, lookup):
        return Value(cached=True)
    if base.element_mha:  # `self.attention_layers[i]`: one of the attention modules
        return Value(mha=True, module=base.element_mha)
    if base.element_grad:  # `self.biases[i]`: one of the Parameters
        return Value(grad=True)
    if _last_position_index(key):
        return replace(base, last_position=True, tokens=False, api=None, mha=False,
                       number=None, tri=None, tri_at=None, layout=None,
                       layout_at=None) if base else Value(
            last_position=True)
    if base.held_parts and isinstance(key, ast.Constant) and type(key.value) is int and (
            -len(base.held_parts) <= key.value < len(base.held_parts)):
        return base.held_parts[key.value] or UNKNOWN  # `masks[1]`
    if base in PARAMETER_VALUES and _extends_hf_mask(node):
        return Value(hf_keep=True)
    if _extension_key(node.slice) and _untouched_hf_zero_test(node.value, lookup):
        # `(attention_mask == 0)[:, None, None, :]`: the same idiom, True at the padding
        return Value(dtype="bool", hf_keep_inverted=True)
    if not base:
        return UNKNOWN
    # Indexing keeps the dtype and the kind of entries; a triangle survives only a square
    # slice (`bias[:, :, :T, :T]`), not an offset one.
    tri = base.tri if _square_slice(key) or _leading_axes(key) else None
    if isinstance(key, ast.Name) and base.layout and (
            picked := lookup(key.id)).dtype == "int" and picked.tensor:
        # `keep[idx]` of an int64 index tensor (`idx = perm[i:i + b]`): the rows it picks,
        # on the same axes (a bool index, which flattens, is no int tensor)
        return replace(base, tri=None, tri_at=None, tokens=False, api=None, mha=False,
                       number=None, dict_of=None)
    layout = _indexed_layout(_tokenizer_layout(base) if any(is_none(p) for p in (
        key.elts if isinstance(key, ast.Tuple) else [key])) else base.layout, key)
    return replace(base, tri=tri, tri_at=base.tri_at if tri else None, tokens=False, api=None,
                   mha=False, number=None, layout=layout, dict_of=None,
                   layout_at=_layout_made(base, layout, node))


def _indexed_layout(layout: str | None, key: ast.expr) -> str | None:
    """The axes after `mask[key]`: `None` adds an axis, a plain `:` or `...` keeps axes, anything
    else (an integer, a tensor) is not followed."""
    if layout is None:
        return None
    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    consumed = sum(not is_none(p) and not (isinstance(p, ast.Constant) and p.value is ...)
                   for p in parts)
    out: list[str] = []
    i = 0
    for part in parts:
        if is_none(part):
            out.append("1")
        elif isinstance(part, ast.Constant) and part.value is ...:
            kept = len(layout) - consumed
            if kept < 0:
                return None
            out.extend(layout[i:i + kept])
            i += kept
        elif isinstance(part, ast.Slice) and part.step is None and i < len(layout):
            out.append(layout[i])
            i += 1
        else:
            return None
    return "".join(out) + layout[i:]


def _layout_made(base: Value, layout: str | None, node: ast.AST) -> tuple[int, int, int] | None:
    """Where `layout` was made: at `node` when it turns the mask onto the query axis, else where
    its receiver's was made."""
    if layout is None:
        return None
    if layout == "B1S1" and base.layout != "B1S1":
        return site(node)
    return base.layout_at


def _tokenizer_layout(base: Value) -> str | None:
    """A mask's layout, or (batch, seq) for a tokenizer's mask whose layout nothing here showed:
    read only as the layout that new axes make of it (`.unsqueeze(1).unsqueeze(3)`,
    `[:, None, :, None]`: TAPAS's query-axis mask, MC514), which put on a mask of more axes
    would make a tensor of five or six."""
    if base.layout is None and base.hf_keep:
        return "BS"
    return base.layout


# A mask's name that says it marks tokens (`polyline_valid`, `src_mask`, `keep`) and one that
# says the queries' side (a query-padding mask is laid on the query axis on purpose).
_PER_TOKEN_NAME = re.compile(r"(?:^|_)(?:mask|masks|valid|keep|pad|padding)(?:_|$)")
_QUERY_SIDE_NAME = re.compile(r"(?:^|_)(?:q|query|queries|row|rows|tgt|target|dec|decoder)(?:_|$)")


def _per_token_on_query_axis(call: ast.Call, base: Value) -> bool:
    """`valid.unsqueeze(1).unsqueeze(3)` of a per-token mask by its name, whose layout the file
    does not show: only a 2-D tensor becomes 4-D so, its last axis on the third, the queries'
    of (batch, heads, queries, keys) scores (held-out 76's VectorNet helper). Not of a mask
    named for the queries' side."""
    dim = argument(call, 0, "dim")
    if base.layout is not None or dim is None or number(dim) != 3:
        return False
    inner = receiver(call)
    first = argument(inner, 0, "dim") if isinstance(inner, ast.Call) else None
    if not (isinstance(inner, ast.Call) and call_name(inner) == "unsqueeze" and first is not None
            and number(first) == 1):
        return False
    name = (last_name(receiver(inner) or inner) or "").lower()
    return bool(_PER_TOKEN_NAME.search(name)) and not _QUERY_SIDE_NAME.search(name)


def _batch_flattened(layout: str | None, call: ast.Call, name: str) -> str | None:
    """(batch, seq) for `mask.reshape(b, -1)` / `.view(b, -1)` / `.flatten(1)` of a padding mask
    whose other axes are its sequence and broadcast ones (`keep[:, None, :].expand(-1, f,
    -1).reshape(b, -1)`: AST's frequency-by-time patches, one padding mask over all of them)."""
    if layout is None or not layout.startswith("B") or layout.count("S") != 1 or set(
            layout[1:]) - {"S", "1"}:
        return None
    if name in {"reshape", "view"} and len(call.args) == 2 and not call.keywords and number(
            call.args[1]) == -1:
        return "BS"
    if name == "flatten" and len(call.args) == 1 and number(call.args[0]) == 1:
        return "BS"
    if name in {"reshape", "view"} and layout == "BS" and len(call.args) == 4 and not (
            call.keywords) and number(call.args[0]) != 1 and [
                number(a) == 1 for a in call.args[1:]].count(True) == 2:
        # `mask.view(b, 1, s, 1)` / `.reshape(m.shape[0], 1, 1, m.shape[1])` of a (batch, seq)
        # mask: its two axes keep their order, on the two places that are not 1 (diffusers'
        # and finetrainers' `attn_mask.view(attn_mask.size(0), 1, attn_mask.size(1), 1)`)
        return "B" + "".join("1" if number(a) == 1 else "S" for a in call.args[1:])
    return None


def _unsqueezed_layout(layout: str | None, call: ast.Call) -> str | None:
    """The axes after `mask.unsqueeze(d)`."""
    dim = argument(call, 0, "dim")
    d = number(dim) if layout is not None and dim is not None else None
    if layout is None or d is None or d != int(d):
        return None
    at = int(d) + len(layout) + 1 if d < 0 else int(d)
    return layout[:at] + "1" + layout[at:] if 0 <= at <= len(layout) else None


def _last_position_index(key: ast.AST) -> bool:
    """`[:, -1:, :]`, `[:, -1]`, `[..., -1:, :]`: a subscript that keeps only the last position of
    an axis after the first (the batch axis is never the sequence)."""
    parts = key.elts if isinstance(key, ast.Tuple) else []
    for part in parts[1:]:
        if isinstance(part, ast.Slice) and part.upper is None and part.step is None and (
                number(part.lower) == -1 if part.lower is not None else False):
            return True
        if not isinstance(part, ast.Slice) and number(part) == -1:
            return True
    return False


def _extends_hf_mask(node: ast.Subscript) -> bool:
    """`attention_mask[:, None, None, :]`: Hugging Face's extended-mask idiom (BERT's
    get_extended_attention_mask) on a 2-D `attention_mask` whose value is not known here: the
    (batch, keys) mask of 1 = real token (conventions.md: a 2-D additive mask is not what HF
    passes). Every such expansion across the precision corpora reads it that way."""
    return isinstance(node.value, ast.Name) and node.value.id == "attention_mask" and (
        _extension_key(node.slice))


def _untouched_hf_zero_test(node: ast.AST, lookup: Lookup) -> bool:
    """`attention_mask == 0` (or `.eq(0)`) on a parameter whose value is not known here."""
    return is_eq_zero(node, "attention_mask") and lookup("attention_mask") in PARAMETER_VALUES


def _extension_key(key: ast.expr) -> bool:
    """The key of `[:, None, None, :]` or `[:, None, :, :]` (see `_extends_hf_mask`)."""
    parts = key.elts if isinstance(key, ast.Tuple) else []
    if len(parts) != 4 or not is_none(parts[1]):
        return False
    # `[:, None, None, :]` (2-D), or `[:, None, :, :]`: the same method's branch for a 3-D
    # (batch, queries, keys) mask, still 1 = may attend
    full = [p for p in parts if p is not parts[1] and not is_none(p)]
    return len(full) in {2, 3} and (len(full) == 3 or is_none(parts[2])) and all(
        isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None
        for p in full)


def key_axes_added(key: ast.expr) -> bool:
    """The key of `[:, None, None, :]`: a (batch, seq) tensor given SDPA's head and query
    axes (the 2-D case of `_extension_key`)."""
    return _extension_key(key) and isinstance(key, ast.Tuple) and is_none(key.elts[2])


def _cache_prefix(node: ast.Subscript, lookup: Lookup) -> bool:
    """`self.cache_k[:bsz, : start_pos + seqlen]`: a static KV cache read up to the new tokens
    (meta-llama's Attention.forward): the cached keys and the new ones, L != S."""
    if "cache" not in (dotted(node.value) or "").lower():
        return False
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return any(isinstance(p, ast.Slice) and p.lower is None and isinstance(p.upper, ast.BinOp)
               and isinstance(p.upper.op, ast.Add) and not starts_at_zero(p.upper, lookup)
               for p in parts)


def starts_at_zero(end: ast.BinOp, lookup: Lookup) -> bool:
    """`start + n` where `start` is 0 on every call of this file (flash-rt's Cosmos reasoner
    runs its static-cache layer only for the prefill, `self._forward(embeds, ..., 0)`): the
    slice holds the new keys alone, L == S."""
    return any(isinstance(term, ast.Name) and lookup(term.id).int_zero
               for term in (end.left, end.right))


def _leading_axes(key: ast.expr) -> bool:
    """`m[None, None]`, `m[None, :, :]`: axes of size 1 added in front, the last two axes (a
    triangle's) untouched."""
    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    leading = 0
    while leading < len(parts) and is_none(parts[leading]):
        leading += 1
    return leading > 0 and all(isinstance(p, ast.Slice) and p.lower is None and p.upper is None
                               and p.step is None for p in parts[leading:])


def _square_slice(key: ast.expr) -> bool:
    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    slices = [p for p in parts if isinstance(p, ast.Slice)]
    if len(slices) < 2 or len(slices) != len(parts) - sum(
            isinstance(p, ast.Constant) and p.value is None for p in parts):
        return False
    if any(s.lower is not None or s.step is not None for s in slices):
        return False
    a, b = slices[-2].upper, slices[-1].upper
    return ast.dump(a) == ast.dump(b) if a is not None and b is not None else a is b


def _describe_compare(node: ast.Compare, lookup: Lookup, elementwise: bool = False) -> Value:
    """A comparison: bool when its left side reads as a tensor, or when `elementwise` (the
    result is used as an array: `(self.arange >= n).transpose(0, 1)`)."""
    if len(node.ops) != 1:
        return UNKNOWN
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) and any(
            isinstance(side, ast.Attribute) for side in (left, right)):
        a, b = describe(left, lookup).member, describe(right, lookup).member
        if a is not None and b is not None:  # `self.kind is AttentionType.CAUSAL`
            return Value(flag=(a == b) is isinstance(op, (ast.Is, ast.Eq)))
    if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
        return UNKNOWN  # identity and membership give a Python bool, never a tensor
    if not elementwise and _python_scalar(left):
        return UNKNOWN  # `len(x) > 0`, `x.size(-1) > 4`, `x.shape[0] == 1`: a Python bool
    lv = describe(left, lookup)
    tensorish = elementwise or bool(lv) or (
        isinstance(left, (ast.Call, ast.Subscript)) and not _record_field(left)) or (
        mentions_mask(left) or (last_name(left) or "").endswith("ids") or _names_pad_index(right))
    if not tensorish:
        as_tensor = _compared(lv, op, right, left)
        return Value(if_tensor=as_tensor) if as_tensor.dtype == "bool" else UNKNOWN
    return _compared(lv, op, right, left)


def _as_tensor(node: ast.expr, lookup: Lookup) -> Value:
    """What `node` holds where only a tensor can stand (an element of torch.cat's list): a
    comparison, or a name bound to one, is an elementwise one."""
    if isinstance(node, ast.Compare):
        return _describe_compare(node, lookup, elementwise=True)
    described = describe(node, lookup)
    return described.if_tensor if isinstance(described.if_tensor, Value) else described


def _record_field(node: ast.AST) -> bool:
    """`item['answer']`: a field of a dict or JSON record whose key names no mask. No tensor is
    indexed by a string, so the subscript alone says nothing of a tensor (InternVL's
    `cnt = item['answer'] == item['gt_answers']` is a Python bool); `batch['attention_mask']`
    and `batch['input_ids']` still read as tensors by their keys."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)):
        return False
    return not mentions_mask(ast.Name(node.slice.value, ast.Load()))


# Calls that give a Python number or bool, never a tensor.
_SCALAR_CALLS = frozenset({
    "len", "size", "dim", "ndimension", "numel", "item", "int", "float", "bool", "isinstance",
    "hasattr", "callable", "nelement", "element_size", "get_device"})


def _python_scalar(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return call_name(node) in _SCALAR_CALLS
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and (
        node.value.attr in {"shape", "ndim"})


def _describe_receiver(node: ast.AST, method: str, lookup: Lookup) -> Value:
    """The facts about the receiver of `.method`: a comparison that the method is called on is
    elementwise, since a Python bool has none of these methods (espnet's
    `(self.beam_arange >= n).transpose(0, 1)` is a bool tensor, whatever `self.beam_arange`)."""
    if isinstance(node, ast.Compare) and method in _ARRAY_METHODS:
        return _describe_compare(node, lookup, elementwise=True)
    described = describe(node, lookup)
    if method in _ARRAY_METHODS and isinstance(described.if_tensor, Value):
        return described.if_tensor  # `timeline_mask.unsqueeze(1)`: a tensor after all
    return described


def _list_padding(node: ast.AST) -> str | None:
    """The value a comprehension pads each sequence with (`[s + [PAD] * (n - len(s)) for s in
    seqs]`, also `[PAD] * k + s` for left padding), by its text; None otherwise."""
    if not isinstance(node, ast.ListComp) or not isinstance(node.elt, ast.BinOp) or not (
            isinstance(node.elt.op, ast.Add)):
        return None
    for side, rest in ((node.elt.right, node.elt.left), (node.elt.left, node.elt.right)):
        if not isinstance(rest, (ast.Name, ast.Subscript, ast.Call, ast.Attribute)):
            continue  # (`[1] * len(r) + [0] * (n - len(r))` is a keep-mask, not padded ids)
        if isinstance(side, ast.BinOp) and isinstance(side.op, ast.Mult):
            for repeated in (side.left, side.right):
                if isinstance(repeated, ast.List) and len(repeated.elts) == 1 and isinstance(
                        repeated.elts[0], (ast.Name, ast.Attribute, ast.Constant)) and not (
                        isinstance(repeated.elts[0], ast.Constant)
                        and not isinstance(repeated.elts[0].value, int)):
                    text = ast.unparse(repeated.elts[0])
                    if "mask" not in text.lower():  # (a [MASK] id pads nothing)
                        return text
    return None


def _is_pad_test(left: ast.AST, right: ast.AST) -> bool:
    """`input_ids == pad_token_id`, `ids.eq(PAD)`, `input_ids == 0`: True at padding (a token id
    compared with 0 is a padding test whatever the real pad id: the author took 0 for it)."""
    name = (last_name(left) or "").lower()
    if name.endswith("ids") and "pad" in (dotted(right) or last_name(right) or "").lower():
        return True
    return token_ids_name(name) and number(right) == 0


def _past_length(left: ast.AST, op: ast.cmpop, right: ast.AST, positions: bool = False
                 ) -> bool | None:
    """A comparison of positions with sequence lengths: True when it holds past the length
    (padding), False when it holds before it (real positions), None for anything else.
    `positions`: what the left side holds is known to be position indices. Not a count of
    padding (`arange(t)[None, :] < n_pad[:, None]` is True at a left padding, the other way
    round from a count of real positions)."""
    if any(_counts_padding(side) for side in (left, right)):
        return None
    if (positions or _positions(left)) and (_lengths(right) or (
            _arange_row(left) and _count_column(right))):
        after = isinstance(op, (ast.Gt, ast.GtE))
    elif (_lengths(left) or (_count_column(left) and _arange_row(right))) and _positions(right):
        after = isinstance(op, (ast.Lt, ast.LtE))
    else:
        return None
    return after if isinstance(op, (ast.Gt, ast.GtE, ast.Lt, ast.LtE)) else None


def _counts_padding(node: ast.AST) -> bool:
    """`n_pad[:, None]`, `pad_lengths`, `num_padding`: a count of padding positions by name
    (not a pad token's id, `pad_id`)."""
    node = _stripped(node)
    words = set(re.split(r"[^a-z]+", (last_name(node) or "").lower()))
    return isinstance(node, (ast.Name, ast.Attribute)) and bool(
        words & {"pad", "pads", "padding", "padded"}) and bool(
        words & {"n", "num", "count", "counts", "len", "lens", "length", "lengths", "size",
                 "sizes", "total"})


def _stripped(node: ast.AST) -> ast.AST:
    """The tensor under indexing and reshapes: `lens[:, None]`, `r.unsqueeze(0)` -> the name."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in KEEPS_VALUES | {"to", "type_as"}):
            node = node.func.value
        else:
            return node


def _scaled_positions(node: ast.AST) -> ast.AST:
    """The positions under a scale and an offset that keep their order (`arange(t)[None, :] *
    stride + patch`: where each patch of AST's spectrogram ends), else `node` itself."""
    while isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        steps = [side for side in (node.left, node.right) if isinstance(
            side, (ast.Constant, ast.Name, ast.Attribute))]
        if len(steps) != 1 or (isinstance(node.op, ast.Sub) and steps[0] is node.left) or (
                isinstance(node.op, ast.Mult) and (number(steps[0]) or 1) <= 0):
            return node
        node = node.right if steps[0] is node.left else node.left
    return node


def _positions(node: ast.AST) -> bool:
    """`torch.arange(n)`, `seq_range`, `self.arange[:n]`: position indices by call or name."""
    node = _stripped(_scaled_positions(node))
    if isinstance(node, ast.Call):
        return call_name(node) == "arange"
    words = re.split(r"[^a-z]+", (last_name(node) or "").lower())
    return "arange" in words or "range" in words or "positions" in words


def _arange_row(node: ast.AST) -> bool:
    """`torch.arange(n)[None, :]`, `torch.arange(n)[None]`, `torch.arange(n).unsqueeze(0)`: a row
    of positions made here, laid against one count per batch row."""
    node = _scaled_positions(node)
    if isinstance(node, ast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        row = len(parts) in {1, 2} and is_none(parts[0]) and all(
            isinstance(p, ast.Slice) and p.lower is None and p.upper is None for p in parts[1:])
        inner = node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "unsqueeze") and len(node.args) == 1:
        row, inner = number(node.args[0]) == 0, node.func.value
    else:
        return False
    return row and isinstance(inner, ast.Call) and call_name(inner) == "arange"


def _count_column(node: ast.AST) -> bool:
    """`n_kept[:, None]`, `counts.unsqueeze(-1)`: one count per batch row, as a column (what
    `arange(n)[None, :]` is compared with to mark the positions past each row's count)."""
    if isinstance(node, ast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
        column = len(parts) == 2 and is_none(parts[1]) and isinstance(parts[0], ast.Slice) and (
            parts[0].lower is None and parts[0].upper is None)
        inner = node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "unsqueeze") and len(node.args) == 1:
        column, inner = number(node.args[0]) in {1, -1}, node.func.value
    else:
        return False
    return column and isinstance(inner, (ast.Name, ast.Attribute))


def _lengths(node: ast.AST) -> bool:
    """`lengths`, `lens`, `ys_in_lens`, `seq_len`: sequence lengths by name (not a size call)."""
    node = _stripped(node)
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return False
    words = re.split(r"[^a-z]+", (last_name(node) or "").lower())
    return any(w in {"lens", "lengths", "length", "len", "lenghts"} for w in words) and not any(
        w in {"max", "min", "maxlen"} for w in words)  # `max_len` bounds every sequence


def token_ids_name(name: str) -> bool:
    """`input_ids`, `ids`, `token_ids`, `src_ids`: a tensor of token ids (int64), not position,
    type or segment ids."""
    low = name.rsplit(".", 1)[-1].lower()
    return low in {"ids", "input_ids", "token_ids", "tok_ids", "src_ids", "tgt_ids", "trg_ids"} or (
        low.endswith("_input_ids"))


def _names_pad_index(node: ast.AST) -> bool:
    """`self.trg_pad_idx`, `PAD_IDX`, `self.null_idx`, `padding_idx`, `opt["null_idx"]` (ParlAI's
    options), `vocab["<pad>"]`: a token id to compare with."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(
            node.slice.value, str):
        text = node.slice.value.lower()
    else:
        text = (dotted(node) or "").lower()
    return "pad" in text or "null_idx" in text


# `i[:, None] OP i[None, :]` of positions: where the True entries of the comparison sit.
_COLUMN_VS_ROW = {ast.GtE: "lower", ast.Gt: "slower", ast.LtE: "upper", ast.Lt: "supper"}


def _position_axis(node: ast.AST) -> tuple[str, str] | None:
    """("column" | "row", name) for positions laid on one axis: `i[:, None]`,
    `i.unsqueeze(-1)` / `i.unsqueeze(1)` (a column), `i[None, :]`, `i[None]`, `i.unsqueeze(0)` (a
    row), where `i` is a name of positions (`torch.arange(n)`, `pos`, `seq_range`)."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        full = [isinstance(p, ast.Slice) and p.lower is None and p.upper is None
                and p.step is None for p in parts]
        if len(parts) == 2 and full[0] and is_none(parts[1]):
            return "column", node.value.id
        if parts and is_none(parts[0]) and all(full[1:]) and len(parts) <= 2:
            return "row", node.value.id
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "unsqueeze") and len(node.args) == 1 and isinstance(
            node.func.value, ast.Name):
        axis = number(node.args[0])
        if axis in {1, -1}:
            return "column", node.func.value.id
        if axis == 0:
            return "row", node.func.value.id
    return None


def _position_triangle(left: ast.AST, op: ast.cmpop, right: ast.AST, lv: Value) -> str | None:
    """The triangle a comparison of positions with themselves makes: `i[:, None] >= i[None, :]`
    is True on and below the diagonal (query i may see key j <= i), `>` strictly below, and
    the other way round for `<=` / `<` or for the row written first."""
    a, b = _position_axis(left), _position_axis(right)
    if a is None or b is None or a[1] != b[1] or a[0] == b[0] or not (
            lv.positions or _positions(left)):
        return None
    tri = _COLUMN_VS_ROW.get(type(op))
    if tri is None:
        return None
    return tri if a[0] == "column" else _TRANSPOSED[tri]


def _compared(lv: Value, op: ast.cmpop, right: ast.AST, left: ast.AST) -> Value:
    out = Value(dtype="bool")
    tri = _position_triangle(left, op, right, lv)
    if tri is not None:
        return _turned(out, tri, left)
    past_length = _past_length(left, op, right, lv.positions)
    if past_length is not None:
        # `arange(n)[None] >= lengths[:, None]` (ESPnet's make_pad_mask): True at padding;
        # `arange(n)[None] < lengths[:, None]` (sequence_mask): True at real positions
        out = replace(out, layout=_batch_by_sequence(left, right))
        return replace(out, hf_keep_inverted=True) if past_length else replace(out, pad_keep=True)
    layout = _batch_by_sequence(left, right) if lv.layout is None else lv.layout
    if _is_pad_test(left, right) or (lv.token_ids and number(right) == 0) or (
            lv.padded_with is not None and ast.unparse(right) == lv.padded_with):
        if isinstance(op, ast.Eq):
            return replace(out, hf_keep_inverted=True, layout=layout)
        if isinstance(op, ast.NotEq) or (isinstance(op, ast.Gt) and number(right) == 0):
            return replace(out, hf_keep=True, pad_keep=True, layout=layout)
    if isinstance(op, ast.NotEq) and _names_pad_index(right):
        return replace(out, pad_keep=True, layout=layout)
    c = number(right)
    if c is not None:
        out = replace(out, layout=lv.layout, layout_at=lv.layout_at)  # the same axes
    if (isinstance(op, ast.Eq) and c == 0) or (isinstance(op, ast.NotEq) and c == 1):
        if lv.tri:
            # (`mask == 0` is how a keep-mask becomes a fill condition: where the triangle was
            # made is still where it points the wrong way, T2M-GPT's `causal_keep` builder)
            out = replace(_turned(out, _COMPLEMENT[lv.tri], left), tri_at=lv.tri_at or site(
                left))
        if lv.hf_keep or lv.keep_mask:
            out = replace(out, hf_keep_inverted=True)
    elif ((isinstance(op, ast.NotEq) and c == 0) or (isinstance(op, ast.Eq) and c == 1)
          or (isinstance(op, ast.Gt) and c == 0)):
        out = replace(out, tri=lv.tri, tri_at=lv.tri_at, hf_keep=lv.hf_keep,
                      keep_mask=lv.keep_mask)
        if not isinstance(op, ast.NotEq) and last_name(left) == "attention_mask" and not (
                lv.additive or lv.finfo_min or lv.hf_keep_inverted or lv.dtype == "bool"):
            # `attention_mask == 1`, `attention_mask > 0` (torchTextClassifiers' LabelAttention):
            # only a 0/1 Hugging Face mask makes the test mean anything (an additive 0 / -inf
            # mask is never 1 nor above 0), and there it is True at the real tokens
            out = replace(out, keep_mask=True)
    return out


def _batch_by_sequence(left: ast.AST, right: ast.AST) -> str | None:
    """"BS" for a padding test of token ids or lengths written on their (batch, sequence) axes:
    `ids != pad_id`, `arange(n)[None, :] < lengths[:, None]`. Not when either side is reshaped
    or indexed into more axes first (`ids[:, None, :] != pad`), whose axes are not followed."""
    for side in (left, right):
        for node in ast.walk(side):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(
                    node.slice.elts) > 2:
                return None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr in KEEPS_VALUES | _TRANSPOSES | {"permute", "movedim"}
                    and node.func.attr not in _KEEPS_LAYOUT):
                return None
    return "BS"


def _describe_unary(node: ast.UnaryOp, lookup: Lookup) -> Value:
    if isinstance(node.op, ast.Invert):
        base = describe(node.operand, lookup)
        if not base and _HIDING_NAME.search(last_name(node.operand) or ""):
            # `~is_index_masked`, `~invalid` of a mask named for what it hides (True = hidden),
            # which `~` says is bool (on an int mask it gives -1 and -2): True = kept
            return Value(dtype="bool", keep_mask=True)
        if base.dtype != "bool":
            return UNKNOWN
        tri = _COMPLEMENT.get(base.tri or "")
        return Value(dtype="bool", tri=tri, tri_at=_tri_site(tri, node),
                     hf_keep_inverted=base.hf_keep or base.keep_mask,
                     hf_keep=base.hf_keep_inverted, layout=base.layout,
                     layout_at=base.layout_at)
    v = number(node, lookup)
    if v is not None:
        return Value(number=v)
    if isinstance(node.op, ast.USub) and is_finfo_min(node, lookup):
        # (`MASK_VALUE = -torch.finfo(torch.float32).max`: float32's minimum, as `.min` is)
        return Value(finfo_min=True, wide_finfo=is_wide_finfo_min(node))
    return UNKNOWN


# A mask's name that says True = hidden: `is_index_masked`, `is_masked`, `invalid`. (Not
# `key_padding_mask` or `pad`: flash-attn's key_padding_mask is True at the kept keys.)
_HIDING_NAME = re.compile(r"(?:^|_)(?:masked|invalid)$")


def _describe_binop(node: ast.BinOp, lookup: Lookup) -> Value:
    facts = _binop_facts(node, lookup)
    if isinstance(node.op, (ast.BitAnd, ast.Mult)) and not facts.pair_keep and (
            _outer_product(node.left, node.right) or _holds_outer_product(node)):
        # what the product is, and a pair mask (MC507); more factors AND-ed in (`same &
        # real[:, :, None] & real[:, None, :]`) only empty more
        return replace(facts, pair_keep=True)
    return facts


def _holds_outer_product(node: ast.BinOp) -> bool:
    """A chain `a & b & c` (or of `*`) of three or more factors, two of which make an outer
    product (see `_outer_product`)."""
    factors: list[ast.AST] = []
    pending: list[ast.AST] = [node]
    while pending:
        part = pending.pop()
        if isinstance(part, ast.BinOp) and type(part.op) is type(node.op):
            pending.extend((part.right, part.left))
        else:
            factors.append(part)
    return len(factors) > 2 and any(_outer_product(a, b) for i, a in enumerate(factors)
                                    for b in factors[i + 1:])


def _binop_facts(node: ast.BinOp, lookup: Lookup) -> Value:
    v = number(node, lookup)
    if v is not None:
        return Value(number=v)
    if isinstance(node.op, ast.MatMult):
        autocast = lookup(AUTOCAST)
        if autocast:
            return autocast  # autocast runs `a @ b` in its dtype, whatever a and b are
    left, right = describe(node.left, lookup), describe(node.right, lookup)
    if isinstance(node.op, ast.Mult):
        for a_node, b_node in ((node.left, node.right), (node.right, node.left)):
            if one_minus(a_node) and is_finfo_min(b_node, lookup):
                return Value(finfo_min=True, additive=True)  # HF's `(1.0 - m) * finfo.min`
            weight = number(b_node, lookup)
            if one_minus(a_node) and weight is not None and weight <= -1000:
                # BERT's extended mask `(1.0 - m) * -10000.0`: fits float16, still additive
                return Value(additive=True)
        for a, b, b_node in ((left, right, node.right), (right, left, node.left)):
            if a.zero_one and (b.finfo_min or is_finfo_min(b_node, lookup)):
                return Value(finfo_min=True, additive=True)
            if a.zero_one and is_masking_value(b_node, lookup) and not is_neg_inf(
                    b_node, lookup):
                return Value(additive=True)
            if a.all_ones and is_masking_value(b_node, lookup):
                # `torch.ones(sz, sz) * float('-inf')` (the seed guide's causal mask, before
                # its triu): -inf everywhere, as torch.full(..., -inf) is
                return Value(dtype=a.dtype, additive=True,
                             finfo_min=bool(b.finfo_min or is_finfo_min(b_node, lookup)))
        for a, b, a_node, b_node in ((left, right, node.left, node.right),
                                     (right, left, node.right, node.left)):
            if is_finfo_min(b_node, lookup) and not b.additive and number(
                    a_node, lookup) is None and not (a.finfo_min or a.additive):
                # `paddings * torch.finfo(dtype).min` (TimesFM's padding plane): a tensor of
                # 0s and 1s the file cannot show, scaled to finfo.min where it is 1
                return Value(finfo_min=True, additive=True)
    if isinstance(node.op, ast.Sub) and number(node.left) == 1 and right.zero_one:
        tri = _COMPLEMENT.get(right.tri or "")
        return Value(zero_one=True, tri=tri, dtype=right.dtype,
                     tri_at=_tri_site(tri, node))
    if isinstance(node.op, ast.BitOr) and (left.hides_above or right.hides_above) and (
            left.dtype in {"bool", None} and right.dtype in {"bool", None}):
        return Value(dtype="bool", hides_above=True)  # `pad_mask | causal_mask`: True = hidden
    if isinstance(node.op, (ast.BitAnd, ast.BitOr)):
        if isinstance(left.if_tensor, Value) and isinstance(right.if_tensor, Value) and (
                left.if_tensor.dtype == right.if_tensor.dtype == "bool"):
            # two comparisons that may each be a Python bool (`q // w == k // w`, `k % w >= c`
            # of positions the file does not show): a bool, Python or tensor, as each is
            return Value(if_tensor=Value(dtype="bool"))
        # a bool tensor and a comparison that may be a Python bool: a bool tensor either way
        if left.dtype == "bool" and isinstance(right.if_tensor, Value):
            right = right.if_tensor
        elif right.dtype == "bool" and isinstance(left.if_tensor, Value):
            left = left.if_tensor
    if isinstance(node.op, ast.BitOr) and (union := _union_with_unknown(left, right)):
        return union  # `future_mask(T)[None, None] | pad[:, None, None, :]` (held-out 61)
    if isinstance(node.op, (ast.BitAnd, ast.BitOr)) and (
            (left.dtype == "bool" and (right.dtype == "bool" or _a_comparison(node.right)))
            or (right.dtype == "bool" and _a_comparison(node.left))):
        # `available | (lengths <= t)[:, None]`: a comparison gives a bool (tensor or Python),
        # and a bool tensor OR-ed with either stays bool
        if isinstance(node.op, ast.BitOr) and (union := _union_with_triangle(left, right)):
            return union  # `look_ahead | padding`: True at least on the triangle
        triangles = {v.tri for v in (left, right) if v.tri is not None}
        if isinstance(node.op, ast.BitAnd) and len(triangles) == 1 and (
                not (left.tri and right.tri) or left.tri == right.tri):
            # `causal & window` of keep-masks: True only where the triangle is, so it points
            # as that triangle does (a sliding window, a causal AND padding mask; an upper one
            # AND-ed with the padding keeps the future as it does alone: JoeyNMT's
            # `trg_mask & subsequent_mask(n)` with the `== 0` dropped, MC521)
            held = left if left.tri else right
            return Value(dtype="bool", tri=held.tri, tri_at=held.tri_at)
        return Value(dtype="bool")
    if isinstance(node.op, ast.BitAnd) and (left.tri is None) != (right.tri is None) and (
            left.dtype not in FLOAT_DTYPES and right.dtype not in FLOAT_DTYPES) and not (
            _a_comparison(node.left) or _a_comparison(node.right)):
        # `trg_mask & subsequent_mask(n)`: a parameter AND-ed with a triangle (`&` takes no
        # float) is True only where the triangle is, whatever mask the parameter holds
        held = left if left.tri else right
        return Value(tri=held.tri, tri_at=held.tri_at)  # bool or int, as the parameter is
    dtype = left.dtype if left.dtype in FLOAT_DTYPES else None
    if dtype is None and number(node.left, lookup) is not None and isinstance(
            node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)) and right.dtype in FLOAT_DTYPES:
        dtype = right.dtype  # `1 - m` with m float32 is float32 (a Python number adds no dtype)
    if dtype is None and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)) and (
            (left.maybe_half and number(node.right, lookup) is not None)
            or (right.maybe_half and number(node.left, lookup) is not None)):
        return Value(maybe_half=True)  # `1.0 - m` keeps m's dtype, whichever it is
    return Value(dtype=dtype) if dtype else UNKNOWN


def _union_with_unknown(left: Value, right: Value) -> Value | None:
    """A bool lower triangle OR-ed with a tensor the file does not show (a parameter): `|`
    takes bools and integers only, so the result is True (nonzero) at least on the
    triangle, as `_union_with_triangle`'s. None for anything else."""
    held, other = (left, right) if left.tri else (right, left)
    if held.dtype != "bool" or held.tri not in {"lower", "slower"} or other.tri is not None:
        return None
    if other.dtype is not None or other.hides_above or other.all_ones or other.additive or (
            other.finfo_min or other.number is not None or other.zero_one or other.float01):
        return None
    return Value(dtype="bool", tri=held.tri, tri_at=held.tri_at)


def _union_with_triangle(left: Value, right: Value) -> Value | None:
    """`tri | pad`, `torch.maximum(pad, tri)` of a lower triangle and another 0/1 or bool mask
    that holds no triangle: True (1) at least on the triangle, so filling where it is True
    masks the past as the triangle alone would (TensorFlow's tutorial combines its look-ahead
    and padding masks with `tf.maximum`). None for anything else."""
    held, other = (left, right) if left.tri else (right, left)
    if held.tri not in {"lower", "slower"} or other.tri is not None or other.hides_above or (
            other.all_ones or other.additive or other.finfo_min or other.number is not None):
        return None
    if not (other.dtype == "bool" or other.zero_one or other.float01 or other.padding01
            or other.pad_keep or other.hf_keep_inverted or other.keep_mask):
        return None
    if held.dtype == "bool" and other.dtype == "bool":
        return Value(dtype="bool", tri=held.tri, tri_at=held.tri_at)
    if held.zero_one or held.dtype == "bool":
        return Value(zero_one=True, dtype=held.dtype if held.dtype != "bool" else None,
                     tri=held.tri, tri_at=held.tri_at)
    return None


def _expansion(node: ast.AST) -> tuple[str, int, int] | None:
    """Where `node` adds one axis of size 1 to a tensor: ("end", -1, 0) for `m[..., None]` and
    `m.unsqueeze(-1)`, ("end", -2, 0) for `m[..., None, :]` and `m.unsqueeze(-2)`, ("start", i,
    last) for the None at position i of an index of full slices, last = 1 when it is the index's
    last part (`m[:, :, None]`: (2, 1); `m[:, None]`: (1, 1)), ("start", d, 0) for
    `m.unsqueeze(d)`."""
    if isinstance(node, ast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        nones = [i for i, p in enumerate(parts) if is_none(p)]
        if len(nones) != 1 or not all(
                is_none(p) or (isinstance(p, ast.Slice) and p.lower is None and p.upper is None
                               and p.step is None) or (isinstance(p, ast.Constant)
                                                       and p.value is Ellipsis)
                for p in parts):
            return None
        ellipsis = [i for i, p in enumerate(parts) if isinstance(p, ast.Constant)
                    and p.value is Ellipsis]
        if ellipsis == [0]:
            return ("end", nones[0] - len(parts), 0)
        # (trailing `:` parts are implied: `m[:, None]` is `m[:, None, :]`)
        return ("start", nones[0], int(nones[0] == len(parts) - 1)) if not ellipsis else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "unsqueeze") and len(node.args) == 1 and not node.keywords:
        d = number(node.args[0])
        if d is None or d != int(d):
            return None
        return ("end", int(d), 0) if d < 0 else ("start", int(d), 0)
    return None


def _outer_product(left: ast.AST, right: ast.AST) -> bool:
    """`a[:, :, None] & b[:, None, :]`, `a.unsqueeze(-1) * b.unsqueeze(-2)`,
    `a.unsqueeze(2) & b.unsqueeze(1)`: a query-axis factor times a key-axis one; also a factor
    on the last-but-one axis whatever the other is (`pair & keep.unsqueeze(-1)`, `m[..., None]`),
    which empties the rows where it is 0 as well."""
    for q_node, k_node in ((left, right), (right, left)):
        q_axes, k_axes = _index_axes(q_node), _index_axes(k_node)
        if q_axes and k_axes and len(q_axes) == len(k_axes) and q_axes[-2:] == ":N" and (
                k_axes[-2:] == "N:") and q_axes[:-2] == k_axes[:-2]:
            return True  # `m[:, None, :, None] & m[:, None, None, :]` (DistilBERT-style 4-D)
        q, k = _expansion(q_node), _expansion(k_node)
        if q is not None and q[:2] == ("end", -1) and number(k_node) is None:
            return True
        if q is None or k is None or q[0] != k[0]:
            continue
        if q[0] == "end" and (q[1], k[1]) == (-1, -2):
            return True
        # (the query factor's new axis is the last one it has, which an index shows when the
        # None is its last part and an unsqueeze leaves to the rank; the key factor's just
        # before it)
        if q[0] == "start" and q[1] == k[1] + 1 and (q[2] == 1 or (
                q[2] == 0 and isinstance(q_node, ast.Call))):
            return True
    return False


def _index_axes(node: ast.AST) -> str:
    """`m[:, None, :, None]` -> ":N:N": an index of full slices and Nones, one letter a part;
    "" for anything else."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple)):
        return ""
    axes = ""
    for part in node.slice.elts:
        if is_none(part):
            axes += "N"
        elif isinstance(part, ast.Slice) and part.lower is None and part.upper is None and (
                part.step is None):
            axes += ":"
        else:
            return ""
    return axes


def _a_comparison(node: ast.AST) -> bool:
    """`a <= b`, `x.eq(y)`, through indexing and reshapes: a bool, as a tensor or a Python
    value (never an integer)."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in KEEPS_VALUES):
            node = node.func.value
        else:
            break
    if isinstance(node, ast.Compare):
        return not any(isinstance(op, (ast.In, ast.NotIn, ast.Is, ast.IsNot)) for op in node.ops)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
        node.func.attr in _COMPARE_METHODS)


def one_minus(node: ast.AST) -> bool:
    """`1 - m`, `1.0 - m`: the usual inversion of a 0/1 mask."""
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
            and number(node.left) == 1)


# torch's attention modules, whose masks follow nn.MultiheadAttention (True = masked).
ATTENTION_CLASSES = frozenset({
    "MultiheadAttention", "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerDecoder"})


# torch's function forms of `*` and `&` (`torch.mul(a, b)`, `a.logical_and(b)`).
_MASK_PRODUCTS = frozenset({"mul", "logical_and", "bitwise_and"})
# torch functions whose result is a bool tensor of the input's shape (FT-Transformer's
# `torch.isnan(x_num)` missing-value mask).
_BOOL_TESTS = frozenset({"isnan", "isinf", "isfinite", "isposinf", "isneginf", "isreal", "isin"})


def torch_attention_class(func: ast.expr) -> bool:
    """`nn.TransformerEncoder`, or the bare name unless the file imports it from elsewhere."""
    aliases = MODULE_ALIASES.get(None) or {}
    if isinstance(func, ast.Name):
        return not aliases.get(func.id, "").startswith(FOREIGN)
    return isinstance(func, ast.Attribute) and (
        module_dotted(func.value) or "").split(".")[0] in {"nn", "torch"}


# What einops' `rearrange`/`repeat` keep of a tensor: its values' dtype and meaning, not its
# axes (a pattern may add, merge, move or transpose them).
_EINOPS_KEPT = ("dtype", "additive", "finfo_min", "zero_one", "all_ones", "zeros", "wide_finfo",
                "int_mask", "hf_keep", "hf_keep_inverted", "pad_keep", "float01", "padding01",
                "keep_mask", "collated", "maybe_half", "never_half", "tensor", "pair_keep",
                "int_on_a_path", "cast01")


def einops_operand(call: ast.AST) -> ast.expr | None:
    """The tensor einops' `rearrange(x, "b s -> b 1 1 s")` or `repeat(x, "b s -> b h s",
    h=4)` (also as `einops.rearrange`) reads; None for any other call. A pattern with `->` is
    einops' own (itertools' `repeat` takes none)."""
    if not isinstance(call, ast.Call) or len(call.args) < 2:
        return None
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(
        func, ast.Attribute) and module_dotted(func.value) == "einops" else None
    pattern = call.args[1]
    if name not in {"rearrange", "repeat"} or not (isinstance(pattern, ast.Constant) and isinstance(
            pattern.value, str) and "->" in pattern.value):
        return None
    return call.args[0]


def _describe_call(call: ast.Call, lookup: Lookup) -> Value:
    name = call_name(call, lookup)
    if name in {"rearrange", "repeat"} and (operand := einops_operand(call)) is not None:
        held = describe(operand, lookup)
        return Value(**{fact: getattr(held, fact) for fact in _EINOPS_KEPT})
    base_node = receiver(call)
    if name is None:
        return UNKNOWN
    if name == "getattr" and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and (
            call.args[1].value in _ALIASED_APIS) and module_dotted(call.args[0]) in {
            "F", "torch", "torch.nn.functional"}:
        return Value(api=call.args[1].value)  # `_sdpa = getattr(F, "scaled_dot_product_...")`
    if name == "partial" and len(call.args) == 1:
        target = describe(call.args[0], lookup)
        if target.api is not None:
            return Value(api=target.api, bound=tuple(call.keywords))
    if name in {"parse_args", "parse_known_args"} and base_node is not None:
        return Value(namespace=name == "parse_args")
    if name == "Parameter":
        rg = kwarg(call, "requires_grad")
        return Value(grad=rg is None or not is_zero(rg))
    if name in {"ParameterList", "ParameterDict"}:
        return Value(element_grad=True)
    if name in ATTENTION_CLASSES and torch_attention_class(call.func):
        return Value(mha=True, module=name)
    if (name == "deepcopy" or (name == "copy" and module_dotted(call.func) == "copy.copy")) and (
            len(call.args) == 1 and not call.keywords) and not isinstance(
            call.args[0], ast.Starred):
        # `local = copy.deepcopy(self.model)`: a copy of the same module (FedAvg's clients)
        return describe(call.args[0], lookup)
    if name == "DataLoader" and isinstance(collate := kwarg(call, "collate_fn"), ast.Name):
        parts = lookup(collate.id).parts  # `DataLoader(ds, collate_fn=collate)`: its batches
        return Value(element_parts=parts, element_dict=collate.id)
    if name == "DataLoader" and collate is None and (
            dataset := argument(call, 0, "dataset")) is not None:
        # `DataLoader(WindowDataset(...))`, default batching: what each position of the tuple
        # the dataset class's __getitem__ returns is, stacked over the batch
        items = dataset.func.id if isinstance(dataset, ast.Call) and isinstance(
            dataset.func, ast.Name) else describe(dataset, lookup).module
        parts = lookup(items + ".__getitem__").parts if items else ()
        return Value(element_parts=tuple(_stacked(p) for p in parts)) if parts else UNKNOWN
    if (any(hint in name.lower() for hint in _TOKENIZER_HINTS) or (
            base_node is not None and any(
                hint in (last_name(base_node) or "").lower() for hint in _TOKENIZER_HINTS)
            and name in {"encode_plus", "batch_encode_plus", "__call__", "pad"})) and not (
            isinstance(call.func, ast.Name) and lookup(call.func.id).module):
        # (not an instance of a class of this file named so: `tokenizer(notes)` of the file's
        # own tokenizer gives what its `__call__` returns, a bool mask maybe)
        return Value(tokens=True)
    dtype_kw = dtype_of(kwarg(call, "dtype"))
    grad = kwarg(call, "requires_grad")
    grad_fact = grad is not None and is_true(grad)
    module = is_module_call(call)
    if name in {"maximum", "logical_or"} and len(call.args) == (2 if module else 1) and (
            not call.keywords) and (module or base_node is not None):
        # `torch.maximum(padding, look_ahead)`, `a.logical_or(b)`: the union of two masks
        operands = call.args if module or base_node is None else [base_node, *call.args]
        union = _union_with_triangle(describe(operands[0], lookup), describe(operands[1], lookup))
        if union is not None:
            return union if name == "maximum" else Value(dtype="bool", tri=union.tri,
                                                         tri_at=union.tri_at)
    if name == "minimum" and len(call.args) == (2 if module else 1) and not call.keywords and (
            module or base_node is not None):
        # `torch.minimum(query_mask, key_mask)` of two finfo.min planes (TimesFM's `expand_t`):
        # a plane of finfo.min where either is, never lower
        operands = call.args if module or base_node is None else [base_node, *call.args]
        if all(describe(o, lookup).finfo_min for o in operands):
            return Value(finfo_min=True, additive=True)
    if name in _MASK_PRODUCTS and (module or base_node is not None) and not call.keywords:
        # `torch.mul(q_keep[:, :, None], k_keep[:, None, :])`, `a.logical_and(b)`: the
        # function form of `*` / `&`, an outer product of a query and a key mask (MC507)
        operands = call.args if module or base_node is None else [base_node, *call.args]
        if len(operands) == 2 and _outer_product(operands[0], operands[1]):
            return Value(pair_keep=True, dtype=None if name == "mul" else "bool")
    if module:
        made = _describe_factory(call, name, dtype_kw, lookup)
        if made is not None:
            return replace(made, grad=grad_fact) if grad_fact else made
        if grad_fact:
            return Value(grad=True)
    if base_node is None:
        if isinstance(call.func, ast.Name):
            function = lookup(call.func.id)
            if function.inline is not None and (read := _inlined(function, call, lookup)):
                return read
            if function.yielded:
                return Value(element_parts=function.yielded)  # a generator of this file
            if isinstance(function.result, Value):
                return function.result  # what every return of a function defined above gives
            if function.returns_bool:
                return Value(dtype="bool")  # `sequence_mask(lengths)` defined above: `...lt(...)`
            maybe = function.result_unless_none
            if isinstance(maybe, Value) and maybe.maybe_half:
                return Value(maybe_half=True)  # a helper returning torch.bfloat16 or None
        return _applied_to_last_position(call, name, lookup)
    if name not in KEEPS_VALUES and _applied_to_last_position(call, name, lookup):
        return Value(last_position=True)
    by_super = isinstance(base_node, ast.Call) and isinstance(base_node.func, ast.Name) and (
        base_node.func.id == "super") and not base_node.args
    if (by_super or (isinstance(base_node, ast.Name) and base_node.id == "self")) and isinstance(
            call.func, ast.Attribute):
        # `super().build_bias(...)`: the base class's method, which an override hides from self
        method = lookup(("super()." if by_super else "self.") + call.func.attr)
        if method.module is not None and method.inline is None:
            # `self.embed(x, m)`: its forward (a plain class's instance: its __call__)
            method = lookup(method.module + ".forward") or lookup(method.module + ".__call__")
        if method.inline is not None and (read := _inlined(method, call, lookup)):
            return read
        if isinstance(method.result, Value):
            return method.result  # `self.get_alibi_mask(h, n)`: a method of the class above
        if not by_super and _projects_cache(call, lookup):
            return Value(cached=True)
    if isinstance(base_node, ast.Name):
        helper = lookup(f"{base_node.id}.{name}")  # a static helper of a class of this file
        if helper.inline is not None and (read := _inlined(helper, call, lookup)):
            return read
        if isinstance(helper.result, Value):
            return helper.result
        if helper.returns_bool:
            return Value(dtype="bool")
    base = _describe_receiver(base_node, name, lookup)
    described = _describe_method(call, name, base, lookup)
    if name in _FLOAT_CASTS and ((described.float01 and not base.float01) or (
            described.cast01 and not base.cast01)):
        described = replace(described, floated_at=site(call))  # where the fix for MC508 goes
    return described


# What default_collate keeps of a sample's tensor when it stacks a batch of them: its dtype and
# its kind of mask, not its axes (a triangle or a layout of one sample's axes).
_STACKED_FACTS = ("dtype", "additive", "finfo_min", "zero_one", "float01", "padding01",
                  "pad_keep", "keep_mask", "hf_keep", "hf_keep_inverted", "tensor")


def _stacked(part: Any) -> Any:
    """One position of a dataset item, as a DataLoader's default batching stacks it."""
    if not isinstance(part, Value):
        return UNKNOWN
    return Value(**{name: getattr(part, name) for name in _STACKED_FACTS})


_inlining = [0]  # how many helper calls deep the current description is


def _evaluate(template: Any, call: ast.Call, lookup: Lookup) -> Value | tuple[Value, ...] | None:
    """`inline.evaluate` of a helper at this call, None past three helpers deep (a helper
    that calls itself, or helpers calling helpers)."""
    if _inlining[0] >= 3:
        return None
    _inlining[0] += 1
    try:
        return evaluate(template, call, lookup, describe, UNKNOWN)
    finally:
        _inlining[0] -= 1


def _inlined(helper: Value, call: ast.Call, lookup: Lookup) -> Value:
    """A call of a small helper of this file, read as its return of the call's arguments
    (see `inline`); UNKNOWN when it cannot be."""
    read = _evaluate(helper.inline, call, lookup)
    return _over(read, helper.result) if isinstance(read, Value) else UNKNOWN


def _over(read: Value, every: Any) -> Value:
    """What a helper gives at one call: what its own walk found every return gives (`every`,
    read with the whole linter's knowledge) over what its return of these arguments is."""
    if not isinstance(every, Value) or not every:
        return read
    return Value(**{**read.__dict__, **every.__dict__})


def inline_parts(helper: Any, helper_parts: tuple[Any, ...], call: ast.Call, lookup: Lookup,
                 ) -> tuple[Value, ...]:
    """What each position of a small helper's tuple return gives at this call (see
    `inline`); () when it cannot be read or tells nothing."""
    read = _evaluate(helper, call, lookup)
    if not isinstance(read, tuple) or not any(read):
        return ()
    every = helper_parts if len(helper_parts) == len(read) else (None,) * len(read)
    return tuple(_over(r, e) for r, e in zip(read, every, strict=True))


# Calls that join or reduce their inputs: their result no longer holds one position.
_JOINS = frozenset({"cat", "concat", "stack", "len", "sum", "mean", "max", "min", "pad", "repeat",
                    "expand", "broadcast_to", "where", "masked_fill", "softmax"})


def _applied_to_last_position(call: ast.Call, name: str, lookup: Lookup) -> Value:
    """`self._heads(self.q(hidden[:, -1:, :]))`: a layer or reshape applied to the last position
    still holds one position."""
    if name in _JOINS or not call.args:
        return UNKNOWN
    return Value(last_position=True) if describe(call.args[0], lookup).last_position else UNKNOWN


def _dtype_named(node: ast.expr | None) -> bool:
    """`dtype=dtype`, `dtype=self.dtype`, `dtype=target_dtype`: the dtype the caller or the
    model picks, which may be a half one (diffusers' `prepare_attention_mask(..., dtype)`)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
            node.value.id == "self"):
        name = node.attr
    else:
        name = node.id if isinstance(node, ast.Name) else ""
    return name == "dtype" or name.endswith("_dtype")


def _describe_factory(
    call: ast.Call, name: str, dtype_kw: str | None, lookup: Lookup
) -> Value | None:
    """torch.ones / full / triu / cat / where ... called as functions."""
    # torch.zeros/ones/empty/rand with no dtype are float32 (torch's default dtype).
    # Only without a dtype= argument: `dtype=x.dtype` follows x, which may be float16.
    no_dtype = kwarg(call, "dtype") is None
    default = "fp32" if name in {"ones", "zeros", "empty", "randn", "rand"} and no_dtype else None
    if name.endswith("_like") and no_dtype and call.args:
        default = _dtype_of_tensor(call.args[0], lookup)  # `ones_like(input_ids)`: int64
    if name in _ONES_FUNCS:
        return Value(dtype=dtype_kw or default, all_ones=True)
    if name in {"zeros", "zeros_like", "new_zeros", "empty", "randn", "rand", "arange"}:
        # (`torch.arange` with no dtype is int64, or float32 for a float bound: never half)
        return Value(dtype=dtype_kw or default, zeros=name in _ZEROS_NAMES,
                     positions=name == "arange", maybe_half=dtype_kw is None and _dtype_named(
                         kwarg(call, "dtype")), never_half=name == "arange" and no_dtype)
    if name == "randperm" and module_dotted(call.func) == "torch.randperm":
        # (a permutation of indices: int64 unless a dtype says otherwise, `x[perm[:b]]`)
        return Value(dtype=dtype_kw or "int", tensor=True)
    if name == "eye":  # (an identity matrix: float32 without a dtype)
        return Value(dtype=dtype_kw or ("fp32" if no_dtype else None))
    if name == "tensor" and call.args and _int_literal(call.args[0]):
        return Value(dtype=dtype_kw or "int", zero_one=_zero_one_literal(call.args[0]))
    if name == "tensor" and call.args and _zero_one_literal(call.args[0]):
        return Value(dtype=dtype_kw or "fp32", zero_one=True)
    if name == "tensor" and call.args and _bool_literal(call.args[0]):
        return Value(dtype=dtype_kw or "bool")  # torch.tensor([True, False]): a bool tensor
    if name == "tensor" and call.args and _holds_finfo_min(call.args[0], lookup):
        return Value(finfo_min=True, additive=True)
    if name == "tensor" and call.args and _float_literal(call.args[0]):
        # `torch.tensor([0.0] + [float("-inf")] * (k - 1))`: python floats give the default
        # dtype, float32 (OpenNMT-py's beam-search log-probs)
        return Value(dtype=dtype_kw or "fp32")
    if name in {"from_numpy", "as_tensor", "tensor"} and call.args and isinstance(
            call.args[0], (ast.Name, ast.Call, ast.Subscript, ast.Attribute, ast.Compare,
                           ast.BinOp, ast.UnaryOp)) and (
            held := _array_mask(describe(call.args[0], lookup))) is not None:
        # `torch.from_numpy(np.tril(np.ones((n, n), dtype=bool), k=-1))`, `torch.as_tensor(
        # keep)` of a numpy mask: the same values, and the same dtype unless one is given
        # (`dtype=ids.dtype`, not known here: not the array's)
        given = kwarg(call, "dtype") is not None
        # (a bool cast to a dtype not known here holds 0s and 1s, as `.to(dtype)` does)
        cast01 = given and dtype_kw is None and held.dtype == "bool"
        return replace(held, tensor=True, dtype=dtype_kw if given else held.dtype,
                       zero_one=held.zero_one or cast01)
    if name in {"tensor", "as_tensor", "LongTensor"} and call.args and (
            padded := _list_padding(call.args[0])) is not None:
        # `torch.tensor([s + [PAD] * (n - len(s)) for s in seqs])`: ids padded with PAD
        return Value(tensor=True, dtype=dtype_kw, padded_with=padded)
    if name in {"tensor", "as_tensor", "from_numpy", "LongTensor", "IntTensor", "BoolTensor",
                "FloatTensor"} and call.args:
        # `src = torch.tensor(self._pad(pre_src, 0))`: a tensor, whatever it holds, so that
        # `src == 0` is a bool tensor (nlpyang/BertSum#73's `1 - (src == 0)`)
        return Value(tensor=True, dtype=dtype_kw)
    if name in _FULL_FUNCS:
        fill = argument(call, 1, "fill_value")
        if fill is None:
            return None
        if is_true(fill):
            return Value(dtype="bool")
        dtype = dtype_kw or ("fp32" if name == "full" and no_dtype
                             and number(fill, lookup) is not None else None)
        # (ids of (batch, seq) only, and not filled with a [MASK] id: MaskGIT-style decoding
        # fills the canvas with `mask_id` and reads `ids != mask_id` as "decoded already")
        size = call.args[0] if call.args else None
        padded = ast.unparse(fill) if dtype == "int" and name == "full" and isinstance(
            fill, (ast.Name, ast.Attribute, ast.Constant)) and isinstance(
            size, (ast.Tuple, ast.List)) and len(size.elts) == 2 else None
        if padded is not None and "mask" in padded.lower():
            padded = None
        return Value(dtype=dtype, additive=is_masking_value(fill, lookup),
                     finfo_min=is_finfo_min(fill, lookup), padded_with=padded)
    if name in {"triu", "tril"}:
        matrix = argument(call, 0, "input")
        if matrix is None:
            return None
        return _triangle(call, name, describe(matrix, lookup))
    if name == "pad" and module_dotted(call.func) in F_PAD_NAMES and call.args and (
            block := _padded_block(call, describe(call.args[0], lookup), lookup)):
        return block
    if name in {"cat", "concat"} and call.args and isinstance(
            call.args[0], (ast.List, ast.Tuple)) and (
            rows := _triangle_rows(call, [describe(p, lookup) for p in call.args[0].elts],
                                   lookup)) is not None:
        return rows
    if name == "cat" and call.args and isinstance(call.args[0], (ast.List, ast.Tuple)):
        parts = call.args[0].elts
        described = [describe(p, lookup) for p in parts]
        # `torch.cat([torch.zeros(n, past), mask], dim=-1)` of a finfo.min mask (transformers'
        # `_make_causal_mask` with a cache prefix): the result still holds finfo.min entries,
        # also where the zeros are bound to a name that says cache (`past = torch.zeros(...)`)
        if len(parts) >= 2 and any(d.finfo_min for d in described) and all(
                d.finfo_min or d.zeros for d in described):
            # (additive where every part is a mask, not scores filled with finfo.min:
            # native-sparse-attention's `cat((sim, bsim))` of masked scores stays scores)
            return Value(finfo_min=True, additive=all(d.additive or d.zeros for d in described))
        if len(parts) >= 2 and any(_names_a_cache(p) or _names_memory(p) or d.cached
                                   or _cached_key_entry(p)
                                   for p, d in zip(parts[:-1], described, strict=False)):
            return Value(cached=True)
        kept = _keep_mask_with_ones(parts, described, argument(call, 1, "dim"), lookup)
        if kept is not None:
            return kept
        if parts and all(d.zero_one for d in described) and len(
                dtypes := {d.dtype for d in described}) == 1:
            # `torch.cat([mask, mask], dim=2)` (mTAN's observed-value masks): 0s and 1s joined
            # are 0s and 1s of the same dtype; one cast that made them all float stays named
            made = {d.floated_at for d in described}
            return Value(dtype=dtypes.pop(), zero_one=True,
                         float01=all(d.float01 for d in described),
                         floated_at=made.pop() if len(made) == 1 else None)
    if name in _JOINS_SEQUENCE:
        # torch.cat/stack of tensors of one dtype, pad_sequence of them (padding_value is
        # written into that dtype): the result has that dtype.
        joined = argument(call, 0, "tensors" if name != "pad_sequence" else "sequences")
        dtype = (describe(joined, lookup).elements or None) if joined is not None else None
        if dtype is None and isinstance(joined, (ast.List, ast.Tuple)) and joined.elts and len(
                dtypes := {_as_tensor(e, lookup).dtype for e in joined.elts}) == 1 and (
                dtypes <= {"bool", "int"}):
            # `torch.cat([torch.isnan(x_num), x_cat < 0], dim=1)`: only tensors are joined, so
            # a comparison among them is an elementwise one; `torch.cat([prefix_valid,
            # patch_valid], 1)` of two int64 masks is one
            dtype = dtypes.pop()
        if dtype is None and (name == "pad_sequence" or (
                module_dotted(call.func) or "").startswith("torch.")):
            # a tensor of a dtype not known (`widths = pad_sequence(series)`, then `widths > 0`
            # is a bool mask, not a Python bool)
            return Value(tensor=True)
        return Value(dtype=dtype) if dtype is not None else UNKNOWN
    if name == "unfold" and call.args and describe(call.args[0], lookup).all_ones:
        # `F.unfold(ones, kernel, padding=p)`: 1 where a window covers the image, 0 where it
        # covers the zero padding: a keep-mask of 0s and 1s (halonet-pytorch's halo mask)
        return Value(dtype="fp32", zero_one=True, keep_mask=True)
    if name == "triu_indices":
        offset = argument(call, 2, "offset")
        if isinstance(offset, ast.IfExp):
            # `offset=0 if mask_diagonal else 1` (pbloem/former's `mask_`): the branch the
            # flag picks, where the flag is known (a constant, or what every call passes)
            flag = describe(offset.test, lookup).flag
            offset = None if flag is None else (offset.body if flag else offset.orelse)
            return Value(diag_indices=offset is not None and is_zero(offset))
        return Value(diag_indices=offset is None or is_zero(offset))
    if name == "generate_square_subsequent_mask":
        return Value(additive=True)  # nn.Transformer's 0 / -inf float mask
    if name == "where" and len(call.args) == 3:
        a, b = call.args[1], call.args[2]
        if is_finfo_min(a, lookup) or is_finfo_min(b, lookup):
            return Value(finfo_min=True, additive=True)
        if any(describe(x, lookup).finfo_min and (number(y, lookup) == 0 or describe(
                y, lookup).zeros) for x, y in ((a, b), (b, a))):
            # `torch.where(allowed, torch.zeros((), dtype=dt), torch.full((), min_val,
            # dtype=dt))` (wiola's causal plane): 0 and finfo.min as 0-d tensors
            return Value(finfo_min=True, additive=True)
        if all(number(x, lookup) is not None for x in (a, b)):
            # two Python scalars: torch's default dtype; 0 and -inf make an additive mask
            masking = any(is_masking_value(x, lookup) for x in (a, b)) and any(
                number(x, lookup) == 0 for x in (a, b))
            zero_one = {number(a, lookup), number(b, lookup)} == {0.0, 1.0}
            return Value(dtype="fp32", additive=masking, float01=zero_one, zero_one=zero_one)
        if {_one_element_tensor(a), _one_element_tensor(b)} == {0.0, 1.0}:
            # `torch.where(seq > 0, torch.tensor([1.0]), torch.tensor([0.0]))` (NARM's mask): a
            # float 0/1 mask
            return Value(dtype="fp32", float01=True, zero_one=True)
        return UNKNOWN
    if name in {"logical_not", "logical_and", "logical_or"} and call.args:
        base = describe(call.args[0], lookup)
        tri = _COMPLEMENT.get(base.tri or "") if name == "logical_not" else None
        hides = name == "logical_or" and any(describe(a, lookup).hides_above for a in call.args)
        return Value(dtype="bool", tri=tri, hides_above=hides, tri_at=_tri_site(tri, call))
    if name in _BOOL_TESTS and call.args:
        return Value(dtype="bool")  # `torch.isnan(x)`: a bool tensor whatever x holds
    if name in {"finfo", "iinfo"}:
        return Value(api="finfo")
    if name in _AUTOCAST_LOWERED:
        autocast = lookup(AUTOCAST)
        if autocast:
            return autocast
    if name in _PRODUCTS:
        operands = call.args[1:] if name == "einsum" else call.args[:2]
        return _product_dtype([describe(a, lookup).dtype for a in operands])
    if name in {"softmax", "log_softmax"} and call.args:
        return Value(dtype=dtype_kw or describe(call.args[0], lookup).dtype)
    if name in _KEEPS_DTYPE and call.args:
        return _float_dtype_of(describe(call.args[0], lookup), call, name)
    return None


def _one_element_tensor(node: ast.AST) -> float | None:
    """The float of `torch.tensor([1.0])` / `torch.tensor(0.0)` (a float literal, so float32);
    None for anything else."""
    if not (isinstance(node, ast.Call) and call_name(node) == "tensor" and len(node.args) == 1
            and all(kw.arg == "device" for kw in node.keywords)):
        return None
    held = node.args[0]
    if isinstance(held, (ast.List, ast.Tuple)) and len(held.elts) == 1:
        held = held.elts[0]
    if isinstance(held, ast.Constant) and type(held.value) is float:
        return held.value
    return None


def _dtype_of_tensor(node: ast.AST, lookup: Lookup) -> str | None:
    """The dtype a tensor has by evidence: known from the value table, or int64 for token ids
    by their name (`input_ids`)."""
    known = describe(node, lookup).dtype
    if known is not None:
        return known
    name = last_name(node)
    return "int" if name is not None and token_ids_name(name) else None


def _float_dtype_of(value: Value, call: ast.Call, name: str = "") -> Value | None:
    """A float result's dtype: `dtype=` if given (`x.sum(dtype=torch.float32)`), else the
    input's when it is a float one (an int or bool sum is int64: not followed). Picking entries
    (`torch.gather(same_market, 1, idx)`) keeps a bool tensor bool too."""
    dtype = dtype_of(kwarg(call, "dtype")) or value.dtype
    if name in _PICKS and value.dtype == "bool":
        return Value(dtype="bool")
    return Value(dtype=dtype) if dtype in FLOAT_DTYPES else None


_ZEROS_NAMES = frozenset({"zeros", "zeros_like", "new_zeros"})
# Calls that join a sequence of tensors into one of their common dtype.
_JOINS_SEQUENCE = frozenset({"cat", "concat", "concatenate", "stack", "vstack", "hstack",
                             "pad_sequence"})
# Products whose result has their operands' dtype (`einsum` of two float16 tensors is float16).
_PRODUCTS = frozenset({"einsum", "matmul", "bmm", "mm"})
# What autocast runs in its lower precision (the CUDA float16 list of the torch.amp docs).
_AUTOCAST_LOWERED = _PRODUCTS | {"baddbmm", "addmm", "addbmm", "linear"}


def _product_dtype(dtypes: list[str | None]) -> Value | None:
    """The dtype of a product when every known operand agrees and at least one is known."""
    known = {d for d in dtypes if d is not None}
    if len(known) == 1 and known <= FLOAT_DTYPES:
        return Value(dtype=known.pop())
    return None


def _int_literal(node: ast.AST) -> bool:
    """A (nested) list of int literals, as in torch.tensor([[1, 1, 0]]): an int64 tensor."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return bool(node.elts) and all(_int_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant) and type(node.value) is int


def _bool_literal(node: ast.AST) -> bool:
    """A (nested) list of True/False literals (`[[True, False]] * 4` too)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _bool_literal(node.left)
    if isinstance(node, (ast.List, ast.Tuple)):
        return bool(node.elts) and all(_bool_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant) and type(node.value) is bool


def _float_literal(node: ast.AST) -> bool:
    """A (nested) list of number literals, at least one of them a float, joined by `+` and
    repeated by `* n` as lists are: torch.tensor makes it float32 (torch's default dtype)."""
    kinds: set[str] = set()

    def walk(n: ast.AST) -> bool:
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            return walk(n.left) and walk(n.right)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
            return isinstance(n.left, (ast.List, ast.Tuple)) and walk(n.left)
        if isinstance(n, (ast.List, ast.Tuple)):
            return bool(n.elts) and all(_literal_number(e, kinds) for e in n.elts)
        return False

    return walk(node) and "float" in kinds


def _literal_number(node: ast.AST, kinds: set[str]) -> bool:
    if isinstance(node, (ast.List, ast.Tuple)):
        return bool(node.elts) and all(_literal_number(e, kinds) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        kinds.add(type(node.value).__name__)
        return True
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
            and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, (str, int, float))):
        kinds.add("float")
        return True
    return False


def _literal_values(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [v for e in node.elts for v in _literal_values(e)]
    return [node]


def _zero_one_literal(node: ast.AST) -> bool:
    """A (nested) list of 0s and 1s with both present: a 0/1 mask written out."""
    values = {number(v) for v in _literal_values(node)}
    return values == {0.0, 1.0}


def _holds_finfo_min(node: ast.AST, lookup: Lookup) -> bool:
    return isinstance(node, (ast.List, ast.Tuple)) and any(
        is_finfo_min(v, lookup) for v in _literal_values(node))


def names_a_cache(node: ast.AST) -> bool:
    """A cache by its name (`cache`, `self.kv_cache`, `past_key_value[0]`), not its shape."""
    return not (isinstance(node, ast.Attribute) and node.attr in {"shape", "dtype", "device"}) and (
        _names_a_cache(node))


def _cached_key_entry(node: ast.AST) -> bool:
    """`huancun["k"]` joined before the new keys: the keys a dict keeps for the layer, under
    any name of its own (a cache named in another language)."""
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and (
        node.slice.value in _CACHED_KEYS)


def _names_a_cache(node: ast.AST) -> bool:
    while isinstance(node, ast.Subscript):  # `past[0]`, `past_key_value[0]`, `cache["k"]`
        node = node.value
    text = (dotted(node) or last_name(node) or "").lower()
    return any(word in text for word in ("cache", "past", "prev"))


# The string keys under which a dict keeps a layer's earlier keys and values.
_CACHED_KEYS = frozenset({"k", "v", "key", "value", "keys", "values", "k_cache", "v_cache",
                          "prev_k", "prev_v"})
# Words of a name that hold a recurrent memory: Transformer-XL's `mems`, memory tokens
# (`torch.cat([mem, x], dim=1)` before the keys: L != S, as a cache).
_MEMORY_WORDS = frozenset({"mem", "mems", "memory", "memories"})


def _names_memory(node: ast.AST, *, spelled_out: bool = True) -> bool:
    """A recurrent memory by its name (`mem`, `self.mems[i]`, `memory_states`); without
    `spelled_out`, only the short forms (`mem`, `mems`): a bare `memory` is also what
    attention layers call the source of their keys (nn.TransformerDecoder's encoder output,
    ESPnet's `MultiHeadedAttention(x, memory, mask)` called with `memory=x`)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    text = (last_name(node) or "").lower()
    words = _MEMORY_WORDS if spelled_out else _MEMORY_WORDS - {"memory", "memories"}
    return any(word in words for word in text.split("_"))


# How `torch.nn.functional.pad` is spelled at a call (`F` is its alias almost everywhere).
F_PAD_NAMES = frozenset({"torch.nn.functional.pad", "F.pad", "nn.functional.pad"})


def _padded_block(call: ast.Call, padded: Value, lookup: Lookup) -> Value | None:
    """`F.pad(m, (left, 0), value=False)` of a True triangle: False key columns on the left
    (`F.pad(y_causal, (x_len, 0), value=False)`, VALL-E's text-then-audio mask) leave each of
    its queries hiding its own key and those after it, so its triangle is still read (where it
    was made). A block of zeros or ones made here keeps its dtype. None for any other
    padding (what it reads then is left as it was). Narrower than the linter's
    `_triangle_in`, which follows a triangle's True entries through any pad or join for MC503
    in one function: a `tri` fact travels across calls and MC521 reads its direction too."""
    widths, fill = argument(call, 1, "pad"), argument(call, 3, "value")
    if padded.dtype == "bool" and padded.tri == "upper" and padded.hides_above and (
            isinstance(widths, (ast.Tuple, ast.List)) and len(widths.elts) == 2) and (
            number(widths.elts[1], lookup) == 0) and isinstance(fill, ast.Constant) and (
            fill.value is False) and argument(call, 2, "mode") is None:
        return Value(dtype="bool", tri="upper", hides_above=True, tri_at=padded.tri_at)
    if padded.dtype is not None and (padded.zeros or padded.all_ones):
        # a block made here (`F.pad(torch.zeros(n, n, dtype=torch.bool), (0, k), value=True)`):
        # the padding value is written in its dtype
        return Value(dtype=padded.dtype)
    return None


def _triangle_rows(call: ast.Call, described: list[Value], lookup: Lookup) -> Value | None:
    """`torch.cat([x_rows, y_rows], dim=0)` of bool blocks of rows, one of them a True
    triangle on and above its diagonal (see `_padded_block`) and the others no triangle: the
    queries of that block still hide their own key, read where the triangle was made."""
    dim = argument(call, 1, "dim")
    if dim is None or number(dim, lookup) != 0 or len(described) < 2:
        return None
    triangles = [d for d in described if d.tri is not None]
    if len(triangles) != 1 or not all(d.dtype == "bool" for d in described):
        return None
    (tri,) = triangles
    if tri.tri != "upper" or not tri.hides_above or tri.tri_at is None:
        return None
    return Value(dtype="bool", tri="upper", hides_above=True, tri_at=tri.tri_at)


def _keep_mask_with_ones(parts: list[ast.expr], described: list[Value], dim: ast.expr | None,
                         lookup: Lookup) -> Value | None:
    """`torch.cat([mask.new_ones(b, n), attention_mask], dim=1)`: a keep-mask with kept
    positions (prepended tokens: CLS, memory, registers) joined to it is still a keep-mask of
    the same dtype, and along the sequence axis of a (batch, seq) one, of that layout; None for
    any other concatenation."""
    if len(parts) < 2 or any(isinstance(p, ast.Starred) for p in parts):
        return None
    masks = [d for d in described if not d.all_ones]
    if len(masks) != 1 or len(masks) == len(described):
        return None
    (mask,) = masks
    if not (mask.hf_keep or mask.pad_keep or mask.keep_mask or mask.collated) or (
            mask.hf_keep_inverted):
        return None
    along = number(dim, lookup) if dim is not None else None
    column = any(d.all_ones and _ones_column(p) for p, d in zip(parts, described, strict=True))
    # (one column of ones per row, `keep.new_ones(b, 1)`, joined along the last axis: a mask
    # per row and token, the rows a batch's: a square (queries, keys) mask would need a row
    # of ones too; PlanT's CLS token)
    layout = "BS" if (mask.layout == "BS" or column) and along in {1, -1} else None
    dtype = mask.dtype
    if dtype is None and all(d.dtype == "bool" for d in described if d.all_ones):
        # `torch.cat([torch.ones(n, dtype=torch.bool), obj_keep], 1)`: whoever joins bool ones to
        # a keep-mask holds it bool (a float one would be promoted, True becoming 1.0)
        dtype = "bool"
    # (a collated batch's mask joined to `mask.new_ones(...)` stays that int64 mask: MC518)
    return Value(dtype=dtype, hf_keep=mask.hf_keep, pad_keep=mask.pad_keep,
                 keep_mask=mask.keep_mask, collated=mask.collated, layout=layout)


def _ones_column(node: ast.expr) -> bool:
    """`torch.ones(b, 1)`, `m.new_ones((b, 1))`: ones of two axes, the last of size 1."""
    if not isinstance(node, ast.Call) or call_name(node) not in {"ones", "new_ones"}:
        return False
    shape = node.args[0].elts if len(node.args) == 1 and isinstance(
        node.args[0], (ast.Tuple, ast.List)) else node.args
    return len(shape) == 2 and number(shape[1]) == 1 and not any(
        isinstance(a, ast.Starred) for a in shape)


def _projects_cache(call: ast.Call, lookup: Lookup) -> bool:
    """`self.kv(mem)`, `self.k_proj(past_hidden)`: a layer of the module applied to a cache or a
    memory (by name, or holding one): its keys and values hold those positions too."""
    first = call.args[0] if call.args else None
    return first is not None and not isinstance(first, ast.Starred) and (
        _names_a_cache(first) or _names_memory(first, spelled_out=False)
        or describe(first, lookup).cached)


def _describe_method(call: ast.Call, name: str, base: Value, lookup: Lookup) -> Value:
    """`x.float()`, `m.bool()`, `x.masked_fill(...)`, `x.requires_grad_()` ..."""
    if name in _AUTOCAST_LOWERED:
        autocast = lookup(AUTOCAST)
        if autocast:
            return autocast  # `q.matmul(k)` under autocast
    if name == "zero_":
        # zeroed in place: the receiver's dtype, 0 everywhere (`m.byte().zero_()`)
        return Value(dtype=base.dtype, zeros=True) if base.dtype in {"bool", "int"} else base
    if base.cached and name in {"movedim", "moveaxis", "permute", "transpose", "swapaxes",
                                "swapdims"}:
        return Value(cached=True)  # the cached keys in another layout: still L != S
    if base.dtype == "bool" and name in {"scatter", "scatter_", "index_fill", "index_fill_",
                                         "index_put", "index_put_", "masked_scatter"}:
        # `available.scatter(1, idx, False)`: written into, still a bool tensor (its receiver's
        # dtype, whatever value is written)
        return Value(dtype="bool")
    if name in {"new_ones", "new_zeros", "new_empty"}:
        # `x.new_ones((b, n), dtype=torch.bool)`: the dtype given, else the receiver's
        return Value(dtype=dtype_of(kwarg(call, "dtype")) or (
            base.dtype if kwarg(call, "dtype") is None else None),
                     all_ones=name == "new_ones", zeros=name == "new_zeros")
    if name == "requires_grad_":
        flag = call.args[0] if call.args else kwarg(call, "requires_grad")
        return replace(base, grad=flag is None or not is_zero(flag))
    if name in {"float", "double"}:
        return _retyped(base, "fp32")
    if name == "half":
        return _retyped(base, "half")
    if name == "bfloat16":
        return _retyped(base, "bf16")
    if name == "bool":
        return replace(base, dtype="bool", zero_one=False, number=None, float01=False)
    if name in {"long", "int", "byte", "char", "short"}:
        # `.byte()` is uint8 (deepvoice3's `new(b, t).byte().zero_()` length mask), `.char()`
        # int8, `.short()` int16: integer casts like `.long()`
        base_node = receiver(call)
        masked = base_node is not None and _names_mask(base_node)
        # (a bool made int holds 0s and 1s: `(ids != PAD).long()` under any name)
        return replace(base, dtype="int", zero_one=base.dtype == "bool",
                       int_mask=masked or base.hf_keep, float01=False)
    if name == "astype" and call.args and (dtype := dtype_of(call.args[0])) is not None:
        # numpy's cast: `(dist > window).astype(np.float32)`, `keep.astype(bool)`
        return _retyped(base, dtype)
    if name in {"to", "type"}:
        target = argument(call, 0, "dtype")
        dtype = dtype_of(target) or dtype_of(kwarg(call, "dtype")) or _held_dtype(
            target, lookup) or _held_dtype(kwarg(call, "dtype"), lookup)
        if dtype:
            return _retyped(base, dtype)
        if kwarg(call, "dtype") is None and (target is None or _is_device(target)):
            return replace(base, tokens=False)  # a move, not a cast
        cast = kwarg(call, "dtype") or target
        cast_value = replace(base, dtype=None, tokens=False, zero_one=base.zero_one or base.dtype
                             == "bool", hf_keep=False, hf_keep_inverted=False, never_half=False)
        floated = cast is not None and _float_target(cast, lookup)
        result = _with_float01(cast_value, base, floated)
        if not floated and cast is not None and isinstance(cast, ast.Attribute) and (
                cast.attr == "dtype") and _data_tensor(cast.value, lookup):
            result = replace(result, cast01=_zero_one_base(base))
        if cast is not None and isinstance(cast, (ast.Name, ast.IfExp, ast.BoolOp)) and describe(
                cast, lookup).maybe_half:
            result = replace(result, maybe_half=True)  # `m.to(dtype=dtype)`, dtype maybe bf16
        return result
    if name == "type_as":
        other = call.args[0] if len(call.args) == 1 else None
        floated = other is not None and _float_tensor(other, lookup)
        result = _with_float01(replace(base, dtype=None, tokens=False, never_half=False), base,
                               floated)
        if not floated and other is not None and _data_tensor(other, lookup):
            result = replace(result, cast01=_zero_one_base(base))
        return result
    if name in _COMPARE_METHODS and call.args:
        op = {"eq": ast.Eq(), "ne": ast.NotEq(), "gt": ast.Gt(), "lt": ast.Lt(), "ge": ast.GtE(),
              "le": ast.LtE()}[name]
        base_node = receiver(call)
        return _compared(base, op, call.args[0], base_node if base_node is not None else call)
    if name == "view" and len(call.args) == 1 and not isinstance(call.args[0], ast.Constant):
        # `x.view(torch.int32)` reinterprets the bits as another dtype (vllm fills a bfloat16
        # buffer with INT32_MIN that way): only the new dtype is known.
        reinterpreted = dtype_of(call.args[0])
        if reinterpreted is not None:
            return Value(dtype=reinterpreted)
    if name in {"any", "all"} and (call.args or call.keywords) and (
            base.hf_keep or base.hf_keep_inverted or base.pad_keep or base.keep_mask):
        # `mask.view(b, -1, stack).any(dim=-1)`: frames pooled into patches, one bool per
        # patch, still True where the mask's own convention says (kept, or padding)
        return Value(dtype="bool", hf_keep=base.hf_keep, hf_keep_inverted=base.hf_keep_inverted,
                     pad_keep=base.pad_keep, keep_mask=base.keep_mask)
    if name in {"any", "all"} and (call.args or call.keywords) and base.dtype == "bool":
        return Value(dtype="bool")  # `x.isnan().any(-1)`: one bool per row (missing readings)
    if name in KEEPS_VALUES:
        grad = base.grad and name not in {"detach", "clone"}
        layout = base.layout if name in _KEEPS_LAYOUT else "B1S1" if (
            name == "unsqueeze" and _per_token_on_query_axis(call, base)) else _unsqueezed_layout(
            _tokenizer_layout(base), call) if name == "unsqueeze" else _batch_flattened(
            _tokenizer_layout(base) if len(call.args) == 4 else base.layout, call, name)
        return replace(base, tokens=False, api=None, mha=False, grad=grad, layout=layout,
                       layout_at=_layout_made(base, layout, call))
    if name in _TRANSPOSES:
        base = replace(base, layout=None, layout_at=None)
        return _turned(base, _TRANSPOSED.get(base.tri or ""), call) if base.tri else base
    if name in {"logical_not", "logical_not_"}:
        tri = _COMPLEMENT.get(base.tri or "")
        return Value(dtype="bool", tri=tri, tri_at=_tri_site(tri, call),
                     hf_keep_inverted=base.hf_keep, layout=base.layout,
                     layout_at=base.layout_at)
    if name in {"triu", "tril", "triu_", "tril_"}:
        # (`ones(n, n, dtype=torch.bool).tril_()`: the in-place form returns its triangle too)
        return _triangle(call, name.rstrip("_"), base)
    if name in {"masked_fill", "masked_fill_"}:
        value = argument(call, 1, "value")
        finfo = value is not None and is_finfo_min(value, lookup)
        additive = base.zero_one is False and value is not None and is_masking_value(
            value, lookup) and base.dtype != "bool"
        condition = argument(call, 0, "mask")
        if value is not None and number(value, lookup) == 0 and _fills_ones_after_zeros(
                call, lookup):
            # `mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)`
            # (the PyTorch tutorial's `generate_square_subsequent_mask`, SpeechBrain's
            # `get_lookahead_mask`): the 0s became -inf, then the 1s 0: a 0/-inf mask
            return Value(dtype=base.dtype, additive=True)
        if base.additive and value is not None and number(value, lookup) == 0:
            # `.masked_fill(m != 0, -inf).masked_fill(m == 0, 0.0)` (Swin's and Pangu's shifted
            # window masks): 0 is an additive mask's own "keep"
            return Value(dtype=base.dtype, additive=True, finfo_min=base.finfo_min)
        if value is not None and number(value, lookup) == 0 and _swin_window_mask(call, lookup):
            return Value(dtype=base.dtype, additive=True)
        return Value(dtype=base.dtype, finfo_min=finfo or base.finfo_min,
                     additive=additive and (base.additive or _starts_empty(base) or (
                         condition is not None and _nonzero_of(condition, receiver(call)))))
    if name in {"softmax", "log_softmax"}:
        return Value(dtype=dtype_of(kwarg(call, "dtype")) or base.dtype)
    if name == "fill_" and len(call.args) == 1 and base.dtype != "bool":
        # `t.float().fill_(float("-inf"))`: every entry the fill value (baichuan's
        # `_fill_with_neg_inf`, the matrix a look-ahead triu is cut from)
        fill = call.args[0]
        if is_masking_value(fill, lookup):
            return Value(dtype=base.dtype, additive=True, finfo_min=is_finfo_min(fill, lookup))
    if name in _KEEPS_DTYPE:
        return _float_dtype_of(base, call, name) or UNKNOWN
    if name in _BOOL_TESTS:
        return Value(dtype="bool")  # `x.isfinite()`: a bool tensor, as `torch.isfinite(x)`
    return UNKNOWN


def _compared_with(condition: ast.AST | None, constant: float) -> str | None:
    """`x` (dotted) for `x == constant`; None for anything else."""
    if isinstance(condition, ast.Compare) and len(condition.ops) == 1 and isinstance(
            condition.ops[0], ast.Eq) and number(condition.comparators[0]) == constant:
        return dotted(condition.left)
    return None


def _fills_ones_after_zeros(call: ast.Call, lookup: Lookup) -> bool:
    """`m01.masked_fill(x == 0, -inf).masked_fill(x == 1, 0.0)` with `m01` a 0/1 tensor: the
    call (the second fill) leaves 0 where x is 1 and -inf where it is 0."""
    inner = receiver(call)
    if not (isinstance(inner, ast.Call) and call_name(inner) == "masked_fill"):
        return False
    first_fill = argument(inner, 1, "value")
    start = receiver(inner)
    ones = _compared_with(argument(call, 0, "mask"), 1)
    return ones is not None and ones == _compared_with(argument(inner, 0, "mask"), 0) and (
        first_fill is not None and is_masking_value(first_fill, lookup)) and (
        start is not None and (describe(start, lookup).zero_one
                               or describe(start, lookup).float01))


def _nonzero_of(condition: ast.AST, base: ast.AST | None) -> bool:
    """`x.bool()`, `x.to(torch.bool)`, `x != 0` where x is `base`: filling there leaves 0
    where x is 0 and the fill value everywhere else (transformers' `_prepare_4d_attention_mask`:
    `inverted.masked_fill(inverted.to(torch.bool), finfo.min)`)."""
    if base is None or dotted(base) is None:
        return False
    tested: ast.AST | None = None
    if isinstance(condition, ast.Call) and isinstance(condition.func, ast.Attribute):
        method = condition.func.attr
        casts = (method == "bool" and not condition.args) or (method == "to" and any(
            dtype_of(a) == "bool" for a in [*condition.args, *(
                k.value for k in condition.keywords if k.arg == "dtype")]))
        if casts or (method == "ne" and len(condition.args) == 1
                     and number(condition.args[0]) == 0):
            tested = condition.func.value
    elif (isinstance(condition, ast.Compare) and len(condition.ops) == 1
          and isinstance(condition.ops[0], ast.NotEq) and number(condition.comparators[0]) == 0):
        tested = condition.left
    return tested is not None and dotted(tested) == dotted(base)


def _starts_empty(base: Value) -> bool:
    """A zeros matrix: filling it with -inf makes an additive mask."""
    return base.zeros and (base.dtype is None or base.dtype in FLOAT_DTYPES)


def _is_device(node: ast.AST) -> bool:
    text = (dotted(node) or last_name(node) or "").lower()
    return "device" in text or (isinstance(node, ast.Constant) and isinstance(node.value, str)
                                and not dtype_of(node))


def _retyped(base: Value, dtype: str) -> Value:
    base = replace(base, never_half=False) if base.never_half else base
    zero_one = base.zero_one or (base.dtype == "bool" and not base.all_ones)
    if dtype == "bool":
        return replace(base, dtype="bool", zero_one=False, float01=False)
    if dtype == "int":
        return replace(base, dtype="int", zero_one=False, float01=False)
    cast = replace(base, dtype=dtype, zero_one=zero_one, hf_keep=False, hf_keep_inverted=False,
                   tokens=False)
    return _with_float01(cast, base, True)


def _zero_one_base(base: Value) -> bool:
    """Whether a value is a 0/1 mask whatever its dtype (what a float cast keeps 0/1)."""
    padding = base.hf_keep or base.hf_keep_inverted or base.pad_keep or base.padding01
    return (base.zero_one or base.dtype == "bool" or base.float01 or padding
            or base.keep_mask or base.annotated01) and not base.all_ones


# Words of a tensor's name that say it holds a mask, indices or counts (bool or integer).
_NOT_DATA_WORDS = ("mask", "bias", "ids", "idx", "index", "indices", "label", "len", "pos",
                   "token", "count")


def _data_tensor(node: ast.AST, lookup: Lookup) -> bool:
    """A tensor whose dtype a mask is cast to and that is not itself a mask, an index or a
    count by its name or by what the file knows of it (`points`, `feats`, `hidden`)."""
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return False
    text = (last_name(node) or "").lower()
    if not text or any(word in text for word in _NOT_DATA_WORDS):
        return False
    known = describe(node, lookup)
    return known.dtype not in {"bool", "int"} and not (known.tokens or known.hf_keep)


def _with_float01(cast: Value, base: Value, floated: bool) -> Value:
    """`cast` (the value of `base` after a cast) with what a cast to a float dtype
    (`floated`) keeps of a 0/1 mask: that it is 0/1, and whether it came from a tokenizer's
    mask or a pad-id test. An all-ones tensor is left out (adding 1 everywhere is harmless)."""
    if not floated:
        return replace(cast, float01=False)
    padding = base.hf_keep or base.hf_keep_inverted or base.pad_keep or base.padding01
    zero_one = _zero_one_base(base)
    return replace(cast, float01=zero_one, padding01=zero_one and padding)


def _swin_window_mask(call: ast.Call, lookup: Lookup) -> bool:
    """`m.masked_fill(m != 0, float(-100.0)).masked_fill(m == 0, float(0.0))`: Swin's
    shifted-window mask (and its copies: Swin-UNETR, Video Swin), -100 where two tokens come
    from different regions and 0 where from the same, added to the scores. -100 is no hiding
    value of the other rules (`is_masking_value`), but this pair of fills makes an additive
    mask of it."""
    inner = receiver(call)
    if not (isinstance(inner, ast.Call) and call_name(inner) == "masked_fill"):
        return False
    fill = argument(inner, 1, "value")
    v = number(fill, lookup) if fill is not None else None
    tested = [argument(c, 0, "mask") for c in (inner, call)]
    if v is None or not v <= -10 or not all(isinstance(t, ast.Compare) and len(t.ops) == 1
                                            and number(t.comparators[0]) == 0 for t in tested):
        return False
    first, second = tested
    assert isinstance(first, ast.Compare) and isinstance(second, ast.Compare)
    return isinstance(first.ops[0], ast.NotEq) and isinstance(second.ops[0], ast.Eq) and (
        ast.dump(first.left) == ast.dump(second.left) == ast.dump(receiver(inner) or inner))


def _float_tensor(node: ast.AST, lookup: Lookup) -> bool:
    """A tensor whose dtype is float by evidence: known float, or the module itself (`self`,
    whose `.dtype` is its parameters'), or an attention operand or score by its name (`q`,
    `query`, `scores`, `attn_weights`); never a mask by name (`mask.dtype` may be bool)."""
    if isinstance(node, ast.Name) and node.id == "self":
        return True
    if isinstance(node, ast.Attribute) and node.attr == "weight" and isinstance(
            node.value, (ast.Attribute, ast.Subscript)):
        return True  # `self.proj.weight`, `self.pooler[0].weight`: a layer's float parameter
    text = (last_name(node) or "").lower()
    if "mask" in text or "bias" in text:
        return False
    known = lookup(node.id) if isinstance(node, ast.Name) else UNKNOWN
    if known.dtype in FLOAT_DTYPES:
        return True
    if known.dtype is not None:
        return False
    return text in _FLOAT_TENSOR_NAMES or any(word in text for word in _FLOAT_TENSOR_WORDS)


# Names of tensors that hold the attention's float operands.
_FLOAT_TENSOR_NAMES = frozenset({"q", "k", "v", "query", "key", "value", "x", "hidden_states",
                                 "inputs_embeds", "query_states", "key_states", "value_states",
                                 "h", "hs", "emb", "feat", "feats", "features"})
_FLOAT_TENSOR_WORDS = ("score", "logit", "attn_weight", "attention_weight", "hidden", "embed")


def _held_dtype(node: ast.AST | None, lookup: Lookup) -> str | None:
    """The dtype a name or attribute holds (`COMPUTE_DTYPE`, `self.cfg.compute_dtype` of a
    config field `compute_dtype: torch.dtype = torch.float32`), when the file bound it to one."""
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return None
    return describe(node, lookup).names_dtype


def _float_target(node: ast.AST, lookup: Lookup) -> bool:
    """A `.to(...)` / `dtype=` target that is a float dtype by evidence: `q.dtype`,
    `scores.dtype`, `self.dtype`, or a float tensor itself (`.to(q)`)."""
    if isinstance(node, ast.Attribute) and node.attr == "dtype":
        return _float_tensor(node.value, lookup)
    if isinstance(node, ast.Name) and lookup(node.id).float_dtype:
        return True  # `dtype = q.dtype` earlier
    return isinstance(node, ast.Name) and not _is_device(node) and node.id != "dtype" and (
        _float_tensor(node, lookup))
