"""loopd's command line: ``loopd serve --config <path>``."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click
from bxcore.config import load_config
from bxcore.errors import BoxmakerError

from .serve import serve as run_serve


@click.group()
def main() -> None:
    """loopd runs the conversation: it builds each prompt, calls the model, and asks the tool
    port for every tool call. It holds no credential and needs no network."""


@main.command()
@click.option(
    "--config", "config_path", required=True,
    type=click.Path(dir_okay=False, path_type=Path), help="The Boxmaker config file (TOML).",
)
@click.option(
    "--tools", type=click.Choice(["fake", "broker"]), default=None,
    help="Which port answers tool calls; overrides [loop] tools.",
)
def serve(config_path: Path, tools: str | None) -> None:
    """Run the self-test, then serve turns on loop.sock until SIGTERM.

    Example: loopd serve --config /etc/boxmaker/config.toml
    """
    logging.basicConfig(level=logging.INFO, format="loopd: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request is noise
    try:
        config = load_config(config_path)
        status = asyncio.run(run_serve(config, config_path, tools=tools))
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None
    raise SystemExit(status)
