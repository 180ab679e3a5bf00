"""``bxctl job run NAME``: one run of an owner-written scheduled job (its systemd timer, or the
local stack's scheduler, calls it).

The job file is read and validated by brokerd (``brokerd jobs show``); the run is a turn on a new
``background`` session, so it uses the scheduled-runs slot; every tool call it makes is decided
by brokerd against the grants as they are now. The answer (or why there is none) is printed and
sent to the owner through gatewayd (``owner_notice`` on gateway.sock), in the same DM thread as
the run's approvals; a stack without gatewayd only prints it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
from bxcore import cli_errors
from bxcore.config import Config, load_config
from bxcore.errors import BoxmakerError, WireError
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.ids import new_session_id
from bxcore.protocol import approval
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn, TurnDone

from .chat import turn_frames
from .render import terminal_text
from .roles import config_option, default_config, run_role

NOTICE_TIMEOUT = 60.0  # seconds for gatewayd to post the answer (it retries Mattermost itself)


@click.group("job", cls=cli_errors.Group)
def job_group() -> None:
    """Scheduled jobs: owner-written files of what to ask and when."""


def session_for(name: str) -> str:
    """A new session for one run: ``job-<name>-<time>-<random>``, at most 64 characters."""
    slug = re.sub(r"[^A-Za-z0-9_-]", "-", name)[:24]
    return f"job-{slug}-{new_session_id()}"[:64]


def tell_owner(config: Config, session: str, text: str) -> str:
    """Post ``text`` in the run's thread through gatewayd; what happened, for stderr."""
    path = config.served("gateway").path
    if not path.exists():
        return f"not sent to the owner: no gatewayd at {path}"
    notice = approval.OwnerNotice(session=session, text=text)
    try:
        with SyncFrameSocket.connect(path, approval.FROM_GATEWAYD,
                                     sends=approval.TO_GATEWAYD) as sock:
            sock.write(Frame.of(approval.OWNER_NOTICE, notice, final=True))
            reply = sock.read(timeout=NOTICE_TIMEOUT)
    except BoxmakerError as exc:
        return f"not sent to the owner: gatewayd: {exc}"
    if reply.kind == approval.ERROR:
        error = reply.parse(WireError)
        return f"not sent to the owner: gatewayd refused ({error.code}): {error.message}"
    return f"sent to the owner in thread {reply.parse(approval.NoticePosted).root_id}"


def run_turn(config: Config, name: str, session: str, ask: str) -> tuple[str | None, str]:
    """(the answer or None, the text for the owner)."""
    turn = Turn(session=session, content=ask, resume=False, session_kind="background")
    try:
        for frame in turn_frames(config.loop_socket, turn):
            if frame.kind == wire.TURN_DONE:
                answer = frame.parse(TurnDone).content
                return answer, f"**Job {name}** answered:\n\n{answer}"
            if frame.kind == wire.ERROR:
                error = frame.parse(WireError)
                return None, f"**Job {name}** failed ({error.code}): {error.message}"
    except BoxmakerError as exc:
        return None, f"**Job {name}** failed: {exc}"
    return None, f"**Job {name}** failed: loopd ended the turn without an answer"


@job_group.command("run")
@config_option
@click.argument("name")
def job_run(config_path: Path | None, name: str) -> None:
    """Run job NAME once as a turn on the scheduled-runs slot; print the answer and send it to
    the owner through gatewayd.

    Exit 1 if the job file is refused or the turn fails. Example: bxctl job run morning-notes
    """
    shown = run_role("brokerd", ["jobs", "show", name], config_path, capture=True)
    if shown.returncode != 0:
        raise click.ClickException(shown.stderr.strip() or f"job {name!r} could not be read")
    job = json.loads(shown.stdout)
    config = load_config(config_path or default_config())
    session = session_for(name)
    answer, text = run_turn(config, name, session, job["ask"])
    click.echo(f"session {session}; {tell_owner(config, session, text)}", err=True)
    if answer is None:
        raise click.ClickException(terminal_text(text.replace("**", "")))
    click.echo(terminal_text(answer))


COMMANDS = [job_group]
