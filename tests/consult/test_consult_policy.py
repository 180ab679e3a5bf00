"""Who may consult: brokerd's decide refuses a session whose taint is above what the grant lets
out, or that read untrusted content when the grant does not allow that; a consult grant must
name exactly the endpoint's host and inject the key; the example grant fits; and a consult
call that waits for the owner shows it on the turn's event stream."""

from __future__ import annotations

import asyncio
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from brokerd.egresslog import CONSULT, consult_settings
from brokerd.policy import CallArguments, decide, parse_grant
from brokerd.taint import CLEAN, Taint
from bxcore.protocol.approval import ApprovalAnswer
from bxcore.protocol.loop import ToolWaitingEvent
from bxcore.secrets import Secret
from bxcore.tools import DataClass, ToolRequest
from loopd.tools.broker import BrokerPort
from support.brokerd import start
from support.egresslog import read_egress_log

from .support import (
    CLOUD,
    RECORDED,
    consult_section,
    fake_cloud,
    grant_text,
    make_rig,
    recorded_answer,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "grants-examples" / "consult.toml"
ENDPOINT = "https://api.example.org/v1/chat/completions"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KEY = {"consult_key": Secret("consult_key", "sk-x")}
REQUEST = ToolRequest(session="s1", call=1, tool=CONSULT, arguments='{"question": "q"}')


def grant(text: str, name: str = "consult"):
    return parse_grant(textwrap.dedent(text), f"{name}.toml", home=Path("/home/o"),
                       resolve=lambda p: p)


def decide_consult(grants, taint: Taint = CLEAN, endpoint: str = ENDPOINT):
    setup = consult_settings(consult_section(endpoint))
    return decide(REQUEST, tuple(grants), arguments=CallArguments.parse(REQUEST.arguments),
                  now=NOW, taint=taint, resolved_paths={},
                  secrets=KEY, configured={CONSULT: setup}).record


PUBLIC = Taint(frozenset({DataClass.PUBLIC}))
PRIVATE = Taint(frozenset({DataClass.PUBLIC, DataClass.PRIVATE}))
SECRET = Taint(frozenset({DataClass.SECRET}))
UNTRUSTED = Taint(frozenset({DataClass.PUBLIC}), untrusted=True)


@pytest.mark.parametrize(("classes", "allow_untrusted", "taint", "verdict", "reason"), [
    (("public",), True, CLEAN, "allow", "grant consult allows it"),
    (("public",), True, PUBLIC, "allow", "grant consult allows it"),
    (("public",), True, PRIVATE, "deny", "the session has seen private data"),
    (("public",), True, SECRET, "deny", "the session has seen secret data"),
    (("public", "private"), True, PRIVATE, "allow", "grant consult allows it"),
    (("public", "private"), True, SECRET, "deny", "the session has seen secret data"),
    (("public",), False, UNTRUSTED, "deny", "the session has read untrusted content"),
    (("public",), True, UNTRUSTED, "allow", "grant consult allows it"),
])
def test_the_session_taint_against_the_classes_the_grant_lets_out(
        classes, allow_untrusted, taint, verdict, reason):
    text = grant_text("api.example.org", classes=classes, allow_untrusted=allow_untrusted)
    record = decide_consult([grant(text)], taint)
    assert record.verdict == verdict
    assert reason in record.reason


@pytest.mark.parametrize(("hosts", "endpoint", "verdict", "reason"), [
    ('["api.example.org"]', ENDPOINT, "allow", "allows it"),
    ('["api.example.org"]', "https://api.example.org:443/v1/x", "allow", "allows it"),
    ('["api.example.org:8443"]', "https://api.example.org:8443/v1/x", "allow", "allows it"),
    ('["api.example.org"]', "https://api.example.org:8443/v1/x", "deny",
     "are not exactly ['api.example.org:8443']"),
    ('["other.example.org"]', ENDPOINT, "deny", "are not exactly ['api.example.org']"),
    ('["*.example.org"]', ENDPOINT, "deny", "are not exactly"),
    ('["api.example.org", "evil.example"]', ENDPOINT, "deny", "are not exactly"),
    ('[]', ENDPOINT, "deny", "are not exactly"),
    ('["[fd7a:115c:a1e0::5]:8443"]', "https://[fd7a:115c:a1e0::5]:8443/v1/x", "allow",
     "allows it"),
    ('["[fd7a:115c:a1e0::5]"]', "https://[FD7A:115C:A1E0::5]/v1/x", "allow", "allows it"),
])
def test_a_consult_grant_names_exactly_the_endpoints_host(hosts, endpoint, verdict, reason):
    text = grant_text("api.example.org").replace('hosts = ["api.example.org"]', f"hosts = {hosts}")
    record = decide_consult([grant(text)], endpoint=endpoint)
    assert (record.verdict, reason in record.reason) == (verdict, True), record.reason


def test_a_consult_grant_must_inject_the_configured_key():
    record = decide_consult([grant(grant_text("api.example.org", secrets_=()))])
    assert record.verdict == "deny"
    assert "does not inject the secret 'consult_key'" in record.reason


def test_the_example_grant_asks_the_owner_for_a_clean_session_only():
    example = grant(EXAMPLE.read_text())
    assert example.mode == "ask" and example.classes == frozenset({DataClass.PUBLIC})
    assert decide_consult([example]).verdict == "ask"
    assert decide_consult([example], PRIVATE).verdict == "deny"


@pytest.mark.sandbox
def test_a_tainted_session_is_refused_and_nothing_leaves(tmp_path):
    with fake_cloud() as cloud:
        rig = make_rig(tmp_path, consult_section(cloud.endpoint))
        rig.grant(grant_text(f"{CLOUD}:{cloud.port}"))
        rig.broker.taints.record("s-consult", DataClass.PRIVATE, False)
        response = rig.call("Is this leaked?", ["private notes"])
    assert response.status == "denied"
    assert "the session has seen private data" in response.content
    assert cloud.received == []
    assert read_egress_log(rig.egress.path) == []


@pytest.mark.sandbox
def test_the_answer_is_labelled_at_least_the_sessions_class(tmp_path):
    with fake_cloud() as cloud:
        rig = make_rig(tmp_path, consult_section(cloud.endpoint))
        rig.grant(grant_text(f"{CLOUD}:{cloud.port}", classes=("public", "private")))
        rig.broker.taints.record("s-consult", DataClass.PRIVATE, False)
        response = rig.call("Rephrase this.", ["a private paragraph"])
    assert response.status == "ok", response.content
    assert response.data_class == DataClass.PRIVATE and response.untrusted is True
    assert rig.broker.taints.get("s-consult") == Taint(frozenset({DataClass.PRIVATE}),
                                                       untrusted=True)


@pytest.mark.sandbox
def test_the_turn_shows_it_is_waiting_then_gets_the_answer_as_the_tool_result(tmp_path):
    """loopd's BrokerPort over a real broker.sock: the ask grant suspends the call with
    tool_waiting events on the turn's stream; once approved, the slow answer arrives as the
    call's tool response."""
    with fake_cloud() as cloud:
        cloud.behaviour = "slow"
        rig = make_rig(tmp_path, consult_section(cloud.endpoint))
        rig.grant(grant_text(f"{CLOUD}:{cloud.port}", mode="ask"))
        sockets = tmp_path / "broker.sock", tmp_path / "approve.sock"
        events: list[object] = []
        request = ToolRequest(session="s-consult", call=1, tool=CONSULT,
                              arguments='{"question": "Slow one?"}')

        async def sink(event: object) -> None:
            events.append(event)

        async def main():
            servers = await start(rig.broker, *sockets)
            try:
                call = asyncio.create_task(BrokerPort(sockets[0]).call(request, sink))
                while not events:
                    await asyncio.sleep(0.01)
                (pending,) = rig.broker.desk.pending()
                assert cloud.received == []  # nothing leaves before the owner approves
                rig.broker.desk.answer(ApprovalAnswer(id=pending.id, verdict="approve",
                                                      by="owner"))
                return await call
            finally:
                for server in servers:
                    server.close()

        response = asyncio.run(main())
    assert isinstance(events[0], ToolWaitingEvent) and events[0].reason == "approval"
    # Approved, the slow answer is told about while it runs (waiting_interval is 0.05 s here).
    assert isinstance(events[-1], ToolWaitingEvent) and events[-1].reason == "running"
    assert response.status == "ok", response.content
    assert response.content == recorded_answer(RECORDED.read_bytes())
    assert len(read_egress_log(rig.egress.path)) == 1
