"""Class 9 (issue 31): a full disk does not break the record or brokerd's restart.

A real size-limited filesystem: a small tmpfs, mounted by the test (as root), holds brokerd's
state directory (a bind mount of one directory of it, so the grant's writable directory on the
same tmpfs is not under the protected state directory). Against the real brokerd with
bubblewrap, over broker.sock:

- the fill through a tool: a granted ``shell.run`` with a writable mount on that tmpfs writes
  until the disk is full. Every later call is refused with a clear error and does not run; the
  log verifies (the real ``brokerd audit verify``); once space is freed the next call runs and
  is recorded by the same brokerd, with no restart; and brokerd restarts on the log (on a
  full disk too: a taint it cannot write is owed, docs/decisions/state-disk-room.md);
- the fill from the test, to less than ``[broker] audit_reserve_bytes`` free: a call that can
  write to that filesystem is refused before it runs ("failed", audited), a call that cannot
  (a read elsewhere) runs, and freeing space lets the writing call run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from brokerd.audit.log import entries, log_files
from brokerd.audit.space import HELD_BYTES
from faults.stack import BIN
from support.disks import home_on_tmpfs

from .laundering_support import chain_ok, scripted_rig, writable_by_tools
from .test_audit_every_request import exchange, tool_call

pytestmark = pytest.mark.sandbox

DISK = 24 * 1024 * 1024
RESERVE = 6 * 1024 * 1024  # above HELD_BYTES: a freed room does not let calls through
FILL = ["dd", "if=/dev/zero", "of=fill", "bs=65536"]  # until the disk is full


def small_disk(root: Path) -> contextlib.AbstractContextManager[Path]:
    """A tmpfs of DISK bytes at ``root/disk``, its ``home`` bind-mounted at ``root/home`` (the
    stack's state directory), its ``shared`` left for a grant."""
    return home_on_tmpfs(root / "disk", root / "home", f"size={DISK}")


def shell_grant(shared: Path) -> str:
    return (f'tools = ["shell.run"]\nmode = "auto"\nclasses = ["public", "private", "secret"]\n'
            f'allow_untrusted = true\nresult_class = "private"\n'
            f'[arguments.cwd]\npaths = [{json.dumps(str(shared))}]\n'
            f'[sandbox]\nmounts = [{{ path = {json.dumps(str(shared))}, write = true }}]\n')


def call(sock: Path, session: str, number: int, tool: str, arguments: dict):
    return exchange(sock, tool_call({"session": session, "call": number, "tool": tool,
                                     "arguments": json.dumps(arguments)}))


def verified_by_the_cli(config: Path) -> dict:
    """``brokerd audit verify --json``, the owner's own check."""
    done = subprocess.run([str(BIN / "brokerd"), "audit", "verify", "--config", str(config),
                           "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill_to(path: Path, left: int) -> None:
    """Write ``path`` until about ``left`` bytes are free on its filesystem."""
    with path.open("ab") as handle:
        while (room := free(path.parent) - left) > 0:
            handle.write(b"\0" * min(room, 1024 * 1024))
            handle.flush()


def test_a_tool_that_fills_the_disk_stops_calls_with_a_clear_error_and_the_log_recovers(
        short_dir):
    with small_disk(short_dir) as disk:
        shared = writable_by_tools(disk / "shared")
        config = f"audit_reserve_bytes = {RESERVE}\n"
        with scripted_rig(short_dir, roles=("memoryd", "brokerd"), extra_config=config,
                          grants={"shell.toml": shell_grant(shared)}) as rig:
            stack, home = rig.stack, rig.stack.home
            sock = stack.socket("brokerd")
            room = home / "audit" / "reserve"
            assert room.stat().st_size == HELD_BYTES
            # The tool fills the disk through its writable mount (the check before it passed).
            # The log's held room is freed: the call's result and taint are written, and its
            # answer given.
            filled = call(sock, "filler", 1, "shell.run", {"argv": FILL, "cwd": str(shared)})
            assert filled.kind == "tool_response", (filled, stack.log("brokerd")[-3000:])
            assert "No space left on device" in filled.body["content"]
            assert not room.exists() and RESERVE > free(disk) > 0
            assert recorded(home)[-2:] == [("decision", "filler"), ("result", "filler")]

            # A call that can write there is refused before it runs, and recorded.
            checked = call(sock, "next", 1, "shell.run", {"argv": ["touch", "ran"],
                                                          "cwd": str(shared)})
            assert checked.body["status"] == "failed", checked
            assert "audit_reserve_bytes" in checked.body["content"]
            assert recorded(home)[-1] == ("result", "next")

            # The disk full to the last byte (the test fills what the room left): every call is
            # refused with a clear error and none runs, the append that fails is cut back.
            fill_to(disk / "ballast", 0)
            messages = []
            for number in range(2, 41):
                refused = call(sock, "next", number, "shell.run",
                               {"argv": ["touch", "ran"], "cwd": str(shared)})
                content = refused.body.get("content", "")
                assert (refused.kind == "error" and refused.body["code"] == "unavailable") or \
                    "audit_reserve_bytes" in content or (
                        refused.body.get("status") == "failed" and "cannot be written" in content
                    ), refused
                messages.append(refused.body.get("message", "") or
                                (content if "cannot be written" in content else ""))
                if "audit log cannot be written" in messages[-1]:
                    break
            assert "audit log cannot be written" in messages[-1], messages
            assert all("No space left on device" in m and str(home) not in m
                       for m in messages if m)
            assert not (shared / "ran").exists()
            assert verified_by_the_cli(stack.config)["ok"] and chain_ok(home)
            assert all(p.read_bytes().endswith(b"\n") for p in log_files(home / "audit"))

            # Space comes back: the same brokerd records and runs the next call, and holds its
            # room again.
            (shared / "fill").unlink()
            (disk / "ballast").unlink()
            ran = call(sock, "next", 100, "shell.run", {"argv": ["touch", "ran"],
                                                        "cwd": str(shared)})
            assert ran.kind == "tool_response" and ran.body["status"] == "ok", ran
            assert (shared / "ran").exists()
            assert recorded(home)[-2:] == [("decision", "next"), ("result", "next")]
            assert room.stat().st_size == HELD_BYTES
            before = verified_by_the_cli(stack.config)
            assert before["ok"]

            # brokerd restarts on the log and serves.
            stack.restart("brokerd", inference={})
            again = call(sock, "after", 1, "shell.run", {"argv": ["true"], "cwd": str(shared)})
            assert again.kind == "tool_response" and again.body["status"] == "ok", again
            after = verified_by_the_cli(stack.config)
            assert after["ok"] and after["records"] > before["records"]


def recorded(home: Path) -> list[tuple[str, str]]:
    """(kind, session) of each decision and result in the audit log, in order."""
    return [(e.kind, e.session if e.kind == "result" else e.decision.session)
            for e in entries(home / "audit") if e.kind in ("decision", "result")]


def test_a_call_that_can_write_to_the_logs_filesystem_is_refused_below_the_reserve(short_dir):
    with small_disk(short_dir) as disk:
        shared = writable_by_tools(disk / "shared")
        config = f"audit_reserve_bytes = {RESERVE}\n"
        with scripted_rig(short_dir, roles=("memoryd", "brokerd"), extra_config=config,
                          grants={"shell.toml": shell_grant(shared)}) as rig:
            stack, home = rig.stack, rig.stack.home
            sock = stack.socket("brokerd")
            ballast = disk / "ballast"
            fill_to(ballast, RESERVE // 2)

            refused = call(sock, "s1", 1, "shell.run", {"argv": ["touch", "ran"],
                                                        "cwd": str(shared)})
            assert refused.body["status"] == "failed", refused
            assert "audit_reserve_bytes" in refused.body["content"]
            assert str(shared) not in refused.body["content"]
            assert not (shared / "ran").exists()
            # A call that cannot write there still runs.
            read = call(sock, "s1", 2, "fs.read", {"path": str(rig.granted / "a.txt")})
            assert read.body["content"] == "alpha\n", read
            results = [e for e in entries(home / "audit") if e.kind == "result"]
            assert [(r.call, r.status) for r in results] == [(1, "failed"), (2, "ok")]

            ballast.unlink()
            ran = call(sock, "s1", 3, "shell.run", {"argv": ["touch", "ran"],
                                                    "cwd": str(shared)})
            assert ran.body["status"] == "ok" and (shared / "ran").exists(), ran
            assert verified_by_the_cli(stack.config)["ok"]
