"""Where the session's marker goes, the markers loopd chooses, and the self-test's reading of the
router's command line (pure, a fake tokenizer; the real server's side is test_real_new_thread.py
and test_real_slot_switch.py)."""

from __future__ import annotations

import re

import anyio
from bxcore.chat import SystemMessage, UserMessage, message_json
from bxcore.config import InferenceSection
from hypothesis import example, given
from hypothesis import strategies as st
from loopd.inference.api import ChatRequest
from loopd.inference.markers import (
    MARKERS,
    SEPARATOR,
    MarkerBook,
    key_of,
    legacy_marker,
    message_start,
)
from loopd.inference.request import request_body
from loopd.inference.slot_switch import flags_turned_off

MODEL = "qwen-tools"
MARKER = MARKERS[0]


def body(session: str, *messages, marker: str | None = MARKER):
    request = ChatRequest(messages=messages, tools=(), slot=0, session=session, marker=marker)
    return request_body(request, InferenceSection())["messages"]


def test_the_first_user_message_starts_with_the_sessions_marker_and_nothing_else_changes():
    system, user = SystemMessage(content="You are terse."), UserMessage(content="Hi")
    later = UserMessage(content="Again")
    sent = body("thread-1", system, user, later)
    assert sent[0] == message_json(system)  # the baseline: the same in every session
    assert sent[1] == {"role": "user", "content": MARKER + "Hi"}
    assert sent[2] == message_json(later)
    assert message_json(user) == {"role": "user", "content": "Hi"}  # not changed


def test_without_a_first_user_message_the_marker_opens_the_system_message_or_is_one():
    system, user = SystemMessage(content="You are terse."), UserMessage(content="Hi")
    assert body("thread-3", user) == [{"role": "user", "content": MARKER + "Hi"}]
    assert body("thread-4", system) == [{"role": "system", "content": MARKER + "You are terse."}]
    assert body("thread-5") == [{"role": "system", "content": MARKER}]


def test_a_session_logged_without_a_marker_keeps_its_legacy_one_first():
    system, user = SystemMessage(content="You are terse."), UserMessage(content="Hi")
    sent = body("thread-6", system, user, marker=None)
    assert sent == [{"role": "system", "content": legacy_marker("thread-6") + "You are terse."},
                    message_json(user)]
    assert legacy_marker("thread-6") != legacy_marker("thread-7")


class RunTokens:
    """Whitespace split as Qwen's pre-tokenizer splits it, each piece one token: whitespace that
    ends in a newline is one, a run of spaces before a word is one of a space fewer (the last
    joins the word)."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(self, text: str) -> list[int]:
        self.asked += 1
        return [hash(piece) for piece in re.findall(r" ?\S+|\s*\n+|\s+(?!\S)|\s+", text)]


# First user messages: plain, starting with whitespace (which merges into the marker's run), empty
OPENINGS = ("Name a colour.", "  indented", "\nafter a blank line", "", "?", "Name a fruit.")


# mostly new sessions: more than there are keys, so that the last ones hold them all
@given(st.lists(st.tuples(st.sampled_from(("new", "new", "new", "use", "restart")),
                          st.sampled_from(OPENINGS)), min_size=30, max_size=100),
       st.integers(2, 60), st.integers(0, 6))
# one more new session than there are keys, then another: none, then the oldest holder's key
@example(moves=[("new", "Hi")] * (len(MARKERS) + 2), size=40, legacy=0)
def test_a_new_marker_has_a_key_none_of_the_last_sessions_holds_or_none(moves, size, legacy):
    """The book's property, across restarts: a new session's key (its first token after the
    baseline) is held by none of the sessions used last, as many as there are keys, and is the
    key held longest ago; when those sessions hold every key, the session gets none (the legacy
    marker). Sessions without a marker (logged before markers) take turns too."""
    async def run() -> None:
        tokens = RunTokens()
        markers: dict[str, tuple[str | None, str]] = {  # session: marker, opening
            f"old{n}": (None, "Hi") for n in range(legacy)}
        recent = list(markers)  # sessions, least recently used first
        book = MarkerBook(tokens, [(s, *markers[s]) for s in recent], size=size)
        for number, (move, opening) in enumerate(moves):
            if move == "restart":
                book = MarkerBook(tokens, [(s, *markers[s]) for s in recent], size=size)
            elif move == "use" and recent:
                session = recent[number % len(recent)]
                book.used(session, *markers[session])
                recent.remove(session)
                recent.append(session)
            else:
                session = f"s{number}"
                keys = {await key_for(tokens, m, opening) for m in MARKERS}
                known = [await held_key(tokens, *markers[s]) for s in recent[-size:]]
                window = set(known[-len(keys):])
                last_use = {key: place for place, key in enumerate(known)}
                marker = await book.new(session, opening)
                markers[session] = (marker, opening)
                if keys <= window:
                    assert marker is None
                else:
                    assert marker is not None
                    key = await key_for(tokens, marker, opening)
                    assert key not in window
                    assert last_use.get(key, -1) == min(last_use.get(k, -1)
                                                        for k in keys - window)
                recent.append(session)
    anyio.run(run)


async def held_key(tokens: RunTokens, marker: str | None, opening: str) -> int | None:
    return None if marker is None else await key_for(tokens, marker, opening)


async def key_for(tokens: RunTokens, marker: str, opening: str) -> int | None:
    return key_of(await tokens(SEPARATOR + marker + opening))


def test_every_marker_has_a_key_of_its_own_before_a_word():
    async def run() -> None:
        tokens = RunTokens()
        assert len({await key_for(tokens, m, "Hi") for m in MARKERS}) == len(MARKERS)
    anyio.run(run)


def test_a_message_start_is_its_leading_whitespace_and_one_more_character():
    assert message_start("Name a colour.") == "N"
    assert message_start(" \n  x y") == " \n  x"
    assert message_start("   ") == "   "
    assert message_start("") == ""


def test_flags_are_read_from_the_routers_command_line_for_the_model():
    models = {"data": [
        {"id": "other", "status": {"args": ["--cache-ram", "0"]}},
        {"id": MODEL, "status": {"value": "loaded", "args": [
            "--ctx-size", "8192", "-sps", "0.0", "--cache-ram", "4096"]}},
    ]}
    named = flags_turned_off(models, MODEL)
    assert len(named) == 1 and named[0].startswith(f"{MODEL} runs with -sps 0.0: slots are ")
    assert named[0].endswith("set --slot-prompt-similarity 1")
    assert flags_turned_off(models, "other")[0].startswith("other runs with --cache-ram 0")
    default = {"data": [{"id": MODEL, "status": {"args": ["--slot-prompt-similarity", "0.10"]}}]}
    assert flags_turned_off(default, MODEL)[0].startswith(f"{MODEL} runs with "
                                                          "--slot-prompt-similarity 0.10")
    ours = {"data": [{"id": MODEL, "status": {"args": ["-sps", "1.0", "--cache-ram", "8192"]}}]}
    assert flags_turned_off(ours, MODEL) == []
    assert flags_turned_off({"data": [{"id": MODEL, "status": {}}]}, MODEL) == []
    assert flags_turned_off({"object": "list"}, MODEL) == []
