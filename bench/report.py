"""What the benchmarks of issue 12 share for reporting: their section of docs/performance.md,
the machine they ran on, and quantiles.

Each benchmark owns the text between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` and
replaces only that; a section not there yet is appended.
"""

from __future__ import annotations

import os
import platform
import re
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"


def write_section(name: str, body: str, doc: Path = DOC) -> str:
    """Put ``body`` between the markers of section ``name``; returns the whole section."""
    section = f"<!-- bench:{name} -->\n{body.strip()}\n<!-- /bench:{name} -->"
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.DOTALL
    )
    current = doc.read_text() if doc.exists() else "# Performance\n"
    if pattern.search(current):
        updated = pattern.sub(lambda _: section, current)
    else:
        updated = current.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(updated)
    return section


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def today() -> str:
    return datetime.now(UTC).date().isoformat()


def load_note() -> str:
    """The load average now: the machine is shared, so every figure says how busy it was."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min: {five:.1f})"


def machine_line() -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} cores shared with other work, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )
