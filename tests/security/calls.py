"""One way to make a sandboxed call in every configuration the attacks run against.

- ``bubblewrap`` and ``podman``/``podman-remote``: the backend in this process, as the tests'
  user (root on the build machine: brokerd as root, bwrap changes to ``[broker] sandbox_uid``;
  podman is rootful, so the container's user is that uid too);
- ``bubblewrap-unprivileged``: brokerd as an ordinary user. The backend runs in a child process
  started with ``setpriv`` as ``UNPRIVILEGED_UID`` (system Python, this checkout's sources and
  the venv's dependencies), so bwrap maps the sandbox to that uid in a user namespace. Skipped
  unless the tests run as root (only root can start a process as another uid).

Every configuration answers a ``Result``: whether the call succeeded, its text, and the egress
proxy's events (what it carried and what it refused).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from brokerd.sandbox import Mount, Sandbox, SandboxLimits, SandboxSpec, ToolOutput
from brokerd.sandbox.spec import OpenedPath
from bxcore.tools import DataClass
from sandbox.helpers import decide
from support.egress import recording_egress

REPO = Path(__file__).resolve().parents[2]
UNPRIVILEGED_UID = 1_879_048_193  # one past the default sandbox_uid: nobody else's uid
RUNNER = Path(__file__).with_name("run_call.py")


@dataclass(frozen=True)
class Result:
    ok: bool
    text: str  # the output's content, or the failure's detail
    egress: tuple[tuple[str, int, bool, str], ...] = ()  # (host, port, carried, detail)

    def refused_egress(self) -> list[str]:
        return [detail for _, _, carried, detail in self.egress if not carried]


def spec_to_json(spec: SandboxSpec) -> str:
    return json.dumps({
        "program": spec.program, "arguments": spec.arguments,
        "mounts": [{"source": str(m.source), "target": m.target, "writable": m.writable}
                   for m in spec.mounts],
        "hosts": list(spec.hosts), "workdir": spec.workdir, "limits": asdict(spec.limits),
        "data_class": spec.data_class.value,
        "opened": None if spec.opened is None else asdict(spec.opened),
    })


def spec_from_json(text: str) -> SandboxSpec:
    data = json.loads(text)
    return SandboxSpec(
        program=data["program"], arguments=data["arguments"],
        mounts=tuple(Mount(source=Path(m["source"]), target=m["target"],
                           writable=m["writable"]) for m in data["mounts"]),
        hosts=tuple(data["hosts"]), workdir=data["workdir"], limits=SandboxLimits(**data["limits"]),
        data_class=DataClass(data["data_class"]),
        opened=None if data["opened"] is None else OpenedPath(
            **{key: tuple(value) if isinstance(value, list) else value
               for key, value in data["opened"].items()}),
    )


def result_of(backend: Sandbox, spec: SandboxSpec) -> Result:
    with recording_egress() as proxies:
        outcome = asyncio.run(backend.run(decide(spec)))
    events = tuple((e.host, e.port, e.allowed, e.detail) for p in proxies for e in p.events)
    if isinstance(outcome, ToolOutput):
        return Result(True, outcome.content, events)
    return Result(False, outcome.detail, events)


class InProcess:
    def __init__(self, backend: Sandbox, uid: int):
        self.backend = backend
        self.uid = uid  # the host uid its tools run as

    def call(self, spec: SandboxSpec) -> Result:
        return result_of(self.backend, spec)


class AsUnprivilegedUser:
    """brokerd's backend in a child process running as ``UNPRIVILEGED_UID``."""

    uid = UNPRIVILEGED_UID

    def __init__(self, resolver: dict[str, str]):
        self.resolver = resolver

    def call(self, spec: SandboxSpec) -> Result:
        site = REPO / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        path = [REPO / "packages" / "brokerd" / "src", REPO / "packages" / "bxcore" / "src",
                REPO / "tests", site / "site-packages"]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(map(str, path)),
               "HOME": "/tmp"}
        argv = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                "--", "/usr/bin/python3", "-P", str(RUNNER), json.dumps(self.resolver)]
        done = subprocess.run(argv, input=spec_to_json(spec), capture_output=True, text=True,
                              env=env, cwd="/", timeout=300, check=False)
        if done.returncode != 0:
            raise AssertionError(f"the unprivileged runner failed:\n{done.stderr[-3000:]}")
        data = json.loads(done.stdout)
        return Result(data["ok"], data["text"], tuple(tuple(e) for e in data["egress"]))
