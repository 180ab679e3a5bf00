"""Errors of bxcore, and the error codes every socket speaks.

Two roots. ``BoxmakerError`` is every failure Boxmaker expects and answers (a peer that did it
wrong, a stream that ended, a bad file); ``LocalProtocolError`` is a bug on this side, and is
deliberately not a BoxmakerError, so no handler of expected failures (which blames the peer or
the network) absorbs it. The h11 split: the peer's fault is ``RemoteProtocolError``, ours is
``LocalProtocolError``.

    LocalProtocolError      we did it wrong: a frame this side tried to send breaks the protocol
                            (a kind this side does not send, a body that fails its kind's model,
                            over the size limit, not JSON, a frame after our final one)
    BoxmakerError
    ├── RemoteProtocolError the peer did it wrong: what it sent is not the protocol
    │   ├── FrameError      a frame on a socket is malformed
    │   │   └── FrameTooLarge   its length prefix passes the limit
    │   └── BadEventStream  a server-sent event stream is malformed (bxcore.sse)
    ├── StreamEnded         no further frame will come on this stream:
    │   ├── StreamClosed    the peer closed it cleanly between frames
    │   ├── IncompleteFrame the peer closed it in the middle of a frame
    │   └── StreamBroken    the connection broke (reset, broken pipe, any socket error)
    ├── StreamTimeout       a frame was not read or written whole within its deadline
    ├── PeerUnavailable     a role's socket cannot be reached (missing, refused, timed out)
    ├── Refused             a request this side will not or cannot do: the peer is answered
    │                       with the error's ``code`` and message (bxcore.daemon's runner)
    ├── TaintFileError      a session's taint file is unreadable or invalid; names the file
    ├── ConfigError         a config file is unreadable or invalid; names the file and key
    ├── SchemaError         a database was made by a newer release, or a migration failed
                            (bxcore.migrations); names the file
    ├── SecretError         a secret is missing or unsafe; never contains the secret's value
    └── DaemonError         a daemon cannot serve its socket (bxcore.daemon); names the path
"""

from __future__ import annotations

from enum import StrEnum

from ._base import Model, Text


class BoxmakerError(Exception):
    """Base class of every error Boxmaker raises on purpose."""


class LocalProtocolError(Exception):
    """This side tried to send a frame the protocol does not allow (h11's LocalProtocolError):
    a bug here, never the peer's fault. Raised before a byte of the frame is written, so the
    stream is still at a frame boundary. Not a BoxmakerError (see the module docstring)."""


class RemoteProtocolError(BoxmakerError):
    """The peer sent something the protocol does not allow (h11's RemoteProtocolError)."""


class FrameError(RemoteProtocolError):
    """A byte stream that is not a valid sequence of frames. The message says what is wrong."""


class FrameTooLarge(FrameError):
    pass


class StreamEnded(BoxmakerError):
    """The stream will give no further frame: which way it ended is the subclass."""


class StreamClosed(StreamEnded):
    """The peer closed the stream at a frame boundary."""


class IncompleteFrame(StreamEnded):
    """The peer closed the stream part-way through a frame."""


class StreamBroken(StreamEnded):
    """The connection broke under a read or a write (reset, broken pipe, any socket error)."""


class BadEventStream(RemoteProtocolError):
    """Bytes that are not a text/event-stream: not UTF-8, a line over the cap, an event cut off
    by the end of the stream. The SSE parser that raised it stays broken."""


class StreamTimeout(BoxmakerError):
    """A frame did not arrive, or was not taken by the peer, whole within its deadline. The
    deadline is per frame: a peer that trickles bytes does not extend it."""


class PeerUnavailable(BoxmakerError):
    """A role's socket could not be reached (missing, refused, or timed out)."""


class TaintFileError(BoxmakerError):
    """A session's taint file cannot be read or is not a taint; names the file."""


class ConfigError(BoxmakerError):
    pass


class SchemaError(BoxmakerError):
    pass


class SecretError(BoxmakerError):
    pass


class DaemonError(BoxmakerError):
    """A role cannot bind or serve its socket: the path is unsafe, taken, or not bindable."""


class ErrorCode(StrEnum):
    """Every error a Boxmaker socket can answer with."""

    BAD_FRAME = "bad_frame"  # the request frame was malformed
    BAD_REQUEST = "bad_request"  # well-formed, but not a request this socket takes
    INTERNAL = "internal"  # a bug or an unexpected failure on our side
    UNAVAILABLE = "unavailable"  # a peer role or the model server cannot be reached
    SESSION_FULL = "session_full"  # the model's context is full (HTTP 400 from the server)
    TURN_LIMIT = "turn_limit"  # a per-turn limit stopped the turn
    SESSION_BUSY = "session_busy"  # another turn of this session is running
    NO_SUCH_SESSION = "no_such_session"  # resume of a session that does not exist
    SESSION_EXISTS = "session_exists"  # a new session with an id that is taken
    INFERENCE = "inference"  # the model server failed the request
    DENIED = "denied"  # policy refused the request
    EXPIRED = "expired"  # an approval or a grant ran out of time
    UNKNOWN_APPROVAL = "unknown_approval"  # an approval id that is unknown or already used
    UNTRUSTED_SESSION = "untrusted_session"  # the session's taint forbids the operation


class Refused(BoxmakerError):
    """A request this side answers with an error instead of its result: the peer asked for what
    it may not have (``bad_request``, ``denied``, ``session_busy``...), or what it asked for
    cannot be done now (``unavailable``, ``session_full``). ``bxcore.daemon.answering`` sends
    the peer ``code`` and the message, so the message is written for the peer to read. A role's
    errors that always cross its socket so may subclass it with their own ``code``."""

    code: ErrorCode = ErrorCode.BAD_REQUEST

    def __init__(self, message: str, code: ErrorCode | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class WireError(Model):
    """The body of an ``error`` frame."""

    code: ErrorCode
    message: Text
