"""``inferproxy serve --config <path>``: the daemon's entry point.

Reports READY=1 to systemd once the socket is bound (and WATCHDOG=1 at half the interval systemd
asks for, when ``[inferproxy] watchdog`` is on); SIGTERM or SIGINT stop it cleanly with status 0.
A bad config, an unknown group or a socket that cannot be bound exit 1 with a message.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click
from bxcore.config import ServedSocket, load_config
from bxcore.daemon import Notifier, listening, run_until_signalled, wait_forever
from bxcore.errors import BoxmakerError, ConfigError

from .proxy import CHUNK, Proxy, Upstream


async def _run(proxy: Proxy, served: ServedSocket, gid: int | None, watchdog: bool) -> None:
    notifier = Notifier()

    async def main() -> None:
        async with (
            proxy.cutting_connections_on_exit(),
            listening(served.path, proxy.handle, mode=served.mode, group=gid, limit=CHUNK),
            asyncio.TaskGroup() as tasks,
        ):
            notifier.ready()
            if watchdog:
                tasks.create_task(notifier.keep_watchdog())
            await wait_forever()

    await run_until_signalled(main(), on_stop=notifier.stopping)


@click.group()
def main() -> None:
    """inferproxy: forwards loopd's Unix socket to the llama-server router."""
    logging.basicConfig(level=logging.INFO, format="inferproxy: %(message)s")


@main.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Boxmaker's config.toml; reads [inferproxy] and [paths].",
)
def serve(config_path: Path) -> None:
    """Listen on [inferproxy] socket and forward each connection to [inferproxy] upstream.

    Example: inferproxy serve --config /etc/boxmaker/config.toml
    """
    try:
        config = load_config(config_path)
        served = config.served("infer")
        gid = served.gid(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    section = config.inferproxy
    logging.info("listening on %s, forwarding to %s", served.path, section.upstream)
    try:
        asyncio.run(_run(Proxy(Upstream(section.upstream)), served, gid, section.watchdog))
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None
