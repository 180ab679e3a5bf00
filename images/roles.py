"""Per-role images for hosts and tests without nixpkgs, built with bximage.

On the owner's host Nix builds each role's image (nix/packages.nix, dockerTools); here the same
roles are packed from this machine: the host's Python 3.11 and its standard library (as the
toolkit image takes them), the role's package and its dependency closure as installed in the
workspace venv, and the role's console script. Each role is its own image with only its own
closure, so loopd's image holds no gatewayd code and no httpx-less role carries httpx.

    PYTHONPATH=images python -m roles loopd inferproxy     # prints "<role> <layout> <digest>"
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

from bximage import BuiltImage, Entry, File, ImageConfig, Symlink, build_cached
from bximage.host import host_path, host_tree, shared_libraries
from bximage.toolkit import CA_BUNDLE, PYTHON, STDLIB, STDLIB_SKIP, default_cache
from packaging.requirements import Requirement

SITE = "opt/boxmaker/site"  # the role's packages; on PYTHONPATH
BIN = "usr/local/bin"
ENV = ("PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1")
PASSWD = b"root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534::/:/bin/false\n"


def config_for(role: str) -> ImageConfig:
    return ImageConfig(
        # httpx reads SSL_CERT_FILE before certifi's bundle: the image's trust store is the host's.
        env=(*ENV, f"PYTHONPATH=/{SITE}", f"SSL_CERT_FILE={CA_BUNDLE}"),
        # The image's own user is nobody; the launcher maps one id and runs --user=0:0.
        user="65534:65534",
        labels={"org.opencontainers.image.title": f"boxmaker {role}"},
    )


def closure(name: str) -> list[metadata.Distribution]:
    """The distribution and everything it requires (extras and other platforms left out)."""
    seen: dict[str, metadata.Distribution] = {}
    pending = [name]
    while pending:
        current = metadata.distribution(pending.pop())
        key = current.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = current
        for text in current.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return [seen[key] for key in sorted(seen)]


def _editable_source(distribution: metadata.Distribution) -> Path | None:
    """A workspace member is installed editable: its code is in packages/<name>/src/<name>."""
    text = distribution.read_text("direct_url.json")
    if not text:
        return None
    url = json.loads(text)
    if not url.get("dir_info", {}).get("editable"):
        return None
    return Path(url["url"].removeprefix("file://")) / "src"


def _cached(path: Path) -> bool:
    return "__pycache__" in path.parts


def _site_entries(distribution: metadata.Distribution) -> list[Entry]:
    source = _editable_source(distribution)
    if source is not None:
        files = [p for p in sorted(source.rglob("*")) if p.is_file() and not _cached(p)]
        return [File(f"{SITE}/{p.relative_to(source).as_posix()}", source=p) for p in files]
    found: list[Entry] = []
    for relative in distribution.files or []:
        if "__pycache__" in relative.parts or relative.parts[0] in ("..", "bin"):
            continue
        path = Path(str(distribution.locate_file(relative)))
        mode = 0o755 if path.suffix == ".so" else 0o644
        found.append(File(f"{SITE}/{relative.as_posix()}", source=path, mode=mode))
    return found


def _console_script(distribution: metadata.Distribution, script: str) -> File:
    (entry,) = distribution.entry_points.select(group="console_scripts", name=script)
    module, _, function = entry.value.partition(":")
    text = f"#!{PYTHON} -sB\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    return File(f"{BIN}/{script}", data=text.encode(), mode=0o755)


def programs(role: str) -> list[str]:
    """The host programs the manifest puts in the role's image (brokerd: podman, a client of the
    tool runtime's service), as paths on this machine."""
    from bxctl.stack import load_manifest

    found = []
    for program in load_manifest().role(role).programs:
        path = shutil.which(program)
        if path is None:
            raise SystemExit(f"{role}'s image needs {program!r}, which is not installed")
        found.append(os.path.realpath(path))
    return found


def entries(role: str) -> list[Entry]:
    found: list[Entry] = [*host_path(PYTHON), Symlink("usr/bin/python3", "python3.11")]
    extra = programs(role)
    for program in extra:
        found += host_path(program)
    found += host_tree(STDLIB, skip=STDLIB_SKIP)
    distributions = closure(role)
    site_files: list[Entry] = []
    for distribution in distributions:
        site_files += _site_entries(distribution)
    native = [str(e.source) for e in site_files if isinstance(e, File) and e.path.endswith(".so")]
    binaries = [PYTHON, *extra, *glob.glob(f"{STDLIB}/lib-dynload/*.so"), *native]
    for library in shared_libraries(binaries):
        found += host_path(library)
    found += site_files
    found.append(_console_script(metadata.distribution(role), role))
    # The trust store, for every role that speaks TLS (gatewayd's wss:// and https:// to the
    # owner's Mattermost, memoryd's Honcho, brokerd's consult endpoint): the host's bundle,
    # so a CA the host trusts is trusted in the container too.
    found.append(File(CA_BUNDLE, data=Path(CA_BUNDLE).read_bytes()))
    found.append(File("etc/passwd", data=PASSWD))
    found.append(File("etc/group", data=b"root:x:0:\nnogroup:x:65534:\n"))
    return found


def build(role: str, cache: Path | None = None) -> BuiltImage:
    """The role's image layout (cached by the hash of its inputs); run it by ``.digest``."""
    ref = f"boxmaker-{role}"
    return build_cached(entries(role), config_for(role), cache or default_cache(), ref=ref)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        image = build(name)
        print(name, image.layout, image.digest)
