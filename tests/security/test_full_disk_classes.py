"""Class 9 (issue 31), the fifth attack's two holes closed as classes: a full state filesystem,
of bytes *or inodes*, filled by a tool *or by brokerd's own writes* (consult's egress log).

Against the real ``brokerd serve`` (bubblewrap, as root) on a real tmpfs limited in size and in
inodes (``nr_inodes``), over broker.sock. Properties:

- Free space is bytes and inodes: a call that can write to the state filesystem is refused
  before it runs ("failed", audited, the message names ``audit_reserve_inodes``) while fewer
  than the inode reserve are free, bytes or not.
- Every write brokerd makes for a call is inside the reserve: a consult call whose payload
  would leave less than the reserve free is not sent ("Nothing was sent"), and the egress log
  never holds a torn line: whole records only, read without refusal.
- An allowed call ends with exactly one audited result whatever cannot be written (a taint, an
  egress record); no answer is ``internal``; nothing runs once the disk is full.
- A full disk does not stop brokerd: SIGTERM exits cleanly, it starts again on the full disk,
  and once space returns the next call runs with no restart; ``brokerd audit verify`` is ok.

tests/security/test_full_disk.py is the byte fill through a tool; tests/brokerd/
test_egress_write_faults.py the egress log's appends failing at any byte.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from bxcore.config.broker import DEFAULT_SANDBOX_UID
from support.disks import home_on_tmpfs

from .flow_support import Answer, Brokerd, grant_text

pytestmark = pytest.mark.sandbox

INODES = 300
INODE_RESERVE = 100  # above the 64 the log holds: a freed hold does not let calls through
FILL_INODES = ["python3", "-c", "import itertools\nfor i in itertools.count():\n    try:\n"
               "        open('f%d' % i, 'w').close()\n    except OSError as e:\n"
               "        print('stopped', i, e.strerror)\n        break\n"]


def tmpfs(root: Path, options: str) -> contextlib.AbstractContextManager[Path]:
    """A tmpfs at ``root/disk`` whose ``home`` is bind-mounted at ``root/b/home``: brokerd's
    state directory is on it, its sockets' directory (``root/b/run``) is not, as /run is not."""
    return home_on_tmpfs(root / "disk", root / "b" / "home", options)


def tools_dir(path: Path) -> Path:
    path.mkdir()
    os.chown(path, DEFAULT_SANDBOX_UID, DEFAULT_SANDBOX_UID)
    return path


def one_result_each(brokerd: Brokerd) -> None:
    """Every allowing decision has exactly one result record (none left open, none twice)."""
    records = brokerd.audit_records()
    allowed = Counter((r["decision"]["session"], r["decision"]["call"]) for r in records
                      if r["kind"] == "decision" and r["decision"]["verdict"] == "allow")
    results = Counter((r["session"], r["call"]) for r in records if r["kind"] == "result")
    assert all(n == 1 for n in results.values()), results
    assert set(allowed) <= set(results), set(allowed) - set(results)


def not_internal(answer: Answer) -> None:
    assert answer.status != "error" or '"unavailable"' in answer.content, answer
    assert "OSError" not in answer.content, answer


def fill_inodes(directory: Path) -> int:
    directory.mkdir(exist_ok=True)
    made = 0
    with contextlib.suppress(OSError):
        while True:
            (directory / str(made)).touch()
            made += 1
    return made


@pytest.mark.parametrize("labelled", [False, True], ids=["fresh-state", "label-consulted"])
def test_a_tool_that_uses_up_the_inodes_is_refused_and_brokerd_stops_and_starts(
        short_dir, labelled):
    with tmpfs(short_dir, f"size=64m,nr_inodes={INODES}") as disk:
        shared, pub = tools_dir(disk / "shared"), tools_dir(disk / "pub")
        brokerd = Brokerd(short_dir / "b", 'backend = "bubblewrap"\n'
                          f'audit_reserve_bytes = {8 * 1024 * 1024}\n'
                          f'audit_reserve_inodes = {INODE_RESERVE}\n', None)
        (brokerd.grants / "fill.toml").write_text(grant_text(
            ["shell.run"], "public", argument="cwd", allowed=f"paths = {json.dumps([str(shared)])}",
            mounts=[(shared, True)]))
        (brokerd.grants / "pub.toml").write_text(grant_text(
            ["shell.run"], "secret", argument="cwd", allowed=f"paths = {json.dumps([str(pub)])}",
            mounts=[(pub, True)]))
        brokerd.start()
        try:
            mark = ["sh", "-c", "echo ran >> marker"]
            if labelled:  # pub's label raised to secret: later decisions on it consult it
                first = brokerd.call("s0", 1, "shell.run", {"argv": mark, "cwd": str(pub)})
                assert first.status == "ok", first
            before = (pub / "marker").read_bytes() if (pub / "marker").exists() else b""

            # The check before the call passes; the tool then takes every inode.
            filled = brokerd.call("filler", 1, "shell.run",
                                  {"argv": FILL_INODES, "cwd": str(shared)})
            not_internal(filled)
            assert os.statvfs(disk).f_favail < INODE_RESERVE

            # Calls that can write there are refused before they run, saying which ran out.
            for number in range(1, 4):
                refused = brokerd.call(f"q{number}", 1, "shell.run",
                                       {"argv": mark, "cwd": str(pub)})
                not_internal(refused)
                if refused.status != "error":
                    assert refused.status == "failed", refused
                    assert "audit_reserve_inodes" in refused.content, refused
                    assert str(disk) not in refused.content

            # Every inode gone (the test takes what the log's hold left): still no internal
            # error, nothing runs, each allowed call one result.
            fill_inodes(disk / "ballast")
            answers = [brokerd.call(f"z{n}", 1, "shell.run", {"argv": mark, "cwd": str(pub)})
                       for n in range(3)]
            for answer in answers:
                not_internal(answer)
            assert ((pub / "marker").read_bytes() if (pub / "marker").exists() else b"") \
                == before
            one_result_each(brokerd)
            if labelled:  # the decision's raise to pub's label could not be written: not run
                reasons = [r.get("reason") or "" for r in brokerd.audit_records()
                           if r["kind"] == "result" and r["session"].startswith("z")]
                assert any("taint of session" in r for r in reasons), reasons
            ok, said = brokerd.verify()
            assert ok, said
        finally:
            brokerd.stop()  # asserts a clean exit: SIGTERM on a full disk exits 0
        one_result_each(brokerd)

        brokerd.start()  # on the full disk: owed taints are warnings, not a refusal to serve
        try:
            while_full = brokerd.call("z0", 2, "shell.run", {"argv": mark, "cwd": str(pub)})
            not_internal(while_full)
            # Space returns: the next call of the same session runs, with no restart.
            subprocess.run(["rm", "-rf", str(disk / "ballast")], check=True)
            for each in shared.glob("f*"):
                each.unlink()
            ran = brokerd.call("z0", 3, "shell.run", {"argv": mark, "cwd": str(pub)})
            assert ran.status == "ok", (ran, brokerd.log())
            assert (pub / "marker").read_bytes().endswith(b"ran\n")
            one_result_each(brokerd)
        finally:
            brokerd.stop()
        ok, said = brokerd.verify()
        assert ok, said


CONSULT_GRANT = ('tools = ["consult"]\nmode = "auto"\nclasses = ["public", "private", "secret"]\n'
                 'allow_untrusted = true\nresult_class = "public"\n'
                 '[arguments.question]\npattern = "(?s).*"\n'
                 '[sandbox]\nhosts = ["127.0.0.1:9"]\n')
CONSULT_CONFIG = ('backend = "bubblewrap"\naudit_reserve_bytes = {reserve}\n'
                  '[consult]\nendpoint = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
QUESTION = "Q" * (1024 * 1024 - 100)  # each payload about 1 MiB, on a 24 MiB state disk


def egress_whole(brokerd: Brokerd) -> list[dict]:
    """The egress log's records: every line whole (ends in a newline, parses)."""
    log = brokerd.home / "egress" / "consult.jsonl"
    data = log.read_bytes() if log.exists() else b""
    assert not data or data.endswith(b"\n"), data[-80:]
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.parametrize("reserve", [6 * 1024 * 1024, 0], ids=["reserve", "no-reserve"])
def test_consult_alone_cannot_fill_the_state_disk_through_the_egress_log(short_dir, reserve):
    """With the reserve, consult stops before it (Nothing sent, every call one result, no error
    at all); with the check off (reserve 0) the disk fills to the last byte through the egress
    log and the log is still whole, every allowed call has one result or stays for the closer,
    brokerd stops cleanly, starts on the full disk, and serves once space returns."""
    with tmpfs(short_dir, "size=24m") as disk:
        brokerd = Brokerd(short_dir / "b", CONSULT_CONFIG.format(reserve=reserve), None)
        (brokerd.grants / "c.toml").write_text(CONSULT_GRANT)
        brokerd.start()
        try:
            answers = []
            for number in range(1, 32):
                answers.append(brokerd.call("s", number, "consult",
                                            {"question": QUESTION + str(number)}))
                not_internal(answers[-1])
                if answers[-1].status == "error" and "audit log" in answers[-1].content:
                    break
            refused = [a for a in answers if "Nothing was sent" in a.content]
            assert refused, answers[-1]
            sent = egress_whole(brokerd)
            if reserve:
                assert all(a.status == "failed" for a in answers), answers
                assert all("audit_reserve_bytes" in a.content for a in refused)
                assert os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize >= reserve
                # the calls after the first refusal are all refused: nothing more was logged
                first = answers.index(refused[0])
                assert all("Nothing was sent" in a.content for a in answers[first:])
                assert [r["call"] for r in sent] == list(range(1, first + 1))
                one_result_each(brokerd)
            ok, said = brokerd.verify()
            assert ok, said
        finally:
            brokerd.stop()  # a clean exit, full disk or not
        one_result_each(brokerd)
        sent = egress_whole(brokerd)

        brokerd.start()  # on the disk as it is
        try:
            # Space returns (the owner moves the egress log away): the next call is sent.
            log = brokerd.home / "egress" / "consult.jsonl"
            shutil.move(log, short_dir / "consult.jsonl.saved")
            again = brokerd.call("s", 100, "consult", {"question": "again"})
            assert "Nothing was sent" not in again.content, (again, brokerd.log())
            assert again.status == "failed", again  # nothing listens on port 9
            assert [r["call"] for r in egress_whole(brokerd)] == [100]
            one_result_each(brokerd)
        finally:
            brokerd.stop()
        assert sent == [json.loads(line) for line in
                        (short_dir / "consult.jsonl.saved").read_bytes().splitlines()]
        ok, said = brokerd.verify()
        assert ok, said
