"""The M0 measurements that need only prompts of known sizes: prompt processing at each depth, an
uncached long prompt, generation with one and two active sessions, and what a request that
diverges mid-prompt re-reads. Every prompt is token ids through the native ``/completion``
(exact depths), made of random words no earlier request had, so neither a slot nor the
server's host-RAM prompt cache can serve it.
"""

from __future__ import annotations

import random
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .router import Router, Timings, timings_of
from .verdicts import Depth


@dataclass(frozen=True, kw_only=True)
class Figure:
    name: str
    value: float
    unit: str
    how: str  # the requests that produced it


def value_text(figure: Figure) -> str:
    """A figure's value as the document and the verdicts show it: whole numbers as such."""
    value = figure.value
    return f"{value:,.0f}" if value == int(value) else f"{value:,.2f}"


class Filler:
    """Token ids of random words, as the server's tokenizer cuts them."""

    def __init__(self, router: Router):
        self.router = router
        self._random = random.Random(secrets.randbits(64))

    def _word(self) -> str:
        return "".join(self._random.choice("bdfgklmnprstvz") + self._random.choice("aeiou")
                       for _ in range(self._random.randint(1, 3)))

    def tokens(self, count: int) -> list[int]:
        words = count
        while True:
            text = " ".join(self._word() for _ in range(words))
            ids = self.router.post("/tokenize", {"content": text, "add_special": False})["tokens"]
            if len(ids) >= count:
                return [int(token) for token in ids[:count]]
            words = words * 3 // 2 + 16


def complete(router: Router, prompt: list[int], slot: int, *, predict: int = 1,
             ignore_eos: bool = False) -> Timings:
    answer = router.post("/completion", {
        "prompt": prompt, "n_predict": predict, "id_slot": slot, "cache_prompt": True,
        "ignore_eos": ignore_eos, "temperature": 0})
    return timings_of(answer, "POST /completion")


def _per_second(timings: Timings) -> str:
    return (f"{timings.prompt_n:,} tokens read in {timings.prompt_ms / 1000:.2f} s "
            f"({timings.cache_n:,} cached)")


def prompt_processing(router: Router, filler: Filler, depths: Sequence[Depth], new: int,
                      slot: int) -> list[Figure]:
    """Prompt processing of ``new`` tokens after each depth of cached tokens; then the deepest
    depth's own first read: an uncached long prompt."""
    figures, deepest = [], None
    for depth in depths:
        base = filler.tokens(depth.used) if depth.used else []
        if base:
            first = complete(router, base, slot)
            if deepest is None or first.prompt_n > deepest.prompt_n:
                deepest = first
        timings = complete(router, base + filler.tokens(new), slot)
        cap = (f" (capped: {depth.requested:,} does not fit the slot with the new tokens)"
               if depth.capped else "")
        figures.append(Figure(
            name=f"prompt processing at depth {depth.used:,}{cap}",
            value=timings.prompt_per_second, unit="tokens/s",
            how=(f"POST /completion, id_slot {slot}: {depth.used:,} tokens, then the same with "
                 f"{new:,} more: " if depth.used else
                 f"POST /completion, id_slot {slot}, {new:,} new tokens: ")
            + _per_second(timings)))
    if deepest is not None:
        figures.append(Figure(
            name=f"uncached prompt of {deepest.prompt_n:,} tokens", value=deepest.prompt_ms / 1000,
            unit="s", how=f"POST /completion, id_slot {slot}, a prompt no cache holds: "
                          f"{deepest.prompt_per_second:,.0f} tokens/s"))
    return figures


def generation(router: Router, filler: Filler, slots: Sequence[int], tokens: int) -> list[Figure]:
    """``tokens`` generated on each of ``slots`` at once (each session on its own slot)."""
    prompts = [filler.tokens(16) for _ in slots]
    start = threading.Barrier(len(slots))

    def one(index: int) -> Timings:
        start.wait()
        return complete(router, prompts[index], slots[index], predict=tokens, ignore_eos=True)

    with ThreadPoolExecutor(len(slots)) as pool:
        each = list(pool.map(one, range(len(slots))))
    sessions = "one active session" if len(slots) == 1 else f"{len(slots)} active sessions"
    where = f"id_slot {slots[0]}" if len(slots) == 1 else \
        f"id_slot {', '.join(map(str, slots))} at once"
    speeds = ", ".join(f"{t.predicted_per_second:.1f}" for t in each)
    how = f"POST /completion on {where}, {tokens} tokens each (ignore_eos): {speeds} tokens/s"
    mean = sum(t.predicted_per_second for t in each) / len(each)
    return [Figure(name=f"generation, {sessions} (per session)", value=mean, unit="tokens/s",
                   how=how)]


def rewind(router: Router, filler: Filler, length: int, slot: int) -> Figure:
    """A prompt, then one that shares its first half and diverges there: the server's timings
    say how much of the shared half it found cached and how much it read again."""
    prompt = filler.tokens(length)
    shared = length // 2
    complete(router, prompt, slot)
    second = complete(router, prompt[:shared] + filler.tokens(length - shared), slot)
    reread = max(0, shared - second.cache_n)
    return Figure(
        name="rewind: tokens of the shared prefix read again after a divergence",
        value=reread, unit="tokens",
        how=f"POST /completion, id_slot {slot}: {length:,} tokens, then the first {shared:,} of "
            f"them and {length - shared:,} others: cache_n {second.cache_n:,}, prompt_n "
            f"{second.prompt_n:,} (a cache that rewinds re-reads none of the {shared:,}; one "
            f"that cannot re-reads them all)")
