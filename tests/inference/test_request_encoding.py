"""A session's messages are encoded once, not once per request, and the body stays exact."""

from __future__ import annotations

from collections import Counter

import pytest
from bxcore.chat import AssistantMessage, SystemMessage, UserMessage, message_json
from bxcore.config import InferenceSection
from loopd.inference import request as request_module
from loopd.inference.api import ChatRequest
from loopd.inference.request import _EncodedMessages, marked, request_body


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times each message object (by id) went through ``message_json``."""
    counts: Counter[int] = Counter()

    def counting(message):
        counts[id(message)] += 1
        return message_json(message)

    monkeypatch.setattr(request_module, "message_json", counting)
    return counts


def _request(messages, session="s1"):
    return ChatRequest(messages=tuple(messages), tools=(), slot=0, session=session)


def _turn(messages, n):
    messages += [
        UserMessage(content=f"user {n}"),
        AssistantMessage(content=f"answer {n}", reasoning_content=None, tool_calls=None),
    ]


def test_a_growing_session_encodes_each_message_once(encoded):
    section = InferenceSection()
    messages = [SystemMessage(content="sys")]
    for n in range(5):
        _turn(messages, n)
        body = request_body(_request(messages), section)
        assert body["messages"] == marked(None, "s1", [message_json(m) for m in messages])
    assert set(encoded) == {id(m) for m in messages}
    assert set(encoded.values()) == {1}


def test_interleaved_sessions_each_encode_their_messages_once(encoded):
    cache = _EncodedMessages()
    one, two = [SystemMessage(content="one")], [SystemMessage(content="two")]
    for n in range(3):
        _turn(one, n)
        _turn(two, n)
        assert cache.encode("one", one) == [message_json(m) for m in one]
        assert cache.encode("two", two) == [message_json(m) for m in two]
    assert set(encoded.values()) == {1}
    assert len(encoded) == len(one) + len(two)


def test_a_request_that_does_not_extend_the_last_is_encoded_whole(encoded):
    cache = _EncodedMessages()
    first = [SystemMessage(content="epoch 0"), UserMessage(content="a")]
    cache.encode("s1", first)
    second = [SystemMessage(content="epoch 1"), UserMessage(content="a")]  # a new epoch
    assert cache.encode("s1", second) == [message_json(m) for m in second]
    shorter = first[:1]
    assert cache.encode("s1", shorter) == [message_json(shorter[0])]
    assert encoded[id(second[1])] == 1


def test_an_equal_message_object_encodes_the_same():
    cache = _EncodedMessages()
    cache.encode("s1", [UserMessage(content="a")])
    again = [UserMessage(content="a"), UserMessage(content="b")]
    assert cache.encode("s1", again) == [message_json(m) for m in again]
    other = [UserMessage(content="c"), UserMessage(content="b")]
    assert cache.encode("s1", other) == [message_json(m) for m in other]


def test_the_least_recently_used_session_goes_past_the_limit(encoded):
    cache = _EncodedMessages(sessions=2)
    kept = {name: [UserMessage(content=name)] for name in ("a", "b", "c")}
    for name in ("a", "b", "a", "c"):  # c pushes out b, the least recently used
        cache.encode(name, kept[name])
    cache.encode("a", kept["a"])
    cache.encode("b", kept["b"])
    assert encoded[id(kept["a"][0])] == 1
    assert encoded[id(kept["b"][0])] == 2


def test_the_returned_list_is_the_callers_own():
    cache = _EncodedMessages()
    messages = [UserMessage(content="a")]
    mine = cache.encode("s1", messages)
    mine.append({"role": "user", "content": "injected"})
    assert cache.encode("s1", messages) == [message_json(messages[0])]
