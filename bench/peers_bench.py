"""Benchmark: Boxmaker beside the harnesses users run instead, on one llama-server, in one run.

    uv run python bench/peers_bench.py [--harnesses boxmaker,hermes,openclaw] [--no-write]

Not a test. One llama-server router (the project's ``qwen-tools`` preset: the tiny Qwen with the
bare-JSON tool template) serves every harness in turn, all through one recording proxy
(``recording_proxy.py``) that keeps every request and the server's ``timings``:

- **Boxmaker**: the whole local stack as ``cache_bench.py`` runs it (``rig.py``), its llama
  socket moved aside and the proxy put in its place, driven over loop.sock; file reads through
  its granted ``fs.read``; loopd restarted between two turns.
- **Hermes Agent** and **OpenClaw** (``peer_harnesses.py``): installed into their own
  environments under ``~/.cache/boxmaker/peers/`` (pinned, cached, never project
  dependencies), pointed at the proxy's loopback port, each with its own default tools (its file
  tools only with ``--trimmed-peers``); every turn is one run of their command line, so each
  turn starts the harness afresh.

The same scripted conversation (``STEPS``) goes through each: two sessions, file reads, a
question needing the time, and a restart between two turns. Per request, ``request_diff.py``
says whether it strictly extends the previous request of its session and, if not, what
changed. Writes its section of docs/performance.md (bench:peers); every sentence there is
computed from this run's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from cache_bench import grants, presets, system_text, write_notes  # noqa: E402
from peer_harnesses import Hermes, OpenClaw, PeerError, PeerTurn  # noqa: E402
from peers_render import PeersRun, measured_now, render  # noqa: E402
from recording_proxy import Exchange, Recorder  # noqa: E402
from report import write_section  # noqa: E402
from rig import RigError, Stack, StackSettings, running_stack, serving_dir  # noqa: E402
from support.llama import llama_paths  # noqa: E402

MODEL = "qwen-tools"
# Boxmaker's main and background slots (it pins them), and one for each peer: a peer sends no
# slot, and the server gives a new prompt the least recently used idle slot (one no harness has
# used yet), then each later request the slot holding the most similar prompt, its own.
SLOTS = 4
SLOT_CONTEXT = 24576  # a peer's prompt with its tool schemas and the conversation fits
MAX_TOKENS = 72  # every harness: room for a tool call with a path; answers are cut there
TURN_TIMEOUT = 1200.0  # a first request of thousands of tokens on a loaded 2-core machine
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "boxmaker" / "peers"
HARNESSES = ("boxmaker", "hermes", "openclaw")
LAST_RUN = CACHE / "last-run.json"


@dataclass(frozen=True)
class Step:
    session: int
    text: str
    read: bool  # a file read: Boxmaker's first completion is asked for a tool call
    restart_before: bool = False


def steps(notes: list[Path]) -> list[Step]:
    """Eight turns, the restart and the second session early (a slow machine may stop the run
    at its time limit): session 1 reads a note, then after a restart is asked the time; session
    2 reads three notes and compares them."""
    def read(path: Path) -> str:
        return f"Read the file {path} and tell me in one sentence what it is about."
    return [
        Step(1, read(notes[0]), read=True),
        Step(1, "What time is it now? Answer with the time only.", read=False,
             restart_before=True),
        Step(2, read(notes[1]), read=True),
        Step(2, "What time is it now? Answer with the time only.", read=False),
        Step(2, read(notes[2]), read=True),
        Step(2, "Which of the two notes needs attention more often?", read=False),
        Step(2, read(notes[3]), read=True),
        Step(2, "In one sentence, what have we looked at so far?", read=False),
    ]


@dataclass
class Harness:
    key: str
    name: str
    setup: str = ""  # how it was run (command, tools)
    failure: str = ""  # why it could not be installed or configured, if so
    turns: list[PeerTurn] = field(default_factory=list)


def served_cache_ram(text: str) -> str:
    """The ``cache-ram`` value of the presets' ``[*]`` section (the server's default if none)."""
    found = re.search(r"^cache-ram = (\S+)$", text, flags=re.MULTILINE)
    return found.group(1) if found else "unset (the server's default)"


def label(key: str, session: int, turn: int) -> str:
    return f"{key}|{session}|{turn}"


class BoxmakerDriver:
    """Boxmaker's turns over loop.sock; loopd restarted before a step that asks for it."""

    def __init__(self, stack: Stack, recorder: Recorder):
        self.stack, self.recorder = stack, recorder
        self.started: set[int] = set()

    def turn(self, number: int, step: Step) -> PeerTurn:
        if step.restart_before:
            self.recorder.label = label("boxmaker-restart", step.session, number)
            self.stack.restart("loopd")
        self.recorder.label = label("boxmaker", step.session, number)
        try:
            timed = self.stack.turn(f"peers-bench-{step.session}", step.text,
                                    resume=step.session in self.started,
                                    tool_choice=["required", "none"] if step.read else [])
            result = PeerTurn(timed.seconds, True, "")
        except RigError as exc:
            result = PeerTurn(0.0, False, str(exc))
        self.started.add(step.session)
        return result


class PeerDriver:
    """A peer's turns: each one run of its command line (so each starts it afresh)."""

    def __init__(self, peer: Hermes | OpenClaw, key: str, workdir: Path, recorder: Recorder):
        self.peer, self.key, self.workdir, self.recorder = peer, key, workdir, recorder

    def turn(self, number: int, step: Step) -> PeerTurn:
        self.recorder.label = label(self.key, step.session, number)
        return self.peer.turn(step.session, step.text, self.workdir, TURN_TIMEOUT)


def prepare_peer(peer: Hermes | OpenClaw, key: str, directory: Path, port: int,
                 harness: Harness, *, model: str = MODEL, max_tokens: int = MAX_TOKENS) -> bool:
    try:
        peer.install()
        harness.setup = peer.configure(directory / key / "home",
                                       base_url=f"http://127.0.0.1:{port}/v1",
                                       model=model, max_tokens=max_tokens)
    except (PeerError, OSError) as exc:
        harness.failure = str(exc)
        print(f"{key}: {exc}", file=sys.stderr)
        return False
    return True


@contextlib.contextmanager
def recording(stack: Stack, directory: Path) -> Iterator[tuple[Recorder, int]]:
    """The recording proxy in front of the stack's llama-server; yields it and its loopback port.
    The proxy takes the llama socket's place: inferproxy opens a connection per connection of
    loopd's, so from loopd's next one on every request passes through it; the peers reach it on
    the port."""
    with Recorder(directory / "llama-upstream.sock") as recorder:
        stack.layout.socket("llama").rename(recorder.upstream)
        recorder.serve_unix(stack.layout.socket("llama"))
        port = recorder.serve_tcp()
        time.sleep(3.0)  # loopd's pool lets idle connections go after 2 s (KEEPALIVE_EXPIRY)
        yield recorder, port


@contextlib.contextmanager
def recorded_stack(directory: Path, notes: Path,
                   settings: StackSettings) -> Iterator[tuple[Stack, Recorder, int]]:
    """The whole local stack on the default router presets, granted ``notes``, behind the
    recording proxy (``recording``): the stack, the recorder and the proxy's loopback port."""
    binary, models = llama_paths()
    with running_stack(
        directory, llama_server=binary, models=models,
        serving=serving_dir(directory, presets(SLOT_CONTEXT, SLOTS)),
        grants=grants(directory / "grants", notes), settings=settings,
    ) as stack, recording(stack, directory) as (recorder, port):
        yield stack, recorder, port


def run(chosen: list[str], minutes: float, trimmed: bool) -> PeersRun:
    """The conversation turn by turn, each turn through every harness in ``chosen`` (as
    cache_bench does): the figures of all of them grow together, and a time limit stops them all
    at the same turn. After every turn the recording so far is kept in ``LAST_RUN``."""
    directory = Path(tempfile.mkdtemp(prefix="bx-peers-"))
    notes = write_notes(directory / "notes")
    script = steps(notes)
    harnesses = {
        "boxmaker": Harness("boxmaker", "Boxmaker"),
        "hermes": Harness("hermes", f"{Hermes.name} {Hermes.version}"),
        "openclaw": Harness("openclaw", f"{OpenClaw.name} {OpenClaw.version}"),
    }
    settings = StackSettings(
        model=MODEL, max_tokens=MAX_TOKENS, per_slot_context=SLOT_CONTEXT, slot_count=SLOTS,
        system=system_text(secrets.token_hex(6)),
    )
    started = time.perf_counter()

    def outcome(exchanges: list[Exchange]) -> PeersRun:
        return PeersRun(
            harnesses=[harnesses[k] for k in HARNESSES if k in chosen], exchanges=exchanges,
            steps=script, model=MODEL, slots=SLOTS, slot_context=SLOT_CONTEXT,
            max_tokens=MAX_TOKENS, seconds=time.perf_counter() - started,
            notes=str(notes[0].parent), cache_ram=served_cache_ram(presets(SLOT_CONTEXT, SLOTS)),
            minutes=minutes, measured=measured_now(),
        )

    try:
        with recorded_stack(directory, notes[0].parent, settings) as (stack, recorder, port):
            drivers: dict[str, BoxmakerDriver | PeerDriver] = {}
            if "boxmaker" in chosen:
                drivers["boxmaker"] = BoxmakerDriver(stack, recorder)
                harnesses["boxmaker"].setup = "the local stack (`bxctl up`'s code), loop.sock"
            peers = (("hermes", Hermes(CACHE, trimmed=trimmed)),
                     ("openclaw", OpenClaw(CACHE, trimmed=trimmed)))
            for key, peer in peers:
                if key in chosen and prepare_peer(peer, key, directory, port, harnesses[key]):
                    drivers[key] = PeerDriver(peer, key, notes[0].parent, recorder)
            for number, step in enumerate(script, 1):
                if time.perf_counter() - started > minutes * 60:
                    print(f"time limit of {minutes:g} min: turns {number}.. not run",
                          file=sys.stderr)
                    break
                for key, driver in drivers.items():
                    turn = driver.turn(number, step)
                    harnesses[key].turns.append(turn)
                    print(f"{key} turn {number}: {turn.seconds:.1f} s"
                          f"{'' if turn.ok else ' FAILED ' + turn.detail[:300]}", file=sys.stderr)
                    keep(outcome(list(recorder.exchanges)))
            return outcome(list(recorder.exchanges))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def keep(outcome: PeersRun) -> None:
    """The recording so far beside the peers' installs (not committed), for ``--again``."""
    LAST_RUN.parent.mkdir(parents=True, exist_ok=True)
    LAST_RUN.write_text(json.dumps(asdict(outcome), indent=1, default=str))


def load_outcome(path: Path) -> PeersRun:
    """A run's outcome as ``main`` kept it, to write the section again without running."""
    kept = json.loads(path.read_text())
    harnesses = [Harness(**{**h, "turns": [PeerTurn(**t) for t in h["turns"]]})
                 for h in kept.pop("harnesses")]
    return PeersRun(**{
        "cache_ram": served_cache_ram(presets(SLOT_CONTEXT, SLOTS)), "minutes": 0.0,
        "measured": f"on a date, machine and load {path.name} does not record", **kept,
        "harnesses": harnesses, "exchanges": [Exchange(**e) for e in kept["exchanges"]],
        "steps": [Step(**step) for step in kept["steps"]],
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harnesses", default=",".join(HARNESSES))
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    parser.add_argument("--minutes", type=float, default=60.0,
                        help="start no turn after this many minutes (the section says so)")
    parser.add_argument("--trimmed-peers", action="store_true",
                        help="run the peers with their file tools only, not their defaults "
                             "(cheaper for them: for a machine too slow for their prompts)")
    parser.add_argument("--again", action="store_true",
                        help=f"write the section from the last run's {LAST_RUN.name}, no run")
    args = parser.parse_args()
    chosen = [h for h in args.harnesses.split(",") if h]
    unknown = sorted(set(chosen) - set(HARNESSES))
    if unknown:
        raise SystemExit(f"--harnesses: unknown {unknown}; known: {', '.join(HARNESSES)}")
    outcome = (load_outcome(LAST_RUN) if args.again
               else run(chosen, args.minutes, args.trimmed_peers))
    text = render(outcome)
    print(text if args.no_write else write_section("peers", text))


if __name__ == "__main__":
    main()
