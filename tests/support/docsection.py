"""Sections of a document owned by a command: the text between ``<!-- TAG -->`` and
``<!-- /TAG -->`` is written by the command that measured it and by nothing else.

bench/report.py writes docs/performance.md's ``bench:NAME`` sections through this;
tests/faults/runreport.py writes docs/reliability.md's ``reliability:NAME`` ones.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path


def write_section(doc: Path, tag: str, body: str, title: str) -> str:
    """Put ``body`` between the markers of ``tag`` in ``doc`` (appended, under ``title`` when the
    document is new, if the markers are not there yet); returns the whole section."""
    section = f"<!-- {tag} -->\n{body.strip()}\n<!-- /{tag} -->"
    pattern = re.compile(rf"<!-- {re.escape(tag)} -->.*?<!-- /{re.escape(tag)} -->", re.DOTALL)
    current = doc.read_text() if doc.exists() else f"{title}\n"
    if pattern.search(current):
        updated = pattern.sub(lambda _: section, current)
    else:
        updated = current.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(updated)
    return section


def load_note() -> str:
    """The load average now: the machine is shared, so every figure says how busy it was."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min: {five:.1f})"


def machine_line() -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} cores shared with other work, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )
