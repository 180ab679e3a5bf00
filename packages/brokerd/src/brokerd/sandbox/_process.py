"""One sandboxed call's process and what it produced. ``run_process`` feeds stdin, collects stdout
up to a cap, keeps a tail of stderr, and kills the process when the deadline passes or stdout
overflows: the one place both backends wait. ``interpret`` (pure) turns the finished process
(exit status, bytes, flags) into a ToolOutput or a ToolFailure: the toolkit prints exactly one
JSON object; anything else is a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from bxcore.tools import DataClass, ToolResponse

TOOLKIT_OUT_OF_MEMORY = 3  # toolkit.main.EXIT_OUT_OF_MEMORY
_RESULT_KEYS = {"class", "content", "truncated", "untrusted"}
_LABELS = {label.value for label in DataClass}


class FailureReason(StrEnum):
    TIMEOUT = "timeout"  # the call's time limit passed; the sandbox was killed
    OUT_OF_MEMORY = "oom"  # the memory limit stopped it
    KILLED = "killed"  # a signal ended it (SIGKILL is most often the cgroup memory limit)
    EXIT = "exit"  # the program exited non-zero (its own error message, or the runtime's)
    BAD_OUTPUT = "bad_output"  # stdout was not exactly one result object
    OUTPUT_CAP = "output_cap"  # it printed more than the cap allows


@dataclass(frozen=True, kw_only=True)
class ToolOutput:
    content: str
    data_class: DataClass
    untrusted: bool
    truncated: bool

    def as_response(self) -> ToolResponse:
        return ToolResponse(status="ok", content=self.content, data_class=self.data_class,
                            untrusted=self.untrusted, truncated=self.truncated)


@dataclass(frozen=True, kw_only=True)
class ToolFailure:
    reason: FailureReason
    detail: str
    data_class: DataClass  # the grant's label: an error message may quote what the tool read
    untrusted: bool

    def as_response(self) -> ToolResponse:
        return ToolResponse(status="failed", content=f"{self.reason}: {self.detail}",
                            data_class=self.data_class, untrusted=self.untrusted,
                            truncated=False)


SandboxOutcome = ToolOutput | ToolFailure


@dataclass(frozen=True, kw_only=True)
class Finished:
    """A sandbox process after it ended (the shell fills this in)."""

    status: int  # exit status; negative: killed by that signal
    stdout: bytes
    stderr: bytes  # a bounded tail, for messages
    timed_out: bool
    overflowed: bool  # stdout passed its cap and the process was stopped


def interpret(
    run: Finished, *, data_class: DataClass, egress: bool, timeout_s: float, stdout_cap: int
) -> SandboxOutcome:
    """The outcome of ``run``. A call with egress is untrusted whatever the program says, and a
    result is never labelled below the grant's ``data_class``."""

    def fail(reason: FailureReason, detail: str) -> ToolFailure:
        return ToolFailure(reason=reason, detail=detail, data_class=data_class, untrusted=egress)

    if run.timed_out:
        return fail(FailureReason.TIMEOUT, f"stopped after the call's time limit of {timeout_s}s")
    if run.overflowed:
        return fail(FailureReason.OUTPUT_CAP, f"printed more than {stdout_cap} bytes")
    document = _one_object(run.stdout)
    if run.status == 0:
        output = _output(document, data_class, egress)
        if output is None:
            return fail(FailureReason.BAD_OUTPUT, "stdout was not one result object: "
                        + _excerpt(run.stdout))
        return output
    if run.status == TOOLKIT_OUT_OF_MEMORY or (document and document.get("kind") == "oom"):
        return fail(FailureReason.OUT_OF_MEMORY, "the program ran out of memory (memory limit)")
    if run.status < 0 or run.status in (128 + signal.SIGKILL, 128 + signal.SIGTERM):
        number = -run.status if run.status < 0 else run.status - 128
        return fail(FailureReason.KILLED, f"killed by {signal.Signals(number).name} (with "
                    "SIGKILL, the memory limit is the usual cause)")
    error = document.get("error") if document is not None else None
    if isinstance(error, str):
        return fail(FailureReason.EXIT, error)
    return fail(FailureReason.EXIT, f"exit status {run.status}: " + _excerpt(run.stderr))


def _output(
    document: dict[str, object] | None, data_class: DataClass, egress: bool
) -> ToolOutput | None:
    if document is None or set(document) != _RESULT_KEYS:
        return None
    content, label = document["content"], document["class"]
    untrusted, truncated = document["untrusted"], document["truncated"]
    if not (isinstance(content, str) and isinstance(untrusted, bool)
            and isinstance(truncated, bool) and label in _LABELS):
        return None
    return ToolOutput(content=content, data_class=max(DataClass(label), data_class),
                      untrusted=untrusted or egress, truncated=truncated)


def _one_object(data: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # nesting deeper than the parser's
        return None
    return value if isinstance(value, dict) else None


def _excerpt(data: bytes, limit: int = 400) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return "(nothing)"
    return text if len(text) <= limit else "..." + text[-limit:]


T = TypeVar("T")

STDERR_TAIL = 4096
_CHUNK = 64 * 1024
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _dies_with(parent: int) -> Callable[[], None]:
    """Run in the child before exec: it is killed when brokerd dies. A brokerd already gone by
    then: the child ends. bwrap's sandbox, cloned before its own ``--die-with-parent`` holds,
    can outlive this child: the call's lifeline stops it (``bubblewrap``, toolkit.main)."""

    def set_up() -> None:
        if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or \
                os.getppid() != parent:
            os._exit(127)

    return set_up


async def run_process(
    argv: list[str],
    *,
    stdin: bytes,
    timeout_s: float,
    stdout_cap: int,
    env: Mapping[str, str] | None = None,
    on_kill: Callable[[], Awaitable[None]] | None = None,
    pass_fds: tuple[int, ...] = (),
    before_kill: Callable[[], None] = lambda: None,
) -> Finished:
    """Run ``argv`` in its own session; ``on_kill`` tears down whatever outlives the process
    (podman's container), after the process group is killed; ``before_kill`` runs, at once,
    before the group is killed, whatever kills it (bubblewrap's lifeline is closed so)."""
    starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
        env=dict(env) if env is not None else None, pass_fds=pass_fds,
        preexec_fn=_dies_with(os.getpid()),
    ))
    try:
        # Never cut short: cancelled while its pipes are being connected, asyncio closes the
        # transport and waits for pipes that never connected, for ever (brokerd hung on
        # SIGTERM so). The process is started, then put down, and the cancellation goes on.
        process = await finish_uncancelled(starting)
    except asyncio.CancelledError:
        if starting.done() and not starting.cancelled() and starting.exception() is None:
            await finish_uncancelled(_put_down(starting.result(), on_kill, before_kill))
        raise
    assert process.stdin and process.stdout and process.stderr
    stdout = bytearray()
    stderr = bytearray()
    overflowed = False

    async def feed() -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.write(stdin)  # type: ignore[union-attr]
            await process.stdin.drain()  # type: ignore[union-attr]
        process.stdin.close()  # type: ignore[union-attr]

    async def collect() -> None:
        nonlocal overflowed
        while chunk := await process.stdout.read(_CHUNK):  # type: ignore[union-attr]
            stdout.extend(chunk)
            if len(stdout) > stdout_cap:
                overflowed = True
                before_kill()
                _kill_group(process.pid)
                return

    async def tail() -> None:
        while chunk := await process.stderr.read(_CHUNK):  # type: ignore[union-attr]
            stderr.extend(chunk)
            del stderr[:-STDERR_TAIL]

    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(feed(), collect(), tail())
            await process.wait()
    except TimeoutError:
        timed_out = True
    finally:
        if timed_out or overflowed or process.returncode is None:
            # Killed (a deadline, an overflow, brokerd stopping): the sandbox is gone before
            # this returns or re-raises, however often the caller is cancelled meanwhile.
            await finish_uncancelled(_put_down(process, on_kill, before_kill))
    assert process.returncode is not None
    return Finished(status=process.returncode, stdout=bytes(stdout[:stdout_cap]),
                    stderr=bytes(stderr), timed_out=timed_out, overflowed=overflowed)


async def _put_down(process: asyncio.subprocess.Process,
                    on_kill: Callable[[], Awaitable[None]] | None,
                    before_kill: Callable[[], None]) -> None:
    """Kill the process group, tear down what outlives it, and reap the process. Its pipes are
    closed first: once nothing reads them (the collectors were cancelled) a full pipe pauses
    its transport, EOF is never seen, and ``wait()``, which waits for the pipes too, would
    never return (brokerd hung on SIGTERM so, with a tool printing more than 128 KiB)."""
    before_kill()
    _kill_group(process.pid)
    transport: asyncio.SubprocessTransport = process._transport  # type: ignore[attr-defined]
    for fd in (0, 1, 2):  # Process has no public way to drop its pipes
        pipe = transport.get_pipe_transport(fd)
        if pipe is None or pipe.is_closing():
            continue
        if isinstance(pipe, asyncio.WriteTransport):
            pipe.abort()  # stdin: whatever is still buffered for it is dropped
        else:
            pipe.close()
    if on_kill is not None:
        await on_kill()
    await process.wait()


async def finish_uncancelled(work: Awaitable[T]) -> T:
    """Run ``work`` to its end even if the caller is cancelled meanwhile (each cancellation
    is held until then and raised after): starting or tearing down a sandbox is never left
    half done."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    result = task.result()
    if cancelled:
        raise asyncio.CancelledError
    return result


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
