"""The manifest as podman arguments: ``podman <args>`` runs one role's container.

The same function exists in Nix (``nixos-modules/lib.nix``, ``podmanArgs``) for the host's
systemd units; ``tests/appliance`` evaluates both and compares them for every role.

What every role gets, and why:

- ``--pull=never`` and an image named by digest: nothing is fetched, and what runs is exactly the
  image that was built and tested.
- ``--read-only --cap-drop=ALL --security-opt=no-new-privileges``.
- ``--user=0:0``: the host runs podman rootless without subordinate ids, so the container's user
  namespace maps exactly one id, container root, to the role's unprivileged host user. Root in
  there holds no capabilities and owns nothing on the host but the role's own files.
- ``--uts=host``: the unit already has a UTS namespace of its own (ProtectHostname=), so the
  container shares it and the unit need not allow creating one (RestrictNamespaces=).
- ``--sdnotify=container``: the daemon's own READY=1 reaches systemd, not podman's.
- A mount per socket directory, read-write for the socket's server and read-only for its clients
  (connect() works on a read-only mount; creating or removing files does not), so a role sees
  exactly the sockets the manifest gives it. State directories, the config directory, the
  grants and the credentials are mounted at their own paths.
- The tool runner (brokerd) also gets the tool runtime's socket directory read-only and the
  per-call scratch directory read-write: it starts tool containers through the service.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bxcore.errors import ConfigError

from .manifest import Manifest

DIGEST_REFERENCE = re.compile(r"^[a-z0-9][a-z0-9./_-]*@sha256:[0-9a-f]{64}$")


def container_name(role: str) -> str:
    return f"boxmaker-{role}"


def volumes(manifest: Manifest, role_name: str, credentials: str | None,
            grantable: Sequence[str] = ()) -> list[str]:
    """``host:container:options`` for every mount of the role, in a fixed order. ``grantable``:
    the owner's trees grants may mount, bound read-only into the runner's container at their
    own paths (brokerd sees what it decides about: its pins and symlink checks)."""
    role = manifest.role(role_name)
    mounts = []
    for name, socket in sorted(manifest.sockets.items()):
        if socket.server == role_name or role_name in socket.clients:
            access = "rw" if socket.server == role_name else "ro"
            mounts.append(_bind(manifest.socket_dir(name), access))
    if role_name == manifest.tools.runner:
        mounts.append(_bind(manifest.tool_runtime_dir(), "ro"))
        mounts.append(_bind(manifest.tool_scratch_dir(), "rw"))
        mounts += [_bind(tree, "ro") for tree in grantable]
    for state in role.state:
        mounts.append(_bind(f"{manifest.paths.home}/{state.dir}", "rw" if state.writable else "ro"))
    mounts.append(_bind(manifest.paths.config_dir, "ro"))
    if role.grants:
        mounts += [_bind(manifest.paths.grants, "ro"), _bind(manifest.paths.jobs, "ro")]
    if credentials is not None:
        mounts.append(f"{credentials}:{manifest.paths.credentials}:ro")
    if role.network == "host":
        mounts.append(_bind(manifest.paths.ca_bundle, "ro"))
    return mounts


def environment(manifest: Manifest, role_name: str, credentials: str | None) -> list[str]:
    found = [] if credentials is None else [f"CREDENTIALS_DIRECTORY={manifest.paths.credentials}"]
    if manifest.role(role_name).network == "host":  # Python's ssl and nixpkgs' certifi
        bundle = manifest.paths.ca_bundle
        found += [f"SSL_CERT_FILE={bundle}", f"NIX_SSL_CERT_FILE={bundle}"]
    return found


def podman_args(
    manifest: Manifest, role_name: str, *, image: str, credentials: str | None = None,
    grantable: Sequence[str] = (),
) -> list[str]:
    """The arguments after ``podman`` that run ``role_name`` from ``image``.

    ``image`` is ``<name>@sha256:<hex>``; ``credentials`` is the host directory systemd made
    for the role's unit ($CREDENTIALS_DIRECTORY), or None when the role loads none;
    ``grantable``: see ``volumes``.
    """
    role = manifest.role(role_name)
    if not DIGEST_REFERENCE.match(image):
        raise ConfigError(f"role {role_name}: image {image!r} is not named by digest")
    if credentials is not None and not credentials.startswith("/"):
        raise ConfigError(f"role {role_name}: credentials directory {credentials!r} is relative")
    return [
        "run", "--rm", "--replace", f"--name={container_name(role_name)}", "--pull=never",
        "--sdnotify=container", f"--network={role.network}", "--read-only", "--cap-drop=ALL",
        "--security-opt=no-new-privileges", "--user=0:0", "--uts=host",
        *(f"--volume={volume}" for volume in volumes(manifest, role_name, credentials,
                                                       grantable)),
        *(f"--env={variable}" for variable in environment(manifest, role_name, credentials)),
        image, *role.command, "--config", manifest.config_path(),
    ]  # fmt: skip


def tool_runtime_args(manifest: Manifest) -> list[str]:
    """The arguments after ``podman`` of the service that runs tool containers for the runner.

    ``--time=0``: it never exits for being idle; its unit (or test) owns its lifetime.
    """
    return ["system", "service", "--time=0", manifest.tool_runtime_url()]


def _bind(path: str, access: str) -> str:
    return f"{path}:{path}:{access}"
