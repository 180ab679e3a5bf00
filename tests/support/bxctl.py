"""Running the ``bxctl`` of this environment, as a user would, from the repository's root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BXCTL = str(Path(sys.executable).parent / "bxctl")


def bxctl(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """``bxctl ARGS``; output captured as text, the exit status left to the caller."""
    return subprocess.run([BXCTL, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, check=False)
