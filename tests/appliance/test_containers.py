"""The roles as separate rootless containers from locally built images, run by digest with the
launcher's exact arguments, talking only through sockets on shared volumes (tests/appliance/stack.py
sets it all up as the NixOS module does).

What this shows, each in its own test: every role's READY=1 reaches the unit's NOTIFY_SOCKET
from inside its container; loopd's container has only a loopback interface and cannot open the
model server's TCP port, which inferproxy's container can; a `bxctl chat` turn is answered by the
real llama-server; a tool call goes loopd -> brokerd -> a fresh tool container started through
the tool runtime, and reads a file no role's container can see; a Mattermost DM goes through
gatewayd's container and is answered in its thread.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import roles as images
from bximage import toolkit as toolkit_image
from support import llama
from support.requires import needs

from .rootless import NOBODY, WAIT
from .stack import NOTE_MARKER, ROLES, answered_dm, running_appliance

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.real_server,
    pytest.mark.skipif(os.geteuid() != 0, reason="runs podman as nobody: needs root to set up"),
    needs("podman", "systemd-creds"),
]

TURN_WAIT = WAIT * 4  # a tiny model on a shared 2-core machine: a bound on hanging, not a measure


@pytest.fixture(scope="module")
def appliance():
    root = Path(tempfile.mkdtemp(prefix="bx-appliance-"))
    try:
        yield from running_appliance(root, images, toolkit_image, llama)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def chat(appliance, *args: str) -> subprocess.CompletedProcess[str]:
    socket = appliance.manifest.socket_path("loop")
    return subprocess.run(
        ["bxctl", "chat", "--socket", socket, *args],
        capture_output=True, text=True, check=False, timeout=TURN_WAIT,
    )  # fmt: skip


def test_every_role_reports_ready_to_its_notify_socket_from_inside_its_container(appliance):
    assert sorted(appliance.ready) == sorted(ROLES)
    for pid, text in appliance.ready.values():
        assert "READY=1" in text.splitlines()
        assert pid > 0  # the kernel's SCM_CREDENTIALS, not a claim in the message


def test_each_role_runs_from_its_own_image_by_digest(appliance):
    assert len(set(appliance.refs.values())) == len(ROLES)
    for role in ROLES:
        inspected = appliance.podman.run("inspect", "--format", "{{.ImageDigest}}",
                                         f"boxmaker-{role}").stdout.strip()  # fmt: skip
        assert inspected == appliance.refs[role].split("@")[1]


PROBE = (
    "import socket,sys\n"
    "print(sorted(name for _, name in socket.if_nameindex()))\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5).close()\n"
    "    print('connected')\n"
    "except OSError as exc:\n"
    "    print('refused', type(exc).__name__)\n"
)


def test_loopd_has_only_loopback_and_cannot_reach_the_model_servers_tcp_port(appliance):
    done = appliance.podman.exec("loopd", "python3", "-c", PROBE, str(appliance.relay.port))
    assert done.stdout.splitlines() == ["['lo']", "refused ConnectionRefusedError"], done.stderr


def test_inferproxy_can_reach_that_same_port(appliance):
    done = appliance.podman.exec("inferproxy", "python3", "-c", PROBE, str(appliance.relay.port))
    assert done.stdout.splitlines()[-1] == "connected", done.stderr


def test_a_bxctl_chat_turn_goes_through_loopd_and_inferproxy_to_the_model(appliance):
    """``--tool-choice none`` steers the tiny model to answer in text, as the loop's own real-stack
    test does; greedy sampling makes the answer the same on every run."""
    done = chat(appliance, "--tool-choice", "none", "--say", "Say hello in one short sentence.")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()  # the model's answer, and nothing else, on stdout


def test_a_tool_call_runs_in_a_fresh_tool_container_and_reads_only_what_was_granted(appliance):
    """The note is mounted into no role's container but brokerd's, read-only (a grantable tree:
    brokerd pins and checks what it grants): its text can reach the session only through a tool
    container that the tool runtime started for brokerd with the grant's mount."""
    for role in ROLES:
        seen = appliance.podman.exec(role, "python3", "-c", f"open({str(appliance.note)!r})")
        if role == appliance.manifest.tools.runner:
            bound = appliance.podman.exec(role, "python3", "-c", "import os; print(os.statvfs("
                                          f"{str(appliance.note.parent)!r}).f_flag & os.ST_RDONLY)")
            assert "No such file" not in seen.stderr and bound.stdout.strip() == "1", (seen, bound)
        else:
            assert seen.returncode != 0 and "No such file" in seen.stderr, role
    session = "appliance-tool-call"
    done = chat(
        appliance, "--session", session, "--json", "--tool-choice", "required",
        "--tool-choice", "none", "--say",
        f'Use call_tool to run fs.read with the argument "path": "{appliance.note}", then tell '
        "me in one sentence what the note is about.",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = [json.loads(line).get("event", {}) for line in done.stdout.splitlines()]
    results = [e for e in events if e.get("type") == "tool_result"]
    assert [(e["name"], e["class"]) for e in results] == [("fs.read", "private")], events
    logs = Path(appliance.manifest.paths.home, "sessions", session).glob("*.jsonl")
    log = "".join(path.read_text() for path in logs)
    assert NOTE_MARKER in log  # the file's text, as the tool container returned it
    audit_files = Path(appliance.manifest.paths.home, "audit").glob("*.jsonl")
    audit = "".join(path.read_text() for path in audit_files)
    assert '"fs.read"' in audit and session in audit
    # Nothing of the call is left; the seccomp profile the podman service reads stays, named by
    # its content, in brokerd's own directory (brokerd.sandbox.podman._write_profile).
    left_files = [p.name for p in Path(appliance.manifest.tool_scratch_dir()).iterdir()
                  if not p.name.startswith("bx-profiles-")]
    assert left_files == []
    left = appliance.tools.run("ps", "--all", "--quiet").stdout.strip()
    assert left == ""  # the tool container is gone


def test_a_mattermost_dm_is_answered_in_its_thread_through_gatewayds_container(appliance):
    replies = answered_dm(appliance, "Say hello in one short sentence.", WAIT, TURN_WAIT)
    assert len(replies) == 1 and replies[0]["message"].strip()  # the placeholder, edited
    assert appliance.mattermost.violations() == []


def test_the_sockets_on_the_shared_volume_are_the_only_way_between_the_roles(appliance):
    manifest = appliance.manifest
    for role in ROLES:
        network = (
            appliance.podman.run(
                "inspect", "--format", "{{.HostConfig.NetworkMode}}", f"boxmaker-{role}"
            ).stdout.strip()
        )
        assert network == manifest.roles[role].network
    sockets = {p.name for p in Path(manifest.paths.run).rglob("*.sock")}
    assert {f"{name}.sock" for name in manifest.sockets} | {"podman.sock"} == sockets
    for name in manifest.sockets:
        assert Path(manifest.socket_path(name)).stat().st_uid == NOBODY
