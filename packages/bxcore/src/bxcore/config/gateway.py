"""[gateway]: gatewayd and the owner's Mattermost."""

from __future__ import annotations

from ._common import Section


class GatewaySection(Section):
    server: str | None = None  # e.g. https://chat.example.org; gatewayd needs it to run
    token_secret: str = "mattermost_token"  # the key in [secrets]
