"""What both backends do for one call: refuse a spec no sandbox may run, place things inside the
sandbox and write the toolkit's command line (pure); make the call's private scratch directory
on the host (the granted secrets as 0400 files, and the directory the egress proxy's socket
lives in, removed when the call ends; with an ``owner``, the sandbox's host uid when that is
not brokerd's own, every file in it is given to that uid, so the tool can read its secrets and
reach the proxy); and ``Backend.run``: authorize, check the spec, make the workspace, and serve
the egress proxy for exactly as long as the sandbox runs.
"""

from __future__ import annotations

import logging
import math
import os
import posixpath
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from ..egress import egress_proxy
from ._pidns import LEFTOVER_WAIT_S, NamespaceInit
from ._process import SandboxOutcome
from .errors import BadSandboxSpec, MountMoved, SandboxUnavailable
from .spec import SandboxSpec

TOOLKIT_DIR = "/opt/toolkit"  # PYTHONPATH; the package itself is /opt/toolkit/toolkit
SECRETS_DIR = "/run/secrets"
EGRESS_DIR = "/run/egress"
PROXY_SOCKET = f"{EGRESS_DIR}/proxy.sock"
# The toolkit's interpreter options in both backends (the image's entrypoint says the same):
# -P keeps the working directory off sys.path, so a json.py in a granted directory is never
# imported; -S no site module (no site-packages, no .pth file runs, and a fifth of a bare start);
# -B no .pyc written. The process starts in / in both backends and
# the toolkit moves to the grant's workdir (``--workdir``) only once it is loaded.
TOOLKIT_INTERPRETER = ("-P", "-S", "-B", "-m", "toolkit")
OPEN_FILES = 256
# Targets a granted mount may not cover, sit under, or sit above.
RESERVED = ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/proc", "/dev", "/etc", "/sys",
            TOOLKIT_DIR, SECRETS_DIR, EGRESS_DIR)
log = logging.getLogger("brokerd.sandbox")
_PROGRAM = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*")
_SECRET = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def check_spec(spec: SandboxSpec) -> None:
    """Refuse a spec no sandbox may run, naming the field. Policy should never make one."""
    if not _PROGRAM.fullmatch(spec.program):
        raise BadSandboxSpec(f"program: {spec.program!r} is not a toolkit tool name")
    for index, mount in enumerate(spec.mounts):
        _check_target(f"mounts[{index}].target", mount.target)
        if not mount.source.is_absolute():
            raise BadSandboxSpec(f"mounts[{index}].source: {mount.source} is not absolute")
    for index, secret in enumerate(spec.secrets):
        if not _SECRET.fullmatch(secret.name) or secret.name in (".", ".."):
            raise BadSandboxSpec(f"secrets[{index}]: {secret.name!r} is not a plain file name")
    if spec.workdir is not None and not posixpath.isabs(spec.workdir):
        raise BadSandboxSpec(f"workdir: {spec.workdir!r} is not absolute")
    limits = spec.limits
    if min(limits.memory_mb, limits.pids, limits.output_cap) < 1 or not limits.timeout_s > 0:
        raise BadSandboxSpec(f"limits: every limit must be positive, got {limits}")


def _check_target(field: str, target: str) -> None:
    clean = posixpath.normpath(target)
    if not posixpath.isabs(target) or clean != target.rstrip("/") or clean in ("/", "/tmp"):
        raise BadSandboxSpec(f"{field}: {target!r} must be a clean absolute path below /")
    for reserved in RESERVED:
        inside = clean == reserved or clean.startswith(reserved + "/")
        if inside or reserved.startswith(clean + "/"):
            raise BadSandboxSpec(f"{field}: {target!r} would cover the sandbox's {reserved}")


def toolkit_args(spec: SandboxSpec, pins: tuple[Pin, ...],
                 lifeline: int | None = None) -> list[str]:
    """``bx-tool``'s arguments after the interpreter: the tool and its context as options (never
    environment variables), each mount with the directory it must be (``pins``, one a mount),
    and the descriptor of the call's ``lifeline``
    (bubblewrap). The JSON arguments go on stdin."""
    args = [spec.program, "--class", spec.data_class.value, "--cap", str(spec.limits.output_cap)]
    if lifeline is not None:
        args.append(f"--lifeline={lifeline}")
    for mount, pin in zip(spec.mounts, pins, strict=True):
        args += ["--root", mount.target, f"--pinned={pin.device}:{pin.inode}:{mount.target}"]
    if spec.hosts:
        args += ["--proxy-socket", PROXY_SOCKET]
    if spec.workdir is not None:
        args += ["--workdir", spec.workdir]
    if spec.settings is not None:
        args += ["--settings", spec.settings]
    if (opened := spec.opened) is not None:
        # --opt=value: a relative path may be empty or start with "-"
        args += [f"--beneath={opened.root}", f"--relative={opened.relative}",
                 f"--host-path={opened.host_path}", *(f"--glob={g}" for g in opened.globs),
                 *(f"--descend={d}" for d in opened.descend)]
    return args


def stdout_cap(spec: SandboxSpec) -> int:
    """The most stdout a well-behaved toolkit call can print: content escaped as JSON (at worst
    six bytes per byte, ``\\u0000``) plus the envelope."""
    return 6 * spec.limits.output_cap + 4096


def cpu_seconds(spec: SandboxSpec) -> int:
    return math.ceil(spec.limits.timeout_s) + 1


def data_bytes(spec: SandboxSpec) -> int:
    return spec.limits.memory_mb * 1024 * 1024


def tmpfs_bytes(spec: SandboxSpec) -> int:
    """The size of every tmpfs a call may write (/tmp, podman's /dev/shm): half its memory
    limit. RLIMIT_DATA does not count tmpfs pages, so without a size /tmp could take the host's
    memory; a cgroup memory limit (podman) does count them, and half leaves the tool room to
    run, so filling /tmp ends in ENOSPC rather than the OOM killer."""
    return max(1, spec.limits.memory_mb // 2) * 1024 * 1024


def default_scratch_root() -> Path:
    """tmpfs when the host has one at /dev/shm, so secrets never reach a disk."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


@dataclass(frozen=True)
class Pin:
    """The directory (or file) a mount's source was when brokerd opened it. The sandbox binds
    the source by its path, which a symlink swapped in after the opening would send elsewhere;
    the toolkit, first thing inside, refuses to run unless what is at the mount's target is
    this (``toolkit.main``), so the race is lost before anything is read."""

    device: int
    inode: int


def pin_mount(source: Path) -> tuple[int, Pin]:
    """Open ``source`` and check that it is where its grant resolved it: no symlink on its way
    now. Its descriptor, held until the call ends, keeps its inode number from being reused."""
    try:
        fd = os.open(source, os.O_PATH)
    except OSError as exc:
        raise MountMoved(f"the mount {source} cannot be opened ({exc.strerror}); brokerd "
                         "reloads grants when their directory changes") from None
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
        found = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise SandboxUnavailable(f"brokerd cannot tell what it opened for the mount {source} "
                                 f"(is /proc mounted?): {exc}") from None
    if opened != str(source):
        os.close(fd)
        raise MountMoved(f"the mount {source} resolves elsewhere than when its grant loaded (a "
                         "symlink on its way); brokerd reloads grants when their directory "
                         "changes")
    return fd, Pin(found.st_dev, found.st_ino)


class CallWorkspace:
    def __init__(self, spec: SandboxSpec, scratch_root: Path, *, owner: int | None,
                 sees_sources: bool, prefix: str):
        """``sees_sources`` False: the sandbox is made elsewhere (a podman service), which may
        bind a source brokerd cannot see; such a call does not run (docs/threat-model.md, the
        appliance)."""
        self._spec = spec
        self._owner = owner
        self._root = scratch_root
        self._sees_sources = sees_sources
        self._prefix = prefix
        self.path: Path | None = None
        self.secrets_dir: Path | None = None
        self.egress_dir: Path | None = None
        self.pins: tuple[Pin, ...] = ()
        self._pinned: list[int] = []

    def __enter__(self) -> CallWorkspace:
        try:
            self._make()
        except BaseException:  # nothing of a call that never ran is left behind
            self.__exit__(None, None, None)
            raise
        return self

    def _make(self) -> None:
        self.pins = tuple(self._pin(mount.source) for mount in self._spec.mounts)
        self.path = Path(tempfile.mkdtemp(prefix=self._prefix, dir=self._root))  # mode 0700
        if self._spec.secrets:
            self.secrets_dir = self.path / "secrets"
            self.secrets_dir.mkdir(mode=0o700)
            for secret in self._spec.secrets:
                fd = os.open(self.secrets_dir / secret.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                             0o400)
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(secret.reveal())
        if self._spec.hosts:
            self.egress_dir = self.path / "egress"
            self.egress_dir.mkdir(mode=0o755)
        if self._owner is not None:
            for directory, _, files in os.walk(self.path):
                os.chown(directory, self._owner, self._owner)
                for name in files:
                    os.chown(os.path.join(directory, name), self._owner, self._owner)

    def _pin(self, source: Path) -> Pin:
        if not (self._sees_sources or os.path.lexists(source)):
            raise SandboxUnavailable(
                f"brokerd cannot see the mount {source} (the tools' podman service would bind "
                "it from where brokerd cannot check it): on the appliance, list its tree in "
                "services.boxmaker.grantableTrees so brokerd's container binds it read-only")
        fd, pin = pin_mount(source)
        self._pinned.append(fd)
        return pin

    def _unpin(self) -> None:
        for fd in self._pinned:
            os.close(fd)
        self._pinned.clear()

    @property
    def proxy_socket(self) -> Path:
        assert self.egress_dir is not None, "no egress for this call"
        return self.egress_dir / "proxy.sock"

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._unpin()
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


if TYPE_CHECKING:  # policy imports the spec from this package: no import cycle at run time
    from ..policy import Decision


class Backend(ABC):
    def __init__(self, scratch_root: Path | None, egress_resolver: Mapping[str, str] | None,
                 *, owner: int | None = None, sees_sources: bool = True,
                 instance: str | None = None):
        """``instance``: this brokerd's name (one per state directory), in its call workspaces'
        names, so that ``remove_scratch_leftovers`` finds its own and no other brokerd's."""
        self._scratch_root = scratch_root or default_scratch_root()
        self._prefix = f"bx-call-{instance}-" if instance else "bx-call-"
        self._instance = instance
        self._owner = owner  # the host uid each call's scratch files are given to, if not ours
        self._resolver = egress_resolver
        self._sees_sources = sees_sources  # False: the sandbox is made by a podman service

    async def run(self, decision: Decision) -> SandboxOutcome:
        spec = decision.authorize()
        check_spec(spec)
        with CallWorkspace(spec, self._scratch_root, owner=self._owner,
                           sees_sources=self._sees_sources, prefix=self._prefix) as workspace:
            if workspace.egress_dir is None:
                return await self._execute(spec, workspace)
            async with egress_proxy(workspace.proxy_socket, spec.hosts, self._resolver,
                                    internal=spec.internal):
                return await self._execute(spec, workspace)

    def remove_scratch_leftovers(self) -> list[Path]:
        """The call workspaces a killed brokerd on this state left, with the secrets injected
        into them (attack 31j, E5): removed at start, after its sandboxes are gone and before
        any call (and before the write period it left open is closed). Each one is logged.
        SandboxUnavailable when a sandbox recorded in one still has processes after
        LEFTOVER_WAIT_S (killed with its brokerd, but in an uninterruptible system call)."""
        if not self._instance:
            return []
        found = sorted(path for path in self._scratch_root.glob(f"{self._prefix}*")
                       if path.is_dir() and not path.is_symlink())
        for path in found:
            log.warning("call workspace %s of an earlier brokerd on this state is still there "
                        "(brokerd was killed during a call): removing it", path)
            init = NamespaceInit.recorded(path)
            if init is not None and not init.gone_within(LEFTOVER_WAIT_S):
                raise SandboxUnavailable(
                    f"the sandbox of {path} (PID 1 is host pid {init.pid}) still has processes "
                    f"{LEFTOVER_WAIT_S:.0f} s after its brokerd was killed; brokerd starts once "
                    "they are gone")
            shutil.rmtree(path, ignore_errors=True)
        return found

    @abstractmethod
    async def _execute(self, spec: SandboxSpec, workspace: CallWorkspace) -> SandboxOutcome:
        """Run the sandbox for ``spec`` with ``workspace``'s secrets and proxy directory."""
