"""Boxmaker's config file: TOML, one section per role, validated by pydantic.

Unknown keys are refused. An error names the file, the dotted key and what was expected::

    config.toml: loop.tool_iterations: Input should be greater than or equal to 1 (got 0)

Relative paths are taken relative to the config file's directory. The sections every role
shares ([paths], [secrets], [channel]) are here, beside ``Config``; each role's own is in its
module.
"""

from __future__ import annotations

import json
import os
import tomllib
from datetime import date, datetime, time
from pathlib import Path, PurePath
from typing import Any, Literal

from pydantic import Field, ValidationError

from ..errors import ConfigError
from ._common import BASE_DIR, ConfigPath, Seconds, Section, SocketMode
from ._sockets import ServedSocket, served_sockets
from .broker import BrokerSection
from .consult import ConsultSection
from .gateway import GatewaySection
from .inference import InferenceSection, InferproxySection
from .loop import BaselineSection, LoopSection
from .memory import MemorySection


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


class Config(Section):
    paths: PathsSection = Field(default_factory=PathsSection)
    secrets: dict[str, SecretSpec] = Field(default_factory=dict)
    channel: ChannelSection = Field(default_factory=ChannelSection)
    inferproxy: InferproxySection = Field(default_factory=InferproxySection)
    inference: InferenceSection = Field(default_factory=InferenceSection)
    loop: LoopSection = Field(default_factory=LoopSection)
    baseline: BaselineSection = Field(default_factory=BaselineSection)
    broker: BrokerSection = Field(default_factory=BrokerSection)
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    memory: MemorySection = Field(default_factory=MemorySection)
    consult: ConsultSection | None = None  # absent: the consult tool is not configured

    def socket(self, name: str) -> Path:
        """The path of a role socket in the run directory, e.g. ``socket("loop")``."""
        return self.paths.run / f"{name}.sock"

    @property
    def loop_socket(self) -> Path:
        return self.served("loop").path

    def served(self, name: str) -> ServedSocket:
        """A served socket ("loop", "infer", "broker", "approve", "memory", "memory-owner",
        "gateway"): its path, mode and group as configured."""
        return served_sockets(self)[name]


def parse_config(text: str, source: str | Path, base_dir: Path | None = None) -> Config:
    """Validate config text; ``source`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return config_from_dict(data, source, base_dir)


# Keys that once named a socket a second time, from the client's side. Each socket has one key,
# in its server's section; setting the old one would have silently split the link.
MOVED_KEYS = {
    ("inference", "socket"): "inferproxy.socket",
    ("broker", "gateway_socket"): "gateway.socket",
}


def config_from_dict(data: dict[str, Any], source: str | Path, base_dir: Path | None) -> Config:
    """Validate parsed config data strictly: TOML has types, so ``"8"`` is not a number and
    ``"yes"`` is not a flag. Validation goes through JSON mode, where strict still takes a string
    for a path, an enum or a timestamp, and a list for a tuple."""
    for (section, key), instead in MOVED_KEYS.items():
        table = data.get(section)
        if isinstance(table, dict) and key in table:
            raise ConfigError(
                f"{source}: {section}.{key}: not a key: the socket is set by {instead} alone"
            )
    try:
        as_json = json.dumps(data, default=_toml_value_as_json)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: cannot read the config data: {exc}") from None
    try:
        return Config.model_validate_json(as_json, strict=True, context={BASE_DIR: base_dir})
    except ValidationError as exc:
        raise ConfigError(describe(exc, source)) from None


def _toml_value_as_json(value: object) -> str:
    # TOML dates and times arrive as datetime objects; a caller may also hand in Paths.
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a config value")


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; every failure is a ConfigError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return parse_config(text, path, path.resolve().parent)


def describe(exc: ValidationError, source: str | Path) -> str:
    lines = []
    for error in exc.errors():
        key = ".".join(str(p) for p in error["loc"]) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif "input" in error and error["type"] != "missing":
            message += f" (got {error['input']!r})"
        lines.append(f"{source}: {key}: {message}")
    return "\n".join(lines)


__all__ = [
    "BaselineSection",
    "BrokerSection",
    "ChannelSection",
    "Config",
    "ConfigPath",
    "ConsultSection",
    "GatewaySection",
    "InferenceSection",
    "InferproxySection",
    "LoopSection",
    "MemorySection",
    "PathsSection",
    "Seconds",
    "SecretSpec",
    "Section",
    "ServedSocket",
    "SocketMode",
    "config_from_dict",
    "describe",
    "load_config",
    "parse_config",
    "served_sockets",
]
