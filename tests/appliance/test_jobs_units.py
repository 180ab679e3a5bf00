"""Scheduled jobs as the NixOS module writes them (nixos-modules/jobs-units.nix, builtins only):
the job file brokerd's own parser reads back exactly, and a timer and a one-shot service that
``systemd-analyze verify`` passes without a word, whose OnCalendar= is the job's schedule as
``systemd-analyze calendar`` understands it. A schedule systemd cannot parse is caught."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from brokerd.jobs import parse_job

from .nix import REPO, needs_nix, nix_eval, nix_string
from .units import environment, exec_words, render_unit

JOBS_UNITS = REPO / "nixos-modules" / "jobs-units.nix"
BIN = Path(sys.executable).parent
ASK = 'Summarise what changed in "notes.md" since yesterday.\nThen: Grüße ☃ \\ done.'
JOBS = {"morning-notes": {"ask": ASK, "schedule": "Mon..Fri *-*-* 07:30:00",
                          "description": "weekday notes"},
        "hourly": {"ask": "Anything new?", "schedule": "hourly", "description": ""}}

pytestmark = [
    needs_nix,
    pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze"),
]


def nix_value(value: Any) -> str:
    """A Nix literal; strings keep their non-ASCII characters (Nix has no \\u escape)."""
    if isinstance(value, dict):
        return "{ " + " ".join(f"{nix_value(k)} = {nix_value(v)};" for k, v in value.items()) \
            + " }"
    return json.dumps(value, ensure_ascii=False).replace("${", "\\${")


def units_expression(jobs: dict) -> str:
    return (f"(import {JOBS_UNITS} {{ }}).units {{ jobs = {nix_value(jobs)}; "
            f"bxctl = {nix_string(BIN / 'bxctl')}; path = [ {nix_string(BIN.parent)} ]; }}")


def render_timer(timer: dict) -> str:
    lines = ["[Unit]", f"Description={timer['description']}", "", "[Timer]"]
    lines += [f"{key}={value}" for key, value in timer["timerConfig"].items()]
    lines += ["", "[Install]", *(f"WantedBy={w}" for w in timer["wantedBy"])]
    return "\n".join(lines) + "\n"


def write_units(directory: Path, jobs: dict) -> list[Path]:
    written = []
    for name, unit in nix_eval(units_expression(jobs)).items():
        timer, service = directory / f"{name}.timer", directory / f"{name}.service"
        timer.write_text(render_timer(unit["timer"]))
        service.write_text(render_unit(unit["service"]))
        written += [timer, service]
    return written


def verify(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", "verify", "--man=no", *map(str, paths)],
                          capture_output=True, text=True, check=False, cwd=paths[0].parent)


def test_the_job_file_is_read_back_by_brokerds_parser_exactly():
    for name, job in JOBS.items():
        text = nix_eval(f"(import {JOBS_UNITS} {{ }}).jobFile {nix_value(job)}")
        parsed = parse_job(text, f"/etc/boxmaker/jobs/{name}.toml")
        assert (parsed.name, parsed.ask, parsed.schedule, parsed.description) == \
            (name, job["ask"], job["schedule"], job["description"])


def test_each_job_is_a_timer_and_a_one_shot_run_that_systemd_verifies_without_a_word(tmp_path):
    paths = write_units(tmp_path, JOBS)
    assert sorted(p.name for p in paths) == [
        "boxmaker-job-hourly.service", "boxmaker-job-hourly.timer",
        "boxmaker-job-morning-notes.service", "boxmaker-job-morning-notes.timer"]
    done = verify(paths)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_timer_runs_bxctl_job_run_at_the_jobs_schedule(tmp_path):
    unit = nix_eval(units_expression(JOBS))["boxmaker-job-morning-notes"]
    timer = unit["timer"]["timerConfig"]
    assert timer["OnCalendar"] == JOBS["morning-notes"]["schedule"]
    assert timer["Unit"] == "boxmaker-job-morning-notes.service"
    service = unit["service"]["serviceConfig"]
    assert service["Type"] == "oneshot"
    assert exec_words(service["ExecStart"]) == [
        str(BIN / "bxctl"), "job", "run", "morning-notes", "--config",
        "/etc/boxmaker/config/boxmaker.toml"]
    assert service["DynamicUser"] is True and service["SupplementaryGroups"] == ["boxmaker"]
    assert service["PrivateNetwork"] == "yes" and service["IPAddressDeny"] == "any"
    calendar = subprocess.run(["systemd-analyze", "calendar", timer["OnCalendar"]],
                              capture_output=True, text=True, check=False)
    assert calendar.returncode == 0
    assert "Normalized form: Mon..Fri *-*-* 07:30:00" in calendar.stdout
    assert "Next elapse:" in calendar.stdout


def test_a_schedule_systemd_cannot_parse_is_caught(tmp_path):
    bad = {"broken": {"ask": "x", "schedule": "every morning at half past seven",
                      "description": ""}}
    done = verify(write_units(tmp_path, bad))
    assert done.returncode != 0
    assert "Failed to parse calendar specification" in done.stderr
    assert "Timer unit lacks value setting. Refusing." in done.stderr
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "broken.toml").write_text(
        nix_eval(f"(import {JOBS_UNITS} {{ }}).jobFile {nix_value(bad['broken'])}"))
    checked = subprocess.run([str(BIN / "brokerd"), "jobs", "check", "--dir", str(jobs),
                              "--config", "/dev/null"], capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 1 and "REFUSED" in checked.stderr and "schedule" in \
        checked.stderr


def test_a_jobs_run_has_one_path_with_brokerd_on_it(tmp_path):
    """NixOS writes a unit's ``path`` as its PATH=; a PATH= of the module's own in
    serviceConfig.Environment would be a second line, and the last one wins."""
    unit = nix_eval(units_expression(JOBS))["boxmaker-job-morning-notes"]["service"]
    assert "Environment" not in unit["serviceConfig"]
    assert environment(unit)["PATH"].split(":")[0] == str(BIN)
    (path,) = write_units(tmp_path, {"one": JOBS["hourly"]})[1:]
    assert [line for line in path.read_text().splitlines() if "PATH=" in line] == [
        f'Environment="PATH={BIN}:{BIN.parent}/sbin"']


def test_a_changed_job_changes_its_runs_trigger_and_nothing_else():
    before = nix_eval(units_expression(JOBS))
    changed = {**JOBS, "hourly": {**JOBS["hourly"], "ask": "Anything else?"}}
    after = nix_eval(units_expression(changed))
    assert before["boxmaker-job-morning-notes"] == after["boxmaker-job-morning-notes"]
    assert before["boxmaker-job-hourly"]["timer"] == after["boxmaker-job-hourly"]["timer"]
    assert before["boxmaker-job-hourly"]["service"]["restartTriggers"] != \
        after["boxmaker-job-hourly"]["service"]["restartTriggers"]
