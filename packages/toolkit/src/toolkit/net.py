"""http.fetch: one GET through the egress proxy that brokerd bridged into the sandbox.

urllib takes the proxy from HTTP_PROXY/HTTPS_PROXY, which ``toolkit.bridge`` sets; without a
host grant there is no proxy and no route, so the request fails with a network error. Fetched
content is always untrusted: it is text from outside the owner's control.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from .result import Context, Result, ToolError, make_result

TYPE_CHECKING = False  # typing is not imported at run time (the call's start)
if TYPE_CHECKING:
    from typing import Any

SECRETS_DIR = "/run/secrets"


def fetch(context: Context, args: dict[str, Any]) -> Result:
    url = args["url"]
    # Imported here: urllib.request (http.client, email, ssl) is most of bx-tool's start-up
    # time, and only this tool needs it.
    import urllib.error
    import urllib.request

    if urlsplit(url).scheme not in ("http", "https"):
        raise ToolError(f"url: only http and https are fetched, not {url!r}")
    headers = {"User-Agent": "boxmaker-toolkit/0.1", "Accept-Encoding": "identity"}
    if "bearer_secret" in args:
        headers["Authorization"] = "Bearer " + _read_secret(args["bearer_secret"])
    request = urllib.request.Request(url, headers=headers, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=args.get("timeout_s", 30)) as response:
            return _result(context, response.status, response.headers, response)
    except urllib.error.HTTPError as exc:
        refusal = exc.headers.get("Proxy-Status", "")
        if "error=" in refusal:
            raise ToolError(f"the egress proxy refused {url!r}: {exc.read(512).decode()}") from None
        return _result(context, exc.code, exc.headers, exc)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ToolError(f"cannot fetch {url!r}: {reason}") from None


def _result(context: Context, status: int, headers: Any, body: Any) -> Result:
    data = body.read(context.cap + 4)
    more = bool(body.read(1))
    kind = headers.get("Content-Type", "unknown")
    text = f"HTTP {status}\ncontent-type: {kind}\n\n" + data.decode("utf-8", errors="replace")
    return make_result(context, text, untrusted=True, cut=more)


def _read_secret(name: str) -> str:
    return read_secret(name, "bearer_secret")


def read_secret(name: str, field: str) -> str:
    """The secret file brokerd injected for this call; ``field`` names the argument or setting
    that named it, in errors."""
    if not name or "/" in name or name in (".", ".."):
        raise ToolError(f"{field}: {name!r} is not a plain secret name")
    try:
        with open(os.path.join(SECRETS_DIR, name), encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        raise ToolError(f"{field}: secret {name!r} was not granted to this call") from None
