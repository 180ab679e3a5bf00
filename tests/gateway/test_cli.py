"""``gatewayd serve --config``: READY=1 to systemd once gateway.sock is bound, no listening TCP
port, a DM answered through the real process, a clean exit on SIGTERM, config errors named."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from .harness import run, until
from .mmfake import serve
from .scripted import ScriptedLoop


def listening_tcp_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                inodes.add(fields[9])
    return inodes


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def write_config(directory: Path, url: str, owner: str) -> Path:
    (directory / "allow.txt").write_text(f"{owner}  # the owner\n")
    config = directory / "config.toml"
    config.write_text(
        f'[paths]\nhome = "{directory}/home"\nrun = "{directory}/run"\n'
        f'[secrets.mattermost_token]\nbackend = "env"\nvariable = "GW_TEST_TOKEN"\n'
        f'[channel]\nsocket = "{directory}/loop.sock"\n'
        f'[gateway]\nserver = "{url}"\nallowlist = "allow.txt"\nedit_interval = 0.1\n'
        f'reconnect_min = 0.1\nredeliver_min = 0.1\n'
    )
    return config


def test_serve_notifies_ready_answers_a_dm_and_stops_cleanly_on_sigterm(fake):
    bot, token = fake.add_user("boxmaker", bot=True)
    owner, _ = fake.add_user("owner")
    dm = fake.data.direct(bot, owner)["id"]
    directory = Path(tempfile.mkdtemp(prefix="gwcli", dir="/tmp"))

    async def scenario():
        async with serve(fake) as url:
            config = write_config(directory, url, owner)
            loopd = ScriptedLoop(directory / "loop.sock")
            await loopd.start()
            notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            notify.bind(str(directory / "notify"))
            notify.setblocking(False)
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gatewayd.cli", "serve", "--config", str(config),
                env={**os.environ, "GW_TEST_TOKEN": token,
                     "NOTIFY_SOCKET": str(directory / "notify")},
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                message = await asyncio.wait_for(
                    asyncio.get_running_loop().sock_recv(notify, 256), 30)
                assert message == b"READY=1"
                assert (directory / "run" / "gateway.sock").exists()
                assert not socket_inodes(process.pid) & listening_tcp_inodes()
                await until(lambda: fake.connects)
                root = fake.user_posts(owner, dm, "through the real daemon")
                await until(lambda: any(p["message"] == "echo: through the real daemon"
                                        for p in fake.posts_by(bot)))
                assert loopd.turns[0].session == f"mm-{root}"
                process.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(process.wait(), 30) == 0
                assert not (directory / "run" / "gateway.sock").exists()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                assert process.stderr is not None
                log = (await process.stderr.read()).decode()
                notify.close()
                await loopd.stop()
                shutil.rmtree(directory, ignore_errors=True)
            assert token not in log and "through the real daemon" not in log

    run(scenario())


def test_a_bad_allowlist_is_an_error_naming_the_file_and_line(tmp_path):
    (tmp_path / "allow.txt").write_text("owner.name\n")
    config = tmp_path / "config.toml"
    config.write_text(
        '[secrets.mattermost_token]\nbackend = "env"\nvariable = "GW_TEST_TOKEN"\n'
        '[gateway]\nserver = "http://127.0.0.1:9"\nallowlist = "allow.txt"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "gatewayd.cli", "serve", "--config", str(config)],
        capture_output=True, text=True, env={**os.environ, "GW_TEST_TOKEN": "t"}, timeout=60,
    )
    assert result.returncode == 1
    assert f"{tmp_path}/allow.txt:1: not a Mattermost user id" in result.stderr


def test_a_missing_server_is_an_error_naming_the_key(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[gateway]\n")
    result = subprocess.run(
        [sys.executable, "-m", "gatewayd.cli", "serve", "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1 and "gateway.server: not set" in result.stderr
