"""The whole path for real: a DM in the fake Mattermost -> gatewayd -> the real ``loopd serve``
-> a real inferproxy -> the real llama-server (the tiny Qwen with its bare-JSON tool template),
and back as an edit of the placeholder. A thread reply continues the session and hits the prompt
cache; a DM sent while loopd is down is answered once it is back; an approval round trip runs in
the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from bxcore.config import load_config
from bxcore.records import Assistant
from gatewayd.render import NO_ANSWER
from loopd.inference.api import ChatRequest
from loopd.inference.request import request_body
from loopd.replay import messages
from loopd.store import SessionStore
from support.fake_tools import loop_section

from .harness import run, running, until
from .scripted import ask_approval
from .test_approvals import bot_says, request_for

pytestmark = pytest.mark.real_server

LOOPD = Path(sys.executable).with_name("loopd")
TURN_WAIT = 300.0  # two cores, a 0.5B model: a generous bound on one answer


class Loopd:
    """``loopd serve`` as a process of its own, stopped with SIGTERM like systemd would."""

    def __init__(self, directory: Path, infer_socket: Path):
        self.directory = directory
        self.config = directory / "loopd.toml"
        self.config.write_text(
            f'[paths]\nhome = "{directory}/home"\nrun = "{directory}/run"\n'
            f'[inferproxy]\nsocket = "{infer_socket}"\n'
            f'[inference]\nmodel = "qwen-tools"\nmax_tokens = 64\n'
            f'liveness_timeout = 600.0\n[inference.sampling]\ntemperature = 0.0\n'
            + loop_section(directory)  # no brokerd: tool_choice none, no call reaches it
        )
        self.socket = directory / "run" / "loop.sock"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.directory / "loopd.log").open("ab")
        self.process = subprocess.Popen(
            [str(LOOPD), "serve", "--config", str(self.config)], stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, env={k: v for k, v in os.environ.items()
                                           if k != "NOTIFY_SOCKET"},
        )

    async def ready(self) -> None:
        """Wait for loop.sock; a loopd that exits instead (a failed self-test) fails the test."""

        def bound() -> bool:
            assert self.process is not None
            return self.process.poll() is not None or self.socket.is_socket()

        await until(bound, timeout=TURN_WAIT)
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"loopd exited: {self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def log(self) -> str:
        return (self.directory / "loopd.log").read_text(errors="replace")[-3000:]

    def records(self, session: str) -> list[dict]:
        path = self.directory / "home" / "sessions" / session / "0.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def bodies(self, session: str, tool_choice: str) -> list[dict]:
        """The body of each chat request of the session, rebuilt from its log by loopd's own
        request builder, as JSON: request k carries the log up to the k-th assistant record."""
        config = load_config(self.config)
        opened = SessionStore(self.directory / "home").open(session)
        records = opened.records
        return [
            json.loads(json.dumps(request_body(ChatRequest(
                messages=tuple(messages(opened.baseline, records[:i])),
                tools=tuple(opened.baseline.tools), slot=opened.slot, session=session,
                tool_choice=tool_choice), config.inference)))
            for i, record in enumerate(records) if isinstance(record, Assistant)
        ]


@pytest.fixture(scope="module")
def inference(llama_router_proxy: Path) -> Path:
    """inferproxy before the session's router, whose qwen-tools is the tiny Qwen with the
    bare-JSON tool template."""
    return llama_router_proxy


@contextlib.contextmanager
def loopd_process(infer_socket: Path) -> Iterator[Loopd]:
    directory = Path(tempfile.mkdtemp(prefix="gwl", dir="/tmp"))
    loopd = Loopd(directory, infer_socket)
    try:
        yield loopd
    finally:
        loopd.stop()
        shutil.rmtree(directory, ignore_errors=True)


def answered(h, loopd: Loopd, root: str, turns: int) -> bool:
    """The thread's ``turns``-th placeholder holds the ``turns``-th answer in loopd's log, and
    the log has that completion's usage too: the placeholder's streamed edits can show the whole
    answer before loopd has appended the usage record that follows the assistant record."""
    records = loopd.records(f"mm-{root}")
    answers = [r["content"] or NO_ANSWER for r in records if r["type"] == "assistant"]
    usages = [r for r in records if r["type"] == "usage"]
    placeholders = [p["message"] for p in h.thread(root) if p["user_id"] == h.bot]
    return (len(answers) >= turns and len(usages) >= turns
            and placeholders[turns - 1:turns] == [answers[turns - 1]])


def test_dms_through_the_real_loopd_and_llama_server(fake, inference):
    with loopd_process(inference) as loopd:

        async def scenario():
            loopd.start()
            await loopd.ready()
            # The tiny model does not answer reliably with tools offered: keep it to plain
            # text, as a small-model deployment would ([gateway] tool_choice).
            async with running(fake, loop_up=False, loop_socket=loopd.socket,
                               tool_choice=("none",)) as h:
                # A DM starts a session; its answer is edited into the placeholder.
                root = fake.user_posts(h.owner, h.dm, "Say hello in three words.")
                await until(lambda: answered(h, loopd, root, 1), timeout=TURN_WAIT)
                placeholder = next(p for p in h.thread(root) if p["user_id"] == h.bot)
                assert placeholder["edit_at"] > 0

                # A reply in the thread continues the session, and the server's cache is hit.
                fake.user_posts(h.owner, h.dm, "Now say goodbye.", root_id=root)
                await until(lambda: answered(h, loopd, root, 2), timeout=TURN_WAIT)
                records = loopd.records(f"mm-{root}")
                assert [r["content"] for r in records if r["type"] == "user"] == [
                    "Say hello in three words.", "Now say goodbye."]
                # What Boxmaker controls first: the second request strictly extends the first,
                # on the same slot; then the server's cache hit, and loopd's faithful record of it.
                first, second = loopd.bodies(f"mm-{root}", "none")
                assert {k: v for k, v in second.items() if k != "messages"} == {
                    k: v for k, v in first.items() if k != "messages"}
                assert second["id_slot"] == 0
                assert second["messages"][:len(first["messages"])] == first["messages"]
                assert len(second["messages"]) == len(first["messages"]) + 2
                before, after = [r for r in records if r["type"] == "usage"]
                expected = before["cache_n"] + before["prompt_n"] + before["predicted_n"]
                ratio = load_config(loopd.config).inference.cache_loss_ratio
                losses = [(r["expected"], r["got"]) for r in records if r["type"] == "cache_loss"]
                low = after["cache_n"] < ratio * expected
                assert losses == ([(expected, after["cache_n"])] if low else []), records
                assert after["cache_n"] > 0, records

                # An approval round trip in that thread, brokerd scripted on gateway.sock.
                request = request_for(f"mm-{root}")
                asked = asyncio.create_task(
                    ask_approval(h.gateway.settings.gateway_socket, request))
                await until(lambda: any("Approval needed" in m for m in bot_says(h, root)))
                fake.user_posts(h.owner, h.dm, f"!approve {request.id}", root_id=root)
                assert (await asyncio.wait_for(asked, 30)).body["verdict"] == "approve"

                # loopd goes down; a DM waits in the queue and is answered when it is back.
                loopd.stop()
                later = fake.user_posts(h.owner, h.dm, "Are you back?")
                await until(lambda: any("not running" in m for m in bot_says(h, later)))
                loopd.start()
                await loopd.ready()
                await until(lambda: answered(h, loopd, later, 1), timeout=TURN_WAIT)
                assert [r["content"] for r in loopd.records(f"mm-{later}")
                        if r["type"] == "user"] == ["Are you back?"]

        run(scenario())
