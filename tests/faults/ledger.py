"""The long run's ledger: what each test, fuzzer and crash trial did, one JSON line each, in the
file ``RELIABILITY_LEDGER`` names. scripts/reliability sets it, and tests/faults/runreport.py
turns the lines into docs/reliability.md's run section, so the document's figures are the run's
own. Unset (scripts/test's short profile), nothing is written.

Lines are appended whole with O_APPEND, so parallel pytest processes share one ledger. A
running fuzzer or trial series writes progress lines too: a run stopped midway still says how
far each part got.
"""

from __future__ import annotations

import json
import os
from typing import Any

LEDGER = os.environ.get("RELIABILITY_LEDGER")
PROGRESS_EVERY = 10_000  # fuzz inputs between progress lines


def record(kind: str, name: str, **figures: Any) -> None:
    """One line: ``kind`` (test, fuzz, crash), the test's ``name``, and its figures."""
    if not LEDGER:
        return
    line = json.dumps({"kind": kind, "name": name, **figures}, sort_keys=True) + "\n"
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: str) -> list[dict[str, Any]]:
    with open(path) as ledger:
        return [json.loads(line) for line in ledger if line.strip()]
