"""bxcore: the data every Boxmaker role shares and the code they share.

Wire and log types (records, chat, tools, protocol), the frame codec and its shells (frames,
frameconn, framestream, framesync), canonical JSON, config, the SecretStore, and small helpers
(util).
"""

from .canonical import canonical_json, canonical_text
from .errors import BoxmakerError, ConfigError, ErrorCode, FrameError, SecretError, WireError
from .ids import SessionId, check_session_id, new_session_id
from .tools import DataClass, DecisionRecord, ToolRequest, ToolResponse
from .util import now_rfc3339, sha256

__all__ = [
    "BoxmakerError", "ConfigError", "DataClass", "DecisionRecord", "ErrorCode", "FrameError",
    "SecretError", "SessionId", "ToolRequest", "ToolResponse", "WireError", "canonical_json",
    "canonical_text", "check_session_id", "new_session_id", "now_rfc3339", "sha256",
]
