"""brokerd's broker.sock and approve.sock, served by a process meant to run under
``unshare --user`` with no uid mapped: as in a rootless container that maps only its own root,
every peer's uid is then the overflow uid.

    unshare --user -- python overflow_server.py DIR TTL APPROVER...

Grants are read from DIR/grants, state goes to DIR/home (as ``make_rig`` lays them out). Prints
``ready <uid seen for itself>`` once both sockets listen, and serves until stdin closes.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # run as a script: tests/ for support
from brokerd_support import make_rig
from support.brokerd import start


async def main(directory: Path, ttl: float, approvers: list[str]) -> None:
    rig = make_rig(directory, approvers=frozenset(approvers), ttl=ttl)
    servers = await start(rig.broker, directory / "broker.sock", directory / "approve.sock")
    print("ready", os.getuid(), flush=True)
    try:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        for server in servers:
            server.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]))
