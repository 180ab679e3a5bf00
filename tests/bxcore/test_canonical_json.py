"""The canonical JSON encoding: sorted keys, no spaces, UTF-8 not escaped, NaN refused."""

from __future__ import annotations

import json
import math

import pytest
from bxcore.canonical import canonical_json, canonical_text
from bxcore.errors import WireError
from hypothesis import given
from hypothesis import strategies as st


def test_keys_are_sorted_at_every_depth():
    assert canonical_json({"b": 1, "a": {"d": 2, "c": [{"z": 0, "y": 1}]}}) == (
        b'{"a":{"c":[{"y":1,"z":0}],"d":2},"b":1}'
    )


def test_there_are_no_spaces_between_tokens():
    assert canonical_json({"a": [1, 2, {"b": None}], "c": True}) == (
        b'{"a":[1,2,{"b":null}],"c":true}'
    )


def test_non_ascii_text_is_utf8_not_escaped():
    assert canonical_json({"text": "Grüße ☃ 🦀"}) == '{"text":"Grüße ☃ 🦀"}'.encode()


def test_control_characters_and_quotes_are_escaped_as_json_requires():
    assert canonical_json('a"b\\c\nd\x00') == b'"a\\"b\\\\c\\nd\\u0000"'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(bad):
    with pytest.raises(ValueError):
        canonical_json({"x": [bad]})


def test_a_lone_surrogate_is_refused_because_utf8_cannot_carry_it():
    with pytest.raises(ValueError):
        canonical_json({"x": "\ud800"})


def test_a_value_json_has_no_form_for_is_refused():
    with pytest.raises(TypeError, match="set"):
        canonical_json({"x": {1, 2}})


def test_models_encode_by_alias_at_any_depth():
    error = WireError(code="denied", message="no grant")
    expected = b'{"code":"denied","message":"no grant"}'
    assert canonical_json(error) == expected
    assert canonical_json({"errors": [error]}) == b'{"errors":[' + expected + b"]}"
    assert error.canonical() == expected


def test_canonical_text_is_the_same_encoding_as_a_string():
    assert canonical_text({"é": 1}) == '{"é":1}'


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_encoding_round_trips_and_is_a_fixed_point(value):
    encoded = canonical_json(value)
    decoded = json.loads(encoded)
    assert decoded == value
    assert canonical_json(decoded) == encoded
