"""Checks and maintenance of the files the roles keep: audit, taint, grants, the mount labels,
memory, index.

Each command here is the owning role's own command, passed through (roles.py): ``bxctl audit
verify ARGS`` runs ``brokerd audit verify ARGS``, and ``--help`` is that command's help. bxctl
declares only which role command each name runs; the role's command declares its options,
arguments and help, once.
"""

from __future__ import annotations

import click
from bxcore import cli_errors

from .roles import role_passthrough

# bxctl group -> (the role, the role's words before the subcommand, the subcommands passed on).
GROUPS = {
    "audit": ("brokerd", ("audit",), ("verify",)),
    "taint": ("brokerd", ("taint",), ("rebuild",)),
    "grants": ("brokerd", ("grants",), ("check",)),
    "labels": ("brokerd", ("labels",), ("show", "lower")),
    "memory": ("memoryd", (), ("log", "undo", "staged", "accept", "reject")),
}


def _group(name: str, role: str, words: tuple[str, ...], subcommands: tuple[str, ...]
           ) -> click.Group:
    group = cli_errors.Group(name, help=f"Runs `{' '.join((role, *words))} ...`: the role's own "
                        "commands, with their own options and help.")
    for sub in subcommands:
        group.add_command(role_passthrough(sub, role, (*words, sub)))
    return group


COMMANDS: list[click.Command] = [
    *(_group(name, *target) for name, target in GROUPS.items()),
    role_passthrough("reindex", "memoryd", ("reindex",)),
]
