"""The suite's two profiles, chosen by ``BOXMAKER_PROFILE``: ``long`` is the deep run (hundreds
of crash trials, 100k generated inputs per parser, 500 load sessions); anything else is the short
profile that CI runs through scripts/test.

Fuzz tests anywhere in the tree take their example count from here::

    from faults.profile import fuzz

    @fuzz
    @given(st.binary())
    def test_any_bytes_give_frames_or_a_frame_error(data): ...

``fuzz`` marks the test ``fuzz`` (``pytest -m fuzz`` selects every fuzzer). In the short profile
it changes nothing else (the HYPOTHESIS_PROFILE in force decides: 300 examples in CI); in the
long one it asks for 100,000, lifts hypothesis' health checks (which would otherwise stop a long
run for being slow), keeps no example database (nothing to replay but failures, which hypothesis
prints) and widens the per-test hang guard. With a ledger (faults/ledger.py) it counts the inputs
the test really ran and writes them, with the outcome and the time.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings

from . import ledger

LONG = os.environ.get("BOXMAKER_PROFILE", "short") == "long"
# FUZZ_EXAMPLES overrides the long count (to measure a rate, or to go deeper still).
FUZZ_EXAMPLES_LONG = int(os.environ.get("FUZZ_EXAMPLES", "100000"))
FUZZ_HANG_GUARD_LONG = 6 * 3600  # seconds; the suite's 20-minute guard is for single tests
# FUZZ_SECONDS caps each fuzzer's wall time in the long profile: a run on a busy machine gives
# every fuzzer its share instead of leaving the last ones of a lane unrun. It stops at the count
# or the cap, whichever comes first, and the ledger says which.
FUZZ_SECONDS = float(os.environ.get("FUZZ_SECONDS", "0")) if LONG else 0.0

Test = TypeVar("Test", bound=Callable[..., object])


def by_profile(short: int, long: int) -> int:
    return long if LONG else short


def long_only(reason: str) -> pytest.MarkDecorator:
    """A test the short profile leaves out, saying why (its cost against what it adds there)."""
    return pytest.mark.skipif(not LONG, reason=f"long profile (scripts/reliability): {reason}")


SUITE_HANG_GUARD = 1200  # seconds: pyproject's pytest timeout, a guard for single tests


def hang_guard(trials: int, per_trial: float) -> pytest.MarkDecorator:
    """The hang guard of a test that runs ``trials`` trials, each bounded by its own checks to
    ``per_trial`` seconds: the suite's 20 minutes cut the long profile's 210 crash trials off
    at the 24th on a busy machine (the first long run), killing the process mid-trial."""
    return pytest.mark.timeout(max(SUITE_HANG_GUARD, trials * per_trial))


def fuzz(test: Test) -> Test:
    return _fuzz(test, FUZZ_EXAMPLES_LONG)


def fuzz_at_most(long_examples: int) -> Callable[[Test], Test]:
    """``fuzz`` for a test whose every input is costly (turns on a real server): at most
    ``long_examples`` inputs in the long profile (FUZZ_EXAMPLES still lowers it)."""
    return lambda test: _fuzz(test, min(long_examples, FUZZ_EXAMPLES_LONG))


def _fuzz(test: Test, long_examples: int) -> Test:
    if LONG:
        deep = settings(max_examples=long_examples, deadline=None, database=None,
                        suppress_health_check=list(HealthCheck))
        test = pytest.mark.timeout(FUZZ_HANG_GUARD_LONG)(deep(test))
    if ledger.LEDGER or FUZZ_SECONDS:
        test = counted(test, FUZZ_SECONDS)
    return pytest.mark.fuzz(test)


class BudgetSpent(BaseException):
    """Not an Exception: hypothesis lets it through at once, as no failure to shrink."""


def counted(test: Test, budget: float = 0.0) -> Test:
    """``test`` writing to the ledger how many inputs it ran, its outcome and its time; with a
    ``budget`` (seconds), stopping cleanly once it is spent (outcome ``stopped at its time
    budget``: the inputs run all passed)."""
    name = f"{test.__module__.split('.')[-1]}::{test.__name__}"
    inner = test.hypothesis.inner_test  # type: ignore[attr-defined]
    inputs = 0
    started = 0.0

    @functools.wraps(inner)
    def one_input(*args: Any, **kwargs: Any) -> Any:
        nonlocal inputs
        if budget and time.monotonic() - started > budget:
            raise BudgetSpent
        inputs += 1
        if inputs % ledger.PROGRESS_EVERY == 0:
            ledger.record("fuzz", name, inputs=inputs, outcome="running",
                          seconds=round(time.monotonic() - started, 1))
        return inner(*args, **kwargs)

    test.hypothesis.inner_test = one_input  # type: ignore[attr-defined]

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal inputs, started
        inputs, started = 0, time.monotonic()
        cpu = time.process_time()
        outcome, error = "failed", ""
        try:
            result = test(*args, **kwargs)
            outcome = "passed"
            return result
        except BudgetSpent:
            outcome = "stopped at its time budget"
            return None
        except BaseException as exc:
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            raise
        finally:
            ledger.record("fuzz", name, inputs=inputs, outcome=outcome, error=error,
                          seconds=round(time.monotonic() - started, 1),
                          cpu_seconds=round(time.process_time() - cpu, 3))

    return run  # type: ignore[return-value]
