"""``tool_waiting`` says why a call has not finished (``approval`` or ``running``) and for how
long; a body from before ``reason`` and ``elapsed`` existed still reads as an approval wait."""

from __future__ import annotations

import pytest
from bxcore.display import format_elapsed
from bxcore.frames import Frame, FrameDecoder, FrameError
from bxcore.protocol import broker
from bxcore.protocol.loop import ToolWaitingEvent, TurnEvent

# The approval frame's bytes as brokerd sent them before the running notice existed.
BEFORE = b'{"body":{"approval":"apr_7Qx2","expires":"2026-09-18T07:50:12Z"},"final":false,' \
         b'"kind":"tool_waiting"}'


def test_a_body_from_before_reads_as_an_approval_wait_at_zero_seconds():
    decoder = FrameDecoder(broker.FROM_BROKERD)
    decoder.feed(len(BEFORE).to_bytes(4, "big") + BEFORE)
    frame = decoder.next_event()
    assert isinstance(frame, Frame)
    waiting = frame.parse(broker.ToolWaiting)
    assert (waiting.reason, waiting.approval, waiting.elapsed) == ("approval", "apr_7Qx2", 0)


@pytest.mark.parametrize(
    ("body", "problem"),
    [({"reason": "approval"}, "names its approval and expires"),
     ({"reason": "approval", "approval": "a"}, "names its approval and expires"),
     ({"reason": "running", "approval": "a"}, "has no approval or expires"),
     ({"reason": "running", "expires": "2026-09-18T07:50:12Z"}, "has no approval or expires"),
     ({"reason": "queued"}, "reason"),
     ({"reason": "running", "elapsed": -1}, "elapsed"),
     ({"reason": "running", "elapsed": "3"}, "elapsed"),
     ({"reason": "running", "elapsed": 3.5}, "elapsed"),
     ({"reason": "running", "since": 3}, "since")],
)
def test_a_body_that_does_not_hold_together_is_refused(body, problem):
    with pytest.raises(FrameError, match=problem):
        Frame(kind=broker.TOOL_WAITING, final=False, body=body).parse(broker.ToolWaiting)


def test_the_loop_event_carries_the_same_fields_and_is_checked_the_same_way():
    running = broker.ToolWaiting(reason="running", elapsed=45)
    event = ToolWaitingEvent.model_validate(running.model_dump())
    assert TurnEvent.model_validate({"event": event.model_dump()}).event == event
    with pytest.raises(ValueError, match="has no approval"):
        ToolWaitingEvent(reason="running", approval="a")


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0 s"), (45, "45 s"), (60, "1 min 0 s"), (125, "2 min 5 s"), (3599, "59 min 59 s"),
    (3600, "1 h 0 min"), (3780, "1 h 3 min"),
])
def test_elapsed_time_is_shown_in_the_largest_units_that_fit(seconds, shown):
    assert format_elapsed(seconds) == shown
