"""bxctl: the owner's command line. A thin click group: each subcommand lives in its own module
and is only registered here."""

from __future__ import annotations

import click
from bxcore import cli_errors

from . import approvals, doctor, jobs, maintenance, scheduler
from .chat import chat_command
from .device.command import COMMANDS as DEVICE_COMMANDS
from .stack.commands import down_command, status_command, up_command


@click.group(cls=cli_errors.Group)
def main() -> None:
    """Boxmaker's command line: chat, local approvals, checks and maintenance.

    Example: bxctl chat --say "What time is it?"
    """


main.add_command(chat_command)
main.add_command(up_command)
main.add_command(status_command)
main.add_command(down_command)
for command in [*approvals.COMMANDS, *maintenance.COMMANDS, *jobs.COMMANDS, *doctor.COMMANDS,
                *scheduler.COMMANDS, *DEVICE_COMMANDS]:
    main.add_command(command)
