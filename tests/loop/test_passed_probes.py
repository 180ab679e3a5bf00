"""The record of passed self-test probes (loopd/inference/passed.py).

Properties: the probe key changes with anything that decides the probe's outcome (the model
file's path and what the router reads from it, the build, the template, its capabilities, the
generation settings, the router's launch arguments, loopd's model name and sampling, the probe
itself) and with nothing else the server reports; a server that names no model file gets no key
(the probe runs every start); the record file that cannot be read is named in the log and read
as empty, and the next pass writes it anew; only the newest keys are kept.
"""

from __future__ import annotations

import json
import logging

from bxcore.config import InferenceSection
from hypothesis import given
from hypothesis import strategies as st
from loopd.inference.passed import KEPT, PassedProbes, probe_key

SECTION = InferenceSection(model="qwen-tools")
PROPS = {
    "model_path": "models/qwen.gguf",
    "build_info": "b1",
    "chat_template": "{{ messages }}",
    "chat_template_caps": {"supports_tool_calls": True},
    "default_generation_settings": {"params": {"temperature": 0.8}, "n_ctx": 4096},
    "total_slots": 2,
    "is_sleeping": False,
    "media_marker": "<__media_DVhYv5Bd4p__>",  # a new one at every start
}
META = {"n_params": 494032768, "size": 391240704, "ftype": "Q4_K - Medium", "n_vocab": 151936}
MODELS = {"data": [{"id": "qwen-tools", "status": {"value": "loaded", "args": ["-m", "q"]},
                    "meta": META}]}
DECIDING = {
    "model_path": "models/other.gguf",
    "build_info": "b2",
    "chat_template": "{{ other }}",
    "chat_template_caps": {"supports_tool_calls": False},
    "default_generation_settings": {"params": {"temperature": 0.2}, "n_ctx": 4096},
}
values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))


def key(props=PROPS, models=MODELS, section=SECTION, probe="p"):
    return probe_key(section, probe, props, models)


@given(field=st.sampled_from(sorted(DECIDING)))
def test_the_key_changes_with_whatever_decides_the_probe(field):
    assert key({**PROPS, field: DECIDING[field]}) != key()


def test_the_key_changes_with_the_launch_the_model_the_sampling_and_the_probe():
    relaunched = {"data": [{"id": "qwen-tools", "meta": META,
                            "status": {"args": ["-m", "q", "--ctk", "q8_0"]}}]}
    assert len({key(), key(models=relaunched), key(probe="another probe"),
                key(section=InferenceSection(model="qwen-tools", sampling={"temperature": 0})),
                key(section=InferenceSection(model="coder"))}) == 5


@given(field=st.sampled_from(sorted(META)), value=values)
def test_another_file_at_the_same_path_makes_a_new_key(field, value):
    """What the router reads from the file: another model or quantisation under the same name
    differs in one of them."""
    if value == META[field]:
        return
    changed = {"data": [{**MODELS["data"][0], "meta": {**META, field: value}}]}
    assert key(models=changed) != key()


@given(port=st.integers(min_value=1, max_value=65535))
def test_the_port_the_router_picks_at_each_launch_is_not_in_the_key(port):
    args = ["-m", "q", "--port", str(port)]
    relaunched = {"data": [{"id": "qwen-tools", "created": port, "status": {"args": args},
                            "meta": META}]}
    equals = {"data": [{"id": "qwen-tools", "status": {"args": ["-m", "q", f"--port={port}"]},
                        "meta": META}]}
    assert key(models=relaunched) == key(models=equals) == key()


@given(field=st.text(min_size=1, max_size=12).filter(
           lambda name: name not in DECIDING and name != "model_path"),
       value=values)
def test_the_key_ignores_what_does_not_decide_the_probe(field, value):
    assert key({**PROPS, field: value}) == key()


@given(model_path=values.filter(lambda v: not isinstance(v, str)))
def test_a_server_that_names_no_model_file_gets_no_key(model_path):
    assert key({**PROPS, "model_path": model_path}) is None
    assert key({k: v for k, v in PROPS.items() if k != "model_path"}) is None


@given(content=st.binary(max_size=200))
def test_an_unreadable_record_is_named_in_the_log_and_read_as_empty(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("passed") / "selftest-passed.json"
    path.write_bytes(content)
    try:
        found = json.loads(content)
    except ValueError:
        found = None
    readable = isinstance(found, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in found.items())
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("loopd.inference.passed").addHandler(handler)
    try:
        assert PassedProbes(path).passed_at("k") == (found.get("k") if readable else None)
    finally:
        logging.getLogger("loopd.inference.passed").removeHandler(handler)
    assert bool(records) != readable
    assert all(str(path) in record.getMessage() for record in records)
    PassedProbes(path).record("k")
    assert PassedProbes(path).passed_at("k") is not None


def test_the_newest_keys_are_kept(tmp_path):
    passed = PassedProbes(tmp_path / "home" / "selftest-passed.json")
    for n in range(KEPT + 3):
        passed.record(f"k{n}")
    kept = json.loads(passed.path.read_text())
    assert len(kept) == KEPT and passed.passed_at(f"k{KEPT + 2}") is not None


def test_a_record_that_cannot_be_written_is_named_in_the_log_and_stops_nothing(tmp_path, caplog):
    not_a_directory = tmp_path / "sessions"
    not_a_directory.write_text("a file where the directory should be")  # even root cannot
    passed = PassedProbes(not_a_directory / "selftest-passed.json")
    with caplog.at_level(logging.WARNING, logger="loopd.inference.passed"):
        passed.record("k")
    assert passed.passed_at("k") is None
    assert str(passed.path) in caplog.text and "not written" in caplog.text
