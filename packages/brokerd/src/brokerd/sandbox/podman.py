"""The podman backend: one ``podman run --rm`` per call of the toolkit image, by digest.

Either podman on this host, or (``remote``) a ``podman system service`` that brokerd reaches over
a Unix socket: on the appliance brokerd is itself a container with no runtime, and the service
runs as brokerd's own host user, so the per-call files it creates are readable by the tool and
by nobody else. The paths brokerd passes are host paths: each call's scratch directory is on a
mount that has the same path in brokerd's container and on the host.

Rootless-capable: nothing here needs root. With rootless podman on cgroup v1, ``--memory`` and
``--pids-limit`` are ignored (measured), and the ``--ulimit`` data/nproc/cpu limits are what
holds; as root, or with cgroup v2, both hold. Time: brokerd's deadline removes the container
(``podman rm --force``), with conmon's ``--timeout`` behind it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path

from ._backend import Backend
from ._call import stdout_cap
from ._outcome import Outcome, interpret
from ._podman_args import PodmanSetup, podman_remove_argv, podman_run_argv
from ._process import run_process
from ._workspace import CallWorkspace
from .errors import SandboxUnavailable
from .spec import SandboxSpec

REMOVE_TIMEOUT_S = 30.0


class PodmanSandbox(Backend):
    def __init__(
        self,
        setup: PodmanSetup,
        *,
        scratch_root: Path | None = None,
        egress_resolver: Mapping[str, str] | None = None,
    ):
        if shutil.which(setup.podman) is None:
            raise SandboxUnavailable(f"podman backend: {setup.podman!r} is not installed")
        if setup.containers_conf is not None and not setup.containers_conf.is_file():
            raise SandboxUnavailable(f"podman backend: {setup.containers_conf} does not exist")
        if setup.remote is not None and not Path(setup.remote.removeprefix("unix://")).is_socket():
            raise SandboxUnavailable(f"podman backend: no podman service at {setup.remote}")
        super().__init__(scratch_root, egress_resolver)
        self.setup = setup
        self._env = dict(os.environ)
        if setup.containers_conf is not None:
            self._env["CONTAINERS_CONF"] = str(setup.containers_conf)

    async def _execute(self, spec: SandboxSpec, workspace: CallWorkspace) -> Outcome:
        name = f"bx-call-{secrets.token_hex(8)}"
        argv = podman_run_argv(spec, self.setup, name=name, secrets_dir=workspace.secrets_dir,
                               egress_dir=workspace.egress_dir)

        async def remove() -> None:
            await self._remove(name)

        finished = await run_process(
            argv, stdin=spec.arguments.encode("utf-8"), timeout_s=spec.limits.timeout_s,
            stdout_cap=stdout_cap(spec), env=self._env, on_kill=remove,
        )
        return interpret(finished, data_class=spec.data_class, egress=bool(spec.hosts),
                         timeout_s=spec.limits.timeout_s, stdout_cap=stdout_cap(spec))

    async def _remove(self, name: str) -> None:
        process = await asyncio.create_subprocess_exec(
            *podman_remove_argv(self.setup, name), env=self._env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            async with asyncio.timeout(REMOVE_TIMEOUT_S):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
