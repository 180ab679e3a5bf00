"""``bxctl doctor``'s socket checks expect the mode (and group) the config gives each socket."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from bxcore.config import parse_config
from bxcore.daemon import bind_unix_socket
from bxctl.doctor import CHECKED_SOCKETS, check_sockets


def run_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="bx-doc-"))  # socket paths must fit 108 bytes


def test_sockets_bound_as_configured_pass():
    directory = run_dir()
    group = os.getegid()
    config = parse_config(
        f'[paths]\nrun = "{directory}"\n[channel]\nmode = 0o660\ngroup = "{group}"\n', "c.toml"
    )
    try:
        with contextlib.ExitStack() as stack:
            for name in CHECKED_SOCKETS:
                served = config.served(name)
                stack.enter_context(bind_unix_socket(served.path, mode=served.mode, group=group))
            checks = check_sockets(config)
        assert [c.ok for c in checks] == [True] * len(CHECKED_SOCKETS), checks
        assert "(0660)" in checks[0].detail
    finally:
        shutil.rmtree(directory)


def test_a_socket_with_another_mode_fails_naming_the_setting():
    directory = run_dir()
    config = parse_config(f'[paths]\nrun = "{directory}"\n[memory]\nmode = 0o660\n', "c.toml")
    try:
        with bind_unix_socket(config.served("memory").path, mode=0o600):
            (memory,) = [c for c in check_sockets(config) if c.name == "socket memory"]
        assert not memory.ok
        assert memory.detail.endswith("has mode 0600, expected 0660 (memory.mode)")
    finally:
        shutil.rmtree(directory)
