"""inferproxy, run as systemd runs it: forwarding, half-close, backpressure, readiness, shutdown,
socket permissions and config errors."""

from __future__ import annotations

import grp
import hashlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from inferproxy.proxy import SEND_BUFFER
from support.inferproxy import start_proxy, write_config
from support.requires import require

from .harness import (
    ThreadedUpstream,
    read_all,
    running_proxy,
    short_tempdir,
)

MIB = 1 << 20


def answer_after_eof(conn: socket.socket) -> None:
    """Read until the client half-closes, then answer with what arrived, and close."""
    received = read_all(conn)
    conn.sendall(b"got " + str(len(received)).encode() + b": " + received[:64])


def test_bytes_go_both_ways_and_a_half_close_reaches_the_upstream():
    with ThreadedUpstream(answer_after_eof) as upstream, running_proxy(upstream.address) as proxy:
        client = proxy.connect()
        client.sendall(b"hello upstream")
        client.shutdown(socket.SHUT_WR)  # the upstream answers only after it sees EOF
        assert read_all(client) == b"got 14: hello upstream"
        client.close()
        assert proxy.stop()[0] == 0
    assert not upstream.errors


def test_a_large_transfer_arrives_whole_in_both_directions():
    payload = os.urandom(24 * MIB)

    def hash_and_echo(conn: socket.socket) -> None:
        digest = hashlib.sha256()
        while chunk := conn.recv(1 << 16):
            digest.update(chunk)
        conn.sendall(digest.hexdigest().encode() + payload)

    with ThreadedUpstream(hash_and_echo) as upstream, running_proxy(upstream.address) as proxy:
        client = proxy.connect()
        client.sendall(payload)
        client.shutdown(socket.SHUT_WR)
        answer = read_all(client)
        client.close()
    assert answer[:64].decode() == hashlib.sha256(payload).hexdigest()
    assert answer[64:] == payload


def test_a_client_that_does_not_read_holds_the_upstream_back():
    """Backpressure: when the client stops reading, the proxy stops reading from the upstream,
    so the upstream's writes block long before 64 MiB instead of filling the proxy's memory."""
    accepted = []
    blocked = threading.Event()

    def push(conn: socket.socket) -> None:
        conn.settimeout(2)  # a send that cannot finish in 2 s counts as blocked
        chunk = b"x" * (1 << 16)
        try:
            for _ in range(1024):
                accepted.append(conn.send(chunk))
        except TimeoutError:
            blocked.set()

    with ThreadedUpstream(push) as upstream, running_proxy(upstream.address) as proxy:
        client = proxy.connect()
        client.sendall(b"go")
        assert blocked.wait(timeout=120), "the upstream sent 64 MiB into a client not reading"
        assert sum(accepted) < 16 * MIB
        client.close()


def test_a_tcp_upstream_on_loopback_works():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    with running_proxy(f"tcp://127.0.0.1:{port}") as proxy:
        client = proxy.connect()
        client.sendall(b"ping")
        conn, _ = listener.accept()
        assert conn.recv(4) == b"ping"
        conn.sendall(b"pong")
        conn.close()
        assert read_all(client) == b"pong"
        client.close()
    listener.close()


def test_upstream_down_closes_the_clients_connection_and_the_proxy_keeps_running():
    directory = short_tempdir()
    with running_proxy(f"unix:{directory}/absent.sock") as proxy:
        for _ in range(2):
            client = proxy.connect()
            try:  # the proxy may close before, while or after the request is sent
                client.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_all(client) == b""
            except (BrokenPipeError, ConnectionResetError):
                pass
            client.close()
        status, stderr = proxy.stop()
    directory.rmdir()
    assert status == 0
    assert "unreachable" in stderr
    assert "GET /health" not in stderr  # nothing of the traffic is logged


def test_the_socket_gets_the_configured_mode_and_group():
    group = grp.getgrgid(os.getgid()).gr_name
    with (
        ThreadedUpstream(answer_after_eof) as upstream,
        running_proxy(upstream.address, mode=0o600, group=group) as proxy,
    ):
        info = proxy.socket.stat()
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_gid == os.getgid()


def test_sigterm_exits_0_and_removes_the_socket():
    with ThreadedUpstream(answer_after_eof) as upstream, running_proxy(upstream.address) as proxy:
        status, _ = proxy.stop()
        assert status == 0
        assert not proxy.socket.exists()


def test_sigterm_cuts_the_connections_still_open_and_exits_0():
    """The stop closes the socket, then cancels every forward in the daemon's task group: an
    answer still streaming ends at once, and nothing waits for it to finish."""
    finished = threading.Event()

    def streams_until_told(conn: socket.socket) -> None:
        conn.sendall(b"first event")
        finished.wait(60)  # the rest of a long answer

    with ThreadedUpstream(streams_until_told) as upstream, \
            running_proxy(upstream.address) as proxy:
        client = proxy.connect()
        client.sendall(b"POST /completion HTTP/1.1\r\n\r\n")
        received = b""
        while len(received) < len(b"first event"):
            received += client.recv(64)
        status, stderr = proxy.stop()
        cut = read_all(client)
        finished.set()
        client.close()
    assert (received, status, cut) == (b"first event", 0, b"")
    assert "stopped after 1 connections" in stderr
    assert upstream.errors == []


def test_the_watchdog_is_fed_when_asked_for():
    with (
        ThreadedUpstream(answer_after_eof) as upstream,
        running_proxy(upstream.address, env={"WATCHDOG_USEC": "200000"}, watchdog=True) as proxy,
    ):
        assert proxy.notify.wait_for("WATCHDOG=1") == proxy.process.pid


def test_a_stale_socket_file_is_replaced():
    with ThreadedUpstream(answer_after_eof) as upstream:
        directory = short_tempdir()
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(directory / "infer.sock"))
        stale.close()  # the file stays, as after a crash
        process = start_proxy(write_config(directory, upstream.address))
        try:
            while not _accepts(directory / "infer.sock") and process.poll() is None:
                time.sleep(0.05)
            assert process.poll() is None
        finally:
            process.terminate()
            process.communicate(timeout=30)
            for path in directory.iterdir():
                path.unlink()
            directory.rmdir()
    assert process.returncode == 0


def _accepts(path) -> bool:
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"upstream": "http://127.0.0.1:8080"}, "inferproxy.upstream: expected tcp://HOST:PORT"),
        ({"upstream": "unix:/x", "group": "no-such-group-bx"}, "inferproxy.group: no such group"),
        ({"upstream": "unix:/x", "mode": "rw"}, "inferproxy.mode"),
    ],
)
def test_bad_config_is_a_clear_error_and_exit_1(setting, message):
    directory = short_tempdir()
    upstream = setting.pop("upstream")
    config = write_config(directory, upstream, **setting)
    result = subprocess.run(
        [sys.executable, "-m", "inferproxy", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    config.unlink()
    directory.rmdir()
    assert result.returncode == 1
    assert str(config) in result.stderr and message in result.stderr


def test_a_missing_config_file_is_exit_1_naming_it(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "inferproxy", "serve", "--config", str(tmp_path / "nope.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "nope.toml: no such config file" in result.stderr


def echo_until_eof(conn: socket.socket) -> None:
    while data := conn.recv(4096):
        conn.sendall(data)


def proxy_send_buffers(pid: int) -> list[int]:
    """The send buffer (``tb`` of ss's ``skmem``) of each connected Unix socket ``pid`` holds."""
    listing = subprocess.run(["ss", "-xmpH", "state", "connected"], capture_output=True,
                             text=True, check=True).stdout
    # ss prints a socket's skmem on the line after it, or on the same line; join then split
    entries = listing.replace("\n\t", " ").replace("\n ", " ").splitlines()
    return [int(entry.split(",tb")[1].split(",")[0]) for entry in entries
            if f"pid={pid}," in entry and "skmem:" in entry]


def test_each_forwarded_connection_asks_for_a_send_buffer_as_large_as_a_pipe():
    """Asked 1 MiB (SEND_BUFFER), the kernel grants twice what it allows, capped at wmem_max;
    either way more than its default, on both of the proxy's sockets of the connection."""
    require("ss")
    wmem_max = int(Path("/proc/sys/net/core/wmem_max").read_text())
    default = int(Path("/proc/sys/net/core/wmem_default").read_text())
    with ThreadedUpstream(echo_until_eof) as upstream, running_proxy(upstream.address) as proxy:
        before = proxy_send_buffers(proxy.process.pid)
        client = proxy.connect()
        client.sendall(b"ping")
        assert client.recv(4) == b"ping"  # both of the proxy's sockets are set up by now
        during = proxy_send_buffers(proxy.process.pid)
        client.close()
        assert proxy.stop()[0] == 0
    # the sockets it held before (the event loop's own pair, the notify socket) keep the default
    assert set(before) == {default}
    assert sorted(during) == sorted([*before, *[2 * min(SEND_BUFFER, wmem_max)] * 2])
    assert 2 * min(SEND_BUFFER, wmem_max) > default
