"""Fuzzing the owner's files: the config file and job files. Any text (mostly tables of the
real keys with wrong, odd and right values) is either accepted or refused with the parser's own
error naming the file; any bytes in a file on disk likewise. Never another exception, never a
hang. The example count follows BOXMAKER_PROFILE (100k each in the long profile).

Grant files are fuzzed in tests/brokerd/test_grant_files.py, frames in tests/bxcore, SSE in
tests/inference and tests/consult, Mattermost events in tests/gateway, Honcho replies in
test_fuzz_honcho_replies.py.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from brokerd.errors import JobError
from brokerd.jobs import JobFile, parse_job, read_job
from brokerd.ownerfiles import ToolReach
from bxcore.config import Config, load_config, parse_config
from bxcore.errors import ConfigError
from hypothesis import given
from hypothesis import strategies as st

from .fuzzing import tables_of, toml_text
from .profile import fuzz

SCRATCH = Path(tempfile.mkdtemp(prefix="bxfuzz-"))  # one file rewritten per example
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)


def refused_naming(error: Exception, source: str) -> None:
    assert str(error).startswith(f"{source}:"), error


def config_or_error(text: str) -> None:
    try:
        parse_config(text, "fuzz.toml", SCRATCH)
    except ConfigError as exc:
        refused_naming(exc, "fuzz.toml")


@fuzz
@given(tables_of(Config).map(toml_text))
def test_fuzzed_config_tables_give_a_config_or_a_config_error(text):
    config_or_error(text)


@fuzz
@given(st.text(max_size=300))
def test_fuzzed_config_text_gives_a_config_or_a_config_error(text):
    config_or_error(text)


@fuzz
@given(st.binary(max_size=300))
def test_any_bytes_in_a_config_file_give_a_config_or_a_config_error(data):
    path = SCRATCH / "config.toml"
    path.write_bytes(data)
    try:
        load_config(path)
    except ConfigError as exc:
        refused_naming(exc, str(path))


def job_or_error(text: str) -> None:
    try:
        job = parse_job(text, "jobs/morning.toml")
    except JobError as exc:
        refused_naming(exc, "jobs/morning.toml")
    else:
        assert job.ask and "\n" not in job.schedule


# Mostly right: both required keys as text, so the field rules themselves are exercised.
near_jobs = st.fixed_dictionaries({"ask": st.text(max_size=40), "schedule": st.text(max_size=40)},
                                  optional={"description": st.text(max_size=20)})


@fuzz
@given(st.one_of(tables_of(JobFile), near_jobs).map(toml_text))
def test_fuzzed_job_tables_give_a_job_or_a_job_error(text):
    job_or_error(text)


@fuzz
@given(st.text(max_size=300))
def test_fuzzed_job_text_gives_a_job_or_a_job_error(text):
    job_or_error(text)


@fuzz
@given(st.binary(max_size=300), st.sampled_from(["morning", "a b", "-x", ".hidden", "é"]))
def test_any_bytes_in_a_job_file_give_a_job_or_a_job_error(data, name):
    path = SCRATCH / f"{name}.toml"
    path.write_bytes(data)
    try:
        read_job(path, ToolReach())
    except JobError as exc:
        refused_naming(exc, str(path))
    finally:
        path.unlink()


def test_the_generators_reach_acceptance_as_well_as_refusal():
    """A fuzzer that only ever produces garbage tests the TOML parser, not ours: these tables,
    written by the same writer, are accepted."""
    config = parse_config(toml_text({"loop": {"tool_iterations": 3},
                                     "inference": {"retries": 1}}), "fuzz.toml", SCRATCH)
    assert config.loop.tool_iterations == 3
    job = parse_job(toml_text({"ask": "hi", "schedule": "daily"}), "jobs/morning.toml")
    assert job.ask == "hi"
