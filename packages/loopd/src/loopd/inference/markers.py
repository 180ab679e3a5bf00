"""Each session's marker: the whitespace its first user message starts with, after the shared
baseline (docs/decisions/new-thread-on-the-baseline.md).

Every session's prompt is the baseline (system message and tools, the same bytes in every session
of one baseline, and the template's role line of the first user message), then its marker, then
its own messages. A new session finds the baseline in the slot and processes only the rest. The
server picks, for each request, the RAM-cache entry that shares the longest prefix with the
prompt, over what the slot holds, and a loaded entry leaves the cache: so a new session whose
prompt shared even one token past the baseline with a kept session's, and not with the held one,
could take that session's entry. Markers therefore keep the sessions' first tokens after the
baseline apart: each session's *key* is that token, as the server's tokenizer (``/tokenize``)
splits the template's separator, the marker and the start of the message together (the runs merge:
a message that starts with whitespace changes its marker's key). A new session gets a key that
none of the sessions used last holds (as many of them as there are keys), the one held longest
ago first; when they hold every key, it gets none and keeps the legacy marker, reading its own
copy of the baseline once rather than risking a return of one of them re-reading its own part
(docs/decisions/new-thread-on-the-baseline.md, the crowded case). A session's marker is recorded
in its ``session_start``, so it is the same after a restart, and the book is filled again from
the logs at start.

Markers are whitespace, not words: with a word after the baseline the default 1.5B stopped calling
tools in its first chat; it reads past blank lines. Qwen's tokenizer gives ``MARKERS`` 25
different first tokens: a run of newlines merges with the separator into one token (2 to 12
newlines), some lines of spaces or tabs between the separator and a newline too, and leading
spaces start with the separator's own token, which makes them all one key.

A session logged before markers were recorded has none: it keeps the old form, a hash of its id at
the start of its system message (``legacy_marker``), so its prompt and cache stay as they were.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence

from bxcore.util import sha256

# What the chat template puts between a user message's role and its content (ChatML, as every
# template in serving/templates/: "<|im_start|>user\n"); a marker's run merges with it.
SEPARATOR = "\n"
# Tried in this order. The first two are the ones the default 1.5B was seen to read past in its
# first chat; each other gives Qwen's tokenizer another first token (the separator's "\n" then
# it, before a word): newlines, and blank lines of spaces or tabs, that are one token with it.
MARKERS = ("\n\n", "   ", "\n", *("\n" * n for n in range(3, 12)),
           *(" " * n + "\n" for n in (1, 2, 3, 4, 5, 6, 8, 12, 16)),
           *("\t" * n + "\n" for n in (1, 2, 3, 4)))
# Sessions whose keys the book knows: more than MARKERS' keys, so that when every key is held the
# least recently used one is given, not one forgotten by a busy day.
RECENT = 128
KEYS_CACHED = 4096  # (marker, message start) pairs tokenized, kept per process

Tokenize = Callable[[str], Awaitable[Sequence[int]]]
Key = int


def legacy_marker(session: str) -> str:
    """The marker of a session logged without one: a short hash of its id, put at the start of
    the system message as before (its prompt stays what it was)."""
    return f"[session {sha256(session.encode()).removeprefix('sha256:')[:10]}]\n"


def message_start(message: str) -> str:
    """What of a message can change its marker's key: its leading whitespace and the next
    character (the tokenizer's split of a whitespace run depends on whether it ends the text)."""
    rest = message.lstrip()
    return message[: len(message) - len(rest) + 1]


def key_of(tokens: Sequence[int]) -> int | None:
    """The key of a session whose separator, marker and message start are ``tokens``: the first."""
    return tokens[0] if tokens else None


class MarkerBook:
    """The markers of the ``RECENT`` most recently used sessions, and a new one for a new session.

    ``tokenize`` is the server's ``/tokenize``; each (marker, message start) is asked once.
    """

    def __init__(self, tokenize: Tokenize,
                 recent: Iterable[tuple[str, str | None, str]] = (), *, size: int = RECENT):
        self._tokenize = tokenize
        self._size = size
        # session: its marker (None: the legacy one, no key) and its message start
        self._recent: OrderedDict[str, tuple[str | None, str]] = OrderedDict()
        self._keys: dict[tuple[str, str], Key | None] = {}
        for session, marker, opening in recent:  # oldest first
            self.used(session, marker, opening)

    def used(self, session: str, marker: str | None, opening: str) -> None:
        """``session`` (with ``marker``, its first user message ``opening``) took a turn: it is
        the most recently used."""
        if session not in self._recent:
            self._recent[session] = (marker, message_start(opening))
        self._recent.move_to_end(session)
        while len(self._recent) > self._size:
            self._recent.popitem(last=False)

    async def new(self, session: str, opening: str) -> str | None:
        """A marker for a new session whose first user message is ``opening``: of ``MARKERS``'
        keys, one that none of the sessions used last holds, as many of them as there are keys
        (a new session among them would take that session's cache entry if it is the shorter);
        the one held longest ago, a never held one first. None (the legacy marker: this session
        reads its own baseline once) when every key is held there."""
        start = message_start(opening)
        markers: dict[Key, str] = {}  # each key's first marker
        for marker in MARKERS:
            key = await self._key(marker, start)
            if key is not None:
                markers.setdefault(key, marker)
        latest: dict[Key, int] = {}  # key: how many sessions were used after its latest holder
        for since, (kept, held) in enumerate(reversed(self._recent.values())):
            key = None if kept is None else await self._key(kept, held)
            if key is not None:
                latest.setdefault(key, since)
        free = [key for key in markers if latest.get(key, len(markers)) >= len(markers)]
        chosen = max(free, key=lambda key: latest.get(key, self._size), default=None)
        given = None if chosen is None else markers[chosen]
        self.used(session, given, opening)
        return given

    async def _key(self, marker: str, start: str) -> Key | None:
        if (marker, start) not in self._keys:
            if len(self._keys) >= KEYS_CACHED:
                self._keys.clear()
            tokens = await self._tokenize(SEPARATOR + marker + start)
            self._keys[marker, start] = key_of(tokens)
        return self._keys[marker, start]
