"""``gatewayd serve --config <path>``: the daemon, under systemd (Type=notify) or by hand."""

from __future__ import annotations

import asyncio
import logging

import click
from bxcore.config import load_config
from bxcore.errors import BoxmakerError
from bxcore.logs import configure_logging

from . import sockets, wiring


@click.group()
def main() -> None:
    """gatewayd: the owner's Mattermost direct messages as a Boxmaker channel."""


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="The Boxmaker config file (TOML).")
@click.option("--verbose", is_flag=True, help="Log at DEBUG level (never message text).")
def serve(config_path: str, verbose: bool) -> None:
    """Connect to Mattermost, serve gateway.sock, and carry DMs to loopd until SIGTERM.

    Example: gatewayd serve --config /etc/boxmaker/config.toml
    """
    configure_logging("gatewayd", level=logging.DEBUG if verbose else logging.INFO,
                      format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        gateway = wiring.build(load_config(config_path), config_path)
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        asyncio.run(sockets.serve(gateway))
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None


if __name__ == "__main__":
    main()
