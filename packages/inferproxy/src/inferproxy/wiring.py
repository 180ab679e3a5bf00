"""inferproxy's parts, built from the config: the forwarder, its socket's settings and whether
systemd's watchdog is fed. No socket is opened here (sockets.py binds it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bxcore.config import Config, ServedSocket

from .proxy import Proxy, Upstream


@dataclass(frozen=True, kw_only=True)
class ProxyParts:
    """What ``inferproxy serve`` runs: ``proxy`` behind ``served``, bound with ``group``."""

    proxy: Proxy
    served: ServedSocket
    group: int | None
    watchdog: bool


def build(config: Config, source: str | Path = "config") -> ProxyParts:
    """The parts; ``source`` (the config file) names it in errors (an unknown group)."""
    served = config.served("infer")
    section = config.inferproxy
    return ProxyParts(proxy=Proxy(Upstream(section.upstream)), served=served,
                      group=served.gid(source), watchdog=section.watchdog)
