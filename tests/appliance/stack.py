"""The whole appliance on this machine: every role in its own rootless container from its own
image, run by digest with the launcher's arguments, plus the tool runtime (the podman service
brokerd starts tool containers through), the real llama-server behind inferproxy, and the
threaded fake Mattermost that gatewayd talks to over the host network.

Host paths live under one temp directory; every mount keeps its path, so one config file serves
every role. Each piece is set up as the NixOS module sets it up: socket and state directories
owned by the role's user (here ``nobody``), the tool runtime's socket directory and the call
scratch owned by brokerd's user, and gatewayd's token delivered as an encrypted systemd
credential in a credentials directory its user owns.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bxctl.stack import Manifest, load_manifest, parse_manifest, tool_runtime_args
from gateway.mmthread import ThreadedFake, running_fake
from gatewayd.render import PLACEHOLDER
from support.systemd import NotifySocket, encrypt, load_as_systemd_does

from .relay import TcpToUnix
from .rootless import NOBODY, WAIT, RootlessPodman, chown_nobody

ROLES = ["inferproxy", "memoryd", "brokerd", "loopd", "gatewayd"]
NOTE_MARKER = "The heron count this spring was forty-one."  # only the tool container can read it
BX_TOOL = Path(sys.executable).with_name("bx-tool")


@dataclass
class Appliance:
    manifest: Manifest
    podman: RootlessPodman  # the roles' store
    tools: RootlessPodman  # the tool runtime's store
    relay: TcpToUnix  # the model server's TCP port
    mattermost: ThreadedFake
    root: Path
    note: Path
    refs: dict[str, str] = field(default_factory=dict)
    ready: dict[str, tuple[int, str]] = field(default_factory=dict)
    bot: tuple[str, str] = ("", "")  # (user id, token)
    owner: tuple[str, str] = ("", "")


def answered_dm(appliance: Appliance, text: str, connected: float, answered: float
                ) -> list[dict]:
    """The owner DMs the bot ``text`` once gatewayd's WebSocket is up (within ``connected``
    seconds); gatewayd's replies in that thread once its placeholder is edited (``answered``)."""
    mattermost, (bot, _), (owner, owner_token) = (
        appliance.mattermost, appliance.bot, appliance.owner)  # fmt: skip
    mattermost.wait_for(lambda fake: fake.connects, connected)
    dm = mattermost.direct(bot, owner)
    root = mattermost.post_as(owner_token, dm, text)["id"]

    def replies(fake) -> list[dict] | None:
        found = [p for p in fake.posts_by(bot) if p["root_id"] == root]
        return found if found and found[0]["message"] != PLACEHOLDER else None

    return mattermost.wait_for(replies, answered)


def manifest_under(root: Path) -> Manifest:
    """The shipped manifest with its host paths moved under ``root`` (a mount keeps its path)."""
    data = json.loads(load_manifest().model_dump_json())
    data["paths"].update(home=f"{root}/home", run=f"{root}/run", config_dir=f"{root}/config",
                         grants=f"{root}/grants", jobs=f"{root}/jobs")  # fmt: skip
    return parse_manifest(json.dumps(data), "test manifest")


def write_config(appliance: Appliance, toolkit: str, into: Path = Path("/")) -> None:
    """The config every container mounts: the manifest's fixed keys, the test router's port, the
    toolkit image by digest, the fake Mattermost, and generous bounds for a tiny model on a
    shared 2-core machine (greedy sampling, so answers are the same on every run). ``into``: the
    root the manifest's absolute paths are written under (a machine's root for the boot test)."""
    manifest = appliance.manifest
    config_dir = Path(manifest.paths.config_dir)
    written = into / config_dir.relative_to("/")
    settings: dict[str, dict[str, object]] = dict(manifest.settings())
    settings["inferproxy"]["upstream"] = f"tcp://127.0.0.1:{appliance.relay.port}"
    settings.setdefault("inference", {}).update(
        model="qwen-tools", max_tokens=72, liveness_timeout=600.0)
    settings["inference.sampling"] = {"temperature": 0.0}
    settings["loop"] = {"tools": "broker", "registry": str(config_dir / "toolkit-schemas.json")}
    settings.setdefault("broker", {}).update(podman_image=toolkit, approvers=["local:socket"])
    settings.setdefault("gateway", {}).update(
        server=appliance.mattermost.url, allowlist="allow.txt", edit_interval=0.2)
    if appliance.owner[0]:  # a job's answer goes to the owner's DM ([gateway] owner)
        settings["gateway"]["owner"] = appliance.owner[0]
    settings["secrets.mattermost_token"] = {}  # the credential backend, the default
    lines = []
    for section, values in settings.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    (written / manifest.paths.config_file).write_text("\n".join(lines) + "\n")
    (written / "system.md").write_text("You are a terse assistant. Answer briefly.\n")
    (written / "allow.txt").write_text(f"{appliance.owner[0]}  # the owner\n")
    # What the module builds from the toolkit package: the registry loopd offers the model.
    subprocess.run([str(BX_TOOL), "schemas", "--out", str(written / "toolkit-schemas.json")],
                   check=True)  # fmt: skip
    notes = appliance.note.parent
    (into / Path(manifest.paths.grants).relative_to("/") / "notes.toml").write_text(
        'tools = ["fs.read"]\nmode = "auto"\nclasses = ["public", "private"]\n'
        f'result_class = "private"\n[arguments.path]\npaths = ["{notes}/**"]\n'
        f'[sandbox]\nmounts = [{{ path = "{notes}" }}]\n'
    )


def make_directories(root: Path, manifest: Manifest) -> None:
    """As the module's tmpfiles rules make them: each socket and state directory its role's,
    the tool runtime's and the scratch brokerd's (all ``nobody`` here)."""
    for name in ("home", "run", "config", "grants", "jobs", "notes"):
        (root / name).mkdir(mode=0o755)
    for name in manifest.sockets:
        (root / "run" / name).mkdir(mode=0o750)
        chown_nobody(root / "run" / name)
    for directory in (manifest.tool_runtime_dir(), manifest.tool_scratch_dir()):
        Path(directory).mkdir(mode=0o700)
        chown_nobody(Path(directory))
    for role in manifest.roles.values():
        for state in role.state:
            (root / "home" / state.dir).mkdir(mode=0o750, exist_ok=True)
            chown_nobody(root / "home" / state.dir)


def gateway_credentials(root: Path, token: str) -> Path:
    """LoadCredentialEncrypted=mattermost_token:<file>, as systemd does it for gatewayd's unit:
    a 0500 directory of 0400 files that the unit's user owns."""
    encrypted = root / "mattermost_token.cred"
    encrypt("mattermost_token", token.encode() + b"\n", encrypted)
    directory = load_as_systemd_does(
        root / "credentials", "boxmaker-gatewayd.service", {"mattermost_token": encrypted}
    )
    chown_nobody(directory, directory / "mattermost_token")
    return directory


def start_tool_runtime(appliance: Appliance, toolkit_layout: Path) -> None:
    appliance.tools.load(toolkit_layout, "toolkit")
    appliance.tools.spawn("tools", tool_runtime_args(appliance.manifest))
    socket = Path(appliance.manifest.tool_runtime_url().removeprefix("unix://"))
    deadline = time.monotonic() + WAIT
    while not socket.is_socket():
        if time.monotonic() > deadline or appliance.tools.processes["tools"].poll() is not None:
            raise AssertionError(f"the tool runtime did not start:\n{appliance.tools.log('tools')}")
        time.sleep(0.1)


def start_roles(appliance: Appliance, images, credentials: Path, stack: ExitStack) -> None:
    notify = {role: NotifySocket(appliance.root / f"notify-{role}.sock", NOBODY) for role in ROLES}
    for socket in notify.values():
        stack.callback(socket.close)
    for role in ROLES:
        built = images.build(role)
        appliance.podman.load(built.layout, role)
        appliance.refs[role] = f"localhost/{appliance.manifest.roles[role].image}@{built.digest}"
    for role in ROLES:
        given = str(credentials) if appliance.manifest.roles[role].credentials else None
        appliance.podman.start(appliance.manifest, role, appliance.refs[role],
                               notify[role].path, credentials=given,
                               grantable=(str(appliance.note.parent),))  # fmt: skip
        try:
            appliance.ready[role] = notify[role].wait_ready(time.monotonic() + WAIT)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{role} log:\n{appliance.podman.log(role)}") from None


def running_appliance(root: Path, images, toolkit_image, llama) -> Iterator[Appliance]:
    """Everything up, in dependency order; torn down in reverse, also when a start fails."""
    root.chmod(0o755)
    manifest = manifest_under(root)
    make_directories(root, manifest)
    note = root / "notes" / "herons.md"
    note.write_text(f"# Herons\n\n{NOTE_MARKER}\n")
    with ExitStack() as stack:
        podman = RootlessPodman(root / "podman")
        stack.callback(podman.close)
        tools = RootlessPodman(root / "tools-podman")
        stack.callback(tools.close)
        server = stack.enter_context(llama.start_router())
        relay = stack.enter_context(TcpToUnix(server.socket))
        mattermost = stack.enter_context(running_fake())
        appliance = Appliance(manifest, podman, tools, relay, mattermost, root, note)
        appliance.bot = mattermost.add_user("boxmaker", bot=True)
        appliance.owner = mattermost.add_user("owner")
        toolkit = toolkit_image.build(toolkit_image.default_cache())
        write_config(appliance, f"localhost/{manifest.tools.image}@{toolkit.digest}")
        start_tool_runtime(appliance, toolkit.layout)
        credentials = gateway_credentials(root, appliance.bot[1])
        start_roles(appliance, images, credentials, stack)
        yield appliance
