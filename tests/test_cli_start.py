"""bxctl and memoryd start without the HTTP client. Only ``bxctl verify-device`` measures over
HTTP, and only a memoryd with a [memory.honcho] section talks to Honcho: each imports the client
when it needs it. Every other start (``bxctl chat``, the scheduler's ``bxctl job run``, the
owner's ``memoryd log``, a memoryd on local notes) is a process start paid again at each call,
and httpx with what it imports was up to half of one (docs/decisions/suite-time.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

LOADED = ("import sys, {module}; "
          "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'httpcore')))")


@pytest.mark.parametrize("module", ["bxctl.cli", "memoryd.cli"])
def test_the_command_line_loads_no_http_client(module):
    done = subprocess.run([sys.executable, "-c", LOADED.format(module=module)],
                          capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout
