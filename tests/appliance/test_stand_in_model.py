"""The NixOS VM test's model server (nixos-modules/tests/stand-in-model.py) passes loopd's
start-up self-test, so loopd's unit can reach READY=1 in the VM: it is run here as the VM runs
it, a process serving TCP on loopback, and loopd's own self-test is pointed at it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from bxcore.config import InferenceSection
from loopd.inference import InferenceClient, self_test

from .nix import REPO

pytestmark = pytest.mark.anyio
STAND_IN = REPO / "nixos-modules" / "tests" / "stand-in-model.py"


@pytest.fixture
def anyio_backend():
    return "asyncio"


class ToPort(httpx.AsyncBaseTransport):
    """loopd speaks to inferproxy's Unix socket; here every request goes to the TCP port instead
    (inferproxy's part, forwarding to its upstream, has tests of its own)."""

    def __init__(self, port: int):
        self.port = port
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(host="127.0.0.1", port=self.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def stand_in():
    path = [str(REPO / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    process = subprocess.Popen(
        [sys.executable, str(STAND_IN), "127.0.0.1", "0"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = process.stdout.readline()
        assert line.startswith("stand-in model listening on 127.0.0.1:"), line
        yield int(line.rsplit(":", 1)[1])
    finally:
        process.terminate()
        process.wait(timeout=30)


async def test_the_vm_tests_model_passes_loopds_self_test_with_the_modules_default_config(
    stand_in,
):
    async with InferenceClient(InferenceSection(), transport=ToPort(stand_in)) as client:
        report = await self_test(client)
    assert report.ok, report.describe()
    assert {check.name for check in report.checks} >= {"tool_call", "round_trip", "cache_hit"}


async def test_the_vm_tests_model_answers_a_turn_with_what_the_vm_test_expects(stand_in):
    body = {"model": "default", "stream": True, "id_slot": 0,
            "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
    async with (
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{stand_in}") as http,
        http.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        events = [line.removeprefix("data: ") async for line in response.aiter_lines()
                  if line.startswith("data: ")]  # fmt: skip
    assert response.status_code == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    said = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert said == "ok: hello"  # vm.nix asserts this in `bxctl chat --say hello`'s output
