"""A role's socket served by bxcore.daemon in a process of its own, for tests/bxcore/
test_activation.py: the process the test (or systemd-socket-activate) passes a socket to.

    activated_server.py serve PATH MODE   answer each line with "<pid> <line>" until SIGTERM
    activated_server.py report PATH       print {"taken": ..., "left": ...} as JSON and exit

``serve`` prints "serving <pid>" once the socket is in use. Run with the workspace's Python.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from bxcore.activation import VARIABLES, inherited_socket
from bxcore.daemon import listening, remove_stale_socket, run_until_signalled, wait_forever
from bxcore.errors import DaemonError


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(f"{os.getpid()} {line.decode()}".encode())
        await writer.drain()
    writer.close()


async def serve(path: Path, mode: int) -> None:
    remove_stale_socket(path)  # as loopd does before its checks: a passed socket is left alone
    async with listening(path, answer, mode=mode):
        print(f"serving {os.getpid()}", flush=True)
        await wait_forever()


def main() -> int:
    command, path = sys.argv[1], Path(sys.argv[2])
    if command == "report":
        taken = inherited_socket(path)
        print(json.dumps({"taken": taken is not None,
                          "left": sorted(name for name in VARIABLES if name in os.environ)}))
        return 0
    try:
        asyncio.run(run_until_signalled(serve(path, int(sys.argv[3], 8))))
    except DaemonError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
