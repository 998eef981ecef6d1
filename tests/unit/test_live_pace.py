"""The pace a live row's fleet kept (autoscaler.faults.pace) and how a row carries it
(autoscaler.faults.rows, ``faults run``): samples on a fake wall clock, figures by hand; no sleeps."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.faults.pace import STARVED_FRACTION, PaceMeter, pace_figures
from autoscaler.faults.rows import make_row, markdown_table, starved
from autoscaler.faults.scenario import Scenario


def _stalled(stall_wall_s: float) -> list[tuple[float, float]]:
    """0-200 simulated s in 2-s steps of 0.1 wall s (20x exactly), but the step 100 -> 102 s takes
    ``stall_wall_s`` wall seconds."""
    out = [(0.0, 0.0)]
    for k in range(1, 101):
        out.append((2.0 * k, out[-1][1] + (stall_wall_s if k == 51 else 0.1)))
    return out


def test_the_pace_kept_and_its_lowest_minute_by_hand() -> None:
    # 4-s stall: 200 s simulated over 99 x 0.1 + 4 = 13.9 wall s; the lowest 60-s stretch holds the
    # stall and 29 steps at pace: 60 s over 2.9 + 4 = 6.9 wall s
    pace = pace_figures(_stalled(4.0), 20.0)
    assert pace is not None
    assert pace["kept"] == pytest.approx(200 / 13.9 / 20)  # 0.719
    assert pace["lowest"] == pytest.approx(60 / 6.9 / 20)  # 0.435
    assert pace["starved"] and pace["target_x"] == 20.0 and pace["window_s"] == 60.0
    # 2-s stall: 200 / 11.9 / 20 = 0.840 over the row, 60 / 4.9 / 20 = 0.612 at the lowest: not starved
    pace = pace_figures(_stalled(2.0), 20.0)
    assert pace is not None
    assert pace["kept"] == pytest.approx(200 / 11.9 / 20)
    assert pace["lowest"] == pytest.approx(60 / 4.9 / 20)
    assert not pace["starved"]
    # no stall: exactly the target everywhere
    pace = pace_figures(_stalled(0.1), 20.0)
    assert pace is not None and pace["kept"] == pytest.approx(1.0) and pace["lowest"] == pytest.approx(1.0)


def test_a_row_shorter_than_the_window_has_its_whole_pace_as_its_lowest() -> None:
    # 40 s simulated over 4 wall s at 20x target: 0.5 kept, no 60-s stretch: lowest = kept; 0.5 is
    # not below the threshold
    pace = pace_figures([(0.0, 10.0), (20.0, 13.0), (40.0, 14.0)], 20.0)
    assert pace is not None and pace["kept"] == pace["lowest"] == pytest.approx(0.5)
    assert STARVED_FRACTION == 0.5 and not pace["starved"]


def test_nothing_measured_is_no_pace_not_zero() -> None:
    assert pace_figures([], 20.0) is None
    assert pace_figures([(0.0, 5.0)], 20.0) is None
    assert pace_figures([(0.0, 5.0), (10.0, 5.0)], 20.0) is None  # no wall time
    assert pace_figures([(3.0, 5.0), (3.0, 9.0)], 20.0) is None  # no simulated time
    with pytest.raises(ValueError, match="backwards"):
        pace_figures([(0.0, 5.0), (10.0, 4.0)], 20.0)
    with pytest.raises(ValueError, match="finite numbers > 0"):
        pace_figures([(0.0, 0.0), (1.0, 1.0)], 0.0)


def test_the_meter_reads_its_injected_clock() -> None:
    walls: Iterator[float] = iter([100.0, 100.5, 103.5, 104.0])
    meter = PaceMeter(20.0, clock=lambda: next(walls))
    for sim_s in (0.0, 10.0, 70.0, 80.0):
        meter.mark(sim_s)
    assert meter.samples == [(0.0, 100.0), (10.0, 100.5), (70.0, 103.5), (80.0, 104.0)]
    pace = meter.figures()
    assert pace is not None
    assert pace["kept"] == pytest.approx(80 / 4 / 20)  # 1.0
    # from 0: first sample >= 60 s later is 70 s at 103.5 -> 70 / 3.5 / 20 = 1.0; from 10: 70 s is
    # only 60 later -> 60 / 3.0 / 20 = 1.0; the same everywhere: lowest 1.0
    assert pace["lowest"] == pytest.approx(1.0)


def _scenario() -> Scenario:
    return Scenario.model_validate({"name": "outage-live", "reported": ["x/y#1"], "failure": "f", "harmful": "h",
                                    "layer": "live", "workload": {"piecewise": {"knots": [[0, 5], [300, 5]]}},
                                    "harm": [{"rule": "two_writers"}]})


SUMMARY: dict[str, Any] = {"slo_attainment": {"interactive": 0.62}, "requests": {"failed": 0},
                           "admission": {"retries": 0}, "cost_usd": {"total": 0.77}, "wall_s": 41.0}


def test_a_starved_row_says_so_in_its_json_and_its_table() -> None:
    pace = pace_figures(_stalled(4.0), 20.0)
    row = make_row(_scenario(), "mpc", SUMMARY, {"two_writers": 0}, pace=pace)
    doc = json.loads(json.dumps(row))
    assert doc["pace"]["starved"] is True and doc["pace"]["kept"] == pytest.approx(0.719, abs=5e-4)
    assert starved([row]) == [row]
    table = markdown_table([row]).splitlines()
    assert table[0].endswith("| cost | pace (kept / lowest) |")
    assert table[2] == "| outage-live | mpc | 0 | 62.00% | 0 | 0 | $0.77 | 0.72 / 0.43 starved |"
    calm = make_row(_scenario(), "pid", SUMMARY, {"two_writers": 0}, pace=pace_figures(_stalled(2.0), 20.0))
    assert starved([calm]) == []
    assert markdown_table([calm]).splitlines()[2].endswith("| $0.77 | 0.84 / 0.61 |")
    unpaced = make_row(_scenario(), "hpa", SUMMARY, {"two_writers": 0})  # a simulator row: null, no column
    assert unpaced["pace"] is None and "pace" not in markdown_table([unpaced])
    assert markdown_table([unpaced, row]).splitlines()[2].endswith("| $0.77 | - |")


def test_a_pace_that_cannot_be_read_is_recorded_beside_the_finished_row_s_results() -> None:
    # a meter whose wall clock went back (103 -> 101 s): pace_figures refuses the samples. The row
    # keeps its figures (62 %, $0.77, 0 harmful), pace null, the error in one line beside them, and
    # the table says the pace was not measured; a meter that reads well gives no such key.
    from autoscaler.faults.live import live_row

    walls: Iterator[float] = iter([100.0, 103.0, 101.0])
    meter = PaceMeter(20.0, clock=lambda: next(walls))
    for sim_s in (0.0, 60.0, 70.0):
        meter.mark(sim_s)
    row = live_row(_scenario(), "mpc", SUMMARY, {"two_writers": 0}, meter)
    assert (row["slo_attainment_interactive"], row["cost_usd"], row["harmful_actions"]) == (0.62, 0.77, 0)
    assert row["pace"] is None and "failed" not in row
    assert row["pace_failed"] == "ValueError: pace: samples go backwards (60 s at 103 -> 70 s at 101)"
    assert markdown_table([row]).splitlines()[2].endswith("| $0.77 | not measured |")
    good = PaceMeter(20.0, clock=iter([0.0, 3.0]).__next__)
    good.mark(0.0)
    good.mark(60.0)
    ok = live_row(_scenario(), "mpc", SUMMARY, {"two_writers": 0}, good)
    assert "pace_failed" not in ok and ok["pace"]["kept"] == pytest.approx(1.0)  # 60 s in 3 wall s: 20x


LIVE_SCENARIO = """name: outage-live
reported: [x/y#1]
failure: f
harmful: h
layer: live
workload: {piecewise: {knots: [[0, 5], [300, 5]]}}
harm: [{rule: two_writers}]
"""


def test_faults_run_prints_the_pace_and_names_starved_rows_without_failing(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A live row run by ``faults run`` (its harness replaced by one whose fleet stalled 4 wall s):
    exit 0, the pace on its ``done`` line, in faults.json and faults.md, and the row named on stderr."""
    import autoscaler.faults.live as live

    def fake(sc: Scenario, name: str, cfg: object, data: Path) -> dict[str, Any]:
        return make_row(sc, name, SUMMARY, {"two_writers": 0}, pace=pace_figures(_stalled(4.0), 20.0))

    monkeypatch.setattr(live, "run_live_row", fake)
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "outage-live.yaml").write_text(LIVE_SCENARIO)
    res = CliRunner().invoke(app, ["faults", "run", "--suite", str(tmp_path / "suite"), "--controller", "mpc",
                                   "--workers", "1", "--data", str(tmp_path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "done 1/1: outage-live x mpc (41 s, pace 0.72 of 20x, lowest 0.43 over 60 s simulated, starved)" \
        in res.stderr
    assert "1 of 1 row starved" in res.stderr and ": outage-live x mpc" in res.stderr
    (row,) = json.loads((tmp_path / "out" / "faults.json").read_text())
    assert row["pace"]["starved"] is True
    assert "| 0.72 / 0.43 starved |" in (tmp_path / "out" / "faults.md").read_text()


def test_the_speed_over_the_last_wall_window_by_hand() -> None:
    now = [0.0]
    meter = PaceMeter(20.0, clock=lambda: now[0])
    for sim_s, wall in [(0.0, 0.0), (2.0, 0.1), (4.0, 0.2), (6.0, 1.2), (8.0, 1.3), (10.0, 3.3)]:
        now[0] = wall
        meter.mark(sim_s)
    now[0] = 3.5
    # the last 3 wall s: from 0.5 (the clock read 4 s, marked at 0.2) to now (10 s): 6 s / 3 = 2 x
    assert meter.speed_over(3.0) == pytest.approx(2.0)
    # the last 1 wall s: from 2.5 (8 s, marked at 1.3) to 10 s: 2 x
    assert meter.speed_over(1.0) == pytest.approx(2.0)
    # the last 5 wall s reach back before the first sample (the fleet not started, its clock held at
    # 0 s): the 10 s it advanced over 5 wall s, 2 x, so a partly filled window's rate is not read low
    assert meter.speed_over(5.0) == pytest.approx(2.0)
    now[0] = 4.0
    assert meter.speed_over(0.5) == 0.0  # no step in the last half second: the clock stood still
    assert PaceMeter(20.0, clock=lambda: 1.0).speed_over(1.0) is None  # no sample yet
    late = PaceMeter(20.0, clock=lambda: 1.0)
    late.samples.append((0.0, 2.0))  # marked on a clock ahead of this one: nothing to measure
    assert late.speed_over(1.0) is None


def test_the_source_divides_its_rates_by_the_measured_speed() -> None:
    """A fake Prometheus answering 3 a wall second to every rate: at the nominal 4x that is 0.75 a
    second of the source (``test_prometheus_source``'s speed test); measured at 2x, 1.5; measured
    unknown, 0.75 again; a clock that stood still, unknown. The window stays 3 / 4 = 0.75 wall seconds."""
    from autoscaler.adapters.prometheus import PrometheusSource
    from autoscaler.config.loading import parse_config

    variant = {"name": "h100", "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 0, "max_replicas": 4,
               "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}
    cfg = parse_config({"services": [{"name": "src", "model": "m-src", "variants": [variant], "slo": {
        "interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}}],
        "controller": {"tick_s": 1, "window_s": 3}}, "<test>")

    class Runner:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
            self.seen.append(promql)
            if "time() - timestamp" in promql:
                return [{"metric": {"pod": "src-h100-0"}, "value": [0, "1"]}]
            return [{"metric": {}, "value": [0, "3"]}] if promql.startswith("sum(rate(") else []

    asked: list[float] = []
    answers: list[float | None] = [2.0, None, 0.0, math.nan, -1.0, math.inf]

    def measured(wall_s: float) -> float | None:
        asked.append(wall_s)
        return answers.pop(0)

    runner = Runner()
    src = PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=3.0, speed=4.0, measured_speed=measured)
    assert src.observe(0.0)["src"].signals.request_rate_rps == pytest.approx(1.5)
    assert asked == [0.75] and any("[750ms]" in q for q in runner.seen)
    assert src.observe(1.0)["src"].signals.request_rate_rps == pytest.approx(0.75)
    # the source's clock stood still over the window (0): no rate per its second, unknown, never 0
    assert src.observe(2.0)["src"].signals.request_rate_rps is None
    for _ in range(3):  # an answer that is no speed (NaN, negative, infinite): the nominal 4x
        assert src.observe(3.0)["src"].signals.request_rate_rps == pytest.approx(0.75)


def test_a_replay_takes_no_measured_speed() -> None:
    from autoscaler.config.loading import default_config
    from autoscaler.wiring import Replay, build_source

    with pytest.raises(ValueError, match="a replay's clock is its grid's"):
        build_source(default_config(), object(), speed=10, replay=Replay(1_000, 1_060, 5),  # type: ignore[arg-type]
                     measured_speed=lambda w: 1.0)
