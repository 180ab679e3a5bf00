"""One side of a frame socket as a pure state machine, as h11's ``Connection`` is one side of an
HTTP connection: what this side may send, and the one read loop's logic (what to do with a
chunk, with the end of the stream, with a frame cut off by it, with the frame's deadline). No
I/O and no clock: the shells in bxcore.framestream and bxcore.framesync only receive and send
bytes, and pass the time in.

    conn = FrameConnection(receives=loop.TO_LOOPD, sends=loop.FROM_LOOPD)
    data = conn.send(frame)                    # the bytes to write, or LocalProtocolError
    deadline = Deadline.after(timeout, now)    # one frame's read
    while isinstance(step := conn.next_frame(deadline, now), Receive):
        conn.receive_data(recv(step.max_bytes, timeout=step.timeout))   # b"": the peer closed
    frame = step

Sending checks every frame before a byte of it exists (LocalProtocolError, our bug): a kind this
side does not send on this socket, a body that fails its kind's model, a body that is not JSON or
is over the size limit, any frame after our own final one. A refused frame leaves the connection
as it was (nothing was written), so a handler can still answer ``internal``.

Receiving raises the peer's faults: FrameError for a malformed frame or a kind the peer may not
send (the decoder then stays in its ERROR state), IncompleteFrame when the stream ends inside a
frame, StreamClosed when it ends between frames, StreamTimeout once the frame's deadline has
passed with the frame still incomplete. The peer's ``final`` is not checked: a server ignores a
request's (docs/protocol.md), and a client stops reading at a server's final frame.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from pydantic import ValidationError

from .errors import LocalProtocolError, StreamClosed, StreamTimeout
from .frames import END, MAX_FRAME, Frame, FrameDecoder, Kinds, describe_validation, encode_frame

CHUNK = 64 * 1024  # the most bytes one receive asks for


@dataclass(frozen=True, slots=True)
class Deadline:
    """When one frame's read or write must be done, on the shell's monotonic clock. The deadline
    is per frame: a peer that trickles bytes does not extend it. ``timeout`` None: none."""

    timeout: float | None
    end: float | None

    @classmethod
    def after(cls, timeout: float | None, now: float) -> Deadline:
        return cls(timeout=timeout, end=None if timeout is None else now + timeout)

    def left(self, now: float, what: str) -> float | None:
        """Seconds left (None: no deadline); StreamTimeout, naming ``what``, once none are."""
        if self.end is None:
            return None
        left = self.end - now
        if left <= 0:
            raise StreamTimeout(f"{what}: no whole frame within {self.timeout:g} s")
        return left


@dataclass(frozen=True, slots=True)
class Receive:
    """The shell's next move: receive at most ``max_bytes`` within ``timeout`` seconds (None: no
    limit), and pass what came to ``receive_data`` (b"" when the peer closed)."""

    max_bytes: int
    timeout: float | None


class FrameConnection:
    """``receives``: the kinds the peer may send us (None: any); ``sends``: the kinds we may send,
    each with its body's model (None: any kind, unchecked, for test peers that play a hostile
    role; every role passes its socket's table)."""

    def __init__(self, receives: Collection[str] | None = None, sends: Kinds | None = None,
                 max_size: int = MAX_FRAME):
        self._decoder = FrameDecoder(receives, max_size)
        self._sends = sends
        self._max = max_size
        self._our_final: str | None = None

    def __repr__(self) -> str:
        ours = f"final {self._our_final!r} sent" if self._our_final else "open"
        return f"<FrameConnection ours={ours} theirs={self._decoder!r}>"

    def may_send(self, kind: str) -> bool:
        """Whether a frame of ``kind`` may still go out: a kind we send, and no final yet."""
        return self._our_final is None and (self._sends is None or kind in self._sends)

    def send(self, frame: Frame) -> bytes:
        """The bytes of ``frame``; LocalProtocolError when this side may not send it."""
        if self._our_final is not None:
            raise LocalProtocolError(
                f"frame {frame.kind!r} sent after our final frame {self._our_final!r}")
        if self._sends is not None:
            body = self._sends.get(frame.kind)
            if body is None:
                raise LocalProtocolError(
                    f"frame {frame.kind!r} is not a kind this side sends on this socket")
            try:
                body.validate_python(frame.body)
            except ValidationError as exc:
                raise LocalProtocolError(
                    f"frame {frame.kind!r} we were sending: {describe_validation(exc)}") from exc
        data = encode_frame(frame, self._max)
        if frame.final:
            self._our_final = frame.kind
        return data

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer; b"" is the end of the stream."""
        self._decoder.feed(data)

    def next_frame(self, deadline: Deadline, now: float) -> Frame | Receive:
        """The next whole frame, or what to receive for it before ``deadline``."""
        event = self._decoder.next_event()
        if event is END:
            raise StreamClosed("peer closed the connection")
        if isinstance(event, Frame):
            return event
        return Receive(max_bytes=CHUNK, timeout=deadline.left(now, "reading a frame"))


__all__ = ["CHUNK", "Deadline", "FrameConnection", "Receive"]
