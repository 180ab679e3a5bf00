"""Inside a real sandbox (both backends): no network, no path, no write and no secret beyond
what the call was granted. Each test runs the toolkit program through ``backend.run``."""

from __future__ import annotations

import json
import os

import pytest
from brokerd.sandbox import ToolFailure, ToolOutput
from bxcore.secrets import Secret
from bxcore.tools import DataClass
from support.sandbox_uid import writable_by_sandbox

from .helpers import command, python, ro, run, rw, shell, spec

pytestmark = pytest.mark.sandbox

CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection(('{host}', {port}), timeout=3)\n"
    "    print('CONNECTED')\n"
    "except OSError as exc:\n"
    "    print('REFUSED', exc.errno)\n"
)


@pytest.fixture
def grant(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("alpha\n")
    inbox = writable_by_sandbox(tmp_path / "inbox")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("hunter2\n")
    return notes, inbox, outside


def ok(outcome) -> ToolOutput:
    assert isinstance(outcome, ToolOutput), outcome
    return outcome


def test_a_granted_file_is_read_with_the_grants_class(backend, grant):
    notes, _, _ = grant
    args = json.dumps({"path": f"{notes}/a.md"})
    out = ok(run(backend, spec("fs.read", args, mounts=(ro(notes),),
                               data_class=DataClass.PRIVATE)))
    assert (out.content, out.data_class, out.untrusted) == ("alpha\n", DataClass.PRIVATE, False)


def test_no_tcp_connection_without_a_host_grant(backend, web_server, work):
    # The host's web server listens on the host's loopback; the sandbox has its own.
    code = CONNECT.format(host="127.0.0.1", port=web_server) + CONNECT.format(
        host="10.0.2.2", port=80)
    out = ok(run(backend, command(work, python(code))))
    assert "CONNECTED" not in out.content
    assert out.content.count("REFUSED") == 2
    fetch = run(backend, spec("http.fetch", json.dumps({"url": f"http://127.0.0.1:{web_server}/"})))
    assert isinstance(fetch, ToolFailure) and "cannot fetch" in fetch.detail


@pytest.mark.parametrize("how", ["direct", "dotdot", "symlink"])
def test_a_path_outside_the_grant_cannot_be_read_even_by_a_command(backend, grant, how):
    notes, _, outside = grant
    os.symlink(outside / "secret.txt", notes / "planted")
    path = {
        "direct": f"{outside}/secret.txt",
        "dotdot": f"{notes}/../outside/secret.txt",
        "symlink": f"{notes}/planted",
    }[how]
    # shell.run's cat is not confined by the toolkit's own checks: only the sandbox stops it.
    out = ok(run(backend, spec("shell.run", shell(["cat", path], str(notes)),
                               mounts=(ro(notes),))))
    assert "hunter2" not in out.content
    assert "No such file" in out.content
    refused = run(backend, spec("fs.read", json.dumps({"path": path}), mounts=(ro(notes),)))
    assert isinstance(refused, ToolFailure)
    assert "hunter2" not in refused.detail


def test_writes_land_only_in_writable_grants(backend, grant):
    notes, inbox, _ = grant
    mounts = (ro(notes), rw(inbox))

    def write(path: str):
        return run(backend, spec("fs.write", json.dumps({"path": path, "content": "x"}),
                                 mounts=mounts))

    ok(write(f"{inbox}/new.md"))
    assert (inbox / "new.md").read_text() == "x"
    refused = write(f"{notes}/new.md")
    assert isinstance(refused, ToolFailure) and "Read-only file system" in refused.detail
    assert not (notes / "new.md").exists()
    touch = "\n".join(f"touch {p} 2>&1 || true" for p in ("/usr/x", "/x", "/opt/toolkit/x"))
    out = ok(run(backend, spec("shell.run", shell(["sh", "-c", touch], str(inbox)),
                               mounts=mounts)))
    assert out.content.count("Read-only file system") == 3, out.content


def test_a_secret_is_a_file_only_when_granted(backend, work):
    token = Secret("docs-token", "s3cr3t-value")
    look = ["sh", "-c", "cat /run/secrets/docs-token; echo; env"]
    granted = ok(run(backend, command(work, look, secrets=(token,))))
    assert granted.content.splitlines()[1] == "s3cr3t-value"
    assert granted.content.count("s3cr3t-value") == 1  # not in the environment
    without = ok(run(backend, command(work, look)))
    assert "s3cr3t-value" not in without.content
    assert "No such file" in without.content


def test_the_environment_is_cleared(backend, monkeypatch, work):
    monkeypatch.setenv("BX_TEST_LEAK", "leaked")
    out = ok(run(backend, command(work, ["env"])))
    assert "leaked" not in out.content
    assert "BOXMAKER" not in out.content


def test_no_capabilities_and_no_new_privileges(backend, work):
    out = ok(run(backend, command(work, ["cat", "/proc/self/status"])))
    fields = dict(line.split(":\t", 1) for line in out.content.splitlines()[1:] if ":\t" in line)
    assert fields["CapEff"].strip() == "0000000000000000"
    assert fields["CapBnd"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
