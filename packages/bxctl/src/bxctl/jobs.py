"""``bxctl job run NAME``: one run of an owner-written scheduled job (a systemd timer calls it).

The job file is read and validated by brokerd (``brokerd jobs show``); the run is a turn on a new
``background`` session, so it uses the scheduled-runs slot; every tool call it makes is decided
by brokerd against the grants as they are now.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
from bxcore.config import load_config
from bxcore.errors import BoxmakerError, WireError
from bxcore.ids import new_session_id
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn, TurnDone

from .chat import turn_frames
from .roles import config_option, default_config, run_role


@click.group("job")
def job_group() -> None:
    """Scheduled jobs: owner-written files of what to ask and when."""


@job_group.command("run")
@config_option
@click.argument("name")
def job_run(config_path: Path | None, name: str) -> None:
    """Run job NAME once as a turn on the scheduled-runs slot; print the answer.

    Exit 1 if the job file is refused or the turn fails. Example: bxctl job run morning-notes
    """
    shown = run_role("brokerd", ["jobs", "show", name], config_path, capture=True)
    if shown.returncode != 0:
        raise click.ClickException(shown.stderr.strip() or f"job {name!r} could not be read")
    job = json.loads(shown.stdout)
    config = load_config(config_path or default_config())
    slug = re.sub(r"[^A-Za-z0-9_-]", "-", name)[:24]
    session = f"job-{slug}-{new_session_id()}"[:64]
    turn = Turn(session=session, content=job["ask"], resume=False, session_kind="background")
    try:
        for frame in turn_frames(config.loop_socket, turn):
            if frame.kind == wire.TURN_DONE:
                click.echo(frame.parse(TurnDone).content)
            elif frame.kind == wire.ERROR:
                error = frame.parse(WireError)
                raise click.ClickException(f"job {name} failed ({error.code}): {error.message}")
    except BoxmakerError as exc:
        raise click.ClickException(f"job {name}: {exc}") from None
    click.echo(f"session {session}", err=True)


COMMANDS = [job_group]
