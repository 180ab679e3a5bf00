"""Small shared values: DataClass ordering, sha256, RFC 3339 times, durable writes, and the log
record and tool types refusing what they must."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta, timezone

import pytest
from bxcore.records import parse_record
from bxcore.tools import DataClass, ToolRequest
from bxcore.util import (
    format_rfc3339,
    is_rfc3339,
    now_rfc3339,
    parse_rfc3339,
    sha256,
    write_durably,
)
from pydantic import ValidationError

PUBLIC, PRIVATE, SECRET = DataClass.PUBLIC, DataClass.PRIVATE, DataClass.SECRET


# --- DataClass ---------------------------------------------------------------------------------


def test_data_classes_order_by_sensitivity_not_alphabet():
    # Alphabetically "private" < "public" < "secret"; by rank public < private < secret.
    assert PUBLIC < PRIVATE < SECRET
    assert sorted([SECRET, PUBLIC, PRIVATE]) == [PUBLIC, PRIVATE, SECRET]
    assert max(PUBLIC, PRIVATE) is PRIVATE
    assert max([PRIVATE, SECRET, PUBLIC]) is SECRET
    assert min(PRIVATE, PUBLIC) is PUBLIC
    assert PRIVATE >= PRIVATE and PRIVATE <= PRIVATE and SECRET > PUBLIC


def test_a_sessions_taint_is_the_highest_class_seen():
    seen = [PUBLIC, PRIVATE, PUBLIC]
    assert max(seen, default=PUBLIC) is PRIVATE


def test_a_data_class_does_not_compare_with_a_plain_string():
    with pytest.raises(TypeError, match="cannot compare a DataClass with str"):
        assert PUBLIC < "secret"


def test_a_data_class_is_its_wire_string():
    assert PRIVATE == "private" and str(SECRET) == "secret"
    assert DataClass("public") is PUBLIC
    assert len({PUBLIC, DataClass("public"), PRIVATE}) == 2


# --- sha256 and time ---------------------------------------------------------------------------


def test_sha256_is_algorithm_tagged():
    assert sha256(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_now_is_utc_rfc3339_with_microseconds():
    now = now_rfc3339()
    assert is_rfc3339(now) and now.endswith("Z") and len(now) == len("2026-01-01T00:00:00.000000Z")
    assert abs(parse_rfc3339(now) - datetime.now(UTC)) < timedelta(days=1)


def test_format_converts_to_utc_and_refuses_naive_times():
    plus_two = timezone(timedelta(hours=2))
    assert format_rfc3339(datetime(2026, 1, 1, 2, 0, tzinfo=plus_two)) == (
        "2026-01-01T00:00:00.000000Z"
    )
    with pytest.raises(ValueError, match="naive"):
        format_rfc3339(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "text",
    ["2026-09-18T07:45:12Z", "2026-09-18T07:45:12.5+02:00", "2026-09-18T07:45:12.123456789Z"],
)
def test_rfc3339_times_are_accepted(text):
    assert is_rfc3339(text)
    assert parse_rfc3339(text).tzinfo is not None


@pytest.mark.parametrize(
    "text",
    [
        "2026-09-18 07:45:12Z",  # a space for the T
        "2026-09-18T07:45:12",  # no offset
        "2026-09-18T07:45:12Z\n",  # a trailing newline
        "2026-02-30T00:00:00Z",  # no such day
        "2026-09-18T25:00:00Z",  # no such hour
        "\uff12\uff10\uff12\uff16-09-18T07:45:12Z",  # fullwidth digits
        "",
    ],
)
def test_other_times_are_refused(text):
    assert not is_rfc3339(text)
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_rfc3339(text)


def test_write_durably_replaces_the_file_atomically_with_its_mode(tmp_path):
    target = tmp_path / "baseline.json"
    target.write_bytes(b"old")
    write_durably(target, b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["baseline.json"]  # no temp file left behind


# --- records and tool types refuse bad input ---------------------------------------------------

GOOD_USER = {"type": "user", "time": "2026-09-18T07:45:12Z", "content": "hi"}


@pytest.mark.parametrize(
    "change",
    [
        {"type": "shout"},  # unknown variant
        {"time": "yesterday"},  # not RFC 3339
        {"content": 7},  # not a string
        {"extra": 1},  # unknown field
    ],
)
def test_a_bad_log_line_is_refused(change):
    with pytest.raises(ValidationError):
        parse_record(json.dumps(GOOD_USER | change))


def test_a_record_missing_a_field_is_refused():
    with pytest.raises(ValidationError, match="content"):
        parse_record(json.dumps({"type": "user", "time": "2026-09-18T07:45:12Z"}))


@pytest.mark.parametrize("field,value", [("call", -1), ("call", "3"), ("call", True), ("tool", "")])
def test_a_tool_request_is_strict(field, value):
    good = {"session": "s1", "call": 0, "tool": "echo", "arguments": "{}"}
    ToolRequest.model_validate(good)
    with pytest.raises(ValidationError):
        ToolRequest.model_validate(good | {field: value})
