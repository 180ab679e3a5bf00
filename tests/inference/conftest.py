"""Async tests here run on asyncio through anyio's pytest plugin (it ships with anyio, which
httpx already needs). The real llama-server fixtures come from tests/support/llama.py, through
tests/conftest.py."""

import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
