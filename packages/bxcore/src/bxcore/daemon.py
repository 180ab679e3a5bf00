"""The shell every role's daemon shares: its Unix server socket, systemd notifications, and one
way to stop on SIGTERM or SIGINT.

    async def main(config: Config) -> None:
        notifier = Notifier()
        async with listening(path, handle, mode=0o660, group="boxmaker"):
            notifier.ready(f"serving {path}")           # only after the socket is bound
            await wait_forever()                        # or the role's own loops

    stopped_by = asyncio.run(run_until_signalled(main(config), on_stop=notifier.stopping))

The socket is the one systemd passed for its path when the role's ``.socket`` unit holds it
(``bxcore.activation``; its mode is checked against the config's), else ``bind_unix_socket``'s,
which:

- is born with its final mode: the umask is narrowed around ``bind()``, and the group is set
  and the mode checked before ``listen()``, so until then a client's ``connect()`` is refused
  and there is no moment when wider permissions accept anyone;
- replaces a stale file from a crash (nobody listening), but refuses a live socket (another
  daemon serves it) and any file that is not a socket;
- refuses a directory every user may write without the sticky bit: anyone could remove the
  socket and put their own in its place, where clients would then send their requests;
- is removed at exit only if the file is still the one this process bound.

The umask is process-wide: bind before starting threads that create files.

Every connection ``listening`` (or bxcore.accepting's ``accepting``) takes is checked against
its peer first (``bxcore.peers``): the socket's own uid, its group and any ``peers.uids`` (or, in
a container, the overflow uid the socket's directory gates). A refused peer is logged and closed
before the role's handler sees it.

Answering (``answering``): the one connection runner every role's frame socket serves with. It
reads the request frame, makes one call on the role's answerer, and maps the outcome once: an
answer frame is sent; the peer's fault (RemoteProtocolError: ``bad_frame``) and a ``Refused``
request (its code) are answered and logged as the peer's; anything else (a bug, a
LocalProtocolError) is answered ``internal`` and logged as ours with its traceback; a peer that
went away gets nothing. Then the connection is closed.

Stopping (``run_until_signalled``): the first SIGTERM or SIGINT cancels the role's main
coroutine, whose ``finally`` blocks and ``async with`` exits then run (close the listener, remove
the socket, flush state); a second signal while that runs is only logged. Signals do nothing
else: no handler touches state, one supervising coroutine does the cancelling.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import logging
import os
import signal
import socket
import stat
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, NoReturn

from .activation import inherited_socket, is_passed
from .errors import (
    DaemonError,
    ErrorCode,
    LocalProtocolError,
    Refused,
    RemoteProtocolError,
    StreamEnded,
    StreamTimeout,
)
from .frames import ERROR, Frame, Kinds, error_frame
from .framestream import FrameStream
from .peers import Peer, PeerPolicy, check_peer, listener, peer_of
from .systemd import Notifier, watchdog_interval

log = logging.getLogger("bxcore.daemon")

DEFAULT_MODE = 0o600  # the owner only: a single-user local stack
BACKLOG = 128
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
REQUEST_TIMEOUT = 30.0  # seconds for a peer to send its request frame once connected

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


# --- the socket -------------------------------------------------------------------------------


def resolve_group(group: str | int) -> int:
    """A group name, or a gid given as an int or a decimal string, as a gid."""
    if isinstance(group, int):
        return group
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise DaemonError(f"no such group {group!r}") from None


def check_socket_directory(directory: Path) -> None:
    """Refuse a directory where another user could replace the socket."""
    try:
        info = directory.stat()
    except OSError as exc:
        raise DaemonError(
            f"{directory}: cannot use as the socket's directory: {exc.strerror or exc}"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise DaemonError(f"{directory}: not a directory")
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        raise DaemonError(
            f"{directory}: every user may write it and it has no sticky bit, so anyone could "
            "replace the socket; use a directory only this role can write (e.g. "
            "RuntimeDirectory=)"
        )


def remove_stale_socket(path: Path) -> None:
    """Remove a socket file nobody listens on; refuse one that is live or not a socket. The
    socket systemd passed for ``path`` is left as it is: it is live, and it is ours."""
    if is_passed(path):
        return
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise DaemonError(f"{path}: exists and is not a socket; refusing to replace it")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            path.unlink(missing_ok=True)  # a crash left it behind
            return
        except OSError as exc:
            raise DaemonError(
                f"{path}: cannot tell whether it is stale: {exc.strerror or exc}"
            ) from None
    raise DaemonError(f"{path}: another process is serving on it")


def bind_unix_socket(
    path: Path, *, mode: int = DEFAULT_MODE, group: str | int | None = None, backlog: int = BACKLOG
) -> socket.socket:
    """A listening ``AF_UNIX`` stream socket at ``path`` with ``mode`` and, if given, ``group``.

    Raises DaemonError naming the path for every refusal and failure.
    """
    if not 0 <= mode <= 0o777:
        raise DaemonError(f"{path}: mode {mode:o} is not a permission mode")
    gid = None if group is None else resolve_group(group)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_socket_directory(path.parent)
    remove_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        previous = os.umask(0o777 & ~mode)
        try:
            sock.bind(str(path))
        finally:
            os.umask(previous)
    except OSError as exc:
        sock.close()
        raise DaemonError(f"{path}: cannot bind: {exc.strerror or exc}") from None
    try:
        _finish_before_listen(path, mode, gid, group)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        path.unlink(missing_ok=True)
        raise
    return sock


def _finish_before_listen(path: Path, mode: int, gid: int | None, group: object) -> None:
    """Group and mode, while connect() is still refused."""
    if gid is not None:
        try:
            os.chown(path, -1, gid)
        except OSError as exc:
            raise DaemonError(
                f"{path}: cannot give it to group {group!r} (is this process in "
                f"that group?): {exc.strerror or exc}"
            ) from None
    if stat.S_IMODE(path.lstat().st_mode) != mode:
        # A default ACL on the directory overrides the umask; put it right before listen().
        os.chmod(path, mode)


def check_inherited(path: Path, mode: int, group: str | int | None) -> None:
    """Refuse a socket systemd passed whose file admits more than the config asks for: its
    ``.socket`` unit's SocketMode=/SocketGroup= disagree with the role's config."""
    info = path.lstat()
    if not stat.S_ISSOCK(info.st_mode):
        raise DaemonError(f"{path}: the socket systemd passed is not this file")
    wider = stat.S_IMODE(info.st_mode) & ~mode
    if wider:
        raise DaemonError(f"{path}: systemd's socket has mode {stat.S_IMODE(info.st_mode):04o}, "
                          f"wider than the configured {mode:04o} (SocketMode= must agree)")
    if group is not None and info.st_gid != resolve_group(group):
        raise DaemonError(f"{path}: systemd's socket belongs to gid {info.st_gid}, not the "
                          f"configured group {group!r} (SocketGroup= must agree)")


@contextlib.contextmanager
def bound_socket(
    path: Path, mode: int, group: str | int | None, peers: PeerPolicy | None
) -> Iterator[tuple[socket.socket, PeerPolicy]]:
    """The listening socket and the policy its connections are checked against: the one
    systemd passed for ``path`` (bxcore.activation), else one bound here. On exit it is closed;
    a socket bound here also has its file removed (if it is still ours), systemd's stays."""
    policy = peers or PeerPolicy(group=None if group is None else resolve_group(group))
    inherited = inherited_socket(path)
    if inherited is not None:
        try:
            check_inherited(path, mode, group)
            yield inherited, policy
        finally:
            inherited.close()  # systemd holds its own: clients keep queueing while we are gone
        return
    sock = bind_unix_socket(path, mode=mode, group=group)
    identity = path.lstat()
    try:
        yield sock, policy
    finally:
        sock.close()
        _unlink_if_same(path, identity)


@contextlib.asynccontextmanager
async def listening(
    path: Path,
    handler: Handler,
    *,
    mode: int = DEFAULT_MODE,
    group: str | int | None = None,
    limit: int = 2**16,
    peers: PeerPolicy | None = None,
) -> AsyncIterator[asyncio.Server]:
    """Serve ``handler`` on a socket bound by ``bind_unix_socket``, to the peers ``peers`` admits
    (default: the socket's uid and group); on exit stop accepting and remove the socket file.
    Connections already open are left to their handlers."""
    with bound_socket(path, mode, group, peers) as (sock, policy):
        server = await asyncio.start_unix_server(gate_peers(path, handler, policy), sock=sock,
                                                 limit=limit)
        try:
            yield server
        finally:
            server.close()
            await server.wait_closed()


def gate_peers(path: Path, handler: Handler, policy: PeerPolicy) -> Handler:
    """``handler`` for the connections whose peer ``policy`` admits; the rest are closed."""
    me = listener()

    async def gated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer, refused = check_peer(writer.get_extra_info("socket"), me, policy)
        if refused is not None:
            log_refusal(path, peer, refused)
            writer.close()
            return
        await handler(reader, writer)

    return gated


def log_refusal(path: Path, peer: Peer, reason: str) -> None:
    log.warning("%s: refused a connection from uid %d (pid %d): %s", path, peer.uid, peer.pid,
                reason)


def _unlink_if_same(path: Path, identity: os.stat_result) -> None:
    """Unlink ``path`` only if it is still the file we bound: a successor (a restart racing this
    exit) may already have bound its own socket there."""
    with contextlib.suppress(FileNotFoundError):
        now = path.lstat()
        if (now.st_dev, now.st_ino) == (identity.st_dev, identity.st_ino):
            path.unlink()


# --- one connection: a request in, one answer out ------------------------------------------


class Connection:
    """One accepted connection as an answerer sees it: the peer the kernel reports, and the
    frames exchanged before the answer (a notice out, a question and its reply)."""

    def __init__(self, stream: FrameStream, writer: asyncio.StreamWriter):
        self._stream = stream
        self._writer = writer

    def peer(self) -> Peer:
        return peer_of(self._writer.get_extra_info("socket"))

    async def send(self, frame: Frame, timeout: float | None = 30) -> None:
        """A frame before the answer (``final`` False)."""
        await self._stream.write(frame, timeout)

    async def read(self, timeout: float | None = None) -> Frame:
        return await self._stream.read(timeout)


Answerer = Callable[[Frame, Connection], Coroutine[Any, Any, Frame]]
"""A socket's one call on its role's logic: the request frame in, the final frame out."""


def answering(
    answer: Answerer, *, receives: Kinds, sends: Kinds, log: logging.Logger,
    timeout: float = REQUEST_TIMEOUT,
    unreadable: Callable[[RemoteProtocolError], Coroutine[Any, Any, None]] | None = None,
) -> Handler:
    """The handler of a socket whose peer sends one request (within ``timeout``) and reads
    one final frame: ``answer``'s, or the error its failure maps to (module docstring), logged
    on ``log``. ``unreadable`` hears of a request that could not be read, before it is
    answered (brokerd audits it)."""

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = FrameStream(reader, writer, receives, sends=sends)
        try:
            final = await _outcome(stream, Connection(stream, writer), answer, log, timeout,
                                   unreadable)
            if final is not None:
                await _answer(stream, final, log)
        finally:
            await stream.close()

    return one


async def _outcome(
    stream: FrameStream, conn: Connection, answer: Answerer, log: logging.Logger,
    timeout: float, unreadable: Callable[[RemoteProtocolError], Coroutine[Any, Any, None]] | None,
) -> Frame | None:
    """The final frame for the request, or None when the peer went away."""
    try:
        try:
            request = await stream.read(timeout)
        except RemoteProtocolError as exc:
            if unreadable is not None:
                await unreadable(exc)
            raise
        return await answer(request, conn)
    except (StreamEnded, StreamTimeout) as exc:
        log.info("the peer went away: %s", exc)
        return None
    except RemoteProtocolError as exc:
        log.warning("the peer's fault: %s", exc)
        return error_frame(ErrorCode.BAD_FRAME, str(exc))
    except Refused as exc:
        ours = exc.code in (ErrorCode.INTERNAL, ErrorCode.UNAVAILABLE)
        log.log(logging.ERROR if ours else logging.WARNING, "refused (%s): %s", exc.code, exc)
        return error_frame(exc.code, str(exc))
    except Exception as exc:  # a bug (LocalProtocolError among them), never the peer's fault
        return _our_bug(exc, log)


async def _answer(stream: FrameStream, final: Frame, log: logging.Logger) -> None:
    """Send ``final``; one that may not go out is our bug, answered ``internal`` instead."""
    try:
        try:
            await stream.write(final)
        except LocalProtocolError as exc:  # nothing of it was written
            internal = _our_bug(exc, log)
            if stream.may_send(ERROR):
                await stream.write(internal)
    except (StreamEnded, StreamTimeout) as exc:
        log.info("the peer went away before its answer: %s", exc)


def _our_bug(exc: Exception, log: logging.Logger) -> Frame:
    log.error("our bug, not the peer's: %s", exc, exc_info=exc)
    return error_frame(ErrorCode.INTERNAL, f"a failure on this side ({type(exc).__name__}); "
                                           "its log has the details")


# --- stopping ---------------------------------------------------------------------------------


async def run_until_signalled(
    main: Coroutine[Any, Any, object],
    *,
    on_stop: Callable[[], None] | None = None,
    signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
) -> signal.Signals | None:
    """Run ``main`` until it returns or the first of ``signals`` arrives; then cancel it and wait
    for its cleanup. Returns the signal that stopped it, or None when it returned by itself.
    An exception from ``main`` (or from its cleanup) propagates unchanged."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[signal.Signals] = loop.create_future()

    def on_signal(number: signal.Signals) -> None:
        if received.done():
            log.info("%s while stopping: already stopping", number.name)
        else:
            received.set_result(number)

    for number in signals:
        loop.add_signal_handler(number, on_signal, number)
    work: asyncio.Future[Any] = asyncio.ensure_future(main)
    either: set[asyncio.Future[Any]] = {work, received}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            work.result()
            return None
        number = received.result()
        log.info("%s: stopping", number.name)
        if on_stop is not None:
            on_stop()
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        return number
    finally:
        if not work.done():  # we were cancelled ourselves
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
        for number in signals:
            loop.remove_signal_handler(number)


async def wait_forever() -> NoReturn:
    """The body of a main whose work happens in its listeners: wait to be cancelled."""
    await asyncio.get_running_loop().create_future()
    raise AssertionError("unreachable: the future is never resolved")


__all__ = [
    "BACKLOG", "DEFAULT_MODE", "REQUEST_TIMEOUT", "Answerer", "Connection", "Notifier",
    "answering", "bind_unix_socket", "bound_socket", "check_inherited", "check_socket_directory",
    "gate_peers", "listening", "log_refusal", "remove_stale_socket", "resolve_group",
    "run_until_signalled", "wait_forever", "watchdog_interval"
]
