"""The bubblewrap backend: a fresh set of namespaces per call, gone when the call returns.

What is enforced where (see also ``_cgroup``):
- time: brokerd's deadline kills bwrap's process group; ``--die-with-parent`` and the PID
  namespace take everything inside with it. RLIMIT_CPU backs it up.
- memory: RLIMIT_DATA per process (the toolkit reports MemoryError as out of memory), and /tmp
  is a tmpfs of half that size. No cgroup memory limit, so N processes may use N times the limit
  (N is bounded by the pids limit).
- pids: RLIMIT_NPROC inside the user namespace (brokerd not root); as root, RLIMIT_NPROC of
  ``sandbox_uid`` (shared by concurrent calls) and a cgroup v1 ``pids.max`` when brokerd can
  create one.

Its command line (``bwrap_argv``, pure).

Every namespace unshared (no network: a call with hosts reaches the proxy through its bound
socket directory only), dies with brokerd, a new session (no TIOCSTI into brokerd's terminal),
cleared environment, every capability dropped (bwrap also sets no_new_privs), the seccomp filter
of ``_seccomp``, a tmpfs root in which only the system directories are bound read-only, then
the toolkit, the granted mounts, the secrets and the egress directory. / and /dev are read-only,
/proc/sys is bound read-only over itself, and /tmp is a tmpfs with a size (``tmpfs_bytes``).
The interpreter starts with ``-P`` in ``/``, so nothing in a granted directory shadows a module.

Who the tool is on the host (never a privileged uid):

- brokerd not root: bwrap makes a user namespace mapping the sandbox to brokerd's own uid, and
  ``--disable-userns`` (bubblewrap >= 0.8) forbids any further one inside;
- brokerd root (``run_as``): bwrap stays root for its set-up, so it can reach every source, but
  makes no user namespace (one made by root would map the sandbox to host root). It keeps only
  CAP_SETUID, CAP_SETGID and CAP_SETPCAP, and ``BECOME`` (a few lines of the sandbox's own
  Python, ``-I -S -B``) empties the bounding set, drops every group and changes to ``run_as``,
  which clears those three too, sets the same limits as prlimit and runs the toolkit in the same
  interpreter (one Python start per call, not two). Not ``setpriv``: it looks the uid
  up by name first (getpwnam), and glibc then connects to nscd's socket. bwrap refuses
  ``--disable-userns`` without a user namespace of its own; there the seccomp filter alone
  refuses new user namespaces.

Limits that the kernel applies per process are set inside, after the uid is final (by prlimit,
or by ``BECOME`` as root):
RLIMIT_NPROC counts the sandbox's processes only in its user namespace (brokerd not root); as
``run_as`` it counts that uid's processes on the host (see ``_cgroup`` for root's pids limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import posixpath
import re
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bxcore.config.broker import DEFAULT_SANDBOX_UID

from ._call import (
    EGRESS_DIR,
    OPEN_FILES,
    SECRETS_DIR,
    TOOLKIT_DIR,
    TOOLKIT_INTERPRETER,
    Backend,
    CallWorkspace,
    Pin,
    cpu_seconds,
    data_bytes,
    stdout_cap,
    tmpfs_bytes,
    toolkit_args,
)
from ._cgroup import PidsCgroup, kill_leftovers, pids_cgroup_available
from ._pidns import NamespaceInit, child_pid, readable
from ._process import SandboxOutcome, finish_uncancelled, interpret, run_process
from ._seccomp import compile_filter, filter_fd
from .errors import SandboxUnavailable
from .spec import SandboxSpec

GO = b"\x01"  # on the lifeline: brokerd holds the sandbox's PID 1, the tool may run
DEBIAN_SYSTEM: tuple[tuple[str, ...], ...] = (
    ("--ro-bind", "/usr", "/usr"),
    ("--symlink", "usr/lib", "/lib"),
    ("--symlink", "usr/lib64", "/lib64"),
    ("--symlink", "usr/bin", "/bin"),
    ("--symlink", "usr/sbin", "/sbin"),
)


@dataclass(frozen=True, kw_only=True)
class BwrapLayout:
    """Where things are on this host. The defaults fit Debian with merged /usr."""

    bwrap: str = "bwrap"
    python: str = "/usr/bin/python3"
    prlimit: str = "/usr/bin/prlimit"
    # bubblewrap >= 0.8 (Debian 12's 0.8.0): --disable-userns. Older ones lack it, and the
    # seccomp filter alone refuses new user namespaces (BubblewrapSandbox says so at start).
    disable_userns: bool = True
    system: tuple[tuple[str, ...], ...] = DEBIAN_SYSTEM
    certificates: str = "/etc/ssl"  # bound read-only for calls with egress (https needs it)


# What the uid change needs to become run_as and clear the bounding set; it drops all three.
KEPT_FOR_SETPRIV = ("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add",
                    "CAP_SETPCAP")
# Run as root inside a root brokerd's sandbox: no bounding set, no groups, uid and gid run_as
# (which clears the permitted and effective capabilities), then the limits prlimit sets for a
# non-root brokerd (argv 2-5, after the uid is final), then the toolkit in this same interpreter:
# a second interpreter start would be most of the sandbox's cost per call. ``-I`` ignores
# PYTHONPATH, so the toolkit's directory is put on sys.path only once the uid is final.
BECOME = f"""\
import ctypes, os, resource, sys
uid = int(sys.argv[1])
prctl = ctypes.CDLL(None, use_errno=True).prctl
cap = 0
while prctl(24, cap, 0, 0, 0) == 0:  # PR_CAPBSET_DROP until EINVAL: past the last capability
    cap += 1
if ctypes.get_errno() != 22:
    raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")
os.setgroups([])
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)
limits = (resource.RLIMIT_DATA, resource.RLIMIT_NPROC, resource.RLIMIT_CPU, resource.RLIMIT_NOFILE)
for limit, value in zip(limits, sys.argv[2:6], strict=True):
    resource.setrlimit(limit, (int(value), int(value)))
del sys.argv[1:6]
sys.path.insert(0, {TOOLKIT_DIR!r})
from toolkit.main import main
sys.exit(main())
"""
NAMESPACES_BUT_USER = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                      "--unshare-cgroup")


def bwrap_argv(
    spec: SandboxSpec,
    layout: BwrapLayout,
    *,
    toolkit_dir: Path,
    secrets_dir: Path | None,
    egress_dir: Path | None,
    seccomp_fd: int,
    pins: tuple[Pin, ...],
    lifeline: int,
    status_fd: int,
    run_as: int | None = None,
) -> list[str]:
    if run_as is None:
        argv = [layout.bwrap, "--unshare-all", "--unshare-user"]
        argv += ["--disable-userns"] if layout.disable_userns else []
        capabilities = ["--cap-drop", "ALL"]
    else:
        argv = [layout.bwrap, *NAMESPACES_BUT_USER]
        capabilities = ["--cap-drop", "ALL", *KEPT_FOR_SETPRIV]
    argv += ["--die-with-parent", "--new-session", "--seccomp", str(seccomp_fd),
             "--json-status-fd", str(status_fd)]
    for item in layout.system:
        argv += item
    argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    argv += ["--dev", "/dev", "--remount-ro", "/dev"]
    argv += ["--perms", "1777", "--size", str(tmpfs_bytes(spec)), "--tmpfs", "/tmp"]
    targets = [f"{TOOLKIT_DIR}/toolkit", *(m.target for m in spec.mounts)]
    targets += [SECRETS_DIR, EGRESS_DIR, layout.certificates]
    for parent in _parents(targets):  # bwrap would make them 0700: the tool could not pass
        argv += ["--perms", "0755", "--dir", parent]
    argv += ["--ro-bind", str(toolkit_dir), f"{TOOLKIT_DIR}/toolkit"]
    for mount in spec.mounts:
        argv += ["--bind" if mount.writable else "--ro-bind", str(mount.source), mount.target]
    if secrets_dir is not None:
        argv += ["--ro-bind", str(secrets_dir), SECRETS_DIR]
    if egress_dir is not None:
        argv += ["--ro-bind", str(egress_dir), EGRESS_DIR]
        argv += ["--ro-bind-try", layout.certificates, layout.certificates]
    argv += ["--remount-ro", "/", "--chdir", "/"]
    argv += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "PYTHONPATH",
             TOOLKIT_DIR, "--setenv", "LANG", "C.UTF-8", "--setenv", "HOME", "/tmp"]
    argv += [*capabilities, "--"]
    limits = (data_bytes(spec), spec.limits.pids, cpu_seconds(spec), OPEN_FILES)
    if run_as is not None:
        argv += [layout.python, "-I", "-S", "-B", "-c", BECOME, str(run_as), *map(str, limits)]
    else:
        argv += [layout.prlimit, *(f"--{name}={value}" for name, value in
                                   zip(("data", "nproc", "cpu", "nofile"), limits, strict=True)),
                 "--", layout.python, *TOOLKIT_INTERPRETER]
    return [*argv, *toolkit_args(spec, pins, lifeline)]


def _parents(targets: list[str]) -> list[str]:
    """Every directory above ``targets``, below /, parents first."""
    found: set[str] = set()
    for target in targets:
        parent = posixpath.dirname(target.rstrip("/"))
        while parent not in ("/", ""):
            found.add(parent)
            parent = posixpath.dirname(parent)
    return sorted(found, key=lambda path: (path.count("/"), path))


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
        found = {program: shutil.which(program) for program in
                 (self.layout.bwrap, self.layout.prlimit, self.layout.python)}
        for program, path in found.items():
            if path is None:
                raise SandboxUnavailable(f"bubblewrap backend: {program!r} is not installed")
        # The bwrap found on brokerd's PATH is the one run (a call's PATH is the sandbox's).
        self.layout = dataclasses.replace(self.layout, bwrap=str(found[self.layout.bwrap]))
        self.layout = _for_version(self.layout, bwrap_version(self.layout.bwrap))
        if not (toolkit_dir / "main.py").is_file():
            raise SandboxUnavailable(f"bubblewrap: {toolkit_dir} is not the toolkit package")
        super().__init__(scratch_root, egress_resolver, owner=self._run_as, instance=owner)
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
        assert workspace.path is not None
        seccomp = filter_fd(self._seccomp)
        lifeline = Lifeline()
        init = InitWatch(workspace.path)
        try:
            argv = bwrap_argv(spec, self.layout, toolkit_dir=self._toolkit_dir,
                              secrets_dir=workspace.secrets_dir, egress_dir=workspace.egress_dir,
                              seccomp_fd=seccomp, pins=workspace.pins, lifeline=lifeline.read_end,
                              status_fd=init.status_fd, run_as=self._run_as)
            return await self._run(spec, argv, (seccomp, lifeline.read_end, init.status_fd),
                                   lifeline, init)
        finally:
            lifeline.close()
            init.close()
            os.close(seccomp)

    async def _run(self, spec: SandboxSpec, argv: list[str], passed: tuple[int, ...],
                   lifeline: Lifeline, init: InitWatch) -> SandboxOutcome:
        """Run bwrap with ``passed`` descriptors. The tool runs once brokerd holds the sandbox's
        PID 1 (``lifeline.go``); the call ends once every process of the sandbox is gone."""
        cgroup = None
        try:
            if self._use_cgroup:
                name = f"call-{secrets.token_hex(8)}"
                cgroup = PidsCgroup(f"{self.owner}/{name}" if self.owner else name,
                                    spec.limits.pids + _BWRAP_TASKS)
                argv = cgroup.wrap(argv)
            init.watch(lifeline)
            finished = await run_process(
                argv, stdin=spec.arguments.encode("utf-8"), timeout_s=spec.limits.timeout_s,
                stdout_cap=stdout_cap(spec), env={"PATH": "/usr/bin:/bin"}, pass_fds=passed,
                before_kill=lifeline.end,
            )
        finally:
            lifeline.end()  # the call is over for brokerd: so it is for what is left of it
            await finish_uncancelled(init.gone(f"call of {spec.program}"))
            if cgroup is not None:
                await finish_uncancelled(cgroup.remove())
        return interpret(finished, data_class=spec.data_class, egress=bool(spec.hosts),
                         timeout_s=spec.limits.timeout_s, stdout_cap=stdout_cap(spec))


class Lifeline:
    """The call's lifeline: the sandbox gets the read end, brokerd alone holds the write end.
    The tool runs only once it reads brokerd's go, sent once brokerd holds the sandbox's PID 1
    (``InitWatch``); end of file means the call is over (its time ran out, brokerd stopped or
    died), and nothing runs: a sandbox whose bwrap was killed before it tied the sandbox to its
    own life (attack 31j E2/E15) finds it so. Ended before bwrap is killed, however it is, so a
    sandbox that found it open is tied to a bwrap still alive (attack 31k, K7)."""

    def __init__(self) -> None:
        self.read_end, self._write_end = os.pipe()

    def go(self) -> None:
        if self._write_end >= 0:
            os.write(self._write_end, GO)

    def end(self) -> None:
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1

    def close(self) -> None:
        self.end()
        os.close(self.read_end)


class InitWatch:
    """bwrap's ``--json-status-fd``: its first line names the sandbox's PID 1. brokerd opens a
    pidfd on it, records it in the call's workspace (for a brokerd restarted after being
    killed) and only then lets the tool run; the call ends once that pidfd is readable."""

    def __init__(self, workspace: Path):
        self._workspace = workspace
        self._read_end, self.status_fd = os.pipe()
        self._watching: asyncio.Future[NamespaceInit | None] | None = None

    def watch(self, lifeline: Lifeline) -> None:
        self._watching = asyncio.ensure_future(self._hold(lifeline))

    async def _hold(self, lifeline: Lifeline) -> NamespaceInit | None:
        pid = child_pid(await _first_line(self._read_end))
        init = None if pid is None else NamespaceInit.find(pid)
        if init is not None:
            try:
                init.record(self._workspace)
            except OSError:
                init.close()  # not recorded: the tool does not run
                raise
            lifeline.go()
        return init

    async def gone(self, what: str) -> None:
        """Once bwrap has ended: wait for its sandbox's processes to be gone. A sandbox whose
        PID 1 brokerd never held ran no tool (the lifeline had no go)."""
        if self._watching is None:
            return
        if not self._watching.done():
            self._watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._watching
        init = None if self._watching.cancelled() else self._watching.result()
        if init is not None:
            await init.gone(what)

    def close(self) -> None:
        for fd in (self._read_end, self.status_fd):
            os.close(fd)


async def _first_line(fd: int, limit: int = 4096) -> bytes:
    """The first line on the pipe ``fd`` (empty at its end), read without blocking the loop."""
    os.set_blocking(fd, False)
    line = bytearray()
    while b"\n" not in line and len(line) < limit:
        await readable(fd)
        try:
            chunk = os.read(fd, limit)
        except BlockingIOError:
            continue
        if not chunk:
            break
        line += chunk
    return bytes(line.split(b"\n", 1)[0])


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
