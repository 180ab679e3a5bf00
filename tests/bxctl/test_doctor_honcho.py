"""``bxctl doctor`` says whether Honcho answers and which workspaces memoryd uses (against the
real server: tests/memory/test_honcho_real_api.py)."""

from __future__ import annotations

from pathlib import Path

from bxcore.config import parse_config
from bxctl.doctor import check_honcho
from bxctl.stack.honcho import free_port


def test_no_honcho_configured_passes_and_says_memory_stays_local(tmp_path: Path):
    check = check_honcho(parse_config(f'[paths]\nhome = "{tmp_path}"\n', "c.toml"))
    assert check.ok and "not configured" in check.detail


def test_a_honcho_that_does_not_answer_fails_naming_the_url_workspace_and_what_to_do(
        tmp_path: Path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = parse_config(f'[paths]\nhome = "{tmp_path}"\n[memory.honcho]\nurl = "{url}"\n'
                          'workspace = "bx"\n[[memory.honcho.workspaces]]\nid = "fleet"\n',
                          "c.toml")
    check = check_honcho(config)
    assert not check.ok
    assert url in check.detail and "'bx'" in check.detail and "fleet (untrusted)" in check.detail
    assert "bxctl up --honcho" in check.fix
