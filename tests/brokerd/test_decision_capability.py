"""A Decision cannot be made, unpickled or copied outside the policy package, and the runner
refuses a forged, used or refusing one before anything runs."""

from __future__ import annotations

import asyncio
import copy
import pickle
from pathlib import Path

import pytest
from brokerd.policy import CallArguments, Decision, NotAuthorized, decide, parse_grant, settle
from brokerd.taint import CLEAN
from brokerd_support import NOW, Rig, request
from bxcore.tools import DecisionRecord

ECHO = parse_grant('tools = ["echo"]\nmode = "auto"\nclasses = ["public"]\n', "echo.toml",
                   home=Path("/"), resolve=lambda p: p)
ASK = parse_grant('tools = ["echo"]\nmode = "ask"\nclasses = ["public"]\n', "ask.toml",
                  home=Path("/"), resolve=lambda p: p)
CALL = request("echo", '{"text": "hi"}')


def allowed(grants=(ECHO,)) -> Decision:
    return decide(CALL, grants, arguments=CallArguments.parse(CALL.arguments), now=NOW,
                  taint=CLEAN, resolved_paths={}, secrets={})


def test_constructing_a_decision_elsewhere_fails():
    record = allowed().record
    with pytest.raises(TypeError, match="only be made by brokerd's policy module"):
        Decision(object(), record=record, spec=None)


def test_a_decision_cannot_be_pickled_or_unpickled():
    decision = allowed()
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(decision)
    # Not even from bytes crafted by hand for the class.
    forged = pickle.dumps(DecisionRecord(**allowed().record.model_dump()))
    assert not isinstance(pickle.loads(forged), Decision)


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_a_decision_cannot_be_copied(copier):
    with pytest.raises(TypeError, match="cannot be copied"):
        copier(allowed())


def test_a_decision_cannot_be_altered():
    decision = allowed()
    with pytest.raises(AttributeError):
        decision._used = False  # type: ignore[misc]


def run(rig: Rig, decision: Decision):
    return asyncio.run(rig.broker._runner.run(
        decision, CALL, arguments=CallArguments.parse(CALL.arguments), taint=CLEAN))


def test_the_runner_refuses_a_forged_decision(rig):
    forged = object.__new__(Decision)
    for name, value in (("_record", allowed().record), ("_spec", allowed().authorize()),
                        ("_used", False)):
        object.__setattr__(forged, name, value)
    with pytest.raises(NotAuthorized, match="not made by the policy module"):
        run(rig, forged)
    assert rig.backend.runs == []


def test_the_runner_refuses_a_used_decision(rig):
    decision = allowed()
    run(rig, decision)
    with pytest.raises(NotAuthorized, match="already used"):
        run(rig, decision)
    assert len(rig.backend.runs) == 1


def test_the_runner_refuses_a_denial_and_an_unanswered_ask(rig):
    with pytest.raises(NotAuthorized, match="the decision was deny"):
        run(rig, allowed(grants=()))
    with pytest.raises(NotAuthorized, match="the decision was ask"):
        run(rig, allowed(grants=(ASK,)))
    assert rig.backend.runs == []


def test_an_ask_is_settled_once():
    asked = allowed(grants=(ASK,))
    approved = settle(asked, approved=True, reason="approved by owner")
    assert approved.allowed and approved.record.reason == "approved by owner"
    with pytest.raises(NotAuthorized, match="already used"):
        settle(asked, approved=True, reason="again")
    with pytest.raises(NotAuthorized):
        settle(approved, approved=True, reason="an allow is not an ask")
