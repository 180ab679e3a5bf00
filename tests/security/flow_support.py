"""What the flow property test (test_flow_property.py) needs around a real ``brokerd serve``:
the process itself (as root, or as an unprivileged uid behind a relay its own uid runs, since
broker.sock admits only brokerd's uid), the canaries every written byte carries, the grants the
owner writes, and the Python programs the tool calls run.

brokerd is a black box here: the test talks to broker.sock as loopd would, reads the audit log's
JSON lines and runs ``brokerd audit verify``. Nothing imports brokerd's modules, so the same test
judges any brokerd: ``BOXMAKER_FLOW_SOURCES`` names another tree's ``packages`` directory whose
brokerd, bxcore and toolkit run instead of this checkout's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
from bxcore.protocol import broker as broker_wire
from bxcore.tools import ToolRequest

REPO = Path(__file__).resolve().parents[2]
SOURCES = Path(os.environ.get("BOXMAKER_FLOW_SOURCES", REPO / "packages"))
CLASSES = ("public", "private", "secret")
RANK = {name: rank for rank, name in enumerate(CLASSES)}
READY_WAIT = 120.0  # a guard against a brokerd that never comes up, not a speed limit
CALL_WAIT = 600.0

# --- Canaries -------------------------------------------------------------------------------

CANARY = re.compile(r"CANARY-(public|private|secret)-(trusted|untrusted)-(\d+)")


@dataclass(frozen=True)
class Label:
    data_class: str = "public"
    untrusted: bool = False

    def join(self, other: Label) -> Label:
        higher = max(self.data_class, other.data_class, key=RANK.__getitem__)
        return Label(higher, self.untrusted or other.untrusted)

    def covers(self, other: Label) -> bool:
        return RANK[self.data_class] >= RANK[other.data_class] and (
            self.untrusted or not other.untrusted)

    def __str__(self) -> str:
        return f"{self.data_class}/{'untrusted' if self.untrusted else 'trusted'}"


class Canaries:
    """Numbers each canary; a canary's text names the label of where its bytes came from."""

    def __init__(self) -> None:
        self.count = 0

    def new(self, label: Label) -> str:
        self.count += 1
        trust = "untrusted" if label.untrusted else "trusted"
        return f"CANARY-{label.data_class}-{trust}-{self.count}"


def canaries_in(text: str) -> list[tuple[str, Label]]:
    return [(m.group(0), Label(m.group(1), m.group(2) == "untrusted"))
            for m in CANARY.finditer(text)]


# --- Grants ---------------------------------------------------------------------------------


def grant_text(tools: list[str], result_class: str, *, argument: str, allowed: str,
               mounts: list[tuple[Path, bool]], extra: str = "") -> str:
    """An auto grant any session may use (every class, untrusted too): the test is about what
    results say, never about what taint keeps a session out."""
    listed = ", ".join(f'{{ path = {json.dumps(str(path))}, write = {json.dumps(writable)} }}'
                       for path, writable in mounts)
    return (f"tools = {json.dumps(tools)}\nmode = \"auto\"\n"
            f"classes = {json.dumps(list(CLASSES))}\nallow_untrusted = true\n"
            f"result_class = \"{result_class}\"\n"
            f"[arguments.{argument}]\n{allowed}\n"
            f"[sandbox]\nmounts = [{listed}]\n{extra}"
            "[sandbox.limits]\ntimeout_s = 900\n")


# --- Programs the tool calls run ------------------------------------------------------------


def program(body: str, **paths: bytes) -> list[str]:
    """``python3 -c`` with ``paths`` bound to bytes (names that are not UTF-8 pass intact)."""
    binds = "".join(f"{name} = {value!r}\n" for name, value in paths.items())
    return ["python3", "-c", "import os, shutil, sys, time\n" + binds + body]


WRITE = "os.makedirs(os.path.dirname(dst), exist_ok=True)\n" \
        "with open(dst, 'wb') as f:\n    f.write(content)\nprint('wrote')\n"
COPY = "shutil.copyfile(src, dst)\nprint('copied')\n"
LINK = "os.link(src, dst)\nprint('linked')\n"
SYMLINK = "os.symlink(src, dst)\nprint('symlinked')\n"
MOVE = "shutil.move(src, dst)\nprint('moved')\n"
SHOW = "for p in paths.split(b'\\0'):\n" \
       "    try:\n        sys.stdout.buffer.write(open(p, 'rb').read() + b'\\n')\n" \
       "    except OSError as e:\n        print('unreadable', e.errno)\n"
# Writes, then keeps running until the owner's go-file exists: the test reads meanwhile.
WRITE_AND_WAIT = WRITE + "sys.stdout.flush()\nwhile not os.path.exists(go):\n" \
                         "    time.sleep(0.05)\nprint('done')\n"


# --- brokerd as a process -------------------------------------------------------------------

RELAY = r"""
import os, socket, sys, threading
listen, target = sys.argv[1], sys.argv[2]
server = socket.socket(socket.AF_UNIX)
server.bind(listen)
server.listen(64)
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass
def serve(client):
    upstream = socket.socket(socket.AF_UNIX)
    upstream.connect(target)
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
    pipe(client, upstream)
while True:
    client, _ = server.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
"""


@dataclass(frozen=True)
class Answer:
    status: str  # ok, denied, failed; "error" for an error frame
    content: str
    label: Label


class Brokerd:
    """``brokerd serve`` on a config in ``root``; as ``uid`` (None: this process's own)."""

    def __init__(self, root: Path, broker_section: str, uid: int | None,
                 env: dict[str, str] | None = None):
        self.root, self.uid = root, uid
        self.home, self.run, self.grants = root / "home", root / "run", root / "grants"
        for directory in (self.home, self.run, self.grants):
            directory.mkdir(parents=True, exist_ok=True)
        self.config = root / "config.toml"
        self.config.write_text(
            f"[paths]\nhome = {json.dumps(str(self.home))}\nrun = {json.dumps(str(self.run))}\n"
            f"[broker]\ngrants = {json.dumps(str(self.grants))}\n"
            f"toolkit_dir = {json.dumps(str(SOURCES / 'toolkit' / 'src' / 'toolkit'))}\n"
            f"{broker_section}")
        self.env = env or {}
        if uid is not None:
            for path in (root, self.home, self.run, self.grants, self.config):
                os.chown(path, uid, uid)
        self.process: subprocess.Popen[bytes] | None = None
        self.relay: subprocess.Popen[bytes] | None = None

    def _argv(self, python_argv: list[str]) -> tuple[list[str], dict[str, str]]:
        path = [SOURCES / "brokerd" / "src", SOURCES / "bxcore" / "src"]
        if self.uid is None:
            python = [sys.executable]
            env = dict(os.environ)
        else:  # the venv's interpreter is under root's home: the system one, with its packages
            site = REPO / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
            path.append(site / "site-packages")
            python = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}",
                      "--clear-groups", "--", "/usr/bin/python3"]
            env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
        env.update(self.env)
        env["PYTHONPATH"] = os.pathsep.join(map(str, path))
        env.pop("NOTIFY_SOCKET", None)
        return [*python, "-P", *python_argv], env

    @property
    def socket_path(self) -> Path:
        return self.run / ("relay.sock" if self.uid is not None else "broker.sock")

    def start(self) -> None:
        argv, env = self._argv(["-c", "import sys; from brokerd.cli import main; "
                                "sys.argv[0] = 'brokerd'; main()",
                                "serve", "--config", str(self.config)])
        log = (self.root / "brokerd.log").open("ab")
        self.process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_for(self.run / "broker.sock", self.process)
        if self.uid is not None:
            argv, env = self._argv(["-c", RELAY, str(self.socket_path),
                                    str(self.run / "broker.sock")])
            self.relay = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
            self._wait_for(self.socket_path, self.relay)

    def _wait_for(self, path: Path, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + READY_WAIT
        while time.monotonic() < deadline and process.poll() is None:
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(str(path))
                return
            except OSError:
                time.sleep(0.05)
            finally:
                probe.close()
        raise AssertionError(f"{path.name} never answered (exit {process.poll()}):\n"
                             f"{self.log()}")

    def stop(self) -> None:
        """SIGTERM, as systemd stops it; the exit status must be clean."""
        for process in (self.relay, self.process):
            if process is None or process.poll() is not None:
                continue
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise AssertionError(f"brokerd did not stop on SIGTERM:\n{self.log()}") from None
        status = self.process.returncode if self.process else 0
        self.process = self.relay = None
        for name in ("relay.sock", "broker.sock", "approve.sock"):
            (self.run / name).unlink(missing_ok=True)  # the relay's is left behind by SIGTERM
        assert status in (0, -signal.SIGTERM), f"brokerd exited {status}:\n{self.log()}"

    def log(self) -> str:
        path = self.root / "brokerd.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def call(self, session: str, number: int, tool: str, arguments: dict[str, object]) -> Answer:
        request = ToolRequest(session=session, call=number, tool=tool,
                              arguments=json.dumps(arguments))
        with SyncFrameSocket.connect(self.socket_path, broker_wire.FROM_BROKERD,
                                     timeout=CALL_WAIT) as conn:
            conn.write(Frame.of(broker_wire.TOOL_CALL, request, final=False))
            while not (frame := conn.read(timeout=CALL_WAIT)).final:
                pass
        body = dict(frame.body)
        if frame.kind != broker_wire.TOOL_RESPONSE:
            return Answer("error", json.dumps(body), Label())
        return Answer(body["status"], body["content"], Label(body["class"], body["untrusted"]))

    def verify(self) -> tuple[bool, str]:
        """``brokerd audit verify``: (whether it says ok, what it printed)."""
        argv, env = self._argv(["-c", "import sys; from brokerd.cli import main; "
                                "sys.argv[0] = 'brokerd'; main()",
                                "audit", "verify", "--config", str(self.config)])
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600,
                              check=False)
        return done.returncode == 0 and done.stdout.startswith("ok"), done.stdout + done.stderr

    def audit_records(self) -> list[dict]:
        """Every record of the audit log, as the JSON it is written in."""
        rows = []
        for path in sorted((self.home / "audit").glob("*.jsonl")):
            rows += [json.loads(line) for line in path.read_bytes().splitlines() if line]
        return rows
