"""``write_durably`` replaces a file whole or not at all, on a disk that fills while it writes.

The property: after the call, the file holds the new bytes (and the call returned) or its old
bytes (and the call raised OSError), and no temp file is left. A filling disk first answers a
write with a short count, and with ENOSPC only on the next: one ``os.write`` would rename a torn
file into place as if it were whole (the attack on issue 31's memory writes tore identity files
and journal entries so). Judged by a real tmpfs, and by writes cut at every size.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from bxcore.util import write_durably
from hypothesis import given
from hypothesis import strategies as st
from support.disks import FailingDisk, tmpfs

OLD = b"the old text\n"


def outcome(directory: Path, target: Path, data: bytes) -> str:
    try:
        write_durably(target, data)
    except OSError as exc:
        assert target.read_bytes() == OLD, "a failed write changed the file"
        outcome = errno.errorcode[exc.errno or 0]
    else:
        assert target.read_bytes() == data, "a write that returned left the file torn"
        outcome = "whole"
    assert sorted(p.name for p in directory.iterdir()) == [target.name], "a temp file is left"
    return outcome


@pytest.mark.parametrize("size", [40_000, 100_003, 1_000_000])  # each past the 32 KiB disk
def test_on_a_real_disk_that_fills_the_file_is_whole_or_as_it_was(tmp_path, size):
    with tmpfs(tmp_path / "disk", "size=32k") as disk:
        target = disk / "memory.md"
        target.write_bytes(OLD)
        assert outcome(disk, target, "鷺".encode() * (size // 3)) == "ENOSPC"
        assert outcome(disk, target, b"fits") == "whole"  # the disk takes the next one


@given(data=st.binary(min_size=1, max_size=5000), chunk=st.integers(1, 4096),
       room=st.none() | st.integers(0, 5000))
def test_writes_cut_short_anywhere_leave_the_file_whole_or_as_it_was(tmp_path_factory, data,
                                                                    chunk, room):
    """``os.write`` takes at most ``chunk`` bytes a call, and past ``room`` bytes fails with
    ENOSPC (a short count first, as a filling disk answers)."""
    directory = tmp_path_factory.mktemp("w")
    target = directory / "journal.json"
    target.write_bytes(OLD)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "write", FailingDisk(budget=room, chunk=chunk).write)
        expected = "whole" if room is None or len(data) <= room else "ENOSPC"
        assert outcome(directory, target, data) == expected
