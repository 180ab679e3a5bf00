"""The role manifest: one file, read by Nix and by Python, giving the same podman arguments.

Each test names the brief's rule it checks: loopd has no network, inferproxy and memoryd reach
only their one peer, a role is given only its own sockets, the config agrees with the mounts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bxcore.config import config_from_dict
from bxcore.errors import ConfigError
from bxctl.stack import load_manifest, parse_manifest, podman_args, tool_runtime_args
from bxctl.stack.manifest import DEFAULT_MANIFEST

from .nix import lib_expression, needs_nix, nix_eval, nix_string

MANIFEST = load_manifest()
ROLES = sorted(MANIFEST.roles)
DIGEST = "sha256:" + "0123456789abcdef" * 4


def image_of(role: str) -> str:
    return f"localhost/boxmaker/{role}@{DIGEST}"


def credentials_of(role: str) -> str | None:
    return f"/run/credentials/boxmaker-{role}.service" if MANIFEST.roles[role].credentials else None


def flag_values(args: list[str], flag: str) -> list[str]:
    return [arg.split("=", 1)[1] for arg in args if arg.startswith(flag + "=")]


def test_every_role_of_the_brief_is_in_the_manifest():
    assert ROLES == ["brokerd", "gatewayd", "inferproxy", "loopd", "memoryd"]


def test_loopd_has_no_network_the_others_reach_one_peer_brokerd_only_what_grants_name():
    networks = {role: (MANIFEST.roles[role].network, MANIFEST.roles[role].egress) for role in ROLES}
    assert networks == {
        "loopd": ("none", "none"),
        "brokerd": ("host", "grants"),  # its per-call egress proxy; the tool runtime has none
        "inferproxy": ("host", "router"),
        "memoryd": ("host", "honcho"),
        "gatewayd": ("host", "mattermost"),
    }


@pytest.mark.parametrize("role", ROLES)
def test_a_role_runs_by_digest_read_only_without_capabilities(role):
    args = podman_args(MANIFEST, role, image=image_of(role), credentials=credentials_of(role))
    assert args[0] == "run"
    for flag in ("--pull=never", "--read-only", "--cap-drop=ALL",
                 "--security-opt=no-new-privileges", "--sdnotify=container"):  # fmt: skip
        assert flag in args
    assert flag_values(args, "--network") == [MANIFEST.roles[role].network]
    tail = args[args.index(image_of(role)) :]
    assert tail == [image_of(role), role, "serve", "--config", "/etc/boxmaker/config/boxmaker.toml"]


@pytest.mark.parametrize("role", ROLES)
def test_a_role_is_given_exactly_its_sockets_writable_only_where_it_serves(role):
    args = podman_args(MANIFEST, role, image=image_of(role), credentials=credentials_of(role))
    mounted = {
        volume.split(":")[0]: volume.split(":")[2]
        for volume in flag_values(args, "--volume")
        if volume.startswith(MANIFEST.paths.run + "/")
    }
    expected = {}
    for name, socket in MANIFEST.sockets.items():
        if socket.server == role:
            expected[MANIFEST.socket_dir(name)] = "rw"
        elif role in socket.clients:
            expected[MANIFEST.socket_dir(name)] = "ro"
    if role == MANIFEST.tools.runner:  # and the tool runtime's socket, next test
        expected |= {MANIFEST.tool_runtime_dir(): "ro", MANIFEST.tool_scratch_dir(): "rw"}
    assert mounted == expected


def test_loopd_reaches_exactly_the_four_sockets_of_the_brief():
    args = podman_args(MANIFEST, "loopd", image=image_of("loopd"))
    sockets = sorted(v.split(":")[0] for v in flag_values(args, "--volume") if "/run/" in v)
    assert sockets == [f"/run/boxmaker/{name}" for name in ("broker", "infer", "loop", "memory")]


def test_only_brokerd_reaches_the_tool_runtime_and_the_call_scratch():
    runtime, scratch = MANIFEST.tool_runtime_dir(), MANIFEST.tool_scratch_dir()
    for role in ROLES:
        volumes = flag_values(podman_args(MANIFEST, role, image=image_of(role)), "--volume")
        given = [v for v in volumes if v.split(":")[0] in (runtime, scratch)]
        if role == "brokerd":
            assert given == [f"{runtime}:{runtime}:ro", f"{scratch}:{scratch}:rw"]
        else:
            assert given == []
    assert MANIFEST.roles["brokerd"].programs == ["podman"]  # a client of the service only


def test_the_tool_runtime_is_a_podman_service_on_the_socket_brokerds_config_names():
    config = config_from_dict(MANIFEST.settings(), "manifest settings", base_dir=None)
    assert config.broker.backend == "podman"
    assert config.broker.podman_remote == MANIFEST.tool_runtime_url()
    assert config.broker.scratch == Path(MANIFEST.tool_scratch_dir())
    assert tool_runtime_args(MANIFEST) == [
        "system", "service", "--time=0", "unix:///run/boxmaker/tools/podman.sock"
    ]  # fmt: skip


def test_only_gatewayd_holds_a_credential_and_only_brokerd_sees_the_grants():
    holders = {role for role in ROLES if MANIFEST.roles[role].credentials}
    assert holders == {"gatewayd"}
    assert {role for role in ROLES if MANIFEST.roles[role].grants} == {"brokerd"}


def test_credentials_are_mounted_read_only_and_named_to_the_secret_store():
    args = podman_args(MANIFEST, "gatewayd", image=image_of("gatewayd"),
                       credentials="/run/credentials/boxmaker-gatewayd.service")  # fmt: skip
    assert "--volume=/run/credentials/boxmaker-gatewayd.service:/run/credentials:ro" in args
    assert "--env=CREDENTIALS_DIRECTORY=/run/credentials" in args


@pytest.mark.parametrize(
    ("image", "credentials", "message"),
    [
        ("localhost/boxmaker/loopd:latest", None, "not named by digest"),
        ("localhost/boxmaker/loopd@sha256:abc", None, "not named by digest"),
        (image_of("loopd"), "run/credentials", "is relative"),
    ],
)
def test_bad_launch_parameters_are_refused_with_the_reason(image, credentials, message):
    with pytest.raises(ConfigError, match=message):
        podman_args(MANIFEST, "loopd", image=image, credentials=credentials)


def test_an_unknown_role_is_refused_naming_the_roles():
    with pytest.raises(ConfigError, match=r"no role 'webui'.*brokerd, gatewayd"):
        podman_args(MANIFEST, "webui", image=image_of("loopd"))


def _broken(edit) -> str:
    data = json.loads(DEFAULT_MANIFEST.read_text())
    edit(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["roles"]["loopd"].update(network="bridge"), "roles.loopd.network"),
        (lambda d: d["roles"]["loopd"].update(egress="router"), "egress must be 'none'"),
        (lambda d: d["roles"]["loopd"].update(colour="red"), "roles.loopd.colour: unknown key"),
        (lambda d: d["paths"].update(run="run/boxmaker"), "paths.run: .*absolute"),
        (lambda d: d["paths"].update(home="/var/lib/$HOME"), "paths.home: .*no %, \\$"),
        (lambda d: d["roles"]["loopd"]["command"].append("%n"), "roles.loopd.command.2"),
        (lambda d: d["sockets"]["loop"]["clients"].append("webui"), "'webui' is not a role"),
        (lambda d: d["sockets"]["loop"].update(mode="660"), "sockets.loop.mode"),
        (lambda d: d["tools"].update(runner="webui"), "tools.runner: 'webui' is not a role"),
        (lambda d: d["tools"].update(runtime_dir="loop"), "tools: runtime_dir and scratch_dir"),
        (lambda d: d["roles"]["loopd"].update(programs=["podman"]), None),
    ],
)
def test_a_broken_manifest_is_refused_naming_the_file_and_key(edit, message):
    if message is None:  # a valid edit, to show the parametrisation refuses only what is wrong
        parse_manifest(_broken(edit), "roles.json")
        return
    with pytest.raises(ConfigError, match=message) as caught:
        parse_manifest(_broken(edit), "roles.json")
    assert str(caught.value).startswith("roles.json: ")


def test_the_settings_the_manifest_fixes_are_a_valid_boxmaker_config():
    config = config_from_dict(MANIFEST.settings(), "manifest settings", base_dir=None)
    assert config.loop_socket == Path(MANIFEST.socket_path("loop"))
    assert config.served("infer").path == Path("/run/boxmaker/infer/infer.sock")
    assert config.served("gateway").path == Path("/run/boxmaker/gateway/gateway.sock")
    assert config.broker.grants == Path(MANIFEST.paths.grants)


@pytest.mark.parametrize("name", sorted(MANIFEST.sockets))
def test_every_socket_is_served_with_the_manifests_mode_at_the_manifests_path(name):
    """Each role runs as its own user, so every socket must admit the shared group (0660): the
    config the manifest fixes says so for each one, where its server reads it."""
    config = config_from_dict(MANIFEST.settings(), "manifest settings", base_dir=None)
    served = config.served(name)
    assert served.path == Path(MANIFEST.socket_path(name))
    assert served.mode == int(MANIFEST.sockets[name].mode, 8) == 0o660
    assert served.mode_key == MANIFEST.sockets[name].mode_key
    assert served.group is None  # the container's root already creates files in the unit's group


# --- the same answers from Nix -------------------------------------------------------------------


def _nix_args(role: str, credentials: str | None, manifest: Path | None = None) -> list[str]:
    credentials_nix = "null" if credentials is None else nix_string(credentials)
    return nix_eval(
        f"{lib_expression(manifest)}.podmanArgs {{ role = {nix_string(role)}; "
        f"image = {nix_string(image_of(role))}; credentials = {credentials_nix}; }}"
    )


@needs_nix
@pytest.mark.parametrize("role", ROLES)
def test_nix_gives_the_same_podman_arguments_as_the_launcher(role):
    for credentials in (None, f"/run/credentials/boxmaker-{role}.service"):
        python = podman_args(MANIFEST, role, image=image_of(role), credentials=credentials)
        assert _nix_args(role, credentials) == python


@needs_nix
def test_nix_and_python_agree_on_a_manifest_with_other_paths(tmp_path):
    data = json.loads(DEFAULT_MANIFEST.read_text())
    data["paths"].update(home=str(tmp_path / "home"), run=str(tmp_path / "run"))
    data["roles"]["memoryd"]["state"].append({"dir": "extra", "writable": False})
    path = tmp_path / "roles.json"
    path.write_text(json.dumps(data))
    manifest = parse_manifest(path.read_text(), path)
    for role in ROLES:
        python = podman_args(manifest, role, image=image_of(role), credentials="/c")
        assert _nix_args(role, "/c", path) == python


@needs_nix
def test_nix_gives_the_same_tool_runtime_arguments_as_the_launcher():
    assert nix_eval(f"{lib_expression()}.toolRuntimeArgs") == tool_runtime_args(MANIFEST)


@needs_nix
def test_nix_fixes_the_same_config_keys_as_python():
    assert nix_eval(f"{lib_expression()}.fixedSettings") == MANIFEST.settings()


@needs_nix
def test_the_nix_assertions_hold_for_the_shipped_manifest():
    failed = [
        a["message"] for a in nix_eval(f"{lib_expression()}.assertions") if not a["assertion"]
    ]
    assert failed == []


@needs_nix
def test_a_state_directory_with_two_writers_fails_a_nix_assertion(tmp_path):
    data = json.loads(DEFAULT_MANIFEST.read_text())
    data["roles"]["memoryd"]["state"][2]["writable"] = True  # sessions: loopd's alone
    path = tmp_path / "roles.json"
    path.write_text(json.dumps(data))
    failed = [
        a["message"] for a in nix_eval(f"{lib_expression(path)}.assertions") if not a["assertion"]
    ]
    assert failed == [
        'state directory sessions must have exactly one writing role, has: ["loopd","memoryd"]'
    ]
