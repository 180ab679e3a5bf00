"""[broker]: brokerd's grants, audit log, approvals and sandboxes.

::

    [broker]
    grants = "/etc/boxmaker/grants"     # owner-written *.toml; brokerd only reads them
    jobs = "/etc/boxmaker/jobs"         # owner-written scheduled jobs
    approvers = ["local:1000", "8xq3mattermostuserid0000aa"]  # who may answer an approval
    approval_timeout = 600              # seconds; an unanswered approval is a denial
    backend = "bubblewrap"              # or "podman"
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from ._common import ConfigPath, Seconds, Section, SocketMode


class BrokerSection(Section):
    socket: ConfigPath | None = None  # default: <paths.run>/broker.sock
    mode: SocketMode = 0o600  # broker.sock: loopd connects
    group: str | None = None  # the group allowed to connect; default: the process's own
    grants: ConfigPath | None = None  # the owner's grants directory; default: /etc/boxmaker/grants
    approve_socket: ConfigPath | None = None  # bxctl approve; default: <paths.run>/approve.sock
    approve_mode: SocketMode = 0o600  # approve.sock: the owner's bxctl connects
    approve_group: str | None = None
    gateway_socket: ConfigPath | None = None  # gatewayd's; default: <paths.run>/gateway.sock
    jobs: ConfigPath | None = None  # scheduled jobs; default: /etc/boxmaker/jobs
    # Who may answer an approval: Mattermost user ids (as gatewayd reports them) and
    # "local:<uid>" for bxctl on approve.sock (the uid is the socket peer's, not a claim).
    approvers: list[str] = Field(default_factory=list)
    approval_timeout: Seconds = 600.0
    waiting_interval: Seconds = 15.0  # how often a suspended call tells loopd it still waits
    backend: Literal["bubblewrap", "podman"] = "bubblewrap"
    toolkit_dir: ConfigPath | None = None  # bubblewrap: the toolkit package; default: installed
    podman_image: str | None = None  # podman: the toolkit image as name@sha256:<digest>
    containers_conf: ConfigPath | None = None  # podman: the containers.conf it runs with
    result_cap: Annotated[int, Field(ge=64)] = 16 * 1024  # bytes of a result's content kept
    audit_rotate_bytes: Annotated[int, Field(ge=4096)] = 64 * 1024 * 1024

    def grants_dir(self) -> Path:
        return self.grants or Path("/etc/boxmaker/grants")

    def jobs_dir(self) -> Path:
        return self.jobs or Path("/etc/boxmaker/jobs")
