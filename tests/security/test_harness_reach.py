"""Escapes, class 3: no grant and no sandbox reaches the harness itself.

The attacks the review confirmed: a grant could mount ``~`` (where the local stack keeps its
state, sockets and often its grants), and a Unix socket in a read-only bind mount still accepts
connections, so a tool could answer approvals, submit calls as a fresh session, inject turns,
or read the audit log. Against the real daemons (inferproxy, memoryd, brokerd with bubblewrap,
loopd, over a scripted model):

- grants whose mounts or path globs reach the state, socket or grants directories are refused
  when brokerd loads them, loudly, naming the file and what they reach; a call they would have
  allowed is denied and audited, and the rest of the grants still work;
- no role's socket answers the uid a root brokerd's tools run as, even with the sockets'
  directory in reach; and the peer check alone (a listener whose mode admits everyone)
  closes an unlisted uid's connection unanswered and logs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from brokerd.audit import entries
from brokerd.wiring import harness_paths
from bxcore.accepting import accepting
from bxcore.config import load_config
from bxcore.config.broker import DEFAULT_SANDBOX_UID
from bxcore.daemon import listening
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.peers import PeerPolicy
from bxcore.protocol import broker as broker_wire
from bxcore.tools import ToolRequest
from faults.rig import grant, scripted_rig
from faults.stack import BIN

PROBE = """\
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("REFUSED")  # the socket's mode: connect() itself is refused
    sys.exit()
s.settimeout(float(sys.argv[2]))
try:
    print("CLOSED" if s.recv(1) == b"" else "ANSWERED")
except socket.timeout:
    print("OPEN")
except OSError as exc:
    print("CLOSED", exc)
"""


def probe(path: Path, *, as_uid: int | None, wait: float, groups: tuple[int, ...] = ()) -> str:
    """Connect to ``path`` (as ``as_uid`` with ``groups`` as its supplementary groups, or as the
    test) and wait: CLOSED if the role hung up, OPEN if it waited for a request (what it does
    for a peer it admits), ANSWERED if it sent a byte first."""
    more = f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"
    prefix = [] if as_uid is None else ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}",
                                        more, "--"]
    done = subprocess.run([*prefix, "/usr/bin/python3", "-c", PROBE, str(path), str(wait)],
                          capture_output=True, text=True, timeout=wait + 60, check=True)
    return done.stdout.strip()


def call(socket_path: Path, tool: str, arguments: dict, session: str) -> Frame:
    request = ToolRequest(session=session, call=1, tool=tool, arguments=json.dumps(arguments))
    with SyncFrameSocket.connect(socket_path, broker_wire.FROM_BROKERD, timeout=60) as conn:
        conn.write(Frame.of(broker_wire.TOOL_CALL, request, final=True))
        while not (frame := conn.read(timeout=60)).final:
            pass
    return frame


def test_grants_reaching_the_harness_are_refused_at_load_and_deny_every_call(short_dir):
    home, run, grants = short_dir / "home", short_dir / "run", short_dir / "grants"
    granted = short_dir / "granted"
    # name: (what its argument may name, what it mounts, what brokerd must say it reaches)
    cases = {
        "everything.toml": (f"{short_dir}/**", short_dir, "the state directory"),
        "audit.toml": (f"{home}/audit/**", granted, "the state directory"),
        "sockets.toml": (f"{granted}/**", run, "the sockets' directory"),
        "grants.toml": (f"{granted}/**", grants, "the grants directory"),
    }
    reaching = {name: grant(["fs.read"], "auto", "private", argument=("path", "paths", glob),
                            sandbox=f'mounts = [{{ path = "{mount}" }}]')
                for name, (glob, mount, _) in cases.items()}
    with scripted_rig(short_dir, grants=reaching) as rig:
        log = rig.stack.log("brokerd")
        for name, (_, _, what) in cases.items():
            assert f"grant refused: {grants / name}:" in log, log
            assert what in log.split(str(grants / name), 1)[1].splitlines()[0]
        socket_path = rig.stack.socket("brokerd")
        allowed = call(socket_path, "fs.read", {"path": str(rig.granted / "a.txt")}, "s-owner")
        audit_file = next((home / "audit").glob("*.jsonl"))  # the call above made it
        stolen = call(socket_path, "fs.read", {"path": str(audit_file)}, "s-attack")
    assert stolen.body["status"] == "denied", stolen.body
    assert "arguments_sha256" not in stolen.body["content"]  # nothing of the audit log
    # the scripted rig's own grant loads, but while any file is refused every call is denied
    assert allowed.body["status"] == "denied" and "alpha" not in allowed.body["content"]
    decisions = [e.decision for e in entries(home / "audit") if e.kind == "decision"]
    assert any(d.session == "s-attack" and d.verdict == "deny" for d in decisions), decisions


def code_grants() -> dict[str, tuple[Path, bool, str | None]]:
    """Grants over the harness's code: name: (what it mounts, writable, what brokerd must say
    it reaches, or None where it must load)."""
    toolkit = Path(next(iter(importlib.util.find_spec("toolkit").submodule_search_locations)))
    loopd = Path(next(iter(importlib.util.find_spec("loopd").submodule_search_locations)))
    # An editable install puts the package's parent on the Python path: named as that.
    on_path = str(toolkit.parent) in map(os.path.abspath, sys.path)
    parent = "brokerd's Python path" if on_path else "the harness's code (the toolkit package)"
    return {
        "toolkit.toml": (toolkit, True, "the harness's code (the toolkit package)"),
        "toolkit-parent.toml": (toolkit.parent, True, parent),
        "venv.toml": (Path(sys.prefix), True, "the Python environment the roles run from"),
        "loopd.toml": (loopd, True, "the harness's code (the loopd package)"),
        "toolkit-read.toml": (toolkit, False, None),  # read-only code changes nothing
    }


def code_grant(mount: Path, writable: bool) -> str:
    return grant(["fs.read", "fs.write"], "auto", "private",
                 argument=("path", "paths", f"{mount}/**"),
                 sandbox=f'mounts = [{{ path = "{mount}", write = {json.dumps(writable)} }}]')


def test_grants_mounting_the_harness_code_writable_are_refused_by_brokerd_and_its_check(
        short_dir):
    """The toolkit's own directory (code every later sandbox runs), its parent, the
    environment the roles run from and a role's package, each mounted writable: refused when
    the real brokerd loads them and by ``brokerd grants check``, naming what they reach. The
    same toolkit mounted read-only loads."""
    cases = code_grants()
    texts = {name: code_grant(mount, writable) for name, (mount, writable, _) in cases.items()}
    with scripted_rig(short_dir, grants=texts) as rig:
        log = rig.stack.log("brokerd")
        grants_dir = rig.stack.grants
        allowed = call(rig.stack.socket("brokerd"), "fs.read",
                       {"path": str(cases["toolkit-read.toml"][0] / "__init__.py")}, "s-owner")
    check = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "brokerd"), "grants", "check", "--config",
         str(short_dir / "no-config.toml"), "--dir", str(grants_dir)],
        capture_output=True, text=True, timeout=120, check=False)
    for name, (_, _, what) in cases.items():
        refusal = f"grant refused: {grants_dir / name}:"
        if what is None:
            assert refusal not in log, log
            assert f"{grants_dir / name}:" not in check.stderr, check.stderr
            continue
        assert refusal in log, log
        line = log.split(refusal, 1)[1].splitlines()[0]
        assert what in line and "writable" in line, line
        refused = f"REFUSED: {grants_dir / name}:"
        assert refused in check.stderr and what in check.stderr.split(refused, 1)[1], check.stderr
    assert check.returncode == 1
    # the read-only grant loads, but while any file is refused every call is denied
    assert allowed.body["status"] == "denied", allowed.body


# How long an admitted peer's connection must stay open to count as admitted (a refused one is
# closed at once; its wait is only a bound)
ADMITTED_WAIT = 1.0
ROLES_SOCKETS = ("inferproxy", "memoryd", "brokerd", "loopd", "approve")


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as the sandbox's uid needs root")
def test_no_socket_answers_the_uid_a_root_brokerds_tools_run_as(short_dir):
    """Each role's socket, probed as the roles' own uid (the control: it waits for a request)
    and as the sandbox's uid (refused or closed unanswered)."""
    seen = {}
    with scripted_rig(short_dir) as rig:
        for directory in (short_dir, short_dir / "run"):
            directory.chmod(0o755)  # as if the sockets' directory were in a tool's reach
        for role in ROLES_SOCKETS:
            path = short_dir / "run" / "approve.sock" if role == "approve" \
                else rig.stack.socket(role)
            seen[role] = (probe(path, as_uid=None, wait=ADMITTED_WAIT),
                          probe(path, as_uid=DEFAULT_SANDBOX_UID, wait=30))
    for role, (own, sandbox) in seen.items():
        assert own == "OPEN", (role, seen)  # the control
        assert sandbox in ("REFUSED", "CLOSED"), (role, seen)


# What the wide listener's handler sends first: only a connection the peer check admitted gets
# it (the probe says ANSWERED), so an admitted peer is told apart from a refused one (CLOSED) by
# what each receives, with no wait for a connection to stay open.
GREETING = b"!"


async def greeting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(GREETING)
    await writer.drain()
    await reader.read()  # hold the connection open until the peer leaves
    writer.close()


@contextlib.asynccontextmanager
async def wide_listener(kind: str, path: Path, peers: PeerPolicy) -> AsyncIterator[None]:
    """A listener of ``kind`` whose mode admits everyone, greeting each admitted connection and
    holding it open: ``listening`` (streams, every role but one) or ``accepting`` (bare
    sockets, inferproxy)."""
    if kind == "listening":
        async with listening(path, greeting, mode=0o666, peers=peers):
            yield
        return
    held: list[socket.socket] = []

    def admitted(conn: socket.socket) -> None:
        conn.send(GREETING)  # one byte into a new connection's empty buffer: never blocks
        held.append(conn)

    try:
        async with accepting(path, admitted, mode=0o666, peers=peers):
            yield
    finally:
        for conn in held:
            conn.close()


# a group no user of this machine is in: only the probe's supplementary groups can name it
PEER_GROUP = 4242


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another uid needs root")
@pytest.mark.parametrize("kind", ["listening", "accepting"])
def test_the_peer_check_alone_refuses_a_uid_the_socket_does_not_list(kind, short_dir, caplog):
    """Every role's listener (bxcore.daemon's ``listening`` and bxcore.accepting's
    ``accepting``), with its mode wider than any config allows, so only the SO_PEERCRED check
    stands between the socket and the peer. A uid the socket does not list is closed unanswered,
    one it lists is served, and so is one in the socket's group only by a supplementary group
    (read from /proc only when the uid and primary group do not admit it). Served: the
    listener's handler greets the peer (ANSWERED); closed unanswered: the connection ends with no
    byte (CLOSED)."""
    short_dir.chmod(0o755)  # in /tmp, which every uid may pass (pytest's tmp_path is 0700)
    path = short_dir / "wide.sock"

    async def serve(peers: PeerPolicy, groups: tuple[int, ...] = ()) -> list[str]:
        # Either way the probe hears at once: 30 s is only a bound.
        async with wide_listener(kind, path, peers):
            return [await asyncio.to_thread(probe, path, as_uid=uid, wait=30, groups=groups)
                    for uid in (DEFAULT_SANDBOX_UID, None)]

    refused = asyncio.run(serve(PeerPolicy()))
    listed = asyncio.run(serve(PeerPolicy(uids=frozenset({DEFAULT_SANDBOX_UID}))))
    grouped = asyncio.run(serve(PeerPolicy(group=PEER_GROUP), (PEER_GROUP,)))
    outside = asyncio.run(serve(PeerPolicy(group=PEER_GROUP), (PEER_GROUP + 1,)))
    assert refused == ["CLOSED", "ANSWERED"]
    assert listed == ["ANSWERED", "ANSWERED"]
    assert grouped == ["ANSWERED", "ANSWERED"]
    assert outside == ["CLOSED", "ANSWERED"]
    assert f"refused a connection from uid {DEFAULT_SANDBOX_UID}" in caplog.text


def test_the_config_file_the_local_stacks_directory_and_a_symlinked_grants_dir_are_protected(
        short_dir):
    """The attack 31h's B3 and B4: brokerd's config file (a tool rewriting it points brokerd
    at its own grants at the next start), the local stack's directory (``[paths] protected``:
    its config, logs and stack.json) and a grants directory named through a symlink that sits
    in a writable tree (a tool re-points the link) are the harness's. ``brokerd grants check``
    refuses each grant that reaches them, naming what."""
    state, tree, real_grants = short_dir / "state", short_dir / "tree", short_dir / "real-grants"
    for directory in (state / "logs", tree, real_grants):
        directory.mkdir(parents=True)
    (tree / "grants").symlink_to(real_grants)
    config_path = short_dir / "etc" / "config.toml"
    config_path.parent.mkdir()
    config_path.write_text(f'[paths]\nhome = "{state}/home"\nrun = "{state}/run"\n'
                           f'protected = ["{state}"]\n'
                           f'[broker]\ngrants = "{tree}/grants"\n')
    cases = {
        "config.toml": (config_path.parent, "brokerd's config file"),
        "logs.toml": (state / "logs", "a path of the harness ([paths] protected)"),
        "link.toml": (tree, "the grants directory, as configured"),
    }
    for name, (mount, _what) in cases.items():
        (real_grants / name).write_text(grant(
            ["shell.run"], "auto", "private", argument=("cwd", "paths", f"{mount}/**"),
            sandbox=f'mounts = [{{ path = "{mount}", write = true }}]'))
    checked = subprocess.run([str(BIN / "brokerd"), "grants", "check", "--config",
                              str(config_path)], capture_output=True, text=True)
    said = checked.stdout + checked.stderr
    for name, (_mount, what) in cases.items():
        line = next(x for x in said.splitlines() if f"/grants/{name}:" in x)
        assert line.startswith("REFUSED") and what in line, said
    protected = {p.what for p in harness_paths(load_config(config_path), {}, config_path)}
    assert {"brokerd's config file", "the grants directory, as configured"} <= protected


def test_what_brokerd_runs_by_name_or_imports_and_its_podman_service_are_protected(short_dir):
    """The attack 31j's E9 and E11: a directory on brokerd's PATH (a tool planted a ``bwrap``
    there, which brokerd ran outside every sandbox), one on its Python path (a planted module,
    imported by ``brokerd serve``), the podman service's socket directory and containers.conf
    are the harness's. ``brokerd grants check``, run with that PATH and PYTHONPATH, refuses a
    writable grant over each, naming what; a read-only one over the PATH directory loads."""
    on_path, python_path, service, conf, here = (short_dir / "bin", short_dir / "py",
                                                 short_dir / "podman", short_dir / "conf",
                                                 short_dir / "here")
    for directory in (on_path, python_path, service, conf, here):
        directory.mkdir()
    (conf / "containers.conf").write_text("[engine]\n")
    grants = short_dir / "grants"
    grants.mkdir()
    config_path = short_dir / "config.toml"
    config_path.write_text(
        f'[paths]\nhome = "{short_dir}/home"\nrun = "{short_dir}/run"\n'
        f'[broker]\ngrants = "{grants}"\nbackend = "podman"\n'
        f'podman_image = "toolkit@sha256:{"0" * 64}"\n'
        f'podman_remote = "unix://{service}/podman.sock"\n'
        f'containers_conf = "{conf}/containers.conf"\n')
    cases = {
        "path.toml": (on_path, True, "a directory on brokerd's PATH"),
        "python.toml": (python_path, True, "brokerd's Python path"),
        "service.toml": (service, True, "the podman service's socket"),
        "conf.toml": (conf, True, "containers.conf"),
        # an empty PATH entry is the working directory (attack 31k, K10)
        "here.toml": (here, True, "a directory on brokerd's PATH"),
        "path-read.toml": (on_path, False, None),
    }
    for name, (mount, writable, _) in cases.items():
        (grants / name).write_text(code_grant(mount, writable))
    env = {**os.environ, "PATH": f"{os.pathsep}{on_path}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(python_path)}
    checked = subprocess.run([str(BIN / "brokerd"), "grants", "check", "--config",
                              str(config_path)], capture_output=True, text=True, env=env,
                             cwd=here)
    said = checked.stdout + checked.stderr
    for name, (_, _, what) in cases.items():
        line = next((x for x in said.splitlines() if f"/grants/{name}:" in x), "")
        assert line.startswith("REFUSED") == (what is not None), said
        assert what is None or what in line, said
