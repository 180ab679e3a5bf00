"""The benchmarks' stack config (bench/rig.py) is the local stack's with the benchmark's
settings put in place: still one valid TOML document that bxcore's loader takes, each setting
there once."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from bxcore.config import load_config
from bxctl.stack.local import StackLayout

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from rig import StackSettings, bench_config


@pytest.mark.parametrize("temperature", [None, 0.0, 0.7])
def test_the_settings_replace_the_local_stacks_and_the_config_loads(tmp_path, temperature):
    layout = StackLayout(tmp_path / "state")
    layout.state.mkdir()
    settings = StackSettings(model="qwen-tools", max_tokens=48, per_slot_context=8192,
                             slot_count=3, temperature=temperature, system="Be brief.")
    text = bench_config(layout, tmp_path / "grants", settings)
    parsed = tomllib.loads(text)
    assert parsed["inference"]["max_tokens"] == 48
    assert parsed["inference"]["serving"] == {"slot_count": 3, "per_slot_context": 8192}
    expected = 0 if temperature is None else temperature  # the local stack's greedy default
    assert parsed["inference"]["sampling"]["temperature"] == expected
    path = tmp_path / "config.toml"
    path.write_text(text)
    config = load_config(path)
    assert config.inference.max_tokens == 48
