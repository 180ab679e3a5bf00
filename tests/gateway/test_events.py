"""Turning a WebSocket message into a typed event (pure): the captured real events parse, and
anything else is a Malformed value, never an exception."""

from __future__ import annotations

import json

import pytest
from faults.profile import fuzz
from gatewayd.events import (
    Hello,
    Malformed,
    OtherEvent,
    PostDeleted,
    Posted,
    PostEdited,
    Reply,
    parse_message,
)
from hypothesis import given
from hypothesis import strategies as st

from .mmfake import REFERENCE


def sample(name: str) -> str:
    return (REFERENCE / name).read_text()


def test_the_captured_dm_parses_with_its_post_decoded():
    event = parse_message(sample("ws_posted_dm.json"))
    assert isinstance(event, Posted) and event.seq == 36 and event.channel_type == "D"
    assert event.post.id == "a4aurxyyc3yruntz4zfmdw75nr"
    assert event.post.user_id == "t1pn9rb63fnpjrqibgriijcx4r"
    assert event.post.message == "aweff" and event.post.root_id == ""


def test_the_captured_open_channel_post_parses():
    event = parse_message(sample("ws_posted_open_channel_2023.json"))
    assert isinstance(event, Posted) and event.channel_type == "O" and event.seq == 5


@pytest.mark.parametrize(("name", "kind", "seq"), [
    ("ws_post_edited.json", PostEdited, 37),
    ("ws_post_deleted.json", PostDeleted, 38),
])
def test_captured_edits_and_deletions_parse(name, kind, seq):
    event = parse_message(sample(name))
    assert isinstance(event, kind) and event.seq == seq


def test_hello_in_both_shapes():
    current = parse_message(sample("ws_hello_current_shape.json"))
    assert isinstance(current, Hello) and current.connection_id == "8xk3u1m9p7fqzq4w6y5rj1c9oa"
    old = parse_message(sample("ws_hello_docs.json"))
    assert isinstance(old, Hello) and old.connection_id == ""


def test_replies_parse():
    ok = parse_message(sample("ws_response_ok.json"))
    assert ok == Reply(seq_reply=1, ok=True, data={}, error_id="")
    fail = parse_message(sample("ws_response_fail.json"))
    assert isinstance(fail, Reply) and not fail.ok and fail.error_id == "some.error.id.here"


def test_an_unknown_event_still_has_its_seq():
    text = json.dumps({"event": "typing", "data": {}, "broadcast": {}, "seq": 9})
    assert parse_message(text) == OtherEvent(seq=9, name="typing")


def dm_with(post: str) -> str:
    frame = json.loads(sample("ws_posted_dm.json"))
    frame["data"]["post"] = post
    return json.dumps(frame)


@pytest.mark.parametrize(("text", "reason"), [
    ("not json at all", "not JSON"),
    ("[1, 2]", "not an object"),
    (json.dumps({"event": "posted", "data": {}}), "without a valid 'seq'"),
    (dm_with("{broken"), "data.post is not JSON"),
    (dm_with("[]"), "not a JSON object"),
    (dm_with(json.dumps({"message": "hi"})), "data.post: id"),
])
def test_malformed_messages_say_why_and_keep_the_seq_when_they_can(text, reason):
    event = parse_message(text)
    assert isinstance(event, Malformed) and reason in event.reason


def test_a_malformed_post_never_puts_its_text_in_the_reason():
    event = parse_message(dm_with(json.dumps({"message": "my bank pin is 1234", "id": 5})))
    assert isinstance(event, Malformed) and event.seq == 36
    assert "1234" not in event.reason


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=20,
)


@fuzz
@given(st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    st.fixed_dictionaries({"event": st.sampled_from(["hello", "posted", "post_edited", "x"]),
                           "data": json_values, "seq": json_values}).map(json.dumps),
))
def test_any_input_gives_a_value_and_never_an_exception(text):
    parse_message(text)
