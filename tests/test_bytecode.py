"""scripts/setup leaves bytecode for every module a role's process imports from the venv or the
workspace's sources: where PYTHONDONTWRITEBYTECODE is set no import writes it, and each daemon
and command the suite starts compiled them all from source again (docs/decisions/suite-time.md).
The cached file is where the import system looks for it (``importlib.util.cache_from_source``);
whether it is fresh is the import system's check at every import (a source edited since setup
is compiled again in memory), so only its presence is judged here."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.requires import setup_done

REPO = Path(__file__).resolve().parents[1]
ROLES = ["bxctl.cli", "loopd.cli", "memoryd.cli", "brokerd.cli", "gatewayd.cli",
         "inferproxy.cli"]
FILES = ("import json, sys, {modules}; "
         "print(json.dumps([m.__file__ for m in list(sys.modules.values()) "
         "if (getattr(m, '__file__', None) or '').endswith('.py')]))")


def test_every_module_a_role_imports_has_bytecode():
    if not setup_done():
        pytest.skip("scripts/setup writes the bytecode; run under scripts/test")
    done = subprocess.run([sys.executable, "-c", FILES.format(modules=", ".join(ROLES))],
                          capture_output=True, text=True, check=True, timeout=120)
    ours = [Path(f) for f in json.loads(done.stdout)
            if Path(f).is_relative_to(REPO) or Path(f).is_relative_to(sys.prefix)]
    assert len(ours) > 100  # the roles, bxcore, pydantic, click, httpx, ...
    missing = [str(f) for f in ours if not Path(importlib.util.cache_from_source(str(f))).exists()]
    assert missing == []
