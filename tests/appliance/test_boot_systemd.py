"""What the roles take from systemd in the booted appliance (tests/appliance/conftest.py's
machine, after test_boot.py): their listening sockets from the module's .socket units (socket
activation, through podman into each container), and the journal, where each role's records
carry BOXMAKER_* fields that find one session's story (bxcore.logs). journald itself is the judge
of the entries bxcore.logs writes."""

from __future__ import annotations

import json
import os
import random

import pytest

from . import boot
from .host import owner, send_frame, wait_active
from .nix import REPO
from .stack import ROLES

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.real_server,
    pytest.mark.skipif(os.geteuid() != 0, reason="boots a container: needs root"),
]

SESSION = "boot-journal"
SITE = str(next((REPO / ".venv" / "lib").glob("python3.*/site-packages")))


def entries(booted: boot.Machine, *match: str) -> list[dict]:
    """The journal's entries matching ``match`` (journalctl's FIELD=value or -u UNIT), whole."""
    done = booted.run("journalctl", "--no-pager", "--all", "-o", "json", *match)
    assert done.returncode in (0, 1), done.stderr  # 1: nothing matched, on systemd 252
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def text(value: str | list[int]) -> str:
    """A field as journalctl's JSON gives it: a string, or its bytes when not printable."""
    return value if isinstance(value, str) else bytes(value).decode()


def test_every_role_serves_the_sockets_systemd_passed_into_its_container(booted_machine):
    """Each role's first log line under systemd names the sockets it was given (LISTEN_FDS,
    through podman, LISTEN_PID=1): none of them bound its own."""
    booted, appliance = booted_machine
    for role in ROLES:
        served = sorted(appliance.manifest.socket_path(name)
                        for name, spec in appliance.manifest.sockets.items()
                        if spec.server == role)  # fmt: skip
        said = [text(e["MESSAGE"]) for e in entries(booted, "-u", f"boxmaker-{role}",
                                                      "BOXMAKER_LOGGER=bxcore.activation")]
        assert f"sockets from systemd: {', '.join(served)}" in said, (role, said)


def test_a_chat_that_connects_while_loopd_is_stopped_waits_and_is_answered_by_its_next_start(
    booted_machine,
):
    """loopd is stopped; loop.socket still listens. The owner's ``bxctl chat`` connects, its
    turn waits in the socket's queue, systemd starts loopd (its self-test included) and the
    turn is answered: no error, no retry. The socket's file is the same one throughout."""
    booted, _ = booted_machine
    path = "/run/boxmaker/loop/loop.sock"

    def identity() -> tuple[str, str]:
        shown = booted.systemctl("show", "-p", "InvocationID", "--value", "boxmaker-loopd")
        return shown.stdout.strip(), booted.run("stat", "-c", "%i %a %U:%G", path).stdout

    started, socket_file = identity()
    assert booted.systemctl("stop", "boxmaker-loopd.service").returncode == 0
    assert booted.systemctl("is-active", "boxmaker-loopd.service").stdout.strip() == "inactive"
    assert booted.systemctl("is-active", "boxmaker-loop.socket").stdout.strip() == "active"
    done = owner(booted, "bxctl", "chat", "--session", SESSION, "--tool-choice", "none",
                 "--say", "Say hello in one short sentence.")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert wait_active(booted, "boxmaker-loopd") == "active"
    restarted, socket_after = identity()
    assert restarted != started, "loopd was not started again"
    assert socket_after == socket_file == f"{socket_after.split()[0]} 660 boxmaker-loopd:boxmaker\n"


def test_one_sessions_story_is_found_in_the_journal_by_its_id(booted_machine):
    """``journalctl -u boxmaker-loopd BOXMAKER_SESSION=<id>`` gives that session's turns (the
    chat above); ``-u boxmaker-brokerd`` its calls, each with its number, tool and verdict."""
    booted, _ = booted_machine
    turns = entries(booted, "-u", "boxmaker-loopd", f"BOXMAKER_SESSION={SESSION}")
    assert turns, "no entry of the session in loopd's journal"
    assert {(e["BOXMAKER_ROLE"], e["SYSLOG_IDENTIFIER"], e["_SYSTEMD_UNIT"]) for e in turns} == {
        ("loopd", "loopd", "boxmaker-loopd.service")}
    assert any(text(e["MESSAGE"]).startswith(f"session {SESSION}: turn done in epoch ")
               for e in turns), [text(e["MESSAGE"]) for e in turns]

    call = {"session": "boot-journal-call", "call": 3, "tool": "fs.read",
            "arguments": json.dumps({"path": "/etc/shadow"})}
    answer = json.loads(send_frame(booted, "boxmaker-loopd", "/run/boxmaker/broker/broker.sock",
                                   "tool_call", call))  # fmt: skip
    (decided,) = entries(booted, "-u", "boxmaker-brokerd", "BOXMAKER_SESSION=boot-journal-call")
    assert (decided["BOXMAKER_CALL"], decided["BOXMAKER_TOOL"], decided["BOXMAKER_ROLE"]) == (
        "3", "fs.read", "brokerd")
    assert decided["BOXMAKER_VERDICT"] == {"denied": "deny", "ok": "allow"}[answer["status"]]
    assert entries(booted, "-u", "boxmaker-loopd", "BOXMAKER_SESSION=boot-journal-call") == []


PROBE = """
import json, logging, site, sys
site.addsitedir({site!r})
from bxcore.logs import configure_logging, fields
assert configure_logging("probe", format="%(message)s") == "journal"  # JOURNAL_STREAM is ours
for number, message in enumerate(json.load(open(sys.argv[1]))):
    logging.getLogger("probe").warning("%s", message, extra=fields(session="probe", call=number))
"""


def test_journald_reads_every_entry_as_bxcore_wrote_it(booted_machine):
    """A process systemd started (JOURNAL_STREAM set, no flag) writes messages of each kind
    the encoding treats apart (plain, with newlines, with '=', non-ASCII, one larger than a
    datagram, sent as a memfd); journald gives each back exactly, with its fields."""
    booted, _ = booted_machine
    pick = random.Random(33)
    alphabet = "ab=\n\t é✓€𝄞\\\"'"
    messages = ["plain", "two\nlines", "a=b=c", "ünïcödé ✓ 𝄞", "\n", "x" * 300_000,
                *("".join(pick.choice(alphabet) for _ in range(pick.randrange(1, 80)))
                  for _ in range(12))]
    (booted.root / "var/tmp/probe.json").write_text(json.dumps(messages))
    done = booted.run("systemd-run", "--wait", "--quiet", "--unit=bx-journal-probe",
                      "/usr/bin/python3", "-sB", "-c", PROBE.format(site=SITE),
                      "/var/tmp/probe.json")  # fmt: skip
    assert done.returncode == 0, done.stderr + booted.journal("bx-journal-probe")
    found = entries(booted, "-u", "bx-journal-probe", "BOXMAKER_SESSION=probe")
    got = {int(e["BOXMAKER_CALL"]): (text(e["MESSAGE"]), e["PRIORITY"]) for e in found}
    assert got == {n: (m, "4") for n, m in enumerate(messages)}
