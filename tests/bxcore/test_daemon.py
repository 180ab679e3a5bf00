"""bxcore.daemon: a role's socket is born with its final mode and group, only a stale file is
replaced, an unsafe directory is refused; systemd hears READY/STATUS/STOPPING/WATCHDOG; the first
SIGTERM or SIGINT cancels the main coroutine and its cleanup runs."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import stat
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from bxcore import accepting as bare
from bxcore import daemon
from bxcore.accepting import accepting
from bxcore.daemon import (
    Notifier,
    bind_unix_socket,
    listening,
    run_until_signalled,
    wait_forever,
    watchdog_interval,
)
from bxcore.errors import DaemonError
from support.systemd import NotifySocket

NOBODY = 65534
OTHER_GID = 4242  # a group no account uses; root may give a file to any gid


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory (socket paths must fit 108 bytes) that other users may traverse."""
    directory = Path(tempfile.mkdtemp(prefix="bx-daemon-"))
    directory.chmod(0o755)
    yield directory
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize("mode", [0o600, 0o660, 0o620])
@pytest.mark.parametrize("process_umask", [0o022, 0o077, 0o000])
def test_the_socket_has_its_mode_the_moment_bind_creates_it(
    sock_dir, monkeypatch, mode, process_umask
):
    path = sock_dir / "role.sock"
    seen_at_bind: list[int] = []
    original_bind = socket.socket.bind

    def bind_and_look(self: socket.socket, address: object) -> None:
        original_bind(self, address)
        seen_at_bind.append(mode_of(path))

    monkeypatch.setattr(socket.socket, "bind", bind_and_look)
    previous = os.umask(process_umask)
    try:
        sock = bind_unix_socket(path, mode=mode)
    finally:
        restored = os.umask(previous)
    with sock:
        assert seen_at_bind == [mode]
        assert mode_of(path) == mode
        assert stat.S_ISSOCK(path.lstat().st_mode)
    assert restored == process_umask  # the process's umask is given back


def test_the_group_is_set_before_clients_can_connect(sock_dir, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another group needs root here")
    path = sock_dir / "role.sock"
    gid_at_listen: list[int] = []
    original_listen = socket.socket.listen

    def look_then_listen(self: socket.socket, backlog: int = 128) -> None:
        gid_at_listen.append(path.lstat().st_gid)
        original_listen(self, backlog)

    monkeypatch.setattr(socket.socket, "listen", look_then_listen)
    with bind_unix_socket(path, mode=0o660, group=str(OTHER_GID)):
        assert gid_at_listen == [OTHER_GID]
        assert mode_of(path) == 0o660


def test_an_unknown_group_is_refused_by_name(sock_dir):
    with pytest.raises(DaemonError, match="no such group 'no-such-group-here'"):
        bind_unix_socket(sock_dir / "role.sock", group="no-such-group-here")
    assert not (sock_dir / "role.sock").exists()


# The venv's interpreter lives under root's home, which other users cannot enter.
SYSTEM_PYTHON = "/usr/bin/python3"
CONNECT = "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('ok')"


def connect_as(path: Path, uid: int, gid: int, groups: list[int]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SYSTEM_PYTHON, "-c", CONNECT, str(path)],
        capture_output=True,
        text=True,
        user=uid,
        group=gid,
        extra_groups=groups,
        check=False,
        timeout=60,
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="runs clients as other users: needs root and a system python3",
)
def test_a_user_in_the_group_connects_and_other_users_do_not(sock_dir):
    path = sock_dir / "loop.sock"
    with bind_unix_socket(path, mode=0o660, group=OTHER_GID):
        member = connect_as(path, NOBODY, NOBODY, [OTHER_GID])
        stranger = connect_as(path, NOBODY, NOBODY, [])
    assert member.stdout.strip() == "ok", member.stderr
    assert "PermissionError" in stranger.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="runs clients as other users: needs root and a system python3",
)
def test_the_default_mode_admits_only_the_owner(sock_dir):
    path = sock_dir / "loop.sock"
    with bind_unix_socket(path):
        member = connect_as(path, NOBODY, NOBODY, [os.getegid()])
    assert "PermissionError" in member.stderr


def test_a_stale_socket_from_a_crash_is_replaced(sock_dir):
    path = sock_dir / "role.sock"
    crashed = socket.socket(socket.AF_UNIX)
    crashed.bind(str(path))
    crashed.close()  # the file stays; nobody listens
    with bind_unix_socket(path) as sock:
        assert sock.getsockname() == str(path)


def test_a_live_socket_is_not_taken_over(sock_dir):
    path = sock_dir / "role.sock"
    with bind_unix_socket(path):
        with pytest.raises(DaemonError, match="another process is serving on it"):
            bind_unix_socket(path)
        assert path.is_socket()


def test_a_file_that_is_not_a_socket_is_never_removed(sock_dir):
    path = sock_dir / "role.sock"
    path.write_text("the owner's notes")
    with pytest.raises(DaemonError, match="exists and is not a socket"):
        bind_unix_socket(path)
    assert path.read_text() == "the owner's notes"


def test_a_world_writable_directory_without_sticky_bit_is_refused(sock_dir):
    shared = sock_dir / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    try:
        with pytest.raises(DaemonError, match="no sticky bit, so anyone could replace"):
            bind_unix_socket(shared / "role.sock")
        assert not (shared / "role.sock").exists()
        shared.chmod(0o1777)  # like /tmp: only a file's owner may remove or rename it
        with bind_unix_socket(shared / "role.sock"):
            pass
    finally:
        (shared / "role.sock").unlink(missing_ok=True)
        shared.rmdir()


def test_the_socket_directory_is_created_when_missing(sock_dir):
    with bind_unix_socket(sock_dir / "run" / "role.sock") as sock:
        assert sock.getsockname() == str(sock_dir / "run" / "role.sock")
    (sock_dir / "run" / "role.sock").unlink()
    (sock_dir / "run").rmdir()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.read(100))
    await writer.drain()
    writer.close()


def test_listening_serves_and_removes_its_socket_on_exit(sock_dir):
    path = sock_dir / "role.sock"

    async def scenario() -> bytes:
        async with listening(path, echo, mode=0o660):
            assert mode_of(path) == 0o660
            reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(b"ping")
            answer = await reader.read(100)
            writer.close()
            return answer

    assert asyncio.run(scenario()) == b"ping"
    assert not path.exists()


def test_accepting_hands_over_each_connection_as_a_non_blocking_socket(sock_dir):
    """inferproxy's listener: no stream or task, the bare socket, ready to splice."""
    path = sock_dir / "infer.sock"
    taken: list[socket.socket] = []

    async def scenario() -> None:
        async with accepting(path, taken.append, mode=0o660):
            assert mode_of(path) == 0o660
            clients = [await asyncio.open_unix_connection(str(path)) for _ in range(2)]
            for _ in range(1000):  # the loop runs the accepting callback (bound: 10 s)
                if len(taken) == len(clients):
                    break
                await asyncio.sleep(0.01)
            for _, writer in clients:
                writer.close()

    asyncio.run(scenario())
    assert [conn.getblocking() for conn in taken] == [False, False]
    assert not path.exists()
    for conn in taken:
        conn.close()


def test_accepting_pauses_when_out_of_descriptors_and_then_takes_the_connection(
    sock_dir, monkeypatch, caplog
):
    """EMFILE from accept() pauses accepting (as asyncio's server does) instead of spinning on
    a listener that stays readable; the waiting connection is taken once it can be."""
    path = sock_dir / "infer.sock"
    taken: list[socket.socket] = []

    class OutOfDescriptorsOnce(socket.socket):
        failed = False

        def accept(self):  # type: ignore[override]
            if not OutOfDescriptorsOnce.failed:
                OutOfDescriptorsOnce.failed = True
                raise OSError(errno.EMFILE, "Too many open files")
            return super().accept()

    bind_for_real = daemon.bind_unix_socket

    def bind(path: Path, **options) -> socket.socket:
        return OutOfDescriptorsOnce(fileno=bind_for_real(path, **options).detach())

    monkeypatch.setattr(bare, "ACCEPT_RETRY", 0.05)
    monkeypatch.setattr(daemon, "bind_unix_socket", bind)

    async def scenario() -> None:
        async with accepting(path, taken.append):
            _, writer = await asyncio.open_unix_connection(str(path))
            for _ in range(1000):  # bound: 10 s
                if taken:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(scenario())
    assert OutOfDescriptorsOnce.failed and len(taken) == 1
    assert "cannot accept: [Errno 24] Too many open files; retrying in 0.05 s" in caplog.text
    taken[0].close()


def test_listening_leaves_a_successors_socket_alone(sock_dir):
    path = sock_dir / "role.sock"
    successor = socket.socket(socket.AF_UNIX)

    async def scenario() -> None:
        async with listening(path, echo):
            path.unlink()  # a restarted role took over the path while this one was stopping
            successor.bind(str(path))
            successor.listen()

    try:
        asyncio.run(scenario())
        assert path.is_socket()
    finally:
        successor.close()


# --- systemd ------------------------------------------------------------------------------------


@pytest.fixture
def systemd(sock_dir, monkeypatch) -> Iterator[NotifySocket]:
    receiver = NotifySocket(sock_dir / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(sock_dir / "notify"))
    yield receiver
    receiver.sock.close()


def test_ready_status_and_stopping_reach_the_notify_socket(systemd):
    notifier = Notifier()
    notifier.ready("serving /run/boxmaker/loop/loop.sock")
    notifier.status("two lines\nbecome one")
    notifier.stopping()
    assert systemd.receive() == (
        "READY=1\nSTATUS=serving /run/boxmaker/loop/loop.sock",
        os.getpid(),
    )
    assert systemd.receive()[0] == "STATUS=two lines become one"
    assert systemd.receive()[0] == "STOPPING=1"


def test_without_a_notify_socket_notifications_are_no_ops(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    Notifier().ready("nobody listens")  # does not raise


@pytest.mark.parametrize(
    ("environ", "seconds"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 30.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
    ],
)
def test_the_watchdog_interval_is_systemds_for_this_process(environ, seconds):
    assert watchdog_interval(environ) == seconds


def test_keep_watchdog_pings_until_cancelled(systemd):
    async def scenario() -> None:
        pinger = asyncio.ensure_future(Notifier().keep_watchdog({"WATCHDOG_USEC": "20000"}))
        received = [await asyncio.to_thread(systemd.receive) for _ in range(3)]
        pinger.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pinger
        assert [text for text, _ in received] == ["WATCHDOG=1"] * 3

    asyncio.run(scenario())


def test_keep_watchdog_returns_when_systemd_asks_for_none():
    asyncio.run(asyncio.wait_for(Notifier(lambda _: None).keep_watchdog({}), 10))


# --- stopping -----------------------------------------------------------------------------------


def sigterm_once_started(
    cleanup: Callable[[], Awaitable[None]], steps: list[str]
) -> signal.Signals | None:
    """Run a main that waits forever and runs ``cleanup`` when cancelled; send SIGTERM to this
    process once it has started. Returns what ``run_until_signalled`` returned."""

    async def main(started: asyncio.Event) -> None:
        try:
            started.set()
            await wait_forever()
        finally:
            await cleanup()

    async def scenario() -> signal.Signals | None:
        started = asyncio.Event()
        running = asyncio.ensure_future(
            run_until_signalled(main(started), on_stop=lambda: steps.append("on_stop"))
        )
        await started.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        return await running

    return asyncio.run(scenario())


def test_sigterm_cancels_main_and_its_cleanup_runs():
    steps: list[str] = []

    async def cleanup() -> None:
        await asyncio.sleep(0)  # cleanup may await
        steps.append("cleaned up")

    assert sigterm_once_started(cleanup, steps) is signal.SIGTERM
    assert steps == ["on_stop", "cleaned up"]


def test_a_second_signal_during_cleanup_does_not_interrupt_it():
    steps: list[str] = []

    async def cleanup() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.01)  # the second signal is delivered while cleanup runs
        steps.append("cleaned up")

    assert sigterm_once_started(cleanup, steps) is signal.SIGTERM
    assert steps == ["on_stop", "cleaned up"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers removed


def test_a_main_that_returns_by_itself_returns_none():
    async def main() -> str:
        return "done"

    assert asyncio.run(run_until_signalled(main())) is None


def test_an_error_from_main_propagates_unchanged():
    async def main() -> None:
        raise DaemonError("/run/x.sock: cannot bind")

    with pytest.raises(DaemonError, match="cannot bind"):
        asyncio.run(run_until_signalled(main()))
