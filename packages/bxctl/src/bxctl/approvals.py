"""``bxctl approvals``, ``bxctl approve ID``, ``bxctl deny ID``: answer brokerd locally.

brokerd takes who answers from the socket peer's uid (``local:<uid>``), not from anything we
claim, and refuses an answer from a uid that is not among its approvers; with ``local:socket``
among them, anyone who can open approve.sock may answer (docs/protocol.md, approve.sock).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Literal

import click
from bxcore import cli_errors
from bxcore.config import load_config
from bxcore.display import describe_call
from bxcore.errors import BoxmakerError, PeerUnavailable, WireError
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import approval as wire

from .roles import config_option, default_config

Verdict = Literal["approve", "deny"]


def _approve_socket(config_path: Path | None) -> Path:
    config = load_config(config_path or default_config())
    return config.served("approve").path


def _exchange(config_path: Path | None, frame: Frame) -> Frame:
    try:
        with SyncFrameSocket.connect(_approve_socket(config_path), wire.FROM_APPROVE_SOCKET,
                                     sends=wire.TO_APPROVE_SOCKET) as s:
            s.write(frame)
            reply = s.read(timeout=30)
    except BoxmakerError as exc:
        raise PeerUnavailable(f"{exc}; is brokerd running? (`bxctl status`)") from exc
    if reply.kind == wire.ERROR:
        error = reply.parse(WireError)
        raise click.ClickException(f"refused ({error.code}): {error.message}")
    return reply


@click.command("approvals", cls=cli_errors.Command)
@config_option
def approvals_command(config_path: Path | None) -> None:
    """List the tool calls waiting for the owner's approval, with exactly what would run.

    Example: bxctl approvals
    """
    reply = _exchange(config_path, Frame(kind=wire.APPROVAL_LIST, final=False, body={}))
    pending = reply.parse(wire.ApprovalPending).approvals
    if not pending:
        click.echo("no approvals are waiting")
    for item in pending:
        call = textwrap.indent(describe_call(item.tool, item.arguments), "    ")
        click.echo(f"{item.id}  session {item.session}  expires {item.expires}\n"
                   f"{call}\n    (grant {item.grant}; arguments {item.arguments_sha256})")


def _answer(config_path: Path | None, approval_id: str, verdict: Verdict) -> None:
    body = wire.ApprovalAnswer(id=approval_id, verdict=verdict, by="local")
    reply = _exchange(config_path, Frame.of(wire.APPROVAL_ANSWER, body, final=False))
    ack = reply.parse(wire.ApprovalAck)
    click.echo(f"{ack.id}: {'approved' if ack.verdict == 'approve' else 'denied'}")


@click.command("approve", cls=cli_errors.Command)
@config_option
@click.argument("approval_id", metavar="ID")
def approve_command(config_path: Path | None, approval_id: str) -> None:
    """Approve the waiting call ID (once; the id is bound to that exact call).

    Example: bxctl approve 4kq9...
    """
    _answer(config_path, approval_id, "approve")


@click.command("deny", cls=cli_errors.Command)
@config_option
@click.argument("approval_id", metavar="ID")
def deny_command(config_path: Path | None, approval_id: str) -> None:
    """Deny the waiting call ID. Example: bxctl deny 4kq9..."""
    _answer(config_path, approval_id, "deny")


COMMANDS = [approvals_command, approve_command, deny_command]
