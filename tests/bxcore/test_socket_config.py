"""Each served socket's mode and group: 0600 and the process's group by default (one user runs
the whole stack), 0660 and a group where another user must connect; never open to every user."""

from __future__ import annotations

import pytest
from bxcore.config import parse_config
from bxcore.errors import ConfigError

SECTIONS = {  # socket: (section, mode key, group key)
    "loop": ("channel", "mode", "group"),
    "broker": ("broker", "mode", "group"),
    "approve": ("broker", "approve_mode", "approve_group"),
    "memory": ("memory", "mode", "group"),
    "gateway": ("gateway", "mode", "group"),
}


@pytest.mark.parametrize("name", SECTIONS)
def test_by_default_only_the_serving_user_may_connect(name):
    served = parse_config("", "config.toml").served(name)
    assert (served.mode, served.group) == (0o600, None)


@pytest.mark.parametrize("name", SECTIONS)
@pytest.mark.parametrize("written", ["0o660", '"0660"'])  # TOML's octal, or text as Nix writes it
def test_mode_and_group_are_read_from_the_sockets_section(name, written):
    section, mode_key, group_key = SECTIONS[name]
    text = f'[{section}]\n{mode_key} = {written}\n{group_key} = "boxmaker"\n'
    served = parse_config(text, "config.toml").served(name)
    assert (served.mode, served.group) == (0o660, "boxmaker")
    assert (served.mode_key, served.group_key) == (
        f"{section}.{mode_key}",
        f"{section}.{group_key}",
    )


def test_the_path_default_is_in_the_run_directory():
    config = parse_config('[paths]\nrun = "/run/bx"\n[memory]\nsocket = "/srv/m.sock"\n', "c")
    assert str(config.served("approve").path) == "/run/bx/approve.sock"
    assert str(config.served("memory").path) == "/srv/m.sock"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0o666", "0666 lets every user on the host connect; give access to a group instead"),
        ("0o601", "lets every user"),
        ('"rw-rw----"', "expected a mode such as 0o660"),
        ("true", "Input should be a valid integer"),
    ],
)
def test_a_socket_open_to_everyone_or_a_bad_mode_is_refused_naming_the_key(value, message):
    with pytest.raises(ConfigError, match=f"config.toml: channel.mode: .*{message}"):
        parse_config(f"[channel]\nmode = {value}\n", "config.toml")


def test_an_unknown_group_is_an_error_naming_the_file_and_key():
    config = parse_config('[broker]\napprove_group = "no-such-group-bx"\n', "config.toml")
    with pytest.raises(ConfigError, match=r"config\.toml: broker\.approve_group: no such group"):
        config.served("approve").gid("config.toml")


def test_a_numeric_group_is_a_gid():
    config = parse_config('[gateway]\ngroup = "4242"\n', "config.toml")
    assert config.served("gateway").gid("config.toml") == 4242


@pytest.mark.parametrize(
    ("text", "key", "instead"),
    [
        ('[inference]\nsocket = "/srv/i.sock"\n', "inference.socket", "inferproxy.socket"),
        ('[broker]\ngateway_socket = "/srv/g.sock"\n', "broker.gateway_socket", "gateway.socket"),
    ],
)
def test_a_socket_has_one_key_and_its_old_client_side_key_is_an_error(text, key, instead):
    with pytest.raises(ConfigError, match=rf"^config\.toml: {key}: .* set by {instead} alone$"):
        parse_config(text, "config.toml")


@pytest.mark.parametrize(("section", "name"), [("inferproxy", "infer"), ("gateway", "gateway")])
def test_the_servers_key_is_the_path_its_clients_connect_to(section, name):
    config = parse_config(f'[{section}]\nsocket = "/srv/s.sock"\n', "config.toml")
    assert str(config.served(name).path) == "/srv/s.sock"
