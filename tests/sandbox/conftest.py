"""Real sandboxes for the tests: both backends, the toolkit image in a private podman store, and
local HTTP servers on the host's loopback standing in for granted and refused hosts."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from brokerd.sandbox import BubblewrapSandbox, PodmanSandbox, PodmanSetup
from support.egress import egress_proxies  # noqa: F401 (a fixture for the tests here)
from support.requires import require

from .helpers import GRANTED_HOST, REFUSED_HOST

REPO = Path(__file__).resolve().parents[2]
TOOLKIT_DIR = REPO / "packages" / "toolkit" / "src" / "toolkit"
CONTAINERS_CONF = REPO / "images" / "containers.conf"
sys.path.insert(0, str(REPO / "images"))

from bximage import toolkit as toolkit_image  # noqa: E402

IMAGE_NAME = "localhost/boxmaker/toolkit"


@pytest.fixture(scope="session")
def podman_store(tmp_path_factory) -> Iterator[tuple[str, ...]]:
    """A private podman store holding the toolkit image, loaded by skopeo with its digest kept;
    emptied and deleted after the session."""
    require("podman", "skopeo")
    root = tmp_path_factory.mktemp("podman")
    storage = ("--root", str(root / "root"), "--runroot", str(root / "run"),
               "--storage-driver", "overlay")
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    yield storage
    subprocess.run(["podman", *storage, "rm", "--all", "--force", "--time=0"], env=env,
                   capture_output=True, check=False)
    subprocess.run(["podman", *storage, "rmi", "--all", "--force"], env=env,
                   capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def toolkit_digest(podman_store) -> str:
    image = toolkit_image.build(toolkit_image.default_cache())
    root, runroot = podman_store[1], podman_store[3]
    subprocess.run(
        ["skopeo", "copy", "--quiet", "--preserve-digests", image.oci_reference,
         f"containers-storage:[overlay@{root}+{runroot}]{IMAGE_NAME}:latest"],
        check=True, env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)},
    )
    return image.digest


@pytest.fixture(scope="session")
def podman_service(podman_store, toolkit_digest, tmp_path_factory) -> Iterator[str]:
    """``podman system service`` on the same store, as the appliance runs one for brokerd: the
    backend reaches it over a Unix socket (``--remote``) and has no podman storage of its own."""
    socket_path = tmp_path_factory.mktemp("service") / "podman.sock"
    url = f"unix://{socket_path}"
    service = subprocess.Popen(
        ["podman", *podman_store, "system", "service", "--time=0", url],
        env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(600):  # the service creates its socket once it listens
            if socket_path.is_socket() or service.poll() is not None:
                break
            time.sleep(0.1)
        if not socket_path.is_socket():
            pytest.fail(f"podman system service did not start (exit {service.poll()})")
        yield url
    finally:
        service.terminate()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()


@pytest.fixture
def work(tmp_path) -> Path:
    """A working directory for shell.run calls."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def scratch(tmp_path) -> Path:
    """Where the backend puts each call's secrets and proxy socket: empty after every call."""
    path = tmp_path / "scratch"
    path.mkdir()
    return path


# The egress proxy resolves these names from its own table: no DNS involved.
RESOLVER = {GRANTED_HOST: "127.0.0.1", REFUSED_HOST: "127.0.0.1"}


@pytest.fixture(params=["bubblewrap", "podman", "podman-remote"])
def backend(request, scratch):
    """Each sandbox test runs once per backend, and podman also through a podman service."""
    if request.param == "bubblewrap":
        require("bwrap")
        return BubblewrapSandbox(toolkit_dir=TOOLKIT_DIR, scratch_root=scratch,
                                 egress_resolver=RESOLVER)
    digest = request.getfixturevalue("toolkit_digest")
    if request.param == "podman-remote":
        remote = request.getfixturevalue("podman_service")
        setup = PodmanSetup(image=f"{IMAGE_NAME}@{digest}", containers_conf=None, remote=remote)
    else:
        storage = request.getfixturevalue("podman_store")
        setup = PodmanSetup(image=f"{IMAGE_NAME}@{digest}", containers_conf=CONTAINERS_CONF,
                            storage=storage)
    return PodmanSandbox(setup, scratch_root=scratch, egress_resolver=RESOLVER)


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"page {self.path} for {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[int]:
    """An HTTP server on the host's loopback (ephemeral port); returns the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


