"""The fake's WebSocket checked by the official client: npm @mattermost/client (installed under
a cache directory, never the repo) connects, resumes and resyncs against it as against a server.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from support.requires import require

from .harness import run, until
from .mmfake import serve
from .official_client import client_dir

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def node_modules():
    require("node", "npm")
    return client_dir() / "node_modules"


def test_the_official_client_connects_resumes_and_resyncs_against_the_fake(fake, node_modules):
    _, token = fake.add_user("oracle")
    owner, _ = fake.add_user("owner")
    lines: list[dict] = []

    async def scenario():
        async with serve(fake) as url:
            node = await asyncio.create_subprocess_exec(
                "node", str(HERE / "oracle.js"), url.replace("http", "ws") + "/api/v4/websocket",
                token, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                env={**os.environ, "NODE_PATH": str(node_modules)},
            )

            async def read() -> None:
                assert node.stdout is not None
                async for raw in node.stdout:
                    if raw.startswith(b"{"):  # the client also logs plain text to stdout
                        lines.append(json.loads(raw))

            reader = asyncio.create_task(read())
            events = lambda: [x for x in lines if x["type"] == "event"]  # noqa: E731
            try:
                user = next(iter(fake.data.tokens.values()))
                dm = fake.data.direct(user, owner)["id"]
                await until(lambda: len(events()) == 1)
                fake.user_posts(owner, dm, "m0")
                fake.user_posts(owner, dm, "m1")
                await until(lambda: len(events()) == 3)
                fake.hub.drop()
                fake.user_posts(owner, dm, "m2")  # while it is away: replayed on resume
                await until(lambda: len(events()) == 4)
                fake.hub.forget()  # a server restart: a new hello, and "missed messages"
                await until(lambda: any(x["type"] == "missed" for x in lines))
                fake.hub.knobs.gap_next = 2  # a seq gap: the client closes with 4001
                fake.user_posts(owner, dm, "m3")
                await until(lambda: any(q.get("disconnect_err_code") == "4001"
                                        for q in fake.connects))
            finally:
                assert node.stdin is not None
                node.stdin.close()
                await node.wait()
                reader.cancel()

    run(scenario())
    seen = [(x["event"], x["seq"], x.get("message")) for x in lines if x["type"] == "event"]
    assert seen[:4] == [("hello", 0, None), ("posted", 1, "m0"), ("posted", 2, "m1"),
                        ("posted", 3, "m2")]
    first_connection = next(x["connection_id"] for x in lines if x.get("event") == "hello")
    resume = fake.connects[1]
    assert resume["connection_id"] == first_connection and resume["sequence_number"] == "3"
    assert resume["disconnect_err_code"] == "1001"
    assert [x["type"] for x in lines].count("missed") >= 1
    assert any(frame.get("action") == "ping" for frame in fake.client_frames)
