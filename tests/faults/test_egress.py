"""No unlisted egress: the whole stack (inferproxy, memoryd with Honcho configured, brokerd,
loopd, gatewayd with the fake Mattermost) runs under ``strace -f``, which follows every role
and every tool sandbox it starts, and records each connect() and each addressed send. A DM goes
through gatewayd, a tool runs in a sandbox without hosts (fs.read), one with a host grant
(http.fetch through brokerd's egress proxy), and one is asked for a host no grant names.

Every destination must be one docs/egress.md lists: its table names the config keys
(``[gateway] server``, ``[memory.honcho] url``, ``[consult] endpoint``, a grant's
``[sandbox] hosts``), and the test allows exactly the addresses those keys hold in this
stack's config. Unix sockets are allowed in the stack's own directories only (its run dir, the
configured model socket, a sandbox's egress-proxy socket).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from support.requires import needs

from .mattermost import MattermostThread
from .rig import directive, scripted_rig, tool_results, via_call_tool
from .stack import ROLES
from .test_gateway_crash import wait_until
from .test_hostile_model import fetch_grant, web_page

pytestmark = [pytest.mark.sandbox,
              needs("strace")]
EGRESS_DOC = Path(__file__).parents[2] / "docs" / "egress.md"
CONNECT = re.compile(r"(connect|sendto|sendmsg)\(\d+, .*?\{sa_family=(AF_INET6?|AF_UNIX)"
                     r"(?:, sun_path=(?:@?)\"(?P<path>[^\"]*)\""
                     r"|, sin6?_port=htons\((?P<port>\d+)\).*?"
                     r"(?:inet_addr\(\"(?P<v4>[^\"]+)\"\)"
                     r"|inet_pton\(AF_INET6, \"(?P<v6>[^\"]+)\"))")
# A loopback address a traced process bound itself (the egress bridge inside a sandbox listens
# on 127.0.0.1:<ephemeral> in the sandbox's own network namespace) is internal, not egress.
BOUND = re.compile(r"(bind|getsockname)\(\d+, \{sa_family=AF_INET6?, sin6?_port=htons\("
                   r"(?P<port>[1-9]\d*)\).*?(?:inet_addr\(\"(?P<v4>127\.[^\"]+)\"\)"
                   r"|inet_pton\(AF_INET6, \"(?P<v6>::1)\")")
CONFIG_KEYS = ("[gateway] server", "[memory.honcho] url", "[consult] endpoint",
               "[sandbox] hosts")


def strace(logs: Path):
    def prefix(role: str) -> list[str]:
        return ["strace", "-D", "-f", "-qq", "-e", "signal=none",
                "-e", "trace=connect,sendto,sendmsg,bind,getsockname",
                "-o", str(logs / f"{role}.strace")]
    return prefix


def destinations(trace: Path) -> set[str]:
    """``unix:<path>`` or ``<address>:<port>`` for each outbound attempt in one strace log,
    leaving out loopback addresses the traced processes listen on themselves."""
    found, own = set(), set()
    lines = trace.read_text(errors="replace").splitlines()
    for line in lines:
        bound = BOUND.search(line)
        if bound is not None:
            own.add(f"{bound['v4'] or bound['v6']}:{bound['port']}")
    for line in lines:
        match = CONNECT.search(line)
        if match is None:
            continue
        if match["path"] is not None:
            found.add(f"unix:{match['path']}")
        else:
            found.add(f"{match['v4'] or match['v6']}:{match['port']}")
    return found - own


def host_port(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def listed_keys() -> set[str]:
    """The config keys docs/egress.md's table names as destinations."""
    rows = [line for line in EGRESS_DOC.read_text().splitlines() if line.startswith("| ")]
    return {key for key in CONFIG_KEYS for row in rows if f"`{key}" in row.split("|")[1]}


def test_every_outbound_connection_is_to_a_listed_destination(short_dir):
    page = web_page("a page from a granted host")
    port = page.server_address[1]
    honcho_port = page.server_address[1] + 1  # nothing listens there: the attempt is what counts
    try:
        with MattermostThread() as chat:
            section, env = chat.config(short_dir)
            extra = section + f"""
[memory.honcho]
url = "http://127.0.0.1:{honcho_port}"
sync_interval = 1
[consult]
endpoint = "http://127.0.0.1:{port}/v1/chat/completions"
model = "cloud"
"""
            logs = short_dir / "traces"
            logs.mkdir()
            with scripted_rig(short_dir, roles=(*ROLES, "gatewayd"), extra_config=extra,
                              env=env, grants={"fetch.toml": fetch_grant(port)},
                              tracer=strace(logs)) as rig:
                stack = rig.stack
                read = via_call_tool("fs.read", {"path": str(rig.granted / "a.txt")})
                fetch = via_call_tool("http.fetch", {"url": f"http://127.0.0.1:{port}/p"})
                ungranted = via_call_tool("http.fetch", {"url": "http://example.org/"})
                stack.turn("egress", directive(read, fetch, ungranted), resume=False)
                results = [r["content"] for r in tool_results(stack.home, "egress")]
                assert results[0] == "alpha\n" and "a page from a granted host" in results[1]
                assert results[2].startswith("Denied"), results
                root = chat.owner_says("hello through Mattermost")
                wait_until(lambda: any(p["message"] == "ok: hello through Mattermost"
                                       for p in chat.bot_posts_in(root)), "no answer to the DM")
                stack.turn("egress", "hello again", resume=True)  # a clean turn: Honcho sync
            seen = {role: destinations(logs / f"{role}.strace") for role in (*ROLES, "gatewayd")}
    finally:
        page.shutdown()
        page.server_close()

    keys = listed_keys()
    assert keys == set(CONFIG_KEYS), f"docs/egress.md no longer lists {set(CONFIG_KEYS) - keys}"
    allowed_hosts = {host_port(chat.url), f"127.0.0.1:{honcho_port}", f"127.0.0.1:{port}"}
    unlisted = {role: sorted(d for d in found if not allowed(d, short_dir, allowed_hosts))
                for role, found in seen.items()}
    print(f"egress: destinations per role {({r: sorted(d) for r, d in seen.items()})}")
    assert all(not found for found in unlisted.values()), unlisted
    # The recorder does see real traffic: Mattermost, the Honcho attempt, the granted page.
    assert host_port(chat.url) in seen["gatewayd"]
    assert f"127.0.0.1:{honcho_port}" in seen["memoryd"]
    assert f"127.0.0.1:{port}" in seen["brokerd"]


SANDBOX_PROXY_SOCKET = "/run/egress/proxy.sock"  # where brokerd mounts a call's proxy socket


def allowed(destination: str, root: Path, hosts: set[str]) -> bool:
    if destination.startswith("unix:"):
        path = destination.removeprefix("unix:")
        return path.startswith(f"{root}/") or path == SANDBOX_PROXY_SOCKET
    return destination in hosts
