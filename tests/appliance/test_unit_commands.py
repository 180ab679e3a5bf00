"""The command lines of the module's units, judged by the programs that run them.

- lib.nix writes every Exec*= word once, as nixpkgs' utils.escapeSystemdExecArg does (a JSON
  string, % and $ doubled): systemd's own parser (``systemd-analyze verify``) reads back exactly
  the generated words. The probe is the executable's path, the one word verify prints; systemd
  does no variable expansion in that word, so there it keeps ``$$`` (documented: the program
  may not be a variable); in an argument ``$$`` is a literal ``$``.
- After a unit loads a new image, its ExecStartPost= leaves one image per name in the unit's
  podman store: run with real podman on a store that loaded two builds of one image.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.requires import needs

from .nix import lib_expression, needs_nix, nix_eval
from .units import exec_words

PROBE = "/nonexistent/x"
# What a word may hold: quoting, escapes, specifiers, variables, separators, and non-ASCII.
WORD = st.text(alphabet=st.sampled_from(list(' "\'\\%$;{}@:=,\t/ab9éΩ中')) | st.characters(
    blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=24)


def nix_text(word: str) -> str:
    """A Nix string literal of any text (Nix has JSON's escapes but \\u)."""
    return json.dumps(word, ensure_ascii=False).replace("${", "\\${")


def escaped(words: list[str]) -> list[str]:
    listed = " ".join(nix_text(word) for word in words)
    return nix_eval(f"map {lib_expression()}.escapeExecArg [ {listed} ]")


def read_back(tmp: Path, lines: list[str]) -> dict[int, str]:
    """The program path systemd reads from each ExecStart= line, by unit index."""
    for index, line in enumerate(lines):
        (tmp / f"u{index}.service").write_text(
            f"[Service]\nType=oneshot\nExecStart={line} \"argument\"\n")
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(f"u{i}.service" for i in range(len(lines)))],
        cwd=tmp, capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = {}
    for match in re.finditer(
        r"^(?:\S*/)?u(\d+)\.service(?::\d+)?: (?:Command (.*) is not executable: .*|"
        r"Executable (?:name|path) [a-z ]+: (.*))$", done.stderr, re.MULTILINE,
    ):  # fmt: skip
        found[int(match[1])] = match[2] if match[2] is not None else match[3]
    return found


@needs_nix
@needs("systemd-analyze")
@settings(max_examples=25)
@given(words=st.lists(WORD, min_size=1, max_size=8))
def test_systemd_reads_back_exactly_the_word_lib_nix_escaped(tmp_path_factory, words):
    tmp = tmp_path_factory.mktemp("exec")
    paths = [PROBE + word for word in words]
    got = read_back(tmp, escaped(paths))
    assert got == {i: path.replace("$", "$$") for i, path in enumerate(paths)}


@needs_nix
def test_an_exec_line_leaves_only_the_digest_to_systemd():
    line = nix_eval(f'{lib_expression()}.execLine [ "/bin/podman" "a b" "50%" '
                    f'"$HOME" "x@\\${{BOXMAKER_IMAGE_DIGEST}}" ]')
    assert line == ('"/bin/podman" "a b" "50%%" "$$HOME" "x@${BOXMAKER_IMAGE_DIGEST}"')
    assert exec_words(line) == ["/bin/podman", "a b", "50%", "$HOME",
                                "x@${BOXMAKER_IMAGE_DIGEST}"]


def image_archive(directory: Path, name: str, env: dict[str, str]) -> Path:
    """An OCI archive of localhost/boxmaker/probe:latest holding one file, as the module loads
    each role's image (<name>:latest)."""
    layer = directory / f"layer-{name}.tar"
    data = directory / "content"
    data.write_text(f"the {name} build\n")
    with tarfile.open(layer, "w") as tar:
        tar.add(data, arcname="content")
    subprocess.run(["podman", "import", "-q", str(layer), "localhost/boxmaker/probe:latest"],
                   env=env, check=True, capture_output=True)
    archive = directory / f"image-{name}.tar"
    subprocess.run(["podman", "save", "-q", "--format", "oci-archive", "-o", str(archive),
                    "localhost/boxmaker/probe:latest"], env=env, check=True, capture_output=True)
    return archive


def store(directory: Path) -> dict[str, str]:
    """A podman store of its own (as each unit has one under its HOME)."""
    directory.mkdir()
    (directory / "storage.conf").write_text(
        f'[storage]\ndriver = "vfs"\ngraphroot = "{directory}/graph"\n'
        f'runroot = "{directory}/run"\n')
    (directory / "containers.conf").write_text(
        '[engine]\nevents_logger = "file"\ncgroup_manager = "cgroupfs"\n')
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(directory / "storage.conf"),
            "CONTAINERS_CONF": str(directory / "containers.conf")}


def images(env: dict[str, str]) -> list[str]:
    listed = subprocess.run(["podman", "images", "--format", "json"], env=env, check=True,
                            capture_output=True, text=True).stdout
    return sorted(image["Id"] for image in json.loads(listed))


def pre(unit: str) -> list[str]:
    """A unit's ExecStartPre= lines as lib.nix writes them, for a role or the tool runtime."""
    if unit == "tools":
        expression = ('.toolRuntimeUnit { podman = "podman"; toolkitArchive = "a"; '
                      'containersConf = "c"; }')
    else:
        expression = (f'.unit {{ role = "{unit}"; podman = "podman"; imageName = "i"; '
                      'imageArchive = "a"; digestEnv = "d"; containersConf = "c"; }')
    return nix_eval(f"({lib_expression()}{expression}).serviceConfig.ExecStartPre")


@pytest.mark.sandbox
@needs_nix
@needs("podman")
@pytest.mark.parametrize("unit", ["loopd", "tools"])
def test_after_a_second_deploy_the_units_store_keeps_one_image(tmp_path, unit):
    """Each deploy runs the unit's ExecStartPre= lines: the load, then the prune. The tool
    runtime's toolkit image is held by no container between calls, and stays."""
    builder = store(tmp_path / "builder")
    old, new = (image_archive(tmp_path, name, builder) for name in ("old", "new"))
    env = store(tmp_path / "unit")
    for archive in (old, new):  # two deploys, each the unit's ExecStartPre= lines in turn
        load, prune = pre(unit)
        assert exec_words(load)[:3] == ["podman", "load", "--quiet"]
        assert prune.startswith("-")  # a failed prune does not fail the unit
        subprocess.run(["podman", "load", "-q", f"--input={archive}"], env=env, check=True,
                       capture_output=True)
        subprocess.run(exec_words(prune), env=env, check=True, capture_output=True)
    current = json.loads(subprocess.run(
        ["podman", "image", "inspect", "localhost/boxmaker/probe:latest"], env=env, check=True,
        capture_output=True, text=True).stdout)[0]["Id"]
    assert images(env) == [current]
