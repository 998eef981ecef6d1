"""``autoscaler backtest``: history written by ``promtool tsdb create-blocks-from openmetrics`` from a
simulated run (scraped every 5 simulated seconds, stamped an hour ago) is replayed with
``query_range`` and gives the simulator-backed loop's decisions."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support.fleets import FLEET_DOC, ramp
from support.promserver import backfill
from typer.testing import CliRunner

from autoscaler.adapters.prometheus import connect
from autoscaler.backtest import run_backtest
from autoscaler.cli import app
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer
from autoscaler.realtime import LiveSimulation
from autoscaler.report import timeline_rows
from autoscaler.simulate import SimulationRun
from autoscaler.simulator.exposition import OpenMetricsHistory
from controllers.registry import build

SCRAPE_S = 5.0
# The simulated loop samples pods as often as the history is recorded, so both paths see the same samples.
# Both size replicas for the declared mix: the backtest's loop starts a window in, and the served mix is
# learnt from a window of a loop's own samples (autoscaler.loop.mix), so it would be adopted a window
# later there and every decision until then would differ for that reason alone (tests/unit/test_mix.py
# tests the learning).
DOC = {**FLEET_DOC, "prometheus": {"staleness_s": 2 * SCRAPE_S},
       "simulator": {**FLEET_DOC["simulator"], "scrape_interval_s": SCRAPE_S},
       "controller": {**FLEET_DOC["controller"], "capacity_mix": "typical"}}


@dataclass
class History:
    cfg: FleetConfig
    run: SimulationRun
    base: int
    prom: PromServer
    config_file: Path


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    work = tmp_path_factory.mktemp("backtest")
    cfg = parse_config(DOC, "<test>")
    config_file = work / "fleet.yaml"
    config_file.write_text(yaml.safe_dump(DOC))
    live = LiveSimulation(cfg, ramp(), steady_start=False)
    base = int(time.time()) - 3600  # within the default 15 d retention, far from the live head
    recorder = OpenMetricsHistory(live.collector)
    run = live.run(substep_s=SCRAPE_S, on_step=lambda t: recorder.record(base + t))
    recorder.write(work / "history.om")
    backfill(work / "history.om", work / "tsdb")
    prom = PromServer(work / "prom", tsdb=work / "tsdb")
    try:
        prom.start()
        yield History(cfg, run, base, prom, config_file)
    finally:
        prom.stop()


def test_backtest_replays_the_simulated_decisions(history: History) -> None:
    cfg, tick = history.cfg, int(history.cfg.controller.tick_s)
    first = int(cfg.controller.window_s)  # the simulated loop decides from one window in
    end = int(history.run.ticks[-1].time_s)
    bt = run_backtest(cfg, connect(cfg.prometheus, history.prom.url), history.base + first, history.base + end, tick)
    sim = {rec.time_s: rec.services["llm"] for rec in history.run.ticks}
    exact = bracketed = 0
    for rec in bt.ticks:
        st = rec.services["llm"]
        assert st.estimate.errors == []
        t = first + rec.time_s
        exact += st.applied == sim[t].applied
        # Prometheus's samples are up to a scrape off the simulator's own: a decision made a tick
        # earlier or later is the same decision (as the dry-run comparison counts it)
        bracketed += any(st.applied == sim[u].applied for u in (t - tick, t, t + tick) if u in sim)
    n = len(bt.ticks)
    print(f"\nbacktest vs simulator loop: {n} ticks, {exact} with the same replicas, {bracketed} as a neighbouring "
          f"tick's; {bt.range_queries} range queries")
    assert n == (end - first) // tick + 1
    # The PID reads the arrival rate too (its demand cap and floor), which the two paths measure ~5 %
    # apart (the simulator's gateway counter, Prometheus's rate over scraped samples): a decision near
    # a replica boundary can fall either side. Once one does, the paths part for good: the backtest's
    # decisions never reach the history it reads, so its PID keeps asking for what the simulated
    # fleet did not do. Until then they must agree tick for tick, through the ramp and the crashes.
    same = [st.services["llm"].applied == sim[first + st.time_s].applied for st in bt.ticks]
    parted = same.index(False) if False in same else n
    assert all(same[:parted]) and parted >= n // 2
    assert bracketed >= 0.75 * n
    totals = [sum(rec.services["llm"].applied.values()) for rec in bt.ticks]
    assert max(totals) > totals[0] and totals[-1] < max(totals)


def test_backtest_runs_any_registry_controller(history: History, tmp_path: Path) -> None:
    # KEDA (calibrated without a trace) replayed through range queries decides as the same rules fed
    # the simulator's own estimates of that run, tick by tick.
    cfg, tick = history.cfg, int(history.cfg.controller.tick_s)
    first, end = int(cfg.controller.window_s), int(history.run.ticks[-1].time_s)
    bt = run_backtest(cfg, connect(cfg.prometheus, history.prom.url), history.base + first, history.base + end,
                      tick, "keda")
    assert bt.controller == "keda"
    twin = build("keda", cfg)
    svc = cfg.service("llm")
    by_time = {rec.time_s: rec.services["llm"].estimate for rec in history.run.ticks}
    same = 0
    for rec in bt.ticks:
        st = rec.services["llm"]
        assert st.estimate.errors == [] and st.decision.reason.startswith("keda")
        same += st.decision.desired == twin.decide(by_time[first + rec.time_s], svc).desired
    print(f"\nkeda backtest vs keda on the simulator's estimates: {same} of {len(bt.ticks)} ticks equal")
    assert same >= 0.9 * len(bt.ticks)
    res = CliRunner().invoke(app, ["backtest", "--prometheus-url", history.prom.url, "--config",
                                   str(history.config_file), "--start", str(history.base + first), "--end",
                                   str(history.base + first + 300), "--controller", "keda", "--out", str(tmp_path),
                                   "-o", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ticks"] == 300 // 15 + 1  # KEDA's HPA syncs every 15 s


def test_cli_backtest_writes_the_simulate_timeline_and_plot(history: History, tmp_path: Path) -> None:
    start, end = history.base + 60, history.base + 300
    res = CliRunner().invoke(app, ["backtest", "--prometheus-url", history.prom.url, "--config",
                                   str(history.config_file), "--start", str(start), "--end", str(end),
                                   "--out", str(tmp_path), "--plot", "-o", "json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["ticks"] == (300 - 60) // 15 + 1 and summary["query_failures"] == 0
    with (tmp_path / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(timeline_rows(history.run)[0])
    # the summary counts what the rows say
    kinds = [r["decision"] for r in rows]
    assert summary["decisions"] == {k: kinds.count(k) for k in set(kinds)}
    assert sum(summary["decisions"].values()) == summary["ticks"] == len(rows)
    assert summary["scale_changes"] == kinds.count("scale_up") + kinds.count("scale_down")
    assert summary["holds"] == sum(k in ("warming_up", "signal_unknown", "metrics_error", "counts_unknown")
                                   for k in kinds)
    assert (tmp_path / "timeline.png").stat().st_size > 0
    table = CliRunner().invoke(app, ["backtest", "--prometheus-url", history.prom.url, "--config",
                                     str(history.config_file), "--start", str(start), "--end", str(end),
                                     "--out", str(tmp_path / "t")])
    assert "UTC" in table.stdout and str(start) not in table.stdout.split("\n")[0]  # a date, not unix seconds


@pytest.mark.parametrize(("args", "message"), [
    (["--start", "100", "--end", "50"], "--end must be after --start"),
    (["--start", "yesterday", "--end", "50"], "neither unix seconds nor an ISO 8601 time"),
    (["--start", "0", "--end", "200000", "--step", "1"], "exceed Prometheus's 11000 points"),
])
def test_cli_backtest_bad_ranges_exit_2(history: History, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["backtest", "--prometheus-url", history.prom.url, *args])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and message in res.stderr


def test_backtest_runs_the_mpc(history: History) -> None:
    # The MPC replayed through range queries: its forecast stage and plan run on Prometheus's history.
    cfg, tick = history.cfg, int(history.cfg.controller.tick_s)
    first, end = int(cfg.controller.window_s), int(history.run.ticks[-1].time_s)
    bt = run_backtest(cfg, connect(cfg.prometheus, history.prom.url), history.base + first, history.base + end,
                      tick, "mpc")
    decided = [rec.services["llm"] for rec in bt.ticks if rec.services["llm"].decision.reason.startswith("mpc")]
    assert len(decided) >= 0.8 * len(bt.ticks)
    for st in decided:
        assert st.estimate.errors == [] and set(st.decision.plan) == set(st.estimate.variants)
        assert all(len(p) == 40 for p in st.decision.plan.values())


def test_cli_backtest_a_decision_that_raises_is_one_error_line_and_exit_1(
    history: History, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As simulate: the PID's decide raises at the range's first tick; one error line, exit 1, no results.
    from controllers.base import Decision
    from controllers.pid import PIDController

    def boom(self: PIDController, est: object, svc: object) -> Decision:
        raise ZeroDivisionError("gain over nothing")

    monkeypatch.setattr(PIDController, "decide", boom)
    start = history.base + 60
    res = CliRunner().invoke(app, ["backtest", "--prometheus-url", history.prom.url, "--config",
                                   str(history.config_file), "--start", str(start), "--end", str(start + 60),
                                   "--out", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.output
    assert errors[0].startswith("error: controller pid: 1 service(s) raised in their decision")
    assert errors[0].endswith(f"(llm: ZeroDivisionError: gain over nothing); no results written to {tmp_path}")
    assert not (tmp_path / "timeline.csv").exists()
