"""The toolkit image: the host's Python 3.11 and its standard library, the shared libraries
they need, static busybox for shell.run, CA certificates, and the toolkit package.

Entrypoint ``python3.11 -P -s -B -m toolkit`` with ``PYTHONPATH=/opt/toolkit``, the same way the
bubblewrap backend starts it. brokerd appends ``<tool> --class ... --root ...`` and passes the
arguments on stdin. Nix builds the owner's image from source; this one is for hosts and tests
without nixpkgs (see ../shared/reference/containers-nix-systemd.md, section 6).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from ._entries import Entry, File, Symlink
from ._layout import BuiltImage, ImageConfig, build_cached
from .host import host_path, host_tree, shared_libraries

PYTHON = "/usr/bin/python3.11"
STDLIB = "/usr/lib/python3.11"
# Not needed by any tool, and a third of the stdlib's size.
STDLIB_SKIP = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
               "config-3.11-x86_64-linux-gnu", "venv", "site-packages", "dist-packages")
BUSYBOX = "/bin/busybox"
APPLETS = ("sh", "cat", "ls", "echo", "sleep", "grep", "head", "tail", "wc", "sort", "find",
           "env", "id", "true", "false", "mkdir", "rm", "cp", "mv", "touch", "sed", "awk", "tr",
           "cut", "date", "pwd", "uname", "printf", "test", "yes", "seq", "ps", "kill")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TOOLKIT_TARGET = "opt/toolkit/toolkit"
REF = "boxmaker-toolkit"

CONFIG = ImageConfig(
    entrypoint=(PYTHON, "-P", "-s", "-B", "-m", "toolkit"),
    env=("PATH=/usr/bin:/bin", "PYTHONPATH=/opt/toolkit", "LANG=C.UTF-8"),
    user="0:0",
    labels={"org.opencontainers.image.title": "boxmaker toolkit"},
)


def toolkit_source() -> Path:
    """The toolkit package's source directory in this checkout."""
    return Path(__file__).resolve().parents[2] / "packages" / "toolkit" / "src" / "toolkit"


def entries(source: Path | None = None) -> list[Entry]:
    source = source or toolkit_source()
    found: list[Entry] = [*host_path(PYTHON), Symlink("usr/bin/python3", "python3.11")]
    found += host_tree(STDLIB, skip=STDLIB_SKIP)
    modules = glob.glob(f"{STDLIB}/lib-dynload/*.so")
    for library in shared_libraries([PYTHON, *modules]):
        found += host_path(library)
    found.append(File("usr/bin/busybox", source=Path(BUSYBOX), mode=0o755))
    found += [Symlink(f"usr/bin/{applet}", "busybox") for applet in APPLETS]
    if os.path.exists(CA_BUNDLE):
        found.append(File(CA_BUNDLE, data=Path(CA_BUNDLE).read_bytes()))
    found.append(File("etc/passwd", data=b"root:x:0:0:root:/:/bin/sh\n"))
    found.append(File("etc/group", data=b"root:x:0:\n"))
    for path in sorted(source.rglob("*.py")):
        relative = path.relative_to(source).as_posix()
        found.append(File(f"{TOOLKIT_TARGET}/{relative}", source=path))
    return found


def build(cache: Path, *, source: Path | None = None) -> BuiltImage:
    """The toolkit image layout under ``cache``, built only when its inputs changed."""
    return build_cached(entries(source), CONFIG, cache, ref=REF)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "boxmaker" / "images"
