"""What gatewayd runs on, resolved and checked once at start (wiring.py builds it from the
config file): the Gateway (gateway.py) and gateway.sock (sockets.py) read it, never the config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bxcore.secrets import Secret
from bxcore.tools import DataClass


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
