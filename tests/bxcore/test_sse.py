"""The SSE parser (bxcore.sse): bytes in, events out, however the bytes are split; anything that
is not a text/event-stream is BadEventStream, and the parser stays broken after it. loopd reads
llama-server's completions with it, memoryd Honcho's dialectic chat."""

from __future__ import annotations

import pytest
from bxcore.errors import BadEventStream
from bxcore.sse import END, NEED_DATA, Comment, Message, SSEParser
from faults.profile import fuzz
from hypothesis import given
from hypothesis import strategies as st
from inference.replay import fixture_names, read_fixture

SAMPLE = (
    b'data: {"a":1}\n\n'
    b":\n\n"
    b"data: first\ndata: second\n\n"
    b"event: error\r\ndata: crlf\r\n\r\n"
    b"data:no-space\r\rid: 7\nretry: 10\nunknown: x\ndata: [DONE]\n\n"
)
EXPECTED = [
    Message(data='{"a":1}'),
    Comment(text=""),
    Message(data="first\nsecond"),
    Message(data="crlf", event="error"),
    Message(data="no-space"),
    Message(data="[DONE]"),
]


def drain(parser: SSEParser) -> list:
    events = []
    while (event := parser.next_event()) is not NEED_DATA and event is not END:
        events.append(event)
    return events


def parse_split(data: bytes, cuts: list[int]) -> list:
    parser = SSEParser()
    events = []
    previous = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        parser.feed(data[previous:cut]) if cut > previous else None
        events += drain(parser)
        previous = cut
    parser.feed(b"")
    events += drain(parser)
    assert parser.next_event() is END
    return events


def test_whole_input_gives_every_event_in_order():
    assert parse_split(SAMPLE, []) == EXPECTED


def test_byte_by_byte_gives_the_same_events():
    assert parse_split(SAMPLE, list(range(len(SAMPLE)))) == EXPECTED


@fuzz
@given(st.lists(st.integers(min_value=0, max_value=len(SAMPLE))))
def test_random_splits_give_the_same_events(cuts):
    assert parse_split(SAMPLE, cuts) == EXPECTED


@pytest.mark.parametrize("name", fixture_names())
def test_recorded_streams_parse_the_same_whole_and_byte_by_byte(name):
    raw = read_fixture(name)
    whole = parse_split(raw, [])
    assert whole, f"{name}: no events"
    assert parse_split(raw, list(range(0, len(raw), 7))) == whole
    assert parse_split(raw, list(range(len(raw)))) == whole


def test_a_crlf_split_between_two_feeds_is_one_line_end():
    parser = SSEParser()
    parser.feed(b"data: x\r")
    parser.feed(b"\n\r\n")
    assert drain(parser) == [Message(data="x")]


def test_the_stream_ending_inside_an_event_is_refused():
    parser = SSEParser()
    parser.feed(b'data: {"cut":')
    parser.feed(b"")
    with pytest.raises(BadEventStream, match="middle of an event"):
        parser.next_event()


def test_a_line_over_the_cap_is_refused_and_the_parser_stays_broken():
    parser = SSEParser(max_line=16)
    with pytest.raises(BadEventStream, match="longer than 16"):
        parser.feed(b"data: " + b"x" * 32)
    with pytest.raises(BadEventStream, match="broken"):
        parser.feed(b"\n\n")


def test_bytes_that_are_not_utf8_are_refused():
    parser = SSEParser()
    with pytest.raises(BadEventStream, match="not UTF-8"):
        parser.feed(b"data: \xff\xfe\n\n")


def test_feeding_after_the_end_is_refused():
    parser = SSEParser()
    parser.feed(b"")
    with pytest.raises(BadEventStream, match="after the end"):
        parser.feed(b"data: x\n\n")


@fuzz
@given(st.binary(max_size=300))
def test_any_bytes_give_events_or_bad_event_stream_and_nothing_else(data):
    parser = SSEParser(max_line=128)
    try:
        parser.feed(data)
        drain(parser)
        parser.feed(b"")
        drain(parser)
    except BadEventStream:
        pass
