"""``gatewayd serve --config <path>``: the daemon, under systemd (Type=notify) or by hand."""

from __future__ import annotations

import asyncio
import logging

import click
from bxcore import cli_errors
from bxcore.config import load_config
from bxcore.logs import configure_logging

from . import sockets, wiring


@click.group(cls=cli_errors.Group)
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
    gateway = wiring.build(load_config(config_path), config_path)
    asyncio.run(sockets.serve(gateway))


if __name__ == "__main__":
    main()
