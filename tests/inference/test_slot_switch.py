"""Where the session's marker goes, the markers loopd chooses, and the self-test's reading of the
router's command line (pure, a fake tokenizer; the real server's side is test_real_new_thread.py
and test_real_slot_switch.py)."""

from __future__ import annotations

import anyio
from bxcore.chat import SystemMessage, UserMessage, message_json
from bxcore.config import InferenceSection
from hypothesis import given
from hypothesis import strategies as st
from loopd.inference.api import ChatRequest
from loopd.inference.markers import PREFIX, MarkerBook, key_of, legacy_marker, marker_text
from loopd.inference.request import request_body
from loopd.inference.slot_switch import flags_turned_off

MODEL = "qwen-tools"
MARKER = marker_text("Amber")


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
    assert body("thread-5") == [{"role": "system", "content": MARKER.rstrip()}]


def test_a_session_logged_without_a_marker_keeps_its_legacy_one_first():
    system, user = SystemMessage(content="You are terse."), UserMessage(content="Hi")
    sent = body("thread-6", system, user, marker=None)
    assert sent == [{"role": "system", "content": legacy_marker("thread-6") + "You are terse."},
                    message_json(user)]
    assert legacy_marker("thread-6") != legacy_marker("thread-7")


class WordTokens:
    """A tokenizer that splits at spaces and gives words whose first letters match one token:
    what makes two words share a key (Amber, Anchor), as BPE pieces do."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(self, text: str) -> list[int]:
        self.asked += 1
        return [hash(piece[:2]) if piece[:1].isupper() else hash(piece) for piece in
                text.replace("]", " ]").split(" ")]


@given(st.lists(st.sampled_from(("new", "use", "restart")), max_size=60),
       st.integers(2, 40))
def test_a_new_marker_differs_at_its_key_from_every_kept_sessions(moves, size):
    """The book's property: a new session's key is not the key of any session among the
    ``size`` most recently used (while the words have free keys), across restarts."""
    async def run() -> None:
        tokens = WordTokens()
        book = MarkerBook(tokens, size=size)
        markers: dict[str, str] = {}
        recent: list[str] = []  # sessions, least recently used first
        for number, move in enumerate(moves):
            if move == "restart":
                book = MarkerBook(tokens, [(s, markers[s]) for s in recent], size=size)
            elif move == "use" and recent:
                session = recent[number % len(recent)]
                book.used(session, markers[session])
                recent.remove(session)
                recent.append(session)
            else:
                session = f"s{number}"
                kept = recent[-size:]
                markers[session] = await book.new(session)
                key = await key_for(tokens, markers[session])
                assert key not in {await key_for(tokens, markers[s]) for s in kept}
                recent.append(session)
    anyio.run(run)


async def key_for(tokens: WordTokens, marker: str) -> int | None:
    return key_of(await tokens(PREFIX), await tokens(marker))


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
