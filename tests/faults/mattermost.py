"""The gateway tests' fake Mattermost (tests/gateway/mmfake, checked against the official spec
subset in ../shared/reference/mattermost/) served from a thread of its own, so a real
``gatewayd serve`` process can talk to it while the test drives the people in it.

    with MattermostThread() as chat:
        root = chat.owner_says("hello")         # a DM from the owner to the bot
        chat.answers_in(root)                   # the bot's posts in that thread
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, TypeVar

from gateway.mmfake import FakeMattermost, serve

T = TypeVar("T")
START_WAIT = 30.0


class MattermostThread:
    def __init__(self) -> None:
        self.fake = FakeMattermost()
        self.bot, self.token = self.fake.add_user("boxmaker", bot=True)
        self.owner, _ = self.fake.add_user("owner")
        self.dm = self.fake.data.direct(self.bot, self.owner)["id"]
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._serving: concurrent.futures.Future[None] | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        started: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._serving = asyncio.run_coroutine_threadsafe(self._serve(started), self._loop)
        self.url = started.result(timeout=START_WAIT)
        return self

    async def _serve(self, started: concurrent.futures.Future[str]) -> None:
        self._stop = asyncio.Event()
        async with serve(self.fake) as url:
            started.set_result(url)
            await self._stop.wait()

    def __exit__(self, *exc_info: object) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._serving is not None:
            self._serving.result(timeout=START_WAIT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=START_WAIT)
        self._loop.close()

    def call(self, action: Callable[[], T]) -> T:
        """Run ``action`` on the fake's own loop (its state is not thread-safe)."""
        async def run() -> T:
            return action()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=START_WAIT)

    def owner_says(self, message: str, root_id: str = "") -> str:
        return self.call(lambda: self.fake.user_posts(self.owner, self.dm, message, root_id))

    def bot_says(self, message: str, root_id: str) -> str:
        """A post by the bot's own account: what the model's reply would put in the thread."""
        return self.call(lambda: self.fake.user_posts(self.bot, self.dm, message, root_id))

    def bot_posts_in(self, root: str) -> list[dict[str, Any]]:
        return self.call(lambda: [p for p in self.fake.data.posts.values()
                                  if p["user_id"] == self.bot and p["root_id"] == root])

    def config(self, directory: Path) -> tuple[str, dict[str, str]]:
        """The config sections that point gatewayd here, and the environment with its token."""
        allowlist = directory / "allowlist"
        allowlist.write_text(f"{self.owner}\n")
        section = f"""
[secrets.mattermost_token]
backend = "env"
variable = "BX_MATTERMOST_TOKEN"

[gateway]
server = "{self.url}"
allowlist = "{allowlist}"
edit_interval = 0.05
reconnect_min = 0.1
reconnect_max = 1.0
redeliver_min = 0.1
redeliver_max = 1.0
"""
        return section, {"BX_MATTERMOST_TOKEN": self.token}
