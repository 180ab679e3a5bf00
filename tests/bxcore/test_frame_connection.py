"""The pure frame connection (bxcore.frameconn): the one read loop's logic, and the split between
our faults and the peer's.

A frame this side may not send is a LocalProtocolError (our bug), raised before any byte of it
exists: a kind this side does not send, a body that fails its kind's model, a body that is not
JSON or is over the limit, anything after our final frame. What the peer sends wrong is a
FrameError (a RemoteProtocolError). The read step is driven here with scripted chunks and a
scripted clock, as the shells drive it with a socket and time.monotonic().
"""

from __future__ import annotations

import pytest
from bxcore.errors import (
    BoxmakerError,
    FrameError,
    IncompleteFrame,
    LocalProtocolError,
    RemoteProtocolError,
    StreamClosed,
    StreamTimeout,
    WireError,
)
from bxcore.frameconn import CHUNK, Deadline, FrameConnection, Receive
from bxcore.frames import Frame, encode_frame
from bxcore.protocol import loop

TURN = Frame.of(loop.TURN, loop.Turn(session="s1", content="hi", resume=False), final=False)
USAGE = {"cache_n": 0, "prompt_n": 1, "predicted_n": 2, "reasoning_tokens": 0,
         "thinking_capped": False}
DONE = Frame(kind=loop.TURN_DONE, final=True, body={"content": "Grüße", "usage": USAGE})
EVENT = Frame.of(loop.TURN_EVENT, loop.TurnEvent(event=loop.Queued(ahead=0)), final=False)
NO_DEADLINE = Deadline.after(None, 0.0)


def loopd() -> FrameConnection:
    """loopd's side of loop.sock."""
    return FrameConnection(receives=loop.TO_LOOPD, sends=loop.FROM_LOOPD)


def channel() -> FrameConnection:
    """A channel's side of loop.sock."""
    return FrameConnection(receives=loop.FROM_LOOPD, sends=loop.TO_LOOPD)


def read_all(conn: FrameConnection, chunks: list[bytes]) -> list[Frame]:
    """Drive the read step as a shell does: each Receive takes the next scripted chunk."""
    frames: list[Frame] = []
    script = iter(chunks)
    while True:
        step = conn.next_frame(NO_DEADLINE, 0.0)
        if isinstance(step, Frame):
            frames.append(step)
            continue
        try:
            conn.receive_data(next(script))
        except StopIteration:
            return frames


# --- our faults: LocalProtocolError, before a byte exists ---------------------------------------


def test_our_protocol_errors_are_not_the_peers_and_not_an_expected_failure():
    assert not issubclass(LocalProtocolError, BoxmakerError)
    assert issubclass(FrameError, RemoteProtocolError)
    assert issubclass(RemoteProtocolError, BoxmakerError)


def test_sending_a_kind_this_side_does_not_send_is_our_fault():
    with pytest.raises(LocalProtocolError, match="frame 'turn' is not a kind this side sends"):
        loopd().send(TURN)


def test_sending_a_body_that_fails_its_model_names_the_kind_and_the_field():
    bad = Frame(kind=loop.TURN_DONE, final=True, body={"content": "x", "usage": {}})
    with pytest.raises(LocalProtocolError, match=r"frame 'turn_done' we were sending: "
                                                 r"usage\.cache_n: Field required"):
        loopd().send(bad)


def test_sending_a_model_built_without_validation_is_caught():
    unchecked = loop.Turn.model_construct(session="not a session id!", content="hi",
                                          resume=False)
    with pytest.raises(LocalProtocolError, match="frame 'turn' we were sending: session"):
        channel().send(Frame.of(loop.TURN, unchecked, final=False))


def test_sending_a_frame_over_the_limit_is_our_fault():
    conn = FrameConnection(receives=None, sends=loop.FROM_LOOPD, max_size=64)
    with pytest.raises(LocalProtocolError, match="over the limit of 64"):
        conn.send(Frame(kind=loop.TURN_DONE, final=True,
                        body={"content": "y" * 64, "usage": USAGE}))


@pytest.mark.parametrize("value", [float("nan"), "\ud800", object()],
                         ids=["NaN", "lone surrogate", "not a JSON value"])
def test_sending_a_body_that_is_not_json_is_our_fault(value):
    with pytest.raises(LocalProtocolError, match="frame 'x' is not JSON"):
        FrameConnection().send(Frame(kind="x", final=True, body={"v": value}))


def test_sending_after_our_final_frame_is_our_fault():
    conn = loopd()
    conn.send(DONE)
    assert not conn.may_send(loop.ERROR)
    assert "ours=final 'turn_done' sent" in repr(conn)
    with pytest.raises(LocalProtocolError, match="'error' sent after our final frame 'turn_done'"):
        conn.send(Frame.of(loop.ERROR, WireError(code="internal", message="late"), final=True))


def test_a_refused_frame_leaves_the_connection_able_to_answer():
    conn = loopd()
    with pytest.raises(LocalProtocolError):
        conn.send(Frame(kind=loop.TURN_DONE, final=True, body={}))
    assert conn.may_send(loop.ERROR)
    error = Frame.of(loop.ERROR, WireError(code="internal", message="our bug"), final=True)
    assert conn.send(error) == encode_frame(error)


def test_without_a_sends_table_any_kind_goes_out_checked_only_as_json():
    assert FrameConnection().send(Frame(kind="anything", final=False, body={})) == \
        encode_frame(Frame(kind="anything", final=False, body={}))


# --- the peer's faults: FrameError ---------------------------------------------------------------


def test_a_kind_the_peer_may_not_send_is_the_peers_fault():
    conn = channel()
    conn.receive_data(encode_frame(TURN))
    with pytest.raises(FrameError, match="unknown frame kind 'turn' on this socket"):
        conn.next_frame(NO_DEADLINE, 0.0)


def test_a_malformed_frame_from_the_peer_is_a_frame_error_not_our_local_error():
    payload = b'{"body":{},"final":true,"kind":""}'
    conn = FrameConnection()
    conn.receive_data(len(payload).to_bytes(4, "big") + payload)
    with pytest.raises(FrameError, match="'kind' must be a non-empty string"):
        conn.next_frame(NO_DEADLINE, 0.0)


def test_a_malformed_frame_from_the_peer_sticks():
    conn = channel()
    conn.receive_data(b"\x00\x00\x00\x02[]" + encode_frame(DONE))
    for _ in range(2):
        with pytest.raises(FrameError, match="frame is a JSON list"):
            conn.next_frame(NO_DEADLINE, 0.0)
    assert "ERROR" in repr(conn)


def test_a_connection_pair_round_trips_an_exchange():
    ours, theirs = channel(), loopd()
    theirs.receive_data(ours.send(TURN))
    assert theirs.next_frame(NO_DEADLINE, 0.0) == TURN
    ours.receive_data(theirs.send(EVENT) + theirs.send(DONE))
    assert read_all(ours, []) == [EVENT, DONE]


# --- the read step: chunks, the end of the stream, the deadline -------------------------------


def test_with_no_whole_frame_the_step_asks_for_a_bounded_receive():
    assert channel().next_frame(NO_DEADLINE, 0.0) == Receive(max_bytes=CHUNK, timeout=None)


@pytest.mark.parametrize("how", ["whole", "one byte at a time", "with trailing bytes"])
def test_chunks_become_frames_however_they_are_cut(how):
    data = encode_frame(EVENT) + encode_frame(DONE)
    chunks = {
        "whole": [data],
        "one byte at a time": [data[i:i + 1] for i in range(len(data))],
        "with trailing bytes": [data + encode_frame(EVENT)[:5]],
    }[how]
    assert read_all(channel(), chunks) == [EVENT, DONE]


def test_the_end_of_the_stream_between_frames_is_a_clean_close():
    conn = channel()
    conn.receive_data(encode_frame(EVENT))
    conn.receive_data(b"")
    assert conn.next_frame(NO_DEADLINE, 0.0) == EVENT
    with pytest.raises(StreamClosed):
        conn.next_frame(NO_DEADLINE, 0.0)


def test_the_end_of_the_stream_inside_a_frame_is_an_incomplete_frame():
    conn = channel()
    conn.receive_data(encode_frame(EVENT)[:-3])
    conn.receive_data(b"")
    with pytest.raises(IncompleteFrame, match="bytes of it arrived"):
        conn.next_frame(NO_DEADLINE, 0.0)


def test_each_receive_gets_what_is_left_of_the_frames_deadline():
    conn = channel()
    deadline = Deadline.after(5.0, now=100.0)
    assert conn.next_frame(deadline, 100.0) == Receive(max_bytes=CHUNK, timeout=5.0)
    conn.receive_data(encode_frame(DONE)[:3])  # a trickle does not extend the deadline
    assert conn.next_frame(deadline, 103.5) == Receive(max_bytes=CHUNK, timeout=1.5)


def test_a_frame_still_incomplete_at_its_deadline_is_a_stream_timeout():
    conn = channel()
    conn.receive_data(encode_frame(DONE)[:3])
    with pytest.raises(StreamTimeout, match="reading a frame: no whole frame within 5 s"):
        conn.next_frame(Deadline.after(5.0, now=100.0), 105.0)


def test_a_whole_frame_already_received_is_delivered_even_past_the_deadline():
    conn = channel()
    conn.receive_data(encode_frame(DONE))
    assert conn.next_frame(Deadline.after(5.0, now=100.0), 200.0) == DONE
