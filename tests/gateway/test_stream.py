"""The sequence rules (pure): hello, resume, gaps, duplicates, malformed events, backoff."""

from __future__ import annotations

import random

from gatewayd.events import Hello, Malformed, OtherEvent, Reply
from gatewayd.stream import (
    Answer,
    CatchUp,
    Deliver,
    Gap,
    SequenceTracker,
    Skip,
    backoff_delay,
)


def hello(connection_id: str) -> Hello:
    return Hello(seq=0, connection_id=connection_id, server_version="10.11.0")


def event(seq: int) -> OtherEvent:
    return OtherEvent(seq=seq, name="typing")


def test_the_first_hello_asks_for_a_catch_up_and_events_follow_in_order():
    tracker = SequenceTracker()
    assert tracker.receive(hello("c1")) == CatchUp()
    assert tracker.receive(event(1)) == Deliver(event=event(1))
    assert tracker.receive(event(2)) == Deliver(event=event(2))
    assert tracker.resume_query() == {"connection_id": "c1", "sequence_number": "3"}


def test_a_duplicate_is_skipped_and_a_gap_is_reported():
    tracker = SequenceTracker()
    tracker.receive(hello("c1"))
    tracker.receive(event(1))
    assert isinstance(tracker.receive(event(1)), Skip)
    assert tracker.receive(event(5)) == Gap(expected=2, got=5)
    assert tracker.next_seq == 2  # resume from the first one missed


def test_a_new_connection_id_means_events_were_lost():
    tracker = SequenceTracker()
    tracker.receive(hello("c1"))
    tracker.receive(event(1))
    assert tracker.receive(hello("c2")) == CatchUp()
    assert tracker.next_seq == 1
    assert isinstance(tracker.receive(hello("c2")), Skip)  # same connection: nothing lost


def test_a_malformed_event_uses_up_its_seq_so_a_replay_cannot_loop():
    tracker = SequenceTracker()
    tracker.receive(hello("c1"))
    skipped = tracker.receive(Malformed(seq=1, reason="data.post is not JSON"))
    assert isinstance(skipped, Skip) and skipped.malformed
    assert tracker.receive(event(2)) == Deliver(event=event(2))
    assert isinstance(tracker.receive(Malformed(seq=None, reason="not JSON")), Skip)


def test_replies_are_answers_and_do_not_use_a_seq():
    tracker = SequenceTracker()
    tracker.receive(hello("c1"))
    reply = Reply(seq_reply=1, ok=True, data={"text": "pong"}, error_id="")
    assert tracker.receive(reply) == Answer(reply=reply)
    assert tracker.next_seq == 1


def test_backoff_grows_is_capped_and_jittered():
    rng = random.Random(7)
    delays = [backoff_delay(n, minimum=3, maximum=300, rng=rng) for n in range(1, 12)]
    assert 3 <= delays[0] <= 4.5
    assert all(d <= 300 for d in delays) and delays[-1] >= 150
    assert backoff_delay(0, minimum=3, maximum=300) == 0
