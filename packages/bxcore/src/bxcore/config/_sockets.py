"""The sockets the roles serve, in one table: path (with its default), mode, group, and the
config keys that set them, so a shell, ``bxctl doctor`` and an error message agree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..daemon import resolve_group
from ..errors import ConfigError, DaemonError

if TYPE_CHECKING:
    from . import Config


@dataclass(frozen=True, kw_only=True)
class ServedSocket:
    name: str  # "loop", "broker", ...: the file is <name>.sock by default
    path: Path
    mode: int
    group: str | None
    mode_key: str  # e.g. "channel.mode", for messages that name the key
    group_key: str

    def gid(self, source: str | Path) -> int | None:
        """The group as a gid; ConfigError naming ``source`` and the key if there is none."""
        if self.group is None:
            return None
        try:
            return resolve_group(self.group)
        except DaemonError as exc:
            raise ConfigError(f"{source}: {self.group_key}: {exc}") from None


def served_sockets(config: Config) -> dict[str, ServedSocket]:
    """Every socket a role serves, by name."""
    broker, memory, gateway, proxy = config.broker, config.memory, config.gateway, config.inferproxy

    def served(
        name: str, section: str, path: Path | None, mode: int, group: str | None, prefix: str = ""
    ) -> ServedSocket:
        return ServedSocket(
            name=name,
            path=path or config.socket(name),
            mode=mode,
            group=group,
            mode_key=f"{section}.{prefix}mode",
            group_key=f"{section}.{prefix}group",
        )

    return {
        "loop": served(
            "loop", "channel", config.channel.socket, config.channel.mode, config.channel.group
        ),
        "infer": served("infer", "inferproxy", proxy.socket, proxy.mode, proxy.group),
        "broker": served("broker", "broker", broker.socket, broker.mode, broker.group),
        "approve": served(
            "approve",
            "broker",
            broker.approve_socket,
            broker.approve_mode,
            broker.approve_group,
            prefix="approve_",
        ),
        "memory": served("memory", "memory", memory.socket, memory.mode, memory.group),
        "memory-owner": served(
            "memory-owner",
            "memory",
            memory.owner_socket,
            memory.owner_mode,
            memory.owner_group,
            prefix="owner_",
        ),
        "gateway": served("gateway", "gateway", gateway.socket, gateway.mode, gateway.group),
    }
