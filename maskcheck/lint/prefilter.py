"""Whether a file is worth parsing: a shortcut that provably keeps every finding.

Parsing is most of the linter's time, so a text test runs first. `may_match(text, code)` is
a *necessary* condition, never a sufficient one: rule `code` cannot fire unless these tokens
appear in the text, because each rule's evidence is an AST node whose source text holds them
(an alias import still names the function; `NEG_INF = -1e9` still holds the literal;
`number()` only evaluates products with a factor beyond 65504, so a value below -65504
always shows one of the digit shapes below; MC509 only reads masks by their own dotted
name, right next to the `+`). A file that passes is parsed and walked whole.

tests/lint/test_prefilter.py checks on real files that the shortcut and a full parse give
the same findings; benchmarks/lint_prefilter_equivalence.py does it over whole packages.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")
# Every spelling of a value beyond 65504, once digits are all 0: five digits or more, an
# exponent, a radix prefix, `_` separators (`**` is looked at separately).
_BIG_SHAPES = ("00000", "0e0", "0E0", "0e+0", "0E+0", "0x", "0X", "0o", "0O", "0b", "0B", "0_0")
_POWER = re.compile(r"\d\s*\*\*")
# Confirms a cheap hit: digits of 65505 or more, an exponent of 4 or more, a radix, `_`.
_LARGE_EXACT = re.compile(
    r"(?=\d)(?:\d{6}|[7-9]\d{4}|6[6-9]\d{3}|65[6-9]\d\d|655[1-9]\d|6550[5-9]|65504\."
    r"|\d[eE]\+?0*(?:[4-9]|[1-9]\d)|0[xXoObB]|\d_\d)")
# -inf spelled any way float() or a module constant takes it: inf, Inf, INF, infinity, PINF.
_INF = re.compile(r"inf(?:inity)?\b")
# MC512: `<numeric literal> - <bool tensor>`: the literal's text ends in a digit or a dot
# (searched in the text with every digit made 0; each pattern starts with a literal: fast).
_DIGIT_MINUS = re.compile(r"0[\s\\]*-")
_DOT_MINUS = re.compile(r"\.[\s\\]*-")
_TRANSFORMER = re.compile(r"\bTransformer(?:Encoder|Decoder)?(?:Layer)?\b")
_MASK_WORDS = ("mask", "bias", "causal", "extended")
_MASK_WORD = r"(?:mask|bias|causal|extended)"
# MC509 (on lower-cased text): `+` right before a mask-named operand, or right after one (an
# optional simple index).
_PLUS_MASK = re.compile(
    r"\+(?:[\s(\\]|#[^\n]*)*[\w.]*" + _MASK_WORD
    + r"|" + _MASK_WORD + r"[\w.]*(?:\[[^\[\]]*\])?(?:[\s)\\]|#[^\n]*)*\+")


class _Text:
    """A text and the views of it that the conditions share (computed once, on demand)."""

    __slots__ = ("_low", "_zeros", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._low: str | None = None
        self._zeros: str | None = None

    @property
    def low(self) -> str:
        if self._low is None:
            self._low = self.text.lower()
        return self._low

    @property
    def zeros(self) -> str:
        if self._zeros is None:
            self._zeros = self.text.translate(_DIGITS_TO_ZERO)
        return self._zeros


_Test = Callable[[_Text], bool]


def _all(*tests: _Test) -> _Test:
    return lambda t: all(test(t) for test in tests)


def _has(*tokens: str) -> _Test:
    return lambda t: any(token in t.text for token in tokens)


def _has_low(*tokens: str) -> _Test:
    return lambda t: any(token in t.low for token in tokens)


def _large_number(t: _Text) -> bool:
    zeros = t.zeros
    if any(shape in zeros for shape in _BIG_SHAPES) and _LARGE_EXACT.search(t.text):
        return True
    return "**" in zeros and _POWER.search(t.text) is not None


def _mha_or_sdpa(t: _Text) -> bool:
    text = t.text
    return ("key_padding_mask" in text or "MultiheadAttention" in text
            or "scaled_dot_product_attention" in text
            or ("Transformer" in text and _TRANSFORMER.search(text) is not None))


def _plus_mask(t: _Text) -> bool:
    low = t.low
    return "+" in low and any(w in low for w in _MASK_WORDS) and (
        _PLUS_MASK.search(low) is not None)


def _literal_minus(t: _Text) -> bool:
    return _DIGIT_MINUS.search(t.zeros) is not None or _DOT_MINUS.search(t.text) is not None


_TOKENIZER = _has_low("tokenizer", "processor")
_BOOL_EVIDENCE = _has("bool", "==", "!=", "<", ">", "~", "logical_")
_CONDITIONS: dict[str, _Test] = {
    "MC501": _large_number,
    "MC502": _mha_or_sdpa,
    "MC503": _has("triu"),
    "MC504": _all(_has("zeros"), _has("==")),
    "MC505": _has("masked_fill_"),
    "MC506": _has("scaled_dot_product_attention"),
    "MC509": _all(_plus_mask, _BOOL_EVIDENCE),
    "MC510": _all(_has("scaled_dot_product_attention"), _has("cat")),
    "MC511": _all(_mha_or_sdpa, _TOKENIZER),
    "MC512": _all(_literal_minus, _BOOL_EVIDENCE),
    "MC513": _all(_has("finfo"), _has("+")),
    "MC517": _all(_has("finfo"), _has("float", "double"), _has("half", "float16", "bfloat16")),
    "MC518": _all(_has("~"), lambda t: "int" in t.text or "long" in t.text or _TOKENIZER(t)),
    "MC519": _all(_has("masked_fill"), _TOKENIZER),
    "MC521": _has("tril", "triu"),
    "MC522": _all(_has("*"), lambda t: _INF.search(t.low) is not None),
    "MC523": _all(_has("*"), lambda t: "finfo" in t.text or _INF.search(t.low) is not None
                  or _large_number(t)),
    "MC524": _all(_has("masked_fill_"), _has("register_buffer")),
}


def may_match(text: str, code: str) -> bool:
    """Whether rule `code` can fire on `text` at all (a necessary condition, never sufficient)."""
    test = _CONDITIONS.get(code)
    return test is not None and test(_Text(text))


def worth_parsing(text: str, enabled: frozenset[str]) -> bool:
    shared = _Text(text)
    return any(_CONDITIONS[code](shared) for code in enabled if code in _CONDITIONS)
