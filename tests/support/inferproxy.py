"""Starting the real inferproxy as a subprocess, as systemd runs it: its config written from
keyword settings, its command line, and where its log goes.

    config = write_config(directory, "unix:/path/llama.sock", mode=0o600)
    process = start_proxy(config)                  # stdout and stderr on pipes
    process = start_proxy(config, log=directory / "inferproxy.log")

A proxy that runs through a long test logs to a file: a pipe nobody reads until the end fills
after 64 KiB of log lines and then stops the proxy mid-run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def write_config(directory: Path, upstream: str, **extra: object) -> Path:
    """``directory/config.toml`` for a proxy listening on ``directory/infer.sock``."""
    lines = ["[inferproxy]", f'socket = "{directory / "infer.sock"}"', f'upstream = "{upstream}"']
    for key, value in extra.items():
        rendered = str(value).lower() if isinstance(value, bool) else repr(value)
        lines.append(f"{key} = {rendered}")
    path = directory / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start_proxy(config: Path, env: dict[str, str] | None = None, *,
                log: Path | None = None) -> subprocess.Popen[str]:
    """``inferproxy serve`` with ``config``; its output on pipes, or appended to ``log``."""
    command = [sys.executable, "-m", "inferproxy", "serve", "--config", str(config)]
    environment = {**os.environ, **(env or {})}
    if log is None:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=environment)
    with log.open("ab") as output:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(command, stdout=output, stderr=output, stdin=subprocess.DEVNULL,
                                text=True, env=environment)
