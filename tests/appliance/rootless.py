"""Running the roles here as the owner's host runs them: rootless podman, one container per role,
images loaded from OCI archives and run by digest, with exactly the launcher's arguments.

The host runs each role as its own system user; here every container runs as ``nobody``, the one
unprivileged user this machine has, in a private podman store under a temp dir, with the
containers.conf this machine needs (images/containers.conf: runc, low ulimits). Like the units,
podman runs with an empty capability bounding set and no_new_privs (``setpriv``), so a container
that worked here did not lean on privileges the unit will not have.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

from bxctl.stack import Manifest, container_name, podman_args

from .nix import REPO

NOBODY = 65534
CONTAINERS_CONF = REPO / "images" / "containers.conf"
WAIT = 180.0  # bound on a container becoming ready; a busy 2-core box is slow, never a measure


def chown_nobody(*paths: Path) -> None:
    for path in paths:
        os.chown(path, NOBODY, NOBODY)


class RootlessPodman:
    """podman as ``nobody`` with a private store in ``root``; ``close()`` removes everything."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(mode=0o755)
        chown_nobody(root)
        for name in ("storage", "runroot", "xdg", "images"):
            (root / name).mkdir(mode=0o700)
            chown_nobody(root / name)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def command(self, *args: str) -> list[str]:
        return [
            "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--bounding-set=-all", "--no-new-privs",
            "env", f"HOME={self.root}", f"XDG_RUNTIME_DIR={self.root / 'xdg'}",
            f"CONTAINERS_CONF={CONTAINERS_CONF}",
            "podman", f"--root={self.root / 'storage'}", f"--runroot={self.root / 'runroot'}",
            "--storage-driver=overlay", *args,
        ]  # fmt: skip

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args), capture_output=True, text=True, check=False, timeout=WAIT
        )
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)} failed:\n{done.stderr}")
        return done

    def load(self, layout: Path, name: str) -> None:
        """Load an OCI layout the way the units do: as an OCI archive, with ``podman load``."""
        archive = self.root / "images" / f"{name}.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(layout, arcname=".")
        chown_nobody(archive)
        self.run("load", "--quiet", f"--input={archive}")

    def start(
        self, manifest: Manifest, role: str, image: str, notify: Path, credentials: str | None,
        grantable: tuple[str, ...] = (),
    ) -> None:
        args = podman_args(manifest, role, image=image, credentials=credentials,
                           grantable=grantable)
        self.spawn(role, args, {"NOTIFY_SOCKET": str(notify)})

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        """``podman <args>`` in the background as the unit runs it; its output goes to the log."""
        log = (self.root / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            self.command(*args), env={**os.environ, **(env or {})},
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def log(self, role: str) -> str:
        path = self.root / f"{role}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def exec(self, role: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.run("exec", container_name(role), *argv, check=False)

    def close(self) -> None:
        for role, process in self.processes.items():
            self.run("stop", "--time=5", container_name(role), check=False)  # none for a service
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.run("rm", "--all", "--force", check=False)
        # Rootless podman leaves a pause process (catatonit) holding its user namespace.
        pause = self.root / "xdg" / "libpod" / "tmp" / "pause.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pause.read_text().strip()), signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)
