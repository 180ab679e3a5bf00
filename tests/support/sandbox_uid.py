"""Who a sandbox's tool is on the host, for tests that grant a writable directory.

A root brokerd runs tools as ``[broker] sandbox_uid`` (a dedicated uid), never as root, so a
directory the tool must write is given to that uid when the tests run as root; otherwise the
tool is the test's own uid and the directory is already writable.
"""

from __future__ import annotations

import os
from pathlib import Path

from bxcore.config.broker import DEFAULT_SANDBOX_UID as SANDBOX_UID


def writable_by_sandbox(path: Path) -> Path:
    """The directory ``path`` (made if missing), writable by the tool a grant lets write it."""
    path.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path
