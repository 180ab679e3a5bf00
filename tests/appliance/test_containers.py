"""The roles as separate rootless containers from locally built images, run by digest with the
launcher's exact arguments, talking only through sockets on shared volumes; a turn goes from a
channel through loopd and inferproxy to the real llama-server and back.

What this shows, each in its own test: every role's READY=1 reaches the unit's NOTIFY_SOCKET
from inside its container; loopd's container has only a loopback interface and cannot open the
model server's TCP port, which inferproxy's container can; a chat turn answers with the model's
text.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from bxctl.stack import load_manifest, parse_manifest

from .relay import TcpToUnix
from .rootless import NOBODY, WAIT, NotifySocket, RootlessPodman, chown_nobody

images = pytest.importorskip("roles", reason="images/ must be on sys.path")  # see conftest
llama = pytest.importorskip("support.llama")

# Not run here: gatewayd needs a Mattermost server; brokerd's sandbox backend needs the toolkit
# and a runtime inside its container, which is not wired yet (docs/deploy.md, known gaps).
RUN_HERE = ["inferproxy", "memoryd", "loopd"]

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.real_server,
    pytest.mark.skipif(os.geteuid() != 0, reason="runs podman as nobody: needs root to set up"),
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is missing"),
]


def manifest_under(root: Path):
    """The shipped manifest with its host paths moved under ``root`` (a mount keeps its path)."""
    data = json.loads(load_manifest().model_dump_json())
    data["paths"].update(home=f"{root}/home", run=f"{root}/run", config_dir=f"{root}/config",
                         grants=f"{root}/grants", jobs=f"{root}/jobs")  # fmt: skip
    return parse_manifest(json.dumps(data), "test manifest")


def write_config(manifest, upstream_port: int) -> None:
    """The config every container mounts: the manifest's socket paths, the test router's port,
    the tools loopd's self-test needs (qwen-tools), and the fake tool port (no brokerd here).
    """
    settings = manifest.settings()
    settings.setdefault("inferproxy", {})["upstream"] = f"tcp://127.0.0.1:{upstream_port}"
    # A tiny model on a shared 2-core machine: generous liveness, short answers, greedy.
    settings.setdefault("inference", {}).update(
        model="qwen-tools", max_tokens=64, liveness_timeout=600.0
    )
    settings["inference.sampling"] = {"temperature": 0.0}
    settings["loop"] = {"tools": "fake"}
    lines = []
    for section, values in settings.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    config_dir = Path(manifest.paths.config_dir)
    (config_dir / manifest.paths.config_file).write_text("\n".join(lines) + "\n")
    (config_dir / "system.md").write_text(
        "You are a terse assistant. Answer briefly, in plain text.\n"
    )


@pytest.fixture(scope="module")
def appliance():
    root = Path(tempfile.mkdtemp(prefix="bx-appliance-"))
    try:
        yield from _appliance(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _appliance(root: Path):
    root.chmod(0o755)
    manifest = manifest_under(root)
    for directory in (root / name for name in ("home", "run", "config", "grants", "jobs")):
        directory.mkdir(mode=0o755)
    for name in manifest.sockets:
        (root / "run" / name).mkdir(mode=0o750)
        chown_nobody(root / "run" / name)
    for role in manifest.roles.values():
        for state in role.state:
            (root / "home" / state.dir).mkdir(mode=0o750, exist_ok=True)
            chown_nobody(root / "home" / state.dir)
    podman = RootlessPodman(root / "podman")
    notify = {role: NotifySocket(root / f"notify-{role}.sock") for role in RUN_HERE}
    ready: dict[str, tuple[int, str]] = {}
    try:
        with llama.start_router() as server, TcpToUnix(server.socket) as relay:
            write_config(manifest, relay.port)
            refs = {}
            for role in RUN_HERE:
                built = images.build(role)
                podman.load(built.layout, role)
                refs[role] = f"localhost/{manifest.roles[role].image}@{built.digest}"
            for role in RUN_HERE:
                podman.start(manifest, role, refs[role], notify[role].path, credentials=None)
                try:
                    ready[role] = notify[role].wait_ready(time.monotonic() + WAIT)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\n{role} log:\n{podman.log(role)}") from None
            yield {"manifest": manifest, "podman": podman, "relay": relay, "ready": ready,
                   "refs": refs}  # fmt: skip
    finally:
        podman.close()
        for socket in notify.values():
            socket.close()


def test_every_role_reports_ready_to_its_notify_socket_from_inside_its_container(appliance):
    for role in RUN_HERE:
        pid, text = appliance["ready"][role]
        assert "READY=1" in text.splitlines()
        assert pid > 0  # the kernel's SCM_CREDENTIALS, not a claim in the message


def test_each_role_runs_from_its_own_image_by_digest(appliance):
    refs = appliance["refs"]
    assert len(set(refs.values())) == len(RUN_HERE)
    for role in RUN_HERE:
        inspected = appliance["podman"].run("inspect", "--format", "{{.ImageDigest}}",
                                            f"boxmaker-{role}").stdout.strip()  # fmt: skip
        assert inspected == refs[role].split("@")[1]


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
    port = str(appliance["relay"].port)
    done = appliance["podman"].exec("loopd", "python3", "-c", PROBE, port)
    assert done.stdout.splitlines() == ["['lo']", "refused ConnectionRefusedError"], done.stderr


def test_inferproxy_can_reach_that_same_port(appliance):
    port = str(appliance["relay"].port)
    done = appliance["podman"].exec("inferproxy", "python3", "-c", PROBE, port)
    assert done.stdout.splitlines()[-1] == "connected", done.stderr


def test_a_bxctl_chat_turn_goes_through_loopd_and_inferproxy_to_the_model(appliance):
    """``--tool-choice none`` steers the tiny model to answer in text, as the loop's own real-stack
    test does; greedy sampling makes the answer the same on every run."""
    socket = appliance["manifest"].socket_path("loop")
    done = subprocess.run(
        ["bxctl", "chat", "--socket", socket, "--tool-choice", "none",
         "--say", "Say hello in one short sentence."],
        capture_output=True, text=True, check=False, timeout=WAIT * 4,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()  # the model's answer, and nothing else, on stdout


def test_the_sockets_on_the_shared_volume_are_the_only_way_between_the_roles(appliance):
    manifest = appliance["manifest"]
    for role in RUN_HERE:
        networks = (
            appliance["podman"]
            .run("inspect", "--format", "{{.HostConfig.NetworkMode}}", f"boxmaker-{role}")
            .stdout.strip()
        )
        assert networks == manifest.roles[role].network
    sockets = sorted(p.name for p in Path(manifest.paths.run).rglob("*.sock"))
    assert {"infer.sock", "loop.sock", "memory.sock"} <= set(sockets)
    assert all(Path(manifest.paths.run, n).stat().st_uid == NOBODY for n in ("infer", "loop"))
