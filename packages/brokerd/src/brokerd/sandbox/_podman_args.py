"""The podman command lines for one call (pure): run by digest, never pull, and remove."""

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

    def base(self) -> list[str]:
        remote = [] if self.remote is None else ["--remote", f"--url={self.remote}"]
        return [self.podman, *remote, *self.storage]


def podman_run_argv(
    spec: SandboxSpec,
    setup: PodmanSetup,
    *,
    name: str,
    secrets_dir: Path | None,
    egress_dir: Path | None,
) -> list[str]:
    limits = spec.limits
    argv = [
        *setup.base(),
        "run", "--rm", "--interactive", f"--name={name}",
        "--network=none", "--pull=never", "--read-only", "--cap-drop=ALL",
        "--security-opt=no-new-privileges", "--tmpfs=/tmp:rw,nosuid,nodev,size=64m",
        "--user=0:0", f"--workdir={spec.workdir or '/'}",
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
    ]
    for mount in spec.mounts:
        mode = "rw" if mount.writable else "ro"
        argv.append(f"--volume={mount.source}:{mount.target}:{mode}")
    if secrets_dir is not None:
        argv.append(f"--volume={secrets_dir}:{SECRETS_DIR}:ro")
    if egress_dir is not None:
        argv.append(f"--volume={egress_dir}:{EGRESS_DIR}:ro")
    return [*argv, setup.image, *toolkit_args(spec)]


def podman_remove_argv(setup: PodmanSetup, name: str) -> list[str]:
    return [*setup.base(), "rm", "--force", "--time=0", "--ignore", name]
