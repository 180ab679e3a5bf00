"""A call's arguments, parsed once where the call enters brokerd's logic (``Broker.call``) and
handed to every step after it: ``decide`` (the grants' argument constraints), the shell's path
resolution, the egress log (the payload ``consult`` sends) and the delegate order. None of
them parses the text again.

The text stays beside the value: the audit hashes the text (``arguments_sha256``) and the
sandbox hands the text to the tool unchanged, so neither depends on how the value would be
written back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class CallArguments:
    """``text``: the call's JSON text, as the model wrote it; ``value``: the JSON object it holds,
    or None when it holds none (not JSON, or JSON that is not one object)."""

    text: str
    value: Mapping[str, Any] | None

    @classmethod
    def parse(cls, text: str) -> CallArguments:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return cls(text=text, value=None)
        return cls(text=text, value=value if isinstance(value, dict) else None)

    def get(self, name: str) -> Any:
        """The argument ``name``, or None when it is absent or there is no object."""
        return None if self.value is None else self.value.get(name)


NOT_AN_OBJECT = "the arguments are not one JSON object"
