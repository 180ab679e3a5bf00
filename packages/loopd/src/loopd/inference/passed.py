"""The servers the self-test's generating checks passed on, so that a start on the same server,
model, template and flags does not generate them again (docs/decisions/probe-once-per-server.md,
docs/decisions/slot-switch-once-per-server.md).

``probe_key`` is pure: the sha256 of everything that decides whether a check passes (the check
itself, the server's build, the model file's path and what the router reads from it: size,
parameters, type, vocabulary; the chat template and its capabilities, the server's default
generation settings, the router's launch arguments for the model, which hold the cache flags,
and loopd's own sampling and model name). ``PassedProbes`` keeps the keys that passed in one
JSON file beside the sessions that the owner can read and delete.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bxcore.config import InferenceSection
from bxcore.util import sha256, write_durably

log = logging.getLogger(__name__)

# In the session store's directory: the one loopd writes on the appliance (where loopd's home
# itself is not its own); memoryd and the store read only session directories there.
PASSED_PROBES = "selftest-passed.json"
KEPT = 16  # the newest keys kept: two checks on a few models and servers the owner switches between


def probe_key(section: InferenceSection, probe: str, props: Any, models: Any) -> str | None:
    """The key of one server, model, template and flags as the check ``probe`` (what it sends)
    meets them; None when the server does not name its model file (nothing then tells one model
    from another)."""
    if not isinstance(props, dict) or not isinstance(props.get("model_path"), str):
        return None
    template = props.get("chat_template")
    what = {
        "probe": probe,
        "build": props.get("build_info"),
        "model_path": props["model_path"],
        "chat_template": sha256(template.encode()) if isinstance(template, str) else None,
        "chat_template_caps": props.get("chat_template_caps"),
        "generation": (props.get("default_generation_settings") or {}).get("params"),
        "launched_with": launch_args(models, section.model),
        # another file at the same path: another size, parameter count or type
        "model_meta": (_entry(models, section.model) or {}).get("meta"),
        "model": section.model,
        "sampling": section.sampling.model_dump(mode="json"),
    }
    return sha256(json.dumps(what, sort_keys=True).encode())


def launch_args(models: Any, model: str) -> Any:
    """The router's command line for ``model`` (its file, template and flags) less the port,
    which the router picks anew at every launch; None from a server that is not a router."""
    entry = _entry(models, model)
    if entry is None:
        return None
    args = (entry.get("status") or {}).get("args")
    if not isinstance(args, list):
        return args
    return [arg for before, arg in zip([None, *args], args, strict=False)
            if arg != "--port" and before != "--port" and not str(arg).startswith("--port=")]


def _entry(models: Any, model: str) -> dict[str, Any] | None:
    """The router's /models entry for ``model``; None from a server that is not a router."""
    entries = models.get("data") if isinstance(models, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and entry.get("id") == model:
            return entry
    return None


class PassedProbes:
    """``{key: when it passed}`` in ``path``. An unreadable file is named in the log and read as
    empty: it only saves time, and the next pass writes it anew."""

    def __init__(self, path: Path):
        self.path = path

    def passed_at(self, key: str) -> str | None:
        return self._read().get(key)

    def record(self, key: str) -> None:
        """Keep ``key``; a file that cannot be written is named in the log, and the next start
        probes again (a record that only saves time never stops loopd)."""
        kept = self._read()
        kept[key] = datetime.now(UTC).isoformat(timespec="seconds")
        newest = dict(sorted(kept.items(), key=lambda item: item[1])[-KEPT:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_durably(self.path, json.dumps(newest, indent=2, sort_keys=True).encode() + b"\n")
        except OSError as exc:
            log.warning("%s: not written (%s); the next start runs them again", self.path, exc)

    def _read(self) -> dict[str, str]:
        try:
            found = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s: not read (%s); the self-test's generating checks run again",
                        self.path, exc)
            return {}
        if not isinstance(found, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
            log.warning("%s: not a JSON object of strings; the self-test's generating checks "
                        "run again", self.path)
            return {}
        return found
