"""The long profile's trial series get a hang guard that covers every trial they plan: the first
long run died at crash trial 24 of 210 on the suite's 20-minute guard for single tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
READ_GUARDS = """
import json
from faults import test_crash_consistency as crash, test_gateway_crash as gateway
def guard(module):
    [mark] = [m for m in module.pytestmark if m.name == "timeout"]
    return mark.args[0]
print(json.dumps({"crash": [crash.TRIALS, crash.TRIAL_LIMIT, guard(crash)],
                  "gateway": [gateway.TRIALS, gateway.TRIAL_LIMIT, guard(gateway)]}))
"""


def guards_in_the_long_profile() -> dict[str, list[int]]:
    env = {**os.environ, "BOXMAKER_PROFILE": "long"}
    env.pop("CRASH_TRIALS", None)
    out = subprocess.run([sys.executable, "-c", READ_GUARDS], cwd=TESTS, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_each_long_trial_series_has_a_hang_guard_for_all_its_trials():
    guards = guards_in_the_long_profile()
    assert guards["crash"][0] == 210 and guards["gateway"][0] == 40
    for name, (trials, per_trial, guard) in guards.items():
        assert guard >= trials * per_trial, (name, trials, per_trial, guard)
