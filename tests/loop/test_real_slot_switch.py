"""Two threads taking turns on the main slot of a real ``loopd serve`` (through inferproxy, on
the real llama-server), with a request another client sends on that slot and a loopd restart
between turns: the second thread's first completion finds the baseline the first left and reads
only its own message, and every completion of a thread after its first reads only what is new
to it. Read from the Usage
records loopd wrote, as an owner would check it (tests/inference/test_real_slot_switch.py shows
the server's mechanism and the other cases).
"""

from __future__ import annotations

import itertools

import httpx
import pytest
from bxcore.records import Usage
from loopd.inference.slot_switch import SLACK
from support.llama import nonce

from .real_stack import real_stack

pytestmark = pytest.mark.real_server

A, B = "thread-a", "thread-b"
# B's first request beyond the baseline: its marker, "Name a colour." and the template's lines
# around them, with room to spare (the baseline, system prompt and tools, is far longer).
OWN = 32
LONG = " ".join(f"Line {n}: the boiler was serviced in week {n} and works." for n in range(50))


def foreign_request(port: int) -> None:
    """Another client of the shared server, pinned to Boxmaker's main slot."""
    response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=600, json={
        "id_slot": 0, "max_tokens": 4, "cache_prompt": True,
        "messages": [{"role": "system", "content": f"{nonce()} You summarise news."},
                     {"role": "user", "content": "Summarise: rain is expected tomorrow. " * 20}],
    })
    assert response.status_code == 200, response.text


def rereads(usages: list[Usage]) -> list[int]:
    """Per completion after the first: what the one before left in the slot, not found cached."""
    return [max(0, before.cache_n + before.prompt_n + before.predicted_n - after.cache_n)
            for before, after in itertools.pairwise(usages)]


def test_threads_interleaved_with_a_foreign_request_and_a_restart_read_only_new_tokens():
    with real_stack() as stack:
        with stack.loopd():
            stack.say(A, f"Read this log and remember it. {LONG}", "none")
            stack.say(B, "Name a colour.", "none")
            stack.say(A, "Which week was line 7?", "none")
            foreign_request(stack.port)
            stack.say(B, "Name another.", "none")
        with stack.loopd():  # its self-test runs on slot 1
            stack.say(A, "And line 9?", "none")
            stack.say(B, "One more colour.", "none")
        usages = {s: [r for r in stack.records(s) if isinstance(r, Usage)] for s in (A, B)}
        types = {s: [r.type for r in stack.records(s)] for s in (A, B)}

    assert [len(usages[A]), len(usages[B])] == [3, 3], types
    assert "cache_loss" not in types[A] + types[B]
    assert usages[A][0].prompt_n > 600  # A is long: a re-read would be far above the slack
    assert usages[B][0].prompt_n <= OWN < usages[B][0].cache_n, usages[B][0]
    assert max(rereads(usages[A]) + rereads(usages[B])) <= SLACK, (
        rereads(usages[A]), rereads(usages[B]))
