"""``memoryd``: the daemon, and the owner's maintenance commands (bxctl wraps the latter as
``bxctl memory log/undo`` and ``bxctl reindex`` by running them, never by importing memoryd).

``log`` and ``staged`` only read the journal (no writer lock); ``undo``, ``accept``, ``reject``
and ``reindex`` are done by the serving memoryd through memory-owner.sock (owner.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import os

import click
from bxcore import cli_errors
from bxcore.config import Config, load_config
from bxcore.logs import configure_logging
from bxcore.protocol import memory_owner as proto

from . import sockets, wiring
from .owner import ask_memoryd, describe, perform


def _config(path: str | None) -> Config:
    return Config() if path is None else load_config(path)


config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None,
    envvar="BOXMAKER_CONFIG", help="The Boxmaker config file (default: built-in defaults).",
)


@click.group(cls=cli_errors.Group)
def main() -> None:
    """memoryd: Boxmaker's memory files, recall index and Honcho sync."""


@main.command()
@config_option
def serve(config_path: str | None) -> None:
    """Serve memory.sock until SIGTERM.

    Example: memoryd serve --config /etc/boxmaker/config.toml
    """
    configure_logging("memoryd", format=logging.BASIC_FORMAT,
                      level=os.environ.get("MEMORYD_LOG", "INFO"))
    config = _config(config_path)
    asyncio.run(sockets.serve(wiring.build(config), config, config_path or "config"))


@main.command("log")
@config_option
@click.option("--file", "file", default=None, help="Only edits of this file, e.g. memory.md.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def log_command(config_path: str | None, file: str | None, as_json: bool) -> None:
    """List every memory write journalled in memory/edits/.

    Example: memoryd log --file user.md
    """
    for edit in wiring.journal(_config(config_path)).entries():
        if file is None or edit.file == file:
            click.echo(edit.canonical().decode() if as_json else describe(edit))


def _owner_command(config_path: str | None, command: proto.MemoryCommand) -> None:
    """Done by the serving memoryd, as its own user; in-process when none serves."""
    config = _config(config_path)
    try:
        text = ask_memoryd(config.served("memory-owner").path, command)
        if text is None:  # the writer recovers what a crash left: may raise StoreError
            text = perform(command, config, lambda: wiring.memory_writer(config))
    except OSError as exc:  # no memoryd serving, and memoryd's files are not this user's
        raise click.ClickException(
            f"no memoryd answers on {config.served('memory-owner').path}, and doing it here "
            f"failed: {exc.strerror}: {exc.filename}") from None
    click.echo(text)


@main.command()
@config_option
@click.argument("file")
def undo(config_path: str | None, file: str) -> None:
    """Revert the latest edit of FILE (memory.md or user.md); the undo is journalled too.

    Example: memoryd undo memory.md
    """
    _owner_command(config_path, proto.UndoCommand(command="undo", file=file))


@main.command()
@config_option
@click.option("--json", "as_json", is_flag=True)
def staged(config_path: str | None, as_json: bool) -> None:
    """List identity edits waiting for review (with stage_identity_writes = true).

    Example: memoryd staged
    """
    for edit in wiring.journal(_config(config_path)).staged():
        click.echo(json.dumps({"seq": edit.seq, "file": edit.file, "after": edit.after})
                   if as_json else f"{describe(edit)}\n{edit.after}")


@main.command()
@config_option
@click.argument("seq", type=int)
def accept(config_path: str | None, seq: int) -> None:
    """Apply staged edit SEQ. Example: memoryd accept 12"""
    _owner_command(config_path, proto.ResolveCommand(command="accept", seq=seq))


@main.command()
@config_option
@click.argument("seq", type=int)
def reject(config_path: str | None, seq: int) -> None:
    """Discard staged edit SEQ. Example: memoryd reject 12"""
    _owner_command(config_path, proto.ResolveCommand(command="reject", seq=seq))


@main.command("reindex")
@config_option
def reindex_command(config_path: str | None) -> None:
    """Rebuild index/recall.sqlite from sessions/ and memory/notes.md.

    Example: memoryd reindex
    """
    _owner_command(config_path, proto.ReindexCommand(command="reindex"))
