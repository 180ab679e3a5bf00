"""A fake llama-server for the benchmarks that measure the harness rather than the model.

    python bench/fake_llama.py [any llama-server flags] --host /path/llama.sock

It takes llama-server's command line (only ``--host``, a socket path, is used), so ``bxctl up``
can start it in the binary's place and every Boxmaker daemon around it is the real one. It is
the fault suite's scripted model (``tests/faults/model.py``: llama-server's HTTP surface, the
start-up self-test's answers, a prefix cache of one token per character, chunks built by the
helpers that ``tests/inference`` checks against the real server's recordings), served on a real
Unix socket in its own process, so its work never competes with the measuring process's GIL.

Its brain obeys a ``DO [[name, {arguments}]]`` line in the newest message (a tool call) and
otherwise answers ``ok: <what it read>``. The one change: the cache's common prefix is found
with C-speed string comparisons instead of character by character, with the same result, so a
10,000-record prompt costs the fake milliseconds and the benchmark measures the harness.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from faults.httpserve import UnixHTTPServer  # noqa: E402
from faults.model import ScriptedModel  # noqa: E402
from loop import caching_server  # noqa: E402


def common_prefix(a: str, b: str) -> int:
    """``caching_server.common_prefix`` (how many leading characters two texts share), by
    bisection over slice comparisons: O(n log n) in C instead of O(n) in Python."""
    if a.startswith(b):
        return len(b)
    if b.startswith(a):
        return len(a)
    low, high = 0, min(len(a), len(b))  # a[:low] == b[:low]; a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


def socket_argument(argv: list[str]) -> Path:
    """The path after ``--host``; llama-server serves a Unix socket when it ends in .sock."""
    try:
        value = argv[argv.index("--host") + 1]
    except (ValueError, IndexError):
        raise SystemExit("fake_llama: needs --host /path/to/llama.sock") from None
    if not value.endswith(".sock"):
        raise SystemExit(f"fake_llama: --host {value!r}: only a Unix socket (*.sock) is served")
    return Path(value)


def main(argv: list[str]) -> None:
    path = socket_argument(argv)
    caching_server.common_prefix = common_prefix
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    with UnixHTTPServer(path, ScriptedModel().handle):
        print(f"fake llama-server listening on unix://{path}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main(sys.argv[1:])
