"""`bxctl up --honcho`: the local stack with the real Honcho beside it. A chat turn reaches
Honcho through memoryd's sync, `doctor` says Honcho answers and which workspace is used, and
`down` stops Honcho's processes with the rest."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from bxcore.config import load_config
from bxctl.stack.processes import alive, load
from faults.profile import long_only
from memory.real_honcho import honcho_install
from support.bxctl import bxctl
from support.llama import llama_paths, require_llama

WAIT = 600  # bounded wait for the sync (it is kicked by the turn; seconds on a quiet machine)


def honcho_messages(url: str, workspace: str) -> list[dict]:
    def post(path: str) -> dict:
        request = urllib.request.Request(f"{url}{path}", data=b"{}", method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    found = []
    for session in post(f"/v3/workspaces/{workspace}/sessions/list?size=100")["items"]:
        found += post(f"/v3/workspaces/{workspace}/sessions/{session['id']}/messages/list"
                      "?size=100")["items"]
    return found


@pytest.mark.real_server
@long_only("the whole stack with Honcho took 9.5 min on this busy 2-core machine")
def test_up_with_honcho_carries_a_chat_turn_to_the_real_honcho(tmp_path, monkeypatch):
    require_llama()
    binary, models = llama_paths()
    install = honcho_install()  # before HOME moves: the cache is the real home's
    state = tmp_path / "stack"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    up = bxctl("up", "--no-chat", "--state", str(state), "--llama-server", str(binary),
               "--models", str(models), "--model", "qwen-tools", "--honcho", str(install))
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stderr
        assert "up: honcho at http://127.0.0.1:" in up.stderr
        pids = [s.pid for s in load(state / "stack.json")]
        honcho = load_config(state / "config.toml").memory.honcho
        assert honcho is not None and honcho.workspace == "boxmaker"

        chat = bxctl("chat", "--socket", str(state / "run" / "loop.sock"), "--say",
                     "My favourite editor is helix. Say hello in one short sentence.")
        assert chat.returncode == 0, chat.stderr
        deadline = time.monotonic() + WAIT
        while not (messages := honcho_messages(honcho.url, "boxmaker")):
            assert time.monotonic() < deadline, "the turn never reached Honcho"
            time.sleep(1)
        assert [m["peer_id"] for m in messages] == ["owner", "agent"]
        assert "helix" in messages[0]["content"]

        doctor = bxctl("doctor", "--config", str(state / "config.toml"))
        assert f"ok   honcho: {honcho.url} answers; turns go to workspace 'boxmaker'" in \
            doctor.stdout, doctor.stdout
    finally:
        down = bxctl("down", "--state", str(state))
    assert down.returncode == 0, down.stderr
    assert pids and not any(alive(pid) for pid in pids)
