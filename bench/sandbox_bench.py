"""Per-call sandbox overhead: bubblewrap and podman against a bare subprocess running the same
toolkit program (``bx-tool echo``) with the same interpreter.

    uv run python bench/sandbox_bench.py [--calls 20] [--no-write]

Builds (or reuses) the toolkit image, loads it into a private podman store that it deletes
afterwards, and writes its figures into its own section of docs/performance.md (between the
bench:sandbox markers), leaving every other section alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from brokerd.policy._decision import mint
from brokerd.sandbox import BubblewrapSandbox, PodmanSandbox, PodmanSetup, SandboxSpec, ToolOutput
from bxcore.tools import DecisionRecord

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "images"))
from bximage import toolkit as toolkit_image  # noqa: E402

DOC = ROOT / "docs" / "performance.md"
SECTION = re.compile(r"<!-- bench:sandbox -->.*?<!-- /bench:sandbox -->", re.DOTALL)
TOOLKIT_DIR = ROOT / "packages" / "toolkit" / "src" / "toolkit"
CONF = ROOT / "images" / "containers.conf"
ARGUMENTS = json.dumps({"text": "bench"})
SPEC = SandboxSpec(program="echo", arguments=ARGUMENTS)


def allow(spec: SandboxSpec):
    record = DecisionRecord(session="bench", call=0, tool=spec.program,
                            arguments_sha256="sha256:" + "0" * 64, verdict="allow",
                            grant="bench", reason="bench")
    return mint(record, spec)


def bare() -> None:
    """The same program and interpreter with no sandbox at all."""
    done = subprocess.run(
        ["/usr/bin/python3", "-P", "-s", "-B", "-m", "toolkit", "echo", "--class", "public"],
        input=ARGUMENTS.encode(), capture_output=True, check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(TOOLKIT_DIR.parent)},
    )
    assert json.loads(done.stdout)["content"] == "bench"


def through(sandbox: BubblewrapSandbox | PodmanSandbox) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        outcome = await sandbox.run(allow(SPEC))
        assert isinstance(outcome, ToolOutput), outcome

    return call


def timed(calls: int, one: Callable[[], None]) -> list[float]:
    one()  # warm caches once; not counted
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        one()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def podman_sandbox(store: Path) -> PodmanSandbox:
    image = toolkit_image.build(toolkit_image.default_cache())
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    root, runroot = store / "root", store / "run"
    subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", image.oci_reference,
                    f"containers-storage:[overlay@{root}+{runroot}]localhost/boxmaker/toolkit"],
                   check=True, env=env)
    storage = ("--root", str(root), "--runroot", str(runroot), "--storage-driver", "overlay")
    return PodmanSandbox(PodmanSetup(image=f"localhost/boxmaker/toolkit@{image.digest}",
                                     containers_conf=CONF, storage=storage))


@contextlib.contextmanager
def podman_service(local: PodmanSandbox, store: Path) -> Iterator[PodmanSandbox]:
    """The appliance's tool runtime: ``podman system service`` on the same store, reached with
    ``--remote`` (what brokerd does from its container)."""
    socket_path = store / "podman.sock"
    url = f"unix://{socket_path}"
    service = subprocess.Popen(
        [*local.setup.base(), "system", "service", "--time=0", url],
        env={**os.environ, "CONTAINERS_CONF": str(CONF)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        while not socket_path.is_socket():
            if service.poll() is not None:
                raise SystemExit(f"podman system service exited with {service.returncode}")
            time.sleep(0.05)
        yield PodmanSandbox(PodmanSetup(image=local.setup.image, containers_conf=None, remote=url))
    finally:
        service.terminate()
        service.wait(timeout=60)


def remove_store(sandbox: PodmanSandbox, store: Path) -> None:
    env = {**os.environ, "CONTAINERS_CONF": str(CONF)}
    subprocess.run([*sandbox.setup.base(), "rmi", "--all", "--force"], env=env,
                   capture_output=True, check=False)
    shutil.rmtree(store, ignore_errors=True)


def row(name: str, samples: list[float], baseline: float) -> str:
    median = statistics.median(samples)
    p90 = statistics.quantiles(samples, n=10)[-1]
    return f"| {name} | {median:.1f} | {p90:.1f} | {median - baseline:+.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--no-write", action="store_true")
    options = parser.parse_args()
    results = {"bare subprocess": timed(options.calls, bare)}
    bwrap = BubblewrapSandbox(toolkit_dir=TOOLKIT_DIR)
    results["bubblewrap"] = timed(options.calls, lambda: asyncio.run(through(bwrap)()))
    store = Path(tempfile.mkdtemp(prefix="bx-bench-podman-"))
    podman = podman_sandbox(store)
    try:
        results["podman"] = timed(options.calls, lambda: asyncio.run(through(podman)()))
        with podman_service(podman, store) as remote:
            results["podman via its service"] = timed(
                options.calls, lambda: asyncio.run(through(remote)())
            )
    finally:
        remove_store(podman, store)
    baseline = statistics.median(results["bare subprocess"])
    table = "\n".join(row(name, samples, baseline) for name, samples in results.items())
    user = "root" if os.geteuid() == 0 else "non-root"
    load = os.getloadavg()[0]
    text = f"""<!-- bench:sandbox -->
## Sandbox per-call overhead (bench/sandbox_bench.py)

One `bx-tool echo` call, {options.calls} calls each after one warm-up, wall-clock from starting
the process to having parsed its JSON result. Bare subprocess: `/usr/bin/python3 -m toolkit`
with no sandbox. bubblewrap: `BubblewrapSandbox.run` (per-call cgroup, prlimit, bwrap). podman:
`PodmanSandbox.run` (`podman run --rm` of the toolkit image by digest, runc, private overlay
store); podman via its service: the same through `podman system service` and `--remote`, as
brokerd runs tools on the appliance. Machine: {platform.machine()}, {os.cpu_count()} cores,
Linux {platform.release()}, programs run by /usr/bin/python3, run as {user}; load average
{load:.1f} at the end (the machine is shared: compare the rows with each other, not with
another run).
Limits as enforced here: {bwrap.enforced_limits()}.

| path | median ms | p90 ms | median overhead vs bare ms |
|---|---|---|---|
{table}
<!-- /bench:sandbox -->"""
    print(text)
    if not options.no_write:
        old = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Performance\n"
        if SECTION.search(old):
            new = SECTION.sub(lambda _: text, old)
        else:
            new = f"{old.rstrip()}\n\n{text}\n"
        DOC.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
