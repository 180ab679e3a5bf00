"""A running gatewayd (in process) between the fake Mattermost and a scripted loopd."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bxcore.secrets import Secret
from gatewayd import sockets
from gatewayd.gateway import Gateway
from gatewayd.settings import Settings

from .mmfake import FakeMattermost, serve
from .scripted import ScriptedLoop


@dataclass
class Harness:
    fake: FakeMattermost
    gateway: Gateway
    loop: ScriptedLoop
    bot: str
    owner: str
    dm: str  # the DM channel between the owner and the bot
    run_dir: Path

    def bot_posts(self) -> list[dict[str, Any]]:
        return self.fake.posts_by(self.bot)

    def thread(self, root: str) -> list[dict[str, Any]]:
        return [p for p in self.fake.data.posts.values() if root in (p["id"], p["root_id"])]


async def until(predicate: Callable[[], object], timeout: float = 15.0) -> None:
    """Wait for a condition the scenario expects (a bound on waiting, not a performance check)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(
    fake: FakeMattermost, *, loop_up: bool = True, channels: frozenset[str] = frozenset(),
    extra_allowed: frozenset[str] = frozenset(), **overrides: Any,
) -> AsyncIterator[Harness]:
    bot, token = fake.add_user("boxmaker", bot=True)
    owner, _ = fake.add_user("owner")
    dm = fake.data.direct(bot, owner)["id"]
    run_dir = Path(tempfile.mkdtemp(prefix="gw", dir="/tmp"))
    async with serve(fake) as url:
        settings = Settings(
            server=url, token=Secret("mattermost_token", token),
            allowlist=frozenset({owner}) | extra_allowed, channels=channels,
            state=run_dir / "state", gateway_socket=run_dir / "gateway.sock",
            loop_socket=run_dir / "loop.sock", edit_interval=0.05, retries=3,
            request_timeout=5.0, reconnect=(0.05, 0.3), ping_interval=30.0,
            redeliver=(0.05, 0.3),
        )
        settings = dataclasses.replace(settings, **overrides)
        scripted = ScriptedLoop(settings.loop_socket)
        if loop_up:
            await scripted.start()
        gateway = Gateway(settings)
        ready = asyncio.Event()
        task = asyncio.create_task(sockets.run(gateway, ready=ready.set))
        try:
            await until(lambda: ready.is_set() or task.done())
            if task.done():
                task.result()
            await until(gateway.socket.connected.is_set)
            yield Harness(fake, gateway, scripted, bot, owner, dm, run_dir)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await scripted.stop()
            shutil.rmtree(run_dir, ignore_errors=True)


SCENARIO_LIMIT = 240.0  # a hung scenario fails with every task's stack instead of hanging CI


def run(scenario: Coroutine[Any, Any, Any], limit: float = SCENARIO_LIMIT) -> Any:
    """``asyncio.run`` with a bound: on a hang, print where every task waits, then fail."""

    async def guarded() -> Any:
        task = asyncio.ensure_future(scenario)
        done, _ = await asyncio.wait({task}, timeout=limit)
        if not done:
            for other in asyncio.all_tasks():
                if other is not asyncio.current_task():
                    print(f"task {other.get_name()}: {other.get_coro()}", file=sys.stderr)
                    other.print_stack(limit=12, file=sys.stderr)
            task.cancel()
            raise AssertionError(f"the scenario hung for {limit} s; task stacks on stderr")
        return task.result()

    return asyncio.run(guarded())
