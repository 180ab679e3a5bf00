"""The sans-I/O frame decoder: 4-byte big-endian length, then one canonical-JSON object
{kind, final, body}. Every input is fed whole, one byte at a time, and with trailing bytes."""

from __future__ import annotations

import struct

import pytest
from bxcore.errors import FrameError, FrameTooLarge, IncompleteFrame, LocalProtocolError
from bxcore.frames import END, MAX_FRAME, NEED_DATA, Frame, FrameDecoder, encode_frame
from bxcore.protocol import loop

TURN = Frame(kind="turn", final=False, body={"session": "s1", "content": "hi", "resume": False})
DONE = Frame(kind="turn_done", final=True, body={"content": "Grüße ☃", "usage": {}})


def raw(payload: bytes, length: int | None = None) -> bytes:
    """A frame from a hand-written payload; ``length`` overrides the prefix."""
    return struct.pack(">I", len(payload) if length is None else length) + payload


def feed_bytewise(decoder: FrameDecoder, data: bytes) -> list[Frame]:
    """Feed one byte at a time, collecting frames as they complete."""
    frames = []
    for i in range(len(data)):
        decoder.feed(data[i : i + 1])
        frames += drain(decoder)
    return frames


def drain(decoder: FrameDecoder) -> list[Frame]:
    frames = []
    while isinstance(event := decoder.next_event(), Frame):
        frames.append(event)
    assert event in (NEED_DATA, END)
    return frames


# --- round trips -------------------------------------------------------------------------------


def test_a_frame_round_trips_whole():
    decoder = FrameDecoder()
    decoder.feed(encode_frame(TURN) + encode_frame(DONE))
    decoder.feed(b"")
    assert drain(decoder) == [TURN, DONE]
    assert decoder.next_event() is END


def test_a_frame_round_trips_one_byte_at_a_time():
    decoder = FrameDecoder()
    frames = feed_bytewise(decoder, encode_frame(TURN) + encode_frame(DONE))
    assert frames == [TURN, DONE]
    assert decoder.next_event() is NEED_DATA


def test_trailing_bytes_of_the_next_frame_wait_for_more_data():
    second = encode_frame(DONE)
    decoder = FrameDecoder()
    decoder.feed(encode_frame(TURN) + second[:7])
    assert decoder.next_event() == TURN
    assert decoder.next_event() is NEED_DATA
    decoder.feed(second[7:])
    assert decoder.next_event() == DONE


def test_the_encoding_is_the_documented_format():
    wire = encode_frame(Frame(kind="turn", final=True, body={"b": 1, "a": "é"}))
    payload = '{"body":{"a":"é","b":1},"final":true,"kind":"turn"}'.encode()
    assert wire == len(payload).to_bytes(4, "big") + payload


def test_an_empty_stream_ends_cleanly():
    decoder = FrameDecoder()
    assert decoder.next_event() is NEED_DATA
    decoder.feed(b"")
    assert decoder.next_event() is END
    decoder.feed(b"")  # a second end of stream is harmless
    assert decoder.next_event() is END


def test_data_after_the_end_is_refused():
    decoder = FrameDecoder()
    decoder.feed(b"")
    with pytest.raises(FrameError, match="after the end"):
        decoder.feed(b"x")


def test_models_are_encoded_by_alias():
    event = loop.TurnEvent(event=loop.Reasoning(text="hmm"))
    frame = Frame.of(loop.TURN_EVENT, event, final=False)
    assert frame.body == {"event": {"type": "reasoning", "text": "hmm"}}
    assert frame.parse(loop.TurnEvent) == event


def test_a_body_that_does_not_fit_its_model_names_the_kind_and_the_field():
    frame = Frame(kind="turn", final=False, body={"session": "../x", "content": 1, "resume": False})
    with pytest.raises(FrameError, match=r"frame 'turn': .*session.*; content"):
        frame.parse(loop.Turn)


def test_a_frame_over_the_limit_is_not_encoded_and_that_is_our_fault():
    with pytest.raises(LocalProtocolError, match="108 bytes, over the limit of 64"):
        encode_frame(Frame(kind="turn", final=True, body={"x": "y" * 64}), max_size=64)


# --- every FrameError case ---------------------------------------------------------------------

VALID_BODY = b'"body":{},"final":true'

BAD_FRAMES = {
    "bad UTF-8": (raw(b'{"kind":"\xff\xfe","final":true,"body":{}}'), "not UTF-8"),
    "not JSON": (raw(b'{"kind":'), "not JSON"),
    "NaN": (raw(b'{"kind":"turn","final":true,"body":{"x":NaN}}'), "NaN is not JSON"),
    "not an object": (raw(b"[1,2]"), "JSON list, not an object"),
    "a string": (raw(b'"turn"'), "JSON str, not an object"),
    "unknown kind": (raw(b'{"kind":"shutdown",' + VALID_BODY + b"}"), "unknown frame kind"),
    "empty kind": (raw(b'{"kind":"",' + VALID_BODY + b"}"), "non-empty string"),
    "kind not a string": (raw(b'{"kind":7,' + VALID_BODY + b"}"), "non-empty string"),
    "missing kind": (raw(b"{" + VALID_BODY + b"}"), "missing 'kind'"),
    "missing body": (raw(b'{"kind":"turn","final":true}'), "missing 'body'"),
    "missing final and body": (raw(b'{"kind":"turn"}'), "missing 'final', 'body'"),
    "unknown field": (raw(b'{"kind":"turn",' + VALID_BODY + b',"x":1}'), "unknown field.*'x'"),
    "non-bool final": (raw(b'{"kind":"turn","final":1,"body":{}}'), "'final' must be true"),
    "string final": (raw(b'{"kind":"turn","final":"true","body":{}}'), "'final' must be true"),
    "non-object body": (raw(b'{"kind":"turn","final":true,"body":[]}'), "'body' must be an obj"),
    "null body": (raw(b'{"kind":"turn","final":true,"body":null}'), "'body' must be an object"),
    "repeated key": (raw(b'{"kind":"turn","kind":"x",' + VALID_BODY + b"}"), "repeated"),
    "lone surrogate": (
        raw(b'{"kind":"turn","final":true,"body":{"t":"\\ud800"}}'), "lone surrogate"
    ),
    "deep nesting": (raw(b'{"kind":"turn","final":true,"body":' + b"[" * 5000 + b"}"), "JSON"),
}


@pytest.mark.parametrize("how", ["whole", "bytewise", "with trailing bytes"])
@pytest.mark.parametrize("case", BAD_FRAMES, ids=BAD_FRAMES.keys())
def test_a_malformed_frame_raises_a_frame_error_that_says_what_is_wrong(case, how):
    data, message = BAD_FRAMES[case]
    decoder = FrameDecoder(kinds={"turn"})
    with pytest.raises(FrameError, match=message):
        if how == "bytewise":
            feed_bytewise(decoder, data)
        else:
            decoder.feed(data + (encode_frame(TURN) if how == "with trailing bytes" else b""))
            drain(decoder)


def test_a_length_over_the_limit_fails_as_soon_as_the_prefix_arrives():
    decoder = FrameDecoder(max_size=1024)
    decoder.feed(struct.pack(">I", 1025))  # no payload at all: must not wait for it
    with pytest.raises(FrameTooLarge, match="1025 is over the limit of 1024"):
        decoder.next_event()


def test_the_default_limit_is_16_mib():
    assert MAX_FRAME == 16 * 1024 * 1024
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">I", MAX_FRAME + 1))
    with pytest.raises(FrameTooLarge):
        decoder.next_event()


def test_a_frame_of_exactly_the_limit_is_accepted():
    frame = Frame(kind="k", final=True, body={"x": ""})
    size = len(encode_frame(frame)) - 4
    padded = Frame(kind="k", final=True, body={"x": "y" * (100 - size)})
    assert len(encode_frame(padded, max_size=100)) == 104
    decoder = FrameDecoder(max_size=100)
    decoder.feed(encode_frame(padded, max_size=100))
    assert decoder.next_event() == padded


# --- truncation and the ERROR state ------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 20])
def test_a_stream_ending_inside_a_frame_is_an_incomplete_frame(cut):
    decoder = FrameDecoder()
    decoder.feed(encode_frame(TURN)[:cut])
    assert decoder.next_event() is NEED_DATA
    decoder.feed(b"")
    with pytest.raises(IncompleteFrame, match=f"{cut} bytes of it arrived"):
        decoder.next_event()


def test_the_error_state_sticks():
    decoder = FrameDecoder(kinds={"turn"})
    decoder.feed(raw(b"[]") + encode_frame(TURN))
    with pytest.raises(FrameError) as first:
        decoder.next_event()
    # The valid frame behind the bad one is never delivered, and feeding does not revive it.
    with pytest.raises(FrameError) as again:
        decoder.next_event()
    assert again.value is first.value
    with pytest.raises(FrameError):
        decoder.feed(encode_frame(TURN))
    assert "ERROR" in repr(decoder)


def test_an_incomplete_frame_also_sticks():
    decoder = FrameDecoder()
    decoder.feed(b"\x00\x00")
    decoder.feed(b"")
    with pytest.raises(IncompleteFrame):
        decoder.next_event()
    with pytest.raises(IncompleteFrame):
        decoder.next_event()


def test_repr_shows_the_state():
    decoder = FrameDecoder()
    decoder.feed(b"\x00")
    assert repr(decoder) == "<FrameDecoder OPEN buffered=1>"
    decoder.feed(b"")
    assert "ENDED" in repr(decoder)


# --- Frame validates itself --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "", "final": True, "body": {}},
        {"kind": 3, "final": True, "body": {}},
        {"kind": "k", "final": 1, "body": {}},
        {"kind": "k", "final": True, "body": []},
    ],
)
def test_a_bad_frame_cannot_be_built_and_building_one_is_our_fault(kwargs):
    with pytest.raises(LocalProtocolError):
        Frame(**kwargs)


def test_kinds_none_accepts_any_kind():
    decoder = FrameDecoder(kinds=None)
    decoder.feed(encode_frame(Frame(kind="anything", final=True, body={})))
    assert decoder.next_event().kind == "anything"
