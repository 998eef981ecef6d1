"""Scenario inputs the simulator cannot represent, and faults that can never act, are refused when
the file is read, with one line naming the file and the fault (issue 31, item 12).

Rate curves: knots at 1e12 s used to ask 72.8 TiB for the 0.1-s grid the arrivals are drawn on, and a
curve of a billion requests per second to allocate the draws before anything said no.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from support.paths import DATA_DIR, ROOT

from autoscaler.errors import ConfigError
from autoscaler.faults.scenario import load_scenario, scenario_workload
from autoscaler.faults.suite import suite_dir
from autoscaler.workload.piecewise import MAX_GRID_STEPS, piecewise_workload
from autoscaler.workload.shaping import MAX_REQUESTS

MINIMAL = """name: bad
reported: [x/y#1]
failure: f
harmful: h
workload: {piecewise: {knots: [[0, 1], [600, 1]]}}
harm: [{rule: overshoot}]
"""


def _load(tmp_path: Path, text: str) -> object:
    (tmp_path / "bad.yaml").write_text(text)
    return load_scenario(tmp_path / "bad.yaml")


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{tmp_path / 'bad.yaml'}: "), msg
    return msg


# ------------------------------------------------------------------ rate curves
def test_knots_at_1e12_s_are_refused_before_the_grid_is_allocated() -> None:
    # 1e12 s at 0.1 s is 1e13 steps: the old code asked numpy for 8e13 bytes (72.8 TiB) and died.
    with pytest.raises(ValueError, match=r"knots span 1e\+12 s, 1e\+13 steps of 0\.1 s; at most 10,000,000"):
        piecewise_workload([(0.0, 1e-9), (1e12, 1e-9)], 0, "far")


def test_a_curve_of_too_many_requests_is_refused_before_drawing_them() -> None:
    # 1e9 req/s for 100 s: the integral is 1e11 requests (the old code drew 8e11 bytes of gaps first).
    with pytest.raises(ValueError, match=r"knots ask ~100,000,000,000 requests .* at most 20,000,000"):
        piecewise_workload([(0.0, 1e9), (100.0, 1e9)], 0, "dense")


def test_the_caps_are_the_documented_ones_and_a_curve_just_inside_them_is_drawn() -> None:
    assert MAX_GRID_STEPS == 10_000_000 and MAX_REQUESTS == 20_000_000
    # A day at 0.01 req/s: 864,000 grid steps (inside the cap), about 864 requests.
    wl = piecewise_workload([(0.0, 0.01), (86400.0, 0.01)], 0, "day")
    assert 700 < len(wl.requests) < 1030  # Poisson(864): 864 +- 5.5 sigma


def test_a_scenario_with_knots_at_1e12_s_is_refused_when_read(tmp_path: Path) -> None:
    msg = _refused(tmp_path, MINIMAL.replace("[600, 1]]", "[1000000000000, 1]]"))
    assert "workload.piecewise: knots: knots span 1e+12 s" in msg, msg


# ------------------------------------------------------------------ faults
@pytest.mark.parametrize(("faults", "where"), [
    # The workload ends at 600 s (its last knot); each of these acts after it.
    ("[{kind: crash, time_s: 601, fraction: 0.5}]",
     "faults[0]: crash at time_s 601 is after the workload's end (600 s)"),
    ("[{kind: prometheus_down, start_s: 10, end_s: 20}, {kind: prometheus_down, start_s: 700, end_s: 800}]",
     "faults[1]: prometheus_down at start_s 700 is after the workload's end (600 s)"),
])
def test_a_fault_after_the_workloads_end_is_refused_naming_it(tmp_path: Path, faults: str, where: str) -> None:
    msg = _refused(tmp_path, MINIMAL.replace("harm:", f"faults: {faults}\nharm:"))
    assert where in msg, msg


def test_a_live_second_daemon_killed_after_the_end_is_refused(tmp_path: Path) -> None:
    text = MINIMAL.replace("harm:", "layer: live\nfaults: [{kind: second_daemon, time_s: 60, kill_s: 900}]\nharm:")
    assert "faults[0]: second_daemon at time_s 60, kill_s 900 is after the workload's end" in _refused(tmp_path, text)


def test_a_fault_after_a_trace_spans_end_is_refused(tmp_path: Path) -> None:
    text = MINIMAL.replace("{piecewise: {knots: [[0, 1], [600, 1]]}}",
                           "{trace: {path: t.jsonl, span: [100, 400]}}").replace(
        "harm:", "faults: [{kind: crash, time_s: 350, fraction: 0.5}]\nharm:")
    assert "faults[0]: crash at time_s 350 is after the workload's end (300 s)" in _refused(tmp_path, text)


def test_a_fault_after_a_whole_traces_last_arrival_is_refused_once_it_is_read(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text("".join(
        f'{{"timestamp": {ms}, "input_length": 10, "output_length": 5, "hash_ids": [0]}}\n' for ms in (0, 120_000)))
    text = MINIMAL.replace("{piecewise: {knots: [[0, 1], [600, 1]]}}", "{trace: {path: t.jsonl}}").replace(
        "harm:", "faults: [{kind: crash, time_s: 121, fraction: 0.5}]\nharm:")
    sc = _load(tmp_path, text)  # the trace's end (120 s) is known only once read
    with pytest.raises(ConfigError, match=r"^scenario bad: faults\[0\]: crash at time_s 121 is after the "
                                          r"workload's end \(120 s\)$"):
        scenario_workload(sc, tmp_path)  # type: ignore[arg-type]


@pytest.mark.parametrize(("faults", "where"), [
    ("[{kind: crash, time_s: 60, fraction: 0.5}, {kind: crash, time_s: 60, fraction: 0.3}]",
     "faults[1]: crash at time_s 60 repeats faults[0]"),
    ("[{kind: pod_metrics_missing, variant: h100, start_s: 5, end_s: 9}, {kind: new_pods_silent, delay_s: 5},"
     " {kind: pod_metrics_missing, variant: h100, start_s: 5, end_s: 50}]",
     "faults[2]: pod_metrics_missing of h100 at start_s 5 repeats faults[0]"),
    ("[{kind: new_pods_silent, delay_s: 5}, {kind: new_pods_silent, delay_s: 60}]",
     "faults[1]: new_pods_silent repeats faults[0]"),
])
def test_duplicate_faults_are_refused_naming_both(tmp_path: Path, faults: str, where: str) -> None:
    assert where in _refused(tmp_path, MINIMAL.replace("harm:", f"faults: {faults}\nharm:"))


def test_faults_differing_in_target_or_time_are_not_duplicates(tmp_path: Path) -> None:
    text = MINIMAL.replace("harm:", "faults: [{kind: pod_metrics_missing, variant: h100, start_s: 5, end_s: 9}, "
                                    "{kind: pod_metrics_missing, variant: a100, start_s: 5, end_s: 9}, "
                                    "{kind: pod_metrics_missing, variant: h100, start_s: 10, end_s: 20}]\nharm:")
    assert len(_load(tmp_path, text).faults) == 3  # type: ignore[attr-defined]
    live = MINIMAL.replace("harm:", "layer: live\nfaults: [{kind: second_daemon, time_s: 60, identity: a}, "
                                    "{kind: second_daemon, time_s: 60, identity: b}]\nharm:")
    assert len(_load(tmp_path, live).faults) == 2  # type: ignore[attr-defined]


def test_every_shipped_fault_scenario_still_loads_and_its_trace_fits() -> None:
    paths = sorted(suite_dir().glob("*.yaml"))
    assert len(paths) >= 21
    for p in paths:
        sc = load_scenario(p)
        if sc.workload.trace is not None and sc.workload.trace.span is None:
            scenario_workload(sc, DATA_DIR)  # the whole trace's end checked against its faults


# ------------------------------------------------------------------ the compare benchmarks' synthetic scenarios
def _synthetic() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("scenario_synthetic", ROOT / "benchmarks" / "scenarios" /
                                                  "synthetic.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SYNTHETIC


def test_a_step_scenario_held_for_1e12_s_is_refused_before_drawing() -> None:
    with pytest.raises(ValueError, match=r"knots span 1e\+12 s"):
        _synthetic()["step"](base_rps=30.0, factor=3.0, before_s=600.0, rise_s=60.0, after_s=1e12)


def test_a_surge_of_tasks_with_a_million_steps_each_is_refused_counting_every_step() -> None:
    # 1e6 req/s for 100 s is 1e8 requests > 20 M; a million steps a task makes it only 100 tasks, which
    # is all the task curve counted (the old code then looped over 1e8 steps, gigabytes of requests).
    with pytest.raises(ValueError, match=r"knots ask ~100,000,000 requests"):
        _synthetic()["surge"](base_rps=1e6, surge_rps=1e6, before_s=40.0, surge_s=20.0, after_s=40.0,
                              min_steps=1_000_000, max_steps=1_000_000)
