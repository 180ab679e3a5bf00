"""The threaded fake Mattermost (mmthread): a post made through its REST API reaches a WebSocket
client as a ``posted`` event, its state is read from the test's thread, and it shuts down whole."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from websockets.sync.client import connect

from .mmthread import running_fake


def test_a_post_through_rest_reaches_a_websocket_client_as_a_posted_event():
    with running_fake() as mm:
        bot, bot_token = mm.add_user("boxmaker", bot=True)
        owner, owner_token = mm.add_user("owner")
        dm = mm.direct(bot, owner)
        assert mm.direct(owner, bot) == dm
        ws_url = mm.url.replace("http://", "ws://") + "/api/v4/websocket"
        with connect(ws_url, additional_headers={"Authorization": f"Bearer {bot_token}"}) as ws:
            assert json.loads(ws.recv(timeout=30))["event"] == "hello"
            post = mm.post_as(owner_token, dm, "hi")
            event = json.loads(ws.recv(timeout=30))
        assert event["event"] == "posted"
        assert json.loads(event["data"]["post"])["id"] == post["id"]
        assert [p["id"] for p in mm.posts_by(owner)] == [post["id"]]
        reply = mm.post_as(bot_token, dm, "hello", root_id=post["id"])
        assert [p["id"] for p in mm.thread(post["id"])] == [post["id"], reply["id"]]
        assert mm.wait_for(lambda fake: len(fake.posts_by(bot)), 30) == 1


def test_it_stops_its_thread_and_port_on_exit():
    before = set(threading.enumerate())
    with running_fake() as mm:
        url = mm.url
        assert httpx.get(f"{url}/api/v4/users/me").status_code == 401
    assert set(threading.enumerate()) <= before
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/api/v4/users/me")


def test_a_spec_violation_fails_a_strict_block_and_wait_for_is_bounded():
    with pytest.raises(AssertionError, match="spec subset"), running_fake() as mm:
        mm.call(mm.fake.violations.append, "a broken reply")
    with running_fake() as mm, pytest.raises(AssertionError, match="never reached"):
        mm.wait_for(lambda fake: fake.posts_by("nobody"), timeout=0.2)
