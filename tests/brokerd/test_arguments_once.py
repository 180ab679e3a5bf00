"""A call's arguments are parsed once, where the call enters brokerd (``Broker.call``), and every
step after takes the parsed ``CallArguments``: ``decide`` (which stays pure and parses nothing),
the path resolution before it, the egress log (what ``consult`` sends) and the delegate order.
Bad JSON still gets the same refusal. That ``decide``'s parameter is typed ``CallArguments`` is
mypy's to check (strict, at every caller); these tests check what a type cannot: nothing after
the entry parses the text again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from brokerd.audit import entries
from brokerd.egresslog import ConsultEgress
from brokerd.labelstore import LabelStore
from brokerd.memory import MemoryClient
from brokerd.policy import CallArguments, decide, parse_grant
from brokerd.runner import Runner
from brokerd.taint import CLEAN
from brokerd_support import NOW, make_rig, request, serve, write
from bxcore.config import ConsultSection
from bxcore.protocol.delegate import DelegateDone, DelegateRun
from loopd.tools.broker import BrokerPort
from support.egresslog import read_egress_log

CONSULT = ConsultSection.model_validate({
    "endpoint": "https://cloud.example/v1", "model": "cloud-model", "temperature": 0.6,
    "api_key": "consult_key", "first_byte_timeout": 60.0, "liveness_timeout": 60.0,
})


class Child:
    """loopd's side of a delegate call: the child's turn, answered at once."""

    async def run(self, order: DelegateRun) -> DelegateDone:
        assert order.task == "look"
        return DelegateDone(status="ok", content="looked")


async def no_events(event: object) -> None:
    pass


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """Every string json.loads parses from here on."""
    seen: list[str] = []
    loads = json.loads

    def counting(text, *args, **kwargs):
        seen.append(text)
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    return seen


def test_decide_parses_nothing_itself(parses):
    grant = parse_grant('tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\n'
                        '[arguments.text]\npattern = "h.*"\n', "echo.toml",
                        home=Path("/"), resolve=lambda p: p)
    call = request("echo", '{"text": "hi"}')
    arguments = CallArguments.parse(call.arguments)
    parses.clear()
    decision = decide(call, (grant,), arguments=arguments, now=NOW, taint=CLEAN,
                      resolved_paths={}, secrets={})
    assert decision.allowed and parses == []


def test_arguments_parsed_from_another_call_are_refused():
    grant = parse_grant('tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\n', "echo.toml",
                        home=Path("/"), resolve=lambda p: p)
    with pytest.raises(ValueError, match="parsed from another call"):
        decide(request("echo", '{"text": "a"}'), (grant,),
               arguments=CallArguments.parse('{"text": "b"}'), now=NOW, taint=CLEAN,
               resolved_paths={}, secrets={})


@pytest.mark.parametrize(("text", "value"), [
    ('{"path": "/x"}', {"path": "/x"}),
    ("[1, 2]", None),
    ("not json", None),
    ("[" * 100_000, None),
])
def test_arguments_that_are_not_one_object_have_no_value(text, value):
    assert CallArguments.parse(text) == CallArguments(text=text, value=value)


def test_one_call_over_broker_sock_parses_its_arguments_once_at_every_step(
        tmp_path, parses):
    rig = make_rig(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    write(rig.grants, "files.toml", f"""
        tools = ["fs.write"]
        mode = "auto"
        classes = ["public"]
        [arguments.path]
        paths = ["{work}/**"]
        [sandbox]
        mounts = [{{ path = "{work}", write = true }}]
        """)
    write(rig.grants, "consult.toml", 'tools = ["consult"]\nmode = "auto"\n'
                                      'classes = ["public"]\n')
    write(rig.grants, "delegate.toml", 'tools = ["delegate"]\nmode = "auto"\n'
                                       'classes = ["public"]\n')
    broker = rig.broker
    broker._runner = Runner(  # the runner with every step that reads the arguments
        backend=rig.backend, memory=MemoryClient(tmp_path / "no-memory.sock"),
        audit=broker.audit, taints=broker.taints, result_cap=1024,
        labels=LabelStore(tmp_path / "labels.jsonl"),
        consult=ConsultEgress(CONSULT, tmp_path / "egress"))
    calls = [
        request("fs.write", json.dumps({"path": f"{work}/a.md", "text": "x"}), call=1,
                session="s1"),
        request("consult", json.dumps({"question": "why?", "attachments": ["a"]}), call=2,
                session="s2"),
        request("delegate", json.dumps({"task": "look"}), call=3, session="s3"),
        request("fs.write", "not json", call=4, session="s4"),
    ]

    async def body(sock):  # loopd's own client, which runs a delegate call's child
        port = BrokerPort(sock, children=Child())
        return [await port.call(each, no_events) for each in calls]

    answers = serve(rig, tmp_path, body)
    assert [a.status for a in answers] == ["ok", "ok", "ok", "denied"]
    assert answers[2].content == "looked"
    assert answers[3].content == "Denied: the arguments are not one JSON object"
    assert [parses.count(each.arguments) for each in calls] == [1, 1, 1, 1]
    (sent,) = read_egress_log(tmp_path / "egress" / "consult.jsonl")
    assert sent.arguments == {"question": "why?", "attachments": ["a"]}
    assert [e.decision.verdict for e in entries(rig.audit_dir) if e.kind == "decision"] == \
        ["allow", "allow", "allow", "deny"]
