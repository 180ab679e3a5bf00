"""The real ``gatewayd serve`` process between a scripted loopd and the fake Mattermost, read by
the owner's official client (npm ``@mattermost/client``, thread_reader.js) and rendered by
Mattermost's renderer: a tainted session's long hostile answer reaches the owner as posts with
no image, link or HTML, every part, and with ``remove_link_preview``; a clean session's answer
keeps its Markdown (the taint loopd sends is what decides).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from gatewayd.render import answer_posts
from support.requires import needs, require

from .hostile import FORMS
from .markdown_judge import MarkdownJudge
from .official_client import client_dir
from .test_gatewayd_process import WAIT, Stack, stack, wait_ready

__all__ = ["stack"]  # the fixture, used by name
HERE = Path(__file__).parent
pytestmark = needs("systemd-creds")


@pytest.fixture(scope="module")
def judge():
    require("node", "npm")
    running = MarkdownJudge()
    yield running
    running.close()


class OwnersClient:
    """thread_reader.js as the owner: the last message and props it saw for every post."""

    def __init__(self, stack: Stack):
        url = stack.mm.url.replace("http", "ws", 1) + "/api/v4/websocket"
        self._node = subprocess.Popen(
            ["node", str(HERE / "thread_reader.js"), url, stack.owner_token],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "NODE_PATH": str(client_dir() / "node_modules")},
        )
        self._lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.posts: dict[str, dict[str, Any]] = {}
        threading.Thread(target=self._read, daemon=True).start()
        assert self._next(time.monotonic() + WAIT)["type"] == "connected"

    def _read(self) -> None:
        assert self._node.stdout is not None
        for line in self._node.stdout:
            if line.startswith("{"):  # the client logs its own lines too
                self._lines.put(json.loads(line))

    def _next(self, deadline: float) -> dict[str, Any]:
        return self._lines.get(timeout=max(0.0, deadline - time.monotonic()))

    def wait_until_seen(self, messages: dict[str, str]) -> None:
        """Until the client has seen each post id's message as the server holds it."""
        deadline = time.monotonic() + WAIT
        while any(self.posts.get(i, {}).get("message") != m for i, m in messages.items()):
            line = self._next(deadline)
            self.posts[line["id"]] = line

    def close(self) -> None:
        assert self._node.stdin is not None
        self._node.stdin.close()
        self._node.wait(timeout=30)


def _answer_in_thread(stack: Stack, answer: str, taint: dict[str, Any] | None) -> dict[str, str]:
    """Post a DM whose scripted answer is ``answer`` with ``taint``; wait until gatewayd has
    posted it whole; the bot's posts in the thread, id -> message."""
    stack.loopd_thread.call(setattr, stack.loopd, "answer", lambda turn: answer)
    stack.loopd_thread.call(setattr, stack.loopd, "taint", taint)
    root = stack.mm.post_as(stack.owner_token, stack.dm, "tell me")["id"]
    expected = answer_posts(answer, inert=taint is None or taint["untrusted"])

    def posted(fake: Any) -> dict[str, str] | None:
        mine = sorted((p for p in fake.data.posts.values()
                       if p["root_id"] == root and p["user_id"] == stack.bot),
                      key=lambda p: p["create_at"])
        shown = [p["message"] for p in mine]
        return {p["id"]: p["message"] for p in mine} if shown == expected else None

    return stack.mm.wait_for(posted, WAIT)


def test_the_owners_client_gets_a_tainted_answer_inert_and_a_clean_one_as_written(stack, judge):
    wait_ready(stack)
    require("node", "npm")
    client = OwnersClient(stack)
    try:
        clean = _answer_in_thread(stack, "See [the docs](https://docs.example/x) **now**.",
                                  {"highest": "public", "untrusted": False})
        client.wait_until_seen(clean)
        assert [judge.render(m).active()[:1] for m in clean.values()] == [["link"]]

        hostile = "\n\n".join(form(f"https://attacker.example/p.png?d=w{n}", f"w{n}")
                              for n, form in enumerate(FORMS.values()))
        long = "\n\n".join([hostile] * (2 * 16383 // len(hostile) + 2))
        tainted = _answer_in_thread(stack, long, {"highest": "private", "untrusted": True})
        assert len(tainted) >= 3, "the answer was not long enough to be split"
        client.wait_until_seen(tainted)
        for post_id in tainted:
            seen = client.posts[post_id]
            assert seen["props"].get("remove_link_preview") == "true"
            assert judge.render(seen["message"]).active() == [], seen["message"]
        text = "".join(judge.render(client.posts[i]["message"]).text for i in tainted)
        assert all(f"w{n}" in text for n in range(len(FORMS)))
    finally:
        client.close()
