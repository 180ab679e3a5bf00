"""The toolkit image: the host's Python 3.11 and its standard library, the shared libraries
they need, static busybox for shell.run, CA certificates, and the toolkit package.

Entrypoint ``python3.11 -P -S -B -m toolkit`` with ``PYTHONPATH=/opt/toolkit``, the same way the
bubblewrap backend starts it. brokerd appends ``<tool> --class ... --root ...`` and passes the
arguments on stdin. Nix builds the owner's image from source; this one is for hosts and tests
without nixpkgs (see ../shared/reference/containers-nix-systemd.md, section 6).
"""

from __future__ import annotations

import glob
import importlib.util
import marshal
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
BYTECODE_SUFFIX = ".cpython-311.pyc"  # the image's interpreter is the host's python3.11

CONFIG = ImageConfig(
    entrypoint=(PYTHON, "-P", "-S", "-B", "-m", "toolkit"),
    env=("PATH=/usr/bin:/bin", "PYTHONPATH=/opt/toolkit", "LANG=C.UTF-8"),
    user="0:0",
    labels={"org.opencontainers.image.title": "boxmaker toolkit"},
)


def toolkit_source() -> Path:
    """The toolkit package's source directory in this checkout."""
    return Path(__file__).resolve().parents[2] / "packages" / "toolkit" / "src" / "toolkit"


def hash_checked(entry: Entry) -> Entry:
    """A stdlib ``__pycache__/<name>.cpython-311.pyc`` made valid in the image.

    The host's bytecode files are checked against their source's mtime, and every file in the
    image has mtime 0, so the interpreter would find each one stale and compile the module again
    at every start (``-B`` writes nothing back): most of a container's toolkit start. The same
    code under a checked-hash header (PEP 552: the source's hash instead of its mtime) is valid
    as long as the source is the one it was compiled from, and stale otherwise, as before."""
    if not isinstance(entry, File) or entry.source is None:
        return entry
    parts = entry.source.parts
    name = parts[-1]
    if len(parts) < 2 or parts[-2] != "__pycache__" or not name.endswith(BYTECODE_SUFFIX):
        return entry
    source = entry.source.parent.parent / (name[: -len(BYTECODE_SUFFIX)] + ".py")
    if not source.is_file():
        return entry
    pyc = entry.source.read_bytes()
    if pyc[:4] != importlib.util.MAGIC_NUMBER or int.from_bytes(pyc[4:8], "little") != 0:
        return entry  # another version's, or already hash-based: left as it is
    flags = (0b11).to_bytes(4, "little")  # hash-based, checked
    header = importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source.read_bytes())
    return File(entry.path, data=header + pyc[16:], mode=entry.mode)


def compiled(path: Path, target: str) -> File:
    """``path`` compiled to a checked-hash bytecode file at its ``__pycache__`` place under
    ``target``."""
    data = path.read_bytes()
    code = compile(data, f"/{target}", "exec", dont_inherit=True)
    flags = (0b11).to_bytes(4, "little")
    pyc = importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(data)
    directory, _, name = target.rpartition("/")
    return File(f"{directory}/__pycache__/{name[:-3]}{BYTECODE_SUFFIX}",
                data=pyc + marshal.dumps(code))


def entries(source: Path | None = None) -> list[Entry]:
    source = source or toolkit_source()
    found: list[Entry] = [*host_path(PYTHON), Symlink("usr/bin/python3", "python3.11")]
    found += [hash_checked(entry) for entry in host_tree(STDLIB, skip=STDLIB_SKIP)]
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
        found.append(compiled(path, f"{TOOLKIT_TARGET}/{relative}"))
    return found


def build(cache: Path, *, source: Path | None = None) -> BuiltImage:
    """The toolkit image layout under ``cache``, built only when its inputs changed."""
    return build_cached(entries(source), CONFIG, cache, ref=REF)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "boxmaker" / "images"
