"""[broker]: brokerd's grants, audit log, approvals and sandboxes.

::

    [broker]
    grants = "/etc/boxmaker/grants"     # owner-written *.toml; brokerd only reads them
    jobs = "/etc/boxmaker/jobs"         # owner-written scheduled jobs
    approvers = ["local:1000", "8xq3mattermostuserid0000aa"]  # who may answer an approval
    # or, when brokerd runs in a rootless container: ["local:socket", "8xq3mattermostuserid0000aa"]
    approval_timeout = 600              # seconds; an unanswered approval is a denial
    backend = "bubblewrap"              # or "podman"

On the appliance brokerd runs in a container with no runtime of its own: tool containers are
started by a ``podman system service`` of brokerd's own host user (``podman_remote``), and each
call's scratch directory is on a path both see (``scratch``): every mount keeps its path.

An approvers entry is one of:

- ``local:<uid>``: ``bxctl`` on approve.sock run by that uid (the socket peer's, from the kernel,
  not a claim). It cannot name anyone when brokerd runs in a user namespace that does not map
  the peer: there every other uid is the overflow uid (65534), which brokerd refuses.
- ``local:socket``: anyone who can open approve.sock may answer. The gate is then the socket's
  directory, which must admit only the owner's users (the appliance does this).
- a Mattermost user id (26 of a-z, 0-9), as gatewayd reports who answered in the thread.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from ._common import ConfigPath, Seconds, Section, SocketMode
from .gateway import MATTERMOST_ID

DEFAULT_SANDBOX_UID = 1_879_048_192  # 0x70000000: systemd's UIDS-GIDS leaves 0x70000000.. unused
LOCAL_SOCKET = "local:socket"  # the approvers entry: whoever can open approve.sock
LOCAL_UID = re.compile(r"local:[0-9]{1,10}")


def check_approver(value: str) -> str:
    if value == LOCAL_SOCKET or LOCAL_UID.fullmatch(value) or MATTERMOST_ID.fullmatch(value):
        return value
    raise ValueError(
        'not an approver: expected "local:<uid>" (digits), "local:socket", or a Mattermost '
        "user id (26 of a-z, 0-9)"
    )


Approver = Annotated[str, AfterValidator(check_approver)]


class BrokerSection(Section):
    socket: ConfigPath | None = None  # default: <paths.run>/broker.sock
    mode: SocketMode = 0o600  # broker.sock: loopd connects
    group: str | None = None  # the group allowed to connect; default: the process's own
    grants: ConfigPath | None = None  # the owner's grants directory; default: /etc/boxmaker/grants
    approve_socket: ConfigPath | None = None  # bxctl approve; default: <paths.run>/approve.sock
    approve_mode: SocketMode = 0o600  # approve.sock: the owner's bxctl connects
    approve_group: str | None = None
    jobs: ConfigPath | None = None  # scheduled jobs; default: /etc/boxmaker/jobs
    # Who may answer an approval: Mattermost user ids (as gatewayd reports them), "local:<uid>"
    # for bxctl on approve.sock (the socket peer's uid) and "local:socket" (see above).
    approvers: list[Approver] = Field(default_factory=list)
    approval_timeout: Seconds = 600.0
    # How often a call that has not finished tells loopd so: waiting for approval, or running.
    waiting_interval: Seconds = 15.0
    backend: Literal["bubblewrap", "podman"] = "bubblewrap"
    toolkit_dir: ConfigPath | None = None  # bubblewrap: the toolkit package; default: installed
    podman_image: str | None = None  # podman: the toolkit image as name@sha256:<digest>
    containers_conf: ConfigPath | None = None  # podman: the containers.conf it runs with
    # podman: a service to start tool containers through, "unix:///<path>"; unset, podman runs here
    podman_remote: Annotated[str, Field(pattern=r"^unix:///[^\s]+$")] | None = None
    scratch: ConfigPath | None = None  # each call's secrets and egress socket; default: /dev/shm
    # The host uid tools run as when brokerd is root (bubblewrap) or podman is rootful; never 0.
    # It must be dedicated: no account, no subordinate range, no other process (the pids limit
    # counts that uid's processes host-wide). The default is the first uid of the block systemd
    # leaves unused (docs/decisions/sandbox-uid.md); "nobody", shared by other daemons, is not.
    sandbox_uid: Annotated[int, Field(ge=1, le=2**31 - 1)] = DEFAULT_SANDBOX_UID
    result_cap: Annotated[int, Field(ge=64)] = 16 * 1024  # bytes of a result's content kept
    # Sandboxed calls running at once; one more is refused until one ends (each holds about
    # eight descriptors and a process tree).
    max_running_calls: Annotated[int, Field(ge=1, le=4096)] = 64
    audit_rotate_bytes: Annotated[int, Field(ge=4096)] = 64 * 1024 * 1024
    # A call that can write to the audit log's filesystem is not run with less than this free
    # there, and the log holds up to 4 MiB of it for itself (0: neither);
    # docs/decisions/audit-log-bounds.md
    audit_reserve_bytes: Annotated[int, Field(ge=0)] = 64 * 1024 * 1024
    # The same for free inodes (a tool that makes empty files until none is left): a call that
    # can write there is not run with fewer free, and the log holds up to 64 (0: neither).
    audit_reserve_inodes: Annotated[int, Field(ge=0)] = 4096

    def grants_dir(self) -> Path:
        return self.grants or Path("/etc/boxmaker/grants")

    def jobs_dir(self) -> Path:
        return self.jobs or Path("/etc/boxmaker/jobs")
