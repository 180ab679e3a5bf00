"""Recorded real llama-server streams (tests/fixtures/sse/), for fast replay tests.

Each recording is ``<name>.sse`` (the response body exactly as the server sent it) with
``<name>.json`` beside it (the request, status and headers). See tests/fixtures/sse/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"


def fixture_names() -> list[str]:
    return sorted(path.stem for path in FIXTURES.glob("*.sse"))


def read_fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.sse").read_bytes()


def fixture_meta(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())
