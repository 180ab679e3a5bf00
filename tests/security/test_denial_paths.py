"""Class 10: denials do not reveal host paths the model did not supply.

brokerd resolves path arguments (symlinks, ``..``, /proc/self/...) before matching them; the
resolved path used to be quoted in the denial, telling the model brokerd's working directory,
its open files, its interpreter and where the owner's symlinks point. Real brokerd
(bubblewrap), loopd and memoryd: every such denial quotes only what the model sent, and is
audited.
"""

from __future__ import annotations

import re

import pytest

from .laundering_support import (
    audited,
    chain_ok,
    directive,
    scripted_rig,
    tool_results,
    tree_hash,
    via_call_tool,
)

pytestmark = pytest.mark.sandbox
PATHS = re.compile(r"/[^\s'\"),;]+")


def test_a_denial_quotes_no_path_the_model_did_not_send(short_dir):
    with scripted_rig(short_dir) as rig:
        stack, home = rig.stack, rig.stack.home
        (rig.granted / "link").symlink_to(rig.outside / "secret.txt")
        before = tree_hash(rig.outside)
        probes = ["/proc/self/cwd/x", "/proc/self/exe", "/proc/self/fd/0", "/proc/self/root",
                  str(rig.granted / "link"), f"{rig.granted}/../outside/secret.txt"]
        stack.turn("probe", directive(*(via_call_tool("fs.read", {"path": p})
                                        for p in probes)), resume=False)
        results = tool_results(home, "probe")
        assert len(results) == len(probes)
        for probe, result in zip(probes, results, strict=True):
            assert result["content"].startswith("Denied"), (probe, result)
            quoted = PATHS.findall(result["content"])
            assert all(q in probe for q in quoted), (probe, quoted)
            assert str(rig.outside) not in result["content"].replace(probe, "")
        assert [v for v, _ in audited(home, "fs.read")] == ["deny"] * len(probes)
        assert chain_ok(home) and tree_hash(rig.outside) == before
