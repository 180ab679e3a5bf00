"""The booted appliance's host as the module makes it, and the owner's hands on it: what
tests/appliance/test_boot.py installs into the root before it boots, and how its tests act in
the machine (as the owner, or as a role's user with bxcore's own frame client)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import roles as images  # images/ is on sys.path (tests/appliance/conftest.py)
from bximage import toolkit as toolkit_image

from . import boot
from .nix import REPO
from .stack import NOTE_MARKER, ROLES, Appliance, write_config

UNITS = [f"boxmaker-{role}" for role in ROLES] + ["boxmaker-tools"]
NOTE = Path("/home/owner/notes/herons.md")
INBOX = Path("/home/owner/inbox")
# services.boxmaker.grantableTrees: they exist before brokerd starts (its container binds them).
GRANTABLE = [str(NOTE.parent), str(INBOX)]
TURN_WAIT = 900.0  # a tiny model on a shared 2-core machine: a bound on hanging, not a measure
EGRESS = {"router": ["127.0.0.1"], "mattermost": ["127.0.0.1"], "grants": [], "honcho": []}


def install(root: Path, appliance: Appliance, runtime: str) -> None:
    """Everything the module puts on the host, into the root before it boots."""
    manifest = appliance.manifest
    setup = boot.Install(root, runtime=runtime)
    setup.users()
    setup.commands(["bxctl", *ROLES])
    setup.tmpfiles()
    setup.containers_conf()
    for role in ROLES:
        built = images.build(role)
        setup.image(role, built.layout, built.digest)
    toolkit = toolkit_image.build(toolkit_image.default_cache())
    setup.image("toolkit", toolkit.layout, toolkit.digest)
    token = setup.credential("mattermost_token", appliance.bot[1].encode() + b"\n")
    for role in ROLES:
        given = {"mattermost_token": token} if "mattermost_token" in (
            manifest.roles[role].credentials) else {}  # fmt: skip
        setup.unit(role, EGRESS.get(manifest.roles[role].egress, []), given,
                   grantable=GRANTABLE)
    setup.sockets()
    setup.tool_runtime()
    for directory in (manifest.paths.config_dir, manifest.paths.grants, manifest.paths.jobs):
        setup.path(directory).mkdir(parents=True, exist_ok=True)
    write_config(appliance, f"localhost/{manifest.tools.image}@{toolkit.digest}", into=root)
    for path in setup.path("/etc/boxmaker").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    # The owner's note, in a directory the owner opened to the units' group (docs/deploy.md).
    notes = setup.path(str(NOTE.parent))
    notes.mkdir(parents=True)
    setup.path(str(NOTE)).write_text(f"# Herons\n\n{NOTE_MARKER}\n")
    setup.chroot("chown", "-R", f"{boot.OWNER}:{boot.OWNER}", str(NOTE.parent))
    setup.chroot("chgrp", manifest.group, str(NOTE.parent), str(NOTE))
    setup.chroot("chmod", "0711", f"/home/{boot.OWNER}")
    setup.chroot("chmod", "0750", str(NOTE.parent))
    setup.chroot("chmod", "0640", str(NOTE))
    # The inbox a write grant names, opened to the units' group (docs/deploy.md).
    setup.path(str(INBOX)).mkdir()
    setup.chroot("chown", f"{boot.OWNER}:{manifest.group}", str(INBOX))
    setup.chroot("chmod", "0770", str(INBOX))


def wait_active(machine: boot.Machine, unit: str) -> str:
    deadline = time.monotonic() + boot.BOOT_WAIT
    while time.monotonic() < deadline:
        state = machine.systemctl("is-active", unit).stdout.strip()
        if state not in ("activating", "deactivating", "reloading"):
            return state
        time.sleep(1)
    return "activating"


def owner(machine: boot.Machine, *argv: str, timeout: float = TURN_WAIT
          ) -> subprocess.CompletedProcess[str]:
    """``argv`` as the owner; when it fails, the machine's last log lines follow its stderr."""
    done = machine.run(*argv, user=boot.OWNER, timeout=timeout)
    if done.returncode != 0:
        log = machine.run("journalctl", "-n", "25", "--no-pager", "-o", "cat").stdout
        done.stderr += f"\n-- the machine's journal:\n{log}"
    return done


CONFIG = Path("/etc/boxmaker/config/boxmaker.toml")

SEND_FRAME = """
import json, site, sys
site.addsitedir({site!r})
from bxcore.frames import Frame
from bxcore.framesync import SyncFrameSocket
path, kind, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    with SyncFrameSocket.connect(path) as sock:
        sock.write(Frame(kind=kind, final=False, body=body))
        while not (frame := sock.read(timeout=900)).final:
            pass
        print(json.dumps(frame.body))
except Exception as exc:
    print(f"refused: {{exc}}")
"""


def send_frame(booted: boot.Machine, user: str, path: str, kind: str, body: dict) -> str:
    """One request frame on ``path`` as ``user`` (a role's user), with bxcore's own client;
    the body of the final answer, or ``refused: <why>``."""
    site = str(next((REPO / ".venv" / "lib").glob("python3.*/site-packages")))
    done = booted.run("python3", "-sB", "-c", SEND_FRAME.format(site=site), path, kind,
                      json.dumps(body), user=user)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def set_config(booted: boot.Machine, section: str, line: str) -> None:
    """A key the owner adds in services.boxmaker.settings: the config file gets it."""
    config = booted.root / CONFIG.relative_to("/")
    text = config.read_text()
    assert f"[{section}]\n" in text, text
    config.write_text(text.replace(f"[{section}]\n", f"[{section}]\n{line}\n", 1))
