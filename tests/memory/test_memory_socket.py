"""``memoryd serve``: memory.sock round trips against the real daemon, socket mode 0600,
READY=1 to systemd once bound, a clean exit on SIGTERM."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from bxcore.errors import ErrorCode, WireError
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import memory as proto
from bxcore.protocol import memory_owner as owner_wire
from bxcore.tools import ToolResponse

from .support import answer, append_log, call_frame, user


@pytest.fixture
def daemon(tmp_path: Path):
    home, run_dir = tmp_path / "home", tmp_path / "run"
    run_dir.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(f'[paths]\nhome = "{home}"\nrun = "{run_dir}"\n')
    notify_path = tmp_path / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(30)
    env = {**os.environ, "NOTIFY_SOCKET": str(notify_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "serve", "--config", str(config)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        message = notify.recv(256)
        yield process, run_dir / "memory.sock", home, message
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()
        process.stderr.close()
        notify.close()


def ask(path: Path, frame: Frame) -> Frame:
    with SyncFrameSocket.connect(path, kinds=proto.FROM_MEMORYD) as sock:
        sock.write(frame)
        return sock.read(timeout=30)


def test_serve_binds_memory_sock_0600_and_says_ready(daemon):
    _, path, _, message = daemon
    assert message == b"READY=1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_memory_sock_round_trips(daemon):
    _, path, home, _ = daemon
    records = [user("the cobalt kettle"), answer("kettle noted")]
    first = append_log(home, "s1", 0, records)
    turn = proto.TurnFinished(session="s1", epoch=0, first_line=first, records=records)
    recorded = ask(path, Frame.of(proto.TURN_FINISHED, turn, final=False))
    assert recorded.kind == proto.TURN_RECORDED and recorded.final
    assert recorded.parse(proto.TurnRecorded).indexed == 2

    response = ask(path, call_frame("recall", {"query": "cobalt"}))
    assert response.kind == proto.TOOL_RESPONSE
    assert "cobalt kettle" in response.parse(ToolResponse).content

    written = ask(path, call_frame("memory", {"action": "add", "file": "memory.md",
                                              "text": "kettles matter"}))
    assert written.parse(ToolResponse).status == "ok"
    snapshot = ask(path, Frame.of(proto.IDENTITY_REQUEST,
                                  proto.IdentityRequest(session="s1", epoch=1), final=False))
    assert snapshot.parse(proto.IdentitySnapshot).files[1].text == "kettles matter"


def test_a_bad_frame_gets_an_error_naming_the_field(daemon):
    _, path, _, _ = daemon
    frame = Frame(kind=proto.IDENTITY_REQUEST, final=False, body={"session": "s1"})
    error = ask(path, frame)
    assert error.kind == proto.ERROR
    wire = error.parse(WireError)
    assert wire.code == ErrorCode.BAD_FRAME and "epoch" in wire.message
    unknown = ask(path, call_frame("shell", {"cmd": "ls"}))
    assert unknown.parse(WireError).code == ErrorCode.BAD_FRAME


def test_a_frame_that_cannot_be_decoded_is_answered_bad_frame_not_dropped(daemon):
    _, path, _, _ = daemon
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.connect(str(path))
        raw.sendall(b"\x00\x00\x00\x05nope!")
        error = SyncFrameSocket(raw, kinds=proto.FROM_MEMORYD).read(timeout=30)
    wire = error.parse(WireError)
    assert (error.kind, error.final, wire.code) == (proto.ERROR, True, ErrorCode.BAD_FRAME)
    assert wire.message.startswith("frame is not JSON")


def test_sigterm_ends_the_daemon_and_removes_its_socket(daemon):
    process, path, _, _ = daemon
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert not path.exists()


def memoryd(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    config = home.parent / "config.toml"
    return subprocess.run([sys.executable, "-m", "memoryd", *argv, "--config", str(config)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_owners_undo_and_reindex_are_done_by_the_serving_memoryd(daemon):
    """On the appliance only memoryd's user may write its files: the owner's commands that
    change them go to memory-owner.sock and the daemon does them (its log says so)."""
    process, path, home, _ = daemon
    owners = path.with_name("memory-owner.sock")
    assert stat.S_IMODE(owners.stat().st_mode) == 0o600
    added = ask(path, call_frame("memory", {"action": "add", "file": "memory.md",
                                            "text": "herons stand still"}))
    assert added.parse(ToolResponse).status == "ok"

    undone = memoryd(home, "undo", "memory.md")
    assert undone.returncode == 0, undone.stderr
    assert "undo edit 1 (add)" in undone.stdout
    assert (home / "memory" / "memory.md").read_text() == ""
    refused = memoryd(home, "undo", "notes.md")
    assert refused.returncode == 1 and "notes.md is append-only" in refused.stderr
    reindexed = memoryd(home, "reindex")
    assert reindexed.returncode == 0 and reindexed.stdout.startswith("reindexed: ")

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    log = process.stderr.read().decode()
    assert "owner's command:" in log and "undo edit 1 (add)" in log, log
    assert "owner's command: reindexed: " in log, log
    assert not owners.exists()


def test_reading_the_journal_takes_no_writer_lock(daemon):
    """``memoryd log`` and ``staged`` read while a write holds the lock (the owner, who may not
    write memory/edits/.lock on the appliance, reads it the same way)."""
    _, path, home, _ = daemon
    ask(path, call_frame("memory", {"action": "note", "text": "the cobalt kettle"}))
    fd = os.open(home / "memory" / "edits" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        listed = memoryd(home, "log")
        staged = memoryd(home, "staged")
    finally:
        os.close(fd)
    assert listed.returncode == 0, listed.stderr
    assert "notes.md" in listed.stdout and "the cobalt kettle" in listed.stdout
    assert staged.returncode == 0 and staged.stdout == ""


def test_a_bad_owners_command_is_refused_naming_the_field(daemon):
    _, path, _, _ = daemon
    frame = Frame(kind=owner_wire.MEMORY_COMMAND, final=True, body={"command": "accept"})
    with SyncFrameSocket.connect(path.with_name("memory-owner.sock"),
                                 kinds=owner_wire.FROM_MEMORYD_OWNER) as sock:
        sock.write(frame)
        error = sock.read(timeout=30).parse(WireError)
    assert error.code == ErrorCode.BAD_REQUEST and "seq" in error.message


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the command as another user: needs root")
def test_with_no_memoryd_serving_a_user_who_cannot_write_its_files_gets_a_clear_error():
    """No socket answers and the files are not the caller's: one line naming what failed and
    where, not a traceback, and nothing is written."""
    # pytest's own temp directories are root's alone: the other user must reach this one.
    tmp_path = Path(tempfile.mkdtemp(prefix="bx-memory-owner-", dir="/var/tmp"))
    try:
        _clear_error_as_another_user(tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def _clear_error_as_another_user(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "memory").mkdir(parents=True)
    for path in (tmp_path, home, home / "memory"):
        path.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(f'[paths]\nhome = "{home}"\nrun = "{tmp_path / "run"}"\n')
    config.chmod(0o644)
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         str(Path(sys.executable).parent / "memoryd"), "undo", "memory.md", "--config",
         str(config)], capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "no memoryd answers on" in done.stderr
    assert f"Permission denied: {home / 'memory'}" in done.stderr
    assert list((home / "memory").iterdir()) == []
