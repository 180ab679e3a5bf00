"""What the benchmarks of issue 12 share for reporting: their section of docs/performance.md,
the machine they ran on, and quantiles.

Each benchmark owns the text between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` and
replaces only that; a section not there yet is appended.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
sys.path.insert(0, str(ROOT / "tests"))
from support import docsection  # noqa: E402
from support.docsection import load_note, machine_line  # noqa: E402, F401 (the benches' own)


def write_section(name: str, body: str, doc: Path = DOC) -> str:
    """Put ``body`` between the markers of section ``name``; returns the whole section."""
    return docsection.write_section(doc, f"bench:{name}", body, "# Performance")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def today() -> str:
    return datetime.now(UTC).date().isoformat()
