"""The brokerd command: ``serve`` (sd_notify READY=1, 0600 sockets, a real bubblewrap call,
clean SIGTERM), and the offline maintenance bxctl wraps: ``audit verify``, ``grants check``,
``taint rebuild``, ``jobs check`` and ``jobs show``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from brokerd import wiring
from brokerd.cli import main
from brokerd_support import call_tool, make_rig, request, write
from bxcore.config import load_config
from bxcore.tools import ToolResponse
from click.testing import CliRunner
from support.brokerd import start

EXAMPLES = Path(__file__).parents[2] / "grants-examples"


def config(tmp_path: Path, **broker: str) -> Path:
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in broker.items())
    return write(tmp_path, "config.toml", f"""
        [paths]
        home = "{tmp_path / 'home'}"
        run = "{tmp_path / 'run'}"
        [broker]
        grants = "{tmp_path / 'grants'}"
        jobs = "{tmp_path / 'jobs'}"
        {lines}
    """)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_grants_check_explains_the_examples():
    result = invoke("grants", "check", "--dir", str(EXAMPLES), "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["errors"] == []
    assert found["grants"]["ssh-deny"].startswith("denies any tool")
    assert "after the owner approves" in found["grants"]["inbox-write"]


def test_grants_check_fails_on_a_broken_grant(tmp_path):
    write(tmp_path, "bad.toml", 'tools = ["echo"]\nmode = "auto"\n')
    result = invoke("grants", "check", "--dir", str(tmp_path))
    assert result.exit_code == 1
    assert "REFUSED:" in result.output and "bad.toml" in result.output


def rig_after_one_echo_call(tmp_path: Path):
    """A broker that has run one granted ``echo`` call of session s1 (audited, taint written)."""
    rig = make_rig(tmp_path)
    write(rig.grants, "echo.toml", 'tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\n')

    async def calls():
        servers = await start(rig.broker, tmp_path / "b.sock", tmp_path / "a.sock")
        await call_tool(tmp_path / "b.sock", request("echo", '{"text": "a"}'))
        for server in servers:
            server.close()

    asyncio.run(calls())
    return rig


def test_audit_verify_and_taint_rebuild(tmp_path):
    rig = rig_after_one_echo_call(tmp_path)
    cfg = config(tmp_path)
    ok = invoke("audit", "verify", "--config", str(cfg), "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["records"] == 2
    live = (rig.taint_dir / "s1.json").read_bytes()
    rebuilt = invoke("taint", "rebuild", "--config", str(cfg), "--out", str(tmp_path / "t"))
    assert rebuilt.exit_code == 0 and (tmp_path / "t" / "s1.json").read_bytes() == live

    (log,) = sorted(rig.audit_dir.iterdir())
    log.write_bytes(log.read_bytes().replace(b'"secret"', b'"public"'))
    bad = invoke("audit", "verify", "--config", str(cfg))
    assert bad.exit_code == 1 and "edited" in bad.output and log.name in bad.output


@pytest.mark.sandbox  # brokerd builds its sandbox backend (bubblewrap here)
def test_brokerd_start_raises_a_taint_file_that_a_crash_left_behind_the_audit_log(tmp_path):
    """The result is audited before its taint file is written: a crash between the two leaves
    the session looking cleaner than the log says, until brokerd starts again."""
    rig = rig_after_one_echo_call(tmp_path)
    live = (rig.taint_dir / "s1.json").read_bytes()
    (rig.taint_dir / "s1.json").unlink()  # the crash: audited, taint not yet written
    settings = load_config(config(tmp_path))
    wiring.build(settings, wiring.backend_for(settings))
    assert (rig.taint_dir / "s1.json").read_bytes() == live
    wiring.build(settings, wiring.backend_for(settings))  # nothing more to raise
    assert (rig.taint_dir / "s1.json").read_bytes() == live


def test_jobs_check_and_show(tmp_path):
    cfg = config(tmp_path)
    write(tmp_path / "jobs", "morning.toml", 'ask = "Summarise my notes."\n'
          'schedule = "*-*-* 07:30:00"\n')
    write(tmp_path / "jobs", "broken.toml", 'ask = "x"\nschedule = "every full moon"\n')
    checked = invoke("jobs", "check", "--config", str(cfg))
    assert checked.exit_code == 1
    assert "morning" in checked.output and "broken.toml: schedule" in checked.output
    shown = invoke("jobs", "show", "--config", str(cfg), "morning")
    assert json.loads(shown.output)["ask"] == "Summarise my notes."
    assert invoke("jobs", "show", "--config", str(cfg), "../morning").exit_code == 1


def _notify_socket(tmp_path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(60)
    return sock


@pytest.mark.sandbox
def test_serve_is_ready_after_binding_runs_a_real_call_and_stops_on_sigterm(tmp_path):
    cfg = config(tmp_path)
    write(tmp_path / "grants", "echo.toml", 'tools = ["echo"]\nmode = "auto"\n'
          'classes = ["public"]\nresult_class = "public"\n')
    notify = _notify_socket(tmp_path)
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify.sock")}
    daemon = subprocess.Popen([sys.executable, "-m", "brokerd.cli", "serve", "--config", str(cfg)],
                              env=env, stderr=subprocess.PIPE, text=True)
    try:
        message = notify.recv(4096).decode()
        assert "READY=1" in message
        run = tmp_path / "run"
        for name in ("broker.sock", "approve.sock"):
            assert (run / name).stat().st_mode & 0o777 == 0o600
        frames = asyncio.run(call_tool(run / "broker.sock", request("echo", '{"text": "hi"}')))
        response = frames[-1].parse(ToolResponse)
        assert (response.status, response.content) == ("ok", "hi"), response
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
        assert not (run / "broker.sock").exists()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        notify.close()
