"""The model server of the NixOS VM test: the fault tests' scripted model (tests/faults/model.py),
served over TCP as llama-server is. It passes loopd's start-up self-test (a probe tool call, its
round trip with a cache hit, /props, /slots, /apply-template) and answers every other turn
``ok: <the first 40 characters of the owner's message>``. It is no model: the VM test is about
the plumbing (loopd without a network reaching it through inferproxy), not about inference.

    PYTHONPATH=<repo>/tests python3 stand-in-model.py HOST PORT    (port 0: any; printed)

It needs loopd (for the self-test's probe) and httpx importable, and tests/ on the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

from faults.httpserve import read_request, write_response
from faults.model import ScriptedModel


async def serve(host: str, port: int) -> None:
    model = ScriptedModel()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await read_request(reader)
            if request is not None:
                await write_response(await model.handle(request), writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away mid-answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(connection, host, port)
    bound = server.sockets[0].getsockname()[1]  # port 0: the kernel's choice, for the tests
    print(f"stand-in model listening on {host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2])))
