"""The role manifest: which image each role runs, on which network, with which sockets and files.

The manifest is data (``roles.json`` beside this module) that two readers share: the NixOS module
(``nixos-modules/lib.nix``, builtins only) turns it into systemd units on the owner's host, and
``bxctl.stack.podman`` turns it into podman arguments here. A test evaluates both and compares
them role by role, so the flags that run on the host are the flags tested on this machine.

Every path in the manifest is the same inside and outside a container: a mount never renames,
so the one config file is valid in every role and on the host.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from bxcore._base import Flag, Model, Text
from bxcore.config import describe
from bxcore.errors import ConfigError
from pydantic import AfterValidator, Field, ValidationError, model_validator

DEFAULT_MANIFEST = Path(__file__).with_name("roles.json")

# Arguments reach systemd's ExecStart= unescaped, where % starts a specifier and $ a variable,
# so no manifest string may carry either (nor whitespace, which would split an argument).
_PLAIN = re.compile(r"[A-Za-z0-9_@:./+=,-]+")
_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def _plain(value: str) -> str:
    if not _PLAIN.fullmatch(value):
        raise ValueError("only letters, digits and _@:./+=,- are allowed (no %, $ or spaces)")
    return value


def _absolute(value: str) -> str:
    _plain(value)
    if not PurePosixPath(value).is_absolute() or ".." in PurePosixPath(value).parts:
        raise ValueError("must be an absolute path without '..'")
    return value


def _name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError("must be a lowercase name: a-z, 0-9, '_' and '-'")
    return value


PlainText = Annotated[Text, AfterValidator(_plain)]
AbsolutePath = Annotated[Text, AfterValidator(_absolute)]
Name = Annotated[Text, AfterValidator(_name)]
Network = Literal["none", "host"]
# What a role with a network may reach; the NixOS module turns it into IPAddressAllow=.
# "grants": brokerd's per-call egress proxy, to the hosts the owner's grants name.
Egress = Literal["none", "router", "honcho", "mattermost", "grants"]


class Paths(Model):
    home: AbsolutePath  # state: one subdirectory per kind of state
    run: AbsolutePath  # sockets: one subdirectory per socket
    config_dir: AbsolutePath  # the config file and system.md, read-only in every role
    config_file: PlainText  # the config file's name inside config_dir
    grants: AbsolutePath  # the owner's grants, read-only, for roles with "grants": true
    jobs: AbsolutePath  # the owner's scheduled jobs, read-only, beside the grants
    credentials: AbsolutePath  # where $CREDENTIALS_DIRECTORY appears inside a container
    # The host's trust store (a PEM bundle), mounted read-only at its own path into every role
    # with the host's network and named by SSL_CERT_FILE: TLS to the owner's Mattermost, Honcho
    # or router trusts what the host trusts (a private CA in security.pki included), not only
    # the bundle the image was built with.
    ca_bundle: AbsolutePath


ConfigKey = Annotated[Text, Field(pattern=r"^[a-z_]+\.[a-z_]+$")]


class Socket(Model):
    server: Name
    mode: Annotated[Text, Field(pattern=r"^0[0-7]{3}$")]
    clients: list[Name]  # roles that connect; the owner's bxctl on the host needs none
    config_key: ConfigKey  # the one key that sets its path; the server's section owns it
    mode_key: ConfigKey  # the server's setting for the socket's mode, e.g. "channel.mode"
    # The group the socket's directory admits, when not the units' group: approve.sock's
    # directory admits only the owner's users, whatever uid brokerd's user namespace shows.
    group: Name | None = None


class StateDir(Model):
    dir: Name
    writable: Flag


class Role(Model):
    image: PlainText  # the image name; runs are by digest, <image>@sha256:<hex>
    command: list[PlainText]  # the console script and its subcommand; --config is appended
    network: Network
    egress: Egress
    state: list[StateDir]
    grants: Flag
    credentials: list[Name]  # credential ids the role's unit must load (LoadCredentialEncrypted=)
    # Credential ids it loads when the host has them (memoryd's Honcho key, brokerd's consult key);
    # the tools runner also loads every credential no role names: the secrets grants inject.
    optional_credentials: list[Name] = Field(default_factory=list)
    # Seconds until READY=1 (TimeoutStartSec=): loopd's self-test waits for the model to load,
    # up to [inference] first_byte_timeout (900 s by default), before it says ready.
    start_timeout: Annotated[int, Field(gt=0)] = 90
    programs: list[Name] = Field(default_factory=list)  # host programs in the image (podman)

    @model_validator(mode="after")
    def _egress_needs_network(self) -> Role:
        if (self.network == "none") != (self.egress == "none"):
            raise ValueError("egress must be 'none' exactly when network is 'none'")
        return self


class Tools(Model):
    """Where tool containers run: a podman service of the runner's host user (see roles.json)."""

    comment: Text = ""
    runner: Name  # the role that starts tool containers
    image: PlainText  # the toolkit image's name; run by digest
    runtime_dir: Name  # <run>/<runtime_dir>/podman.sock: the service's socket
    scratch_dir: Name  # <run>/<scratch_dir>: each call's secrets and egress socket


class Hardening(Model):
    comment: Text = ""
    common: dict[Text, Text | list[Text]]
    network: dict[Network, dict[Text, Text | list[Text]]]


class Manifest(Model):
    comment: Text = ""
    version: Literal[1]
    # Every role's unit runs with this group, the socket and state directories belong to it, and
    # the owner's users join it. A role's container root maps to the unit's user and group, so a
    # socket it creates already has this group: the config needs no group setting.
    group: Name
    # The owner's users' group. It alone reads the role state directories with the one role
    # that needs each (a read-only state entry; an ACL naming that role's user): brokerd's
    # audit and consult egress log are not readable by the other roles' users.
    owners: Name
    paths: Paths
    sockets: dict[Name, Socket]
    roles: dict[Name, Role]
    tools: Tools
    hardening: Hardening

    @model_validator(mode="after")
    def _sockets_name_roles(self) -> Manifest:
        for name, socket in self.sockets.items():
            for role in [socket.server, *socket.clients]:
                if role not in self.roles:
                    raise ValueError(f"sockets.{name}: {role!r} is not a role")
        if self.tools.runner not in self.roles:
            raise ValueError(f"tools.runner: {self.tools.runner!r} is not a role")
        taken = set(self.sockets) & {self.tools.runtime_dir, self.tools.scratch_dir}
        if taken or self.tools.runtime_dir == self.tools.scratch_dir:
            raise ValueError("tools: runtime_dir and scratch_dir must differ from each other "
                             "and from every socket's name")
        return self

    def socket_dir(self, name: str) -> str:
        """Each socket has a directory of its own, so a role is given exactly its sockets."""
        return f"{self.paths.run}/{name}"

    def socket_path(self, name: str) -> str:
        return f"{self.socket_dir(name)}/{name}.sock"

    def tool_runtime_dir(self) -> str:
        return f"{self.paths.run}/{self.tools.runtime_dir}"

    def tool_runtime_url(self) -> str:
        return f"unix://{self.tool_runtime_dir()}/podman.sock"

    def tool_scratch_dir(self) -> str:
        return f"{self.paths.run}/{self.tools.scratch_dir}"

    def config_path(self) -> str:
        return f"{self.paths.config_dir}/{self.paths.config_file}"

    def role(self, name: str) -> Role:
        try:
            return self.roles[name]
        except KeyError:
            raise ConfigError(
                f"no role {name!r} in the manifest (roles: {', '.join(sorted(self.roles))})"
            ) from None

    def settings(self) -> dict[str, dict[str, str]]:
        """The config-file keys the manifest fixes: every socket path and mode, the two base
        paths, and where brokerd runs tools (the toolkit image's digest is the deployment's).

        The NixOS module merges these over the owner's settings, so they always agree with the
        mounts.
        """
        sections: dict[str, dict[str, str]] = {
            "paths": {"home": self.paths.home, "run": self.paths.run},
            "broker": {
                "grants": self.paths.grants, "jobs": self.paths.jobs, "backend": "podman",
                "podman_remote": self.tool_runtime_url(), "scratch": self.tool_scratch_dir(),
            },
        }  # fmt: skip
        for name, socket in sorted(self.sockets.items()):
            section, field = socket.config_key.split(".")
            sections.setdefault(section, {})[field] = self.socket_path(name)
            section, field = socket.mode_key.split(".")
            sections.setdefault(section, {})[field] = socket.mode
        return sections


def parse_manifest(text: str, source: str | Path) -> Manifest:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON: {exc}") from None
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, source)) from None


def load_manifest(path: Path | None = None) -> Manifest:
    """Read the manifest (by default the one shipped with bxctl); errors name the file and key."""
    path = DEFAULT_MANIFEST if path is None else path
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the role manifest: {exc.strerror}") from None
    return parse_manifest(text, path)
