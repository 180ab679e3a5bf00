"""Scheduled jobs: owner-written ``<jobs dir>/<name>.toml`` files.

::

    # jobs/morning-notes.toml
    ask = "Summarise what changed in my notes since yesterday."
    schedule = "*-*-* 07:30:00"     # systemd OnCalendar= text, for the owner's timer

A run (``bxctl job run <name>``) is a turn on the background slot; brokerd holds no job state.
Every tool call of a run is decided against the grants in force at that moment, like any call.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from bxcore.config import describe
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import JobError
from .ownerfiles import ToolReach, read_owner_file, toml_files, tool_hand

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MAX_JOB_FILE = 64 * 1024


class JobFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    ask: Annotated[str, Field(min_length=1, max_length=16 * 1024)]
    schedule: Annotated[str, Field(min_length=1, max_length=256)]
    description: str = ""

    @field_validator("schedule")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError("one line of systemd OnCalendar= text, no control characters")
        return value


@dataclass(frozen=True)
class Job:
    name: str
    ask: str
    schedule: str
    description: str


def parse_job(text: str, source: str | Path) -> Job:
    name = Path(source).stem
    if not _NAME.fullmatch(name):
        raise JobError(f"{source}: the file name must be a plain job name ({name!r} is not)")
    try:
        entry = JobFile.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise JobError(f"{source}: not valid TOML: {exc}") from None
    except ValidationError as exc:
        raise JobError(describe(exc, source)) from None
    return Job(name, entry.ask, entry.schedule, entry.description)


def read_job(path: Path, reach: ToolReach) -> Job:
    """The job in ``path``; JobError if it is broken, or a tool could have written it (its ask
    becomes the owner's message of a new, clean session: attack 31k, K11)."""
    file = read_owner_file(path, MAX_JOB_FILE, JobError, "a job")
    why = tool_hand(file, reach)
    if why is not None:
        raise JobError(f"{path}: {why}; this job does not run")
    return parse_job(file.text, path)


def job_path(directory: Path, name: str) -> Path:
    if not _NAME.fullmatch(name):
        raise JobError(f"{name!r} is not a job name (letters, digits, '-', '_')")
    return directory / f"{name}.toml"


def job_paths(directory: Path) -> list[Path]:
    return toml_files(directory, JobError, "jobs")


def check_schedule(job: Job) -> str | None:
    """What systemd says is wrong with the schedule, or None. Checked with
    ``systemd-analyze calendar`` where it is installed (the owner's timer host has it)."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None
    result = subprocess.run([tool, "calendar", "--", job.schedule], capture_output=True,
                            text=True, timeout=10, check=False)
    if result.returncode == 0:
        return None
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"systemd-analyze exited {result.returncode}"
