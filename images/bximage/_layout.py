"""An OCI image layout from entries and a config; its digest is sha256 of the manifest bytes."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._entries import Entry, complete, describe, layer_tar

BUILDER_VERSION = "bximage/1"  # part of every cache key: bump it when the output bytes change
GZIP_LEVEL = 6
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
REF_ANNOTATION = "org.opencontainers.image.ref.name"


def canonical(value: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8: changing this changes every image digest."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an OCI image config (what podman runs and as whom)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/bin:/bin",)
    user: str = "0:0"
    workdir: str = "/"
    labels: Mapping[str, str] = field(default_factory=dict)
    architecture: str = "amd64"
    os: str = "linux"

    def document(self, diff_id: str) -> dict[str, Any]:
        runtime: dict[str, Any] = {"Env": list(self.env), "User": self.user,
                                   "WorkingDir": self.workdir}
        if self.entrypoint:
            runtime["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            runtime["Cmd"] = list(self.cmd)
        if self.labels:
            runtime["Labels"] = dict(self.labels)
        return {
            "architecture": self.architecture,
            "os": self.os,
            "config": runtime,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": BUILDER_VERSION}],
        }


@dataclass(frozen=True)
class BuiltImage:
    layout: Path  # the OCI image-layout directory
    digest: str  # sha256:<hex> of the manifest bytes
    ref: str  # the org.opencontainers.image.ref.name in index.json

    @property
    def oci_reference(self) -> str:
        """The skopeo/podman source name: ``oci:<layout>:<ref>``."""
        return f"oci:{self.layout}:{self.ref}"


def inputs_key(
    entries: Iterable[Entry], config: ImageConfig, *, ref: str = "latest", compress: bool = False
) -> str:
    """The sha256 of everything that decides the image's bytes."""
    head = canonical({"builder": BUILDER_VERSION, "config": config.document(""), "ref": ref,
                      "compress": compress})
    return _sha256(head + b"\n" + describe(complete(entries)))


def build_image(
    entries: Iterable[Entry],
    config: ImageConfig,
    out: Path,
    *,
    ref: str = "latest",
    compress: bool = False,
) -> BuiltImage:
    """Write the layout to ``out`` (which must not exist yet) and return it with its digest."""
    tar = layer_tar(complete(entries))
    layer = gzip.compress(tar, compresslevel=GZIP_LEVEL, mtime=0) if compress else tar
    config_bytes = canonical(config.document(_sha256(tar)))
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": _sha256(config_bytes),
                   "size": len(config_bytes)},
        "layers": [{"mediaType": LAYER_TYPE + ("+gzip" if compress else ""),
                    "digest": _sha256(layer), "size": len(layer)}],
    })
    index = canonical({
        "schemaVersion": 2,
        "manifests": [{"mediaType": MANIFEST_TYPE, "digest": _sha256(manifest),
                       "size": len(manifest), "annotations": {REF_ANNOTATION: ref}}],
    })
    out.mkdir(parents=True)
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for blob in (layer, config_bytes, manifest):
        (blobs / hashlib.sha256(blob).hexdigest()).write_bytes(blob)
    (out / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))
    (out / "index.json").write_bytes(index)
    return BuiltImage(layout=out, digest=_sha256(manifest), ref=ref)


def build_cached(
    entries: Iterable[Entry],
    config: ImageConfig,
    cache: Path,
    *,
    ref: str = "latest",
    compress: bool = False,
) -> BuiltImage:
    """``build_image`` into ``cache/<inputs key>/``, or the layout already there.

    The layout is built beside its final place and renamed into it, so a half-written build is
    never taken for a finished one, and two builders racing end with one identical copy.
    """
    entries = list(entries)
    key = inputs_key(entries, config, ref=ref, compress=compress).removeprefix("sha256:")
    final = cache / key
    if (final / "index.json").is_file():
        return _open(final, ref)
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=cache))
    try:
        build_image(entries, config, scratch / "layout", ref=ref, compress=compress)
        try:
            os.rename(scratch / "layout", final)
        except OSError:
            if not (final / "index.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _open(final, ref)


def _open(layout: Path, ref: str) -> BuiltImage:
    index = json.loads((layout / "index.json").read_text())
    for manifest in index["manifests"]:
        if manifest.get("annotations", {}).get(REF_ANNOTATION) == ref:
            return BuiltImage(layout=layout, digest=manifest["digest"], ref=ref)
    raise ValueError(f"{layout}/index.json: no manifest named {ref!r}")
