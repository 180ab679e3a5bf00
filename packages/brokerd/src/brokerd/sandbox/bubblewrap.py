"""The bubblewrap backend: a fresh set of namespaces per call, gone when the call returns.

What is enforced where (see also ``_bwrap_args`` and ``_cgroup``):
- time: brokerd's deadline kills bwrap's process group; ``--die-with-parent`` and the PID
  namespace take everything inside with it. RLIMIT_CPU backs it up.
- memory: RLIMIT_DATA per process (the toolkit reports MemoryError as out of memory). No cgroup
  memory limit, so N processes may use N times the limit (N is bounded by the pids limit).
- pids: RLIMIT_NPROC inside the user namespace (effective when brokerd is not root), and a
  cgroup v1 ``pids.max`` when brokerd can create one (root on cgroup v1). As root without a
  writable pids hierarchy the pids limit is not enforced, and ``enforced_limits`` says so.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path

from ._backend import Backend
from ._bwrap_args import BwrapLayout, bwrap_argv
from ._call import stdout_cap
from ._cgroup import PidsCgroup, pids_cgroup_available
from ._outcome import Outcome, interpret
from ._process import run_process
from ._workspace import CallWorkspace
from .errors import SandboxUnavailable
from .spec import SandboxSpec

# bwrap outside, bwrap as PID 1 inside: two tasks the sandboxed program does not get.
_BWRAP_TASKS = 2


class BubblewrapSandbox(Backend):
    def __init__(
        self,
        *,
        toolkit_dir: Path,
        layout: BwrapLayout | None = None,
        scratch_root: Path | None = None,
        egress_resolver: Mapping[str, str] | None = None,
    ):
        self.layout = layout or BwrapLayout()
        for program in (self.layout.bwrap, self.layout.prlimit, self.layout.python):
            if shutil.which(program) is None:
                raise SandboxUnavailable(f"bubblewrap backend: {program!r} is not installed")
        if not (toolkit_dir / "main.py").is_file():
            raise SandboxUnavailable(f"bubblewrap: {toolkit_dir} is not the toolkit package")
        super().__init__(scratch_root, egress_resolver)
        self._toolkit_dir = toolkit_dir
        self._use_cgroup = os.geteuid() == 0 and pids_cgroup_available()

    def enforced_limits(self) -> dict[str, str]:
        if self._use_cgroup:
            pids = "cgroup v1 pids.max"
        elif os.geteuid() != 0:
            pids = "RLIMIT_NPROC in the sandbox's user namespace"
        else:
            pids = "NOT ENFORCED (root is exempt from RLIMIT_NPROC, no writable pids cgroup)"
        return {"time": "deadline + RLIMIT_CPU", "memory": "RLIMIT_DATA per process",
                "pids": pids}

    async def _execute(self, spec: SandboxSpec, workspace: CallWorkspace) -> Outcome:
        argv = bwrap_argv(spec, self.layout, toolkit_dir=self._toolkit_dir,
                          secrets_dir=workspace.secrets_dir, egress_dir=workspace.egress_dir)
        cgroup = None
        if self._use_cgroup:
            cgroup = PidsCgroup(f"call-{secrets.token_hex(8)}", spec.limits.pids + _BWRAP_TASKS)
            argv = cgroup.wrap(argv)
        try:
            finished = await run_process(
                argv, stdin=spec.arguments.encode("utf-8"), timeout_s=spec.limits.timeout_s,
                stdout_cap=stdout_cap(spec), env={"PATH": "/usr/bin:/bin"},
            )
        finally:
            if cgroup is not None:
                cgroup.remove()
        return interpret(finished, data_class=spec.data_class, egress=bool(spec.hosts),
                         timeout_s=spec.limits.timeout_s, stdout_cap=stdout_cap(spec))
