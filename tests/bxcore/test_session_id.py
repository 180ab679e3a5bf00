"""SessionId: a string safe to use as one path component under sessions/."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import PurePosixPath

import pytest
from bxcore.ids import SessionId, check_session_id, new_session_id
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

SESSION_ID = TypeAdapter(SessionId)

REFUSED = {
    "parent directory": "../x",
    "dot dot": "..",
    "dot": ".",
    "slash": "x/y",
    "backslash": "x\\y",
    "empty": "",
    "65 characters": "a" * 65,
    "leading dash": "-x",
    "leading underscore": "_x",
    "unicode letter": "sessiön",
    "unicode digit": "٣",
    "space": "a b",
    "newline at the end": "abc\n",
    "nul": "a\x00b",
    "dot inside": "a.b",
}

ACCEPTED = [
    "a", "0", "A1", "20261130-074512-3f9a1c2b", "a" * 64, "x_y-Z",
    "k3j9x8w7q6p5o4n3m2l1k0j9ab",  # a Mattermost id, as gatewayd will pass
]


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_unsafe_ids_are_refused(value):
    with pytest.raises(ValueError, match="session id"):
        check_session_id(value)
    with pytest.raises(ValidationError):
        SESSION_ID.validate_python(value)


@pytest.mark.parametrize("value", ACCEPTED)
def test_valid_ids_are_accepted(value):
    assert check_session_id(value) == value
    assert SESSION_ID.validate_python(value) == value


def test_a_non_string_is_refused():
    with pytest.raises(ValidationError):
        SESSION_ID.validate_python(42)


def test_new_session_id_is_valid_and_carries_the_time():
    moment = datetime(2026, 11, 30, 7, 45, 12, tzinfo=UTC)
    made = new_session_id(moment)
    assert check_session_id(made) == made
    assert re.fullmatch(r"20261130-074512-[0-9a-f]{8}", made)
    assert check_session_id(new_session_id())


def test_new_session_ids_differ():
    assert len({new_session_id() for _ in range(50)}) == 50


# Plain text rarely passes; an alphabet of the allowed characters and the dangerous ones does.
@given(st.text(max_size=80) | st.text(alphabet="aZ09_-./\\ \n\x00é", max_size=70))
def test_any_accepted_id_is_a_single_safe_path_component(value):
    try:
        check_session_id(value)
    except ValueError:
        return
    path = PurePosixPath("/sessions") / value
    assert path.parent == PurePosixPath("/sessions")
    assert path.name == value
    assert value not in (".", "..") and not value.startswith("-")
    assert value.isascii() and value.isprintable()
    assert 1 <= len(value) <= 64


@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", fullmatch=True))
def test_every_id_of_the_documented_shape_is_accepted(value):
    assert check_session_id(value) == value
