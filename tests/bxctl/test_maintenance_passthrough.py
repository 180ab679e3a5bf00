"""bxctl's maintenance commands are the roles' own commands, passed through (issue 20, item 6):
``bxctl audit verify ARGS`` is ``brokerd audit verify ARGS``, with the role's help, options,
errors and exit status; bxctl adds only its default ``--config``, so the owner needs no flags.

Run as the owner runs them: the installed ``bxctl`` and role commands, as processes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from brokerd.audit.log import AuditLog

BIN = Path(sys.executable).parent
EXAMPLES = Path(__file__).parents[2] / "grants-examples"

# bxctl's words -> the role command they are.
PASSED_THROUGH = [
    (["audit", "verify"], ["brokerd", "audit", "verify"]),
    (["taint", "rebuild"], ["brokerd", "taint", "rebuild"]),
    (["grants", "check"], ["brokerd", "grants", "check"]),
    (["labels", "show"], ["brokerd", "labels", "show"]),
    (["labels", "lower"], ["brokerd", "labels", "lower"]),
    (["memory", "log"], ["memoryd", "log"]),
    (["memory", "undo"], ["memoryd", "undo"]),
    (["memory", "staged"], ["memoryd", "staged"]),
    (["memory", "accept"], ["memoryd", "accept"]),
    (["memory", "reject"], ["memoryd", "reject"]),
    (["reindex"], ["memoryd", "reindex"]),
]


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / argv[0]), *argv[1:]]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env,
                          check=False)


@pytest.fixture
def owner_config(tmp_path, monkeypatch) -> Path:
    """$BOXMAKER_CONFIG, as the owner's shell would have it: bxctl's default."""
    path = tmp_path / "config.toml"
    path.write_text(f'[paths]\nhome = "{tmp_path / "home"}"\nrun = "{tmp_path / "run"}"\n'
                    f'[broker]\ngrants = "{tmp_path / "grants"}"\n')
    monkeypatch.setenv("BOXMAKER_CONFIG", str(path))
    return path


@pytest.mark.parametrize(("words", "role"), PASSED_THROUGH)
def test_the_help_is_the_role_commands_own(words, role, owner_config):
    ours, theirs = run("bxctl", *words, "--help"), run(*role, "--help")
    assert (ours.returncode, ours.stdout, ours.stderr) == (0, theirs.stdout, theirs.stderr)
    assert "--config" in ours.stdout  # declared by the role, not by bxctl


def test_arguments_output_and_status_are_the_role_commands(owner_config):
    args = ["check", "--dir", str(EXAMPLES), "--json"]
    ours, theirs = run("bxctl", "grants", *args), run("brokerd", "grants", *args,
                                                       "--config", str(owner_config))
    assert ours.returncode == theirs.returncode == 0
    assert ours.stdout == theirs.stdout and '"ssh-deny"' in ours.stdout


def test_with_no_flags_the_role_reads_bxctls_default_config(owner_config, tmp_path):
    log = AuditLog(tmp_path / "home" / "audit")
    asyncio.run(log.refused(session="s1", call=1, tool="fs.read", reason="a test record"))
    ok = run("bxctl", "audit", "verify")
    assert ok.returncode == 0 and ok.stdout.startswith("ok: "), ok.stderr
    (audit_file,) = (tmp_path / "home" / "audit").glob("*.jsonl")
    audit_file.write_text(audit_file.read_text().replace("a test record", "an edited record"))
    bad = run("bxctl", "audit", "verify", "--json")
    assert bad.returncode == 1 and '"ok": false' in bad.stdout  # the edit was found there


def test_an_option_the_role_does_not_have_is_the_roles_usage_error(owner_config):
    done = run("bxctl", "audit", "verify", "--bogus")
    assert done.returncode == 2
    assert "No such option '--bogus'" in done.stderr and "brokerd audit verify" in done.stderr


def test_a_config_in_the_arguments_is_the_one_used(owner_config, tmp_path):
    missing = tmp_path / "missing.toml"
    done = run("bxctl", "audit", "verify", f"--config={missing}")
    assert done.returncode == 1 and str(missing) in done.stderr


def test_only_the_maintenance_commands_pass_through(owner_config):
    done = run("bxctl", "memory", "serve")
    assert done.returncode == 2 and "No such command 'serve'" in done.stderr
