"""Issue 31, class 4, as the fourth attack found it: a file name that is not UTF-8 in a tool's
answer. ``fs.list`` of a directory holding one answered ``internal`` ("brokerd failed the call:
UnicodeEncodeError"): the answer could not be measured, so the allowed call had no audited
result and no taint update until brokerd stopped.

Hypothesis chooses names of any bytes a directory entry can hold (not UTF-8, control
characters, 255 bytes long) and how a public session reads them back, against a real
``brokerd serve`` (bubblewrap): ``fs.list`` and ``fs.search`` of the directory, ``fs.read`` of
the name (its argument holding the surrogate escapes a JSON client can send), and ``ls`` in
``shell.run``.

The property: every call is answered ``ok`` with text that is valid Unicode, each name shown as
``bxcore.tools.valid_unicode`` writes it (a byte that is not UTF-8 as ``\\xff``), and every
allowed call has exactly one audited result; the log verifies (``serving_brokerd``).

    uv run --frozen pytest tests/security/test_undecodable_names.py   (short: scripts/test)
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from bxcore.tools import valid_unicode
from faults.profile import by_profile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .flow_support import Brokerd, grant_text, program
from .test_flow_property import serving_brokerd

pytestmark = pytest.mark.sandbox

EXAMPLES = by_profile(short=3, long=60)
READERS = ("fs.list", "fs.search", "fs.read", "ls")

names = st.binary(min_size=1, max_size=255).filter(
    lambda name: b"/" not in name and b"\0" not in name and name not in (b".", b".."))


class Rig:
    def __init__(self, brokerd: Brokerd, root: Path, tool_uid: int):
        self.brokerd, self.work = brokerd, root / "work"
        self.work.mkdir()
        if os.geteuid() == 0:
            os.chown(self.work, tool_uid, tool_uid)
        tools = ["fs.list", "fs.search", "fs.read"]
        (brokerd.grants / "w.toml").write_text(grant_text(
            tools, "public", argument="path",
            allowed=f"paths = {json.dumps([str(self.work), f'{self.work}/**'])}",
            mounts=[(self.work, True)]))
        (brokerd.grants / "sh.toml").write_text(grant_text(
            ["shell.run"], "public", argument="cwd",
            allowed=f"paths = {json.dumps([str(self.work)])}", mounts=[(self.work, True)]))
        self.serial = 0

    def session(self) -> tuple[str, Iterator[int]]:
        self.serial += 1
        return f"n{self.serial}", iter(range(1, 100))


@pytest.fixture
def rig(request) -> Iterator[Rig]:
    with serving_brokerd(request, "bubblewrap", "bx-names-") as (brokerd, root, tool_uid):
        yield Rig(brokerd, root, tool_uid)


def test_names_that_are_not_utf8_are_answered_and_audited(rig: Rig):
    sessions: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(chosen=st.lists(names, min_size=1, max_size=3, unique=True),
           readers=st.lists(st.sampled_from(READERS), min_size=1, max_size=4))
    @example(chosen=[b"p\xffq"], readers=["fs.list"])  # the attack's F1
    def one(chosen: list[bytes], readers: list[str]) -> None:
        session, numbers = rig.session()
        sessions.append(session)
        directory = rig.work / session
        made = rig.brokerd.call(session, next(numbers), "shell.run", {
            "argv": program("os.mkdir(d)\nfor n in names.split(b'/'):\n"
                            "    open(os.path.join(d, n), 'wb').write(b'x')\n",
                            d=os.fsencode(directory), names=b"/".join(chosen)),
            "cwd": str(rig.work)})
        assert made.status == "ok", made
        shown = [valid_unicode(os.fsdecode(name)) for name in chosen]
        for reader in readers:
            if reader == "ls":
                answer = rig.brokerd.call(session, next(numbers), "shell.run", {
                    "argv": ["ls", "-1", str(directory)], "cwd": str(rig.work)})
            elif reader == "fs.read":
                path = os.fsdecode(os.path.join(os.fsencode(directory), chosen[0]))
                answer = rig.brokerd.call(session, next(numbers), "fs.read", {"path": path})
            else:
                arguments = {"path": str(directory)}
                if reader == "fs.search":
                    arguments["pattern"] = "x"
                answer = rig.brokerd.call(session, next(numbers), reader, arguments)
            assert answer.status == "ok", (reader, chosen, answer)
            answer.content.encode("utf-8")  # valid Unicode: it crossed the wire as JSON
            if reader == "fs.list":
                assert all(name in answer.content for name in shown), (shown, answer.content)

    one()
    rig.brokerd.stop()
    records = rig.brokerd.audit_records()
    for session in sessions:
        allowed = Counter(r["decision"]["call"] for r in records if r["kind"] == "decision"
                          and r["decision"]["session"] == session
                          and r["decision"]["verdict"] == "allow")
        results = Counter(r["call"] for r in records
                          if r["kind"] == "result" and r["session"] == session)
        assert allowed == results and set(allowed.values()) == {1}, (session, allowed, results)
    rig.brokerd.start()  # serving_brokerd stops it and verifies the log
