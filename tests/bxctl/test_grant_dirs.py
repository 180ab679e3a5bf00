"""`bxctl up` readies the directories the local stack's grants mount writable: as root the tool is
``[broker] sandbox_uid``, so the example inbox grant can write ``~/inbox`` only once it is that
uid's (bxctl.stack.grantdirs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bxcore.config.broker import DEFAULT_SANDBOX_UID
from bxctl.stack.grantdirs import prepare_writable_mounts, writable_mounts

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "grants-examples"


def test_the_examples_mount_only_the_inbox_writable(tmp_path):
    assert writable_mounts(EXAMPLES, tmp_path) == [tmp_path / "inbox"]


def test_a_missing_inbox_is_made_for_the_uid_the_tool_runs_as(tmp_path):
    said = prepare_writable_mounts(EXAMPLES, DEFAULT_SANDBOX_UID, home=tmp_path)
    inbox = tmp_path / "inbox"
    assert inbox.is_dir() and said == [f"grants: made {inbox} for writes by "
                                       + (f"sandbox_uid {DEFAULT_SANDBOX_UID}"
                                          if os.geteuid() == 0 else "you")]
    expected = DEFAULT_SANDBOX_UID if os.geteuid() == 0 else os.geteuid()
    assert (inbox.stat().st_uid, inbox.stat().st_mode & 0o777) == (expected, 0o700)
    assert prepare_writable_mounts(EXAMPLES, DEFAULT_SANDBOX_UID, home=tmp_path) == []  # once


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's tools run as another uid")
def test_an_inbox_the_owner_already_has_is_left_alone_and_named(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "mine.md").write_text("the owner's\n")
    said = prepare_writable_mounts(EXAMPLES, DEFAULT_SANDBOX_UID, home=tmp_path)
    assert inbox.stat().st_uid == 0 and (inbox / "mine.md").read_text() == "the owner's\n"
    assert said == [f"grants: {inbox} is not sandbox_uid {DEFAULT_SANDBOX_UID}'s: a tool can "
                    f"write there only if that uid may (chown {DEFAULT_SANDBOX_UID} it)"]


def test_read_only_mounts_broken_files_and_a_missing_parent_make_nothing(tmp_path):
    grants = tmp_path / "grants"
    grants.mkdir()
    (grants / "notes.toml").write_text('[sandbox]\nmounts = [{ path = "~/notes" }]\n')
    (grants / "broken.toml").write_text("[sandbox\n")
    (grants / "deep.toml").write_text('[sandbox]\nmounts = [{ path = "~/a/b", write = true }]\n')
    said = prepare_writable_mounts(grants, DEFAULT_SANDBOX_UID, home=tmp_path)
    assert said == [f"grants: {tmp_path / 'a' / 'b'} not made: {tmp_path / 'a'} does not exist"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grants"]
