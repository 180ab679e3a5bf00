"""loopd's inference client: streaming chat completions through inferproxy.

Pure parts: ``bxcore.sse`` (bytes to events), ``chunks`` (the server's chunk shapes), ``assembler``
(deltas to a Completion), ``request`` (the request body), ``retry`` (the backoff policy),
``gate`` (one request per slot). The I/O shell is ``client``; ``selftest`` and ``budget`` use it.
"""

from .api import ChatMessage, ChatRequest, Completion, EventSink, Inference, cache_outcome
from .budget import BudgetReport, check_budget, count_baseline_tokens
from .client import InferenceClient
from .errors import (
    BadStream,
    InferenceError,
    OverBudget,
    ServerRejected,
    ServerStreamError,
    SessionFull,
    Stalled,
    StreamCut,
    Unavailable,
    UnreadableOutput,
)
from .gate import SlotGate
from .retry import chat_with_retry
from .selftest import SelfTestCheck, SelfTestReport, self_test

__all__ = [
    "BadStream",
    "BudgetReport",
    "ChatMessage",
    "ChatRequest",
    "Completion",
    "EventSink",
    "Inference",
    "InferenceClient",
    "InferenceError",
    "OverBudget",
    "SelfTestCheck",
    "SelfTestReport",
    "ServerRejected",
    "ServerStreamError",
    "SessionFull",
    "SlotGate",
    "Stalled",
    "StreamCut",
    "Unavailable",
    "UnreadableOutput",
    "cache_outcome",
    "chat_with_retry",
    "check_budget",
    "count_baseline_tokens",
    "self_test",
]
