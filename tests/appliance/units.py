"""Unit files from the unit attrsets that nixos-modules/lib.nix computes, rendered as NixOS does.

NixOS writes ``serviceConfig`` key by key, a list as one line per element and booleans as
``true``/``false``; ``description``, ``after``, ``before``, ``wants``, ``restartTriggers`` (as
``X-Restart-Triggers=``) and ``wantedBy`` go to [Unit] and [Install]; ``environment`` becomes one
``Environment="NAME=value"`` line per name (JSON-quoted), and ``path`` the PATH= among them; a
socket unit's ``listenStreams`` become ListenStream= lines in [Socket], before ``socketConfig``. The
renderer is small so that what systemd-analyze checks is what Nix computed. Not exact: NixOS
also puts its default path and a few variables of its own (LOCALE_ARCHIVE, TZDIR) in every
unit, and writes the restart triggers to a store file whose path is the line's value.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any


def _lines(key: str, value: Any) -> list[str]:
    if isinstance(value, list):
        return [line for item in value for line in _lines(key, item)]
    if isinstance(value, bool):
        return [f"{key}={'true' if value else 'false'}"]
    return [f"{key}={value}"]


def environment(unit: dict[str, Any]) -> dict[str, str]:
    """The unit's environment, with PATH from ``path`` as NixOS's systemd.nix makes it."""
    values = dict(unit.get("environment", {}))
    if unit.get("path"):
        values["PATH"] = ":".join([f"{p}/bin" for p in unit["path"]]
                                  + [f"{p}/sbin" for p in unit["path"]])
    return values


def render_unit(unit: dict[str, Any]) -> str:
    lines = ["[Unit]", f"Description={unit['description']}"]
    lines += _lines("After", unit.get("after", []))
    lines += _lines("Before", unit.get("before", []))
    lines += _lines("Wants", unit.get("wants", []))
    if unit.get("restartTriggers"):  # NixOS: the path of a store file holding them
        held = " ".join(map(str, unit["restartTriggers"])).encode()
        lines += [f"X-Restart-Triggers=/nix/store/{hashlib.sha256(held).hexdigest()[:32]}-"
                  "X-Restart-Triggers"]
    lines += ["", "[Service]"]
    for name, value in sorted(environment(unit).items()):
        lines += [f"Environment={json.dumps(f'{name}={value}')}"]
    for key, value in unit["serviceConfig"].items():
        lines += _lines(key, value)
    lines += ["", "[Install]"]
    lines += _lines("WantedBy", unit.get("wantedBy", []))
    return "\n".join(lines) + "\n"


def render_socket(unit: dict[str, Any]) -> str:
    """A socket unit: ``listenStreams`` as ListenStream= lines, then ``socketConfig``."""
    lines = ["[Unit]", f"Description={unit['description']}", "", "[Socket]"]
    lines += _lines("ListenStream", unit.get("listenStreams", []))
    for key, value in unit["socketConfig"].items():
        lines += _lines(key, value)
    lines += ["", "[Install]"]
    lines += _lines("WantedBy", unit.get("wantedBy", []))
    return "\n".join(lines) + "\n"


EXEC_WORD = re.compile(r'"(?:[^"\\]|\\.)*"')


def exec_words(line: str) -> list[str]:
    """The words of an Exec*= line lib.nix wrote (each a JSON string with % and $ doubled), as
    written: a ${VAR} systemd expands stays as it is. A leading ``-`` prefix is dropped."""
    body = line.removeprefix("-")
    words = EXEC_WORD.findall(body)
    assert " ".join(words) == body, f"not a line of JSON-quoted words: {line!r}"
    return [json.loads(word.replace("%%", "%").replace("$$", "$")) for word in words]
