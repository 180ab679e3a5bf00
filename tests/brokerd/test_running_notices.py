"""A decided call that is still running tells its caller so: a ``tool_waiting`` (reason
``running``, elapsed seconds) every ``[broker] waiting_interval``, none for a call that ends
within one interval and none after the answer. ``while_running`` alone, then a real ``brokerd
serve`` running ``sleep`` in a real bubblewrap sandbox through shell.run, its notices passed
on by loopd's BrokerPort and shown by bxctl chat's renderer."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from brokerd.calls import while_running
from brokerd_support import request, write
from bxcore.errors import StreamClosed
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import broker as broker_wire
from bxcore.protocol.loop import ToolCallStarted, ToolWaitingEvent, TurnEventBody
from bxcore.tools import ToolResponse
from bxctl.render import Renderer
from loopd.tools.broker import BrokerPort

# --- while_running, with the work and the notices in the test's hands ----------------------


def run_with_notices(work, interval: float, fail_notices: bool = False):
    """(work's result, what happened in order: each notice's elapsed, then "result")."""
    seen: list[object] = []

    async def notify(waiting: broker_wire.ToolWaiting) -> None:
        assert waiting.reason == "running" and waiting.approval is None
        seen.append(waiting.elapsed)
        if fail_notices:
            raise StreamClosed("loopd went away")

    async def main():
        result = await while_running(work(seen), interval, notify)
        seen.append("result")
        return result

    return asyncio.run(main()), seen


def test_work_done_within_the_interval_sends_no_notice():
    async def quick(_seen):
        await asyncio.sleep(0)
        return "done"

    assert run_with_notices(quick, interval=3600) == ("done", ["result"])


def test_work_still_running_is_told_about_every_interval_and_never_after_the_result():
    async def until_three_notices(seen):
        while len(seen) < 3:
            await asyncio.sleep(0.005)
        return "done"

    result, seen = run_with_notices(until_three_notices, interval=0.01)
    assert result == "done"
    assert len(seen) >= 4 and seen[-1] == "result"
    elapsed = seen[:-1]
    assert all(isinstance(e, int) for e in elapsed) and elapsed == sorted(elapsed)


def test_a_notice_the_caller_cannot_take_ends_the_notices_not_the_work():
    async def until_noticed(seen):
        while not seen:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # several intervals more: no further notice is tried
        return "finished anyway"

    result, seen = run_with_notices(until_noticed, interval=0.01, fail_notices=True)
    assert result == "finished anyway"
    assert len(seen) == 2 and seen[-1] == "result"


def test_cancelling_the_call_cancels_the_work():
    cancelled = asyncio.Event()

    async def forever():
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def quiet(_waiting):
        return None

    async def main():
        call = asyncio.create_task(while_running(forever(), 0.01, quiet))
        await asyncio.sleep(0.03)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return cancelled.is_set()

    assert asyncio.run(main()) is True


# --- a real brokerd and a real sandbox ---------------------------------------------------------


@contextmanager
def brokerd(tmp_path: Path, interval: float) -> Iterator[Path]:
    """``brokerd serve`` (bubblewrap) with a shell.run grant for ``tmp_path/work``; yields its
    broker.sock once it reports ready."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    write(tmp_path / "grants", "shell.toml", f"""
        tools = ["shell.run"]
        mode = "auto"
        classes = ["public"]
        result_class = "public"
        [sandbox]
        mounts = [{{ path = {json.dumps(str(work))} }}]
    """)
    config = write(tmp_path, "config.toml", f"""
        [paths]
        home = {json.dumps(str(tmp_path / "home"))}
        run = {json.dumps(str(tmp_path / "run"))}
        [broker]
        grants = {json.dumps(str(tmp_path / "grants"))}
        waiting_interval = {interval}
    """)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(60)
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify.sock")}
    daemon = subprocess.Popen([sys.executable, "-m", "brokerd.cli", "serve", "--config",
                               str(config)], env=env)
    try:
        assert "READY=1" in notify.recv(4096).decode()
        yield tmp_path / "run" / "broker.sock"
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        notify.close()


async def frames_of_one_call(sock: Path, argv: list[str], cwd: Path) -> list[Frame]:
    """Every frame brokerd sends for one shell.run call, up to the connection's close."""
    arguments = json.dumps({"argv": argv, "cwd": str(cwd)})
    stream = await FrameStream.connect(sock, broker_wire.FROM_BROKERD)
    frames: list[Frame] = []
    try:
        await stream.write(Frame.of(broker_wire.TOOL_CALL, request("shell.run", arguments),
                                    final=True))
        while True:
            try:
                frames.append(await stream.read(60))
            except StreamClosed:
                return frames
    finally:
        await stream.close()


@pytest.mark.sandbox
def test_a_sleep_in_a_real_sandbox_is_told_about_while_it_runs(tmp_path):
    with brokerd(tmp_path, interval=0.1) as sock:
        frames = asyncio.run(frames_of_one_call(sock, ["sleep", "2"], tmp_path / "work"))
    *notices, answer = frames
    response = answer.parse(ToolResponse)
    assert (answer.kind, answer.final, response.status) == ("tool_response", True, "ok")
    assert "[exit status 0]" in response.content
    assert len(notices) >= 2  # 2 s of sleep at 0.1 s: many; nothing after the answer
    waits = [f.parse(broker_wire.ToolWaiting) for f in notices]
    assert all(f.kind == "tool_waiting" and not f.final for f in notices)
    assert {w.reason for w in waits} == {"running"}
    assert [w.elapsed for w in waits] == sorted(w.elapsed for w in waits)
    assert waits[-1].elapsed >= 1  # the sleep itself lasts 2 s: the count reaches it


@pytest.mark.sandbox
def test_a_call_done_within_the_interval_sends_only_its_answer(tmp_path):
    with brokerd(tmp_path, interval=3600) as sock:
        frames = asyncio.run(frames_of_one_call(sock, ["true"], tmp_path / "work"))
    (answer,) = frames
    assert answer.kind == "tool_response" and answer.parse(ToolResponse).status == "ok"


@pytest.mark.sandbox
def test_loopd_relays_the_notices_and_bxctl_shows_them(tmp_path):
    """The whole way: brokerd's notices become loopd's tool_waiting events (BrokerPort, as the
    turn uses it), and bxctl chat's renderer shows one short line for each."""
    events: list[TurnEventBody] = []

    async def sink(event: TurnEventBody) -> None:
        events.append(event)

    arguments = json.dumps({"argv": ["sleep", "2"], "cwd": str(tmp_path / "work")})
    with brokerd(tmp_path, interval=0.1) as sock:
        response = asyncio.run(BrokerPort(sock).call(request("shell.run", arguments), sink))
    assert response.status == "ok"
    assert len(events) >= 2
    assert all(isinstance(e, ToolWaitingEvent) and e.reason == "running" for e in events)

    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(text=out, status=err, tty=False)
    for event in [ToolCallStarted(name="shell.run"), *events]:
        renderer.event(event)
    renderer.end_turn()
    lines = err.getvalue().splitlines()
    assert len(lines) == len(events)
    assert all(re.fullmatch(r"shell\.run still running \(\d+ s\)", line) for line in lines)
