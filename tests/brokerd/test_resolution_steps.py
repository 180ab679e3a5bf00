"""``grantstore.resolution_steps`` walks as the kernel resolves: for any tree of directories
and symlinks (absolute, relative, through ``..``, chained, dangling, in a loop), where the
kernel resolves the path is one of its steps, and each step sits in a real directory (so a
step is where the entry really is, the place a tool would swap). The kernel, through
``os.path.realpath``, is the judge."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from brokerd.grantstore import resolution_steps
from hypothesis import given
from hypothesis import strategies as st

NAMES = st.sampled_from(["a", "b", "c"])
LINK = st.tuples(st.lists(NAMES, min_size=1, max_size=3),  # where the link sits
                 st.lists(st.sampled_from(["a", "b", "c", ".."]), max_size=4),  # its target
                 st.booleans())  # absolute


@given(dirs=st.lists(st.lists(NAMES, min_size=1, max_size=3), max_size=5),
       links=st.lists(LINK, max_size=5), path=st.lists(NAMES, min_size=1, max_size=4))
def test_the_walk_reaches_where_the_kernel_resolves_through_real_directories(
        dirs, links, path):
    with tempfile.TemporaryDirectory() as scratch:
        top = Path(os.path.realpath(scratch))
        for parts in dirs:
            os.makedirs(top.joinpath(*parts), exist_ok=True)
        for where, target, absolute in links:
            link = top.joinpath(*where)
            if link.parent.is_dir() and not os.path.lexists(link):
                text = str(top.joinpath(*target)) if absolute else os.path.join(*target or ["."])
                link.symlink_to(text)
        asked = str(top.joinpath(*path))
        steps = resolution_steps(asked)
        try:
            resolved = Path(os.path.realpath(asked, strict=True))
        except OSError:  # dangling or a loop: the kernel resolves nothing there
            resolved = None
        if resolved is None:
            return
        assert resolved in {*steps, Path("/")}, (asked, resolved, steps)
        for step in steps:
            assert os.path.realpath(step.parent) == str(step.parent), (asked, step)
