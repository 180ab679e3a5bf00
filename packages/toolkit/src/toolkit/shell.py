"""shell.run: one command (an argv list, no shell parsing) in a granted working directory."""

from __future__ import annotations

import os
import signal
import subprocess

from .result import Context, Result, ToolError, make_result

TYPE_CHECKING = False  # typing is not imported at run time (the call's start)
if TYPE_CHECKING:
    from typing import Any

_CHUNK = 64 * 1024


def resolve_inside(context: Context, path: str) -> str:
    """The fully resolved ``path``, or ToolError if it is relative or outside every root. The
    working directory only: the command itself may open anything its mounts hold, so resolving
    here (rather than opening below the mount, as the file tools do) gives nothing away."""
    if not os.path.isabs(path):
        raise ToolError(f"{path!r}: paths must be absolute")
    real = os.path.realpath(path)
    for root in context.roots:
        base = os.path.realpath(root)
        if real == base or real.startswith(base.rstrip("/") + "/"):
            return real
    raise ToolError(f"{path!r} is outside the granted paths")


def run(context: Context, args: dict[str, Any]) -> Result:
    argv = args["argv"]
    cwd = resolve_inside(context, args["cwd"])
    try:
        # A new session, so a command that floods its output can be stopped with its children.
        process = subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    except FileNotFoundError:
        raise ToolError(f"{argv[0]!r}: command not found") from None
    except OSError as exc:
        raise ToolError(f"{argv[0]!r}: cannot run: {exc.strerror}") from None
    assert process.stdout is not None
    output = bytearray()
    flooded = False
    while chunk := os.read(process.stdout.fileno(), _CHUNK):
        output += chunk
        if len(output) > context.cap:
            flooded = True
            os.killpg(process.pid, signal.SIGKILL)
            break
    process.stdout.close()
    status = process.wait()
    head = "stopped: output over the cap" if flooded else _status_text(status)
    text = f"[{head}]\n" + output.decode("utf-8", errors="replace")
    # With egress granted, the command may have read from the network.
    return make_result(context, text, untrusted=context.egress, cut=flooded)


def _status_text(status: int) -> str:
    if status < 0:
        return f"killed by signal {-status}"
    return f"exit status {status}"
