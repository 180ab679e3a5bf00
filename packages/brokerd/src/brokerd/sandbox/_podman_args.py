"""The podman command lines for one call (pure): run by digest, never pull, and remove.

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
UTS namespace of its own."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from ._call import (
    EGRESS_DIR,
    OPEN_FILES,
    SECRETS_DIR,
    cpu_seconds,
    data_bytes,
    tmpfs_bytes,
    toolkit_args,
)
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
    user: str = "0:0",
    owner: str | None = None,
) -> list[str]:
    """``owner``: the brokerd the container belongs to (OWNER_LABEL), so that the next start of
    that brokerd finds it if it outlives brokerd."""
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
    ]
    for mount in spec.mounts:
        mode = "rw" if mount.writable else "ro"
        argv.append(f"--volume={mount.source}:{mount.target}:{mode}")
    if secrets_dir is not None:
        argv.append(f"--volume={secrets_dir}:{SECRETS_DIR}:ro")
    if egress_dir is not None:
        argv.append(f"--volume={egress_dir}:{EGRESS_DIR}:ro")
    return [*argv, setup.image, *toolkit_args(spec)]


def podman_owned_argv(setup: PodmanSetup, owner: str) -> list[str]:
    """Every container ``owner`` started that still exists, running or not: one name a line."""
    return [*setup.base(), "ps", "--all", f"--filter=label={OWNER_LABEL}={owner}",
            "--format={{.Names}}"]


def podman_remove_argv(setup: PodmanSetup, name: str) -> list[str]:
    return [*setup.base(), "rm", "--force", "--time=0", "--ignore", name]
