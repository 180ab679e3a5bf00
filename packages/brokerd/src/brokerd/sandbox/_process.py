"""Run one sandbox process: feed stdin, collect stdout up to a cap, keep a tail of stderr, and
kill it when the deadline passes or stdout overflows. The one place both backends wait."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from ._outcome import Finished

T = TypeVar("T")

STDERR_TAIL = 4096
_CHUNK = 64 * 1024
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _dies_with(parent: int) -> Callable[[], None]:
    """Run in the child before exec: it is killed when brokerd dies, even a SIGKILLed brokerd
    before bwrap's own ``--die-with-parent`` holds (a sandbox then outlived it, writing on
    while no one counted it as running). A brokerd already gone by then: the child ends."""

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
) -> Finished:
    """Run ``argv`` in its own session; ``on_kill`` tears down whatever outlives the process
    (podman's container), after the process group is killed."""
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
            await finish_uncancelled(_put_down(starting.result(), on_kill))
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
            await finish_uncancelled(_put_down(process, on_kill))
    assert process.returncode is not None
    return Finished(status=process.returncode, stdout=bytes(stdout[:stdout_cap]),
                    stderr=bytes(stderr), timed_out=timed_out, overflowed=overflowed)


async def _put_down(process: asyncio.subprocess.Process,
                    on_kill: Callable[[], Awaitable[None]] | None) -> None:
    """Kill the process group, tear down what outlives it, and reap the process. Its pipes are
    closed first: once nothing reads them (the collectors were cancelled) a full pipe pauses
    its transport, EOF is never seen, and ``wait()``, which waits for the pipes too, would
    never return (brokerd hung on SIGTERM so, with a tool printing more than 128 KiB)."""
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
