"""[broker]: brokerd's grants, audit log and sandboxes."""

from __future__ import annotations

from ._common import ConfigPath, Section


class BrokerSection(Section):
    socket: ConfigPath | None = None  # default: <paths.run>/broker.sock
    grants: ConfigPath | None = None  # the owner's grants directory; default: /etc/boxmaker/grants
