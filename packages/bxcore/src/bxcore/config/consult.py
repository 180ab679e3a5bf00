"""[consult]: the cloud second opinion's endpoint (brief, "Cloud consult (M6)").

::

    [consult]
    endpoint = "https://api.example.org/v1/chat/completions"  # any OpenAI-compatible URL
    model = "some-model"
    temperature = 0.6            # 0.6 or lower: hosted models make malformed output above it
    api_key = "consult_key"      # a key in [secrets]; leave out for an endpoint without auth
    first_byte_timeout = 900     # seconds until the first byte (queueing, loading)
    liveness_timeout = 300       # then: no byte for this long ends the call (not a deadline)

Nothing here is specific to one vendor. brokerd hands these settings to the ``consult`` tool
and writes each outbound payload to its egress log; the consult grant's ``[sandbox] hosts``
must be exactly ``egress_host()``.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from ._common import Seconds, Section

DEFAULT_PORTS = {"http": 80, "https": 443}


class ConsultSection(Section):
    endpoint: str
    model: Annotated[str, Field(min_length=1, max_length=256)]
    temperature: Annotated[float, Field(ge=0.0, le=0.6)] = 0.6
    api_key: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    first_byte_timeout: Seconds = 900.0
    liveness_timeout: Seconds = 300.0

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError as exc:
            raise ValueError(f"not a URL: {exc}") from None
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError("expected an http:// or https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("no user or password in the URL: the key goes in api_key")
        if parts.query or parts.fragment or any(c.isspace() for c in value):
            raise ValueError("no query, fragment or whitespace in the endpoint URL")
        return value

    def egress_host(self) -> str:
        """The one egress allowlist entry the endpoint needs: ``host``, or ``host:port`` when
        the port is not the scheme's default (the proxy allows 80 and 443 for a bare host)."""
        parts = urlsplit(self.endpoint)
        host = (parts.hostname or "").rstrip(".")
        if ":" in host:  # an IPv6 literal is written in brackets, as grants write it
            host = f"[{host}]"
        port = parts.port
        if port is None or port == DEFAULT_PORTS[parts.scheme]:
            return host
        return f"{host}:{port}"
