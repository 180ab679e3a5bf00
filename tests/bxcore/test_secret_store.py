"""The SecretStore's env and file backends, and the Secret wrapper that never shows its value.
The credential backend, with real systemd-creds, is in test_secret_credentials.py."""

from __future__ import annotations

import copy
import logging
import os
import pickle
import threading
from pathlib import Path

import pytest
from bxcore.config import SecretSpec
from bxcore.errors import SecretError
from bxcore.secrets import MAX_SECRET, Secret, SecretStore

CANARY = "canary-7f3a9c1e-do-not-print"


def file_secret(tmp_path: Path, mode: int = 0o600, content: str = CANARY + "\n") -> SecretStore:
    path = tmp_path / "token"
    path.write_text(content)
    path.chmod(mode)
    return SecretStore({"token": SecretSpec(backend="file", path=path)})


def assert_hidden(error: BaseException) -> None:
    assert CANARY not in str(error) and CANARY not in repr(error)


# --- the Secret wrapper ------------------------------------------------------------------------


def test_a_secret_hides_its_value_from_repr_str_and_formatting():
    secret = Secret("token", CANARY)
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!s:>40}", repr([secret])):
        assert CANARY not in shown
        assert "token" in shown
    assert secret.reveal() == CANARY


def test_a_secret_cannot_be_pickled_or_copied():
    secret = Secret("token", CANARY)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)
    with pytest.raises(TypeError):
        copy.copy(secret)


def test_a_secret_has_no_instance_dict_to_leak_through_vars():
    with pytest.raises(TypeError):
        vars(Secret("token", CANARY))


def test_secrets_compare_by_name_and_value():
    assert Secret("a", "x") == Secret("a", "x")
    assert Secret("a", "x") != Secret("a", "y")
    assert Secret("a", "x") != Secret("b", "x")
    assert Secret("a", "x") != "x"
    undecodable = os.fsdecode(b"\xff" + CANARY.encode())  # as os.environ holds such bytes
    assert Secret("a", undecodable) == Secret("a", undecodable) != Secret("a", CANARY)


def test_an_unconfigured_secret_is_named():
    with pytest.raises(SecretError, match="'nope' is not configured in \\[secrets\\]"):
        SecretStore({}).get("nope")


# --- env ---------------------------------------------------------------------------------------


def test_env_backend_reads_the_variable():
    store = SecretStore(
        {"honcho": SecretSpec(backend="env", variable="HONCHO_KEY")},
        environ={"HONCHO_KEY": CANARY},
    )
    assert store.get("honcho").reveal() == CANARY
    assert store.names() == ["honcho"]


def test_env_backend_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("BX_TEST_SECRET", CANARY)
    store = SecretStore({"t": SecretSpec(backend="env", variable="BX_TEST_SECRET")})
    assert store.get("t").reveal() == CANARY


def test_env_backend_names_a_missing_variable():
    store = SecretStore({"honcho": SecretSpec(backend="env", variable="HONCHO_KEY")}, environ={})
    with pytest.raises(SecretError, match="environment variable HONCHO_KEY is not set"):
        store.get("honcho")


def test_env_backend_needs_a_variable():
    store = SecretStore({"honcho": SecretSpec(backend="env")}, environ={"honcho": CANARY})
    with pytest.raises(SecretError, match="backend 'env' needs 'variable'") as caught:
        store.get("honcho")
    assert_hidden(caught.value)


# --- file --------------------------------------------------------------------------------------


def test_file_backend_reads_an_owner_only_file_without_its_trailing_newline(tmp_path):
    assert file_secret(tmp_path).get("token").reveal() == CANARY


def test_file_backend_keeps_inner_newlines_and_only_strips_one(tmp_path):
    assert file_secret(tmp_path, content="a\nb\n\n").get("token").reveal() == "a\nb\n"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o610, 0o601])
def test_file_backend_refuses_a_file_group_or_others_can_use(tmp_path, mode):
    expected = f"readable by group or others \\(mode {mode:04o}\\)"
    with pytest.raises(SecretError, match=expected) as caught:
        file_secret(tmp_path, mode=mode).get("token")
    assert_hidden(caught.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_file_backend_refuses_a_file_owned_by_someone_else(tmp_path):
    store = file_secret(tmp_path)
    os.chown(tmp_path / "token", 65534, 65534)
    with pytest.raises(SecretError, match="owned by uid 65534, not by this user") as caught:
        store.get("token")
    assert_hidden(caught.value)


def test_file_backend_refuses_a_directory(tmp_path):
    (tmp_path / "dir").mkdir(mode=0o700)
    store = SecretStore({"t": SecretSpec(backend="file", path=tmp_path / "dir")})
    with pytest.raises(SecretError, match="is not a regular file"):
        store.get("t")


def test_file_backend_refuses_a_fifo_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    store = SecretStore({"t": SecretSpec(backend="file", path=fifo)})
    outcome: list[BaseException] = []

    def attempt() -> None:
        try:
            store.get("t")
        except SecretError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=attempt, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # unblock the thread before failing, so nothing is left behind
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("opening a FIFO secret blocked")
    assert "not a regular file" in str(outcome[0])


def test_file_backend_names_a_missing_file(tmp_path):
    store = SecretStore({"t": SecretSpec(backend="file", path=tmp_path / "absent")})
    with pytest.raises(SecretError, match=r"cannot open .*absent: No such file"):
        store.get("t")


def test_file_backend_needs_a_path():
    with pytest.raises(SecretError, match="backend 'file' needs 'path'"):
        SecretStore({"t": SecretSpec(backend="file")}).get("t")


def test_file_backend_refuses_an_oversized_file(tmp_path):
    with pytest.raises(SecretError, match=f"over {MAX_SECRET} bytes"):
        file_secret(tmp_path, content="x" * (MAX_SECRET + 1)).get("token")


def test_file_backend_refuses_a_file_that_is_not_utf8_without_showing_it(tmp_path):
    path = tmp_path / "token"
    path.write_bytes(CANARY.encode() + b"\xff")
    path.chmod(0o600)
    store = SecretStore({"token": SecretSpec(backend="file", path=path)})
    with pytest.raises(SecretError, match="is not UTF-8") as caught:
        store.get("token")
    assert_hidden(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is not None
    assert caught.value.__suppress_context__  # the decode error (holding the bytes) is hidden


def test_warn_plaintext_warns_about_every_file_secret(tmp_path, caplog):
    store = SecretStore({
        "b_file": SecretSpec(backend="file", path=tmp_path / "b"),
        "a_file": SecretSpec(backend="file", path=tmp_path / "a"),
        "env": SecretSpec(backend="env", variable="X"),
        "cred": SecretSpec(),
    })
    with caplog.at_level(logging.WARNING, logger="bxcore.secrets"):
        warnings = store.warn_plaintext()
    assert len(warnings) == 2
    assert "'a_file' is read from a plaintext file" in warnings[0]
    assert str(tmp_path / "a") in warnings[0]
    assert [r.getMessage() for r in caplog.records] == warnings


def test_no_warning_without_file_secrets(caplog):
    with caplog.at_level(logging.WARNING, logger="bxcore.secrets"):
        assert SecretStore({"cred": SecretSpec()}).warn_plaintext() == []
    assert caplog.records == []
