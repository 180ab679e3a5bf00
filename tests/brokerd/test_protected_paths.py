"""Grants never reach the harness's own directories, nor mount its code writable
(``policy._protected.reaching``, pure; ``policy._protected.code_paths``, what the code is)."""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from brokerd.policy import parse_grant
from brokerd.policy._protected import Protected, code_paths, reaching

HOME = Path("/home/o")
HARNESS = (Protected(path="/home/o/.local/state/boxmaker", what="the state directory"),
           Protected(path="/run/boxmaker", what="the sockets' directory"))


def grant(sandbox: str = "", arguments: str = "") -> str:
    return (f'tools = ["fs.read"]\nmode = "auto"\nclasses = ["private"]\n{arguments}\n'
            f"[sandbox]\n{sandbox}\n")


def parsed(text: str):
    return parse_grant(text, "g.toml", home=HOME, resolve=lambda path: path)


@pytest.mark.parametrize(("text", "says"), [
    (grant('mounts = [{ path = "~" }]'), "sandbox.mounts.0.path (/home/o"),  # above
    (grant('mounts = [{ path = "/run/boxmaker" }]'), "the sockets' directory"),  # the same
    (grant('mounts = [{ path = "/home/o/.local/state/boxmaker/audit" }]'), "state"),  # inside
    (grant(arguments='[arguments.path]\npaths = ["/**"]'), "arguments.path.paths.0 (/**)"),
    (grant(arguments='[arguments.path]\npaths = ["~/.local/*/boxmaker/x"]'), "state"),
])
def test_a_grant_reaching_the_harness_is_named(text, says):
    why = reaching(parsed(text), HARNESS)
    assert why is not None and says in why


@pytest.mark.parametrize("text", [
    grant('mounts = [{ path = "~/notes" }]'),
    grant('mounts = [{ path = "/run/boxmaker-other" }]'),  # a sibling, not the directory
    grant(arguments='[arguments.path]\npaths = ["~/notes/**/*.md"]'),
])
def test_a_grant_beside_the_harness_is_fine(text):
    assert reaching(parsed(text), HARNESS) is None


CODE = (*HARNESS, Protected(path="/opt/venv", what="the Python environment", writes_only=True))


@pytest.mark.parametrize(("text", "says"), [
    (grant('mounts = [{ path = "/opt/venv", write = true }]'), "writable, resolved /opt/venv"),
    (grant('mounts = [{ path = "/opt", write = true }]'), "the Python environment"),  # above
    (grant('mounts = [{ path = "/opt/venv/lib", write = true }]'), "the Python environment"),
])
def test_a_writable_mount_of_the_harness_code_is_named(text, says):
    why = reaching(parsed(text), CODE)
    assert why is not None and says in why


@pytest.mark.parametrize("text", [
    grant('mounts = [{ path = "/opt/venv" }]'),  # read-only code changes nothing
    grant(arguments='[arguments.path]\npaths = ["/opt/venv/**"]'),  # a glob never writes
    grant('mounts = [{ path = "/opt/venv-other", write = true }]'),
])
def test_reading_the_harness_code_is_fine(text):
    assert reaching(parsed(text), CODE) is None


def test_the_code_paths_are_this_brokerds_environment_and_every_roles_package(tmp_path):
    found = {entry.path: entry for entry in code_paths(tmp_path)}
    assert all(entry.writes_only for entry in found.values())
    assert found[str(tmp_path)].what.startswith("the toolkit the sandboxes run")
    for name in ("toolkit", "brokerd", "loopd", "bxcore"):
        location = next(iter(importlib.util.find_spec(name).submodule_search_locations))
        assert os.path.realpath(location) in found, name
    for path in (sys.prefix, sys.base_prefix):
        assert os.path.realpath(path) in found
    # podman's hooks, runtimes and policies run on the host for every container
    for path in ("/etc/containers", "/usr/share/containers", "~/.config/containers"):
        assert found[os.path.realpath(os.path.expanduser(path))].what.startswith("podman's")


@pytest.mark.parametrize("path", [
    # the fourth attack on issue 31: each loaded as a writable mount
    f"/usr/lib/python{sys.version_info.major}.{sys.version_info.minor}", "/usr/lib",
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/python3/dist-packages", "/usr/libexec", "/usr/sbin",
    "/usr/local/lib", "/etc/ld.so.conf.d", "/etc", "/lib", "/bin",
])
def test_the_systems_programs_and_libraries_are_never_mounted_writable(path):
    """Every bubblewrap sandbox runs the host's python3 and its standard library, and a root
    brokerd's bwrap loads its libraries as root: none of it may be a writable mount."""
    text = grant(f'mounts = [{{ path = "{path}", write = true }}]')
    code = code_paths(None)
    why = reaching(parse_grant(text, "g.toml", home=HOME, resolve=os.path.realpath), code)
    assert why is not None, path
    assert reaching(parse_grant(text.replace(", write = true", ""), "g.toml", home=HOME,
                                resolve=os.path.realpath), code) is None


def test_brokerd_takes_every_descriptor_its_hard_limit_allows():
    """A model keeping ~110 calls running exhausted a soft limit of 1,024 (attack 31k, K6):
    ``brokerd serve`` raises its soft limit to the hard one, in a process started lower."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard <= 64:
        pytest.skip(f"the hard limit on open descriptors is {hard}")
    code = ("import resource\nfrom brokerd.wiring import all_descriptors\nall_descriptors()\n"
            "print(*resource.getrlimit(resource.RLIMIT_NOFILE))")
    done = subprocess.run(["prlimit", f"--nofile=64:{hard}", sys.executable, "-c", code],
                          capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == [str(hard), str(hard)], done
