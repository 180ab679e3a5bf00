"""Checks and maintenance of the files the roles keep: audit, taint, grants, memory, index.

Each command runs the owning role's own command (see roles.py) and exits with its status.
"""

from __future__ import annotations

from pathlib import Path

import click

from .roles import config_option, passthrough


@click.group("audit")
def audit_group() -> None:
    """The hash-chained audit log of every decision and result."""


@audit_group.command("verify")
@config_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per bad link.")
def audit_verify(config_path: Path | None, as_json: bool) -> None:
    """Re-derive every hash and name each edited, deleted, inserted or reordered record.

    Exit 1 when any record is bad. Example: bxctl audit verify
    """
    passthrough("brokerd", ["audit", "verify", *(["--json"] if as_json else [])], config_path)


@click.group("taint")
def taint_group() -> None:
    """Each session's taint: the data classes it has seen and whether it read untrusted text."""


@taint_group.command("rebuild")
@config_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write here instead of replacing the live files (to compare).")
def taint_rebuild(config_path: Path | None, out: Path | None) -> None:
    """Rewrite every session's taint file from the audit log.

    Example: bxctl taint rebuild --out /tmp/taint-check
    """
    passthrough("brokerd", ["taint", "rebuild", *(["--out", str(out)] if out else [])],
                config_path)


@click.group("grants")
def grants_group() -> None:
    """The owner's grant files, which decide every tool call."""


@grants_group.command("check")
@config_option
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="A grants directory other than the config's.")
def grants_check(config_path: Path | None, directory: Path | None) -> None:
    """Parse every grant and say in words what it allows. Exit 1 if any file is refused.

    Example: bxctl grants check --dir grants-examples
    """
    passthrough("brokerd", ["grants", "check", *(["--dir", str(directory)] if directory else [])],
                config_path)


@click.command("reindex")
@config_option
def reindex(config_path: Path | None) -> None:
    """Rebuild the recall index from the session logs and memory/notes.md.

    Example: bxctl reindex
    """
    passthrough("memoryd", ["reindex"], config_path)


@click.group("memory")
def memory_group() -> None:
    """The memory files: what was written, undo, and staged identity edits."""


@memory_group.command("log")
@config_option
@click.option("--file", "file_name", default=None, help="Only edits of this file.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def memory_log(config_path: Path | None, file_name: str | None, as_json: bool) -> None:
    """List every memory write, newest last.

    Example: bxctl memory log --file user.md
    """
    args = ["log", *(["--file", file_name] if file_name else []), *(["--json"] if as_json else [])]
    passthrough("memoryd", args, config_path)


@memory_group.command("undo")
@config_option
@click.argument("file_name", metavar="FILE")
def memory_undo(config_path: Path | None, file_name: str) -> None:
    """Revert the latest edit of FILE (memory.md or user.md); the undo is journalled too.

    Example: bxctl memory undo memory.md
    """
    passthrough("memoryd", ["undo", file_name], config_path)


@memory_group.command("staged")
@config_option
def memory_staged(config_path: Path | None) -> None:
    """List identity edits waiting for review. Example: bxctl memory staged"""
    passthrough("memoryd", ["staged"], config_path)


@memory_group.command("accept")
@config_option
@click.argument("seq")
def memory_accept(config_path: Path | None, seq: str) -> None:
    """Apply staged edit SEQ. Example: bxctl memory accept 12"""
    passthrough("memoryd", ["accept", seq], config_path)


@memory_group.command("reject")
@config_option
@click.argument("seq")
def memory_reject(config_path: Path | None, seq: str) -> None:
    """Discard staged edit SEQ. Example: bxctl memory reject 12"""
    passthrough("memoryd", ["reject", seq], config_path)


COMMANDS = [audit_group, taint_group, grants_group, reindex, memory_group]
