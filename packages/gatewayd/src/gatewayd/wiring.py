"""gatewayd's parts, built from the config: the settings resolved and checked once (the token
from the secret store, the allowlist file read), and the Gateway (gateway.py) over them. No
socket is opened here: sockets.py binds gateway.sock, the WebSocket connects when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bxcore.config import Config
from bxcore.secrets import Secret, SecretStore
from bxcore.tools import DataClass

from .errors import SetupError
from .gateway import Gateway
from .routing import load_allowlist


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What gatewayd needs from the config file, resolved and checked once at start."""

    server: str
    token: Secret
    allowlist: frozenset[str]
    channels: frozenset[str]
    state: Path
    gateway_socket: Path
    loop_socket: Path
    edit_interval: float
    retries: int
    request_timeout: float
    reconnect: tuple[float, float]
    ping_interval: float
    redeliver: tuple[float, float]
    tool_choice: tuple[str, ...] = ()
    gateway_socket_mode: int = 0o600  # [gateway] mode: brokerd connects
    gateway_socket_group: int | None = None  # [gateway] group, as a gid
    owner: str | None = None  # [gateway] owner (default: the allowlist's only user)
    inert_always: bool = False  # [gateway] inert_output = "all"
    identity_floor: DataClass = DataClass.PUBLIC  # [memory] identity_ceiling: in every prompt

    @classmethod
    def from_config(cls, config: Config, secrets: SecretStore | None = None,
                    source: str | Path = "config") -> Settings:
        section = config.gateway
        served = config.served("gateway")
        if section.server is None:
            raise SetupError("gateway.server: not set (the Mattermost server's URL)")
        if section.allowlist is None:
            raise SetupError("gateway.allowlist: not set (a file of allowed user ids)")
        store = secrets or SecretStore(config.secrets)
        store.warn_plaintext()
        return cls(
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
    return Gateway(Settings.from_config(config, source=source))
