"""The fake Honcho checked against the real server, and ask_memory through the real dialectic.

The fake stays for the faults the real server cannot be made to give on demand; here it is held
to what the real server answers in this run: the same requests go to both, and their statuses,
shapes, pagination, stored values and error bodies must agree. The real answers are recorded in
the run's temp directory (honcho-real-answers.json) for anyone updating the fake.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from bxctl.doctor import check_honcho
from bxctl.stack.honcho import free_port
from memoryd.honcho.client import HonchoClient
from memoryd.wiring import build

from .fake_honcho import FakeHoncho
from .real_honcho import RealHoncho, new_workspace
from .support import answer, call, config, turn, user
from .test_honcho_real import Hooked, honcho_toml, run, service

T = "2026-11-30T07:00:00.000000Z"
MESSAGES = [{"peer_id": "owner", "content": "I like helix", "metadata": {"bx_key": "s1/0#1"},
             "created_at": T},
            {"peer_id": "agent", "content": "Noted: helix.", "metadata": {"bx_key": "s1/0#2"},
             "created_at": "2026-11-30T07:00:01.250000Z"},
            {"peer_id": "owner", "content": "nul \u0000 inside", "metadata": {"bx_key": "k3"}}]
SESSION_PEERS = {"owner": {"observe_me": True, "observe_others": False},
                 "agent": {"observe_me": False, "observe_others": True}}
LIST = "/v3/workspaces/{w}/sessions/s1/messages/list"

# (what, method, path, query, body): what memoryd sends, and the edges of each request.
EXCHANGES: list[tuple[str, str, str, dict[str, Any] | None, Any]] = [
    ("workspace created", "POST", "/v3/workspaces", None,  # no background model work
     {"id": "{w}", "configuration": {"reasoning": {"enabled": False}}}),
    ("workspace again", "POST", "/v3/workspaces", None, {"id": "{w}"}),
    ("workspace id refused", "POST", "/v3/workspaces", None, {"id": "bad.id"}),
    ("peer created", "POST", "/v3/workspaces/{w}/peers", None, {"id": "owner"}),
    ("peer again", "POST", "/v3/workspaces/{w}/peers", None, {"id": "owner"}),
    ("session with peers", "POST", "/v3/workspaces/{w}/sessions", None,
     {"id": "s1", "peers": SESSION_PEERS}),
    ("messages added", "POST", "/v3/workspaces/{w}/sessions/s1/messages", None,
     {"messages": MESSAGES}),
    ("no messages", "POST", "/v3/workspaces/{w}/sessions/s1/messages", None, {"messages": []}),
    ("a message over the limit", "POST", "/v3/workspaces/{w}/sessions/s1/messages", None,
     {"messages": [{"peer_id": "owner", "content": "x" * 25_001}]}),
    ("a peer name refused", "POST", "/v3/workspaces/{w}/sessions/s1/messages", None,
     {"messages": [{"peer_id": "bad.peer", "content": "x"}]}),
    ("an unknown session, created", "POST", "/v3/workspaces/{w}/sessions/s2/messages", None,
     {"messages": [{"peer_id": "stranger", "content": "hello"}]}),
    ("first page", "POST", LIST, {"page": 1, "size": 2}, {}),
    ("last page", "POST", LIST, {"page": 2, "size": 2}, {}),
    ("past the end", "POST", LIST, {"page": 9, "size": 2}, {}),
    ("default size", "POST", LIST, None, {}),
    ("size over 100", "POST", LIST, {"page": 1, "size": 101}, {}),
    ("page 0", "POST", LIST, {"page": 0, "size": 10}, {}),
    ("metadata filter", "POST", LIST, {"page": 1, "size": 10},
     {"filters": {"metadata": {"bx_key": "s1/0#2"}}}),
    ("an unknown session lists nothing", "POST",
     "/v3/workspaces/{w}/sessions/never/messages/list", {"page": 1, "size": 10}, {}),
    ("an unknown workspace lists nothing", "POST",
     "/v3/workspaces/{w}-none/sessions/never/messages/list", {"page": 1, "size": 10}, {}),
    ("chat in an unknown workspace", "POST", "/v3/workspaces/{w}-none/peers/agent/chat", None,
     {"query": "editor?", "target": "owner"}),
]
# Last, in its own test: after a streamed chat fails, the real server was once left with a
# pooled database connection in a broken state (the next chat hung 5 min, then 500 "can't
# change 'autocommit' now: connection in transaction status ACTIVE").
STREAM_FAILURE = ("chat stream in an unknown workspace", "POST",
                  "/v3/workspaces/{w}-none/peers/agent/chat", None,
                  {"query": "editor?", "target": "owner", "stream": True})


def fill(value: Any, workspace: str) -> Any:
    return json.loads(json.dumps(value).replace("{w}", workspace))


def answer_of(response: httpx.Response) -> dict[str, Any]:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return {"status": response.status_code, "body": body}


async def ask_fake(fake: FakeHoncho, method: str, path: str, params: Any,
                   body: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=fake.transport(), base_url="http://fake") as client:
        response = await client.request(method, path, params=params, json=body)
        await response.aread()
        return response


MESSAGE_FIELDS = ("content", "peer_id", "session_id", "metadata", "created_at")


def differences(what: str, real: dict[str, Any], fake: dict[str, Any]) -> list[str]:
    """Where the fake's answer is not the real one's: status, shape, pagination, the values
    stored, and the error body's form (ids, timestamps of now and token counts may differ)."""
    out = []
    if real["status"] != fake["status"]:
        out.append(f"{what}: status {fake['status']}, real {real['status']}")
    rb, fb = real["body"], fake["body"]
    if type(rb) is not type(fb):
        return [*out, f"{what}: body {type(fb).__name__}, real {type(rb).__name__}"]
    if isinstance(rb, dict) and "items" in rb:
        pages = ("total", "page", "size", "pages")
        if [rb.get(k) for k in pages] != [fb.get(k) for k in pages]:
            out.append(f"{what}: pagination {[fb.get(k) for k in pages]}, real "
                       f"{[rb.get(k) for k in pages]}")
        rb, fb = rb["items"], fb["items"]
    if isinstance(rb, dict) and "detail" in rb:
        real_detail, fake_detail = rb["detail"], fb.get("detail")
        if type(real_detail) is not type(fake_detail):
            out.append(f"{what}: detail {fake_detail!r}, real {real_detail!r}")
        elif isinstance(real_detail, list) and [(d["type"], d["loc"]) for d in real_detail] != [
                (d.get("type"), d.get("loc")) for d in fake_detail]:
            out.append(f"{what}: 422 items {fake_detail!r}, real {real_detail!r}")
    elif isinstance(rb, dict) and set(rb) != set(fb):
        out.append(f"{what}: keys {sorted(fb)}, real {sorted(rb)}")
    if isinstance(rb, list):
        if len(rb) != len(fb):
            return [*out, f"{what}: {len(fb)} items, real {len(rb)}"]
        for r, f in zip(rb, fb, strict=True):
            if set(r) != set(f):
                out.append(f"{what}: item keys {sorted(f)}, real {sorted(r)}")
            given = [k for k in MESSAGE_FIELDS if k in r and (k != "created_at" or
                                                                r[k].startswith("2026-11"))]
            if [r[k] for k in given] != [f.get(k) for k in given]:
                out.append(f"{what}: item {[f.get(k) for k in given]}, real "
                           f"{[r[k] for k in given]}")
    return out


def compare(real_honcho: RealHoncho, exchanges: list[Any], record: Any) -> None:
    """Send each exchange to the real server and to a fresh fake; append the real answers to
    ``record`` (a JSON file); fail listing every difference."""
    workspace = new_workspace()
    fake = FakeHoncho()
    recorded = json.loads(record.read_text()) if record.exists() else []
    found = []
    for what, method, path, params, body in exchanges:
        path, body = fill(path, workspace), fill(body, workspace)
        real = answer_of(real_honcho.request(method, path, body, params))
        mocked = answer_of(run(ask_fake(fake, method, path, params, body)))
        recorded.append({"what": what, "method": method, "path": path, "params": params,
                         "request": body, **real})
        found += differences(what, real, mocked)
    record.write_text(json.dumps(recorded, indent=1, ensure_ascii=False))
    assert not found, f"the fake differs from the real server (its answers: {record}):\n" + \
        "\n".join(found)


def test_the_fake_answers_as_the_real_server_does(real_honcho: RealHoncho, tmp_path_factory):
    compare(real_honcho, EXCHANGES,
            tmp_path_factory.getbasetemp() / "honcho-real-answers.json")


# -- ask_memory through the real dialectic ------------------------------------------------------

FLEET = """
[[memory.honcho.workspaces]]
id = "{fleet}"
"""


def test_ask_memory_round_trips_through_the_real_dialectic(real_honcho, tmp_path):
    """The tiny model's answer is not judged, only that it arrives whole and is labelled: our
    own workspace trusted, another untrusted."""
    real_honcho.warmed()  # its chats then read the dialectic's prompt from the model's cache
    workspace, fleet = new_workspace(), new_workspace()
    extra = FLEET.format(fleet=fleet)
    real_honcho.request("POST", "/v3/workspaces", {"id": fleet})
    real_honcho.request("POST", f"/v3/workspaces/{fleet}/sessions/f1/messages", {"messages": [
        {"peer_id": "owner", "content": "The owner's team uses emacs."},
        {"peer_id": "agent", "content": "Noted."}]})
    with service(tmp_path, real_honcho, workspace, extra=extra) as svc:
        run(turn(svc, tmp_path, "s1", [user("I edit with helix."), answer("Noted: helix.")]))
        run(svc.sync.sync_once())
        own = run(call(svc, "ask_memory", {"query": "Which editor does the owner use?"}))
        assert own.status == "ok", own.content
        body = json.loads(own.content)
        assert isinstance(body["answer"], str) and body["trusted"] is True
        assert own.untrusted is False
        other = run(call(svc, "ask_memory", {"query": "Which editor?", "workspace": fleet}))
        assert other.status == "ok", other.content
        assert other.untrusted is True and json.loads(other.content)["trusted"] is False


def test_ask_memory_fails_cleanly_when_the_real_server_stalls_or_is_gone(real_honcho,
                                                                          tmp_path,
                                                                          tmp_path_factory):
    """Also the streamed chat the server cannot serve (a workspace it does not have): the fake
    answers it as the real one, and memoryd says what an empty stream means. The API is
    started again after: a failed streamed chat can leave the real server unsound (above)."""
    try:
        compare(real_honcho, [STREAM_FAILURE],
                tmp_path_factory.getbasetemp() / "honcho-real-answers.json")
        stalls_and_gone(real_honcho, tmp_path)
    finally:
        real_honcho.kill_api()
        real_honcho.start_api()


def stalls_and_gone(real_honcho: RealHoncho, tmp_path: Any) -> None:
    workspace = new_workspace()
    absent = config(tmp_path, honcho_toml(real_honcho, workspace))
    svc = build(absent, honcho=HonchoClient(real_honcho.url, transport=Hooked()))
    try:
        response = run(call(svc, "ask_memory", {"query": "x"}))  # not on the server
        assert response.status == "failed" and "empty stream" in response.content
    finally:
        run(svc.aclose())
    cfg = config(tmp_path, honcho_toml(real_honcho, workspace).replace(
        "chat_liveness = 300", "chat_liveness = 1"))
    svc = build(cfg, honcho=HonchoClient(real_honcho.url, transport=Hooked(),
                                         chat_liveness=1, request_timeout=1))
    try:
        with real_honcho.paused():
            stalled = run(call(svc, "ask_memory", {"query": "editor?"}))
        assert stalled.status == "failed" and "recall still answers" in stalled.content
    finally:
        run(svc.aclose())
    gone = build(cfg, honcho=HonchoClient(f"http://127.0.0.1:{free_port()}",
                                          transport=Hooked()))
    try:
        refused = run(call(gone, "ask_memory", {"query": "editor?"}))
        assert refused.status == "failed" and "ConnectError" in refused.content
    finally:
        run(gone.aclose())


def test_doctor_says_the_real_honcho_answers_and_which_workspace_memoryd_uses(real_honcho,
                                                                              tmp_path):
    check = check_honcho(config(tmp_path, honcho_toml(real_honcho, "bx-doctor")))
    assert check.ok, check.detail
    assert real_honcho.url in check.detail and "'bx-doctor'" in check.detail
    assert "bx-doctor (trusted)" in check.detail
