"""The credential backend, for real: systemd-creds encrypts a canary, decrypts it into a directory
laid out as systemd lays out $CREDENTIALS_DIRECTORY (/run/credentials/<unit>/, dir 0500, files
0400), and the SecretStore reads it from there.

As root the host key is used (SYSTEMD_CREDENTIAL_SECRET points it at a temp file, so the machine's
/var/lib/systemd/credential.secret is neither created nor used); otherwise the null key
``tpm2-absent``, which decrypts as non-root (../shared/reference/containers-nix-systemd.md 11.1).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bxcore.config import SecretSpec
from bxcore.errors import SecretError
from bxcore.secrets import SecretStore
from support.requires import needs

CANARY = "canary-2b8e51d0-never-in-a-message"
UNIT = "loopd.service"

pytestmark = needs("systemd-creds")


def systemd_creds(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["systemd-creds", *args], env=env, capture_output=True, check=True, timeout=60
    )


@pytest.fixture
def creds_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SYSTEMD_CREDENTIAL_SECRET"] = str(tmp_path / "host-key" / "credential.secret")
    (tmp_path / "host-key").mkdir(mode=0o700)
    return env


def key_option() -> str:
    return "--with-key=host" if os.geteuid() == 0 else "--with-key=tpm2-absent"


@pytest.fixture
def credentials_directory(tmp_path: Path, creds_env: dict[str, str]) -> Iterator[Path]:
    """Encrypt the canary as credential ``mattermost_token`` and decrypt it where systemd would."""
    plain = tmp_path / "plain"
    plain.write_text(CANARY)
    encrypted = tmp_path / "mattermost_token.cred"
    systemd_creds(
        "encrypt", key_option(), "--name=mattermost_token", str(plain), str(encrypted),
        env=creds_env,
    )
    plain.unlink()
    assert CANARY.encode() not in encrypted.read_bytes()

    directory = tmp_path / "credentials" / UNIT
    directory.mkdir(parents=True, mode=0o700)
    target = directory / "mattermost_token"
    systemd_creds(
        "decrypt", "--name=mattermost_token", str(encrypted), str(target), env=creds_env
    )
    target.chmod(0o400)
    directory.chmod(0o500)
    yield directory
    directory.chmod(0o700)  # so the temp dir can be removed by a non-root user too


def test_the_layout_is_the_one_systemd_makes(credentials_directory):
    assert stat.S_IMODE(credentials_directory.stat().st_mode) == 0o500
    assert stat.S_IMODE((credentials_directory / "mattermost_token").stat().st_mode) == 0o400


def test_a_systemd_credential_is_read_through_the_store(credentials_directory):
    store = SecretStore(
        {"mattermost_token": SecretSpec()},
        environ={"CREDENTIALS_DIRECTORY": str(credentials_directory)},
    )
    secret = store.get("mattermost_token")
    assert secret.reveal() == CANARY
    assert CANARY not in repr(secret) and CANARY not in str(secret)


def test_the_credential_name_can_differ_from_the_secret_key(credentials_directory, monkeypatch):
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials_directory))
    store = SecretStore({"token": SecretSpec(backend="credential", name="mattermost_token")})
    assert store.get("token").reveal() == CANARY


def test_the_credential_is_bound_to_its_name(tmp_path, credentials_directory, creds_env):
    # systemd refuses to decrypt a credential under another name: a unit cannot be handed a
    # credential meant for another id.
    encrypted = tmp_path / "mattermost_token.cred"
    with pytest.raises(subprocess.CalledProcessError) as caught:
        systemd_creds("decrypt", "--name=other", str(encrypted), "-", env=creds_env)
    assert b"does not match" in caught.value.stderr
    assert CANARY.encode() not in caught.value.stdout


def test_a_missing_credential_is_named_without_any_value(credentials_directory):
    store = SecretStore(
        {"honcho_key": SecretSpec()},
        environ={"CREDENTIALS_DIRECTORY": str(credentials_directory)},
    )
    with pytest.raises(SecretError, match=r"'honcho_key': cannot open .*honcho_key") as caught:
        store.get("honcho_key")
    assert CANARY not in str(caught.value)


def test_no_credentials_directory_is_a_clear_error():
    store = SecretStore({"mattermost_token": SecretSpec()}, environ={})
    with pytest.raises(SecretError, match=r"CREDENTIALS_DIRECTORY is not set.*LoadCredential"):
        store.get("mattermost_token")


@pytest.mark.parametrize("name", ["../mattermost_token", "a/b", ".", "..", ""])
def test_a_credential_name_that_is_not_a_plain_name_is_refused(credentials_directory, name):
    store = SecretStore(
        {"token": SecretSpec(name=name or None)} if name else {"": SecretSpec()},
        environ={"CREDENTIALS_DIRECTORY": str(credentials_directory / "sub")},
    )
    with pytest.raises(SecretError, match="is not a plain name"):
        store.get("token" if name else "")
