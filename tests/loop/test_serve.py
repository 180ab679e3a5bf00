"""loopd serve: refuses on a failed self-test, removes a stale socket first, binds loop.sock
0600, tells systemd READY=1 only once bound, and serves turns."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from bxcore.config import parse_config
from bxcore.daemon import Notifier
from bxcore.errors import ConfigError, DaemonError
from bxcore.frames import Frame
from bxcore.framestream import FrameStream
from bxcore.protocol import loop as wire
from bxcore.protocol.loop import Turn
from loopd.wiring import DEFAULT_SYSTEM, build, system_path
from support.fake_tools import ECHO, FakeBroker, loop_keys

from .support import ScriptedInference, call, registry_json, run, say

pytestmark = pytest.mark.anyio


def config_file(tmp_path, extra: str = "", loop: str | None = None) -> tuple:
    """A config whose registry is the fake tools' and memory off (no brokerd, no memoryd here:
    no test of this file calls a tool), unless ``loop`` says otherwise."""
    loop = loop_keys(tmp_path) if loop is None else loop
    path = tmp_path / "config.toml"
    text = (f'[paths]\nhome = "{tmp_path}/home"\nrun = "{tmp_path}/run"\n'
            f'[inference]\nretries = 0\n'
            f'[loop]\n{loop}{extra}')
    path.write_text(text)
    return path, parse_config(text, path, tmp_path)


async def passing():
    return True, "ok   all: fine"


async def failing():
    return False, "FAIL tool_call: no tool call was parsed"


async def test_a_failed_self_test_exits_1_with_the_report(tmp_path, capsys):
    path, config = config_file(tmp_path)
    role = build(config, path)
    status = await run(role, ScriptedInference([]), failing, notifier=Notifier(send=print))
    assert status == 1
    assert "FAIL tool_call" in capsys.readouterr().err
    assert not config.loop_socket.exists()


def test_the_command_refuses_to_start_when_the_server_cannot_be_reached(tmp_path):
    """The real self-test against an inference socket nobody serves."""
    path, _ = config_file(tmp_path)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("loopd")), "serve", "--config", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 1
    assert "FAIL tool_call" in result.stderr
    assert "not starting" in result.stderr


async def test_serve_binds_0600_notifies_ready_and_serves_turns(tmp_path, monkeypatch):
    path, config = config_file(tmp_path)
    notify = tmp_path / "notify.sock"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(notify))
    receiver.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify))
    stop = asyncio.Event()
    server = asyncio.create_task(
        run(build(config, path), ScriptedInference([say("Hi.")]), passing, stop=stop)
    )
    try:
        message = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(receiver, 4096), 10)
        assert message.startswith(b"READY=1")
        sock = config.loop_socket
        assert sock.stat().st_mode & 0o777 == 0o600
        stream = await FrameStream.connect(sock, wire.FROM_LOOPD)
        await stream.write(Frame.of(wire.TURN, Turn(session="a", content="hi", resume=False),
                                    final=False))
        frame = await stream.read(timeout=10)
        await stream.close()
        assert frame.kind == "turn_done" and frame.body["content"] == "Hi."
    finally:
        stop.set()
        assert await asyncio.wait_for(server, 10) == 0
        receiver.close()
    assert not config.loop_socket.exists()


async def test_a_served_loopds_tool_calls_reach_the_fake_tools_through_the_broker_port(tmp_path):
    """How tests without brokerd give ``loopd serve`` its tools: the product's broker port, a
    registry of clock and echo, and FakeBroker answering broker.sock."""
    path, config = config_file(tmp_path)
    script = [call(("call_tool", json.dumps({"name": "echo", "arguments": {"text": "ping"}}))),
              say("Done.")]
    stop = asyncio.Event()
    async with FakeBroker(config.served("broker").path).serving() as tools:
        server = asyncio.create_task(run(build(config, path), ScriptedInference(script), passing,
                                         notifier=Notifier(send=lambda _: None), stop=stop))
        try:
            while not config.loop_socket.exists():
                await asyncio.sleep(0.01)
            stream = await FrameStream.connect(config.loop_socket, wire.FROM_LOOPD)
            await stream.write(Frame.of(wire.TURN, Turn(session="a", content="hi", resume=False),
                                        final=False))
            while not (frame := await stream.read(timeout=30)).final:
                pass
            await stream.close()
        finally:
            stop.set()
            assert await asyncio.wait_for(server, 30) == 0
    assert frame.kind == "turn_done" and frame.body["content"] == "Done."
    assert [(r.tool, json.loads(r.arguments)) for r in tools.requests] == [
        ("echo", {"text": "ping"})]


async def test_a_stale_socket_is_removed_before_the_self_test_and_a_live_one_refused(
    tmp_path
):
    path, config = config_file(tmp_path)
    stale = config.loop_socket
    stale.parent.mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(stale))
    listener.listen()
    with pytest.raises(DaemonError, match="another process is serving on it"):
        await run(build(config, path), ScriptedInference([]), passing)
    listener.close()  # the file stays behind, as after a crash

    seen: list[bool] = []

    async def looks_then_fails():
        seen.append(stale.exists())
        return False, "FAIL tool_call: (scripted)"

    status = await run(build(config, path), ScriptedInference([]), looks_then_fails)
    assert status == 1 and seen == [False]  # gone already while the self-test ran


async def test_the_socket_gets_the_configured_mode(tmp_path):
    path, config = config_file(tmp_path, "[channel]\nmode = 0o660\n")
    stop = asyncio.Event()
    notes: list[str] = []
    server = asyncio.create_task(run(build(config, path), ScriptedInference([]), passing,
                                     notifier=Notifier(send=notes.append), stop=stop))
    try:
        while not notes and not server.done():
            await asyncio.sleep(0.01)
        assert config.loop_socket.stat().st_mode & 0o777 == 0o660
    finally:
        stop.set()
        assert await asyncio.wait_for(server, 10) == 0


def test_system_md_defaults_beside_the_config_then_the_shipped_one(tmp_path):
    path, config = config_file(tmp_path)
    assert system_path(config, path) == DEFAULT_SYSTEM
    assert "You are Boxmaker" in DEFAULT_SYSTEM.read_text()
    (tmp_path / "system.md").write_text("mine")
    assert system_path(config, path) == tmp_path / "system.md"
    path, config = config_file(tmp_path, '[baseline]\nsystem = "other.md"\n')
    assert system_path(config, path) == tmp_path / "other.md"


def test_the_broker_port_needs_a_registry(tmp_path):
    path, config = config_file(tmp_path, loop='tools = "broker"\n')
    with pytest.raises(ConfigError, match=r"loop\.registry"):
        build(config, path)


def test_the_product_default_is_brokerd_and_without_a_registry_loopd_names_the_key(tmp_path):
    """Nothing in the product defaults to a test double: a config that says nothing about tools
    gets the broker port, and without a registry loopd refuses to start, naming the key."""
    path, config = config_file(tmp_path, loop="")
    assert config.loop.tools == "broker" and config.loop.memory_source() == "memoryd"
    with pytest.raises(ConfigError, match=r"config\.toml: loop\.registry: set it"):
        build(config, path)


@pytest.mark.parametrize("port", ["fake", "in-process", ""])
def test_a_config_naming_another_tool_port_is_refused_naming_the_key(tmp_path, port):
    """The test double that once answered ``tools = "fake"`` lives in tests/ now: the product
    has one port, and a config asking for another fails at load, naming loop.tools."""
    with pytest.raises(ConfigError) as raised:
        config_file(tmp_path, loop=f'tools = "{port}"\n')
    assert str(raised.value) == f"{tmp_path / 'config.toml'}: loop.tools: Input should be " \
        f"'broker' (got {port!r})"


def test_the_broker_port_offers_clock_even_when_the_registry_does_not_list_it(tmp_path):
    registry = tmp_path / "registry.json"
    registry.write_text(registry_json([ECHO]))
    path, config = config_file(tmp_path, loop=f'tools = "broker"\nregistry = "{registry}"\n')
    role = build(config, path)
    assert [t.name for t in role.registry.core_schemas()] == ["clock", "find_tool", "call_tool"]


async def test_with_memory_off_a_new_baseline_reads_core_md_under_home(tmp_path):
    path, config = config_file(tmp_path)
    assert config.loop.memory_source() == "off"  # memory = "off": no memoryd in the picture
    core = tmp_path / "home" / "memory" / "core.md"
    core.parent.mkdir(parents=True)
    core.write_text("The owner is Ada.")
    baseline = await build(config, path).baselines("s1", 0, None)
    assert baseline.system.endswith("\n\nThe owner is Ada.")
    assert baseline.system.startswith("You are Boxmaker")  # the shipped prompt comes first
    assert [t.name for t in baseline.tools] == ["clock", "find_tool", "call_tool"]
