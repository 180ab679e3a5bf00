"""Honcho (brief, Memory items 4 and 5): the fake against the spec and the recordings, what is
written and what never is, no duplicates, catch-up after an outage, and ask_memory's faults."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from memoryd.errors import HonchoBadResponse, HonchoUnavailable
from memoryd.honcho import ChatStreamDecoder
from memoryd.honcho.client import HonchoClient
from memoryd.wiring import build

from .fake_honcho import REFERENCE, FakeHoncho, stalled_stream_transport, validate_response
from .support import answer, call, calling, config, recalled, result, turn, user, write_taint

HONCHO = """
[memory.honcho]
url = "http://honcho.test"
workspace = "bx"
chat_liveness = 0.2
[[memory.honcho.workspaces]]
id = "bx"
trusted = true
[[memory.honcho.workspaces]]
id = "fleet"
"""


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def fake() -> FakeHoncho:
    return FakeHoncho().seed("bx", "owner", "agent").seed("fleet", "owner", "agent")


@pytest.fixture
def service(home, fake):
    cfg = config(home, HONCHO)
    client = HonchoClient("http://honcho.test", transport=fake.transport(), chat_liveness=0.2)
    svc = build(cfg, honcho=client)
    yield svc
    run(svc.aclose())


def contents(fake: FakeHoncho) -> list[tuple[str, str]]:
    return [(m["peer_id"], m["content"]) for m in fake.messages]


# -- the fake itself --------------------------------------------------------------------------

SUPPORTED = {"POST /v3/workspaces", "POST /v3/workspaces/ws-probe2/peers",
             "POST /v3/workspaces/ws-probe2/sessions", "GET /v3/workspaces/ws-probe2/queue/status"}


def test_the_fake_answers_the_recorded_exchanges_as_the_real_server_did():
    exchanges = json.loads((REFERENCE / "honcho-v3-probe.json").read_text())
    fake = FakeHoncho()
    replayed = 0
    for ex in exchanges:
        path, method = ex["path"], ex["method"]
        supported = f"{method} {path}" in SUPPORTED or path.endswith(
            ("/messages", "/messages/list", "/search", "/chat"))
        if not supported:
            continue  # peer cards, context, conclusions...: memoryd does not call them
        fake.knobs.chat_500 = ex["status"] == 500
        fake.knobs.chat_empty_stream = ex["response"] == ""
        transport = fake.transport()

        async def send(ex=ex, transport=transport, path=path, method=method):
            async with httpx.AsyncClient(transport=transport, base_url="http://h") as client:
                return await client.request(method, path, params=ex["params"],
                                            json=ex["request"])
        response = run(send())
        assert response.status_code == ex["status"], ex["note"]
        if ex["response"] == "":
            assert response.content == b""
        elif isinstance(ex["response"], dict) and "detail" in ex["response"]:
            assert type(response.json()["detail"]) is type(ex["response"]["detail"])
        elif isinstance(ex["response"], list):
            got = response.json()
            assert len(got) == len(ex["response"]), ex["note"]
            assert all(set(g) == set(e) for g, e in zip(got, ex["response"], strict=True))
        else:
            assert set(response.json()) == set(ex["response"]), ex["note"]
        replayed += 1
    assert replayed == 19  # of 33; the other 14 are endpoints memoryd never calls


def test_the_recorded_responses_themselves_pass_the_spec_check():
    exchanges = json.loads((REFERENCE / "honcho-v3-probe.json").read_text())
    for ex in exchanges:
        if ex["status"] in (200, 201) and ex["response"] != "":
            validate_response(ex["method"], ex["path"], ex["status"], ex["response"])


def test_the_stream_decoder_reads_the_recorded_stream_whole_and_byte_by_byte():
    raw = (REFERENCE / "honcho-chat-stream.http").read_bytes()
    body = raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else raw.split(b"\n\n", 1)[1]
    for chunks in ([body], [body[i:i + 1] for i in range(len(body))]):
        decoder = ChatStreamDecoder()
        for chunk in chunks:
            decoder.feed(chunk)
        decoder.feed(b"")
        assert decoder.text == "STUB-LLM: owner prefers the helix editor."


@pytest.mark.parametrize("body", [b"", b'data: {"delta": {"content": "x"}, "done": false}\n\n',
                                  b"data: not json\n\n", b'data: {"delta": 3, "done": true}\n\n'])
def test_the_stream_decoder_refuses_a_stream_that_is_empty_unfinished_or_malformed(body):
    decoder = ChatStreamDecoder()
    with pytest.raises(HonchoBadResponse):
        decoder.feed(body)
        decoder.feed(b"")


# -- sync ---------------------------------------------------------------------------------------

def test_finished_turns_of_clean_sessions_are_written_once(service, fake, home):
    run(turn(service, home, "s1", [user("I like helix"), answer("Noted: helix.")]))
    run(turn(service, home, "s1", [user("unanswered yet")]))
    report = run(service.sync.sync_once())
    assert report.written == 2
    assert contents(fake) == [("owner", "I like helix"), ("agent", "Noted: helix.")]
    assert fake.messages[0]["metadata"] == {"bx_key": "s1/0#1"}
    run(service.sync.sync_once())
    assert len(fake.messages) == 2  # Honcho does not de-duplicate; the ledger does


def test_tool_results_and_tool_call_steps_are_not_written(service, fake, home):
    run(turn(service, home, "s1", [user("time?"), calling(), result("12:00"),
                                   answer("It is noon.")]))
    run(service.sync.sync_once())
    assert contents(fake) == [("owner", "time?"), ("agent", "It is noon.")]


def test_nothing_is_written_from_an_untrusted_session_or_one_above_the_ceiling(
        service, fake, home):
    run(turn(service, home, "web", [user("read it"), calling(), result("page", untrusted=True),
                                    answer("done")]))
    run(turn(service, home, "sec", [user("s"), calling(), result("k", "secret"), answer("ok")]))
    run(turn(service, home, "later", [user("clean turn"), answer("fine")]))
    write_taint(home, "later", ["public"], untrusted=True)
    run(service.sync.sync_once())
    assert fake.messages == []


def test_turns_before_a_session_went_untrusted_are_written_only_while_it_is_clean(
        service, fake, home):
    run(turn(service, home, "s1", [user("clean question"), answer("clean answer")]))
    run(service.sync.sync_once())
    run(turn(service, home, "s1", [user("read web"), calling(), result("x", untrusted=True),
                                   answer("after")]))
    run(service.sync.sync_once())
    assert contents(fake) == [("owner", "clean question"), ("agent", "clean answer")]


def test_entries_moved_by_consolidate_are_written_too(service, fake, home):
    run(call(service, "memory", {"action": "add", "file": "user.md", "text": "likes tea"}))
    run(call(service, "memory", {"action": "consolidate", "file": "user.md",
                                 "plan": [{"entry": 0, "fate": "moved"}]}))
    run(service.sync.sync_once())
    assert [(m["session_id"], m["content"]) for m in fake.messages] == [
        ("bx-identity", "likes tea")]


def test_the_sync_catches_up_after_an_outage(service, fake, home):
    fake.knobs.outage = True
    run(turn(service, home, "s1", [user("during outage"), answer("ok")]))
    report = run(service.sync.sync_once())
    assert report.outage and report.written == 0
    assert recalled(run(call(service, "recall", {"query": "outage"})))  # FTS5 still answers
    fake.knobs.outage = False
    assert run(service.sync.sync_once()).written == 2
    assert contents(fake) == [("owner", "during outage"), ("agent", "ok")]


def test_a_write_whose_response_was_lost_is_not_written_twice(service, fake, home):
    fake.knobs.lose_next_write_response = True
    run(turn(service, home, "s1", [user("lost reply"), answer("ok")]))
    report = run(service.sync.sync_once())
    assert report.outage and len(fake.messages) == 2
    report = run(service.sync.sync_once())
    assert report.found_in_honcho == 2 and report.written == 0
    assert len(fake.messages) == 2


def test_a_fresh_ledger_checks_honcho_before_writing(home, fake):
    cfg = config(home, HONCHO)
    first = build(cfg, honcho=HonchoClient("http://honcho.test",
                                                   transport=fake.transport()))
    run(turn(first, home, "s1", [user("q"), answer("a")]))
    run(first.sync.sync_once())
    run(first.aclose())
    (home / "index" / "state.sqlite").unlink()
    second = build(cfg, honcho=HonchoClient("http://honcho.test",
                                                    transport=fake.transport()))
    try:
        report = run(second.sync.sync_once())
        assert report.found_in_honcho == 2 and len(fake.messages) == 2
    finally:
        run(second.aclose())


def test_a_422_is_recorded_and_not_retried_every_pass(service, fake, home):
    fake.knobs.reject_writes = True
    run(turn(service, home, "s1", [user("q"), answer("a")]))
    assert run(service.sync.sync_once()).rejected == 2
    fake.knobs.reject_writes = False
    assert run(service.sync.sync_once()).written == 0


# -- ask_memory ---------------------------------------------------------------------------------

def test_ask_memory_streams_the_dialectic_answer_labelled_by_workspace_trust(service, fake):
    own = run(call(service, "ask_memory", {"query": "editor?"}))
    assert own.status == "ok" and json.loads(own.content)["answer"] == fake.answer
    assert own.untrusted is False
    fleet = run(call(service, "ask_memory", {"query": "editor?", "workspace": "fleet"}))
    assert fleet.status == "ok" and fleet.untrusted is True
    other = run(call(service, "ask_memory", {"query": "x", "workspace": "elsewhere"}))
    assert other.status == "failed"


@pytest.mark.parametrize(("data_class", "untrusted", "taint_file"), [
    ("secret", False, None), ("private", True, None),  # as brokerd reports the caller
    ("public", False, (["secret"], False)), ("public", False, (["public"], True)),  # its file
])
def test_ask_memory_sends_nothing_of_a_session_the_sync_would_not(service, fake, home,
                                                                   data_class, untrusted,
                                                                   taint_file):
    """The query goes to Honcho: a session above the ceiling, or one that read untrusted
    content, gets a denial and Honcho hears nothing of it, as with the sync."""
    if taint_file is not None:
        write_taint(home, "s1", taint_file[0], untrusted=taint_file[1])
    asked = run(call(service, "ask_memory", {"query": "CANARY the owner's secret"},
                     data_class=data_class, untrusted=untrusted))
    assert asked.status == "denied" and "not sent to Honcho" in asked.content, asked
    assert not any(path.endswith("/chat") for _, path in fake.requests), fake.requests


@pytest.mark.parametrize("knob", ["chat_500", "chat_empty_stream", "outage"])
def test_ask_memory_fails_cleanly_when_honcho_fails(service, fake, knob):
    setattr(fake.knobs, knob, True)
    response = run(call(service, "ask_memory", {"query": "editor?"}))
    assert response.status == "failed" and "recall still answers" in response.content


def test_ask_memory_gives_up_on_a_slow_chat_by_liveness(service, fake):
    fake.knobs.chat_delay = 5
    response = run(call(service, "ask_memory", {"query": "editor?"}))
    assert response.status == "failed"


def test_a_stream_that_stalls_after_its_first_bytes_times_out():
    client = HonchoClient("http://h", transport=stalled_stream_transport(), chat_liveness=0.1)
    with pytest.raises(HonchoUnavailable, match="no bytes"):
        run(client.chat("w", "agent", "q"))
    run(client.aclose())


def test_the_honcho_address_comes_from_config_and_the_key_from_the_secret_store(home,
                                                                               monkeypatch):
    from memoryd.wiring import honcho_client
    monkeypatch.setenv("HONCHO_KEY_FOR_TEST", "jwt-value")
    cfg = config(home, '[secrets.honcho_key]\nbackend = "env"\nvariable = "HONCHO_KEY_FOR_TEST"\n'
                 + HONCHO.replace("[[memory", 'key_secret = "honcho_key"\n[[memory', 1))
    client = honcho_client(cfg)
    try:
        assert str(client._http.base_url) == "http://honcho.test"
        assert client._http.headers["Authorization"] == "Bearer jwt-value"
    finally:
        run(client.aclose())


def listing(pages: object, items: list[dict]) -> tuple[HonchoClient, list[int]]:
    """A client whose server answers every page of a listing alike; and the pages it asked."""
    asked: list[int] = []

    def answer_page(request: httpx.Request) -> httpx.Response:
        asked.append(int(request.url.params["page"]))
        return httpx.Response(200, json={"items": items, "pages": pages, "page": asked[-1]})

    return HonchoClient("http://honcho.test", transport=httpx.MockTransport(answer_page)), asked


async def listed(client: HonchoClient) -> list[dict]:
    return [message async for message in client.list_messages("bx", "s1")]


def test_an_empty_page_ends_a_listing_whatever_pages_it_claims():
    # Found by the long fuzz run: {"items": [], "pages": <huge>} had memoryd page on for ever.
    client, asked = listing(10**18, [])
    assert run(listed(client)) == []
    assert asked == [1]


def test_a_listing_claiming_more_pages_than_memoryd_reads_is_refused():
    message = {"id": "m1", "content": "hi", "peer_id": "owner", "metadata": {}}
    client, asked = listing(10**18, [message])
    with pytest.raises(HonchoBadResponse, match="more than the 10,000"):
        run(listed(client))
    assert asked == [1]
