"""shell.run run directly, and the egress bridge against a local Unix socket server."""

from __future__ import annotations

import os
import resource
import socket
import threading

import pytest
from toolkit import bridge
from toolkit.bridge import start_bridge

WAIT = 600.0  # a guard against a hang, never a speed assumption


def test_a_command_runs_in_the_granted_directory(bx_tool, tmp_path):
    call = bx_tool("shell.run", {"argv": ["pwd"], "cwd": str(tmp_path)}, "--root", str(tmp_path))
    assert call.status == 0
    assert call.content == f"[exit status 0]\n{tmp_path}\n"
    assert call.document["untrusted"] is False


def test_exit_status_and_stderr_are_reported(bx_tool, tmp_path):
    argv = ["sh", "-c", "echo oops >&2; exit 3"]
    call = bx_tool("shell.run", {"argv": argv, "cwd": str(tmp_path)}, "--root", str(tmp_path))
    assert call.content == "[exit status 3]\noops\n"


def test_a_working_directory_outside_the_grant_is_refused(bx_tool, tmp_path):
    (tmp_path / "in").mkdir()
    call = bx_tool("shell.run", {"argv": ["pwd"], "cwd": "/"}, "--root", str(tmp_path / "in"))
    assert call.status == 1 and "outside the granted paths" in call.error


def test_a_missing_command_is_a_tool_error(bx_tool, tmp_path):
    call = bx_tool(
        "shell.run", {"argv": ["no-such-cmd-x"], "cwd": str(tmp_path)}, "--root", str(tmp_path)
    )
    assert call.error == "'no-such-cmd-x': command not found"


def test_a_flood_of_output_is_stopped_at_the_cap(bx_tool, tmp_path):
    call = bx_tool(
        "shell.run", {"argv": ["yes"], "cwd": str(tmp_path)}, "--root", str(tmp_path),
        "--cap", "100",
    )
    assert call.content.startswith("[stopped: output over the cap]\ny\ny")
    assert call.document["truncated"] is True


@pytest.fixture
def restore_proxy_env(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "unset-by-test")


def test_the_bridge_forwards_loopback_connections_to_the_proxy_socket(tmp_path, restore_proxy_env):
    path = str(tmp_path / "proxy.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()

    def answer_once() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while chunk := conn.recv(1024):
                data += chunk
            conn.sendall(b"got:" + data)

    threading.Thread(target=answer_once, daemon=True).start()
    port = start_bridge(path)
    assert os.environ["HTTP_PROXY"] == f"http://127.0.0.1:{port}"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        client.sendall(b"hello")
        client.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := client.recv(1024):
            reply += chunk
    server.close()
    assert reply == b"got:hello"


def test_a_connection_the_bridge_cannot_serve_is_closed_not_left_hanging(
        tmp_path, restore_proxy_env, monkeypatch):
    """No thread for one direction of a connection (the sandbox uid's process limit, shared by
    the calls of a root brokerd): the tool's connection ends at once. It hung until the call's
    deadline (a whole run beside attack 31k waited out a 900 s limit)."""
    path = str(tmp_path / "proxy.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()

    pumps = []

    class OnePump(threading.Thread):  # the second pump of a connection cannot start
        def start(self) -> None:
            if self._target is bridge._pump:  # type: ignore[attr-defined]
                pumps.append(self)
                if len(pumps) == 2:
                    raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(bridge.threading, "Thread", OnePump)
    port = start_bridge(path)
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
        client.sendall(b"hello")
        assert client.recv(1024) == b""  # closed, not a timeout
    server.close()


@pytest.mark.parametrize("high", [False, True], ids=["low descriptor", "past 1023"])
@pytest.mark.parametrize("ended", [False, True], ids=["brokerd's go", "call ended"])
def test_the_lifeline_decides_whether_anything_runs(bx_tool, tmp_path, high, ended):
    """``--lifeline=FD``: with brokerd's go on it the tool runs; closed before any go, nothing
    runs, whatever the descriptor's number (select() took none past 1023: attack 31k, K6b)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if high and hard < 1600:
        pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is under 1600")
    read_end, write_end = os.pipe()
    number = read_end
    try:
        if high:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1600), hard))
            number = os.dup2(read_end, 1500)
            os.close(read_end)
        if ended:
            os.close(write_end)
        else:
            os.write(write_end, b"\x01")
        call = bx_tool("shell.run", {"argv": ["touch", "ran"], "cwd": str(tmp_path)},
                       "--root", str(tmp_path), f"--lifeline={number}")
    finally:
        if not ended:
            os.close(write_end)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert (tmp_path / "ran").exists() != ended, call
    if ended:
        assert call.status != 0 and "Nothing ran" in call.document["error"], call
    with pytest.raises(OSError):
        os.fstat(number)  # the toolkit closed it: no tool inherits it
