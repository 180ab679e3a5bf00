"""Generators of hostile owner files for the fuzz tests: TOML tables built from the real keys of
what is parsed (so most inputs get past the TOML parser and into validation), and TOML text for
them. A generated table mixes known keys with junk, right types with wrong ones."""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel

NASTY_TEXT = st.sampled_from(["", " ", "\n", "\x00", "\x7f", "~", "/", "..", "/..", "*", "**",
                              "unix:/x", "http://", "https://h:99999", "http://u:p@h/", "\u202e",
                              "public", "private", "secret", "auto", "ask", "deny",
                              "-1", "1e309", "nan"])
scalars = st.one_of(
    NASTY_TEXT, st.text(max_size=12), st.booleans(),
    st.integers(-(2**63), 2**63 - 1), st.integers(-3, 5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.datetimes(timezones=st.none() | st.just(datetime.UTC)), st.dates(), st.times(),
)


def toml_key(key: str) -> str:
    return json.dumps(key)  # a quoted key takes any text


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_text(table: dict[str, Any]) -> str:
    """Top-level scalars first, then one ``[section]`` per nested table, as an owner writes it."""
    plain = [f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()
             if not isinstance(v, dict)]
    sections = [f"[{toml_key(k)}]\n" + "\n".join(f"{toml_key(sk)} = {toml_value(sv)}"
                                                  for sk, sv in v.items())
                for k, v in table.items() if isinstance(v, dict)]
    return "\n".join(plain + sections) + "\n"


def values(words: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(st.one_of(scalars, words), lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(words, inner, max_size=3)), max_leaves=6)


def field_names(model: type[BaseModel]) -> list[str]:
    return [*sorted(model.model_fields), "junk"]


def tables_of(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """Tables for ``model``: its own keys (a nested model's keys one level down) and junk.

    Each key's strategy is built once here: building strategies per draw (a ``flatmap``) made
    generation cost 70 ms an input, far more than the parsing under test."""
    words = st.sampled_from(field_names(model))
    top = values(words)

    def for_key(name: str) -> st.SearchStrategy[tuple[str, Any]]:
        field = model.model_fields.get(name)
        nested = field.annotation if field is not None else None
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            inner = st.sampled_from(field_names(nested))
            return st.tuples(st.just(name), st.one_of(
                st.dictionaries(inner, values(inner), max_size=5), values(inner)))
        return st.tuples(st.just(name), top)

    entries = st.one_of([for_key(name) for name in field_names(model)])
    return st.lists(entries, max_size=8).map(dict)
