"""The shipped benchmark scenarios (``benchmarks/scenarios/*.yaml``) and their fleet patches."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from autoscaler.compare import check_names
from autoscaler.config.loading import parse_config

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("bench_compare", ROOT / "benchmarks" / "compare.py")
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)
SCENARIOS = sorted((ROOT / "benchmarks" / "scenarios").glob("*.yaml"))


def test_merge_by_key_and_by_name() -> None:
    base = {"a": 1, "sim": {"engine": {"x": 1, "y": 2}},
            "services": [{"name": "s", "k": 1, "v": [{"name": "g", "n": 1}]}]}
    patch = {"sim": {"engine": {"y": 3}}, "services": [{"name": "s", "v": [{"name": "g", "n": 5}, {"name": "h"}]}]}
    assert bench.merged(base, patch) == {
        "a": 1, "sim": {"engine": {"x": 1, "y": 3}},
        "services": [{"name": "s", "k": 1, "v": [{"name": "g", "n": 5}, {"name": "h"}]}],
    }
    assert base["sim"]["engine"]["y"] == 2  # the base is not modified
    assert bench.merged([1, 2], [3]) == [3]  # plain lists are replaced


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_names_a_valid_fleet_and_controllers(path: Path) -> None:
    sc = yaml.safe_load(path.read_text())
    assert sc["name"] == path.stem
    cfg = parse_config(bench.scenario_fleet(sc), path.name)
    check_names(sc["controllers"])
    assert {"mpc", "oracle", "pid", "static"} <= set(sc["controllers"])
    if path.stem == "azure-code":
        assert cfg.simulator.engine.max_num_batched_tokens == 2048
    if path.stem.startswith("servegen-day"):
        assert cfg.services[0].max_model_len == 131072 and sc["span"][1] - sc["span"][0] == 86400
