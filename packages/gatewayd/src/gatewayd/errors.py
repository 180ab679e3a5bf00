"""Errors of gatewayd.

    GatewayError
    ├── SetupError              config, allowlist or token unusable at start; names the file or key
    ├── MattermostError         talking to the Mattermost server failed
    │   ├── MattermostUnavailable   no connection, a timeout, or retries used up on 429/5xx
    │   ├── MattermostRefused       a 4xx other than 429: our request was wrong or not allowed;
    │   │                           carries the status and the server's AppError id
    │   └── MattermostProtocolError the server sent something that is not what its API promises
    │       └── MalformedEvent      one WebSocket message could not be read (logged and skipped)
    └── QueueError              the durable queue's database is unusable

Library exceptions (httpx, websockets, sqlite3, OSError) are translated where they are raised;
code above those edges catches only these.
"""

from __future__ import annotations

from bxcore.errors import BoxmakerError


class GatewayError(BoxmakerError):
    """Base class of every error gatewayd raises on purpose."""


class SetupError(GatewayError):
    """gatewayd cannot start: the message names the file or key at fault."""


class MattermostError(GatewayError):
    pass


class MattermostUnavailable(MattermostError):
    """The server could not be reached or kept failing; worth trying again later."""


class MattermostRefused(MattermostError):
    """A 4xx answer (not 429). Retrying the same request will not help."""

    def __init__(self, message: str, *, status: int, error_id: str = ""):
        super().__init__(message)
        self.status = status
        self.error_id = error_id


class MattermostProtocolError(MattermostError):
    """The peer did it wrong: a reply or event that does not match the API."""


class MalformedEvent(MattermostProtocolError):
    """One WebSocket message that cannot be read. It is logged (without its text) and skipped."""


class QueueError(GatewayError):
    """The queue database cannot be opened or written."""
