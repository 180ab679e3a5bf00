"""The systemd units the NixOS module writes, computed by nixos-modules/lib.nix and checked by
systemd itself: ``systemd-analyze verify`` with no output at all (an unknown key is only a
warning), and ``systemd-analyze security --offline=true`` scoring 2.0 or better for every role
and for the tool runtime (the podman service brokerd starts tool containers through).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from bxctl.stack import load_manifest, tool_runtime_args
from support.requires import needs

from .nix import lib_expression, needs_nix, nix_eval, nix_string
from .units import exec_words, render_socket, render_unit

MANIFEST = load_manifest()
ROLES = sorted(MANIFEST.roles)
PODMAN = shutil.which("podman") or "/usr/bin/podman"
EGRESS = {
    "router": ["127.0.0.1"], "honcho": ["100.64.0.7"], "mattermost": ["100.64.0.8"],
    "grants": ["100.64.0.9"],
}  # fmt: skip
TOOLS = "tools"  # the tool runtime's unit, boxmaker-tools.service, beside the roles' units
UNITS = [*ROLES, TOOLS]
JOURNAL = "/run/systemd/journal/socket"

pytestmark = [
    needs_nix,
    needs("systemd-analyze"),
]


def unit_of(role: str, grantable: tuple[str, ...] = ()) -> dict:
    allow = EGRESS.get(MANIFEST.roles[role].egress, [])
    credentials = " ".join(
        f"{name} = {nix_string(f'/etc/boxmaker/credentials/{name}.cred')};"
        for name in MANIFEST.roles[role].credentials
    )
    return nix_eval(
        f"{lib_expression()}.unit {{ role = {nix_string(role)}; podman = {nix_string(PODMAN)}; "
        f'imageName = "localhost/boxmaker/{role}"; imageArchive = "/nix/store/x-image/image.tar"; '
        f'digestEnv = "/nix/store/x-image/digest.env"; containersConf = "/etc/boxmaker/c.conf"; '
        f"allow = {nix_string_list(allow)}; credentialFiles = {{ {credentials} }}; "
        f"grantable = {nix_string_list(list(grantable))}; }}"
    )


def tool_runtime_unit() -> dict:
    return nix_eval(
        f"{lib_expression()}.toolRuntimeUnit {{ podman = {nix_string(PODMAN)}; "
        f'toolkitArchive = "/nix/store/x-toolkit/image.tar"; '
        f'containersConf = "/etc/boxmaker/c.conf"; }}'
    )


def nix_string_list(values: list[str]) -> str:
    return "[ " + " ".join(nix_string(v) for v in values) + " ]"


def socket_unit(name: str) -> dict:
    return nix_eval(f"{lib_expression()}.socketUnit {nix_string(name)}")


@pytest.fixture(scope="module")
def unit_files(tmp_path_factory):
    """Every unit's file, the role sockets' .socket units beside them (a role's Sockets=)."""
    directory = tmp_path_factory.mktemp("units")
    files = {}
    for name in UNITS:
        path = directory / f"boxmaker-{name}.service"
        path.write_text(render_unit(tool_runtime_unit() if name == TOOLS else unit_of(name)))
        files[name] = path
    for name in MANIFEST.sockets:
        path = directory / f"boxmaker-{name}.socket"
        path.write_text(render_socket(socket_unit(name)))
        files[f"{name}.socket"] = path
    return files


@pytest.mark.parametrize("name", sorted(MANIFEST.sockets))
def test_each_socket_unit_passes_systemd_analyze_verify_and_is_its_servers(unit_files, name):
    """The .socket unit listens on the socket's path from the config, with the manifest's mode,
    as the server's user in the units' group, and hands it to the server's unit, whose
    Sockets= names it (the role takes it: bxcore.activation)."""
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit_files[f"{name}.socket"])],
        capture_output=True, text=True, check=False, cwd=unit_files[f"{name}.socket"].parent,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    spec = MANIFEST.sockets[name]
    unit = socket_unit(name)
    assert unit["listenStreams"] == [MANIFEST.socket_path(name)]
    assert unit["wantedBy"] == ["sockets.target"]
    config = unit["socketConfig"]
    assert (config["SocketUser"], config["SocketGroup"], config["SocketMode"]) == (
        f"boxmaker-{spec.server}", MANIFEST.group, spec.mode)
    assert config["Service"] == f"boxmaker-{spec.server}.service"
    assert f"boxmaker-{name}.socket" in unit_of(spec.server)["serviceConfig"]["Sockets"]


@pytest.mark.parametrize("role", UNITS)
def test_the_unit_passes_systemd_analyze_verify_without_a_word(unit_files, role):
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit_files[role])],
        capture_output=True, text=True, check=False, cwd=unit_files[role].parent,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("role", UNITS)
def test_the_unit_scores_2_2_or_better_in_systemd_analyze_security(unit_files, role):
    """2.0 before the units were booted; booting them (test_boot.py) cost three measured needs:
    podman's setrlimit (@resources, 0.2), crun's /proc/mounts (ProcSubset=, 0.1), and state the
    units' group may read (UMask=0027, 0.1). See docs/decisions/rootless-role-units.md."""
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit_files[role])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d)", done.stdout)
    assert match, done.stdout + done.stderr
    assert float(match.group(1)) <= 2.2, done.stdout


@pytest.mark.parametrize("role", ROLES)
def test_every_unit_is_notify_restarting_and_hardened(role):
    service = unit_of(role)["serviceConfig"]
    assert service["Type"] == "notify"
    assert service["Restart"] == "on-failure"
    for key, value in MANIFEST.hardening.common.items():
        assert service[key] == value
    assert service["CapabilityBoundingSet"] == ""
    assert service["NoNewPrivileges"] == "yes"
    assert service["IPAddressDeny"] == "any"


def test_loopd_has_a_private_network_and_only_unix_sockets():
    service = unit_of("loopd")["serviceConfig"]
    assert service["PrivateNetwork"] == "yes"
    assert service["RestrictAddressFamilies"] == "AF_UNIX AF_NETLINK"  # netlink: podman's lo
    assert "IPAddressAllow" not in service
    assert service["IPAddressDeny"] == "any"


def test_the_tool_runtime_has_a_private_network_and_inet_on_loopback_only():
    """A tool with egress talks to brokerd's per-call proxy through the toolkit's bridge on
    127.0.0.1 inside its container, so the containers need inet sockets, on loopback alone."""
    service = tool_runtime_unit()["serviceConfig"]
    assert service["PrivateNetwork"] == "yes"
    assert service["RestrictAddressFamilies"] == "AF_UNIX AF_NETLINK AF_INET AF_INET6"
    assert service["IPAddressDeny"] == "any"
    assert service["IPAddressAllow"] == "localhost"


def test_network_roles_reach_only_their_peer_and_listen_on_no_port():
    for role in ("inferproxy", "memoryd", "gatewayd", "brokerd"):
        service = unit_of(role)["serviceConfig"]
        assert service["IPAddressAllow"] == EGRESS[MANIFEST.roles[role].egress]
        assert service["SocketBindDeny"] == "any"
        assert "PrivateNetwork" not in service


@pytest.mark.parametrize("role", ["gatewayd", "brokerd"])
def test_the_unit_runs_exactly_the_launcher_arguments_with_the_digest_put_in_by_systemd(role):
    """The same arguments from lib.nix and bxctl's launcher, the owner's grantable trees too
    (bound read-only into the runner's container only)."""
    from bxctl.stack import podman_args

    trees = ("/home/alice/notes", "/srv/shared-docs")
    service = unit_of(role, trees)["serviceConfig"]
    named = MANIFEST.roles[role].credentials
    credentials = f"/run/credentials/boxmaker-{role}.service" if named else None
    image = f"localhost/boxmaker/{role}@sha256:" + "0" * 64
    expected = podman_args(MANIFEST, role, image=image, credentials=credentials, grantable=trees)
    at = expected.index(image)
    expected[at] = f"localhost/boxmaker/{role}@${{BOXMAKER_IMAGE_DIGEST}}"
    # What only a unit adds: journald's socket and the flag that says to use it (bxcore.logs).
    expected[at:at] = [f"--volume={JOURNAL}:{JOURNAL}:rw", "--env=BOXMAKER_LOG=journal"]
    assert exec_words(service["ExecStart"]) == [PODMAN, *expected]
    bound = [f"--volume={tree}:{tree}:ro" for tree in trees]
    runner = role == MANIFEST.tools.runner
    assert all((v in expected) == runner for v in bound)
    # The unit sees them (read-only) only where its container binds them, and no other /home.
    assert service.get("BindReadOnlyPaths") == (list(trees) if runner else None)
    assert service["ProtectHome"] == ("tmpfs" if runner else "yes")
    assert service.get("LoadCredentialEncrypted", []) == [
        f"{name}:/etc/boxmaker/credentials/{name}.cred" for name in named]
    assert service["EnvironmentFile"] == "/nix/store/x-image/digest.env"


def test_the_role_sockets_form_a_cycle_so_units_are_not_ordered_on_each_other():
    """A role wants the .socket units of the sockets it uses, never their servers' services,
    and is ordered after nothing of theirs; only a role with a network waits for (and wants)
    network-online.target, loopd has none."""
    for role in ROLES:
        online = [] if MANIFEST.roles[role].network == "none" else ["network-online.target"]
        assert unit_of(role)["after"] == online
        assert unit_of(role)["wants"][len(unit_of(role)["wants"]) - len(online):] == online
    assert unit_of("loopd")["wants"] == [
        "boxmaker-broker.socket", "boxmaker-infer.socket", "boxmaker-memory.socket",
    ]  # fmt: skip


def test_tmpfiles_give_each_socket_directory_to_its_server():
    rules = nix_eval(f"{lib_expression()}.tmpfiles")
    assert "'d' '/run/boxmaker/infer' '0750' 'boxmaker-inferproxy' 'boxmaker' '-' " in rules



def test_each_state_directory_is_read_by_the_owners_and_the_one_role_that_mounts_it():
    """Not by the units' group, which every role's user shares: brokerd's audit and consult
    egress log (full payloads) are the owners' to read, loopd's sessions memoryd's too."""
    rules = nix_eval(f"{lib_expression()}.tmpfiles")
    state = sorted(r for r in rules if r.startswith(("'d' '/var/lib/boxmaker/", "'a+' ")))
    assert state == [
        "'a+' '/var/lib/boxmaker/broker' '-' '-' '-' '-' u:boxmaker-memoryd:r-x",
        "'a+' '/var/lib/boxmaker/sessions' '-' '-' '-' '-' u:boxmaker-memoryd:r-x",
        "'d' '/var/lib/boxmaker/audit' '0750' 'boxmaker-brokerd' 'boxmaker-owners' '-' ",
        "'d' '/var/lib/boxmaker/broker' '0750' 'boxmaker-brokerd' 'boxmaker-owners' '-' ",
        "'d' '/var/lib/boxmaker/egress' '0750' 'boxmaker-brokerd' 'boxmaker-owners' '-' ",
        "'d' '/var/lib/boxmaker/gateway' '0750' 'boxmaker-gatewayd' 'boxmaker-owners' '-' ",
        "'d' '/var/lib/boxmaker/index' '0750' 'boxmaker-memoryd' 'boxmaker-owners' '-' ",
        "'d' '/var/lib/boxmaker/memory' '0750' 'boxmaker-memoryd' 'boxmaker-owners' '-' ",
        "'d' '/var/lib/boxmaker/sessions' '0750' 'boxmaker-loopd' 'boxmaker-owners' '-' ",
    ]
    assert MANIFEST.owners in nix_eval(f"{lib_expression()}.ownerGroups")


def test_the_tool_runtime_runs_as_brokerds_user_before_brokerd_with_the_launchers_arguments():
    unit = tool_runtime_unit()
    service = unit["serviceConfig"]
    assert service["User"] == unit_of("brokerd")["serviceConfig"]["User"] == "boxmaker-brokerd"
    assert exec_words(service["ExecStart"]) == [PODMAN, *tool_runtime_args(MANIFEST)]
    assert exec_words(service["ExecStartPre"][0]) == [
        PODMAN, "load", "--quiet", "--input=/nix/store/x-toolkit/image.tar"]
    assert unit["before"] == unit["wantedBy"] == ["boxmaker-brokerd.service"]
    # It sees /home (grants mount the owner's files), writable where permissions allow.
    assert (service["ProtectHome"], service["ProtectSystem"]) == ("no", "full")
    for key, value in MANIFEST.hardening.common.items():
        if key not in ("ProtectHome", "ProtectSystem"):
            assert service[key] == value


def test_tmpfiles_keep_the_tool_runtime_and_the_call_scratch_to_brokerds_user():
    rules = nix_eval(f"{lib_expression()}.tmpfiles")
    assert "'d' '/run/boxmaker/tools' '0700' 'boxmaker-brokerd' 'boxmaker' '-' " in rules
    assert "'d' '/run/boxmaker/calls' '0700' 'boxmaker-brokerd' 'boxmaker' '-' " in rules


def test_approve_sockets_directory_admits_the_owners_group_and_no_role():
    """brokerd's user namespace shows every other host uid as the overflow uid, so who may answer
    on approve.sock is settled by who can reach it: the owners' group, which no unit runs in."""
    rules = nix_eval(f"{lib_expression()}.tmpfiles")
    assert "'d' '/run/boxmaker/approve' '0750' 'boxmaker-brokerd' 'boxmaker-owners' '-' " in rules
    assert nix_eval(f"{lib_expression()}.ownerGroups") == ["boxmaker", "boxmaker-owners"]
    for role in ROLES:
        service = unit_of(role)["serviceConfig"]
        assert service["Group"] == "boxmaker" and "SupplementaryGroups" not in service
    assert tool_runtime_unit()["serviceConfig"]["Group"] == "boxmaker"
