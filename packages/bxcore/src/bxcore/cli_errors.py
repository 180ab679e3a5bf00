"""Errors mapped once for every command line (bxctl and each role's): the owner reads a
Boxmaker error as one message; a bug keeps its traceback.

Every click group and command of Boxmaker is built on ``Group`` or ``Command`` (a test walks
each role's commands to keep it so). Running one, a ``BoxmakerError`` (bxcore.errors and each
role's errors.py: a config naming its file and key, a socket that cannot be reached, a refused
grant file, ...) becomes click's ``Error: <message>`` with exit status ``USER_ERROR``, every
character a terminal would act on written visibly (bxcore.visible). Anything else (a
KeyError, a ``LocalProtocolError``) is ours: it passes through untouched and Python prints its
traceback, so a bug never passes for the owner's mistake.

    @click.group(cls=cli_errors.Group)      # its commands and subgroups are mapped too
    @click.command("up", cls=cli_errors.Command)   # a command made on its own
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from .errors import BoxmakerError
from .visible import visible

USER_ERROR = click.ClickException.exit_code  # 1: what scripts and tests check


@contextlib.contextmanager
def owner_errors() -> Iterator[None]:
    """A ``BoxmakerError`` raised inside becomes a ``ClickException`` with its message."""
    try:
        yield
    except BoxmakerError as exc:
        raise click.ClickException(visible(str(exc))[0]) from exc


class Command(click.Command):
    """A click command whose Boxmaker errors are the owner's to read (``owner_errors``)."""

    def invoke(self, ctx: click.Context) -> Any:
        with owner_errors():
            return super().invoke(ctx)


class Group(click.Group):
    """A click group mapped as ``Command`` is; the commands and groups made on it are too."""

    command_class = Command
    group_class = type  # subgroups are of this class

    def invoke(self, ctx: click.Context) -> Any:
        with owner_errors():
            return super().invoke(ctx)
