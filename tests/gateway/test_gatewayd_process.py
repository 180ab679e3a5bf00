"""The real ``gatewayd serve --config`` process (the console script) against the threaded fake
Mattermost, with its bot token delivered as systemd delivers credentials: ``systemd-creds
encrypt --name=mattermost_token``, decrypted into a 0500 directory of 0400 files named by
``$CREDENTIALS_DIRECTORY``, read by the SecretStore's ``credential`` backend. The config sits in a
read-only directory; a scripted loopd answers on loop.sock from its own thread; the test binds
the NOTIFY_SOCKET. Everything here is synchronous, as the appliance tests are.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gatewayd.render import PLACEHOLDER
from support.requires import needs
from support.systemd import NotifySocket, encrypt, load_as_systemd_does

from .mmthread import BackgroundLoop, ThreadedFake, running_fake, running_scripted_loop
from .scripted import ScriptedLoop

pytestmark = needs("systemd-creds")

GATEWAYD = Path(sys.executable).parent / "gatewayd"  # the console script of this environment
WAIT = 120.0  # bound on the daemon starting or stopping on a busy 2-core machine, not a measure


@dataclass
class Stack:
    mm: ThreadedFake
    loopd: ScriptedLoop
    loopd_thread: BackgroundLoop
    process: subprocess.Popen[bytes]
    notify: NotifySocket
    directory: Path
    bot: str
    bot_token: str
    owner: str
    owner_token: str
    dm: str

    def log(self) -> str:
        return (self.directory / "gatewayd.log").read_text(errors="replace")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(WAIT)


def write_config(directory: Path, url: str, owner: str) -> Path:
    """A config and allowlist in a read-only directory, as the container mounts them."""
    config_dir = directory / "config"
    config_dir.mkdir()
    (config_dir / "allow.txt").write_text(f"{owner}  # the owner\n")
    config = config_dir / "config.toml"
    config.write_text(
        f'[paths]\nhome = "{directory}/home"\nrun = "{directory}/run"\n'
        "[secrets.mattermost_token]\n"  # the credential backend, the default
        f'[channel]\nsocket = "{directory}/loop.sock"\n'
        f'[gateway]\nserver = "{url}"\nallowlist = "allow.txt"\nedit_interval = 0.1\n'
        "reconnect_min = 0.1\nredeliver_min = 0.1\n"
    )
    for path in (config_dir / "allow.txt", config):
        path.chmod(0o444)
    config_dir.chmod(0o555)
    return config


@pytest.fixture
def stack() -> Iterator[Stack]:
    directory = Path(tempfile.mkdtemp(prefix="gwproc", dir="/tmp"))  # short: socket paths
    with running_fake() as mm, running_scripted_loop(directory / "loop.sock") as (loopd, thread):
        bot, bot_token = mm.add_user("boxmaker", bot=True)
        owner, owner_token = mm.add_user("owner")
        dm = mm.direct(bot, owner)
        encrypted = directory / "mattermost_token.cred"
        encrypt("mattermost_token", bot_token.encode() + b"\n", encrypted)
        assert bot_token.encode() not in encrypted.read_bytes()
        credentials = load_as_systemd_does(
            directory / "credentials", "boxmaker-gatewayd.service", {"mattermost_token": encrypted}
        )
        config = write_config(directory, mm.url, owner)
        notify = NotifySocket(directory / "notify")
        env = {**os.environ, "CREDENTIALS_DIRECTORY": str(credentials),
               "NOTIFY_SOCKET": str(notify.path)}  # fmt: skip
        with (directory / "gatewayd.log").open("wb") as log:
            process = subprocess.Popen(
                [str(GATEWAYD), "serve", "--config", str(config)], env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        stack = Stack(
            mm, loopd, thread, process, notify, directory, bot, bot_token, owner, owner_token, dm
        )
        try:
            yield stack
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            notify.close()
            print(stack.log()[-4000:], file=sys.stderr)  # shown when a test fails
            for path in (credentials, directory / "config"):
                path.chmod(0o700)
            shutil.rmtree(directory, ignore_errors=True)


def wait_ready(stack: Stack) -> None:
    pid, _ = stack.notify.wait_ready(time.monotonic() + WAIT)
    assert pid == stack.process.pid
    assert (stack.directory / "run" / "gateway.sock").exists()
    stack.mm.wait_for(lambda fake: fake.connects, WAIT)  # its WebSocket is up


def test_the_owner_gets_the_placeholder_then_the_answer_and_a_stranger_gets_nothing(stack):
    wait_ready(stack)
    stranger, stranger_token = stack.mm.add_user("stranger")
    stranger_dm = stack.mm.direct(stack.bot, stranger)
    refused = stack.mm.post_as(stranger_token, stranger_dm, "let me in")
    stack.loopd_thread.call(setattr, stack.loopd, "steps", asyncio.Queue())  # hold the turn

    root = stack.mm.post_as(stack.owner_token, stack.dm, "hello from the owner")["id"]
    placeholder = stack.mm.wait_for(
        lambda fake: [p for p in fake.posts_by(stack.bot) if p["root_id"] == root], WAIT
    )
    assert [p["message"] for p in placeholder] == [PLACEHOLDER]
    for _ in range(3):  # the scripted turn's three events; then its answer
        stack.loopd_thread.call(lambda: stack.loopd.steps.put_nowait(None))
    answer = "echo: hello from the owner"
    stack.mm.wait_for(lambda fake: (placeholder[0]["id"], answer) in fake.edits, WAIT)

    thread = stack.mm.thread(root)
    assert [(p["user_id"], p["message"]) for p in thread] == [
        (stack.owner, "hello from the owner"),
        (stack.bot, answer),
    ]  # one reply: the placeholder, edited into the answer
    turns = stack.loopd_thread.call(lambda: [(t.session, t.content) for t in stack.loopd.turns])
    assert turns == [(f"mm-{root}", "hello from the owner")]  # nothing from the stranger
    assert not [p for p in stack.mm.posts_by(stack.bot) if p["channel_id"] == stranger_dm]
    log = stack.log()
    assert f"post {refused['id']} from user {stranger} in channel {stranger_dm} refused" in log
    assert "hello from the owner" not in log and "let me in" not in log
    assert stack.bot_token not in log


def test_sigterm_stops_it_with_exit_status_0_and_removes_its_socket(stack):
    wait_ready(stack)
    assert stack.stop() == 0
    assert not (stack.directory / "run" / "gateway.sock").exists()
    stack.notify.sock.settimeout(WAIT)
    assert stack.notify.sock.recv(4096).startswith(b"STOPPING=1")
    assert "gatewayd stopped" in stack.log()
