"""Errors of brokerd's sandboxes.

    SandboxError (bxcore BoxmakerError)
    ├── SandboxUnavailable   this backend cannot run here: bwrap, podman or the toolkit image is
    │                        missing, or its configuration is wrong (our side; names what)
    ├── BadSandboxSpec       the spec asks for something no sandbox may have (a mount over a
    │                        system directory, a secret name with a slash); names the field
    └── MountMoved           a mount's source is not where its grant resolved it (a symlink
                             stands on its way now): nothing ran

A tool that ran but failed (timeout, out of memory, non-zero exit, output that is not one JSON
object) is not an exception: ``run`` returns a ``ToolFailure`` value naming the reason.
A forged, used or refusing Decision raises ``brokerd.policy.NotAuthorized``.
"""

from __future__ import annotations

from bxcore.errors import BoxmakerError


class SandboxError(BoxmakerError):
    """Base class of the sandbox errors."""


class SandboxUnavailable(SandboxError):
    pass


class BadSandboxSpec(SandboxError):
    pass


class MountMoved(SandboxError):
    pass
