"""A granted host is reachable through the per-call egress proxy and nothing else is; limits
stop a runaway; and nothing of the sandbox is left after a call (both backends, for real)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest
from brokerd.policy import NotAuthorized
from brokerd.policy._decision import mint
from brokerd.sandbox import FailureReason, PodmanSandbox, SandboxLimits, ToolFailure, ToolOutput
from bxcore.tools import DataClass, DecisionRecord

from .conftest import CONTAINERS_CONF
from .helpers import (
    GRANTED_HOST,
    REFUSED_HOST,
    command,
    decide,
    python,
    run,
    spec,
    tunnel_script,
)

pytestmark = pytest.mark.sandbox

# A raw CONNECT tunnel through the bridge, then plain HTTP inside it.


def fetch(backend, url: str, hosts: tuple[str, ...]):
    return run(backend, spec("http.fetch", json.dumps({"url": url}), hosts=hosts,
                             data_class=DataClass.PUBLIC))


def test_a_granted_host_is_fetched_through_the_proxy(backend, web_server, egress_proxies):
    granted = f"{GRANTED_HOST}:{web_server}"
    out = fetch(backend, f"http://{granted}/docs/index.html", (granted,))
    assert isinstance(out, ToolOutput), out
    assert out.content.startswith("HTTP 200\n")
    assert out.content.endswith(f"page /docs/index.html for {granted}")
    assert out.untrusted is True
    assert [(e.host, e.allowed) for e in egress_proxies[-1].events] == [(GRANTED_HOST, True)]


def test_any_other_host_is_refused_with_403(backend, web_server, egress_proxies):
    granted = f"{GRANTED_HOST}:{web_server}"
    for url in (f"http://{REFUSED_HOST}:{web_server}/", f"http://{GRANTED_HOST}:1/",
                f"http://127.0.0.1:{web_server}/"):
        refused = fetch(backend, url, (granted,))
        assert isinstance(refused, ToolFailure), refused
        assert "egress proxy refused" in refused.detail
        assert "is not granted to this call" in refused.detail
        assert refused.untrusted is True
    assert not any(event.allowed for event in egress_proxies[-1].events)


def test_connect_tunnels_reach_only_granted_hosts(backend, web_server, work):
    granted = f"{GRANTED_HOST}:{web_server}"

    def tunnel(host: str) -> str:
        code = tunnel_script(host, web_server, sni=host)
        out = run(backend, command(work, ["sh", "-c", 'python3 -c "$0" 2>&1', code],
                                   hosts=(granted,)))
        assert isinstance(out, ToolOutput), out
        return out.content

    allowed = tunnel(GRANTED_HOST)
    assert "HTTP/1.1 200 Connection Established" in allowed
    # The ClientHello reached the server (plain HTTP, so it answers with its error page).
    assert "UPSTREAM answered:" in allowed and "Error code explanation: 400" in allowed
    refused = tunnel(REFUSED_HOST)
    assert "HTTP/1.1 403 Forbidden" in refused
    assert "UPSTREAM nothing" in refused


def test_with_a_host_grant_the_host_is_still_not_reachable_directly(backend, web_server, work):
    code = (
        "import socket\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {web_server}), timeout=3)\n"
        "    print('CONNECTED')\n"
        "except OSError:\n    print('REFUSED')\n"
    )
    out = run(backend, command(work, python(code), hosts=(f"{GRANTED_HOST}:{web_server}",)))
    assert isinstance(out, ToolOutput) and out.content.endswith("REFUSED\n"), out


def test_the_time_limit_kills_a_runaway(backend, work):
    out = run(backend, command(work, ["sleep", "600"], limits=SandboxLimits(timeout_s=2.0)))
    assert isinstance(out, ToolFailure)
    assert out.reason is FailureReason.TIMEOUT


# Forks sleepers until a fork is refused, then kills the ones it made, so the call ends then
# (a shell that cannot fork exits at once and leaves its sleepers holding the output open).
FORK_BOMB = """\
import os, signal, time
children = []
try:
    for _ in range(40):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
except OSError as exc:
    print("fork refused:", exc)
print("forked", len(children))
for pid in children:
    os.kill(pid, signal.SIGKILL)
"""


def test_the_pids_limit_stops_a_fork_bomb(backend, work):
    out = run(backend, command(work, python(FORK_BOMB), limits=SandboxLimits(pids=12,
                                                                          timeout_s=60.0)))
    assert isinstance(out, ToolOutput), out
    assert "fork refused: [Errno 11] Resource temporarily unavailable" in out.content, \
        out.content
    forked = int(out.content.split("forked ")[1].split()[0])
    assert forked < 12, out.content


def test_the_memory_limit_stops_a_hog(backend, work):
    hog = python("x = bytearray(512 * 1024 * 1024)\nprint('ALLOCATED')")
    out = run(backend, command(work, hog, limits=SandboxLimits(memory_mb=128, timeout_s=60.0)))
    assert isinstance(out, ToolOutput), out
    assert "ALLOCATED" not in out.content
    assert "MemoryError" in out.content or "killed by signal 9" in out.content


def test_output_is_capped(backend):
    text = "y" * 5000
    out = run(backend, spec("echo", json.dumps({"text": text}),
                            limits=SandboxLimits(output_cap=1000, timeout_s=30.0)))
    assert isinstance(out, ToolOutput)
    assert (out.content, out.truncated) == ("y" * 1000, True)


def _processes_mentioning(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(pid)
    return found


@pytest.mark.parametrize("ending", ["normal", "timeout"])
def test_nothing_is_left_after_a_call(backend, work, scratch, ending, web_server):
    marker = f"bx-marker-{secrets.token_hex(6)}"
    timeout = 2.0 if ending == "timeout" else 30.0
    argv = ["sh", "-c", f"sleep {600 if ending == 'timeout' else 0} # {marker}"]
    out = run(backend, command(work, argv, limits=SandboxLimits(timeout_s=timeout),
                               hosts=(f"{GRANTED_HOST}:{web_server}",)))
    assert isinstance(out, ToolOutput) == (ending == "normal"), out
    assert _processes_mentioning(marker) == []
    # Secrets and the proxy socket are gone; podman's seccomp profile is the backend's, kept.
    profile = getattr(backend, "seccomp_profile", None)
    kept = {profile.parent} if profile is not None else set()
    assert [path for path in scratch.iterdir() if path not in kept] == []
    if isinstance(backend, PodmanSandbox):
        listed = subprocess.run(
            [*backend.setup.base(), "ps", "--all", "--quiet"], capture_output=True, text=True,
            env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}, check=True,
        )
        assert listed.stdout.strip() == ""


def test_a_decision_runs_once_and_a_refusal_never(backend, work):
    decision = decide(command(work, ["true"]))
    assert isinstance(asyncio.run(backend.run(decision)), ToolOutput)
    with pytest.raises(NotAuthorized, match="already used"):
        asyncio.run(backend.run(decision))


def test_a_denying_decision_runs_nothing(backend):
    record = DecisionRecord(session="s-test", call=2, tool="echo",
                            arguments_sha256="sha256:" + "0" * 64, verdict="deny", grant=None,
                            reason="no grant matches")
    with pytest.raises(NotAuthorized, match="deny: no grant matches"):
        asyncio.run(backend.run(mint(record, None)))
