"""What one sandboxed call produced: the toolkit program's parsed result, or why it failed.

Pure: ``interpret`` turns a finished process (exit status, bytes, flags) into a ToolOutput or a
ToolFailure. The toolkit prints exactly one JSON object; anything else is a failure.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from enum import StrEnum

from bxcore.tools import DataClass, ToolResponse

TOOLKIT_OUT_OF_MEMORY = 3  # toolkit.main.EXIT_OUT_OF_MEMORY
_RESULT_KEYS = {"class", "content", "truncated", "untrusted"}
_LABELS = {label.value for label in DataClass}


class FailureReason(StrEnum):
    TIMEOUT = "timeout"  # the call's time limit passed; the sandbox was killed
    OUT_OF_MEMORY = "oom"  # the memory limit stopped it
    KILLED = "killed"  # a signal ended it (SIGKILL is most often the cgroup memory limit)
    EXIT = "exit"  # the program exited non-zero (its own error message, or the runtime's)
    BAD_OUTPUT = "bad_output"  # stdout was not exactly one result object
    OUTPUT_CAP = "output_cap"  # it printed more than the cap allows


@dataclass(frozen=True, kw_only=True)
class ToolOutput:
    content: str
    data_class: DataClass
    untrusted: bool
    truncated: bool

    def as_response(self) -> ToolResponse:
        return ToolResponse(status="ok", content=self.content, data_class=self.data_class,
                            untrusted=self.untrusted, truncated=self.truncated)


@dataclass(frozen=True, kw_only=True)
class ToolFailure:
    reason: FailureReason
    detail: str
    data_class: DataClass  # the grant's label: an error message may quote what the tool read
    untrusted: bool

    def as_response(self) -> ToolResponse:
        return ToolResponse(status="failed", content=f"{self.reason}: {self.detail}",
                            data_class=self.data_class, untrusted=self.untrusted,
                            truncated=False)


SandboxOutcome = ToolOutput | ToolFailure


@dataclass(frozen=True, kw_only=True)
class Finished:
    """A sandbox process after it ended (the shell fills this in)."""

    status: int  # exit status; negative: killed by that signal
    stdout: bytes
    stderr: bytes  # a bounded tail, for messages
    timed_out: bool
    overflowed: bool  # stdout passed its cap and the process was stopped


def interpret(
    run: Finished, *, data_class: DataClass, egress: bool, timeout_s: float, stdout_cap: int
) -> SandboxOutcome:
    """The outcome of ``run``. A call with egress is untrusted whatever the program says, and a
    result is never labelled below the grant's ``data_class``."""

    def fail(reason: FailureReason, detail: str) -> ToolFailure:
        return ToolFailure(reason=reason, detail=detail, data_class=data_class, untrusted=egress)

    if run.timed_out:
        return fail(FailureReason.TIMEOUT, f"stopped after the call's time limit of {timeout_s}s")
    if run.overflowed:
        return fail(FailureReason.OUTPUT_CAP, f"printed more than {stdout_cap} bytes")
    document = _one_object(run.stdout)
    if run.status == 0:
        output = _output(document, data_class, egress)
        if output is None:
            return fail(FailureReason.BAD_OUTPUT, "stdout was not one result object: "
                        + _excerpt(run.stdout))
        return output
    if run.status == TOOLKIT_OUT_OF_MEMORY or (document and document.get("kind") == "oom"):
        return fail(FailureReason.OUT_OF_MEMORY, "the program ran out of memory (memory limit)")
    if run.status < 0 or run.status in (128 + signal.SIGKILL, 128 + signal.SIGTERM):
        number = -run.status if run.status < 0 else run.status - 128
        return fail(FailureReason.KILLED, f"killed by {signal.Signals(number).name} (with "
                    "SIGKILL, the memory limit is the usual cause)")
    error = document.get("error") if document is not None else None
    if isinstance(error, str):
        return fail(FailureReason.EXIT, error)
    return fail(FailureReason.EXIT, f"exit status {run.status}: " + _excerpt(run.stderr))


def _output(
    document: dict[str, object] | None, data_class: DataClass, egress: bool
) -> ToolOutput | None:
    if document is None or set(document) != _RESULT_KEYS:
        return None
    content, label = document["content"], document["class"]
    untrusted, truncated = document["untrusted"], document["truncated"]
    if not (isinstance(content, str) and isinstance(untrusted, bool)
            and isinstance(truncated, bool) and label in _LABELS):
        return None
    return ToolOutput(content=content, data_class=max(DataClass(label), data_class),
                      untrusted=untrusted or egress, truncated=truncated)


def _one_object(data: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _excerpt(data: bytes, limit: int = 400) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return "(nothing)"
    return text if len(text) <= limit else "..." + text[-limit:]
