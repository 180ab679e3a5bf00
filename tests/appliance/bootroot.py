"""A Debian root that boots systemd, made once with debootstrap and cached.

The root holds systemd 252 and podman with both runtimes (runc, crun), python3 for the owner's
bxctl (the workspace venv is bound in at its own path), and the CA bundle. It is cached under
``~/.cache/boxmaker/boot-root/<key>``, the key being the hash of the package list and the suite,
so a warm run only copies it (about 400 MB, a few seconds): each boot works on a copy of its own,
and the cached root is never written after it is made. Facts:
../shared/reference/systemd-boot-here.md.

    python -m tests.appliance.bootroot      # make (or find) the root; prints its path
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

SUITE = "bookworm"
BASE = ("systemd", "systemd-sysv", "dbus")
PACKAGES = (
    "podman", "runc", "crun", "conmon", "catatonit", "uidmap", "python3", "ca-certificates",
    "iproute2", "procps",
)  # fmt: skip
SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
BUILD_WAIT = 1800.0  # debootstrap and apt over the network: a bound on hanging, not a measure


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "boxmaker" / "boot-root"


def key() -> str:
    text = "\n".join([SUITE, *BASE, "--", *PACKAGES])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def mirror() -> str:
    """The Debian mirror this machine's apt already uses."""
    if SOURCES.exists():
        for line in SOURCES.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def _run(argv: list[str], log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_WAIT,
                              check=False)  # fmt: skip
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(argv[:3])} failed (rc={done.returncode}):\n{tail}")


def boot_root() -> Path:
    """The cached root, made now if it is missing (several minutes, once per package list)."""
    final = cache_dir() / key()
    if (final / "etc" / "boxmaker-root-complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    log = final.with_name(f"{final.name}.log")
    log.write_text("")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE)}", SUITE, str(work),
          mirror()], log)  # fmt: skip
    install = (
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        f"--no-install-recommends {' '.join(PACKAGES)} && apt-get clean"
    )
    _run(["systemd-nspawn", "-q", "--register=no", "--keep-unit", "-D", str(work), "--pipe",
          "sh", "-c", install], log)  # fmt: skip
    (work / "etc" / "boxmaker-root-complete").write_text(key() + "\n")
    shutil.rmtree(final, ignore_errors=True)
    work.rename(final)
    return final


if __name__ == "__main__":
    sys.exit(print(boot_root()))
