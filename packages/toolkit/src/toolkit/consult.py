"""consult: one self-contained question to the owner's OpenAI-compatible endpoint.

The payload is built from an explicit allowlist and nothing else: the call's ``question`` and
the ``attachments`` the model chose to attach (the schema refuses any other field), plus the
model name, temperature and token limit from the settings brokerd passes with ``--settings``
(endpoint, model, temperature, ``api_key_secret``, ``max_tokens``, the two timeouts; the
owner's ``[consult]`` config). No tools, no session history: this program never sees either.
docs/egress.md shows the body exactly.

The request goes through the egress proxy brokerd bridged in (``HTTP_PROXY``/``HTTPS_PROXY``,
set by ``toolkit.bridge``); the API key is read from the secret file brokerd injected, never
from the environment. The answer is streamed and timed by liveness, not by a deadline: the
first byte may take ``first_byte_timeout`` (queueing, loading, a long think before any
output), and after it the call ends only when no byte arrives for ``liveness_timeout``.
The answer is text from outside: always untrusted.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

from .net import read_secret
from .result import Context, Result, ToolError, make_result

TYPE_CHECKING = False  # typing is not imported at run time (the call's start)
if TYPE_CHECKING:
    from typing import Any

READ_SIZE = 64 * 1024
MAX_LINE = 1024 * 1024  # one SSE line; a longer one is a broken stream, not an answer
ERROR_EXCERPT = 2048
_NUMBER = (int, float)
_SETTINGS: dict[str, tuple[type, ...]] = {
    "endpoint": (str,), "model": (str,), "temperature": _NUMBER, "first_byte_timeout": _NUMBER,
    "liveness_timeout": _NUMBER,
}


def payload(settings: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The request body: the allowlisted fields and the settings, nothing else."""
    text = args["question"]
    for number, snippet in enumerate(args.get("attachments", ()), start=1):
        text += f"\n\n<attachment {number}>\n{snippet}\n</attachment {number}>"
    body: dict[str, Any] = {
        "model": settings["model"],
        "messages": [{"role": "user", "content": text}],
        "temperature": settings["temperature"],
        "stream": True,
    }
    if settings.get("max_tokens") is not None:
        body["max_tokens"] = settings["max_tokens"]
    return body


def ask(context: Context, args: dict[str, Any]) -> Result:
    settings = _checked(context.settings)
    if not context.egress:
        raise ToolError("consult needs its grant to name the endpoint's host: no network here")
    body = json.dumps(payload(settings, args), ensure_ascii=False).encode("utf-8")
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
               "User-Agent": "boxmaker-toolkit/0.1"}
    if settings.get("api_key_secret"):
        headers["Authorization"] = "Bearer " + read_secret(settings["api_key_secret"],
                                                           "api_key_secret")
    answer = StreamAnswer(limit=context.cap + 4)
    for chunk in _stream(settings, body, headers):
        answer.feed(chunk)
    answer.feed(b"")
    text, cut = answer.result()
    return make_result(context, text, untrusted=True, cut=cut)


def _checked(settings: dict[str, Any]) -> dict[str, Any]:
    for key, kinds in _SETTINGS.items():
        value = settings.get(key)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise ToolError(f"settings: {key!r} is missing or not a "
                            f"{' or '.join(k.__name__ for k in kinds)} (brokerd passes "
                            "[consult] from its config)")
    return settings


def _stream(settings: dict[str, Any], body: bytes, headers: dict[str, str]) -> Iterator[bytes]:
    """POST ``body`` through the proxy and yield the response body as it arrives."""
    endpoint = settings["endpoint"]
    url = urlsplit(endpoint)
    connection, target = _connection(url, settings["first_byte_timeout"])
    try:
        try:
            connection.request("POST", target, body=body, headers=headers)
            # Kept now: once a response that closes the connection is read, http.client hands
            # its socket to the response and forgets it.
            sock = connection.sock
            response = connection.getresponse()
        except TimeoutError:
            raise ToolError(f"{endpoint}: no answer within the first-byte limit of "
                            f"{settings['first_byte_timeout']:g} s") from None
        except OSError as exc:
            raise ToolError(f"cannot reach {endpoint}: {exc}") from None
        _check_status(endpoint, response)
        assert sock is not None
        sock.settimeout(settings["liveness_timeout"])  # the first byte came: liveness from now
        while True:
            try:
                chunk = response.read1(READ_SIZE)
            except TimeoutError:
                silent = settings["liveness_timeout"]
                raise ToolError(f"{endpoint}: the stream went silent (no bytes for {silent:g} s, "
                                "the liveness limit)") from None
            except (OSError, http.client.HTTPException) as exc:
                raise ToolError(f"{endpoint}: the stream broke: {exc!r}") from None
            if not chunk:
                return
            yield chunk
    finally:
        connection.close()


def _connection(url: Any, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    """A connection to the bridged egress proxy, and the request target to send on it."""
    https = url.scheme == "https"
    proxy = urlsplit(os.environ.get("HTTPS_PROXY" if https else "HTTP_PROXY", ""))
    if not proxy.hostname or proxy.port is None:
        raise ToolError("no egress proxy was bridged into this sandbox")
    if https:
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            proxy.hostname, proxy.port, timeout=timeout, context=ssl.create_default_context())
        connection.set_tunnel(url.hostname, url.port or 443)
        return connection, url.path or "/"
    # Plain http: the absolute form, which the proxy checks against the grant and rewrites.
    return http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=timeout), url.geturl()


def _check_status(endpoint: str, response: http.client.HTTPResponse) -> None:
    if response.status == 200:
        kind = response.getheader("Content-Type", "")
        if not kind.startswith("text/event-stream"):
            raise ToolError(f"{endpoint}: expected an event stream, got {kind or 'no type'!r}")
        return
    excerpt = response.read(ERROR_EXCERPT).decode("utf-8", errors="replace").strip()
    if "error=" in (response.getheader("Proxy-Status") or ""):
        raise ToolError(f"the egress proxy refused {endpoint}: {excerpt}")
    raise ToolError(f"{endpoint} answered HTTP {response.status}: {excerpt or '(no body)'}")


class StreamAnswer:
    """The answer text from a chat-completions event stream (pure: bytes in, text out).

    ``feed(b"")`` ends the stream. ``data:`` lines carry one JSON chunk each, ``[DONE]`` ends
    the answer; comments (``:`` keep-alives) and other fields are skipped; reasoning deltas are
    not part of the answer. Anything else raises ToolError naming what was wrong.
    """

    def __init__(self, limit: int):
        self._limit = limit
        self._buffer = b""
        self._parts: list[str] = []
        self._size = 0
        self._cut = False
        self._finish: str | None = None
        self._done = False
        self._ended = False

    def feed(self, data: bytes) -> None:
        if self._ended:
            raise ToolError("the stream was fed after it ended")
        if not data:
            self._ended = True
            if self._buffer.strip():
                self._line(self._buffer)
            self._buffer = b""
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > MAX_LINE:
            raise ToolError(f"the endpoint sent a line over {MAX_LINE} bytes")
        for line in lines:
            self._line(line)

    def _line(self, raw: bytes) -> None:
        line = raw.rstrip(b"\r")
        if not line.startswith(b"data:") or self._done:
            return  # blank lines, comments, event:/id:/retry:, and anything after [DONE]
        data = line[5:].removeprefix(b" ")
        if data == b"[DONE]":
            self._done = True
            return
        try:
            chunk = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            raise ToolError(f"the endpoint sent a malformed event: {_excerpt(data)}") from None
        if not isinstance(chunk, dict):
            raise ToolError(f"the endpoint sent an event that is not an object: {_excerpt(data)}")
        if "error" in chunk:
            raise ToolError(f"the endpoint reported an error: {_excerpt(data)}")
        for choice in chunk.get("choices") or ():
            self._choice(choice, data)

    def _choice(self, choice: Any, data: bytes) -> None:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            raise ToolError(f"the endpoint sent a choice without a delta: {_excerpt(data)}")
        content = delta.get("content")
        if isinstance(content, str) and not self._cut:
            self._parts.append(content)
            self._size += len(content.encode("utf-8"))
            self._cut = self._size > self._limit
        if choice.get("finish_reason"):
            self._finish = str(choice["finish_reason"])

    def result(self) -> tuple[str, bool]:
        """The answer and whether it is incomplete (cut at the cap or at the model's limit)."""
        if not (self._done or self._finish):
            raise ToolError("the stream ended before the answer was complete")
        text = "".join(self._parts)
        if not text.strip():
            raise ToolError(f"the endpoint finished without answer text (finish_reason "
                            f"{self._finish or 'none'})")
        if self._finish == "length":
            return text + "\n[the endpoint stopped at its length limit]", True
        return text, self._cut


def _excerpt(data: bytes, limit: int = 200) -> str:
    text = data.decode("utf-8", errors="replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")
