"""What a call's answer says is labelled at least as high as the data it depends on, when the
call fails and when it is denied (class 1, the flow; the attack 31g's B2 and B3).

- **A failure is labelled as a result would be.** Whether a tool fails, and how, is the tool's
  to choose: a program that read a secret can fail on purpose on one bit of it. So a failed
  result is labelled with its grant's result class and the labels of all it mounts, whatever
  broke: the tool's exit, output brokerd cannot read (the toolkit's stdout is the tool's to
  write with brokerd unprivileged, through ``/proc/<ppid>/fd/1``), or brokerd's own bug.
- **A denial is labelled with the trees its resolution read.** A path argument is resolved
  beneath the tool's grants' trees; where a symlink in a tree leads decides the denial's words,
  so a denial that read inside a grant's tree carries that grant's class, even for a session
  that grant does not admit.

Real ``brokerd serve`` with bubblewrap, unprivileged and as root.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerd.sandbox._process import _one_object
from hypothesis import given
from hypothesis import strategies as st

from .label_rig import LabelRig

pytestmark = pytest.mark.sandbox
CANARY = "CANARY-answer-labels"
ORDER = ["public", "private", "secret"]

# What a tool can put where the toolkit writes its one result object, and how it can end.
FORGED_OUTPUTS = [b"[" * 20000, b"{" * 20000, b'{"a":' * 5000, b"\xff\xfe", b"[]", b"null",
                  b'{"content": 1}', b"\n" * 3, b'{"kind": "oom"}']


@pytest.fixture(params=["root", "unprivileged"])
def rig(request) -> Iterator[LabelRig]:
    if request.param == "unprivileged" and os.geteuid() != 0:
        pytest.skip("brokerd runs unprivileged already: the first case is that one")
    top = Path(tempfile.mkdtemp(prefix="bx-answers-"))
    try:
        yield LabelRig(top, unprivileged=request.param == "unprivileged")
    finally:
        shutil.rmtree(top, ignore_errors=True)


def at_least(answer, data_class: str) -> bool:
    return ORDER.index(answer.data_class) >= ORDER.index(data_class)


def taint_of(rig: LabelRig, session: str) -> dict:
    return json.loads((rig.home / "broker" / "sessions" / f"{session}.json").read_text())


@given(st.binary(max_size=64) | st.sampled_from(FORGED_OUTPUTS) |
       st.integers(1, 30000).map(lambda n: b"[" * n))
def test_the_result_parser_never_raises_on_what_a_tool_can_print(printed):
    """Whatever bytes stand where the result object should, they are read or refused: nothing
    the parser raises reaches brokerd's own-bug path (20,000 ``[`` raised RecursionError)."""
    assert _one_object(printed) is None or isinstance(_one_object(printed), dict)


def test_a_failure_a_tool_chooses_is_labelled_with_its_grant_and_mounts(rig):
    """A secret-classed grant's program fails in every way it can: it exits non-zero, or
    (brokerd unprivileged) writes into the toolkit's own stdout what brokerd cannot read. Each
    answer, in a fresh public session, is secret, and so is the session."""
    source = rig.directory("source")
    (source / "s.txt").write_text(CANARY)
    os.chmod(source / "s.txt", 0o644)
    rig.grant("sec", tools=["shell.run"], result_class="secret", mounts=[(source, False)],
              argument=("cwd", str(source)))
    forge = ("import os, sys\nout = bytes.fromhex(sys.argv[1])\n"
             "fd = os.open('/proc/%d/fd/1' % os.getppid(), os.O_WRONLY)\n"
             "os.write(fd, out)\n")
    programs = [["sh", "-c", "exit 3"], ["sh", "-c", "kill -9 $$"]]
    if rig.uid != 0:  # the tool shares the toolkit's uid only with brokerd unprivileged
        programs += [["python3", "-c", forge, printed.hex()] for printed in FORGED_OUTPUTS]
    with rig:
        for number, argv in enumerate(programs):
            session = f"fresh-{number}"
            answer = rig.call(session, "shell.run", {"argv": argv, "cwd": str(source)})
            assert answer.status != "ok" or CANARY not in answer.content, answer
            assert at_least(answer, "secret"), (argv[:2], answer)
            assert "secret" in taint_of(rig, session)["classes"], argv[:2]
        assert rig.brokerd("audit", "verify").returncode == 0


def test_a_denial_that_read_a_grants_tree_is_labelled_with_that_grants_class(rig):
    """The owner's secret tree is granted to secret sessions only. A private session (and an
    untrusted one, which the grant does not admit either) asks for a plain file, a missing one,
    a symlink inside the tree and one leaving it: every denial is labelled secret, so whichever
    words it has tell a secret session's taint, not a private one's."""
    tree = rig.directory("owner-secret")
    (tree / "passwords.txt").write_text(CANARY)
    os.symlink("/etc/hostname", tree / "link-out")
    os.symlink("passwords.txt", tree / "link-in")
    (rig.top / "grants" / "sec.toml").write_text(
        'tools = ["fs.read"]\nmode = "auto"\nclasses = ["secret"]\nresult_class = "secret"\n'
        f'[arguments.path]\npaths = ["{tree}/**"]\n'
        f'[sandbox]\nmounts = [{{ path = "{tree}", write = false }}]\n')
    private = rig.directory("private")
    (private / "p.txt").write_text("private words")
    rig.grant("priv", tools=["fs.read"], result_class="private", mounts=[(private, False)],
              argument=("path", f"{private}/**"))
    with rig:
        for number, name in enumerate(["passwords.txt", "nope.txt", "link-in", "link-out"]):
            session = f"private-{number}"
            assert rig.call(session, "fs.read", {"path": f"{private}/p.txt"}).status == "ok"
            answer = rig.call(session, "fs.read", {"path": f"{tree}/{name}"})
            assert answer.status == "denied" and CANARY not in answer.content, answer
            assert answer.data_class == "secret", (name, answer)
            assert "secret" in taint_of(rig, session)["classes"], name
        assert rig.brokerd("audit", "verify").returncode == 0


def test_a_denial_inside_a_deny_grants_tree_is_labelled_with_its_class(rig):
    """A deny grant's tree (the shipped ~/.ssh shape) is walked to match; what a symlink there
    leads to, or how long its target's name is, decided the denial's words, labelled public
    (the attack 31i's A3). It now carries the deny grant's class, secret by default."""
    tree = rig.directory("owner-ssh")
    (tree / "id_key").write_text(CANARY)
    os.symlink("/etc/hostname", tree / "link-out")
    os.symlink("id_key", tree / "link-in")
    (rig.top / "grants" / "ssh-deny.toml").write_text(
        f'tools = ["fs.read"]\nmode = "deny"\n[arguments.path]\npaths = ["{tree}/**"]\n')
    with rig:
        for number, name in enumerate(["id_key", "nope", "link-in", "link-out"]):
            answer = rig.call(f"public-{number}", "fs.read", {"path": f"{tree}/{name}"})
            assert answer.status == "denied" and CANARY not in answer.content, answer
            assert answer.data_class == "secret", (name, answer)
