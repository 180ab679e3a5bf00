"""bximage: byte-identical layouts from the same inputs, digest = sha256 of the manifest (as
skopeo reads it), parents added, bad paths refused, and builds cached by their inputs."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest
from bximage import Directory, File, ImageConfig, Symlink, build_cached, build_image, inputs_key
from support.requires import needs

from .conftest import toolkit_image  # noqa: F401 - puts images/ on sys.path first

ENTRIES = [File("app/run.py", data=b"print('hi')\n", mode=0o755), Symlink("bin/py", "/usr/x"),
           Directory("data", mode=0o700)]
CONFIG = ImageConfig(entrypoint=("/bin/py", "/app/run.py"), user="1000:1000")


def _tree(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("compress", [False, True])
def test_the_same_inputs_give_the_same_bytes(tmp_path, compress):
    first = build_image(ENTRIES, CONFIG, tmp_path / "a", ref="app", compress=compress)
    second = build_image(reversed(ENTRIES), CONFIG, tmp_path / "b", ref="app", compress=compress)
    assert _tree(first.layout) == _tree(second.layout)
    assert first.digest == second.digest


def test_the_digest_is_the_sha256_of_the_manifest(tmp_path):
    image = build_image(ENTRIES, CONFIG, tmp_path / "a", ref="app")
    index = json.loads((image.layout / "index.json").read_text())
    manifest_hex = index["manifests"][0]["digest"].removeprefix("sha256:")
    manifest = (image.layout / "blobs" / "sha256" / manifest_hex).read_bytes()
    assert image.digest == "sha256:" + hashlib.sha256(manifest).hexdigest()


@needs("skopeo")
def test_skopeo_reads_the_same_digest_from_the_layout(tmp_path):
    image = build_image(ENTRIES, CONFIG, tmp_path / "a", ref="app")
    raw = subprocess.run(["skopeo", "inspect", "--raw", image.oci_reference],
                         capture_output=True, check=True).stdout
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == image.digest


def test_the_layer_holds_sorted_entries_with_parents_and_zeroed_metadata(tmp_path):
    import tarfile

    image = build_image(ENTRIES, CONFIG, tmp_path / "a", ref="app")
    manifest = json.loads((image.layout / "blobs" / "sha256" /
                           image.digest.removeprefix("sha256:")).read_bytes())
    layer = image.layout / "blobs" / "sha256" / manifest["layers"][0]["digest"][7:]
    with tarfile.open(layer) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["app", "app/run.py", "bin", "bin/py", "data"]
    assert {(m.mtime, m.uid, m.gid, m.uname) for m in members} == {(0, 0, 0, "")}
    assert members[1].mode == 0o755 and members[4].mode == 0o700


@pytest.mark.parametrize("path", ["", "/", "a/../../etc", ".."])
def test_paths_that_escape_or_are_empty_are_refused(path):
    with pytest.raises(ValueError, match="not a usable path"):
        File(path, data=b"")


def test_builds_are_cached_by_their_inputs(tmp_path):
    first = build_cached(ENTRIES, CONFIG, tmp_path / "cache", ref="app")
    again = build_cached(ENTRIES, CONFIG, tmp_path / "cache", ref="app")
    assert first == again
    changed = [*ENTRIES, File("app/extra", data=b"x")]
    assert inputs_key(changed, CONFIG, ref="app") != inputs_key(ENTRIES, CONFIG, ref="app")
    other = build_cached(changed, CONFIG, tmp_path / "cache", ref="app")
    assert other.digest != first.digest
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(
        [first.layout.name, other.layout.name])
