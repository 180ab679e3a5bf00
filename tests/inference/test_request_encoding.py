"""A session's messages are encoded once, not once per request, and the body stays exact."""

from __future__ import annotations

from bxcore.chat import SystemMessage, UserMessage, message_json
from bxcore.config import InferenceSection
from loopd.inference.api import ChatRequest
from loopd.inference.request import _EncodedMessages, request_body


def _request(messages):
    return ChatRequest(messages=tuple(messages), tools=(), slot=0, session="s1")


def test_the_same_message_object_is_encoded_once():
    cache = _EncodedMessages()
    message = UserMessage(content="hello")
    assert cache.encode(message) is cache.encode(message)
    assert cache.encode(message) == message_json(message)


def test_an_equal_but_different_message_is_not_taken_for_another():
    cache = _EncodedMessages()
    first, second = UserMessage(content="a"), UserMessage(content="b")
    assert cache.encode(first) == {"role": "user", "content": "a"}
    assert cache.encode(second) == {"role": "user", "content": "b"}


def test_the_oldest_entries_go_past_the_limit():
    cache = _EncodedMessages(limit=2)
    kept = [UserMessage(content=str(i)) for i in range(3)]
    encoded_first = cache.encode(kept[0])
    cache.encode(kept[1])
    cache.encode(kept[2])
    assert cache.encode(kept[0]) is not encoded_first  # evicted, encoded again
    assert cache.encode(kept[0]) == encoded_first


def test_the_body_of_a_growing_session_equals_a_fresh_encoding():
    section = InferenceSection()
    messages = [SystemMessage(content="sys"), UserMessage(content="one")]
    first = request_body(_request(messages), section)
    messages.append(UserMessage(content="two"))
    second = request_body(_request(messages), section)
    assert second["messages"] == [message_json(m) for m in messages]
    assert second["messages"][: len(first["messages"])] == first["messages"]
