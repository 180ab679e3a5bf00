"""The config file: TOML validated strictly; every error names the file, the dotted key and what
was expected; relative paths are taken relative to the file's directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from bxcore.config import Config, load_config, parse_config
from bxcore.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = REPO / "docs" / "config.example.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "boxmaker.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return str(caught.value)


def test_the_example_config_parses():
    config = load_config(EXAMPLE)
    assert config.secrets["mattermost_token"].backend == "credential"
    assert config.secrets["honcho_key"].variable == "HONCHO_KEY"
    assert config.inference.slots.background == 1
    assert config.inferproxy.mode == 0o660


def test_relative_paths_are_resolved_against_the_config_files_directory(tmp_path):
    config = load_config(EXAMPLE)
    assert config.secrets["consult_key"].path == EXAMPLE.parent / "secrets" / "consult.key"
    assert config.baseline.system == EXAMPLE.parent / "system.md"
    assert config.paths.home == Path("/var/lib/boxmaker")  # absolute stays as written

    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    path = elsewhere / "c.toml"
    path.write_text('[paths]\nhome = "state"\n[channel]\nsocket = "../run/loop.sock"\n')
    config = load_config(path)
    assert config.paths.home == elsewhere / "state"
    assert config.loop_socket == elsewhere / "../run/loop.sock"


def test_a_path_with_a_tilde_is_the_users_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = load_config(write(tmp_path, '[paths]\nhome = "~/bx"\n'))
    assert config.paths.home == tmp_path / "bx"


def test_home_defaults_to_boxmaker_home(tmp_path, monkeypatch):
    monkeypatch.setenv("BOXMAKER_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("BOXMAKER_RUN", str(tmp_path / "r"))
    config = load_config(write(tmp_path, ""))
    assert config.paths.home == tmp_path / "h"
    assert config.socket("loop") == tmp_path / "r" / "loop.sock"
    assert config.loop_socket == tmp_path / "r" / "loop.sock"


def test_home_defaults_to_var_lib_boxmaker_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("BOXMAKER_HOME")
    monkeypatch.delenv("BOXMAKER_RUN")
    config = load_config(write(tmp_path, ""))
    assert config.paths.home == Path("/var/lib/boxmaker")
    assert config.paths.run == Path("/run/boxmaker")


def test_an_empty_file_gives_the_documented_defaults(tmp_path):
    config = load_config(write(tmp_path, ""))
    assert config.loop.tool_iterations == 8
    assert config.loop.repeat_detection is True
    assert config.loop.tool_result_cap == 16 * 1024
    assert config.inference.sampling.temperature == 0.6
    assert config.inference.baseline_budget == 3000
    assert config.secrets == {}


ERRORS = {
    "unknown top-level key": ("colour = 1\n", "colour: unknown key"),
    "unknown nested key": ("[loop]\ntool_iteration = 3\n", "loop.tool_iteration: unknown key"),
    "unknown section": ("[looop]\n", "looop: unknown key"),
    "a string for a number": (
        '[loop]\ntool_iterations = "8"\n',
        "loop.tool_iterations: Input should be a valid integer (got '8')",
    ),
    "a string for a flag": (
        '[loop]\nrepeat_detection = "yes"\n',
        "loop.repeat_detection: Input should be a valid boolean (got 'yes')",
    ),
    "a flag for a number": (
        "[loop]\ntool_iterations = true\n",
        "loop.tool_iterations: Input should be a valid integer (got True)",
    ),
    "a number out of range": (
        "[loop]\ntool_iterations = 0\n",
        "loop.tool_iterations: Input should be greater than or equal to 1 (got 0)",
    ),
    "a bad upstream URL": (
        '[inferproxy]\nupstream = "http://127.0.0.1:8080"\n',
        "inferproxy.upstream: expected tcp://HOST:PORT or unix:/PATH (got 'http://127.0.0.1:8080')",
    ),
    "an upstream port out of range": (
        '[inferproxy]\nupstream = "tcp://127.0.0.1:70000"\n',
        "inferproxy.upstream: expected tcp://HOST:PORT",
    ),
    "a podman service that is not a Unix socket": (
        '[broker]\npodman_remote = "tcp://127.0.0.1:8888"\n',
        "broker.podman_remote: String should match pattern",
    ),
    "an unknown secret backend": (
        '[secrets.token]\nbackend = "vault"\n',
        "secrets.token.backend: Input should be 'credential', 'env' or 'file' (got 'vault')",
    ),
    "a table where a value belongs": (
        "[loop.tool_iterations]\n",
        "loop.tool_iterations: Input should be a valid integer (got {})",
    ),
    "a date for a number": (
        "[inference]\nliveness_timeout = 1979-05-27T07:32:00Z\n",
        "inference.liveness_timeout: Input should be a valid number",
    ),
}


@pytest.mark.parametrize("case", ERRORS, ids=ERRORS.keys())
def test_an_error_names_the_file_the_dotted_key_and_the_expectation(tmp_path, case):
    text, expected = ERRORS[case]
    message = error_of(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'boxmaker.toml'}: ")
    assert expected in message


def test_every_problem_is_reported_one_per_line(tmp_path):
    message = error_of(tmp_path, "[loop]\ntool_iterations = 0\nrepeat_detection = 1\nx = 2\n")
    lines = message.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(str(tmp_path / "boxmaker.toml")) for line in lines)
    assert {line.split(": ")[1] for line in lines} == {
        "loop.tool_iterations", "loop.repeat_detection", "loop.x",
    }


def test_bad_toml_names_the_file_and_the_line(tmp_path):
    message = error_of(tmp_path, '[loop]\ntool_iterations = 8\nrepeat_detection = \n')
    assert message.startswith(f"{tmp_path / 'boxmaker.toml'}: not valid TOML")
    assert "line 3" in message


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: no such config file"):
        load_config(tmp_path / "nope.toml")


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('[gateway]\nserver = "https://b\xe4r"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.toml: cannot read"):
        load_config(path)


def test_parse_config_names_its_source_and_keeps_relative_paths_without_a_base():
    with pytest.raises(ConfigError, match=r"^<inline>: loop\.x: unknown key$"):
        parse_config("[loop]\nx = 1\n", "<inline>")
    assert parse_config('[paths]\nhome = "rel"\n', "<inline>").paths.home == Path("rel")


def test_a_config_is_immutable():
    config = Config()
    with pytest.raises(Exception, match="frozen"):
        config.loop.tool_iterations = 3  # type: ignore[misc]
