"""The podman backend: one ``podman run --rm`` per call of the toolkit image, by digest.

Either podman on this host, or (``remote``) a ``podman system service`` that brokerd reaches over
a Unix socket: on the appliance brokerd is itself a container with no runtime, and the service
runs as brokerd's own host user, so the per-call files it creates are readable by the tool and
by nobody else. The paths brokerd passes are host paths: each call's scratch directory is on a
mount that has the same path in brokerd's container and on the host.

Who the tool is on the host: asked of podman once, at start (``podman info``). Under a
rootless podman (the appliance's service; a non-root brokerd) the container's root maps to the
podman user, which is unprivileged. Under a rootful one (a root brokerd's local podman, or a
rootful service) the tool runs as ``sandbox_uid`` (``[broker] sandbox_uid``), and each call's
scratch files are given to it; a writable mount must then be writable by that uid.

Rootless-capable: nothing here needs root. With rootless podman on cgroup v1, ``--memory`` and
``--pids-limit`` are ignored (measured), and the ``--ulimit`` data/nproc/cpu limits are what
holds; as root, or with cgroup v2, both hold. Time: brokerd's deadline kills the container
(``podman kill``), with conmon's ``--timeout`` behind it. The call ends once the
container's PID 1 is gone, which takes every process of its namespace with it (``_pidns``): a
local podman tells brokerd its pid (``--pidfile``), and brokerd waits on it; the pids of a podman
service are another PID namespace's, and there brokerd waits until podman reports the container
stopped or removed. Both say PID 1 was reaped: conmon, its parent, records the exit only then.
Never ``rm --force`` while a call could run: after a stop that failed it removes the container
with processes still in it (attack 31n, F3); ``rm`` without it refuses a running container.

Its command lines (pure): run by digest, never pull; kill, ask its state, remove.

The container starts in / (the toolkit moves to the grant's workdir once loaded), with the
seccomp profile of ``_seccomp`` (podman's default baseline, and no user namespaces inside:
podman's own default allows them), /proc/sys read-only (podman's default), and
every tmpfs sized: podman's own tmpfs mounts for a read-only container (/run, /var/tmp, each
without a size) are turned off and /tmp and /dev/shm get the call's ``tmpfs_bytes``. ``user``
is who the tool is in the container: 0:0 under a rootless podman, where that maps to the
podman user, and an unprivileged uid under a rootful one (``PodmanSandbox`` decides).

Through a podman service (``remote``) the container shares the service's UTS namespace
(``--uts=host``), as the roles' containers share their units': the module's tool runtime unit
has one of its own (``ProtectHostname=yes``, which also refuses ``sethostname``) and may not
make another (``RestrictNamespaces=`` leaves out ``uts``), so a UTS namespace of the
container's own cannot be made there (runc: "can't get final child's PID from pipe: EOF") nor
named (``sethostname``: EPERM). The tool can read that hostname and not change it (no
capabilities; the seccomp profile refuses ``sethostname``). A local podman gives each call a
UTS namespace of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bxcore.config.broker import DEFAULT_SANDBOX_UID

from ._call import (
    EGRESS_DIR,
    OPEN_FILES,
    SECRETS_DIR,
    Backend,
    CallWorkspace,
    Pin,
    cpu_seconds,
    data_bytes,
    stdout_cap,
    tmpfs_bytes,
    toolkit_args,
)
from ._pidns import LEFTOVER_WAIT_S, RECORD, WARN_EVERY_S, NamespaceInit
from ._process import SandboxOutcome, finish_uncancelled, interpret, run_process
from ._seccomp import oci_profile
from .errors import SandboxUnavailable
from .spec import SandboxSpec

_BY_DIGEST = re.compile(r"[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class PodmanSetup:
    image: str  # name@sha256:<hex>: the toolkit image by digest, never a tag
    # The shipped images/containers.conf (runtime runc, low ulimits); with ``remote`` it is the
    # service's own business, so None.
    containers_conf: Path | None
    podman: str = "podman"
    storage: tuple[str, ...] = ()  # global options, e.g. a private --root/--runroot in tests
    remote: str | None = None  # "unix:///<path>": a podman service that runs the containers

    def __post_init__(self) -> None:
        if not _BY_DIGEST.fullmatch(self.image):
            raise SandboxUnavailable(f"podman image {self.image!r} is not name@sha256:<digest>")
        if self.remote is None and self.containers_conf is None:
            raise SandboxUnavailable("podman backend: a local podman needs containers_conf")

    def namespaces(self) -> list[str]:
        return [] if self.remote is None else ["--uts=host"]

    def base(self) -> list[str]:
        remote = [] if self.remote is None else ["--remote", f"--url={self.remote}"]
        return [self.podman, *remote, *self.storage]


OWNER_LABEL = "org.boxmaker.brokerd"


def podman_run_argv(
    spec: SandboxSpec,
    setup: PodmanSetup,
    *,
    name: str,
    secrets_dir: Path | None,
    egress_dir: Path | None,
    seccomp_profile: Path,
    pins: tuple[Pin, ...],
    user: str = "0:0",
    owner: str | None = None,
    pidfile: Path | None = None,
) -> list[str]:
    """``owner``: the brokerd the container belongs to (OWNER_LABEL), so that the next start of
    that brokerd finds it if it outlives brokerd. ``pidfile``: where podman writes the host pid
    of the container's PID 1 (``_pidns``)."""
    limits = spec.limits
    tmpfs = tmpfs_bytes(spec)
    argv = [
        *setup.base(),
        "run", "--rm", "--interactive", f"--name={name}",
        "--network=none", "--pull=never", "--read-only", "--cap-drop=ALL",
        "--security-opt=no-new-privileges", f"--security-opt=seccomp={seccomp_profile}",
        "--read-only-tmpfs=false",
        f"--tmpfs=/tmp:rw,nosuid,nodev,size={tmpfs}", f"--shm-size={tmpfs}",
        f"--user={user}", "--workdir=/",
        f"--memory={limits.memory_mb}m", f"--memory-swap={limits.memory_mb}m",
        f"--pids-limit={limits.pids}",
        # Given one --ulimit podman drops every default, so all of these are spelled out.
        f"--ulimit=nofile={OPEN_FILES}:{OPEN_FILES}",
        f"--ulimit=nproc={limits.pids}:{limits.pids}",
        f"--ulimit=data={data_bytes(spec)}:{data_bytes(spec)}",
        f"--ulimit=cpu={cpu_seconds(spec)}:{cpu_seconds(spec)}",
        # conmon's own kill, should brokerd be gone; brokerd's deadline comes first.
        f"--timeout={math.ceil(limits.timeout_s) + 5}",
        "--log-driver=none",
        *setup.namespaces(),
        *([] if owner is None else [f"--label={OWNER_LABEL}={owner}"]),
        *([] if pidfile is None else [f"--pidfile={pidfile}"]),
    ]
    for mount in spec.mounts:
        mode = "rw" if mount.writable else "ro"
        argv.append(f"--volume={mount.source}:{mount.target}:{mode}")
    if secrets_dir is not None:
        argv.append(f"--volume={secrets_dir}:{SECRETS_DIR}:ro")
    if egress_dir is not None:
        argv.append(f"--volume={egress_dir}:{EGRESS_DIR}:ro")
    return [*argv, setup.image, *toolkit_args(spec, pins)]


def podman_owned_argv(setup: PodmanSetup, owner: str) -> list[str]:
    """Every container ``owner`` started that still exists, running or not: one name a line."""
    return [*setup.base(), "ps", "--all", f"--filter=label={OWNER_LABEL}={owner}",
            "--format={{.Names}}"]


def podman_kill_argv(setup: PodmanSetup, name: str) -> list[str]:
    return [*setup.base(), "kill", "--signal=KILL", name]


def podman_state_argv(setup: PodmanSetup, name: str) -> list[str]:
    return [*setup.base(), "inspect", "--type=container", "--format={{.State.Status}}", name]


def podman_remove_argv(setup: PodmanSetup, name: str) -> list[str]:
    """Remove a stopped container (podman refuses a running one), or nothing if it is gone."""
    return [*setup.base(), "rm", "--ignore", name]


# What ``podman inspect`` says of a container with no process of its namespace left: conmon
# records the exit once it has reaped PID 1, and a created container never ran the tool.
STOPPED_STATES = frozenset({"created", "configured", "exited", "stopped"})


def no_process_left(inspected: int, said: str) -> bool:
    """Whether ``podman inspect`` (its exit status, what it printed on both streams) says no
    process of the container is left: stopped, or no such container (removed once it stopped;
    only ``rm --force``, which brokerd never uses while calls run, removes a running one)."""
    if inspected == 0:
        return said.strip() in STOPPED_STATES
    return "no such container" in said.lower() or "no such object" in said.lower()


log = logging.getLogger("brokerd.sandbox")

PODMAN_TIMEOUT_S = 30.0  # one podman command; one that hangs is killed and asked again
STATE_POLL_S = 0.25  # podman wait's own interval
INFO_TIMEOUT_S = 60.0


class PodmanSandbox(Backend):
    def __init__(
        self,
        setup: PodmanSetup,
        *,
        scratch_root: Path | None = None,
        egress_resolver: Mapping[str, str] | None = None,
        sandbox_uid: int = DEFAULT_SANDBOX_UID,
        owner: str | None = None,
    ):
        """``owner``: the label value this brokerd puts on its containers (OWNER_LABEL), which
        ``remove_leftovers`` looks for; None puts none (and finds none)."""
        if shutil.which(setup.podman) is None:
            raise SandboxUnavailable(f"podman backend: {setup.podman!r} is not installed")
        if setup.containers_conf is not None and not setup.containers_conf.is_file():
            raise SandboxUnavailable(f"podman backend: {setup.containers_conf} does not exist")
        if setup.remote is not None and not Path(setup.remote.removeprefix("unix://")).is_socket():
            raise SandboxUnavailable(f"podman backend: no podman service at {setup.remote}")
        if sandbox_uid == 0:
            raise SandboxUnavailable("podman backend: sandbox_uid must not be 0 (root)")
        self.setup = setup
        self.owner = owner
        self._env = dict(os.environ)
        if setup.containers_conf is not None:
            self._env["CONTAINERS_CONF"] = str(setup.containers_conf)
        self.rootless = self._ask_rootless()
        self.user = "0:0" if self.rootless else f"{sandbox_uid}:{sandbox_uid}"
        # A service's containers bind host paths; brokerd in a container of its own may see none
        super().__init__(scratch_root, egress_resolver,
                         owner=None if self.rootless else sandbox_uid,
                         sees_sources=setup.remote is None, instance=owner)
        self.seccomp_profile = _write_profile(self._scratch_root)
        # A podman service's pids are another namespace's (the appliance): not waited for
        self._sees_pids = setup.remote is None

    def _ask_rootless(self) -> bool:
        argv = [*self.setup.base(), "info", "--format", "{{.Host.Security.Rootless}}"]
        try:
            answer = subprocess.run(argv, env=self._env, capture_output=True, text=True,
                                    timeout=INFO_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"podman backend: {' '.join(argv)}: {exc}") from None
        if answer.returncode != 0 or answer.stdout.strip() not in ("true", "false"):
            raise SandboxUnavailable(f"podman backend: cannot tell whether podman is rootless "
                                     f"({' '.join(argv)}: {answer.stderr.strip()[-300:]})")
        return answer.stdout.strip() == "true"

    async def _execute(self, spec: SandboxSpec, workspace: CallWorkspace) -> SandboxOutcome:
        assert workspace.path is not None
        name = f"bx-call-{secrets.token_hex(8)}"
        argv = podman_run_argv(spec, self.setup, name=name, secrets_dir=workspace.secrets_dir,
                               egress_dir=workspace.egress_dir, pins=workspace.pins,
                               user=self.user,
                               seccomp_profile=self.seccomp_profile, owner=self.owner,
                               pidfile=workspace.path / RECORD if self._sees_pids else None)

        async def kill() -> None:
            await self._until_stopped(name, kill=True)

        try:
            finished = await run_process(
                argv, stdin=spec.arguments.encode("utf-8"), timeout_s=spec.limits.timeout_s,
                stdout_cap=stdout_cap(spec), env=self._env, on_kill=kill,
            )
        finally:
            # The podman client's exit is not the sandbox's: a process in an uninterruptible
            # system call outlives it by seconds (attack 31m, F4). A local podman's container
            # shares brokerd's PID namespace, so brokerd waits for its PID 1; a service's
            # container is asked after (it is over at once when the tool ended by itself).
            if self._sees_pids:
                init = NamespaceInit.recorded(workspace.path)
                if init is not None:
                    await finish_uncancelled(init.gone(f"call of {spec.program} ({name})"))
            else:
                await finish_uncancelled(self._until_stopped(name, kill=False))
        return interpret(finished, data_class=spec.data_class, egress=bool(spec.hosts),
                         timeout_s=spec.limits.timeout_s, stdout_cap=stdout_cap(spec))

    def remove_leftovers(self) -> list[str]:
        """Kill and remove every container of this brokerd's that still exists (a SIGKILLed
        brokerd's calls, which conmon would otherwise let run to their timeout, writing on):
        at start, before any call. Each one found is logged; their names. SandboxUnavailable
        when podman cannot say, or one still runs LEFTOVER_WAIT_S after it was killed:
        brokerd does not start then."""
        if self.owner is None:
            return []
        names = self._podman(podman_owned_argv(self.setup, self.owner)).split()
        for name in names:
            log.warning("podman container %s of an earlier brokerd on this state is still "
                        "there (brokerd was killed while it ran): killing and removing it", name)
            try:
                asyncio.run(asyncio.wait_for(self._until_stopped(name, kill=True),
                                             LEFTOVER_WAIT_S))
            except TimeoutError:
                raise SandboxUnavailable(
                    f"podman container {name} still runs {LEFTOVER_WAIT_S:.0f} s after it was "
                    "killed; brokerd starts once it is gone") from None
        return names

    def _podman(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, env=self._env, capture_output=True, text=True,
                                  timeout=PODMAN_TIMEOUT_S * 4, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"podman backend: {' '.join(argv)}: {exc}") from None
        if done.returncode != 0:
            raise SandboxUnavailable(f"podman backend: {' '.join(argv)}: "
                                     f"{done.stderr.strip()[-300:]}")
        return done.stdout

    async def _until_stopped(self, name: str, *, kill: bool) -> None:
        """Return once no process of the container is left (``no_process_left``), then
        remove it; with ``kill``, kill it first (again at each look until podman could).
        Never given up: the call counts as running until then, logged every WARN_EVERY_S."""
        started = time.monotonic()
        warned = 0
        while True:
            if kill:  # until podman has sent SIGKILL once
                kill = (await self._podman_async(podman_kill_argv(self.setup, name)))[0] != 0
            status, said = await self._podman_async(podman_state_argv(self.setup, name))
            if no_process_left(status, said):
                break
            waited = time.monotonic() - started
            if waited >= (warned + 1) * WARN_EVERY_S:
                warned = int(waited // WARN_EVERY_S)
                log.warning("podman container %s still runs %.0f s after its tool ended (%s); "
                            "the call counts as running until it is gone", name, waited,
                            said.strip()[-200:])
            await asyncio.sleep(STATE_POLL_S)
        status, said = await self._podman_async(podman_remove_argv(self.setup, name))
        if status != 0:  # stopped, so nothing runs: left for the next start's leftovers
            log.warning("podman rm %s failed: %s", name, said.strip()[-200:])

    async def _podman_async(self, argv: list[str]) -> tuple[int, str]:
        """Run one podman command: its exit status and what it printed (both streams); -1
        and why when it could not run or hung past PODMAN_TIMEOUT_S."""
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, env=self._env, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT)
        except OSError as exc:
            return -1, str(exc)
        try:
            async with asyncio.timeout(PODMAN_TIMEOUT_S):
                said, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            return -1, "timed out"
        assert process.returncode is not None
        return process.returncode, said.decode(errors="replace")


def _write_profile(directory: Path) -> Path:
    """The OCI seccomp profile, named by its content, written once and never changed, in a
    directory of brokerd's own under ``directory`` (the scratch root, a path the podman service
    sees too; by default /dev/shm, where any local user can make files: one planted under the
    profile's name would be used as brokerd's). SandboxUnavailable when that directory is not
    brokerd's alone to write."""
    text = json.dumps(oci_profile(), sort_keys=True, indent=1)
    own = directory / f"bx-profiles-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        own.mkdir(mode=0o755)
    found = os.lstat(own)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or \
            found.st_mode & 0o022:
        raise SandboxUnavailable(f"podman: {own} is not a directory only brokerd's uid may write "
                                 "(someone else made it): remove it, or set [broker] scratch")
    path = own / f"bx-seccomp-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.is_file():
        partial = own / f".{path.name}.{secrets.token_hex(4)}"
        partial.write_text(text, encoding="utf-8")
        partial.chmod(0o644)
        partial.replace(path)
    return path
