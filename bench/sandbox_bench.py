"""Per-call sandbox overhead: bubblewrap and podman against a bare subprocess running the same
toolkit program (``bx-tool echo``) with the same interpreter and options, and that bare start
beside the interpreter starting with nothing to do (``python3 -I -S -c pass``) and with only
the one module every call needs (``import json``).

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
from brokerd.sandbox._call import TOOLKIT_INTERPRETER
from bxcore.tools import DecisionRecord

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "images"))
sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402
from bximage import toolkit as toolkit_image  # noqa: E402

PYTHON = "/usr/bin/python3"  # the interpreter both sandboxes' layouts run on this host
BUBBLEWRAP_BOUND_MS = 30.0  # overhead over the bare start, at most (issue 19)
PODMAN_BOUND_MS = 300.0
CLOSE = "as close as imports allow"  # the bound on the bare start: no figure
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
    """The same program, interpreter and options with no sandbox at all."""
    done = subprocess.run(
        [PYTHON, *TOOLKIT_INTERPRETER, "echo", "--class", "public"],
        input=ARGUMENTS.encode(), capture_output=True, check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(TOOLKIT_DIR.parent)},
    )
    assert json.loads(done.stdout)["content"] == "bench"


def interpreter(code: str) -> Callable[[], None]:
    """The interpreter alone, isolated and without site: the floor of any Python start."""

    def start() -> None:
        subprocess.run([PYTHON, "-I", "-S", "-c", code], check=True, env={"PATH": "/usr/bin:/bin"})

    return start


def through(sandbox: BubblewrapSandbox | PodmanSandbox) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        outcome = await sandbox.run(allow(SPEC))
        assert isinstance(outcome, ToolOutput), outcome

    return call


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


def bound(name: str, overhead: float, most: float) -> str:
    verdict = "met" if overhead <= most else "**not met**"
    return f"| {name} | {overhead:+.1f} ms | ≤ {most:.0f} ms | {verdict} |"


def interleaved(calls: int, paths: dict[str, Callable[[], None]]) -> dict[str, list[float]]:
    """``calls`` timed runs of each path, one of each in turn, so that load from other work on
    the machine falls on all of them alike; one untimed warm-up each first."""
    for one in paths.values():
        one()
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(calls):
        for name, one in paths.items():
            started = time.perf_counter()
            one()
            samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--no-write", action="store_true")
    options = parser.parse_args()
    bwrap = BubblewrapSandbox(toolkit_dir=TOOLKIT_DIR)
    store = Path(tempfile.mkdtemp(prefix="bx-bench-podman-proxy-sandbox-"))
    podman = podman_sandbox(store)
    try:
        with podman_service(podman, store) as remote:
            results = interleaved(options.calls, {
                "python3 -I -S -c pass": interpreter("pass"),
                "python3 -I -S -c 'import json'": interpreter("import json"),
                "bare subprocess": bare,
                "bubblewrap": lambda: asyncio.run(through(bwrap)()),
                "podman": lambda: asyncio.run(through(podman)()),
                "podman via its service": lambda: asyncio.run(through(remote)()),
            })
    finally:
        remove_store(podman, store)
    baseline = statistics.median(results["bare subprocess"])
    table = "\n".join(row(name, samples, baseline) for name, samples in results.items())
    overhead = {name: statistics.median(results[name]) - baseline
                for name in ("bubblewrap", "podman")}
    floor = statistics.median(results["python3 -I -S -c pass"])
    flags = " ".join(TOOLKIT_INTERPRETER)
    user = "root" if os.geteuid() == 0 else "non-root"
    body = f"""## Sandbox per-call overhead (`bench/sandbox_bench.py`)

Measured {report.today()} on {report.machine_line()}; {report.load_note()} at the end; run as
{user}. One `bx-tool echo` call per run, {options.calls} runs of each path taken in turn (one of
each, then again) after one warm-up each, wall-clock from starting the process to having parsed
its JSON result. *bare subprocess*: `{PYTHON} {flags} echo` with no sandbox, the options both
backends start the toolkit with. *bubblewrap*: `BubblewrapSandbox.run`. *podman*:
`PodmanSandbox.run` (`podman run --rm` of the toolkit image by digest, private overlay store);
*podman via its service*: the same through `podman system service` and `--remote`, as brokerd
runs tools on the appliance. The two interpreter rows start `{PYTHON}` with nothing to do and
with only `json`, which every call needs to read its arguments and print its result.
Limits as enforced by bubblewrap here: {bwrap.enforced_limits()}.

| path | median ms | p90 ms | median vs bare ms |
|---|---|---|---|
{table}

| Figure | This run | Bound | |
|---|---|---|---|
{bound("bubblewrap over the bare subprocess", overhead["bubblewrap"], BUBBLEWRAP_BOUND_MS)}
{bound("podman over the bare subprocess", overhead["podman"], PODMAN_BOUND_MS)}
| bare toolkit start over `python3 -I -S -c pass` | {baseline - floor:+.1f} ms | {CLOSE} | |
"""
    if options.no_write:
        print(body)
    else:
        print(report.write_section("sandbox", body))


if __name__ == "__main__":
    main()
