"""systemd's side of a unit, for tests where systemd is not PID 1: the NOTIFY_SOCKET it binds
for a Type=notify unit, and credentials delivered as LoadCredentialEncrypted= delivers them
(measured under a real systemd 252: ../shared/reference/containers-nix-systemd.md, 11.1, 11.4).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from pathlib import Path


class NotifySocket:
    """A datagram socket with SO_PASSCRED: each message comes with the sender's pid, from the
    kernel (SCM_CREDENTIALS), not from anything the sender claims. ``owner``: chown the socket
    to that uid, so a daemon running as that user may send to it."""

    def __init__(self, path: Path, owner: int | None = None):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        if owner is not None:
            os.chown(path, owner, owner)
        self.messages: list[tuple[int, str]] = []

    def receive(self, timeout: float = 10.0) -> tuple[str, int]:
        """The next message and its sender's pid (-1 without credentials); TimeoutError else."""
        self.sock.settimeout(timeout)
        data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12) * 4)
        pid = next(
            (struct.unpack("3i", d[:12])[0] for level, kind, d in ancillary
             if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS)), -1,
        )  # fmt: skip
        text = data.decode(errors="replace")
        self.messages.append((pid, text))
        return text, pid

    def wait_ready(self, deadline: float) -> tuple[int, str]:
        """The first message with READY=1 (sender pid, text); fails when none comes in time."""
        while time.monotonic() < deadline:
            try:
                text, pid = self.receive(max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            if "READY=1" in text.splitlines():
                return pid, text
        raise AssertionError(f"no READY=1 on {self.path}; got {self.messages}")

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


def creds(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["systemd-creds", *args], input=data, capture_output=True, check=False)


def encrypt(name: str, plaintext: bytes, out: Path) -> None:
    """``systemd-creds encrypt --name=<name>``. tpm2-absent: the key-less format (no TPM here,
    and no dependence on this host's secret); the owner's host uses TPM2 and/or the host key."""
    done = creds(
        "encrypt", f"--name={name}", "--with-key=tpm2-absent", "-", str(out), data=plaintext
    )
    assert done.returncode == 0, done.stderr.decode()


def load_as_systemd_does(credentials: Path, unit: str, loads: dict[str, Path]) -> Path:
    """LoadCredentialEncrypted=<id>:<file> for each entry, into <credentials>/<unit>/: a 0500
    directory of 0400 files named by credential id."""
    directory = credentials / unit
    directory.mkdir(parents=True)
    for credential_id, encrypted in loads.items():
        target = directory / credential_id
        done = creds("decrypt", f"--name={credential_id}", str(encrypted), str(target))
        assert done.returncode == 0, done.stderr.decode()
        target.chmod(0o400)
    directory.chmod(0o500)
    return directory
