"""Issue 31, the second attack's A1 and A2: brokerd's own answers as a channel. Whether a call
is denied (its egress grant's mounts carry a label a secret session raised, or chose not to) or
refused at start (a secret call runs beside it in a shared zone) depends on what a secret session
did. A public receiver with egress that learns from such an answer must not be able to send
what it learned: the answer is labelled with the labels it depended on, and the session's taint
rises to them, so its public-only egress grants no longer match. A real ``brokerd serve``
(bubblewrap) judges, and the judge is what reaches the granted host.

Hypothesis chooses the secret bits, how the sender carries each (``label``: a secret call writes
mount m_i, raising its label; ``running``: a secret call keeps running on zone z_i while the
receiver tries), and the order in which the receiver tries its egress grants, each attempt
followed by a post through a further public-only egress grant (what the receiver's model
would do with what it learned). Every probe and post names its step in what it sends.

The property: an answer that is not ``ok`` is labelled at least secret, or an earlier answer in
the receiver's session was; and nothing the receiver sends at or after its first such answer
reaches the host. (What the receiver sends before that, when its probe ran, says "this label
was low": that is the channel docs/decisions/label-dependent-answers.md leaves open.)

    uv run --frozen pytest tests/security/test_label_answers.py   (short: scripts/test)
    BOXMAKER_PROFILE=long ... (scripts/reliability): more examples, brokerd unprivileged too
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from faults.profile import by_profile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .flow_support import Answer, Brokerd, Label, grant_text
from .test_concurrent_flow import Sink, sink  # noqa: F401  (the fixture, by name)
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox

EXAMPLES = by_profile(short=3, long=40)
CONFIGURATIONS = ["bubblewrap"] + (["bubblewrap-unprivileged"] if by_profile(0, 1) else [])
SECRET = Label("secret")
STARTED_WAIT = 300.0  # a guard against a sender that never starts, not a speed limit
SENT = re.compile(r"rx(\d+)-n(\d+)")


@dataclass(frozen=True)
class Case:
    bits: tuple[bool, ...]  # the secret, one bit per channel
    carriers: tuple[str, ...]  # per bit: "label" or "running"
    order: tuple[int, ...]  # the bits the receiver probes, in this order (repeats allowed)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    width = draw(st.integers(1, 3))
    bits = tuple(draw(st.lists(st.booleans(), min_size=width, max_size=width)))
    carriers = tuple(draw(st.lists(st.sampled_from(["label", "running"]), min_size=width,
                                   max_size=width)))
    order = tuple(draw(st.lists(st.integers(0, width - 1), min_size=1, max_size=width + 1)))
    return Case(bits, carriers, order)


def post_code(host: str, tag: str) -> str:
    return ("import urllib.request\n"
            f"urllib.request.urlopen(urllib.request.Request('http://{host}/', "
            f"data={tag!r}.encode()), timeout=30)\nprint('posted')\n")


class Rig:
    def __init__(self, brokerd: Brokerd, root: Path, tool_uid: int, host: str):
        self.brokerd, self.root, self.tool_uid, self.sink = brokerd, root, tool_uid, host
        self.serial = self.calls = 0

    def directory(self, path: Path) -> Path:
        path.mkdir(parents=True)
        if os.geteuid() == 0:
            os.chown(path, self.tool_uid, self.tool_uid)
        return path

    def grant(self, name: str, key: Path, mounts: list[tuple[Path, bool]], *,
              result_class: str, egress: bool) -> None:
        text = grant_text(["shell.run"], result_class, argument="cwd",
                          allowed=f"paths = [{json.dumps(str(key))}]",
                          mounts=[(key, False), *mounts],
                          extra=f"hosts = {json.dumps([self.sink])}\n" if egress else "")
        if egress:  # the owner lets public data, and only that, go to the host
            text = text.replace('classes = ["public", "private", "secret"]',
                                'classes = ["public"]')
        (self.brokerd.grants / f"{name}.toml").write_text(text)

    def run(self, case: Case) -> tuple[int, list[Answer]]:
        """Set the example up, let the sender carry its bits, let the receiver probe and post;
        the receiver's answers (probe, post, probe, post, ...)."""
        self.serial += 1
        k = self.serial
        top = self.directory(self.root / f"x{k}")
        keys = {name: self.directory(top / name) for name in ("kpost", "out")}
        carriers: list[Path] = []
        holds: list[threading.Thread] = []
        for i, carrier in enumerate(case.carriers):
            zone = self.directory(top / f"{carrier}{i}")
            carriers.append(zone)
            probe_key, send_key = self.directory(top / f"kp{i}"), self.directory(top / f"ks{i}")
            self.grant(f"p{k}_{i}", probe_key, [(zone, False)], result_class="public",
                       egress=True)
            if carrier == "label":
                self.grant(f"s{k}_{i}", send_key, [(zone, True)], result_class="secret",
                           egress=False)
            else:
                flag = self.directory(top / f"flag{i}")
                self.grant(f"s{k}_{i}", send_key, [(zone, False), (flag, True)],
                           result_class="secret", egress=False)
        self.grant(f"post{k}", keys["kpost"], [(keys["out"], True)], result_class="public",
                   egress=True)
        for i, bit in enumerate(case.bits):
            if not bit:
                continue
            send_key = top / f"ks{i}"
            if case.carriers[i] == "label":  # the write itself raises the mount's label
                sent = self.call(f"sender{k}", send_key,
                                 f"open({str(carriers[i] / 'm')!r}, 'w').close()\n")
                assert sent.status == "ok", sent
            else:
                holds.append(self.hold(k, i, send_key, top / f"flag{i}"))
        answers: list[Answer] = []
        try:
            for bit in case.order:  # answer 2n probes a bit, 2n + 1 posts what it learned
                answers.append(self.call(f"rx{k}", top / f"kp{bit}",
                                         post_code(self.sink, f"rx{k}-n{len(answers)}")))
                answers.append(self.call(f"rx{k}", keys["kpost"],
                                         post_code(self.sink, f"rx{k}-n{len(answers)}")))
        finally:
            for i, carrier in enumerate(case.carriers):
                if carrier == "running":
                    (top / f"flag{i}" / "go").touch()
            for thread in holds:
                thread.join()
        return k, answers

    def hold(self, k: int, i: int, key: Path, flag: Path) -> threading.Thread:
        """A secret call that keeps running on zone i until the test makes the go-file in its
        own writable ``flag`` directory; returned once it has started."""
        code = (f"import os, time\nopen({str(flag / 'started')!r}, 'w').close()\n"
                f"while not os.path.exists({str(flag / 'go')!r}):\n    time.sleep(0.05)\n"
                "print('held')\n")
        said: list[Answer] = []
        thread = threading.Thread(target=lambda: said.append(self.call(f"sender{k}", key, code)))
        thread.start()
        deadline = time.monotonic() + STARTED_WAIT
        while not (flag / "started").exists():
            assert thread.is_alive() and time.monotonic() < deadline, (said, self.brokerd.log())
            time.sleep(0.05)
        return thread

    def call(self, session: str, key: Path, code: str) -> Answer:
        self.calls += 1
        return self.brokerd.call(session, self.calls, "shell.run",
                                 {"argv": ["python3", "-c", code], "cwd": str(key)})


@pytest.fixture
def rig(request, sink) -> Iterator[Rig]:  # noqa: F811
    with serving_brokerd(request, request.param, "bx-answers-") as (brokerd, root, tool_uid):
        yield Rig(brokerd, root, tool_uid, sink)


@pytest.mark.parametrize("rig", CONFIGURATIONS, indirect=True)
def test_what_a_session_learns_from_a_label_dependent_answer_it_cannot_send(rig: Rig):
    learned = []

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(case=cases())
    @example(case=Case((True,), ("label",), (0,)))  # each carrier meets the receiver at least once
    @example(case=Case((False, True), ("label", "running"), (0, 1, 0)))
    def one(case: Case) -> None:
        Sink.got.clear()
        k, answers = rig.run(case)
        first = next((n for n, a in enumerate(answers) if a.status != "ok"), len(answers))
        sent = [int(m.group(2)) for body in Sink.got
                if (m := SENT.search(body)) and int(m.group(1)) == k]
        assert all(n < first for n in sent), (case, answers, Sink.got)
        # Up to the first answer that depended on the secret the probes ran: every bit they
        # probed was 0 (the channel left open is exactly that, see the module's docstring).
        assert not any(case.bits[bit] for bit in case.order[:(first + 1) // 2]), (case, answers)
        if first == len(answers):
            return
        learned.append(case)
        assert answers[first].label.covers(SECRET), (case, first, answers)
        assert any(_raises_to_secret(r, f"rx{k}") for r in rig.brokerd.audit_records()), \
            "the audit log does not say the receiver's taint rose"

    one()
    assert len(learned) >= 2, "the receivers met no label-dependent answer: it shows nothing"


def _raises_to_secret(record: dict, session: str) -> bool:
    """An audit record that raises ``session``'s taint to secret: a decision that depended on
    secret labels, or a secret result."""
    if record.get("kind") == "decision":
        return record["decision"]["session"] == session and \
            record.get("consulted", {}).get("class") == "secret"
    return record.get("kind") == "result" and record["session"] == session and \
        record["class"] == "secret"
