"""``inferproxy serve --config <path>``: the daemon's entry point (cli.py -> wiring.py ->
sockets.py -> proxy.py, the splice forwarder).

SIGTERM or SIGINT stop it cleanly with status 0.
A bad config, an unknown group or a socket that cannot be bound exit 1 with a message.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click
from bxcore import cli_errors
from bxcore.config import load_config
from bxcore.logs import configure_logging

from . import sockets, wiring


@click.group(cls=cli_errors.Group)
def main() -> None:
    """inferproxy: forwards loopd's Unix socket to the llama-server router."""
    configure_logging("inferproxy", format="inferproxy: %(message)s")


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
    config = load_config(config_path)
    logging.info("listening on %s, forwarding to %s", config.served("infer").path,
                 config.inferproxy.upstream)
    asyncio.run(sockets.serve(wiring.build(config), config, config_path))
