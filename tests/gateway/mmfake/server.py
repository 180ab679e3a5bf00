"""Serve the fake on an ephemeral loopback port, in the test's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn

from .app import FakeMattermost


@contextlib.asynccontextmanager
async def serve(fake: FakeMattermost, tls: tuple[Path, Path] | None = None
                ) -> AsyncIterator[str]:
    """Yields the base URL, e.g. ``http://127.0.0.1:40123``; stops the server on exit. With
    ``tls`` (certificate, key), https and wss only: ``https://127.0.0.1:40123``."""
    certificate, key = tls or (None, None)
    config = uvicorn.Config(
        fake, host="127.0.0.1", port=0, ws="websockets-sansio", lifespan="off",
        log_level="warning", timeout_graceful_shutdown=1,
        ssl_certfile=certificate, ssl_keyfile=key,
    )
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the fake Mattermost did not start")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        fake.close_all()
        server.should_exit = True
        await task
