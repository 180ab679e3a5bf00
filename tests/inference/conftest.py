"""Async tests here run on asyncio through anyio's pytest plugin (it ships with anyio, which
httpx already needs). The real llama-server fixtures come from tests/support/llama.py."""

import pytest
from support.llama import llama_router, llama_router_proxy

__all__ = ["llama_router", "llama_router_proxy"]


@pytest.fixture
def anyio_backend():
    return "asyncio"
