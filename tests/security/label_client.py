"""One tool call on broker.sock, as loopd makes it; prints the final frame's body as JSON.

    label_client.py <broker.sock> '<ToolRequest JSON>'

Run as brokerd's uid (label_rig.LabelRig.begin), since broker.sock admits only that uid.
"""

from __future__ import annotations

import json
import sys

from bxcore.frames import Frame
from bxcore.framestream import SyncFrameSocket
from bxcore.protocol import broker as broker_wire
from bxcore.tools import ToolRequest

WAIT = 600.0


def main() -> None:
    request = ToolRequest.model_validate_json(sys.argv[2])
    conn = SyncFrameSocket.connect(sys.argv[1], broker_wire.FROM_BROKERD, timeout=WAIT)
    try:
        conn.write(Frame.of(broker_wire.TOOL_CALL, request, final=True))
        while not (frame := conn.read(timeout=WAIT)).final:
            pass
    finally:
        conn.close()
    if frame.kind != broker_wire.TOOL_RESPONSE:
        sys.exit(f"brokerd answered {frame.kind}: {json.dumps(dict(frame.body))}")
    print(json.dumps(dict(frame.body)))


if __name__ == "__main__":
    main()
