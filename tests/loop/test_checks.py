"""``loopd selftest`` and ``loopd budget`` (what ``bxctl doctor`` runs): a named report on stdout
whose last line is the verdict, exit 0 when it passed and 1 when not."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from bxctl.doctor import role_check
from support.fake_tools import registry_file
from support.llama import LlamaServer

LOOPD = Path(sys.executable).with_name("loopd")


def config(directory: Path, infer: Path, extra: str = "", memory: str = "off",
           model: str = "default") -> Path:
    """A config with the fake tools' registry (no brokerd here: no check calls a tool);
    ``extra`` goes on after [loop]."""
    path = directory / "config.toml"
    path.write_text(f'[paths]\nhome = "{directory}/home"\nrun = "{directory}/run"\n'
                    f'[inferproxy]\nsocket = "{infer}"\n'
                    f'[inference]\nmodel = "{model}"\nretries = 0\nliveness_timeout = 600.0\n'
                    f'[loop]\nregistry = "{registry_file(directory)}"\n'
                    f'memory = "{memory}"\n{extra}')
    return path


def loopd(command: str, path: Path) -> tuple[int, list[str]]:
    result = subprocess.run([str(LOOPD), command, "--config", str(path)], capture_output=True,
                            text=True, timeout=1200, check=False)
    return result.returncode, result.stdout.strip().splitlines()


def test_selftest_without_a_server_fails_naming_the_checks(tmp_path):
    status, lines = loopd("selftest", config(tmp_path, tmp_path / "nobody.sock"))
    assert status == 1
    assert lines[0].startswith("FAIL tool_call: the request failed")
    assert lines[-1] == "self-test: FAILED: tool_call, serving, slot_switch"


def test_doctor_shows_what_failed_in_the_self_test_not_only_the_verdict(tmp_path):
    path = config(tmp_path, tmp_path / "nobody.sock")
    check = role_check("model server", "loopd", ["selftest"], "fix it", path, failures=True)
    assert not check.ok and check.fix == "fix it"
    assert check.detail.startswith("FAIL tool_call: the request failed")
    assert "; FAIL slot_switch: the probe requests failed" in check.detail
    assert check.detail.endswith("; self-test: FAILED: tool_call, serving, slot_switch")


def test_budget_without_memoryd_fails_when_memoryd_gives_the_identity(tmp_path):
    path = config(tmp_path, tmp_path / "nobody.sock", memory="memoryd")
    status, lines = loopd("budget", path)
    assert status == 1
    assert lines[-1].startswith("FAIL baseline_budget: no identity: memoryd")


@pytest.mark.real_server
def test_selftest_and_budget_pass_on_the_real_server(llama_router: LlamaServer):
    """On the session's router: its qwen-tools is the tiny Qwen with the bare-JSON template."""
    with tempfile.TemporaryDirectory(prefix="bx-chk-") as tmp:
        directory = Path(tmp)
        core = directory / "home" / "memory" / "core.md"
        core.parent.mkdir(parents=True)
        core.write_text("The owner is Ada.")
        path = config(directory, llama_router.socket, "[inference.sampling]\ntemperature = 0.0\n",
                      model="qwen-tools")
        tested = loopd("selftest", path)
        budget = loopd("budget", path)
    assert tested[0] == 0, "\n".join(tested[1])
    checks = tested[1][:-1]
    assert all(line.startswith("ok   ") for line in checks), checks
    assert tested[1][-1] == f"self-test: ok, {len(checks)} checks passed"
    named = {line.split()[1].rstrip(":") for line in checks}
    assert named == {"tool_call", "round_trip", "cache_hit", "slots", "context", "chat_template",
                     "speculative", "kv_cache", "slot_switch"}
    switch = "ok   slot_switch: a session back on its slot"
    assert any(line.startswith(switch) for line in tested[1]), tested[1]
    assert budget[0] == 0, budget[1]
    assert budget[1][-1].endswith(
        "within the budget of 3000, with the identity from [baseline] identity")
