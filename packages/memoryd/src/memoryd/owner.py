"""The owner's commands that change memoryd's files: undo, accept, reject and reindex.

memoryd does them itself, on ``memory-owner.sock``: on the appliance the files belong to
memoryd's user and only that user may write them (or take the writer lock), while the socket's
directory admits only the owner's users, so no role (and no agent) can accept its own staged
edit. ``memoryd undo`` and the rest send the command there, and do it in-process only when no
memoryd serves it (the local stack stopped, offline maintenance), under the same writer lock.
Reading needs neither: ``memoryd log`` and ``staged`` read the journal and take no lock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bxcore.config import Config
from bxcore.errors import WireError
from bxcore.frames import Frame, describe_validation
from bxcore.framestream import PeerUnavailable
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import memory_owner as proto
from pydantic import TypeAdapter, ValidationError

from .errors import CommandRefused
from .journal import Edit
from .rebuild import reindex
from .writer import MemoryWriter

COMMANDS: TypeAdapter[proto.MemoryCommand] = TypeAdapter(proto.MemoryCommand)
ANSWER_TIMEOUT = 600.0  # a reindex reads every session log: a bound on hanging, not a measure


def describe(edit: Edit) -> str:
    flags = " [staged]" if edit.staged else ""
    who = f"session {edit.session}" if edit.session else "owner"
    return f"{edit.seq:>5} {edit.time} {edit.file:<10} {edit.action:<11} {who}{flags}: " \
        f"{edit.summary}"


def perform(command: proto.MemoryCommand, config: Config,
            writer: Callable[[], MemoryWriter]) -> str:
    """Do ``command``; the line to print. Raises CommandRefused (or another MemorydError)."""
    if isinstance(command, proto.UndoCommand):
        return describe(writer().undo(command.file))
    if isinstance(command, proto.ResolveCommand):
        if command.command == "accept":
            return describe(writer().accept(command.seq))
        return describe(writer().reject(command.seq))
    counts = reindex(config)
    return f"reindexed: {counts['documents']} documents from {counts['sessions']} sessions"


def parse_command(frame: Frame) -> proto.MemoryCommand:
    try:
        return COMMANDS.validate_python(frame.body)
    except ValidationError as exc:
        raise CommandRefused(f"frame {frame.kind!r}: {describe_validation(exc)}") from None


def ask_memoryd(path: Path, command: proto.MemoryCommand) -> str | None:
    """The serving memoryd's answer to ``command``; None when none serves ``path`` (no socket,
    or one a stopped memoryd left). A refusal is a CommandRefused with memoryd's message."""
    try:
        sock = SyncFrameSocket.connect(path, proto.FROM_MEMORYD_OWNER,
                                       sends=proto.TO_MEMORYD_OWNER)
    except PeerUnavailable as exc:
        if isinstance(exc.__cause__, FileNotFoundError | ConnectionRefusedError):
            return None
        raise
    with sock:
        sock.write(Frame(kind=proto.MEMORY_COMMAND, final=True,
                         body=COMMANDS.dump_python(command, mode="json")))
        reply = sock.read(timeout=ANSWER_TIMEOUT)
    if reply.kind == proto.ERROR:
        raise CommandRefused(f"memoryd ({path}): {reply.parse(WireError).message}")
    return reply.parse(proto.CommandDone).text
