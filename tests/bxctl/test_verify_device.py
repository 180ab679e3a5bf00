"""``bxctl verify-device`` end to end against the real llama-server router (serving/presets.ini,
the tiny Qwen with the bare-JSON tool template) and a real inferproxy, as a deployed config
names them, with the depths, trial counts and slots scaled down (the full figures: the long
profile's or the owner's run, docs/deploy.md).

Properties: the command exits 0 on a server that keeps the contract; the document it writes
has every section, every figure it promises, each with a numeric value; and nothing under the
deployed config's home changes (its sessions, state and identity files are only read).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from bxctl.device.document import SECTIONS
from support.llama import proxied, start_router

pytestmark = pytest.mark.real_server

BXCTL = Path(sys.executable).parent / "bxctl"
# Slots of half the presets' 4096 tokens: the deepest depth is capped to what fits a slot, and
# reading that prompt uncached is most of the command's time here.
SLOT_CONTEXT = 2048
NEW_TOKENS = 32
SCALED = ["--depths", "0,256,100000", "--new-tokens", str(NEW_TOKENS), "--generate", "4",
          "--tool-trials", "2", "--turns", "2", "--rewind-tokens", "128",
          "--reasoning-tokens", "8", "--queued-tokens", "4"]
FIGURES = ("prompt processing at depth 0", "prompt processing at depth 256",
           f"prompt processing at depth {SLOT_CONTEXT - NEW_TOKENS - 1:,} (capped",
           "uncached prompt of",
           "generation, one active session", "generation, 2 active sessions",
           "tool calls parsed", "cache reuse: tokens of earlier prompts re-read",
           "queued request: seconds to its first event", "rewind: tokens of the shared prefix")


def tree(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def deployed(directory: Path, router_socket: Path, infer_socket: Path) -> Path:
    """A deployed config: the router as inferproxy's upstream, its expected serving settings,
    an owner's home with an identity file and a session of theirs."""
    home = directory / "home"
    (home / "memory").mkdir(parents=True)
    (home / "memory" / "core.md").write_text("The owner prefers short answers.\n")
    (home / "sessions" / "owner-1").mkdir(parents=True)
    (home / "sessions" / "owner-1" / "0.jsonl").write_text("{}\n")
    config = directory / "config.toml"
    config.write_text(
        f'[paths]\nhome = "{home}"\nrun = "{directory}/run"\n'
        f'[inferproxy]\nsocket = "{infer_socket}"\nupstream = "unix:{router_socket}"\n'
        f'[inference]\nmodel = "qwen-tools"\nmax_tokens = 64\nliveness_timeout = 600.0\n'
        f'[inference.sampling]\ntemperature = 0.0\n'
        f'[inference.serving]\nslot_count = 2\nper_slot_context = {SLOT_CONTEXT}\n'
        f'kv_cache_type = "f16"\n'
        f'[loop]\nregistry = "{registry(directory)}"\nmemory = "off"\n')  # no memoryd here
    return config


def registry(directory: Path) -> Path:
    """The toolkit's registry, as the deployed config names it (``bx-tool schemas``)."""
    path = directory / "toolkit-schemas.json"
    subprocess.run([str(BXCTL.parent / "bx-tool"), "schemas", "--out", str(path)], check=True)
    return path


def test_verify_device_writes_every_section_and_figure_and_touches_no_owner_state():
    with tempfile.TemporaryDirectory(prefix="bx-vd-") as scratch, \
            start_router("-c", str(2 * SLOT_CONTEXT)) as router, \
            proxied(router.socket) as infer:
        directory = Path(scratch)
        config = deployed(directory, router.socket, infer)
        before = tree(directory / "home")
        out = directory / "out" / "inference-contract.md"
        result = subprocess.run([str(BXCTL), "verify-device", "--config", str(config), "--out",
                                 str(out), *SCALED], capture_output=True, text=True, check=False)
        assert tree(directory / "home") == before
        document = out.read_text()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout
    headings = re.findall(r"^## (.+)$", document, flags=re.MULTILINE)
    assert headings == list(SECTIONS)
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \| ([^|]+) \| (.+) \|$",
                      document.split("## Measurements")[1].split("## ")[0], flags=re.MULTILINE)
    figures = {name: value for name, value, _, _ in rows if name != "Figure"}  # past the head
    for wanted in FIGURES:
        named = [name for name in figures if name.startswith(wanted)]
        assert named, (wanted, sorted(figures))
        assert re.fullmatch(r"-?[\d,]+(\.\d+)?", figures[named[0]]), (named, figures[named[0]])
    assert "loopd selftest" in document and "loopd budget" in document
    assert "(loopd restarted here)" in document
