"""Every egress proxy a sandbox backend serves during a test, for its events (host, allowed).

The backends keep no reference to a finished call's proxy; a test that wants to see what one
let through records them here, by wrapping the ``egress_proxy`` the backends open.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from brokerd.egress import EgressProxy
from brokerd.sandbox import _call


@contextlib.contextmanager
def recording_egress() -> Iterator[list[EgressProxy]]:
    """While inside: every proxy a backend opens, oldest first (no pytest needed, so a call run
    in a child process records the same way)."""
    proxies: list[EgressProxy] = []
    real = _call.egress_proxy

    @contextlib.asynccontextmanager
    async def recording(*args: Any, **kwargs: Any) -> AsyncIterator[EgressProxy]:
        async with real(*args, **kwargs) as proxy:
            proxies.append(proxy)
            yield proxy

    _call.egress_proxy = recording
    try:
        yield proxies
    finally:
        _call.egress_proxy = real


@pytest.fixture
def egress_proxies() -> Iterator[list[EgressProxy]]:
    """The proxies of the calls run in this test, oldest first."""
    with recording_egress() as proxies:
        yield proxies
