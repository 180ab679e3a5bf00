"""Each session's marker: the line its first user message starts with, after the shared baseline
(docs/decisions/new-thread-on-the-baseline.md).

Every session's prompt is the baseline (system message and tools, the same bytes in every session
of one baseline), then its marker, then its own messages. A new session finds the baseline in the
slot and processes only the rest. The server picks, for each request, the RAM-cache entry that
shares the longest prefix with the prompt, and a loaded entry leaves the cache: so a new session
whose prompt shared even one token past the baseline with a kept session's would take that
session's entry. Markers therefore differ from each other at one fixed token, their *key*: the
first token after ``PREFIX``, as the server's own tokenizer (``/tokenize``) splits it. Every new
session gets a key that no session in the book (the ``RECENT`` most recently used) has; a
session's marker is recorded in its ``session_start``, so it is the same after a restart, and the
book is filled again from the logs at start.

A session logged before markers were recorded has none: it keeps the old form, a hash of its id at
the start of its system message (``legacy_marker``), so its prompt and cache stay as they were.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence

from bxcore.util import sha256

PREFIX = "[thread"
# Sessions whose markers are kept apart: fewer than the words' distinct keys (WORDS has 246
# words), so a new session always finds a free one. A server whose RAM cache keeps more threads
# than this may give a new thread the entry of the 129th most recently used.
RECENT = 128
# Common words: the model reads one at the start of each thread, so nothing odd. Each is tried in
# turn; one whose key another word already has is skipped.
WORDS = (
    "Acorn", "Adder", "Alder", "Almond", "Amber", "Anchor", "Anvil", "Apple", "Apricot", "Arch",
    "Arrow", "Aspen", "Aster", "Atlas", "Autumn", "Badger", "Bagel", "Bamboo", "Banjo",
    "Barley", "Basil", "Beacon", "Beaver", "Beech", "Bell", "Berry", "Birch", "Bison",
    "Blossom", "Bluebell", "Boat", "Bonnet", "Bramble", "Brass", "Breeze", "Brick", "Bridge",
    "Brook", "Buffalo", "Bugle", "Butter", "Button", "Cabin", "Cactus", "Camel", "Candle",
    "Canoe", "Canyon", "Carrot", "Castle", "Cedar", "Cello", "Chalk", "Cherry", "Chestnut",
    "Cider", "Cinnamon", "Clover", "Cobalt", "Coconut", "Comet", "Compass", "Copper", "Coral",
    "Cotton", "Cougar", "Crane", "Cricket", "Crystal", "Cypress", "Daisy", "Dawn", "Delta",
    "Desert", "Dolphin", "Dove", "Dragon", "Drum", "Dune", "Eagle", "Ebony", "Echo", "Elder",
    "Elm", "Ember", "Emerald", "Falcon", "Feather", "Fern", "Fiddle", "Fig", "Finch", "Flint",
    "Flute", "Forest", "Fossil", "Fox", "Frost", "Galaxy", "Garden", "Garnet", "Gazelle",
    "Ginger", "Glacier", "Goose", "Granite", "Grape", "Gravel", "Harbor", "Harp", "Hazel",
    "Heron", "Hickory", "Hill", "Honey", "Hornet", "Horizon", "Iris", "Island", "Ivory", "Ivy",
    "Jade", "Jasmine", "Jasper", "Juniper", "Kettle", "Kiwi", "Lagoon", "Lantern", "Larch",
    "Lark", "Laurel", "Lava", "Lemon", "Lily", "Lime", "Linen", "Lion", "Lotus", "Magnet",
    "Magpie", "Mango", "Maple", "Marble", "Meadow", "Melon", "Mercury", "Mint", "Mirror",
    "Moose", "Moss", "Mountain", "Mulberry", "Nectar", "Nest", "Nickel", "Nutmeg", "Oak",
    "Oasis", "Ocean", "Olive", "Onyx", "Orange", "Orchid", "Otter", "Owl", "Oyster", "Paddle",
    "Palm", "Panda", "Panther", "Paper", "Parrot", "Peach", "Pearl", "Pebble", "Pelican",
    "Pepper", "Piano", "Pine", "Planet", "Plum", "Pond", "Poplar", "Poppy", "Prairie", "Puffin",
    "Pumpkin", "Quartz", "Quill", "Rabbit", "Radish", "Rain", "Raven", "Reed", "Ribbon",
    "River", "Robin", "Rocket", "Rose", "Ruby", "Saffron", "Sage", "Salmon", "Sand", "Sapphire",
    "Satin", "Sequoia", "Shadow", "Shell", "Silver", "Sparrow", "Spruce", "Squirrel", "Star",
    "Stone", "Storm", "Summit", "Sun", "Swan", "Sycamore", "Thistle", "Thunder", "Tiger",
    "Timber", "Topaz", "Tulip", "Tundra", "Turtle", "Valley", "Velvet", "Violet", "Violin",
    "Walnut", "Walrus", "Whale", "Wheat", "Willow", "Wind", "Winter", "Wolf", "Wren", "Yarrow",
    "Yew", "Zebra", "Zinc",
)

Tokenize = Callable[[str], Awaitable[Sequence[int]]]


def marker_text(word: str) -> str:
    return f"{PREFIX} {word}]\n"


def legacy_marker(session: str) -> str:
    """The marker of a session logged without one: a short hash of its id, put at the start of
    the system message as before (its prompt stays what it was)."""
    return f"[session {sha256(session.encode()).removeprefix('sha256:')[:10]}]\n"


def key_of(prefix_tokens: Sequence[int], marker_tokens: Sequence[int]) -> int | None:
    """The token a marker differs from others at: the first after ``PREFIX``'s tokens; None if the
    marker does not start with those tokens (its word merged into the prefix) or ends there."""
    n = len(prefix_tokens)
    if list(marker_tokens[:n]) != list(prefix_tokens) or len(marker_tokens) <= n:
        return None
    return marker_tokens[n]


class MarkerBook:
    """The markers of the ``RECENT`` most recently used sessions, and a new one for a new session.

    ``tokenize`` is the server's ``/tokenize``; each marker's key is asked for once per process.
    """

    def __init__(self, tokenize: Tokenize, recent: Iterable[tuple[str, str]] = (),
                 *, size: int = RECENT):
        self._tokenize = tokenize
        self._size = size
        self._recent: OrderedDict[str, str] = OrderedDict()
        self._keys: dict[str, int | None] = {}
        self._prefix: Sequence[int] | None = None
        for session, marker in recent:  # oldest first
            self.used(session, marker)

    def used(self, session: str, marker: str) -> None:
        """``session`` (with ``marker``) took a turn: it is the most recently used."""
        self._recent[session] = marker
        self._recent.move_to_end(session)
        while len(self._recent) > self._size:
            self._recent.popitem(last=False)

    async def new(self, session: str) -> str:
        """A marker for a new session whose key differs from every kept session's; when every
        word's key is taken (more than the pool's kept sessions), the least recently used
        session's marker."""
        taken: set[int | None] = set()
        for marker in self._recent.values():
            taken.add(await self._key(marker))
        chosen = None
        for marker in map(marker_text, WORDS):  # each tokenized once, when first reached
            key = await self._key(marker)
            if key is not None and key not in taken:
                chosen = marker
                break
        if chosen is None:
            chosen = next(iter(self._recent.values()))
        self.used(session, chosen)
        return chosen

    async def _key(self, marker: str) -> int | None:
        if marker not in self._keys:
            if self._prefix is None:
                self._prefix = list(await self._tokenize(PREFIX))
            self._keys[marker] = key_of(self._prefix, await self._tokenize(marker))
        return self._keys[marker]
