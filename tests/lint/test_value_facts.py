"""`Value` keeps only the facts that differ from their defaults: made, compared, hashed,
replaced and tested for truth as the field-by-field dataclass methods would."""

from __future__ import annotations

import dataclasses
import math

import pytest

from maskcheck.lint.values import TENSOR, UNKNOWN, Value, replace

FIELDS = [f.name for f in dataclasses.fields(Value)]


def _as_tuple(v: Value) -> tuple[object, ...]:
    return tuple(getattr(v, name) for name in FIELDS)


def test_defaults_given_explicitly_are_the_unknown_value() -> None:
    explicit = Value(**{f.name: f.default for f in dataclasses.fields(Value)})
    assert explicit == UNKNOWN and not explicit and hash(explicit) == hash(UNKNOWN)
    assert Value(dtype=None, param_roles=()) == Value()


@pytest.mark.parametrize("facts", [
    {"dtype": "bool"}, {"number": -math.inf}, {"number": 0.0}, {"flag": False},
    {"tensor": True}, {"result": Value(dtype="bool")}, {"param_roles": ("x",)},
])
def test_any_fact_makes_it_known(facts: dict[str, object]) -> None:
    v = Value(**facts)
    assert v and v != UNKNOWN
    assert _as_tuple(v) == _as_tuple(Value(**facts))
    assert v == Value(**facts) and hash(v) == hash(Value(**facts))
    for name, fact in facts.items():
        assert getattr(v, name) == fact


def test_replace_sets_and_clears_facts() -> None:
    v = replace(TENSOR, dtype="bool", hf_keep=True)
    assert _as_tuple(v) == _as_tuple(dataclasses.replace(TENSOR, dtype="bool", hf_keep=True))
    cleared = replace(v, dtype=None, hf_keep=False, tensor=False)
    assert cleared == UNKNOWN and not cleared
    assert Value(tensor=True) == TENSOR  # the original is untouched
    with pytest.raises(TypeError):
        replace(v, no_such_fact=1)
    with pytest.raises(TypeError):
        Value(no_such_fact=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.dtype = "int"  # type: ignore[misc]


def test_a_nan_number_equals_only_itself() -> None:
    nan = float("nan")
    a = Value(number=nan)
    assert a == a and a != Value(number=float("nan")) and a
    assert Value() != 0 and Value() != None  # noqa: E711
