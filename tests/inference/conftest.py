"""Async tests here run on asyncio through anyio's pytest plugin (it ships with anyio, which
httpx already needs)."""

import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
