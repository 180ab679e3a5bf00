"""The official Mattermost web client, npm ``@mattermost/client`` (with ``ws``), that the
oracle test drives against the fake: installed once under the cache directory, never the repo.

    python -m tests.gateway.official_client    # scripts/setup runs this, so no test installs it
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CLIENT_VERSION = "11.9.0"


def client_dir() -> Path:
    """The directory whose ``node_modules`` holds the client; installs it if it is not there."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    directory = cache / "boxmaker" / f"npm-mattermost-client-{CLIENT_VERSION}"
    if not (directory / "node_modules" / "@mattermost" / "client").is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "package.json").write_text('{"private": true}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
             f"@mattermost/client@{CLIENT_VERSION}", "ws@8"],
            cwd=directory, check=True, timeout=300,
        )
    return directory


if __name__ == "__main__":
    print(client_dir())
