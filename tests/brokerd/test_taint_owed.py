"""A taint that cannot be written is owed, never lost and never a plain OSError (brokerd.taint).

The disk is made to fail at ``write_durably`` (ENOSPC, EIO, or the sessions directory that
cannot be made: the mkdir a full disk of inodes fails). Property, for any sequence of results
across sessions with the disk failing or not at each:

- every failed write raises TaintError (no OSError gets out), and leaves no temporary file;
- ``get`` is never below the join of every result recorded for the session (the decisions see
  all it has seen), failed writes included;
- ``settle`` writes an owed taint once the disk takes it: the file then equals ``get``, and the
  session is no longer owed; a session whose writes all succeeded is never owed;
- a fresh store on the same directory (a restart) reads each settled file as it was.
"""

from __future__ import annotations

import errno
import os
import pathlib

from brokerd import taint as taint_module
from brokerd.errors import TaintError
from brokerd.taint import CLEAN, TaintStore
from bxcore.tools import DataClass
from faults.profile import by_profile
from hypothesis import given, settings
from hypothesis import strategies as st

REAL = taint_module.write_durably
REAL_MKDIR = pathlib.Path.mkdir


def no_mkdir(self, *args, **kwargs):
    if self.exists():
        return REAL_MKDIR(self, *args, **kwargs)  # exist_ok: nothing is made
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def failing(code: int):
    def write(path, data, mode=0o600):  # half a temporary file, as a full disk leaves it
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data[: len(data) // 2])
        raise OSError(code, os.strerror(code))
    return write


steps = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(list(DataClass)),
                           st.booleans(), st.sampled_from([None, errno.ENOSPC, errno.EIO])),
                 max_size=12)


@settings(max_examples=by_profile(40, 2_000))
@given(steps=steps, no_dir=st.booleans())
def test_a_write_that_fails_is_owed_and_settled_once_the_disk_takes_it(
        tmp_path_factory, steps, no_dir):
    home = tmp_path_factory.mktemp("home")
    store = TaintStore(home / "broker" / "sessions")
    seen = {}
    try:
        for session, data_class, untrusted, fault in steps:
            seen[session] = seen.get(session, CLEAN).seen(data_class, untrusted)
            if fault is not None and no_dir:  # the directories cannot be made either
                pathlib.Path.mkdir = no_mkdir  # type: ignore[method-assign]
            taint_module.write_durably = REAL if fault is None else failing(fault)
            try:
                store.record(session, data_class, untrusted)
                assert not store.owed(session)
            except TaintError as exc:
                assert fault is not None and "cannot be written" in str(exc)
                assert store.owed(session)
            finally:
                taint_module.write_durably = REAL
                pathlib.Path.mkdir = REAL_MKDIR  # type: ignore[method-assign]
            got = store.get(session)
            assert got.classes >= seen[session].classes
            assert got.untrusted >= seen[session].untrusted
            if store.directory.exists():
                assert not [p for p in store.directory.iterdir() if p.name.endswith(".tmp")]
    finally:
        taint_module.write_durably = REAL
        pathlib.Path.mkdir = REAL_MKDIR  # type: ignore[method-assign]
    for session in seen:
        store.settle(session)
        assert not store.owed(session)
        assert TaintStore(store.directory).get(session) == store.get(session)
        assert store.get(session).classes >= seen[session].classes

