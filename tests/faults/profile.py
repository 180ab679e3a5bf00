"""The suite's two profiles, chosen by ``BOXMAKER_PROFILE``: ``long`` is the deep run (hundreds
of crash trials, 100k generated inputs per parser, 500 load sessions); anything else is the short
profile that CI runs through scripts/test.

Fuzz tests anywhere in the tree take their example count from here::

    from faults.profile import fuzz

    @fuzz
    @given(st.binary())
    def test_any_bytes_give_frames_or_a_frame_error(data): ...

In the short profile ``fuzz`` changes nothing (the HYPOTHESIS_PROFILE in force decides: 300
examples in CI); in the long one it asks for 100,000, lifts hypothesis' health checks (which
would otherwise stop a long run for being slow) and widens the per-test hang guard.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, settings

LONG = os.environ.get("BOXMAKER_PROFILE", "short") == "long"
# FUZZ_EXAMPLES overrides the long count (to measure a rate, or to go deeper still).
FUZZ_EXAMPLES_LONG = int(os.environ.get("FUZZ_EXAMPLES", "100000"))
FUZZ_HANG_GUARD_LONG = 6 * 3600  # seconds; the suite's 20-minute guard is for single tests

Test = TypeVar("Test", bound=Callable[..., object])


def by_profile(short: int, long: int) -> int:
    return long if LONG else short


def fuzz(test: Test) -> Test:
    if not LONG:
        return test
    deep = settings(max_examples=FUZZ_EXAMPLES_LONG, deadline=None,
                    suppress_health_check=list(HealthCheck))
    return pytest.mark.timeout(FUZZ_HANG_GUARD_LONG)(deep(test))
