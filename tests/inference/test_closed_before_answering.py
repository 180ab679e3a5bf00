"""A completion is sent once more only when the connection closed before any answer (a pooled
connection the server had already closed), never when an answer came that was not HTTP: the
check reads the error's type and cause, not httpcore's message. Each case is what httpx raises
against a real Unix socket server that behaves so."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import httpx
import pytest
from loopd.inference.client import closed_before_answering

pytestmark = pytest.mark.anyio


async def error_from(answer: bytes) -> Exception:
    """What httpx raises for a request to a server that reads it, writes ``answer``, closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    directory = Path(tempfile.mkdtemp(prefix="bx-onecopy-"))
    path = directory / "s.sock"
    server = await asyncio.start_unix_server(handle, path=str(path))
    try:
        async with server, httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(path)),
                                             base_url="http://x") as client:
            with pytest.raises(httpx.HTTPError) as caught:
                await client.get("/props")
            return caught.value
    finally:
        path.unlink(missing_ok=True)
        directory.rmdir()


async def test_a_close_before_any_answer_is_recognised():
    error = await error_from(b"")
    assert isinstance(error, httpx.RemoteProtocolError)
    assert closed_before_answering(error)


@pytest.mark.parametrize("answer", [
    b"garbage that is not HTTP\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut",  # an answer cut short
])
async def test_an_answer_that_is_not_whole_http_is_not(answer):
    error = await error_from(answer)
    assert isinstance(error, httpx.RemoteProtocolError)
    assert not closed_before_answering(error)


def test_the_same_words_without_httpcores_own_error_behind_them_are_not():
    assert not closed_before_answering(
        httpx.RemoteProtocolError("Server disconnected without sending a response."))


@pytest.mark.parametrize("error", [httpx.ReadError("reset"), httpx.WriteError("broken pipe")])
def test_a_reset_or_broken_pipe_is(error):
    assert closed_before_answering(error)
