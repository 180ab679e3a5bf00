"""The appliance in a booted Debian root: systemd 252 as PID 1 in a systemd-nspawn container,
the units exactly as nixos-modules/lib.nix computes them, and everything else the NixOS module
would put on the host, made the way NixOS makes it:

- the units' files, rendered key by key from lib.nix's attrsets (tests/appliance/units.py), with
  this machine's paths for podman, the images and containers.conf (no Nix store here);
- the module's users and groups (a system user per role in the units' group, the owners' group)
  and an owner user in both, as ``users.users`` / ``extraGroups`` would make them;
- lib.nix's tmpfiles rules in /etc/tmpfiles.d, applied by systemd-tmpfiles at boot;
- each role's image as an OCI archive with its digest.env (what nix/packages.nix builds);
- credentials encrypted with systemd-creds for LoadCredentialEncrypted=;
- the config the module writes (tests/appliance/stack.py's, the manifest's fixed keys).

The root is cached (tests/appliance/bootroot.py); each boot works on a copy of its own. The
repository is bound in read-only at its own path, and /usr/local/bin gets bxctl and every role's
command run from its packages: they stand for what the module installs (environment.systemPackages).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .nix import REPO, lib_expression, nix_eval, nix_string
from .units import render_socket, render_unit

OWNER = "owner"
IMAGES = "/var/lib/boxmaker-images"
CONTAINERS_CONF = "/etc/boxmaker/containers.conf"
CREDENTIALS = "/etc/boxmaker/credentials"
PODMAN = '"/usr/bin/podman"'  # the root's own podman (a Nix string)
BOOT_WAIT = 300.0  # a busy 2-core machine: a bound on hanging, never a measure
# Booting ends when loopd is ready, after its self-test waited for the model: systemd itself
# gives up on loopd after its TimeoutStartSec (the manifest's start_timeout), so the test does.
START_WAIT = 1200.0
# Keys lib.nix sets that systemd 252 does not know; it logs and ignores them. Listed, not
# dropped: each is checked to be in the rendered unit and named in systemd's complaint.
NEWER_THAN_252: tuple[str, ...] = ()


def _nix_list(values: list[str]) -> str:
    return "[ " + " ".join(nix_string(v) for v in values) + " ]"


def _toml(settings: dict) -> str:
    """The config file from nested settings: one [section] (or [a.b]) per table."""
    lines: list[str] = []

    def table(prefix: str, values: dict) -> None:
        scalars = {k: v for k, v in values.items() if not isinstance(v, dict)}
        if scalars or not prefix:
            if prefix:
                lines.append(f"[{prefix}]")
            lines.extend(f"{key} = {json.dumps(value)}" for key, value in scalars.items())
        for key, value in values.items():
            if isinstance(value, dict):
                table(f"{prefix}.{key}" if prefix else key, value)

    table("", settings)
    return "\n".join(lines) + "\n"


@dataclass
class Machine:
    """A booted root; ``pid`` is its systemd (PID 1 inside)."""

    name: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        """systemd in the container: the child of systemd-nspawn."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        text = children.read_text().split() if children.exists() else []
        if not text:
            raise AssertionError(f"{self.name}: systemd-nspawn has no child:\n{self.console()}")
        return int(text[0])

    def console(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def run(self, *argv: str, user: str | None = None, check: bool = False,
            timeout: float = BOOT_WAIT, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        """A command in the machine: as root, or as ``user`` through a login-like transient
        unit (systemd-run --pipe), with the user's own groups and no extra privileges."""
        if user is None:
            command = ["nsenter", "-t", str(self.pid), "-a", *argv]
        else:
            extra = [f"--setenv={k}={v}" for k, v in (env or {}).items()]
            command = [
                "nsenter", "-t", str(self.pid), "-a", "systemd-run", "--quiet", "--wait",
                "--pipe", "--collect", f"--uid={user}", f"--setenv=HOME=/home/{user}",
                "--setenv=PATH=/usr/local/bin:/usr/bin:/bin",
                # systemd-run looks a bare name up in the caller's PATH: env uses the user's.
                "--property=WorkingDirectory=~", *extra, "/usr/bin/env", *argv,
            ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}):\n"
                                 f"{done.stdout}\n{done.stderr}")  # fmt: skip
        return done

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", *args)

    def journal(self, unit: str) -> str:
        return self.run("journalctl", "-b", "-u", unit, "--no-pager", "-n", "60").stdout

    def wait_running(self) -> str:
        """``systemctl is-system-running --wait``: running, or degraded when a unit failed."""
        deadline = time.monotonic() + START_WAIT
        while time.monotonic() < deadline:
            try:
                done = self.run("systemctl", "is-system-running", "--wait", timeout=START_WAIT)
            except AssertionError:  # nspawn has not started systemd yet
                time.sleep(0.5)
                continue
            except subprocess.TimeoutExpired:
                jobs = self.run("systemctl", "list-jobs", "--no-pager").stdout
                raise AssertionError(f"{self.name} did not finish booting:\n{jobs}") from None
            state = done.stdout.strip()
            if state in ("running", "degraded"):
                return state
            time.sleep(0.5)
        raise AssertionError(f"{self.name} did not finish booting:\n{self.console()}")

    def poweroff(self) -> None:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            self.run("systemctl", "poweroff", timeout=30)
        try:
            self.process.wait(timeout=BOOT_WAIT)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


def boot(root: Path, name: str, log: Path) -> Machine:
    """Boot ``root`` with systemd-nspawn (no machined here: --register=no --keep-unit); it
    shares the host's network, so the model server's loopback port is reachable from the
    roles with a network, and the repository (the venv) is bound in read-only."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            ["systemd-nspawn", "-q", "--register=no", "--keep-unit", f"--machine={name}",
             "-D", str(root), "-b", "--console=pipe", f"--bind-ro={REPO}"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    machine = Machine(name, root, process, log)
    deadline = time.monotonic() + BOOT_WAIT
    while True:
        with contextlib.suppress(AssertionError):
            machine.pid  # noqa: B018 -- systemd has started
            break
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"systemd-nspawn did not start {name}:\n{machine.console()}")
        time.sleep(0.2)
    return machine


class Install:
    """What the NixOS module puts on the host, written into a (not yet booted) root."""

    def __init__(self, root: Path, *, runtime: str = "runc"):
        self.root = root
        self.runtime = runtime
        self.manifest = nix_eval(f"{lib_expression()}.manifest")

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def chroot(self, *argv: str) -> None:
        subprocess.run(["chroot", str(self.root), *argv], check=True, capture_output=True)

    def users(self) -> None:
        """users.groups / users.users as the module declares them."""
        groups = nix_eval(f"{lib_expression()}.ownerGroups")
        for group in groups:
            self.chroot("groupadd", "--system", group)
        for role in self.manifest["roles"]:
            self.chroot("useradd", "--system", "--gid", self.manifest["group"],
                        "--home-dir", f"/var/lib/boxmaker-podman/{role}", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", f"boxmaker-{role}")  # fmt: skip
        self.chroot("useradd", "--create-home", "--groups", ",".join(groups), OWNER)

    def commands(self, packages: list[str]) -> None:
        """environment.systemPackages: bxctl and every role's command on the owner's PATH, run by
        the root's own Python 3.11 with the workspace's packages (the repository is bound in)."""
        site = next((REPO / ".venv" / "lib").glob("python3.*/site-packages"))
        for package in packages:
            for entry in metadata.distribution(package).entry_points.select(
                group="console_scripts"
            ):
                module, _, function = entry.value.partition(":")
                script = self.path(f"/usr/local/bin/{entry.name}")
                script.write_text(
                    f"#!/usr/bin/python3 -sB\nimport site, sys\nsite.addsitedir({str(site)!r})\n"
                    f"from {module} import {function}\nsys.exit({function}())\n"
                )
                script.chmod(0o755)

    def tmpfiles(self) -> None:
        rules = nix_eval(f"{lib_expression()}.tmpfiles")
        self.path("/etc/tmpfiles.d/boxmaker.conf").write_text("\n".join(rules) + "\n")

    def containers_conf(self) -> None:
        settings = nix_eval(
            f'{lib_expression()}.containersSettings {{ runtime = "{self.runtime}"; }}'
        )
        target = self.path(CONTAINERS_CONF)
        target.parent.mkdir(parents=True, exist_ok=True)
        # The images' own ulimits fit this machine's hard limits (images/containers.conf).
        settings["containers"]["default_ulimits"] = ["nofile=1024:1024", "nproc=1024:1024"]
        target.write_text(_toml(settings))
        # Debian's podman 4.3 ignores CONTAINERS_CONF_OVERRIDE (newer podman, NixOS's, reads
        # it): here the same settings go where a host administrator puts them.
        system = self.path("/etc/containers/containers.conf")
        system.parent.mkdir(parents=True, exist_ok=True)
        system.write_text(_toml(settings))

    def image(self, name: str, layout: Path, digest: str) -> None:
        """``<IMAGES>/<name>/image.tar`` and ``digest.env``, as nix/packages.nix builds them."""
        directory = self.path(f"{IMAGES}/{name}")
        directory.mkdir(parents=True, exist_ok=True)
        with tarfile.open(directory / "image.tar", "w") as tar:
            tar.add(layout, arcname=".")
        (directory / "digest").write_text(digest + "\n")
        (directory / "digest.env").write_text(f"BOXMAKER_IMAGE_DIGEST={digest}\n")
        for path in (directory, directory / "image.tar", directory / "digest.env"):
            path.chmod(0o755 if path.is_dir() else 0o644)

    def credential(self, name: str, secret: bytes) -> str:
        """An encrypted credential file for LoadCredentialEncrypted= (no TPM here: the
        key-less format; the owner's host uses its TPM2 or host key)."""
        target = self.path(f"{CREDENTIALS}/{name}.cred")
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["systemd-creds", "encrypt", f"--name={name}", "--with-key=tpm2-absent",
                        "-", str(target)], input=secret, check=True, capture_output=True)
        return f"{CREDENTIALS}/{name}.cred"

    def unit(self, role: str, allow: list[str], credentials: dict[str, str],
             grantable: list[str]) -> None:
        given = " ".join(f"{k} = {nix_string(v)};" for k, v in credentials.items())
        unit = nix_eval(
            f"{lib_expression()}.unit {{ role = {nix_string(role)}; podman = {PODMAN}; "
            f'imageName = "localhost/boxmaker/{role}"; imageArchive = "{IMAGES}/{role}/image.tar"; '
            f'digestEnv = "{IMAGES}/{role}/digest.env"; '
            f'containersConf = "{CONTAINERS_CONF}"; allow = {_nix_list(allow)}; '
            f"credentialFiles = {{ {given} }}; grantable = {_nix_list(grantable)}; }}"
        )
        self._write(f"boxmaker-{role}", unit)

    def sockets(self) -> None:
        """The role sockets' .socket units (systemd.sockets), enabled by sockets.target."""
        for name in self.manifest["sockets"]:
            unit = nix_eval(f"{lib_expression()}.socketUnit {nix_string(name)}")
            directory = self.path("/etc/systemd/system")
            (directory / f"boxmaker-{name}.socket").write_text(render_socket(unit))
            for target in unit["wantedBy"]:
                link = directory / f"{target}.wants" / f"boxmaker-{name}.socket"
                link.parent.mkdir(exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    link.symlink_to(f"/etc/systemd/system/boxmaker-{name}.socket")

    def tool_runtime(self) -> None:
        unit = nix_eval(
            f"{lib_expression()}.toolRuntimeUnit {{ podman = {PODMAN}; "
            f'toolkitArchive = "{IMAGES}/toolkit/image.tar"; '
            f'containersConf = "{CONTAINERS_CONF}"; }}'
        )
        self._write("boxmaker-tools", unit)

    def _write(self, name: str, unit: dict) -> None:
        directory = self.path("/etc/systemd/system")
        (directory / f"{name}.service").write_text(render_unit(unit))
        wants = directory / "multi-user.target.wants"
        wants.mkdir(exist_ok=True)
        for target in unit.get("wantedBy", []):
            link = directory / f"{target}.wants" / f"{name}.service"
            link.parent.mkdir(exist_ok=True)
            with contextlib.suppress(FileExistsError):
                link.symlink_to(f"/etc/systemd/system/{name}.service")


def add_to_trust_store(root: Path, ca: Path) -> None:
    """The host's trust store holds ``ca`` (NixOS: security.pki.certificateFiles; Debian:
    update-ca-certificates writes /etc/ssl/certs/ca-certificates.crt with it)."""
    target = root / "usr/local/share/ca-certificates/boxmaker-test-ca.crt"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ca, target)
    subprocess.run(["chroot", str(root), "update-ca-certificates"], check=True,
                   capture_output=True)  # fmt: skip


def fresh_root(cached: Path, work: Path) -> Path:
    """A copy of the cached root to boot and write into (the cache itself stays clean)."""
    root = work / "root"
    subprocess.run(["cp", "-a", "--reflink=auto", str(cached), str(root)], check=True)
    return root


@contextlib.contextmanager
def booted(root: Path, name: str, log: Path) -> Iterator[Machine]:
    machine = boot(root, name, log)
    try:
        yield machine
    finally:
        machine.poweroff()


def remove(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)

