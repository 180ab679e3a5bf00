"""The day through the peers (bench/day_peers.py): every harness gets the day's turns in the same
arrival order, and each harness's accounting from its recorded requests adds up: its processed
tokens split without remainder into first requests, returns and turns' later requests; what it
re-read is what its sessions' previous prompts lost from the cache; a rewrite at a return is
counted as one; the tool results it sent back are counted once however often it resent them; and
another harness's requests interleaved with it change none of its figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from cache_bench import write_notes
from day_bench import _read, day
from day_peers import RESTART, Sent, figures, plain_read
from request_diff import Request, session_rereads

INTROS = ("Look at this note for me.", "Job: check this note.")


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    return write_notes(tmp_path_factory.mktemp("day") / "notes")


@given(threads=st.integers(1, 8), turns=st.integers(1, 7), job_turns=st.integers(0, 4),
       seed=st.integers(0, 2**32))
def test_every_harness_gets_the_same_turns_in_the_same_order(notes, threads, turns, job_turns,
                                                               seed):
    box = day(threads, turns, job_turns, notes, seed)
    peer = day(threads, turns, job_turns, notes, seed, read=plain_read)
    assert [(s.session, s.kind, s.tool_choice) for s in box] == \
        [(s.session, s.kind, s.tool_choice) for s in peer]
    for b, p in zip(box, peer, strict=True):
        # a read names the same note, each in its harness's terms; every other text is the same
        reads = [(n, i) for n in notes for i in INTROS if b.text == _read(n, i)]
        assert bool(reads) == ("required" in b.tool_choice)
        assert p.text == (plain_read(*reads[0]) if reads else b.text)
    assert sum(1 for s in box if s.kind == "main") == threads * turns


def _conversation(draw, harness: str, sessions: int
                  ) -> list[tuple[Sent, bool, int, int, bool]]:
    """A harness's requests in arrival order, each with whether it is a rewritten return, the
    tokens it adds beyond what its session held, its tool results so far, and whether it is a
    return (a later turn of its session)."""
    held: dict[int, tuple[list[dict], int, int, int]] = {}  # messages, total, predicted, step
    out = []
    for number in range(draw(st.integers(1, 14))):
        session = draw(st.integers(0, sessions - 1))
        step = number if draw(st.booleans()) or session not in held else held[session][3]
        messages, total, predicted, _ = held.get(session, ([{"role": "system",
                                                              "content": "S"}], 0, 0, -1))
        back = session in held and step != held[session][3]  # a return to the thread
        rewrite = back and draw(st.booleans())
        if rewrite:
            messages = [{"role": "system", "content": f"S at {number}"}, *messages[1:]]
        tool = draw(st.booleans())
        added_message = (
            {"role": "tool", "content": f"{harness} {session} needs attention {number}"}
            if tool else {"role": "user", "content": f"turn {number}"})
        messages = [*messages, added_message]
        added = draw(st.integers(1, 400))
        new_total = (total + predicted + added) if session in held else added
        cache_n = draw(st.integers(0, total if session in held else 0))
        sent = Sent(harness, f"thread-{session}", step, {"messages": messages}, cache_n,
                    new_total - cache_n, draw(st.integers(1, 90)))
        held[session] = (messages, new_total, sent.predicted_n, step)
        tools = sum(1 for m in messages if m["role"] == "tool")
        out.append((sent, rewrite, added, tools, back))
    return out


@st.composite
def days(draw):
    harnesses = {h: _conversation(draw, h, draw(st.integers(1, 4))) for h in ("a", "b")}
    restarts = draw(st.lists(st.integers(1, 500), max_size=2))
    merged, queues = [], {h: list(v) for h, v in harnesses.items()}
    while any(queues.values()):
        h = draw(st.sampled_from(sorted(k for k, v in queues.items() if v)))
        merged.append(queues[h].pop(0)[0])
    for tokens in restarts:
        merged.insert(draw(st.integers(0, len(merged))),
                      Sent("a", RESTART, 0, {"messages": []}, 0, tokens, 1))
    return harnesses, restarts, merged


@given(days())
def test_each_harness_accounting_adds_up_from_its_recorded_requests(generated):
    harnesses, restarts, merged = generated
    by = figures(merged)
    for harness, conversation in harnesses.items():
        mine = [s for s, *_ in conversation]
        alone = figures(mine)[harness]
        f = by[harness]
        restart = sum(restarts) if harness == "a" else 0
        assert f.restart_processed == restart
        # interleaving another harness changes nothing of this one's figures
        assert (f.requests - len(restarts if harness == "a" else []), f.processed - restart) == \
            (alone.requests, alone.processed)
        assert f.new == alone.new and f.returns_reread == alone.returns_reread
        assert f.processed == f.first + f.returns_processed + f.within_processed + restart
        assert alone.threads + alone.returns + alone.within == len(mine)
        assert alone.returns == sum(1 for *_, back in conversation if back)
        assert alone.threads == len({s.session for s in mine}) == len(alone.first_each)
        assert alone.first == sum(alone.first_each)
        # new: a session's first request whole, then what each request added beyond the held
        assert alone.new == sum(added for _, _, added, *_ in conversation)
        rereads = session_rereads([Request(s.session, s.body, s.cache_n, s.prompt_n)
                                   for s in mine])
        assert alone.returns_reread + alone.within_reread == sum(rereads)
        assert alone.rewrites == sum(1 for _, rewrite, *_ in conversation if rewrite)
        last = {}
        for s, _, _, tools, _ in conversation:
            last[s.session] = tools
        assert alone.tool_results == alone.notes_read == sum(last.values())
