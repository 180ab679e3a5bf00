"""Run one sandboxed call with the bubblewrap backend as whatever user this process is, and
print its Result as JSON (``calls.AsUnprivilegedUser`` starts it as an unprivileged uid).

    run_call.py '<resolver json>' < spec.json
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from brokerd.sandbox import BubblewrapSandbox

from security.calls import REPO, result_of, spec_from_json

TOOLKIT_DIR = REPO / "packages" / "toolkit" / "src" / "toolkit"


def main() -> None:
    resolver = json.loads(sys.argv[1])
    spec = spec_from_json(sys.stdin.read())
    backend = BubblewrapSandbox(toolkit_dir=TOOLKIT_DIR, egress_resolver=resolver,
                                scratch_root=Path("/dev/shm"))
    print(json.dumps(asdict(result_of(backend, spec))))


if __name__ == "__main__":
    main()
