"""Sections shared by several roles: paths, secrets, the channel socket."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from ._common import ConfigPath, Section, SocketMode


def _default_home() -> Path:
    return Path(os.environ.get("BOXMAKER_HOME", "/var/lib/boxmaker"))


def _default_run() -> Path:
    return Path(os.environ.get("BOXMAKER_RUN", "/run/boxmaker"))


class PathsSection(Section):
    home: ConfigPath = Field(default_factory=_default_home)  # state: sessions/, memory/, ...
    run: ConfigPath = Field(default_factory=_default_run)  # sockets
    # More of the harness's own files, which no grant may reach: the local stack's directory
    # (its config, logs, serving settings and process record).
    protected: tuple[ConfigPath, ...] = ()


class SecretSpec(Section):
    """Where one secret comes from. ``credential`` (the default) reads
    ``$CREDENTIALS_DIRECTORY/<name>``; ``env`` a variable; ``file`` an owner-only file."""

    backend: Literal["credential", "env", "file"] = "credential"
    name: str | None = None  # credential id; defaults to the secret's key
    variable: str | None = None  # for env
    path: ConfigPath | None = None  # for file


class ChannelSection(Section):
    """loop.sock, where channels drive turns."""

    socket: ConfigPath | None = None  # default: <paths.run>/loop.sock
    # gatewayd and the owner's bxctl connect: on a host with a user per role, 0660 and a group
    mode: SocketMode = 0o600
    group: str | None = None  # the group allowed to connect; default: the process's own
