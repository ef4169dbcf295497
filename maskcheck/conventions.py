"""The one table of APIs, conventions, dtype limits and thresholds.

Rules and inference read these facts; none of them re-derives what an API means.
Facts come from ../shared/reference/conventions.md (torch 2.13, transformers 5.24).
"""

from __future__ import annotations

import fnmatch
import functools
import math
import re
from dataclasses import dataclass
from typing import Literal

from maskcheck.model import Api, Convention, Role

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")
INT_DTYPES = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")

# torch.finfo(dtype).min / max, exact.
FINFO_MIN: dict[str, float] = {
    "float16": -65504.0,
    "bfloat16": -3.3895313892515355e38,
    "float32": -3.4028234663852886e38,
    "float64": -1.7976931348623157e308,
    "float8_e4m3fn": -448.0,
    "float8_e5m2": -57344.0,
}
FINFO_MAX: dict[str, float] = {k: -v for k, v in FINFO_MIN.items()}

# Below this magnitude a negative value is a bias (ALiBi-style), not a masked value.
WEAK_MASK_MAGNITUDE = 1e3
# An additive value at or below this hides its key (exp(-1e3) underflows in every dtype).
ADDITIVE_MASKED_BELOW = -WEAK_MASK_MAGNITUDE
# A masked additive value must be at least this large in magnitude. Raw scores of unscaled or
# large models reach 1e5 (TransformerLens#318 leaked with -1e5), so wide dtypes want -inf,
# finfo.min or <= -1e6; float16 tops out at 65504, where -1e4 is the usual safe choice.
STRONG_MASK_MAGNITUDE: dict[str, float] = {
    "float16": 1e4, "float8_e4m3fn": 400.0, "float8_e5m2": 1e4,
}
STRONG_MASK_MAGNITUDE_DEFAULT = 1e6


def strong_mask_magnitude(dtype: str) -> float:
    return STRONG_MASK_MAGNITUDE.get(dtype, STRONG_MASK_MAGNITUDE_DEFAULT)
# Up to this many distinct values are tracked exactly; a mask has 2-3.
MAX_DISTINCT = 64
# Distinct values above which a float tensor is a weight/activation, not a mask.
MASK_MAX_DISTINCT = 8

# Float dtypes by the names people type (a `torch.` prefix is allowed); values are torch names.
DTYPE_ALIASES: dict[str, str] = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
    "float64": "float64", "fp64": "float64", "double": "float64", "f64": "float64",
    "float8_e4m3fn": "float8_e4m3fn", "fp8": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}


def float_dtype_name(name: str) -> str | None:
    """The torch name of a float dtype as typed ("bf16", "torch.half"), or None."""
    return DTYPE_ALIASES.get(name.strip().lower().removeprefix("torch."))


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


@dataclass(frozen=True)
class ConventionSpec:
    name: Convention
    # How a nonzero element is read: True/1/nonzero-float is "keep" or "masked".
    nonzero_means: Literal["keep", "masked"] | None
    title: str
    users: str


CONVENTIONS: dict[str, ConventionSpec] = {
    "bool-true-masked": ConventionSpec(
        "bool-true-masked", "masked", "bool, True = may NOT attend",
        "nn.MultiheadAttention, nn.Transformer* (key_padding_mask, attn_mask, src/tgt masks)"),
    "bool-true-keep": ConventionSpec(
        "bool-true-keep", "keep", "bool, True = may attend",
        "F.scaled_dot_product_attention, FlexAttention mask_mod, HF sdpa 4-D masks, JAX/Flax"),
    "int-one-keep": ConventionSpec(
        "int-one-keep", "keep", "integer 0/1, 1 = real token",
        "Hugging Face attention_mask (tokenizer output), Keras"),
    "int-one-masked": ConventionSpec(
        "int-one-masked", "masked", "integer 0/1, 1 = masked", "hand-rolled code"),
    # Additive: 0 keeps, a large negative drops. Nonzero elements are the masked ones.
    "additive": ConventionSpec(
        "additive", "masked", "float, 0 = attend, large negative = masked",
        "float attn_mask of MHA and SDPA, HF eager 4-D masks, xformers biases"),
    "multiplicative": ConventionSpec(
        "multiplicative", "keep", "float 0/1, 1 = attend",
        "masks meant to be multiplied into attention weights"),
    "not-a-mask": ConventionSpec(
        "not-a-mask", None, "values fit no convention", "weights, activations"),
    "ambiguous": ConventionSpec("ambiguous", None, "could be more than one convention", ""),
}


@dataclass(frozen=True)
class ApiSpec:
    name: Api
    title: str
    bool_convention: Convention | None  # how a bool mask is read
    int_convention: Convention | None  # how an integer mask is read (None: rejected)
    # Legal layouts, as tuples of axis names (N batch, H heads, NH batch*heads, L queries,
    # S keys, 1 broadcast). Float masks are added to the scores by every API here.
    layouts: tuple[tuple[str, ...], ...]
    # The call takes is_causal=True in place of a dense causal mask (MC050 is actionable).
    has_is_causal: bool = False

    @property
    def ranks(self) -> set[int]:
        return {len(layout) for layout in self.layouts}


APIS: dict[str, ApiSpec] = {
    "mha": ApiSpec(
        "mha", "nn.MultiheadAttention", "bool-true-masked", None,
        (("N", "S"), ("S",), ("L", "S"), ("NH", "L", "S")), has_is_causal=True),
    "sdpa": ApiSpec(
        "sdpa", "F.scaled_dot_product_attention", "bool-true-keep", None,
        (("L", "S"), ("N", "H", "L", "S"), ("N", "1", "L", "S"), ("N", "1", "1", "S"),
         ("1", "1", "L", "S"), ("H", "L", "S"), ("1", "L", "S"), ("S",)), has_is_causal=True),
    "hf": ApiSpec(
        "hf", "Hugging Face attention_mask", "bool-true-keep", "int-one-keep",
        (("N", "S"), ("N", "1", "L", "S"))),
    "eager": ApiSpec(
        "eager", "HF eager attention (scores + mask)", "bool-true-keep", None,
        (("N", "1", "L", "S"), ("N", "H", "L", "S"))),
    "flex": ApiSpec(
        "flex", "FlexAttention mask_mod / create_mask", "bool-true-keep", None,
        (("N", "H", "L", "S"), ("1", "1", "L", "S"), ("L", "S"))),
}


@dataclass(frozen=True)
class NameHint:
    pattern: str  # fnmatch pattern on the last dotted component, lower-cased
    api: Api  # the API the name belongs to ("auto" when shared by several)
    role: Role
    bool_convention: Convention | None  # what a bool mask of this name means
    int_convention: Convention | None


# Ordered: first match wins.
_MASKED: Convention = "bool-true-masked"
_KEEP: Convention = "bool-true-keep"
NAME_HINTS: tuple[NameHint, ...] = (
    NameHint("*key_padding_mask", "mha", "key_padding_mask", _MASKED, "int-one-masked"),
    NameHint("src_mask", "mha", "attn_mask", _MASKED, None),
    NameHint("tgt_mask", "mha", "attn_mask", _MASKED, None),
    NameHint("memory_mask", "mha", "attn_mask", _MASKED, None),
    NameHint("*padding_mask", "auto", "key_padding_mask", _MASKED, "int-one-masked"),
    NameHint("pad_mask", "auto", "key_padding_mask", _MASKED, "int-one-masked"),
    NameHint("attention_mask", "hf", "hf_attention_mask", _KEEP, "int-one-keep"),
    NameHint("*attention_mask", "hf", "hf_attention_mask", _KEEP, "int-one-keep"),
    NameHint("attn_mask", "auto", "attn_mask", None, None),
    NameHint("*attn_mask", "auto", "attn_mask", None, None),
    NameHint("causal_mask", "auto", "attn_mask", None, None),
    NameHint("*keep*", "auto", "unknown", _KEEP, "int-one-keep"),
    NameHint("*valid*", "auto", "unknown", _KEEP, "int-one-keep"),
    NameHint("*visible*", "auto", "unknown", _KEEP, "int-one-keep"),
    NameHint("block_mask", "flex", "attn_mask", _KEEP, None),
)


# Words by which a name says it is a keep-mask (True / 1 = may attend) whatever API reads it:
# `keep`, `pad_keep`, `src_keep`, `valid_mask`, `visible`. Whole words of the name only
# (`keepdim` and `invalid_mask` are not), and never beside a word that makes the name a count, an
# index, a probability or a flag (`keep_idx`, `keep_prob`, `valid_lengths`, `keep_last`).
KEEP_WORDS = frozenset({"keep", "kept", "valid", "visible", "available", "alive"})
NOT_A_MASK_WORDS = frozenset({
    "idx", "index", "indices", "ids", "id", "len", "lens", "length", "lengths", "num", "count",
    "counts", "n", "size", "sizes", "dim", "dims", "ratio", "rate", "prob", "probs", "p", "frac",
    "fraction", "topk", "k", "first", "last", "mode", "flag", "fn", "func", "steps", "step",
    "loss", "losses", "tokens", "token", "list", "set", "dict", "names", "name", "keys"})


@functools.lru_cache(maxsize=4096)
def declares_keep(name: str) -> bool:
    """Whether a variable's name (its last dotted part) says it is a keep-mask."""
    leaf = name.rsplit(".", 1)[-1]
    words = {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", leaf)}
    return not words.isdisjoint(KEEP_WORDS) and words.isdisjoint(NOT_A_MASK_WORDS)


# Integer tensors with these names hold ids, types or positions, whatever their values (packed
# position_ids 0,1,0,1 and token_type_ids 0/1 look like masks): fnmatch on the lower-cased
# last dotted component.
NOT_MASK_INT_NAMES = ("*_ids", "*_id", "ids", "*token_type*", "*position*", "*segment*",
                      "labels", "*_labels", "*cache_position*", "*_index", "*_indices",
                      "*seq_len*", "*lengths")


def int_not_a_mask_name(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1].lower()
    return any(fnmatch.fnmatchcase(leaf, p) for p in NOT_MASK_INT_NAMES)


def name_hint(name: str) -> NameHint | None:
    last = name.rsplit(".", 1)[-1].lower()
    for hint in NAME_HINTS:
        if fnmatch.fnmatchcase(last, hint.pattern):
            return hint
    return None


def representable(value: float, dtype: str) -> bool:
    """True if a finite value survives a cast to dtype without becoming inf."""
    if not math.isfinite(value) or dtype not in FINFO_MIN:
        return True
    return FINFO_MIN[dtype] <= value <= FINFO_MAX[dtype]


def invert_fix(api: str, role: str) -> str:
    """Code that converts a mask of the opposite convention for the given API."""
    if api == "sdpa":
        if role == "key_padding_mask":
            return "attn_mask = ~key_padding_mask[:, None, None, :]  # SDPA: True = may attend"
        return "attn_mask = ~mask  # SDPA: True = may attend"
    if api == "mha":
        arg = "key_padding_mask" if role == "key_padding_mask" else "attn_mask"
        return f"{arg} = ~mask  # MHA: True = do not attend"
    if api == "hf":
        return "attention_mask = (~mask).long()  # HF: 1 = real token"
    if api == "flex":
        return "mask_mod should return True where attention is allowed: invert it"
    return "invert the mask: mask = ~mask (bool) or 1 - mask (0/1)"


def padding_fix(api: str) -> str:
    """How a (N, S) key padding mask is passed to the given API."""
    if api == "sdpa":
        return "attn_mask = ~key_padding_mask[:, None, None, :]  # (N,1,1,S), True = may attend"
    if api == "mha":
        return "mha(q, k, v, key_padding_mask=key_padding_mask)  # (N,S), True = padding"
    if api in ("hf", "eager"):
        return "model(input_ids, attention_mask=attention_mask)  # (N,S) int, 1 = real token"
    return "expand the padding mask over keys: mask[:, None, None, :]"


@functools.lru_cache(maxsize=1)  # metadata lookups cost ~1 ms; the guard asks on every call
def installed_torch_version() -> tuple[int, int] | None:
    """The installed torch's (major, minor), read from package metadata (no import)."""
    from importlib import metadata

    try:
        parts = metadata.version("torch").split(".")
        return int(parts[0]), int(parts[1])
    except (metadata.PackageNotFoundError, ValueError, IndexError):
        return None


def empty_row_behaviour() -> str:
    """What torch does with a query row that has no key to attend (conventions.md §2.1, §2.4)."""
    version = installed_torch_version()
    if version is None:
        sdpa = "zeros on F.scaled_dot_product_attention (torch >= 2.5)"
    elif version >= (2, 5):
        sdpa = "zeros on F.scaled_dot_product_attention"
    else:
        sdpa = f"NaN on F.scaled_dot_product_attention (torch {version[0]}.{version[1]} < 2.5)"
    return (f"{sdpa}, NaN on nn.MultiheadAttention's need_weights path and in an eager "
            "softmax, which poisons the gradients")
