"""loopd's command line: ``loopd serve --config <path>``."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click
from bxcore import cli_errors
from bxcore.config import load_config
from bxcore.logs import configure_logging

from . import wiring

config_option = click.option(
    "--config", "config_path", required=True,
    type=click.Path(dir_okay=False, path_type=Path), help="The Boxmaker config file (TOML).",
)


@click.group(cls=cli_errors.Group)
def main() -> None:
    """loopd runs the conversation: it builds each prompt, calls the model, and asks the tool
    port for every tool call. It holds no credential and needs no network."""


@main.command()
@config_option
def serve(config_path: Path) -> None:
    """Run the self-test, then serve turns on loop.sock until SIGTERM.

    Example: loopd serve --config /etc/boxmaker/config.toml
    """
    configure_logging("loopd", format="loopd: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request is noise
    config = load_config(config_path)
    parts = wiring.build(config, config_path)
    raise SystemExit(asyncio.run(wiring.serve(parts, wiring.inference_client(config))))


def _check(config_path: Path, which: str) -> None:
    logging.basicConfig(level=logging.WARNING, format="loopd: %(message)s")
    raise SystemExit(asyncio.run(wiring.run_report(load_config(config_path), config_path, which)))


@main.command()
@config_option
def selftest(config_path: Path) -> None:
    """Run the startup self-test against the configured model server and print its report:
    tool-call round trip, cache hit, slots, context, chat template, speculative decoding.
    Exit 1 if any check fails.

    Example: loopd selftest --config /etc/boxmaker/config.toml
    """
    _check(config_path, "selftest")


@main.command()
@config_option
def budget(config_path: Path) -> None:
    """Count a new session's baseline (system.md, the identity from memoryd, the core tool
    schemas) with the server's tokenizer and compare it with [inference] baseline_budget.
    Exit 1 if it is over, or if memoryd cannot give the identity.

    Example: loopd budget --config /etc/boxmaker/config.toml
    """
    _check(config_path, "budget")


@main.command()
@config_option
def serving(config_path: Path) -> None:
    """Compare the serving settings the model server runs with now (chat template, KV cache
    type, speculative decoding, slot count, per-slot context) with those the latest session
    began under, and name each change. Exit 1 if any changed (a changed template or KV cache
    type means every cached prefix is gone).

    Example: loopd serving --config /etc/boxmaker/config.toml
    """
    _check(config_path, "serving")
