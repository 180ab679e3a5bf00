"""``memoryd``: the daemon, and the owner's maintenance commands (bxctl wraps the latter as
``bxctl memory log/undo`` and ``bxctl reindex`` by running them, never by importing memoryd)."""

from __future__ import annotations

import asyncio
import json
import logging
import os

import click
from bxcore.config import Config, load_config
from bxcore.errors import BoxmakerError

from .journal import Edit
from .layout import Layout
from .rebuild import reindex
from .server import serve as serve_forever
from .writer import MemoryWriter


def _config(path: str | None) -> Config:
    try:
        if path is None:
            return Config()
        return load_config(path)
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None


def _writer(config: Config) -> MemoryWriter:
    layout = Layout(config.paths.home)
    layout.ensure()
    return MemoryWriter(layout, stage_identity_writes=config.memory.stage_identity_writes,
                        identity_ceiling=config.memory.identity_ceiling)


config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), default=None,
    envvar="BOXMAKER_CONFIG", help="The Boxmaker config file (default: built-in defaults).",
)


@click.group()
def main() -> None:
    """memoryd: Boxmaker's memory files, recall index and Honcho sync."""


@main.command()
@config_option
def serve(config_path: str | None) -> None:
    """Serve memory.sock until SIGTERM.

    Example: memoryd serve --config /etc/boxmaker/config.toml
    """
    logging.basicConfig(level=os.environ.get("MEMORYD_LOG", "INFO"))
    try:
        asyncio.run(serve_forever(_config(config_path), config_path or "config"))
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None


@main.command("log")
@config_option
@click.option("--file", "file", default=None, help="Only edits of this file, e.g. memory.md.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def log_command(config_path: str | None, file: str | None, as_json: bool) -> None:
    """List every memory write journalled in memory/edits/.

    Example: memoryd log --file user.md
    """
    try:
        edits = _writer(_config(config_path)).journal.entries()
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None
    for edit in edits:
        if file is None or edit.file == file:
            click.echo(edit.canonical().decode() if as_json else describe(edit))


def describe(edit: Edit) -> str:
    flags = " [staged]" if edit.staged else ""
    who = f"session {edit.session}" if edit.session else "owner"
    return f"{edit.seq:>5} {edit.time} {edit.file:<10} {edit.action:<11} {who}{flags}: " \
        f"{edit.summary}"


def _owner_command(config_path: str | None, action: str, argument: str | int) -> None:
    try:
        writer = _writer(_config(config_path))  # recovers what a crash left: may raise StoreError
        if action == "undo":
            edit = writer.undo(str(argument))
        elif action == "accept":
            edit = writer.accept(int(argument))
        else:
            edit = writer.reject(int(argument))
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(describe(edit))


@main.command()
@config_option
@click.argument("file")
def undo(config_path: str | None, file: str) -> None:
    """Revert the latest edit of FILE (memory.md or user.md); the undo is journalled too.

    Example: memoryd undo memory.md
    """
    _owner_command(config_path, "undo", file)


@main.command()
@config_option
@click.option("--json", "as_json", is_flag=True)
def staged(config_path: str | None, as_json: bool) -> None:
    """List identity edits waiting for review (with stage_identity_writes = true).

    Example: memoryd staged
    """
    for edit in _writer(_config(config_path)).journal.staged():
        click.echo(json.dumps({"seq": edit.seq, "file": edit.file, "after": edit.after})
                   if as_json else f"{describe(edit)}\n{edit.after}")


@main.command()
@config_option
@click.argument("seq", type=int)
def accept(config_path: str | None, seq: int) -> None:
    """Apply staged edit SEQ. Example: memoryd accept 12"""
    _owner_command(config_path, "accept", seq)


@main.command()
@config_option
@click.argument("seq", type=int)
def reject(config_path: str | None, seq: int) -> None:
    """Discard staged edit SEQ. Example: memoryd reject 12"""
    _owner_command(config_path, "reject", seq)


@main.command("reindex")
@config_option
def reindex_command(config_path: str | None) -> None:
    """Rebuild index/recall.sqlite from sessions/ and memory/notes.md.

    Example: memoryd reindex
    """
    try:
        counts = reindex(_config(config_path))
    except BoxmakerError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"reindexed: {counts['documents']} documents from {counts['sessions']} sessions")
