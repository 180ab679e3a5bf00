"""A call's private scratch directory on the host: the granted secrets as 0400 files, and the
directory the egress proxy's socket lives in. Removed when the call ends. With an ``owner``
(the sandbox's host uid, when that is not brokerd's own) every file and directory in it is
given to that uid, so the tool can read its secrets and reach the proxy."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from .spec import SandboxSpec


def default_scratch_root() -> Path:
    """tmpfs when the host has one at /dev/shm, so secrets never reach a disk."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


class CallWorkspace:
    def __init__(self, spec: SandboxSpec, scratch_root: Path, *, owner: int | None = None):
        self._spec = spec
        self._owner = owner
        self._root = scratch_root
        self.path: Path | None = None
        self.secrets_dir: Path | None = None
        self.egress_dir: Path | None = None

    def __enter__(self) -> CallWorkspace:
        self.path = Path(tempfile.mkdtemp(prefix="bx-call-", dir=self._root))  # mode 0700
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
        return self

    @property
    def proxy_socket(self) -> Path:
        assert self.egress_dir is not None, "no egress for this call"
        return self.egress_dir / "proxy.sock"

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
