"""``bxctl chat``: drive turns on loop.sock, one connection per turn (docs/design.md)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

import click
from bxcore import cli_errors
from bxcore.canonical import canonical_text
from bxcore.config import load_config
from bxcore.errors import BoxmakerError, ErrorCode, WireError
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.ids import check_session_id, new_session_id
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn, TurnDone, TurnEvent

from .render import Renderer, terminal_text
from .roles import default_config

QUIT = "/quit"
_RAW_CONTROL = re.compile("[\x7f-\x9f]")  # only inside JSON strings: JSON has no other place


def default_socket() -> Path:
    """loop.sock as the default config file says (the host's puts it in
    /run/boxmaker/loop/loop.sock); with no config file, $BOXMAKER_RUN/loop.sock."""
    config = default_config()
    if config.exists():
        return load_config(config).loop_socket
    return Path(os.environ.get("BOXMAKER_RUN", "/run/boxmaker")) / "loop.sock"


class TurnFailed(BoxmakerError):
    """loopd answered the turn with an error frame; the message is its code and text."""

    def __init__(self, error: WireError):
        super().__init__(terminal_text(f"{error.code}: {error.message}"))
        self.error = error


def turn_frames(socket_path: Path, turn: Turn) -> Iterator[Frame]:
    """Send one turn; yield every frame loopd answers, the final one last."""
    with SyncFrameSocket.connect(socket_path, wire.FROM_LOOPD, sends=wire.TO_LOOPD) as channel:
        channel.write(Frame.of(wire.TURN, turn, final=False))
        while True:
            # No read timeout: prompt processing can take minutes; loopd watches liveness.
            frame = channel.read(timeout=None)
            yield frame
            if frame.final:
                return


class ChatSession:
    """One session's turns. The first turn of an id given with ``--session`` resumes it, or
    creates it when loopd says it does not exist, so scripts can choose their ids."""

    def __init__(self, socket_path: Path, session: str, *, resume: bool, thinking: bool,
                 on_frame: Callable[[Frame], None], tool_choice: Sequence[str] = ()):
        self.socket_path = socket_path
        self.session = session
        self._resume = resume
        self._thinking = thinking
        self._on_frame = on_frame
        self._tool_choice = list(tool_choice)

    def turn(self, content: str) -> TurnDone:
        try:
            done = self._turn(content, self._resume)
        except TurnFailed as failed:
            if not (self._resume and failed.error.code is ErrorCode.NO_SUCH_SESSION):
                raise
            done = self._turn(content, resume=False)
        self._resume = True
        return done

    def _turn(self, content: str, resume: bool) -> TurnDone:
        turn = Turn.model_validate({
            "session": self.session, "content": content, "resume": resume,
            "thinking": self._thinking, "tool_choice": self._tool_choice,
        })
        for frame in turn_frames(self.socket_path, turn):
            self._on_frame(frame)
            if frame.kind == wire.TURN_DONE:
                return frame.parse(TurnDone)
            if frame.kind == wire.ERROR:
                raise TurnFailed(frame.parse(WireError))
        raise BoxmakerError("loopd closed the turn without a final frame")


def json_line(body: object) -> str:
    """A frame body as one JSON line with no control character raw: JSON escapes C0 itself; DEL
    and C1 (which a terminal may take for CSI and OSC) are written as ``\\u`` escapes too."""
    return _RAW_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", canonical_text(body))


def frame_printer(renderer: Renderer | None, json_out: TextIO | None) -> Callable[[Frame], None]:
    def show(frame: Frame) -> None:
        if json_out is not None:
            json_out.write(json_line(frame.body) + "\n")
            json_out.flush()
        if renderer is not None and frame.kind == wire.TURN_EVENT:
            renderer.event(frame.parse(TurnEvent).event)

    return show


@click.command("chat", cls=cli_errors.Command)
@click.option("--socket", "socket_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="loop.sock (default: the config file's, e.g. "
              "/run/boxmaker/loop/loop.sock; without one $BOXMAKER_RUN/loop.sock).")
@click.option("--session", default=None, help="Resume this session, or create it with this id.")
@click.option("--no-thinking", is_flag=True, help="Ask the model not to think for these turns.")
@click.option("--say", default=None, help="Run one turn with this text and exit: the answer on "
                                          "stdout, events and errors on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print every frame body as a JSON line.")
@click.option("--tool-choice", "tool_choice", multiple=True,
              type=click.Choice(["auto", "required", "none"]),
              help="tool_choice for each completion of a turn, in order (repeat the option); "
                   "auto after them. For steering small models.")
def chat_command(socket_path: Path | None, session: str | None, no_thinking: bool,
                 say: str | None, as_json: bool, tool_choice: tuple[str, ...]) -> None:
    """Talk to loopd: one turn per line of stdin; EOF or /quit ends it.

    Examples:

        bxctl chat

        bxctl chat --session notes-2026 --say "What time is it?"
    """
    if session is not None:
        try:
            check_session_id(session)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--session") from None
    path = socket_path or default_socket()
    session_id = session or new_session_id()
    click.echo(f"session {session_id}", err=True)
    tty = sys.stderr.isatty()
    if say is not None:
        renderer = None if as_json else Renderer(text=sys.stderr, status=sys.stderr, tty=tty,
                                                 show_content=False)
        show = frame_printer(renderer, sys.stdout if as_json else None)
    else:
        renderer = None if as_json else Renderer(text=sys.stdout, status=sys.stderr,
                                                 tty=sys.stdout.isatty())
        show = frame_printer(renderer, sys.stdout if as_json else None)
    chat = ChatSession(path, session_id, resume=session is not None, thinking=not no_thinking,
                       on_frame=show, tool_choice=tool_choice)
    if say is not None:
        _say(chat, say, renderer, as_json)
    else:
        _interactive(chat, renderer, sys.stdin)


def _say(chat: ChatSession, text: str, renderer: Renderer | None, as_json: bool) -> None:
    try:
        done = chat.turn(text)
    finally:
        if renderer is not None:
            renderer.end_turn()
    if not as_json:
        click.echo(terminal_text(done.content))


def _interactive(chat: ChatSession, renderer: Renderer | None, lines: TextIO) -> None:
    for line in lines:
        text = line.rstrip("\n")
        if text.strip() == QUIT:
            return
        if not text.strip():
            continue
        try:
            chat.turn(text)
        except TurnFailed as failed:  # the session goes on; any other error ends the chat
            click.echo(f"error: {failed}", err=True)
        finally:
            if renderer is not None:
                renderer.end_turn()


def run_interactive(socket_path: Path) -> None:
    """An interactive chat on a new session, for ``bxctl up``."""
    chat_command.main(["--socket", str(socket_path)], standalone_mode=False)
