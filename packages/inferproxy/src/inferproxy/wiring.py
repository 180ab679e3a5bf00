"""inferproxy's parts, built from the config: the forwarder over ``[inferproxy] upstream``. No
socket is opened here (sockets.py binds it)."""

from __future__ import annotations

from bxcore.config import Config

from .proxy import Proxy, Upstream


def build(config: Config) -> Proxy:
    return Proxy(Upstream(config.inferproxy.upstream))
