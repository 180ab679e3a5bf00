"""Secrets and permissions on the running stack.

Secrets: a canary in each SecretStore backend (a real systemd credential, an environment
variable, a file), granted to a tool that runs in the sandbox, never appears in any byte the
stack wrote: session logs, audit, taint files, memory, daemon logs, error text.

Permissions: every socket is 0600 (inferproxy's as its config says), state directories no
wider than 0750, and every state file no wider than 0640 (the owner reads role state through the
units' group).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from support.requires import needs

from .rig import directive, grant, scripted_rig, tool_results, via_call_tool

pytestmark = pytest.mark.sandbox
CANARIES = {"canary_cred": "CANARY-cred-5b1e", "canary_env": "CANARY-env-9c2d",
            "canary_file": "CANARY-file-3e7f"}
UNIT = "brokerd.service"


def credential(root: Path) -> dict[str, str]:
    """Encrypt canary_cred with systemd-creds and decrypt it where systemd would put it."""
    env = {**os.environ, "SYSTEMD_CREDENTIAL_SECRET": str(root / "hostkey" / "secret")}
    (root / "hostkey").mkdir(mode=0o700)
    plain, sealed = root / "plain", root / "canary.cred"
    plain.write_text(CANARIES["canary_cred"])
    key = "--with-key=host" if os.geteuid() == 0 else "--with-key=tpm2-absent"
    run = {"env": env, "check": True, "capture_output": True, "timeout": 60}
    subprocess.run(["systemd-creds", "encrypt", key, "--name=canary_cred", str(plain),
                    str(sealed)], **run)
    plain.unlink()
    directory = root / "credentials" / UNIT
    directory.mkdir(parents=True, mode=0o700)
    subprocess.run(["systemd-creds", "decrypt", "--name=canary_cred", str(sealed),
                    str(directory / "canary_cred")], **run)
    return {"CREDENTIALS_DIRECTORY": str(directory)}


def secrets_config(root: Path) -> str:
    # In a directory of its own: a file secret's directory is the harness's, and the rig's
    # read grant mounts a directory beside it (a grant reaching it denies every call)
    (root / "secret").mkdir(mode=0o700)
    secret_file = root / "secret" / "canary_file.secret"
    secret_file.write_text(CANARIES["canary_file"])
    secret_file.chmod(0o600)
    return f"""
[secrets.canary_cred]
backend = "credential"
[secrets.canary_env]
backend = "env"
variable = "BX_CANARY_ENV"
[secrets.canary_file]
backend = "file"
path = "{secret_file}"
"""


def echo_grant() -> str:
    return grant(["echo"], "auto", "public", argument=("text", "pattern", ".*"),
                 sandbox=f"secrets = {list(CANARIES)!r}".replace("'", '"'))


def written_by_the_stack(root: Path) -> list[Path]:
    skip = {root / "secret", root / "credentials", root / "hostkey"}
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
            and not any(p == s or s in p.parents for s in skip)]


@needs("systemd-creds")
def test_canary_secrets_never_reach_a_file_and_modes_are_tight(short_dir):
    env = {**credential(short_dir), "BX_CANARY_ENV": CANARIES["canary_env"]}
    with scripted_rig(short_dir, extra_config=secrets_config(short_dir), env=env,
                      grants={"echo.toml": echo_grant()}) as rig:
        stack = rig.stack
        echo = via_call_tool("echo", {"text": "hi"})
        done = stack.turn("sec", directive(echo), resume=False)[-1]
        assert done.kind == "turn_done", done
        (echoed,) = tool_results(stack.home, "sec")
        assert echoed["content"] == "hi", echoed  # it ran, with the three secrets injected
        secret_file = short_dir / "secret" / "canary_file.secret"
        denied = via_call_tool("fs.read", {"path": str(secret_file)})
        stack.turn("sec2", directive(denied), resume=False)
        modes = {p: stat.S_IMODE(p.lstat().st_mode) for p in (stack.home / "x").parent.rglob("*")}
        sockets = {p: stat.S_IMODE(p.lstat().st_mode) for p in (short_dir / "run").iterdir()
                   if p.is_socket() and p.name != "notify.sock"}
    files = written_by_the_stack(short_dir)
    leaks = [(p, name) for p in files for name, value in CANARIES.items()
             if value.encode() in p.read_bytes()]
    assert leaks == []
    assert sockets and all(mode == 0o600 for mode in sockets.values()), sockets
    # Role state is the owner's to read through the units' group (dirs 0750, files 0640), and
    # nobody else's; no group may write it (docs/decisions/state-permissions.md).
    wide_dirs = {p: oct(m) for p, m in modes.items() if p.is_dir() and m & 0o027}
    wide_files = {p: oct(m) for p, m in modes.items() if p.is_file() and m & 0o037}
    print(f"secrets: {len(files)} files, {sum(p.stat().st_size for p in files)} bytes grepped; "
          f"sockets {sorted(p.name for p in sockets)}; "
          f"wider than 0750/0640: {wide_dirs} {wide_files}")
    assert wide_files == {}
    assert wide_dirs == {}
