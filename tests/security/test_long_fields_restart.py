"""Class 9 (issue 31): one long argument does not stop brokerd from restarting.

Against the real brokerd (bubblewrap) over broker.sock, requests whose model-controlled text is
as long as a frame carries (a URL with a host of tens of thousands of characters, a path, a
tool name, a session) are answered and audited; every record line stays within the bound
(``brokerd.audit.bounds.RECORD_BYTES``), a field that was cut carries the hash of the whole,
the chain verifies, and brokerd restarts on the log, however long the request that made its
last record, and serves the next call.
"""

from __future__ import annotations

import json

import pytest
from brokerd.audit.bounds import FIELD_BYTES, RECORD_BYTES
from brokerd.audit.log import entries, log_files
from bxcore.canonical import canonical_json
from bxcore.util import text_sha256
from faults.profile import by_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .laundering_support import Page, chain_ok, scripted_rig
from .test_audit_every_request import exchange, tool_call

pytestmark = pytest.mark.sandbox

LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=60)
LONG = st.integers(0, 120_000)
ANY_TEXT = st.text(min_size=1, max_size=20)


def long_host(label: str, length: int) -> str:
    return ".".join([label] * (length // (len(label) + 1) + 1)) + ".example"


def test_requests_of_any_length_leave_bounded_records_and_brokerd_restarts(short_dir):
    page = Page("a public page")
    try:
        with scripted_rig(short_dir, roles=("memoryd", "brokerd"),
                          grants={"fetch.toml": page.grant()}) as rig:
            stack, home = rig.stack, rig.stack.home
            sock = stack.socket("brokerd")
            counter = iter(range(1, 10**6))

            @settings(max_examples=by_profile(6, 300), deadline=None,
                      suppress_health_check=list(HealthCheck))
            @given(label=LABEL, length=LONG, piece=ANY_TEXT, times=LONG)
            def attack(label: str, length: int, piece: str, times: int) -> None:
                host = long_host(label, length)
                url = f"http://{host}/p"
                answer = exchange(sock, tool_call({
                    "session": "s1", "call": next(counter), "tool": "http.fetch",
                    "arguments": json.dumps({"url": url})}))
                assert answer.body.get("status") == "denied", answer
                (decision,) = [e for e in list(entries(home / "audit"))[-1:]]
                if len(url) > 4096:
                    assert decision.decision.reason.endswith("]")
                    assert "…[cut: " in decision.decision.reason
                text = piece * (times // len(piece) + 1)
                long = len(canonical_json(text)) > FIELD_BYTES
                for field in ("tool", "session"):  # refused before a decision, named
                    body = {"session": "s2", "call": next(counter), "tool": "fs.read",
                            "arguments": "{}", field: text}
                    exchange(sock, tool_call(body))
                    last = list(entries(home / "audit"))[-1]
                    if long:  # no tool name or session id: refused, the field cut
                        assert last.kind == "refused", last
                        assert getattr(last, field).endswith(text_sha256(text) + "]")
                exchange(sock, tool_call({
                    "session": "s3", "call": next(counter), "tool": "fs.read",
                    "arguments": json.dumps({"path": str(rig.granted) + "/" + text})}))
                for path in log_files(home / "audit"):
                    assert all(len(line) <= RECORD_BYTES
                               for line in path.read_bytes().splitlines(keepends=True))

            attack()
            # The last record is the long-host one: brokerd restarts on it.
            host = long_host("h", 70_000)
            exchange(sock, tool_call({"session": "s1", "call": next(counter),
                                      "tool": "http.fetch",
                                      "arguments": json.dumps({"url": f"http://{host}/p"})}))
            assert chain_ok(home)
            stack.restart("brokerd", inference={})
            fetched = exchange(sock, tool_call({"session": "s4", "call": 1, "tool": "http.fetch",
                                                "arguments": json.dumps({"url": page.url()})}))
            assert fetched.body["content"].endswith("a public page"), fetched
            assert chain_ok(home)
    finally:
        page.close()
