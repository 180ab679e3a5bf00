"""The on-device conversation (docs/design.md, the owner's device) through a real ``loopd
serve`` that touches nothing of the owner's: its own config, home and run directory under a
scratch directory, its own session id, a scratch registry (``clock``, and ``echo`` found with
``find_tool``), no memoryd and no brokerd: its broker.sock is served by ``scratch_broker``, which
answers ``clock`` and ``echo`` and nothing else. It reaches the model as the deployed loopd does,
through the deployed inferproxy's socket, with the deployed ``[inference]`` section (model,
slots, sampling, recorded serving settings): so its start-up self-test is the owner's.

Three ``bxctl chat --say`` turns (plain, ``clock``, ``echo``), a loopd restart, a fourth turn;
then the session's log, read record by record.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bxcore.canonical import canonical_text
from bxcore.chat import ToolSchema
from bxcore.config import Config
from bxcore.records import AnyRecord, parse_record
from bxcore.tools import CLOCK

from ..roles import role_command
from .router import DeviceError
from .scratch_broker import ECHO_NAME, scratch_broker

# Each turn: its text and the tool_choice of each completion in order. Steered, so that the
# check is the loop's records and not whether a model picks a tool unasked (tool-call parsing
# has its own trials).
TURNS = (
    ("Say hello in one short sentence.", ("none",)),
    ("What time is it? Call the clock tool.", ("required", "none")),
    ("Use find_tool to look for a tool named echo, then call it with call_tool to echo the text "
     "ping.", ("required", "required", "none")),
)
RESUMED = ("Thank you.", ("none",))
READY_WAIT = 1800.0  # loopd's self-test on a busy server; the log says where it stands
STOP_WAIT = 30.0


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return canonical_text(str(value))  # a JSON string is a TOML basic string


def toml_table(name: str, values: Mapping[str, Any]) -> str:
    """``[name]`` with its scalar keys, then each nested table as ``[name.key]``."""
    scalars = [f"{key} = {_toml_value(value)}" for key, value in values.items()
               if not isinstance(value, dict)]
    text = "\n".join([f"[{name}]", *scalars]) + "\n"
    for key, value in values.items():
        if isinstance(value, dict):
            text += toml_table(f"{name}.{key}", value)
    return text


# The scratch registry's one tool besides clock: not core, so the model must find it first.
ECHO = ToolSchema(name=ECHO_NAME, description="Echo: returns its text argument unchanged.",
                  parameters={"type": "object", "required": ["text"],
                              "properties": {"text": {"type": "string"}}})
REGISTRY = canonical_text([schema.model_dump(mode="json") for schema in (CLOCK, ECHO)])


def scratch_config(config: Config, system: Path | None, directory: Path) -> str:
    """loopd's config for the conversation: the deployed [inference] and inferproxy socket,
    everything else scratch (``Conversation`` writes its registry under ``directory``)."""
    inference = config.inference.model_dump(mode="json", exclude_none=True)
    text = toml_table("paths", {"home": str(directory / "home"), "run": str(directory / "run")})
    text += toml_table("inferproxy", {"socket": str(config.served("infer").path)})
    text += toml_table("inference", inference)
    text += toml_table("loop", {"registry": str(directory / "registry.json"), "memory": "off"})
    baseline: dict[str, Any] = {"identity": []}
    if system is not None:
        baseline["system"] = str(system)
    return text + toml_table("baseline", baseline)


class Conversation:
    def __init__(self, directory: Path, config_text: str):
        self.directory = directory
        self.config = directory / "config.toml"
        self.config.write_text(config_text)
        (directory / "registry.json").write_text(REGISTRY)
        self.log = directory / "loopd.log"
        self.socket = directory / "run" / "loop.sock"
        self.session = f"verify-device-{secrets.token_hex(4)}"

    @contextlib.contextmanager
    def loopd(self) -> Iterator[None]:
        """``loopd serve`` until loop.sock is bound (its start-up checks passed); stopped after."""
        with self.log.open("ab") as out:
            process = subprocess.Popen(
                [role_command("loopd"), "serve", "--config", str(self.config)], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + READY_WAIT
            while not self.socket.is_socket():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise DeviceError(f"loopd serve did not start (exit {process.poll()}): "
                                      f"{self._tail()}")
                time.sleep(0.2)
            yield
        finally:
            _stop(process)

    def say(self, text: str, choices: tuple[str, ...]) -> None:
        argv = [role_command("bxctl"), "chat", "--socket", str(self.socket), "--session",
                self.session]
        for choice in choices:
            argv += ["--tool-choice", choice]
        result = subprocess.run([*argv, "--say", text], capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise DeviceError(f"bxctl chat --say {text!r} failed: {result.stderr.strip()[-400:]}")

    def records(self) -> list[AnyRecord]:
        path = self.directory / "home" / "sessions" / self.session / "0.jsonl"
        return [parse_record(line) for line in path.read_bytes().splitlines() if line]

    def _tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return " | ".join(text.strip().splitlines()[-8:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_WAIT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def run_conversation(conversation: Conversation) -> tuple[list[AnyRecord], int]:
    """The four turns around a restart; the log's records and how many came before the
    restart."""
    with scratch_broker(conversation.directory / "run" / "broker.sock"):
        with conversation.loopd():
            for text, choices in TURNS:
                conversation.say(text, choices)
        restarted_at = len(conversation.records())
        with conversation.loopd():
            conversation.say(*RESUMED)
    return conversation.records(), restarted_at
