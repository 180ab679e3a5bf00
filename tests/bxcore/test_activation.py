"""bxcore.activation with real processes and real sockets: a role takes the listening socket
systemd passed (LISTEN_FDS/LISTEN_PID, descriptors from 3) instead of binding its own, only when
it is meant for its pid, clears the variables, keeps the socket's file when it stops, and a
client that connects while no server runs is answered by the next one. The passing is done by
systemd's own ``systemd-socket-activate`` where it can be, else as it does (``LISTEN_PID=$$``,
then exec), through a real child's environment."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.requires import needs

SERVER = Path(__file__).with_name("activated_server.py")
WAIT = 120.0  # a loaded 2-core machine: a bound on hanging, never a measure
# Each example starts real processes: a few show the property, the long profile runs more.
FEW = settings(max_examples=int(os.environ.get("BOXMAKER_ACTIVATION_EXAMPLES", "6")))
# The child is exec'd by sh, so $$ is its pid: how systemd sets LISTEN_PID after fork.
AS_SYSTEMD = 'exec 3<&0 0</dev/null; LISTEN_PID={pid} LISTEN_FDS={count} exec "$@"'


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="bx-act-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def held_socket(path: Path, mode: int) -> socket.socket:
    """A listening socket at ``path`` with ``mode``, held by the test as systemd holds a
    ``.socket`` unit's."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, mode)
    sock.listen(16)
    return sock


def passed(held: socket.socket, argv: list[str], *, pid: str = "$$", count: str = "1"
           ) -> subprocess.Popen[str]:
    """``argv`` with ``held`` as descriptor 3 and LISTEN_PID/LISTEN_FDS in its environment."""
    return subprocess.Popen(
        ["sh", "-c", AS_SYSTEMD.format(pid=pid, count=count), "sh", *argv],
        stdin=held.fileno(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def server(path: Path, mode: int = 0o600) -> list[str]:
    return [sys.executable, str(SERVER), "serve", str(path), f"{mode:o}"]


def started(process: subprocess.Popen[str]) -> int:
    """The server's pid once it serves (its first line)."""
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving "):
        process.kill()
        raise AssertionError(f"no server: {line!r}\n{process.communicate(timeout=WAIT)[1]}")
    return int(line.split()[1])


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=WAIT)


def connected(path: Path, line: str) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(WAIT)
    client.connect(str(path))
    client.sendall(line.encode() + b"\n")
    return client


def first_client(path: Path) -> socket.socket:
    """A connection once the activator listens (its file appears at bind(), before listen())."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return connected(path, "first")
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def reply(client: socket.socket) -> str:
    with client, client.makefile("r") as answers:
        return answers.readline().rstrip("\n")


@FEW
@given(waiting=st.integers(min_value=1, max_value=4), restarts=st.integers(1, 2))
def test_clients_that_connect_while_the_server_restarts_are_answered_by_the_next_one(
    waiting, restarts
):
    """The socket outlives each server: connections made while none runs wait in its queue
    and are answered, in order, by the server started next; its file is never removed."""
    directory = Path(tempfile.mkdtemp(prefix="bx-act-"))
    path = directory / "role.sock"
    held = held_socket(path, 0o600)
    try:
        first = passed(held, server(path))
        pid = started(first)
        assert reply(connected(path, "hello")) == f"{pid} hello"
        stop(first)
        for restart in range(restarts):
            assert stat.S_ISSOCK(path.lstat().st_mode), "a stopping server removed the file"
            clients = [connected(path, f"r{restart}-{n}") for n in range(waiting)]
            nxt = passed(held, server(path))
            pid = started(nxt)
            try:
                assert [reply(c) for c in clients] == [
                    f"{pid} r{restart}-{n}" for n in range(waiting)]
            finally:
                stop(nxt)
        assert stat.S_ISSOCK(path.lstat().st_mode)
    finally:
        held.close()
        shutil.rmtree(directory, ignore_errors=True)


@FEW
@given(pid=st.sampled_from(["$$", "1", "", "x", "$(($$ + 1))"]),
       count=st.sampled_from(["1", "0", "", "-1", "one"]))
def test_the_socket_is_taken_only_when_it_is_meant_for_this_pid_and_the_variables_go(pid, count):
    """sd_listen_fds: LISTEN_PID must be the process's own pid and LISTEN_FDS a count; either
    way LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are gone from its environment (its children,
    e.g. the sandboxes brokerd starts, never see them)."""
    directory = Path(tempfile.mkdtemp(prefix="bx-act-"))
    path = directory / "role.sock"
    held = held_socket(path, 0o600)
    try:
        child = passed(held, [sys.executable, str(SERVER), "report", str(path)], pid=pid,
                       count=count)
        out, err = child.communicate(timeout=WAIT)
        assert child.returncode == 0, err
        report = json.loads(out)
        assert report == {"taken": pid == "$$" and count == "1", "left": []}, (pid, count)
    finally:
        held.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_a_role_started_without_a_socket_binds_its_own_and_removes_it_when_it_stops(sock_dir):
    path = sock_dir / "role.sock"
    own = subprocess.Popen(server(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    pid = started(own)
    assert reply(connected(path, "alone")) == f"{pid} alone"
    stop(own)
    assert not path.exists()


@needs("systemd-socket-activate")  # Debian's systemd package, beside systemd-analyze
@FEW
@given(socket_mode=st.sampled_from([0o600, 0o660, 0o640, 0o666, 0o755]),
       configured=st.sampled_from([0o600, 0o660, 0o620]))
def test_systemds_own_activation_serves_the_first_client_if_the_modes_agree(
    socket_mode, configured
):
    """systemd-socket-activate binds the path, waits for a client, then starts the role with
    the socket: the client that connected before any server ran is answered. A socket whose
    mode admits more than the config asks for (SocketMode= and the role's config disagree)
    is refused with an error naming the path and both modes, never served."""
    directory = Path(tempfile.mkdtemp(prefix="bx-act-"))
    path = directory / "role.sock"
    activator = subprocess.Popen(
        ["systemd-socket-activate", "--listen", str(path), *server(path, configured)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        while not path.exists():
            assert activator.poll() is None, activator.communicate()[1]
            time.sleep(0.05)
        os.chmod(path, socket_mode)  # as SocketMode= has it, before any client
        client = first_client(path)
        if socket_mode & ~configured:
            _, err = activator.communicate(timeout=WAIT)
            assert activator.returncode == 1
            assert f"{path}: systemd's socket has mode {socket_mode:04o}, wider than the " \
                   f"configured {configured:04o}" in err, err
            client.close()
            return
        pid = started(activator)
        assert reply(client) == f"{pid} first"
    finally:
        if activator.poll() is None:
            stop(activator)
        shutil.rmtree(directory, ignore_errors=True)
