"""consult for real through bubblewrap and the per-call egress proxy, against a fake
OpenAI-compatible cloud on loopback: the answer, the payload built from the allowlist only, the
key from the injected secret file, the egress log written first, and the faults."""

from __future__ import annotations

import json
import os
import stat

import pytest
from brokerd.audit import entries
from support.egresslog import read_egress_log

from .support import (
    CLOUD,
    ECHO_GRANT,
    LIVENESS_S,
    PAUSE_S,
    RECORDED,
    SLOW_PAUSES,
    consult_section,
    fake_cloud,
    grant_text,
    make_rig,
    recorded_answer,
)

pytestmark = pytest.mark.sandbox

CANARY = "CANARY-7f3e9b-private-session-text"


@pytest.fixture
def cloud():
    with fake_cloud() as fake:
        yield fake


@pytest.fixture
def rig(tmp_path, cloud):
    rig = make_rig(tmp_path, consult_section(cloud.endpoint))
    rig.grant(grant_text(f"{CLOUD}:{cloud.port}"))
    return rig


def test_the_answer_comes_back_untrusted_and_the_payload_holds_only_the_allowlist(
    rig, cloud, egress_proxies
):
    response = rig.call("Which colour is the sky?", ["snippet one", "snippet two"])
    assert response.status == "ok", response.content
    assert response.content == recorded_answer(RECORDED.read_bytes())
    assert response.untrusted is True
    assert response.data_class == "public"
    (body,) = cloud.bodies
    assert body == {
        "model": "cloud-model",
        "temperature": 0.6,
        "stream": True,
        "messages": [{"role": "user", "content": (
            "Which colour is the sky?"
            "\n\n<attachment 1>\nsnippet one\n</attachment 1>"
            "\n\n<attachment 2>\nsnippet two\n</attachment 2>")}],
    }
    assert "tools" not in body and "tool_choice" not in body
    assert cloud.headers[0]["Authorization"] == f"Bearer {rig.key}"
    assert [(e.host, e.allowed) for e in egress_proxies[-1].events] == [(CLOUD, True)]


def test_the_egress_log_holds_the_full_payload_written_before_the_call(rig, cloud):
    rig.call("What is 2+2?", ["context A"], call=7)
    (record,) = read_egress_log(rig.egress.path)
    assert (record.session, record.call, record.tool, record.grant) == (
        "s-consult", 7, "consult", "consult")
    assert (record.endpoint, record.model, record.temperature) == (
        cloud.endpoint, "cloud-model", 0.6)
    assert record.arguments == {"question": "What is 2+2?", "attachments": ["context A"]}
    # Everything the cloud was sent is in the record: the body is made from these fields only.
    sent = cloud.bodies[0]["messages"][0]["content"]
    assert sent == "What is 2+2?\n\n<attachment 1>\ncontext A\n</attachment 1>"
    # Owner-readable only, and the key is nowhere in it.
    # The owner reads it through the units' group (docs/decisions/state-permissions.md); nobody
    # else, no writer but brokerd.
    assert stat.S_IMODE(os.stat(rig.egress.path).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(rig.egress.path.parent).st_mode) == 0o750
    assert rig.key not in rig.egress.path.read_text()


def test_a_500_is_a_failed_call_that_says_so_and_is_still_logged(rig, cloud):
    cloud.behaviour = "error500"
    response = rig.call("Anything?")
    assert response.status == "failed"
    assert "answered HTTP 500" in response.content and "upstream overloaded" in response.content
    assert response.untrusted is True  # even an error message came from outside
    assert len(read_egress_log(rig.egress.path)) == 1


def test_a_slow_stream_is_not_cut_off_by_a_deadline(rig, cloud):
    cloud.behaviour = "slow"
    events = RECORDED.read_bytes().count(b"data: ")
    pauses = min(events, SLOW_PAUSES)
    assert pauses * PAUSE_S > 2 * LIVENESS_S  # the stream as a whole outlasts the limit
    response = rig.call("Take your time.")
    assert response.status == "ok", response.content
    assert response.content == recorded_answer(RECORDED.read_bytes())


def test_a_stall_after_the_first_byte_ends_with_a_liveness_error(rig, cloud):
    cloud.behaviour = "stall"
    response = rig.call("Hello?")
    assert response.status == "failed"
    assert f"no bytes for {LIVENESS_S:g} s, the liveness limit" in response.content


def test_a_malformed_event_is_a_clear_failure(rig, cloud):
    cloud.behaviour = "malformed"
    response = rig.call("Hello?")
    assert response.status == "failed"
    assert "malformed event" in response.content


def test_private_session_text_never_leaves(rig, cloud, tmp_path):
    """A canary planted in the session's own log, and in a result the session read, is in no
    byte the cloud receives: the payload is the question and the attachments, nothing else."""
    session = rig.home / "sessions" / "s-consult"
    session.mkdir(parents=True)
    (session / "0.jsonl").write_text(json.dumps({
        "kind": "user", "time": "2026-11-30T12:00:00.000000Z",
        "content": f"my bank PIN is {CANARY}"}) + "\n")
    rig.grant(ECHO_GRANT, name="echo.toml")
    echoed = rig.call_tool("echo", {"text": CANARY})
    assert echoed.status == "ok" and echoed.content == CANARY  # the session has read it
    response = rig.call("Summarise the history of the teapot.", ["a public snippet"], call=2)
    assert response.status == "ok", response.content
    assert cloud.received and CANARY.encode() not in cloud.all_bytes
    assert CANARY not in rig.egress.path.read_text()


def test_nothing_is_sent_when_the_egress_log_cannot_be_written(rig, cloud):
    rig.egress.path.parent.mkdir(parents=True)
    rig.egress.path.mkdir()  # a directory where the log file should be
    response = rig.call("Hello?")
    assert response.status == "failed"
    assert "Nothing was sent: the egress log cannot be written" in response.content
    assert cloud.received == []
    results = [e for e in entries(rig.home / "audit") if e.kind == "result"]
    assert [r.status for r in results] == ["failed"]
