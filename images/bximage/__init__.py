"""bximage: a stdlib-only, deterministic builder of OCI image layouts, for every role image.

    from bximage import File, Directory, Symlink, ImageConfig, build_image

    image = build_image(
        [File("app/run.py", data=b"print('hi')\\n"), Symlink("bin/python3", "/usr/bin/python3.11")],
        ImageConfig(entrypoint=("/usr/bin/python3.11", "/app/run.py"), user="1000:1000"),
        out=Path("build/images/app"),
        ref="app",
    )
    image.digest   # "sha256:<hex>", the sha256 of the manifest bytes: run it as name@<digest>
    image.layout   # the OCI image-layout directory (oci-layout, index.json, blobs/sha256/...)

Same entries and config give the same bytes, on any machine: one layer whose tar entries are
sorted, with mtime 0, uid/gid 0 and no user names, in PAX format; canonical JSON (sorted keys,
compact) for the config, manifest and index; optional gzip with mtime 0 at a fixed level.
Missing parent directories are added (mode 0755). ``inputs_key`` hashes everything that goes
into an image, so a caller can cache builds (``build_cached``). ``bximage.host`` collects files
from the host (with their symlink chains and shared libraries); ``bximage.toolkit`` is the
toolkit image. Import it with ``images/`` on ``sys.path`` (it is not a workspace package).
"""

from ._entries import Directory, Entry, File, Symlink
from ._layout import BuiltImage, ImageConfig, build_cached, build_image, inputs_key

__all__ = [
    "BuiltImage",
    "Directory",
    "Entry",
    "File",
    "ImageConfig",
    "Symlink",
    "build_cached",
    "build_image",
    "inputs_key",
]
