"""The bubblewrap backend: a fresh set of namespaces per call, gone when the call returns.

Who the tool is on the host: never a privileged uid. A non-root brokerd's sandbox is brokerd's
own uid in a user namespace; a root brokerd's is ``sandbox_uid`` (``[broker] sandbox_uid``, a
dedicated uid owning no files), which the sandbox becomes before the toolkit starts
(``_bwrap_args`` says how). The call's scratch files (secrets, the proxy's socket directory) are
then given to that uid. As root, a writable mount is writable to the tool only where
``sandbox_uid`` may write.

What is enforced where (see also ``_bwrap_args`` and ``_cgroup``):
- time: brokerd's deadline kills bwrap's process group; ``--die-with-parent`` and the PID
  namespace take everything inside with it. RLIMIT_CPU backs it up.
- memory: RLIMIT_DATA per process (the toolkit reports MemoryError as out of memory), and /tmp
  is a tmpfs of half that size. No cgroup memory limit, so N processes may use N times the limit
  (N is bounded by the pids limit).
- pids: RLIMIT_NPROC inside the user namespace (brokerd not root); as root, RLIMIT_NPROC of
  ``sandbox_uid`` (shared by concurrent calls) and a cgroup v1 ``pids.max`` when brokerd can
  create one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from bxcore.config.broker import DEFAULT_SANDBOX_UID

from ._backend import Backend
from ._bwrap_args import BwrapLayout, bwrap_argv
from ._call import stdout_cap
from ._cgroup import PidsCgroup, kill_leftovers, pids_cgroup_available
from ._outcome import SandboxOutcome, interpret
from ._process import run_process
from ._seccomp import compile_filter, filter_fd
from ._workspace import CallWorkspace
from .errors import SandboxUnavailable
from .spec import SandboxSpec

# bwrap outside, bwrap as PID 1 inside: two tasks the sandboxed program does not get.
_BWRAP_TASKS = 2
MIN_BWRAP = (0, 5)
DISABLE_USERNS_BWRAP = (0, 8)
log = logging.getLogger("brokerd.sandbox")


class BubblewrapSandbox(Backend):
    def __init__(
        self,
        *,
        toolkit_dir: Path,
        layout: BwrapLayout | None = None,
        scratch_root: Path | None = None,
        egress_resolver: Mapping[str, str] | None = None,
        sandbox_uid: int = DEFAULT_SANDBOX_UID,
        owner: str | None = None,
    ):
        """``owner``: this brokerd's name (one per state directory); a root brokerd's call groups
        are under it, so ``remove_leftovers`` finds its own and no other brokerd's."""
        self.layout = layout or BwrapLayout()
        self.owner = owner
        # The host uid the tool runs as: brokerd's own, unless that is root.
        self.sandbox_uid = sandbox_uid if os.geteuid() == 0 else os.geteuid()
        if self.sandbox_uid == 0:
            raise SandboxUnavailable("bubblewrap backend: sandbox_uid must not be 0 (root)")
        self._run_as = self.sandbox_uid if os.geteuid() == 0 else None
        programs = (self.layout.bwrap, self.layout.prlimit, self.layout.python)
        for program in programs:
            if shutil.which(program) is None:
                raise SandboxUnavailable(f"bubblewrap backend: {program!r} is not installed")
        self.layout = _for_version(self.layout, bwrap_version(self.layout.bwrap))
        if not (toolkit_dir / "main.py").is_file():
            raise SandboxUnavailable(f"bubblewrap: {toolkit_dir} is not the toolkit package")
        super().__init__(scratch_root, egress_resolver, owner=self._run_as)
        self._toolkit_dir = toolkit_dir
        self._seccomp = compile_filter()
        self._use_cgroup = os.geteuid() == 0 and pids_cgroup_available()

    def remove_leftovers(self) -> list[str]:
        """Kill what an earlier, SIGKILLed brokerd on this state left in its call groups: at
        start, before any call. A sandbox dies with brokerd (``--die-with-parent``) once bwrap
        has set that up; before, only its group holds it. Each one found is logged."""
        if not (self._use_cgroup and self.owner):
            return []
        try:
            names = kill_leftovers(self.owner)
        except OSError as exc:
            raise SandboxUnavailable(
                f"bubblewrap: an earlier brokerd's sandbox is left: {exc}") from None
        for name in names:
            log.warning("sandbox group %s of an earlier brokerd on this state still held "
                        "processes (brokerd was killed while it started): killed them", name)
        return names

    def enforced_limits(self) -> dict[str, str]:
        if self._run_as is None:
            pids = "RLIMIT_NPROC in the sandbox's user namespace"
        else:
            pids = f"RLIMIT_NPROC of uid {self._run_as} (shared by concurrent calls)"
        if self._use_cgroup:
            pids += " and cgroup v1 pids.max"
        return {"time": "deadline + RLIMIT_CPU", "memory": "RLIMIT_DATA per process",
                "tmpfs": "/tmp sized at half the memory limit", "pids": pids,
                "uid": f"host uid {self.sandbox_uid}"}

    async def _execute(self, spec: SandboxSpec, workspace: CallWorkspace) -> SandboxOutcome:
        seccomp = filter_fd(self._seccomp)
        try:
            argv = bwrap_argv(spec, self.layout, toolkit_dir=self._toolkit_dir,
                              secrets_dir=workspace.secrets_dir, egress_dir=workspace.egress_dir,
                              seccomp_fd=seccomp, run_as=self._run_as)
            return await self._run(spec, argv, seccomp)
        finally:
            os.close(seccomp)

    async def _run(self, spec: SandboxSpec, argv: list[str], seccomp: int) -> SandboxOutcome:
        cgroup = None
        if self._use_cgroup:
            name = f"call-{secrets.token_hex(8)}"
            cgroup = PidsCgroup(f"{self.owner}/{name}" if self.owner else name,
                                spec.limits.pids + _BWRAP_TASKS)
            argv = cgroup.wrap(argv)
        try:
            finished = await run_process(
                argv, stdin=spec.arguments.encode("utf-8"), timeout_s=spec.limits.timeout_s,
                stdout_cap=stdout_cap(spec), env={"PATH": "/usr/bin:/bin"}, pass_fds=(seccomp,),
            )
        finally:
            if cgroup is not None:
                await cgroup.remove()
        return interpret(finished, data_class=spec.data_class, egress=bool(spec.hosts),
                         timeout_s=spec.limits.timeout_s, stdout_cap=stdout_cap(spec))


def bwrap_version(bwrap: str) -> tuple[int, ...]:
    """``bwrap --version`` as numbers, e.g. (0, 8, 0)."""
    try:
        text = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"bubblewrap backend: {bwrap} --version failed: {exc}") from None
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if found is None:
        raise SandboxUnavailable(f"bubblewrap backend: cannot read {bwrap}'s version: {text!r}")
    return tuple(int(part) for part in found.groups("0"))


def _for_version(layout: BwrapLayout, version: tuple[int, ...]) -> BwrapLayout:
    """0.5 is the least that can size a tmpfs (``--size``, ``--perms``); before 0.8 there is no
    ``--disable-userns`` and the seccomp filter alone refuses user namespaces."""
    shown = ".".join(map(str, version))
    if version < MIN_BWRAP:
        raise SandboxUnavailable(f"bubblewrap {shown} is too old: 0.5 or later sizes /tmp "
                                 "(--size); Debian 12 ships 0.8.0")
    if version < DISABLE_USERNS_BWRAP:
        log.warning("bubblewrap %s has no --disable-userns (0.8 or later): only the seccomp "
                    "filter refuses user namespaces inside the sandbox", shown)
        return dataclasses.replace(layout, disable_userns=False)
    return layout
