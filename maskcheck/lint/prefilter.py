"""Whether a file is worth parsing: a shortcut that provably keeps every finding.

Parsing is most of the linter's time, so a text test runs first. `may_match(text, code)` is
a *necessary* condition, never a sufficient one: rule `code` cannot fire unless these tokens
appear in the text, because each rule's evidence is an AST node whose source text holds them
(an alias import still names the function; `NEG_INF = -1e9` still holds the literal;
`number()` only evaluates products with a factor beyond 65504, so a value below -65504
always shows one of the digit shapes below; MC509 needs a `+`/`add`, a score word or a
product, and bool evidence). A file that passes is parsed and walked whole.

tests/lint/test_prefilter.py checks on real files that the shortcut and a full parse give
the same findings; benchmarks/lint_prefilter_equivalence.py does it over whole packages.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
# Every spelling of a value beyond 65504, once digits are all 0: five digits or more, an
# exponent, a radix prefix, `_` separators (`**` is looked at separately).
_BIG_SHAPES = (b"0x", b"0X", b"0o", b"0O", b"0b", b"0B", b"0_0")
_EXPONENT_SHAPES = (b"0e0", b"0E0", b"0e+0", b"0E+0")
_BIG_EXPONENT = re.compile(r"\d[eE]\+?0*(?:[4-9]|[1-9]\d)")  # 1e4 and beyond
_DIGIT_BYTES = frozenset(b"0123456789")
_POWER = re.compile(r"\d\s*\*\*")
# -inf spelled any way float() or a module constant takes it: inf, Inf, INF, infinity, PINF.
_INF = re.compile(r"inf(?:inity)?\b")
_TRANSFORMER = re.compile(r"Transformer(?:Encoder|Decoder)?(?:Layer)?\b")


class _Text:
    """A text and the views of it that the conditions share (computed once, on demand)."""

    __slots__ = ("_large", "_low", "_zeros", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._low: str | None = None
        self._zeros: bytes | None = None
        self._large: bool | None = None

    @property
    def low(self) -> str:
        if self._low is None:
            self._low = self.text.lower()
        return self._low

    @property
    def zeros(self) -> bytes:
        """The text as UTF-8 with every digit 1-9 made 0 (bytes.translate runs at C speed)."""
        if self._zeros is None:
            self._zeros = self.text.encode("utf-8", "surrogatepass").translate(_DIGITS_TO_ZERO)
        return self._zeros


_Test = Callable[[_Text], bool]


def _all(*tests: _Test) -> _Test:
    return lambda t: all(test(t) for test in tests)


def _has(*tokens: str) -> _Test:
    return lambda t: any(token in t.text for token in tokens)


def _has_low(*tokens: str) -> _Test:
    return lambda t: any(token in t.low for token in tokens)


def _large_number(t: _Text) -> bool:
    if t._large is None:
        zeros = t.zeros
        t._large = (any(shape in zeros for shape in _BIG_SHAPES) or _big_digit_run(t)
                    or (any(shape in zeros for shape in _EXPONENT_SHAPES)
                        and _BIG_EXPONENT.search(t.text) is not None)
                    or (b"**" in zeros and _POWER.search(t.text) is not None))
    return t._large


def _big_digit_run(t: _Text) -> bool:
    """A run of digits worth 65505 or more (or 65504.x): found as 00000 in the zeroed bytes."""
    zeros = t.zeros
    at = zeros.find(b"00000")
    if at == -1:
        return False
    data = t.text.encode("utf-8", "surrogatepass")
    while at != -1:
        start = at
        while start > 0 and data[start - 1] in _DIGIT_BYTES:
            start -= 1
        end = at + 5
        while end < len(data) and data[end] in _DIGIT_BYTES:
            end += 1
        value = int(data[start:end])
        if value >= 65505 or (value == 65504 and data[end:end + 1] == b"."):
            return True
        at = zeros.find(b"00000", end)
    return False


def _mha_or_sdpa(t: _Text) -> bool:
    text = t.text
    return ("key_padding_mask" in text or "MultiheadAttention" in text
            or "scaled_dot_product_attention" in text
            or ("Transformer" in text and _transformer_class(text)))


def _transformer_class(text: str) -> bool:
    """`Transformer`, `TransformerEncoderLayer`... as a whole word (not `TransformersKwargs`)."""
    for m in _TRANSFORMER.finditer(text):
        if m.start() == 0 or not (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_"):
            return True
    return False


# What `checks._is_score_name` reads as scores: a matmul or a name with one of these words.
_SCORE_EVIDENCE = _has_low("score", "logit", "attn", "att_", "weights", "dots", "energy", "sim",
                           "@", "matmul", "bmm", "einsum")


_TOKENIZER = _has_low("tokenizer", "processor")
# What makes a value bool in values.py: a comparison (operator or `.eq(`/`.ne(`/... method),
# `.bool()`/`dtype=torch.bool`, `torch.full(..., True)`, `logical_*`.
_BOOL_EVIDENCE = _has("bool", "==", "!=", "<", ">", "~", "logical_", "eq(", "ne(", "gt(", "lt(",
                      "ge(", "le(", "True")
# MC508's `scores + m` (`+`, `+=`, `torch.add`; scores by `_is_score_name`): m is a tokenizer's
# int mask (read as `attention_mask`), a float triangle of ones, a 0/1 literal, or a cast to a
# float dtype (`.float()`, `.to(...)`, `.type_as(...)`, ...) of a mask from a tokenizer, a
# pad-id test (`ids != pad_id`, `tokens != self.null_idx`), a triangle or one named as a mask.
_ADDED_01_SOURCE = _has_low("tokenizer", "processor", "pad", "null_idx", "tril", "triu", "mask",
                            "bias", "causal", "extended")
# A cast method (`.float()`, `.to(...)`, `.type_as(...)`, `.int()`): an attribute, so a `.`
# (then spaces, line continuations or comments) right before its name.
_CAST_METHOD = re.compile(
    r"\.(?:[\s\\]|#[^\n]*\n)*(?:to|int|long|float|double|half|bfloat16|type|type_as)\b")
_ADD_WORD = re.compile(r"\badd_?\b")  # `torch.add(...)`, `scores.add_(...)`
# 0/1 without a cast: a tokenizer's int mask, a triangle of ones, a 0/1 literal tensor.
_TENSOR_WORD = re.compile(r"\btensor\b")
_TRIANGLE_OR_HF_MASK = _has("attention_mask", "tril", "triu")


def _zero_one_made(t: _Text) -> bool:
    return _TRIANGLE_OR_HF_MASK(t) or _TENSOR_WORD.search(t.text) is not None


def _added_zero_one(t: _Text) -> bool:
    return ("+" in t.text or _ADD_WORD.search(t.text) is not None) and _SCORE_EVIDENCE(t) and (
        _ADDED_01_SOURCE(t)) and (_zero_one_made(t) or _CAST_METHOD.search(t.text) is not None)


_CONDITIONS: dict[str, _Test] = {
    "MC501": _large_number,
    "MC502": _mha_or_sdpa,
    "MC503": _has("triu"),
    "MC504": _all(_has("zeros"), _has("==")),
    "MC505": _has("masked_fill_"),
    "MC506": _has("scaled_dot_product_attention"),
    # at SDPA / MultiheadAttention, or added to scores
    "MC508": lambda t: _mha_or_sdpa(t) or _added_zero_one(t),
    "MC509": _all(_has("+", "add"), _SCORE_EVIDENCE, _BOOL_EVIDENCE),
    # keys from `torch.cat` with a cache, `cache.update(...)`/`past_key_value.update(...)`, or
    # a static cache read up to the new tokens (`self.cache_k[:, : start_pos + n]`)
    "MC510": _all(_has("scaled_dot_product_attention"), _has("cat", "cache", "past")),
    "MC511": _all(_mha_or_sdpa, _TOKENIZER),
    # `1 - m`, `m - 1`, `m - (1)`, `ONE - m`: any minus (the engine reads named constants)
    "MC512": _all(_has("-"), _BOOL_EVIDENCE),
    "MC513": _all(_has("finfo"), _has("+", "add")),
    "MC517": _all(_has("finfo"), _has("float", "double"), _has("half", "float16", "bfloat16")),
    "MC518": _all(_has("~"), lambda t: "int" in t.text or "long" in t.text or _TOKENIZER(t)),
    "MC519": _all(_has("masked_fill"), _TOKENIZER),
    "MC520": _all(_has("softmax"), _has("*")),  # a product that softmax reads
    "MC521": _has("tril", "triu"),
    "MC522": _all(_has("*", "mul"), lambda t: _INF.search(t.low) is not None),
    "MC523": _all(_has("*", "mul"), lambda t: "finfo" in t.text or _INF.search(t.low) is not None
                  or _large_number(t) or "generate_square_subsequent_mask" in t.text),
    # masked_fill_ on a buffer, or a subscript write into one (`self.bias[i] = -inf`)
    "MC524": _has("register_buffer"),
}


def may_match(text: str, code: str) -> bool:
    """Whether rule `code` can fire on `text` at all (a necessary condition, never sufficient)."""
    test = _CONDITIONS.get(code)
    return test is not None and test(_Text(text))


def worth_parsing(text: str, enabled: frozenset[str]) -> bool:
    shared = _Text(text)
    return any(_CONDITIONS[code](shared) for code in enabled if code in _CONDITIONS)
