"""Fuzzing Honcho's replies: whatever a Honcho server (or something pretending to be one) answers,
memoryd's client returns what the v3 spec promises or raises its own HonchoError; never another
exception, never a hang. Replies are random bytes, or JSON near the spec's shapes (pages of
messages, Message lists, chat streams) with wrong types mixed in; statuses from 100 to 599.
The example count follows BOXMAKER_PROFILE (100k each in the long profile).
"""

from __future__ import annotations

import asyncio
import json

import httpx
from hypothesis import given
from hypothesis import strategies as st
from memoryd.errors import HonchoBadResponse, HonchoError
from memoryd.honcho import ChatStreamDecoder
from memoryd.honcho.client import HonchoClient

from .profile import fuzz

PAGES_READ = 3  # the fake answers every page alike; a client reading on would only repeat it

keys = st.sampled_from(["id", "items", "pages", "page", "size", "total", "metadata", "bx_key",
                        "content", "peer_id", "detail", "delta", "done", "junk"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2**40) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=10,
)
messages = st.fixed_dictionaries(
    {"id": st.text(max_size=6) | json_values},
    optional={"metadata": st.fixed_dictionaries({}, optional={"bx_key": json_values}) | json_values,
              "content": json_values})
pages = st.fixed_dictionaries({"items": st.lists(messages | json_values, max_size=3)},
                              optional={"pages": json_values | st.integers(0, 5)})
bodies = st.one_of(
    st.binary(max_size=200),
    st.one_of(json_values, pages, st.lists(messages, max_size=3)).map(
        lambda v: json.dumps(v).encode()),
)
replies = st.tuples(st.integers(100, 599) | st.sampled_from([200, 201, 422, 500]), bodies)


class Answering:
    """One client for every example (building an httpx client costs more than a call): its
    transport answers whatever ``reply`` holds at the moment."""

    def __init__(self) -> None:
        self.reply: tuple[int, bytes] = (200, b"{}")
        self.loop = asyncio.new_event_loop()
        self.client = HonchoClient("http://honcho.test", chat_liveness=5,
                                   transport=httpx.MockTransport(self._answer))

    def _answer(self, request: httpx.Request) -> httpx.Response:
        status, body = self.reply
        return httpx.Response(status, content=body, headers={"content-type": "application/json"})


HONCHO = Answering()


async def every_call(client: HonchoClient) -> None:
    """Each call memoryd makes, each on its own: a result of the promised shape, or a
    HonchoError."""
    calls = [
        client.ensure_workspace("bx"),
        client.ensure_peer("bx", "owner"),
        client.ensure_session("bx", "s1", {"owner": {"observe_me": True}}),
        client.add_messages("bx", "s1", [{"peer_id": "owner", "content": "hi"}] * 2),
        read_pages(client),
        client.chat("bx", "agent", "who?"),
    ]
    try:
        for call in calls:
            try:
                result = await call
            except HonchoError:
                continue
            if isinstance(result, list):  # add_messages and the pages: Message objects
                assert all(isinstance(m, dict) and isinstance(m.get("id"), str)
                           and isinstance(m.get("metadata") or {}, dict) for m in result), result
    finally:
        for call in calls:
            call.close()  # the ones not reached after a failure


async def read_pages(client: HonchoClient) -> list[dict]:
    seen = []
    async for message in client.list_messages("bx", "s1"):
        seen.append(message)
        if len(seen) >= PAGES_READ * 3:
            break
    return seen


@fuzz
@given(replies)
def test_any_reply_gives_the_promised_shape_or_a_honcho_error(reply):
    HONCHO.reply = reply
    HONCHO.loop.run_until_complete(every_call(HONCHO.client))


@fuzz
@given(st.lists(st.binary(max_size=40) | st.sampled_from([
    b"data: ", b"\n\n", b'{"done": true}', b'{"delta": {"content": "x"}, "done": false}',
    b"\r\n", b"data: {", b": comment\n\n"]), max_size=10))
def test_any_chat_stream_gives_text_or_a_bad_response(chunks):
    decoder = ChatStreamDecoder()
    try:
        for chunk in [*chunks, b""]:
            decoder.feed(chunk)
            if decoder.done:
                break
    except HonchoBadResponse:
        return
    assert decoder.done and isinstance(decoder.text, str)
