"""Running the roles as containers: the role manifest and the podman arguments it gives."""

from .manifest import Manifest, load_manifest, parse_manifest
from .podman import container_name, podman_args, tool_runtime_args

__all__ = [
    "Manifest",
    "container_name",
    "load_manifest",
    "parse_manifest",
    "podman_args",
    "tool_runtime_args",
]
