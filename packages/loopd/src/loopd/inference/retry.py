"""chat_with_retry: retries with exponential backoff and jitter, for failures a retry can cure.

Retried: the server could not be reached, answered 503 (the router loading the model), or the
stream was cut before the completion was whole (all ``Unavailable``). Never retried: a 400 (the
request itself is wrong; ``SessionFull`` when the prompt does not fit), an error event from the
server, a malformed stream, or a stall (a retry would queue behind the same blocker again).
Each retry is announced to the channel with ``retrying {attempt, after_ms, error}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bxcore.protocol.loop import Retrying

from .api import ChatRequest, Completion, EventSink
from .errors import Unavailable

Attempt = Callable[[ChatRequest, EventSink], Awaitable[Completion]]


def backoff_delay(attempt: int, base: float, jitter: float) -> float:
    """Seconds before retry ``attempt`` (1-based): ``base * 2**(attempt-1)``, scaled by a jitter
    factor between 0.5 and 1.5 so that clients failed by one outage do not retry in step."""
    return base * 2.0 ** (attempt - 1) * (0.5 + jitter)


async def chat_with_retry(
    attempt_once: Attempt,
    request: ChatRequest,
    events: EventSink,
    *,
    retries: int,
    backoff: float,
    sleep: Callable[[float], Awaitable[None]],
    jitter: Callable[[], float],
) -> Completion:
    attempt = 0
    while True:
        try:
            return await attempt_once(request, events)
        except Unavailable as exc:
            attempt += 1
            if attempt > retries:
                raise
            delay = backoff_delay(attempt, backoff, jitter())
            await events(Retrying(attempt=attempt, after_ms=round(delay * 1000), error=str(exc)))
            await sleep(delay)
