"""The part of ``run`` both backends share: authorize, check the spec, make the call's
workspace, and serve its egress proxy for exactly as long as the sandbox runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..egress import egress_proxy
from ._call import check_spec
from ._outcome import SandboxOutcome
from ._workspace import CallWorkspace, default_scratch_root
from .spec import SandboxSpec

if TYPE_CHECKING:  # policy imports the spec from this package: no import cycle at run time
    from ..policy import Decision


class Backend(ABC):
    def __init__(self, scratch_root: Path | None, egress_resolver: Mapping[str, str] | None,
                 *, owner: int | None = None):
        self._scratch_root = scratch_root or default_scratch_root()
        self._owner = owner  # the host uid each call's scratch files are given to, if not ours
        self._resolver = egress_resolver

    async def run(self, decision: Decision) -> SandboxOutcome:
        spec = decision.authorize()
        check_spec(spec)
        with CallWorkspace(spec, self._scratch_root, owner=self._owner) as workspace:
            if workspace.egress_dir is None:
                return await self._execute(spec, workspace)
            async with egress_proxy(workspace.proxy_socket, spec.hosts, self._resolver,
                                    internal=spec.internal):
                return await self._execute(spec, workspace)

    @abstractmethod
    async def _execute(self, spec: SandboxSpec, workspace: CallWorkspace) -> SandboxOutcome:
        """Run the sandbox for ``spec`` with ``workspace``'s secrets and proxy directory."""
