"""The fake Mattermost for synchronous tests: served from a background thread with its own event
loop, on a loopback TCP port of the host, so a test can run gatewayd as a subprocess or a
container (host network) against it.

    with running_fake() as mm:
        bot, bot_token = mm.add_user("boxmaker", bot=True)
        owner, owner_token = mm.add_user("owner")
        dm = mm.direct(bot, owner)
        ... start gatewayd with server = mm.url and the bot's token ...
        root = mm.post_as(owner_token, dm, "hello")["id"]   # over REST, as a real client
        answer = mm.wait_for(lambda fake: [p for p in fake.posts_by(bot) if p["edit_at"]])

The fake's state belongs to its loop: every read or change from the test's thread goes through
``call`` (run on the loop, result deep-copied), never through the object directly. On a clean
exit the fake's spec violations fail the block, as the ``fake`` fixture does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
from support.testca import LocalCA

from .mmfake import FakeMattermost, serve
from .scripted import ScriptedLoop

T = TypeVar("T")

START_LIMIT = 60.0  # bound on the server starting on a busy machine, not a measure
POLL = 0.05


class BackgroundLoop:
    """An event loop running forever in a daemon thread; ``close()`` stops it and joins."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = START_LIMIT) -> T:
        """Run a coroutine on the loop and wait for its result in the calling thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call a plain function on the loop's thread; its result is deep-copied, so the caller
        holds no reference into state the loop keeps changing."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def invoke() -> None:
            try:
                future.set_result(copy.deepcopy(function(*args, **kwargs)))
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(invoke)
        return future.result(START_LIMIT)

    def close(self) -> None:
        async def cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_running():
            self.run(cancel_rest())
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(START_LIMIT)
        self.loop.close()


class ThreadedFake:
    """The handle ``running_fake`` yields. ``fake`` is only for ``call``; never touch it here."""

    def __init__(self, fake: FakeMattermost, url: str, background: BackgroundLoop,
                 verify: ssl.SSLContext | bool = True):
        self.fake = fake
        self.url = url
        self._background = background
        self._verify = verify  # the CA file that signed an https fake's certificate

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``function(*args, **kwargs)`` on the fake's loop, e.g. ``call(fake.fail, ...)``."""
        return self._background.call(function, *args, **kwargs)

    def add_user(self, name: str, bot: bool = False) -> tuple[str, str]:
        """A new user (or bot account): (user id, personal access token)."""
        return self.call(self.fake.add_user, name, bot=bot)

    def direct(self, bot: str, owner: str) -> str:
        """The id of the direct channel between two users, created if new."""
        return self.call(lambda: self.fake.data.direct(bot, owner)["id"])

    def post_as(self, token: str, channel_id: str, text: str, root_id: str = "") -> dict[str, Any]:
        """Post as the token's user through the REST API (POST /api/v4/posts), as a real client
        does: the fake stores it and sends the WebSocket ``posted`` event. Returns the post."""
        body = {"channel_id": channel_id, "message": text, "root_id": root_id}
        reply = httpx.post(
            f"{self.url}/api/v4/posts",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=START_LIMIT,
            verify=self._verify,
        )
        reply.raise_for_status()
        post: dict[str, Any] = reply.json()
        return post

    def posts_by(self, user_id: str) -> list[dict[str, Any]]:
        return self.call(self.fake.posts_by, user_id)

    def thread(self, root_id: str) -> list[dict[str, Any]]:
        """The root post and its replies, oldest first."""
        return self.call(
            lambda: sorted(
                (p for p in self.fake.data.posts.values() if root_id in (p["id"], p["root_id"])),
                key=lambda p: p["create_at"],
            )
        )

    def edits(self) -> list[tuple[str, str]]:
        """(post id, new message) for every patch that changed a message, in order."""
        return self.call(lambda: list(self.fake.edits))

    def violations(self) -> list[str]:
        return self.call(lambda: list(self.fake.violations))

    def wait_for(self, predicate: Callable[[FakeMattermost], T], timeout: float = 60.0) -> T:
        """Poll ``predicate(fake)`` on the fake's loop until it returns something truthy; return
        that (deep-copied). A bound on waiting for what the scenario expects, not a measure."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.call(predicate, self.fake)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the fake never reached the expected state: {predicate}")
            time.sleep(POLL)


@contextlib.contextmanager
def running_fake(
    fake: FakeMattermost | None = None, *, strict: bool = True,
    tls: LocalCA | None = None,
) -> Iterator[ThreadedFake]:
    """Serve ``fake`` (a new one by default) on 127.0.0.1 and an ephemeral port from a background
    thread; stop it, close its sockets and join the thread on exit. With ``strict``, a block that
    exits normally fails if the fake recorded any violation of the Mattermost spec subset.
    ``tls``: https and wss only, with the server certificate ``tls`` signed."""
    fake = fake or FakeMattermost()
    background = BackgroundLoop("mmfake")
    server = serve(fake, None if tls is None else (tls.certificate, tls.key))
    try:
        url = background.run(server.__aenter__())
        try:
            verify = True if tls is None else ssl.create_default_context(cafile=tls.ca)
            handle = ThreadedFake(fake, url, background, verify)
            yield handle
            if strict:
                assert handle.violations() == [], "the Mattermost spec subset was broken"
        finally:
            background.run(server.__aexit__(None, None, None))
    finally:
        background.close()


@contextlib.contextmanager
def running_scripted_loop(path: Path) -> Iterator[tuple[ScriptedLoop, BackgroundLoop]]:
    """A ScriptedLoop answering on ``path`` (loop.sock) from its own background thread. Read or
    change it only through the returned loop's ``call``/``run``."""
    scripted = ScriptedLoop(path)
    background = BackgroundLoop("scripted-loopd")
    try:
        background.run(scripted.start())
        try:
            yield scripted, background
        finally:
            background.run(scripted.stop())
    finally:
        background.close()
