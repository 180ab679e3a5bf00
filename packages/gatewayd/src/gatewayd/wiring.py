"""gatewayd's parts, built from the config: the settings resolved and checked once (the token
from the secret store, the allowlist file read), and the Gateway (gateway.py) over them. No
socket is opened here: sockets.py binds gateway.sock, the WebSocket connects when it runs.
"""

from __future__ import annotations

from pathlib import Path

from bxcore.config import Config
from bxcore.secrets import SecretStore

from .errors import SetupError
from .gateway import Gateway
from .routing import load_allowlist
from .settings import Settings


def settings(config: Config, secrets: SecretStore | None = None,
             source: str | Path = "config") -> Settings:
    """The settings from ``config``; ``source`` (the config file) names it in errors."""
    section = config.gateway
    served = config.served("gateway")
    if section.server is None:
        raise SetupError("gateway.server: not set (the Mattermost server's URL)")
    if section.allowlist is None:
        raise SetupError("gateway.allowlist: not set (a file of allowed user ids)")
    store = secrets or SecretStore(config.secrets)
    store.warn_plaintext()
    return Settings(
        server=section.server,
        token=store.get(section.token_secret),
        allowlist=load_allowlist(section.allowlist),
        owner=section.owner,
        channels=frozenset(section.channels),
        state=section.state or config.paths.home / "gateway",
        gateway_socket=served.path,
        gateway_socket_mode=served.mode,
        gateway_socket_group=served.gid(source),
        loop_socket=config.loop_socket,
        edit_interval=section.edit_interval,
        retries=section.retries,
        request_timeout=section.request_timeout,
        reconnect=(section.reconnect_min, section.reconnect_max),
        ping_interval=section.ping_interval,
        redeliver=(section.redeliver_min, section.redeliver_max),
        tool_choice=tuple(section.tool_choice),
        inert_always=section.inert_output == "all",
        identity_floor=config.memory.identity_ceiling,
    )


def build(config: Config, source: str | Path = "config") -> Gateway:
    """The Gateway over the settings; ``source`` (the config file) names it in errors."""
    return Gateway(settings(config, source=source))
