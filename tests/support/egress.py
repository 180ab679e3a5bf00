"""Every egress proxy a sandbox backend serves during a test, for its events (host, allowed).

The backends keep no reference to a finished call's proxy; a test that wants to see what one
let through records them here, by wrapping the ``egress_proxy`` the backends open.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from brokerd.egress import EgressProxy
from brokerd.sandbox import _backend


@pytest.fixture
def egress_proxies(monkeypatch: pytest.MonkeyPatch) -> list[EgressProxy]:
    """The proxies of the calls run in this test, oldest first."""
    proxies: list[EgressProxy] = []
    real = _backend.egress_proxy

    @contextlib.asynccontextmanager
    async def recording(*args: Any, **kwargs: Any) -> AsyncIterator[EgressProxy]:
        async with real(*args, **kwargs) as proxy:
            proxies.append(proxy)
            yield proxy

    monkeypatch.setattr(_backend, "egress_proxy", recording)
    return proxies
