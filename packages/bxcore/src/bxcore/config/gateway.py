"""[gateway]: gatewayd and the owner's Mattermost.

Identity is the Mattermost user id. ``allowlist`` names a file of user ids (one per line, ``#``
comments) whose direct messages are served; a channel other than a DM is served only if its id is
in ``channels``. Everyone else gets nothing.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from ._common import ConfigPath, Seconds, Section, SocketMode

MATTERMOST_ID = re.compile(r"[a-z0-9]{26}")


def check_mattermost_id(value: str) -> str:
    """Mattermost ids are 26 characters of lowercase letters and digits."""
    if not MATTERMOST_ID.fullmatch(value):
        raise ValueError(f"not a Mattermost id (26 of a-z, 0-9): {value!r}")
    return value


class GatewaySection(Section):
    server: str | None = None  # e.g. https://chat.example.org; gatewayd needs it to run
    token_secret: str = "mattermost_token"  # the key in [secrets]
    allowlist: ConfigPath | None = None  # file of allowed user ids; gatewayd needs it to run
    channels: list[str] = Field(default_factory=list)  # non-DM channel ids served besides DMs
    # The owner's user id: a session that did not start in Mattermost (a scheduled job, a
    # subagent) gets a DM thread with this user for its approvals and answer. Default: the
    # allowlist's user when it lists exactly one.
    owner: str | None = None
    state: ConfigPath | None = None  # the queue lives here; default: <paths.home>/gateway
    socket: ConfigPath | None = None  # gateway.sock for brokerd; default: <paths.run>/gateway.sock
    mode: SocketMode = 0o600  # brokerd connects
    group: str | None = None  # the group allowed to connect; default: the process's own
    edit_interval: Seconds = 2.0  # at most one placeholder edit per this many seconds
    retries: Annotated[int, Field(ge=0, le=20)] = 5  # REST retries on 429, 5xx, timeouts
    request_timeout: Seconds = 30.0  # each REST read and write
    reconnect_min: Seconds = 3.0  # first WebSocket reconnect delay (the official client's)
    reconnect_max: Seconds = 300.0  # cap on the reconnect delay
    ping_interval: Seconds = 30.0  # the app-level `ping` action, like the official client
    redeliver_min: Seconds = 1.0  # first wait before offering a DM to a busy or absent loopd again
    redeliver_max: Seconds = 30.0  # cap on that wait
    # tool_choice sent with every turn, per completion in order (as `bxctl chat --tool-choice`):
    # empty leaves it to the model; ["none"] keeps a small model to plain answers.
    tool_choice: list[Literal["auto", "required", "none"]] = Field(default_factory=list)
    # Answers whose session saw anything above public or untrusted are posted inert: no link,
    # image, autolink or HTML (URLs shown defanged, https⟨:⟩//...). "all": every answer too.
    inert_output: Literal["tainted", "all"] = "tainted"

    @field_validator("server")
    @classmethod
    def _check_server(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not re.fullmatch(r"https?://[^/\s]+(/[^\s]*)?", value):
            raise ValueError("expected http(s)://HOST[:PORT][/PATH]")
        return value.rstrip("/")

    @field_validator("owner")
    @classmethod
    def _check_owner(cls, value: str | None) -> str | None:
        return value if value is None else check_mattermost_id(value)

    @field_validator("channels")
    @classmethod
    def _check_channels(cls, value: list[str]) -> list[str]:
        for channel in value:
            check_mattermost_id(channel)
        return value
