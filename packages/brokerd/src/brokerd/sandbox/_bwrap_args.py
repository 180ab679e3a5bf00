"""The bubblewrap command line for one call (pure).

Every namespace unshared (no network: a call with hosts reaches the proxy through its bound
socket directory only), dies with brokerd, a new session (no TIOCSTI into brokerd's terminal),
cleared environment, every capability dropped (bwrap also sets no_new_privs), a tmpfs root in
which only the system directories are bound read-only, then the toolkit, the granted mounts,
the secrets and the egress directory. Limits that the kernel applies per process are set with
prlimit *inside* the new user namespace, where RLIMIT_NPROC counts only this sandbox's
processes (for a non-root brokerd; root is exempt, see ``_cgroup``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._call import (
    EGRESS_DIR,
    OPEN_FILES,
    SECRETS_DIR,
    TOOLKIT_DIR,
    cpu_seconds,
    data_bytes,
    toolkit_args,
)
from .spec import SandboxSpec

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
    system: tuple[tuple[str, ...], ...] = DEBIAN_SYSTEM
    certificates: str = "/etc/ssl"  # bound read-only for calls with egress (https needs it)


def bwrap_argv(
    spec: SandboxSpec,
    layout: BwrapLayout,
    *,
    toolkit_dir: Path,
    secrets_dir: Path | None,
    egress_dir: Path | None,
) -> list[str]:
    argv = [layout.bwrap, "--unshare-all", "--die-with-parent", "--new-session"]
    for item in layout.system:
        argv += item
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--ro-bind", str(toolkit_dir), f"{TOOLKIT_DIR}/toolkit"]
    for mount in spec.mounts:
        argv += ["--bind" if mount.writable else "--ro-bind", str(mount.source), mount.target]
    if secrets_dir is not None:
        argv += ["--ro-bind", str(secrets_dir), SECRETS_DIR]
    if egress_dir is not None:
        argv += ["--ro-bind", str(egress_dir), EGRESS_DIR]
        argv += ["--ro-bind-try", layout.certificates, layout.certificates]
    argv += ["--remount-ro", "/", "--chdir", spec.workdir or "/"]
    argv += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "PYTHONPATH",
             TOOLKIT_DIR, "--setenv", "LANG", "C.UTF-8", "--setenv", "HOME", "/tmp"]
    argv += ["--cap-drop", "ALL", "--"]
    argv += [layout.prlimit, f"--data={data_bytes(spec)}", f"--nproc={spec.limits.pids}",
             f"--cpu={cpu_seconds(spec)}", f"--nofile={OPEN_FILES}", "--"]
    argv += [layout.python, "-s", "-B", "-m", "toolkit", *toolkit_args(spec)]
    return argv
