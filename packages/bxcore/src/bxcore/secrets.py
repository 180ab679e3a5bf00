"""The SecretStore: each secret from one of three backends, chosen per secret in [secrets].

- ``credential`` (default): ``$CREDENTIALS_DIRECTORY/<name>``, put there by systemd from
  ``LoadCredentialEncrypted=`` (encrypted at rest with the host key or TPM).
- ``env``: an environment variable (plaintext in the process environment).
- ``file``: a file only the owner can read (plaintext on disk; a warning is logged at startup).

A value is only ever held in a ``Secret``, whose repr and str hide it, and no error message
contains it.
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from .config import SecretSpec
from .errors import SecretError

log = logging.getLogger("bxcore.secrets")

MAX_SECRET = 64 * 1024


class Secret:
    """A secret value that does not print itself. ``reveal()`` is the one way to read it."""

    __slots__ = ("_value", "name")

    def __init__(self, name: str, value: str):
        self.name = name
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.name!r}, ***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        # Constant-time, so comparing secrets does not leak how much of one matched.
        return (
            isinstance(other, Secret)
            and other.name == self.name
            and hmac.compare_digest(_as_bytes(other._value), _as_bytes(self._value))
        )

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a Secret cannot be pickled")


def _as_bytes(value: str) -> bytes:
    # surrogatepass: a value from the environment may hold undecodable bytes as surrogates, and
    # an encoding error would carry the value in its message.
    return value.encode("utf-8", "surrogatepass")


class SecretStore:
    def __init__(self, specs: Mapping[str, SecretSpec], environ: Mapping[str, str] | None = None):
        self._specs = dict(specs)
        self._environ = os.environ if environ is None else environ

    def names(self) -> list[str]:
        return sorted(self._specs)

    def get(self, key: str) -> Secret:
        spec = self._specs.get(key)
        if spec is None:
            raise SecretError(f"secret {key!r} is not configured in [secrets]")
        if spec.backend == "credential":
            return self._from_credential(key, spec.name or key)
        if spec.backend == "env":
            return self._from_env(key, spec.variable)
        return self._from_file(key, spec.path)

    def warn_plaintext(self) -> list[str]:
        """Log (and return) a warning for every secret kept in plaintext on disk."""
        warnings = []
        for key, spec in sorted(self._specs.items()):
            if spec.backend == "file":
                text = f"secret {key!r} is read from a plaintext file ({spec.path}); prefer a " \
                    "systemd credential"
                log.warning(text)
                warnings.append(text)
        return warnings

    def _from_credential(self, key: str, name: str) -> Secret:
        directory = self._environ.get("CREDENTIALS_DIRECTORY")
        if not directory:
            raise SecretError(
                f"secret {key!r}: CREDENTIALS_DIRECTORY is not set (run the role under systemd "
                f"with LoadCredentialEncrypted={name}:...)"
            )
        if not name or "/" in name or "\0" in name or name in (".", ".."):
            raise SecretError(f"secret {key!r}: credential name {name!r} is not a plain name")
        path = Path(directory) / name
        handle, _ = _open(path, key)
        with handle:
            return Secret(key, _read_small(handle, path, key))

    def _from_env(self, key: str, variable: str | None) -> Secret:
        if not variable:
            raise SecretError(f"secret {key!r}: backend 'env' needs 'variable'")
        value = self._environ.get(variable)
        if value is None:
            raise SecretError(f"secret {key!r}: environment variable {variable} is not set")
        return Secret(key, value)

    def _from_file(self, key: str, path: Path | None) -> Secret:
        if path is None:
            raise SecretError(f"secret {key!r}: backend 'file' needs 'path'")
        # Check the file that was opened, not the path (which could be swapped in between), and
        # open without blocking so a FIFO planted at the path cannot hang startup.
        handle, info = _open(path, key, os.O_NONBLOCK)
        with handle:
            if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise SecretError(
                    f"secret {key!r}: {path} is readable by group or others "
                    f"(mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it"
                )
            if info.st_uid != os.geteuid():
                raise SecretError(
                    f"secret {key!r}: {path} is owned by uid {info.st_uid}, not by this user "
                    f"(uid {os.geteuid()})"
                )
            return Secret(key, _read_small(handle, path, key))


def _open(path: Path, key: str, flags: int = 0) -> tuple[BinaryIO, os.stat_result]:
    """The opened regular file and what fstat says about it (not about the path)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
    except OSError as exc:
        raise SecretError(f"secret {key!r}: cannot open {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise SecretError(f"secret {key!r}: {path} is not a regular file")
    return os.fdopen(fd, "rb"), info


def _read_small(handle: BinaryIO, path: Path, key: str) -> str:
    try:
        data = handle.read(MAX_SECRET + 1)
    except OSError as exc:
        raise SecretError(f"secret {key!r}: cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_SECRET:
        raise SecretError(f"secret {key!r}: {path} is over {MAX_SECRET} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(f"secret {key!r}: {path} is not UTF-8") from None
    # A trailing newline from `echo x > file` is not part of the secret.
    return text[:-1] if text.endswith("\n") else text
