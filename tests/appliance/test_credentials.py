"""Secrets reach a role as systemd delivers them: ``systemd-creds encrypt`` on the host, then
``LoadCredentialEncrypted=`` decrypts into ``$CREDENTIALS_DIRECTORY`` (a 0500 directory of
0400 files named by credential id), which the role's container sees read-only and bxcore's
SecretStore reads with its ``credential`` backend.

systemd is not PID 1 here, so the unit's decrypt step is done with ``systemd-creds decrypt``
into a directory laid out as systemd lays it out (measured under a real systemd 252; see
../shared/reference/containers-nix-systemd.md, section 11.1).
"""

from __future__ import annotations

import stat

import pytest
from bxcore.config import SecretSpec
from bxcore.errors import SecretError
from bxcore.secrets import SecretStore
from bxctl.stack import load_manifest, podman_args
from support.requires import needs
from support.systemd import creds, encrypt, load_as_systemd_does

pytestmark = needs("systemd-creds")

TOKEN = "mm-bot-token-7f3a9c"


@pytest.fixture
def credentials_dir(tmp_path):
    encrypted = tmp_path / "mattermost_token.cred"
    encrypt("mattermost_token", TOKEN.encode() + b"\n", encrypted)
    assert TOKEN.encode() not in encrypted.read_bytes()  # encrypted at rest
    directory = load_as_systemd_does(
        tmp_path / "run-credentials", "boxmaker-gatewayd.service", {"mattermost_token": encrypted}
    )
    yield directory
    directory.chmod(0o700)


def test_the_secret_store_reads_a_systemd_creds_secret_from_the_credentials_directory(
    credentials_dir,
):
    assert stat.S_IMODE(credentials_dir.stat().st_mode) == 0o500
    assert stat.S_IMODE((credentials_dir / "mattermost_token").stat().st_mode) == 0o400
    store = SecretStore(
        {"mattermost_token": SecretSpec()}, environ={"CREDENTIALS_DIRECTORY": str(credentials_dir)}
    )
    secret = store.get("mattermost_token")
    assert secret.reveal() == TOKEN
    assert TOKEN not in repr(secret)


def test_the_container_sees_the_directory_where_its_environment_says(credentials_dir):
    manifest = load_manifest()
    args = podman_args(manifest, "gatewayd", image="localhost/boxmaker/gatewayd@sha256:" + "0" * 64,
                       credentials=str(credentials_dir))  # fmt: skip
    mount = f"--volume={credentials_dir}:{manifest.paths.credentials}:ro"
    assert mount in args
    assert f"--env=CREDENTIALS_DIRECTORY={manifest.paths.credentials}" in args


def test_a_credential_encrypted_under_another_name_is_refused_by_the_decrypt_step(tmp_path):
    encrypted = tmp_path / "other.cred"
    encrypt("other", TOKEN.encode(), encrypted)
    done = creds("decrypt", "--name=mattermost_token", str(encrypted), str(tmp_path / "out"))
    assert done.returncode != 0 and b"does not match" in done.stderr


def test_without_the_credential_the_secret_store_says_which_and_how(tmp_path):
    store = SecretStore({"mattermost_token": SecretSpec()}, environ={})
    with pytest.raises(
        SecretError, match=r"CREDENTIALS_DIRECTORY is not set.*LoadCredentialEncrypted"
    ):
        store.get("mattermost_token")
