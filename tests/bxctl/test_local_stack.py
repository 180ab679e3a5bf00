"""`bxctl up` / `status` / `chat` / `doctor` / `down`: the newcomer's whole harness, for real.

llama-server (router mode, the project's presets), inferproxy, memoryd, brokerd (bubblewrap or
podman) and loopd (in its own network namespace) start and report READY=1; a turn is answered by
the tiny model (``--model qwen-tools``, named so the test stays fast whatever the default);
`down` leaves no process, socket or record behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bxcore.config.broker import DEFAULT_SANDBOX_UID
from bxctl.stack.notify import NotifyListener
from bxctl.stack.processes import Started, alive, stop
from support.bxctl import bxctl
from support.llama import llama_paths, require_llama


@pytest.mark.real_server
def test_up_chat_doctor_down_leaves_nothing_behind(tmp_path, monkeypatch):
    require_llama()
    binary, models = llama_paths()
    state = tmp_path / "stack"
    home = tmp_path / "home"  # the stack's ~ (brokerd's home), where the example grants point
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    up = bxctl("up", "--no-chat", "--state", str(state), "--llama-server", str(binary),
               "--models", str(models), "--model", "qwen-tools")
    try:
        assert up.returncode == 0, up.stderr
        for role in ("llama-server", "inferproxy", "memoryd", "brokerd", "loopd", "scheduler"):
            assert f"up: {role}" in up.stderr
        # the example inbox grant's directory, ready for the uid the tools run as
        tool = f"sandbox_uid {DEFAULT_SANDBOX_UID}" if os.geteuid() == 0 else "you"
        assert f"up: grants: made {home / 'inbox'} for writes by {tool}" in up.stderr

        status = bxctl("status", "--state", str(state))
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count("running") == 6

        again = bxctl("up", "--no-chat", "--state", str(state), "--llama-server", str(binary),
                      "--models", str(models), "--model", "qwen-tools")
        assert again.returncode == 1 and "already running" in again.stderr

        pids = {line.split()[0]: int(line.split()[2]) for line in status.stdout.splitlines()}
        if "network: loopback only" in up.stderr:
            assert os.readlink(f"/proc/{pids['loopd']}/ns/net") != os.readlink("/proc/self/ns/net")

        chat = bxctl("chat", "--socket", str(state / "run" / "loop.sock"), "--say",
                     "Say hello in one short sentence.")
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.strip()

        doctor = bxctl("doctor", "--config", str(state / "config.toml"))
        assert "ok   socket loop" in doctor.stdout
        assert "ok   audit chain" in doctor.stdout
        assert "ok   grant files" in doctor.stdout
        # the chat's session recorded the serving settings it began under; nothing changed since
        assert "ok   serving since the latest session: ok   serving_since_session: unchanged " \
            "since session" in doctor.stdout, doctor.stdout
    finally:
        down = bxctl("down", "--state", str(state))
    assert down.returncode == 0, down.stderr
    assert not (state / "stack.json").exists()
    assert sorted(p.name for p in (state / "run").iterdir() if p.is_socket()) == []
    for pid in pids.values():
        assert not alive(pid)


def test_down_with_nothing_running_says_so(tmp_path):
    result = bxctl("down", "--state", str(tmp_path))
    assert result.returncode == 0 and "nothing is running" in result.stderr


def test_status_with_nothing_running_fails_with_what_to_do(tmp_path):
    result = bxctl("status", "--state", str(tmp_path))
    assert result.returncode == 1 and "bxctl up" in result.stderr


_READY_CHILD = """
import os, socket, sys, time
addr = os.environ["NOTIFY_SOCKET"]
time.sleep(float(sys.argv[1]))
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"READY=1\\nSTATUS=up", addr)
time.sleep(60)
"""


def test_readiness_comes_from_the_daemons_own_notify_message(tmp_path):
    listener = NotifyListener(tmp_path / "notify.sock")
    env = {**os.environ, "NOTIFY_SOCKET": str(listener.path)}
    child = subprocess.Popen([sys.executable, "-c", _READY_CHILD, "0.2"], env=env,
                             start_new_session=True)
    try:
        assert listener.wait_ready({child.pid}, timeout=60) == child.pid
    finally:
        listener.close()
        stop([Started("child", child.pid, [], None)], grace=5)
    assert not alive(child.pid)


def test_a_daemon_that_dies_before_ready_is_not_waited_for(tmp_path):
    listener = NotifyListener(tmp_path / "notify.sock")
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    asked: list[bool] = []

    def still_alive() -> bool:
        asked.append(child.poll() is None)
        return asked[-1]

    try:
        assert listener.wait_ready({child.pid}, timeout=600, alive=still_alive) is None
        assert asked and asked[-1] is False  # it gave up because the daemon died
    finally:
        listener.close()


def test_stop_kills_what_ignores_sigterm_and_removes_its_socket(tmp_path):
    sock = tmp_path / "x.sock"
    sock.write_text("")
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal,time; signal.signal(signal.SIGTERM, "
         "signal.SIG_IGN); print('ok', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, start_new_session=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == b"ok"
    killed = stop([Started("stubborn", child.pid, [], str(sock))], grace=0.5)
    assert killed == ["stubborn"]
    assert not alive(child.pid) and not sock.exists()


_UNREAPED = """
import os, time
child = os.fork()
if child == 0:
    os._exit(0)
print(child, flush=True)
time.sleep(600)  # never waits for it: the child stays this process's zombie
"""


def test_a_daemon_that_exited_is_not_alive_while_its_parent_has_not_reaped_it():
    """After `bxctl up` exits, its daemons are init's children: one that `down` stopped stays a
    zombie until init reaps it, which an init other than systemd may do seconds later."""
    parent = subprocess.Popen([sys.executable, "-c", _UNREAPED], stdout=subprocess.PIPE,
                              start_new_session=True)
    try:
        assert parent.stdout is not None
        zombie = int(parent.stdout.readline())
        stat = Path(f"/proc/{zombie}/stat")
        deadline = time.monotonic() + 60  # a hang guard, not a speed check
        while stat.read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, stat.read_text()
            time.sleep(0.01)
        assert not alive(zombie)
        assert alive(parent.pid)  # the parent, sleeping, still runs
    finally:
        parent.kill()
        parent.wait()
