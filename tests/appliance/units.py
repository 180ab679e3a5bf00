"""Unit files from the unit attrsets that nixos-modules/lib.nix computes, rendered as NixOS does.

NixOS writes ``serviceConfig`` key by key, a list as one line per element and booleans as
``true``/``false``; ``description``, ``after``, ``before``, ``wants`` and ``wantedBy`` go to
[Unit] and [Install]. The renderer is small so that what systemd-analyze checks is what Nix
computed.
"""

from __future__ import annotations

from typing import Any


def _lines(key: str, value: Any) -> list[str]:
    if isinstance(value, list):
        return [line for item in value for line in _lines(key, item)]
    if isinstance(value, bool):
        return [f"{key}={'true' if value else 'false'}"]
    return [f"{key}={value}"]


def render_unit(unit: dict[str, Any]) -> str:
    lines = ["[Unit]", f"Description={unit['description']}"]
    lines += _lines("After", unit.get("after", []))
    lines += _lines("Before", unit.get("before", []))
    lines += _lines("Wants", unit.get("wants", []))
    lines += ["", "[Service]"]
    for key, value in unit["serviceConfig"].items():
        lines += _lines(key, value)
    lines += ["", "[Install]"]
    lines += _lines("WantedBy", unit.get("wantedBy", []))
    return "\n".join(lines) + "\n"
