"""Sandbox backends: each runs one authorized call in a fresh, disposable sandbox.

    outcome = await sandbox.run(decision)      # ToolOutput | ToolFailure
    response = outcome.as_response()           # bxcore ToolResponse for loopd

Two backends behind the ``Sandbox`` protocol: ``BubblewrapSandbox`` and ``PodmanSandbox``.
Each takes a ``Decision`` (never a bare spec) and calls ``decision.authorize()`` first. The
program inside is the toolkit's ``bx-tool``; a call that names hosts gets a per-call egress
proxy (``brokerd.egress``). What each backend enforces, and where, is in its module docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ._process import FailureReason, SandboxOutcome, ToolFailure, ToolOutput
from .bubblewrap import BubblewrapSandbox, BwrapLayout
from .errors import BadSandboxSpec, SandboxError, SandboxUnavailable
from .podman import PodmanSandbox, PodmanSetup
from .spec import Mount, SandboxLimits, SandboxSpec, ToolSettings

if TYPE_CHECKING:  # policy imports the spec from this package: no import cycle at run time
    from ..policy import Decision


class Sandbox(Protocol):
    async def run(self, decision: Decision) -> SandboxOutcome:
        """Run the call ``decision`` authorizes in a fresh sandbox, which is gone on return."""
        ...


__all__ = [
    "BadSandboxSpec",
    "BubblewrapSandbox",
    "BwrapLayout",
    "FailureReason",
    "Mount",
    "PodmanSandbox",
    "PodmanSetup",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SandboxOutcome",
    "SandboxSpec",
    "SandboxUnavailable",
    "ToolFailure",
    "ToolOutput",
    "ToolSettings",
]
