"""The local stack for benchmarks: ``bxctl up``'s own code in a temp state directory.

    with running_stack(directory, llama_server=..., serving=..., grants=..., settings=...) as s:
        timed = s.turn("bench-1", "Hello", resume=False, tool_choice=["none"])
        s.restart("loopd")
        s.rss("brokerd")

``bxctl.stack.local.up`` starts llama-server (or ``fake_llama.py`` in its place), inferproxy,
memoryd, brokerd and loopd (in its own network namespace where the machine allows it), each
ready on READY=1. The benchmark writes the config first, since ``up`` keeps an existing one:
``render_config``'s text with the benchmark's settings put in, each substitution checked, so a
change to the rendered config fails here loudly instead of measuring something else.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bxcore.canonical import canonical_text
from bxcore.errors import WireError
from bxcore.frames import Frame
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn, TurnDone
from bxctl.chat import turn_frames
from bxctl.stack.local import (
    READY_TIMEOUT,
    StackError,
    StackLayout,
    down,
    render_config,
    sandbox_backend,
    up,
)
from bxctl.stack.notify import NotifyListener
from bxctl.stack.processes import Started, save, spawn, stop
from loopd.log import Record, parse_log
from loopd.store import SessionStore, log_path

ROOT = Path(__file__).resolve().parent.parent
FAKE_LLAMA = ROOT / "bench" / "fake_llama.py"
START_ATTEMPTS = 3


class RigError(Exception):
    """The benchmark's stack did not do what the benchmark needs; the message says what."""


@dataclass(frozen=True, kw_only=True)
class StackSettings:
    model: str = "qwen-tools"
    max_tokens: int = 48
    per_slot_context: int = 4096
    slot_count: int = 2
    temperature: float | None = None  # None: the config's default sampling
    system: str | None = None  # the text of system.md; None: loopd's shipped one
    summary_tokens: int | None = None  # [loop] summary_tokens; None: the config's default


@dataclass(frozen=True)
class TimedTurn:
    done: TurnDone
    seconds: float  # from sending the turn frame to reading the final frame
    events: list[str] = field(default_factory=list)  # the turn_event kinds, in order


def _substitute(text: str, pattern: str, replacement: str) -> str:
    updated, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    if count != 1:
        raise RigError(f"render_config changed: {pattern!r} matched {count} times, not once")
    return updated


def bench_config(layout: StackLayout, grants: Path, settings: StackSettings) -> str:
    """The local stack's config.toml with the benchmark's settings."""
    text = render_config(
        layout, grants=grants, registry=layout.state / "toolkit-schemas.json",
        model=settings.model, backend=sandbox_backend(),
    )
    text = _substitute(text, r"^max_tokens = \d+$", f"max_tokens = {settings.max_tokens}")
    text = _substitute(
        text, r"^per_slot_context = \d+$", f"per_slot_context = {settings.per_slot_context}"
    )
    text = _substitute(text, r"^slot_count = \d+$", f"slot_count = {settings.slot_count}")
    if settings.summary_tokens is not None:
        text = _substitute(text, r'^tools = "broker"$',
                           f'tools = "broker"\nsummary_tokens = {settings.summary_tokens}')
    if settings.temperature is not None:  # the local stack's [inference.sampling] has one
        text = _substitute(text, r"^temperature = [\d.]+$",
                           f"temperature = {settings.temperature}")
    if settings.system is not None:
        system = layout.state / "system.md"
        system.write_text(settings.system)
        text += f"\n[baseline]\nsystem = {canonical_text(str(system))}\n"
    return text


def fake_llama_binary(directory: Path) -> Path:
    """An executable that runs fake_llama.py with this interpreter, for ``up`` to start."""
    path = directory / "fake-llama-server"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_LLAMA}" "$@"\n')
    path.chmod(0o755)
    return path


def serving_dir(directory: Path, presets: str) -> Path:
    """A serving directory as ``up`` expects it: ``presets`` and the project's templates."""
    path = directory / "serving-src"
    path.mkdir()
    (path / "presets.ini").write_text(presets)
    (path / "templates").symlink_to(ROOT / "serving" / "templates")
    return path


class Stack:
    def __init__(self, layout: StackLayout, started: list[Started]):
        self.layout = layout
        self.started = started

    def pid(self, name: str) -> int:
        return self._entry(name).pid

    def _entry(self, name: str) -> Started:
        for entry in self.started:
            if entry.name == name:
                return entry
        raise RigError(f"the stack runs no {name}")

    def turn(
        self, session: str, content: str, *, resume: bool, tool_choice: Sequence[str] = (),
        kind: wire.SessionKind = "main",
    ) -> TimedTurn:
        """One turn over loop.sock, timed from the first byte sent to the final frame."""
        turn = Turn.model_validate({
            "session": session, "content": content, "resume": resume, "session_kind": kind,
            "tool_choice": list(tool_choice),
        })
        events: list[str] = []
        start = time.perf_counter()
        final: Frame | None = None
        for frame in turn_frames(self.layout.socket("loop"), turn):
            if frame.final:
                final = frame
            else:
                events.append(frame.body.get("event", {}).get("type", "?"))
        seconds = time.perf_counter() - start
        assert final is not None  # turn_frames ends with the final frame
        if final.kind == wire.ERROR:
            raise RigError(f"turn of {session} failed: {final.parse(WireError)}")
        return TimedTurn(done=final.parse(TurnDone), seconds=seconds, events=events)

    def records(self, session: str) -> tuple[Record, ...]:
        """The session's current epoch, as loopd wrote it."""
        return SessionStore(self.layout.home).open(session).records

    def epochs(self, session: str) -> list[tuple[Record, ...]]:
        """Every epoch of the session, oldest first, as loopd wrote them (a closed epoch's log
        ends with ``epoch_end``)."""
        store = SessionStore(self.layout.home)
        directory, current = store.directory(session), store.open(session).epoch
        return [parse_log(log_path(directory, n).read_bytes(), str(log_path(directory, n)),
                          session=session, epoch=n) for n in range(current + 1)]

    def restart(self, name: str) -> None:
        """Stop one daemon (SIGTERM) and start it again with the same command line; returns
        when it sent READY=1 again."""
        entry = self._entry(name)
        stop([entry])
        listener = NotifyListener(self.layout.run / "notify-bench.sock")
        try:
            env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "LISTEN_FDS")}
            env["NOTIFY_SOCKET"] = str(listener.path)
            process = spawn(name, entry.argv, self.layout.logs, env)
            fresh = Started(name, process.pid, entry.argv, entry.socket)
            self.started[self.started.index(entry)] = fresh
            save(self.layout.record, self.started)
            if listener.wait_ready({process.pid}, READY_TIMEOUT, lambda: process.poll() is None) \
                    is None:
                raise RigError(f"{name} did not get ready again; see {self.layout.logs}")
        finally:
            listener.close()

    def rss(self, name: str) -> tuple[int, int]:
        """(VmRSS, VmHWM) of one daemon's process, in KiB: now, and the peak so far."""
        return proc_memory(self.pid(name))


def _log_tail(layout: StackLayout, name: str, lines: int = 12) -> list[str]:
    path = layout.logs / f"{name}.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    return [line for line in text.splitlines() if "HTTP Request" not in line][-lines:]


def proc_memory(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


@contextlib.contextmanager
def running_stack(
    directory: Path, *, llama_server: Path, models: Path, serving: Path, grants: Path,
    settings: StackSettings,
) -> Iterator[Stack]:
    """The whole stack under ``directory/state``; everything stopped on exit."""
    layout = StackLayout(directory / "state")
    layout.state.mkdir(parents=True)
    layout.config.write_text(bench_config(layout, grants, settings))
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            started = up(
                layout, llama_server=llama_server, models=models, serving_src=serving,
                grants=grants, model=settings.model, say=lambda line: print(line, file=sys.stderr),
            )
            break
        except StackError as exc:
            # Said, never hidden: loopd's self-test has failed here on a /tokenize that the
            # router dropped ("Server disconnected") under load; the figures need a stack.
            tail = "\n".join(_log_tail(layout, "loopd"))
            print(f"start {attempt} failed: {exc}\n{tail}", file=sys.stderr)
            if attempt == START_ATTEMPTS:
                raise
    try:
        yield Stack(layout, started)
    finally:
        down(layout)
