"""Mattermost's own JavaScript the gateway tests judge with, from npm, installed once under the
cache directory, never the repo:

- the official web client, ``@mattermost/client`` (with ``ws``), that the oracle test drives;
- Mattermost's Markdown renderer, ``@mattermost/commonmark`` (its fork of commonmark.js, with
  its mentions, ~channels, hashtags, emoji and autolinks), that the inert-output tests render
  gatewayd's posts with. The web app renders with a fork of ``marked`` that is published only
  as a git dependency, not on npm (docs/decisions/output-channels.md).

    python -m tests.gateway.official_client    # scripts/setup runs this, so no test installs it
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CLIENT_VERSION = "11.9.0"
RENDERER_VERSION = "0.31.2-0"


def _installed(name: str, packages: list[str], marker: str) -> Path:
    """The directory whose ``node_modules`` holds ``packages``; installs them if it is not there."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    directory = cache / "boxmaker" / name
    if not (directory / "node_modules" / marker).is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "package.json").write_text('{"private": true}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *packages],
            cwd=directory, check=True, timeout=300,
        )
    return directory


def client_dir() -> Path:
    """The official web client (and ``ws``)."""
    return _installed(f"npm-mattermost-client-{CLIENT_VERSION}",
                      [f"@mattermost/client@{CLIENT_VERSION}", "ws@8"], "@mattermost/client")


def renderer_dir() -> Path:
    """Mattermost's Markdown renderer."""
    return _installed(f"npm-mattermost-commonmark-{RENDERER_VERSION}",
                      [f"@mattermost/commonmark@{RENDERER_VERSION}"], "@mattermost/commonmark")


if __name__ == "__main__":
    print(client_dir())
    print(renderer_dir())
