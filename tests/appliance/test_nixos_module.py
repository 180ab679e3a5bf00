"""services.boxmaker under nixpkgs' real module system (``lib.evalModules`` from nixpkgs' lib/),
with the NixOS options it sets declared with NixOS's types (nixos-modules/tests/nixos-options.nix)
and nothing built (nixos-modules/tests/eval.nix). What this proves: the module evaluates as
NixOS would evaluate it, every value it gives a NixOS option has that option's type, its
assertions and NixOS's own user checks hold for a correct host, the config file it writes is a
valid bxcore config, and a wrong setting fails evaluation with an error naming the option. What
it cannot prove: that the derivations build, or that the real NixOS modules behind these option
declarations do what the VM test expects (nixos-modules/tests/vm.nix, on the owner's host).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bxcore.config import config_from_dict
from bxcore.errors import ConfigError
from bxctl.stack import load_manifest

from .nix import NIXPKGS_LIB, REPO, needs_nix, needs_nixpkgs_lib, nix_error, nix_eval, nix_string
from .units import exec_words

pytestmark = [needs_nix, needs_nixpkgs_lib]

MANIFEST = load_manifest()
ROLES = sorted(MANIFEST.roles)
DIGEST = "sha256:" + "0123456789abcdef" * 4

# The owner's host as deploy/host-example.nix has it: the module enabled, an owner user, the
# one credential the manifest asks for, an upstream for inferproxy.
HOST = """{
  users.users.alice.isNormalUser = true;
  services.boxmaker = {
    enable = true;
    ownerUsers = [ "alice" ];
    credentials.mattermost_token = "/etc/boxmaker/credentials/mattermost_token.cred";
    settings.inferproxy.upstream = "tcp://127.0.0.1:8080";
    settings.gateway.server = "https://chat.example.org";
  };
}"""


def evaluate(host: str = HOST, attribute: str = "", *, build_with_pkgs: bool = False) -> str:
    eval_nix = REPO / "nixos-modules" / "tests" / "eval.nix"
    build = "true" if build_with_pkgs else "false"
    return (
        f"(import {nix_string(eval_nix)} {{ lib = import {nix_string(NIXPKGS_LIB)}; "
        f"buildWithPkgs = {build}; host = {host}; }}){attribute}"
    )


@pytest.fixture(scope="module")
def system():
    return nix_eval(evaluate())


def with_setting(setting: str) -> str:
    """The host above plus one more definition."""
    return f"{{ imports = [ {HOST} ]; {setting} }}"


def test_the_module_evaluates_and_every_assertion_holds(system):
    assert system["failedAssertions"] == []
    assert system["containers"] is True
    assert sorted(system["services"]) == sorted(
        [f"boxmaker-{role}" for role in ROLES] + ["boxmaker-tools"]
    )


@pytest.mark.parametrize("role", ROLES)
def test_each_unit_survives_the_nixos_merge_as_its_roles_notify_unit(system, role):
    unit = system["services"][f"boxmaker-{role}"]
    service = unit["serviceConfig"]
    assert unit["wantedBy"] == ["multi-user.target"]
    assert service["Type"] == "notify" and service["User"] == f"boxmaker-{role}"
    assert service["Group"] == MANIFEST.group
    words = exec_words(service["ExecStart"])
    assert words[-4:] == [role, "serve", "--config", MANIFEST.config_path()]
    assert f"--network={MANIFEST.roles[role].network}" in words
    assert service["IPAddressDeny"] == "any"
    # The environment through NixOS's `environment` (one Environment= line per name), PATH
    # from NixOS's `path`, and none in serviceConfig.
    assert "Environment" not in service
    assert unit["environment"]["HOME"] == f"/var/lib/boxmaker-podman/{role}"
    assert unit["environment"]["PATH"]


def test_the_credential_reaches_only_the_role_the_manifest_gives_it_to(system):
    holders = {name for name, unit in system["services"].items()
               if "LoadCredentialEncrypted" in unit["serviceConfig"]}  # fmt: skip
    assert holders == {"boxmaker-gatewayd"}
    loaded = system["services"]["boxmaker-gatewayd"]["serviceConfig"]["LoadCredentialEncrypted"]
    assert loaded == ["mattermost_token:/etc/boxmaker/credentials/mattermost_token.cred"]


def test_the_grantable_trees_are_bound_read_only_into_the_runners_unit_and_container_only():
    trees = ["/home/alice/notes", "/srv/docs"]
    services = nix_eval(evaluate(with_setting(
        f"services.boxmaker.grantableTrees = [ {' '.join(map(nix_string, trees))} ];"),
        ".services"))
    for name, unit in services.items():
        service = unit["serviceConfig"]
        runner = name == f"boxmaker-{MANIFEST.tools.runner}"
        volumes = [w for w in exec_words(service["ExecStart"]) if w.startswith("--volume=")]
        assert all((f"--volume={t}:{t}:ro" in volumes) == runner for t in trees), name
        assert (service.get("BindReadOnlyPaths") == trees) == runner, name


def test_every_role_is_a_system_user_in_the_shared_group_and_the_owner_joins_both_groups(system):
    for role in ROLES:
        user = system["users"][f"boxmaker-{role}"]
        assert user["isSystemUser"] and not user["isNormalUser"]
        assert user["group"] == MANIFEST.group
    assert set(system["groups"]) >= {MANIFEST.group, "boxmaker-owners"}
    alice = system["users"]["alice"]
    assert alice["group"] == "users" and set(alice["extraGroups"]) == {
        MANIFEST.group, "boxmaker-owners"
    }  # fmt: skip


def test_the_tmpfiles_rules_and_the_config_directory_are_the_modules(system):
    assert system["tmpfiles"] == nix_eval(f"(import {REPO}/nixos-modules/lib.nix {{ }}).tmpfiles")
    assert system["etc"]["boxmaker/config"]["source"].endswith("-boxmaker-config")
    assert "bxctl" in system["systemPackages"]


def config_of(generated: dict) -> object:
    """What the config directory's build does with the generated file: the toolkit's digest
    put in, then bxcore's own validation (default.nix, configDir)."""
    text = generated["broker"]["podman_image"].replace("@toolkitDigest@", DIGEST)
    data = {**generated, "broker": {**generated["broker"], "podman_image": text}}
    return config_from_dict(data, "boxmaker.toml", base_dir=Path("/etc/boxmaker/config"))


def test_the_generated_config_file_is_a_valid_bxcore_config_with_the_owners_settings(system):
    config = config_of(system["configFile"])
    assert config.loop_socket == Path(MANIFEST.socket_path("loop"))
    assert config.broker.podman_image == f"localhost/boxmaker/toolkit@{DIGEST}"
    assert system["configFile"]["inferproxy"]["upstream"] == "tcp://127.0.0.1:8080"
    assert system["configFile"]["secrets"] == {"mattermost_token": {"backend": "credential"}}


def test_the_manifests_socket_paths_win_over_the_owners_settings():
    generated = nix_eval(evaluate(
        with_setting('services.boxmaker.settings.channel.socket = "/tmp/elsewhere.sock";'),
        ".configFile",
    ))  # fmt: skip
    assert generated["channel"]["socket"] == MANIFEST.socket_path("loop")


def test_a_setting_of_the_right_toml_type_but_wrong_for_bxcore_fails_the_config_check():
    """Nix types the file as TOML; what bxcore means by each key is checked when the config
    directory is built, with bxcore's validator, naming the key (here, the same validator)."""
    generated = nix_eval(evaluate(
        with_setting('services.boxmaker.settings.loop.tools = "everything";'), ".configFile"
    ))  # fmt: skip
    with pytest.raises(ConfigError, match=r"boxmaker\.toml: .*loop\.tools"):
        config_of(generated)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ('services.boxmaker.roles = [ "loopd" "webui" ];', "services.boxmaker.roles"),
        ('services.boxmaker.egress.router = "127.0.0.1";', "services.boxmaker.egress.router"),
        ("services.boxmaker.credentials.mattermost_token = 42;",
         "services.boxmaker.credentials.mattermost_token"),
        # A credential in the store would be world-readable: an external path, as nixpkgs' own.
        ('services.boxmaker.credentials.api_key = '
         '"/nix/store/00000000000000000000000000000000-api_key.cred";',
         "services.boxmaker.credentials.api_key"),
        ("services.boxmaker.settings.loop.max_turns = null;",  # TOML has no null
         "services.boxmaker.settings.loop.max_turns"),
        ('services.boxmaker.enable = "yes";', "services.boxmaker.enable"),
        # A word of BindReadOnlyPaths= and of podman's --volume: absolute, no space, no ':'.
        ('services.boxmaker.grantableTrees = [ "/home/alice/my notes" ];',
         "services.boxmaker.grantableTrees"),
        ('services.boxmaker.grantableTrees = [ "notes" ];', "services.boxmaker.grantableTrees"),
        ('services.boxmaker.rolez = [ "loopd" ];', "services.boxmaker.rolez"),
        ('systemd.services.boxmaker-loopd.serviceConfig.Restart = "sometimes";',
         "systemd.services.boxmaker-loopd.serviceConfig"),
        ('systemd.services.boxmaker-loopd.after = [ "memoryd" ];',  # not a unit name
         "systemd.services.boxmaker-loopd.after"),
    ],
)  # fmt: skip
def test_a_wrong_setting_fails_evaluation_naming_the_option(setting, named):
    message = nix_error(evaluate(with_setting(setting)))
    assert named in message, message


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ('{ services.boxmaker.enable = true; users.users.alice.isNormalUser = true; }',
         "services.boxmaker.credentials must give gatewayd its credentials: mattermost_token"),
        (HOST.replace('ownerUsers = [ "alice" ]', 'ownerUsers = [ "bob" ]'),
         "Exactly one of users.users.bob.isSystemUser and users.users.bob.isNormalUser"),
    ],
)  # fmt: skip
def test_a_host_nixos_would_refuse_fails_an_assertion_saying_why(host, message):
    failed = nix_eval(evaluate(host, ".failedAssertions"))
    assert any(message in m for m in failed), failed


def test_the_roles_are_built_with_the_hosts_pkgs_and_every_image_carries_the_ca_bundle():
    """One nixpkgs: left at its default, services.boxmaker.packages is nix/packages.nix called
    with the pkgs the host's module system passes (here the stand-in, whose builders remember
    their arguments)."""
    built = nix_eval(evaluate(HOST, ".built", build_with_pkgs=True))
    for role in [*ROLES, "bxctl"]:
        assert built["packages"][role]["name"].startswith(f"{role}-")  # buildPythonPackage's
    assert built["packages"]["bxcore"]["pythonModule"] is True
    for name, image in built["images"].items():
        assert "cacert" in image["contents"], name
        assert "SSL_CERT_FILE=/etc/ssl/certs/ca-bundle.crt" in image["config"]["Env"], name
    assert "gatewayd-0.1.0" in built["images"]["gatewayd"]["contents"]


def test_a_job_becomes_a_timer_and_a_one_shot_service_under_nixos_types():
    job = '"morning-notes" = { ask = "Summarise my notes."; schedule = "*-*-* 07:30:00"; };'
    system = nix_eval(evaluate(with_setting(f"services.boxmaker.jobs.{job}")))
    assert system["failedAssertions"] == []
    timer = system["timers"]["boxmaker-job-morning-notes"]
    assert timer["timerConfig"]["OnCalendar"] == "*-*-* 07:30:00"
    assert timer["wantedBy"] == ["timers.target"]
    service = system["services"]["boxmaker-job-morning-notes"]
    assert service["serviceConfig"]["Type"] == "oneshot"
    assert exec_words(service["serviceConfig"]["ExecStart"])[1:4] == ["job", "run", "morning-notes"]
    # One PATH: NixOS's, from the unit's `path` (brokerd's bin first), none of the module's own.
    assert "Environment" not in service["serviceConfig"]
    assert service["environment"]["PATH"].split(":")[0].endswith("-brokerd/bin")
    (job_file,) = [f for f in system["etc"].values() if f["target"].endswith("morning-notes.toml")]
    assert 'ask = "Summarise my notes."' in job_file["text"]


def test_a_job_with_a_bad_name_fails_an_assertion_saying_why():
    job = '"no good" = { ask = "x"; schedule = "daily"; };'
    system = nix_eval(evaluate(with_setting(f"services.boxmaker.jobs.{job}")))
    assert any("not a job name" in message for message in system["failedAssertions"])


def test_the_vm_tests_host_evaluates_with_the_stand_in_model_beside_the_roles():
    """nixos-modules/tests/vm-host.nix, as vm.nix boots it: its packages from the host's pkgs,
    no gatewayd (so no credential is asked for), the stand-in's Python holding loopd's package."""
    vm_host = nix_string(REPO / "nixos-modules" / "tests" / "vm-host.nix")
    system = nix_eval(evaluate(f"import {vm_host}", build_with_pkgs=True))
    assert system["failedAssertions"] == []
    assert sorted(system["services"]) == [
        "boxmaker-brokerd", "boxmaker-inferproxy", "boxmaker-loopd", "boxmaker-memoryd",
        "boxmaker-tools", "stand-in-model",
    ]  # fmt: skip
    stand_in = system["services"]["stand-in-model"]["serviceConfig"]
    assert stand_in["ExecStart"].endswith("-stand-in-model.py 127.0.0.1 8080")
    assert system["configFile"]["inferproxy"]["upstream"] == "tcp://127.0.0.1:8080"


def changed_units(setting: str) -> dict[str, set[str]]:
    """Which units a change gives a new unit file (NixOS's switch restarts those), and in which
    of their attributes: the host above against the host with ``setting`` too."""
    job = 'services.boxmaker.jobs.notes = { ask = "Summarise."; schedule = "daily"; };'
    before = nix_eval(evaluate(with_setting(job), ".services"))
    host = f"({{ lib, ... }}: {{ imports = [ {with_setting(job)} ]; {setting} }})"
    after = nix_eval(evaluate(host, ".services"))
    assert before.keys() == after.keys()
    return {name: {key for key in unit if unit[key] != after[name][key]}
            for name, unit in before.items() if unit != after[name]}


ROLE_UNITS = {f"boxmaker-{role}" for role in ROLES}


@pytest.mark.parametrize(
    ("setting", "changed"),
    [
        # Every role reads the config file at start, and only then; the tool runtime never.
        ('services.boxmaker.settings.loop.max_turns = 7;',
         {unit: {"restartTriggers"} for unit in ROLE_UNITS}),
        ('services.boxmaker.configFiles.allowlist = "/etc/hosts";',
         {unit: {"restartTriggers"} for unit in ROLE_UNITS}),
        # The grants' host-wide ceiling is brokerd's unit's own IPAddressAllow=.
        ('services.boxmaker.egress.grants = [ "100.64.0.9" ];',
         {"boxmaker-brokerd": {"serviceConfig"}}),
        # A job's file is read by its own runs: its run's trigger, no role's.
        ('services.boxmaker.jobs.notes.ask = lib.mkForce "Summarise again.";',
         {"boxmaker-job-notes": {"restartTriggers"}}),
    ],
)  # fmt: skip
def test_a_change_restarts_exactly_the_units_that_read_it(setting, changed):
    assert changed_units(setting) == changed


@pytest.mark.parametrize("left_out", [None, "gatewayd", "memoryd"])
def test_each_running_role_serves_its_sockets_from_socket_units_the_module_makes(left_out):
    """Under NixOS's merge: one .socket unit per socket of a running role (none for a role left
    out), listening on the config's path with the manifest's mode, owner and group; each role's
    Sockets= names exactly its own, and the roles want sockets, not each other's services."""
    roles = [role for role in ROLES if role != left_out]
    host = HOST if left_out is None else with_setting(
        "services.boxmaker.roles = [ " + " ".join(nix_string(r) for r in roles) + " ];")
    system = nix_eval(evaluate(host))
    served = sorted(name for name, s in MANIFEST.sockets.items() if s.server in roles)
    assert sorted(system["sockets"]) == [f"boxmaker-{name}" for name in served]
    settings = system["configFile"]
    for name in served:
        spec = MANIFEST.sockets[name]
        unit = system["sockets"][f"boxmaker-{name}"]
        section, key = spec.config_key.split(".")
        assert unit["listenStreams"] == [settings[section][key]]
        assert unit["wantedBy"] == ["sockets.target"]
        config = unit["socketConfig"]
        assert (config["SocketMode"], config["SocketUser"], config["SocketGroup"],
                config["Service"]) == (spec.mode, f"boxmaker-{spec.server}", MANIFEST.group,
                                       f"boxmaker-{spec.server}.service")  # fmt: skip
    for role in roles:
        service = system["services"][f"boxmaker-{role}"]
        own = [f"boxmaker-{n}.socket" for n in served if MANIFEST.sockets[n].server == role]
        assert sorted(service["serviceConfig"].get("Sockets", [])) == sorted(own)
        assert not [w for w in service["wants"] if w.startswith("boxmaker-")
                    and w.endswith(".service")], service["wants"]
