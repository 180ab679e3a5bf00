"""``bxctl doctor``: every self-test and check of the running setup, each named, each with what
to do when it fails. Exit 0 when all pass, 1 when any fails."""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
from bxcore import cli_errors
from bxcore.config import Config, load_config
from bxcore.errors import BoxmakerError
from bxcore.secrets import SecretStore

from .roles import config_option, default_config, run_role


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


# gateway.sock is left out: a host without Mattermost runs no gatewayd.
CHECKED_SOCKETS = ("loop", "broker", "approve", "memory", "infer")


def check_sockets(config: Config) -> list[Check]:
    """Each role's socket exists, is a socket with the mode (and group) the config gives it, and
    answers."""
    checks = []
    for name in CHECKED_SOCKETS:
        served = config.served(name)
        path, mode, label = served.path, served.mode, f"socket {name}"
        try:
            info = path.stat()
            gid = served.gid("config")
        except OSError:
            checks.append(Check(label, False, f"{path} does not exist",
                                "start the role that serves it (`bxctl status`, `bxctl up`)"))
            continue
        except BoxmakerError as exc:
            checks.append(Check(label, False, str(exc), "create the group or fix the setting"))
            continue
        actual = stat.S_IMODE(info.st_mode)
        if not stat.S_ISSOCK(info.st_mode):
            checks.append(Check(label, False, f"{path} is not a socket", "remove it, restart"))
        elif actual != mode:
            checks.append(Check(label, False, f"{path} has mode {actual:04o}, expected {mode:04o}"
                                f" ({served.mode_key})",
                                "a role created it with the wrong umask: restart it; report it"))
        elif gid is not None and info.st_gid != gid:
            checks.append(Check(label, False, f"{path} has group {info.st_gid}, expected "
                                f"{served.group} ({served.group_key})",
                                "restart the role that serves it; report it"))
        elif not _answers(path):
            checks.append(Check(label, False, f"{path} refuses connections",
                                "a stale socket: restart the role that serves it"))
        else:
            checks.append(Check(label, True, f"{path} ({actual:04o})"))
    return checks


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def check_credentials(config: Config) -> list[Check]:
    store = SecretStore(config.secrets)
    checks = []
    for key in store.names():
        spec = config.secrets.get(key)
        if spec is not None and spec.backend == "credential" and not os.environ.get(
            "CREDENTIALS_DIRECTORY"
        ):  # the owner's shell: systemd decrypts it for its role's unit, and for nobody else
            checks.append(Check(f"secret {key}", True, "a systemd credential of its role's unit"))
            continue
        try:
            store.get(key)
        except BoxmakerError as exc:  # the message never contains the secret
            checks.append(Check(f"secret {key}", False, str(exc),
                                "see docs/deploy.md (systemd-creds encrypt)"))
        else:
            checks.append(Check(f"secret {key}", True, "readable"))
    checks.extend(Check("secret in plaintext", False, text, "move it to a systemd credential")
                  for text in store.warn_plaintext())
    return checks


def role_check(name: str, role: str, args: list[str], fix: str, config_path: Path, *,
               failures: bool = False) -> Check:
    """The role command's verdict (its last line); with ``failures``, a failed run's ``FAIL``
    lines before it, which name what to change (the self-test's slot_switch names the server
    flag)."""
    result = run_role(role, args, config_path, capture=True)
    output = (result.stdout + result.stderr).strip().splitlines()
    detail = output[-1] if output else f"exit {result.returncode}"
    if failures and result.returncode != 0:
        detail = "; ".join([*(line for line in output if line.startswith("FAIL ")), detail])
    return Check(name, result.returncode == 0, detail, "" if result.returncode == 0 else fix)


def check_taint(config_path: Path, config: Config) -> Check:
    with tempfile.TemporaryDirectory() as out:
        result = run_role("brokerd", ["taint", "rebuild", "--out", out], config_path, capture=True)
        if result.returncode != 0:
            return Check("taint files", False, result.stderr.strip(), "see brokerd's log")
        live = config.paths.home / "broker" / "sessions"
        rebuilt = {p.name: p.read_bytes() for p in Path(out).glob("*.json")}
        current = {p.name: p.read_bytes() for p in live.glob("*.json")} if live.is_dir() else {}
    differ = sorted(n for n in rebuilt.keys() | current.keys()
                    if rebuilt.get(n) != current.get(n))
    if differ:
        return Check("taint files", False, f"differ from the audit log: {', '.join(differ)}",
                     "`bxctl taint rebuild` rewrites them from the audit log")
    return Check("taint files", True, f"{len(current)} match their rebuild from the audit log")


def check_honcho(config: Config) -> Check:
    """Whether the configured Honcho answers, and which workspaces memoryd uses there."""
    honcho = config.memory.honcho
    if honcho is None:
        return Check("honcho", True, "not configured: memory stays on this machine")
    readable = ", ".join(f"{w} ({'trusted' if honcho.is_trusted(w) else 'untrusted'})"
                         for w in honcho.readable())
    where = f"turns go to workspace {honcho.workspace!r}; ask_memory reads {readable}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # as memoryd: no proxy
    try:
        with opener.open(f"{honcho.url}/health", timeout=5) as response:
            status = response.status
    except (OSError, urllib.error.URLError) as exc:
        return Check("honcho", False, f"{honcho.url} does not answer ({exc}); {where}",
                     "start Honcho (`bxctl up --honcho` runs a local one) or fix "
                     "[memory.honcho] url; memoryd keeps every turn and catches up")
    if status != 200:
        return Check("honcho", False, f"{honcho.url}/health answered HTTP {status}; {where}",
                     "see Honcho's log")
    return Check("honcho", True, f"{honcho.url} answers; {where}")


def run_checks(config_path: Path) -> list[Check]:
    try:
        config = load_config(config_path)
    except BoxmakerError as exc:
        return [Check("config", False, str(exc), "fix the key it names")]
    checks = [Check("config", True, str(config_path))]
    steps: list[Callable[[], list[Check] | Check]] = [
        lambda: role_check("model server", "loopd", ["selftest"],
                           "compare [inference.serving] with the server's launch flags; a "
                           "failed slot_switch names the flag to set (docs/deploy.md)",
                           config_path, failures=True),
        lambda: role_check("serving since the latest session", "loopd", ["serving"],
                           "sessions lost their cache once; if the change was meant, the next "
                           "session records it (and update [inference.serving])", config_path),
        lambda: role_check("baseline budget", "loopd", ["budget"],
                           "shorten system.md or the identity files", config_path),
        lambda: check_sockets(config),
        lambda: role_check("grant files", "brokerd", ["grants", "check"],
                           "fix or remove the refused grant file (every call is denied now)",
                           config_path),
        lambda: role_check("audit chain", "brokerd", ["audit", "verify"],
                           "the audit log was altered: keep a copy, investigate the named "
                           "records", config_path),
        lambda: check_taint(config_path, config),
        lambda: check_credentials(config),
        lambda: check_honcho(config),
    ]
    for step in steps:
        result = step()
        checks.extend(result if isinstance(result, list) else [result])
    return checks


@click.command("doctor", cls=cli_errors.Command)
@config_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per check.")
def doctor_command(config_path: Path | None, as_json: bool) -> None:
    """Run every check of the setup: model server settings, the baseline budget, sockets and
    their modes, grant files, the audit chain, taint files, credentials, Honcho.

    Exit 0 when all pass, 1 when any fails. Example: bxctl doctor
    """
    checks = run_checks(config_path or default_config())
    for check in checks:
        if as_json:
            click.echo(json.dumps(check.__dict__, sort_keys=True))
            continue
        mark = "ok  " if check.ok else "FAIL"
        click.echo(f"{mark} {check.name}: {check.detail}")
        if not check.ok and check.fix:
            click.echo(f"     what to do: {check.fix}")
    if not all(check.ok for check in checks):
        raise SystemExit(1)


COMMANDS = [doctor_command]
