"""The long run's report says what the run did, and only that: the inputs each fuzzer really ran,
a fuzzer or trial series stopped midway as stopped, failures as failures, and sessions refused
as corrupt as their own outcome, never among the passes. The document keeps everything outside
the run's markers."""

from __future__ import annotations

import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from support.docsection import write_section

from . import ledger
from .profile import counted
from .runreport import report

TESTS = "tests/faults/test_fuzz_owner_files.py::"


def write_ledger(path, *lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_report_gives_each_fuzzer_and_trial_outcome_as_the_ledger_has_it(tmp_path):
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n\nWritten by hand.\n\n<!-- reliability:long-run -->\nold\n"
                   "<!-- /reliability:long-run -->\n\n## Not covered yet\n")
    crash = {"planned": 210, "seed": 7, "per_victim": {"loopd": 3, "brokerd": 0, "memoryd": 1},
             "offered": {"loopd": 20, "brokerd": 18, "memoryd": 50}, "acknowledged": 1}
    write_ledger(
        tmp_path / "ledger.jsonl",
        {"kind": "fuzz", "name": "test_fuzz_owner_files::test_a", "inputs": 100000,
         "outcome": "passed", "error": "", "seconds": 600.0, "cpu_seconds": 300.0},
        {"kind": "fuzz", "name": "test_fuzz_owner_files::test_b", "inputs": 41,
         "outcome": "failed", "error": "AssertionError: boom", "seconds": 2.0, "cpu_seconds": 1.0},
        {"kind": "fuzz", "name": "test_fuzz_owner_files::test_c", "inputs": 20000,
         "outcome": "running", "seconds": 90.0},
        {"kind": "crash", "name": "running", "trials": 4, "outcomes":
         {"recovered": 2, "refused as corrupt": 1, "point not reached": 1}, "seconds": 60, **crash},
        {"kind": "test", "name": TESTS + "test_a", "outcome": "passed", "seconds": 600.0},
        {"kind": "test", "name": TESTS + "test_b", "outcome": "failed", "seconds": 2.0},
    )
    section = report(str(tmp_path / "ledger.jsonl"), 0.0, 3600.0, ["FUZZ_EXAMPLES=100000"], doc)

    assert ("3 fuzz tests ran: 1 passed all their inputs, 0 stopped at their time budget (every "
            "input run passed), 1 were stopped unfinished; 120,041 inputs in all; failures "
            "found: 1 (test_fuzz_owner_files::test_b).") in section
    assert f"| `{TESTS}test_a` | 100,000 | passed | 600 s | 3.00 ms |" in section
    assert "**failed**: AssertionError: boom" in section
    assert "| 20,000 | stopped unfinished (its process ended first; see the lane's log) |" \
        in section
    assert "4 of 210 planned crash trials ran (stopped unfinished: its process ended" in section
    assert ("Outcomes: recovered 2, point not reached 1, refused as corrupt 1, failed 0"
            in section)
    assert ("100,000 inputs of each of the 2 fuzzers measured cost 0.76 hours of one core; at its "
            "15 s of wall time per crash trial, 210 trials take 0.88 hours.") in section
    assert "wall time 60.0 min" in section and "`FUZZ_EXAMPLES=100000`" in section
    text = doc.read_text()
    assert "old" not in text and "Written by hand." in text and text.endswith("yet\n")


def test_a_counted_fuzzer_records_the_inputs_it_really_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger, "LEDGER", str(tmp_path / "ledger.jsonl"))
    seen = []

    @settings(max_examples=37, database=None)
    @given(st.integers())
    def test_numbers(n):
        seen.append(n)

    counted(test_numbers)()
    [line] = ledger.read(ledger.LEDGER)
    assert line["inputs"] == len(seen) > 0 and line["outcome"] == "passed"
    assert line["name"] == "test_runreport::test_numbers"


def test_a_fuzzer_past_its_budget_stops_cleanly_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger, "LEDGER", str(tmp_path / "ledger.jsonl"))

    @settings(max_examples=10**6, database=None)
    @given(st.binary())
    def test_bytes(data):
        time.sleep(0.01)

    counted(test_bytes, budget=0.2)()  # returns: the inputs run all passed
    [line] = ledger.read(ledger.LEDGER)
    assert line["outcome"] == "stopped at its time budget" and 0 < line["inputs"] < 10**6


def test_a_section_not_there_yet_is_appended_and_the_rest_kept(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\nkept\n")
    write_section(doc, "x:y", "first", "# Doc")
    write_section(doc, "x:y", "second", "# Doc")
    assert doc.read_text() == "# Doc\n\nkept\n\n<!-- x:y -->\nsecond\n<!-- /x:y -->\n"
