"""``inferproxy serve --config <path>``: the daemon's entry point.

Reports READY=1 to systemd once the socket is bound (and WATCHDOG=1 at half the interval systemd
asks for, when ``[inferproxy] watchdog`` is on); SIGTERM or SIGINT stop it cleanly with status 0.
A bad config, an unknown group or a socket that cannot be bound exit 1 with a message.
"""

from __future__ import annotations

import asyncio
import grp
import logging
import os
import signal
from pathlib import Path

import click
import sdnotify
from bxcore.config import Config, load_config
from bxcore.errors import ConfigError

from .proxy import Proxy, Upstream, bind_unix


def _socket_path(config: Config) -> Path:
    return config.inferproxy.socket or config.socket("infer")


def _group_id(config: Config, source: Path) -> int | None:
    name = config.inferproxy.group
    if name is None:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(f"{source}: inferproxy.group: no such group {name!r}") from None


async def _watchdog(notifier: sdnotify.SystemdNotifier, interval: float) -> None:
    while True:
        notifier.notify("WATCHDOG=1")
        await asyncio.sleep(interval)


async def _run(proxy: Proxy, watchdog: bool) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    notifier = sdnotify.SystemdNotifier()
    async with asyncio.TaskGroup() as group:
        if watchdog and os.environ.get("WATCHDOG_USEC", "").isdigit():
            interval = int(os.environ["WATCHDOG_USEC"]) / 2_000_000
            pinger = group.create_task(_watchdog(notifier, interval))
        else:
            pinger = None
        await proxy.serve(stop, lambda: notifier.notify("READY=1"))
        notifier.notify("STOPPING=1")
        if pinger is not None:
            pinger.cancel()


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
        gid = _group_id(config, config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    section = config.inferproxy
    path = _socket_path(config)
    try:
        sock = bind_unix(path, section.mode, gid)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {path}: {exc.strerror or exc}") from None
    logging.info("listening on %s, forwarding to %s", path, section.upstream)
    try:
        asyncio.run(_run(Proxy(sock, Upstream(section.upstream)), section.watchdog))
    finally:
        if path.is_socket():
            path.unlink()
