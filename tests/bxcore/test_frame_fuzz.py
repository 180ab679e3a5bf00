"""Fuzzing the frame decoder: any bytes, split anywhere, give frames, NEED_DATA and END, or end in
a FrameError or IncompleteFrame. Never another exception, never a hang."""

from __future__ import annotations

import struct
from itertools import pairwise

from bxcore.errors import FrameError, IncompleteFrame
from bxcore.frames import END, NEED_DATA, Frame, FrameDecoder, encode_frame
from faults.profile import fuzz
from hypothesis import given
from hypothesis import strategies as st

KINDS = {"turn", "turn_event", "turn_done", "error"}

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
frames = st.builds(
    Frame,
    kind=st.sampled_from(sorted(KINDS)),
    final=st.booleans(),
    body=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)


@st.composite
def hostile_streams(draw) -> bytes:
    """Valid frames, frames with a damaged byte, wrong lengths and plain noise, concatenated."""
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        choice = draw(st.integers(0, 4))
        if choice == 0:
            parts.append(draw(st.binary(max_size=40)))
        elif choice == 1:
            parts.append(encode_frame(draw(frames)))
        elif choice == 2:
            wire = bytearray(encode_frame(draw(frames)))
            at = draw(st.integers(0, len(wire) - 1))
            wire[at] = draw(st.integers(0, 255))
            parts.append(bytes(wire))
        elif choice == 3:
            payload = draw(st.binary(max_size=30))
            parts.append(struct.pack(">I", draw(st.integers(0, 2**32 - 1))) + payload)
        else:
            payload = draw(st.text(max_size=30)).encode()
            parts.append(struct.pack(">I", len(payload)) + payload)
    return b"".join(parts)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in pairwise(points)]


def run(data: bytes, cuts: list[int], max_size: int) -> tuple[list[Frame], BaseException | None]:
    """Feed the chunks then the end; return the frames and the error that stopped it, if any.
    Each next_event either consumes a frame or asks for data, so the event loop is bounded."""
    decoder = FrameDecoder(kinds=KINDS, max_size=max_size)
    out: list[Frame] = []
    budget = len(data) // 4 + 2 * (len(cuts) + 3)
    try:
        for chunk in [*split(data, cuts), b""]:
            decoder.feed(chunk)
            while True:
                budget -= 1
                assert budget >= 0, "the decoder keeps producing events without input"
                event = decoder.next_event()
                if isinstance(event, Frame):
                    out.append(event)
                    continue
                assert event is NEED_DATA or (event is END and chunk == b"")
                break
    except (FrameError, IncompleteFrame) as exc:
        return out, exc
    return out, None


@fuzz
@given(st.binary(max_size=300), st.lists(st.integers(0, 400), max_size=8), st.integers(0, 200))
def test_arbitrary_bytes_at_arbitrary_splits_give_frames_or_a_frame_error(data, cuts, max_size):
    run(data, cuts, max_size)


@fuzz
@given(hostile_streams(), st.lists(st.integers(0, 10_000), max_size=10))
def test_hostile_streams_give_frames_or_a_frame_error(data, cuts):
    frames_seen, error = run(data, cuts, max_size=4096)
    # However it was split, the same stream gives the same result.
    whole_frames, whole_error = run(data, [], max_size=4096)
    assert frames_seen == whole_frames
    assert type(error) is type(whole_error)


@fuzz
@given(st.lists(frames, max_size=5), st.lists(st.integers(0, 10_000), max_size=10))
def test_valid_frames_split_anywhere_come_out_unchanged(sent, cuts):
    data = b"".join(encode_frame(f) for f in sent)
    received, error = run(data, cuts, max_size=1 << 20)
    assert error is None
    assert received == sent
