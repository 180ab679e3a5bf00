"""A grant or job file says what the owner last saw in it, never what a tool wrote.

A tool drafts a file in a tree it can write, and keeps a hand on it however it likes: nothing,
a second name (a hard link), a second name it removes after rewriting through it, or a
descriptor held open by a call still running. The owner brings the draft in by any means
(``mv``, ``ln``, a symlink, ``cp``); brokerd may or may not decide a call in between; then the
tool rewrites it through whatever it kept into a grant that hands a fresh public session the
owner's secret (or a job whose ask is the tool's). Property, judged by a real ``brokerd serve``
and real sandboxes (brokerd as root, and unprivileged, where tools run as brokerd's own uid):
the tool's text never takes effect; and a draft the owner copied in while no call ran does.
Attacks 31j E10 and 31k K4, K11, K15 are four of these cases.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .label_rig import LabelRig

pytestmark = pytest.mark.sandbox
SECRET = "CANARY-owner-secret-7f3a"
PLAIN = "CANARY-plain-2c91"
TOOL_ASK = "TOOL-WROTE-THIS-ASK"
EXAMPLES = 8


@dataclass(frozen=True)
class Case:
    kind: str  # "grant" or "job"
    hand: str  # what the tool keeps: none, link, link-removed, open
    install: str  # how the owner brings it in: mv, ln, symlink, cp
    reload_between: bool  # brokerd decides a call between the install and the rewrite
    rewrite: bool


cases = st.builds(Case, st.sampled_from(["grant", "job"]),
                  st.sampled_from(["none", "link", "link-removed", "open"]),
                  st.sampled_from(["mv", "ln", "symlink", "cp"]), st.booleans(), st.booleans())


class Owner:
    """The rig, the owner's secret and plain trees, and one workspace per example."""

    def __init__(self, rig: LabelRig, top: Path):
        self.rig, self.top = rig, top
        self.secret = rig.directory("secret")
        (self.secret / "s.txt").write_text(SECRET)
        self.plain = rig.directory("plain")
        (self.plain / "p.txt").write_text(PLAIN)
        self.jobs = top / "jobs"
        self.numbers = itertools.count(1)

    def reader(self, tree: Path) -> str:
        """An auto grant letting any session read ``tree``, its result public."""
        return ('tools = ["fs.read"]\nmode = "auto"\nclasses = ["public", "private", "secret"]\n'
                'result_class = "public"\nallow_untrusted = true\n'
                f'[arguments.path]\npaths = [{json.dumps(f"{tree}/**")}]\n'
                f'[sandbox]\nmounts = [{{ path = {json.dumps(str(tree))} }}]\n')

    @staticmethod
    def job(ask: str) -> str:
        return f'ask = {json.dumps(ask)}\nschedule = "daily"\n'

    def drafts(self, case: Case) -> tuple[str, str]:
        """What the owner reads, and what the tool writes after (longer: written over it from
        the start, it leaves none of the first)."""
        if case.kind == "grant":
            return self.reader(self.plain), self.reader(self.secret) + "# " + "x" * 200 + "\n"
        return self.job("Summarise my notes."), self.job(TOOL_ASK) + "# " + "x" * 200 + "\n"

    def sees_secret(self, session: str) -> bool:
        answer = self.rig.call(session, "fs.read", {"path": str(self.secret / "s.txt")})
        return SECRET in answer.content

    def sees_plain(self, session: str) -> bool:
        answer = self.rig.call(session, "fs.read", {"path": str(self.plain / "p.txt")})
        return answer.status == "ok" and PLAIN in answer.content


@pytest.fixture(params=["root", "unprivileged"])
def owner(request: pytest.FixtureRequest) -> Iterator[Owner]:
    if os.geteuid() != 0 and request.param == "root":
        pytest.skip("brokerd as root needs root")
    top = Path(tempfile.mkdtemp(prefix="bx-owner-files-"))
    try:
        jobs = top / "jobs"
        rig = LabelRig(top, unprivileged=request.param == "unprivileged",
                       backend=f"jobs = {json.dumps(str(jobs))}\n")
        rig._owned(jobs)
        work = rig.directory("work")
        rig.grant("tool", tools=["shell.run"], result_class="public", mounts=[(work, True)],
                  argument=("cwd", f"{work}/**"))
        with rig:
            yield Owner(rig, top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_tools_text_never_takes_effect_in_a_grant_or_job_file(owner: Owner):
    rig = owner.rig

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(case=cases)
    def one(case: Case) -> None:
        n = next(owner.numbers)
        work = rig.directory(f"work/{n}")
        draft = work / "draft.toml"
        seen, written = owner.drafts(case)
        script = f"printf %s {sh(seen)} > draft.toml"
        if case.hand in ("link", "link-removed"):
            script += " && ln draft.toml .keep"
        assert rig.shell(f"tool-{n}", script, work).status == "ok"
        holder = None
        if case.hand == "open":  # a call that keeps the draft open, then writes through it
            holder = rig.begin(f"holder-{n}", "shell.run", {"argv": ["sh", "-c", (
                "exec 3<>draft.toml; : > opened; while [ ! -e go ]; do sleep 0.05; done; "
                f"if [ -e rewrite ]; then printf %s {sh(written)} >&3; fi")],
                "cwd": str(work)})
            while not (work / "opened").exists():
                time.sleep(0.05)
        quiet = case.install == "cp" and holder is None  # the owner copies while no call runs
        if quiet:
            time.sleep(0.05)  # past the last call's period (brokerd.writeperiods)
        name = f"x{n}"
        installed = (owner.jobs if case.kind == "job" else rig.top / "grants") / f"{name}.toml"
        try:
            {"mv": lambda: draft.rename(installed), "ln": lambda: os.link(draft, installed),
             "symlink": lambda: installed.symlink_to(draft),
             "cp": lambda: shutil.copyfile(draft, installed)}[case.install]()
            if quiet:
                time.sleep(0.05)  # and before the next call's period
            if case.reload_between:
                owner.sees_plain(f"between-{n}")
            if case.rewrite and holder is None:
                through = ".keep" if case.hand in ("link", "link-removed") else "draft.toml"
                script = f"[ -e {through} ] && printf %s {sh(written)} > {through}; true"
                if case.hand == "link-removed":
                    script += "; rm -f .keep"
                # denied when the installed grant is refused: then every call is
                assert rig.shell(f"rewrite-{n}", script, work).status in ("ok", "denied")
            if holder is not None:
                if case.rewrite:
                    (work / "rewrite").touch()
                (work / "go").touch()
                assert rig.end(holder).status == "ok"
            if case.kind == "grant":
                assert not owner.sees_secret(f"fresh-{n}"), (case, "the tool's grant is in force")
            else:
                shown = rig.brokerd("jobs", "show", name)
                assert TOOL_ASK not in shown.stdout, (case, shown)
            if quiet:  # the owner's copy is the owner's
                if case.kind == "grant":
                    assert owner.sees_plain(f"plain-{n}"), case
                else:
                    shown = rig.brokerd("jobs", "show", name)
                    assert shown.returncode == 0 and "Summarise" in shown.stdout, (case, shown)
        finally:  # another example must not find it in force
            installed.unlink(missing_ok=True)

    one()


def sh(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
