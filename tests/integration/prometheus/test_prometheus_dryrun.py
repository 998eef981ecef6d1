"""``autoscaler dry-run`` against a real Prometheus scraping the simulator served in scaled real time.

The simulator-backed loop actuates the simulated fleet; a dry-run reads the same fleet only through
Prometheus (vLLM metrics and kube-state-metrics series) and must make the same decisions: the same
replicas per variant at the same tick, or at an adjacent one (one tick of lag).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support.fleets import FLEET_DOC, ramp
from typer.testing import CliRunner

from autoscaler.adapters.prometheus import connect
from autoscaler.cli import app
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.dryrun import DryRun
from autoscaler.faults.promserver import PromServer, Target, free_port
from autoscaler.loop.export import MetricsServer, serve
from autoscaler.loop.runner import TickRecord
from autoscaler.realtime import LiveSimulation
from autoscaler.wiring import build_source
from controllers.registry import build

pytestmark = pytest.mark.slow  # whole module: its fixtures run scaled real-time fleets or the fault suite

SPEED = 20.0  # simulated seconds per wall second
SCRAPE = "250ms"  # 5 simulated seconds between scrapes, the simulator's own (FLEET_DOC's scrape_interval_s)


@dataclass
class Run:
    cfg: FleetConfig
    live: LiveSimulation
    dry: list[tuple[float, TickRecord]]
    prom: PromServer
    config_file: Path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    work = tmp_path_factory.mktemp("dryrun")
    cfg = parse_config(FLEET_DOC, "<test>")
    config_file = work / "fleet.yaml"
    config_file.write_text(yaml.safe_dump(FLEET_DOC))
    live = LiveSimulation(cfg, ramp(), steady_start=False)
    server: MetricsServer = serve(live.registry, "127.0.0.1:0")
    prom = PromServer(work / "prom", [Target(f"127.0.0.1:{server.port}")], scrape_interval=SCRAPE)
    stop = threading.Event()
    thread = threading.Thread(target=live.run, kwargs={"speed": SPEED, "stop": stop})
    try:
        prom.start()
        prom.wait_for("up", lambda r: bool(r) and r[0]["value"][1] == "1")
        source = build_source(cfg, connect(cfg.prometheus, prom.url), speed=SPEED)
        dry = DryRun(cfg, source, build("pid", cfg), SPEED)
        tick_wall = cfg.controller.tick_s / SPEED
        start = time.monotonic()
        thread.start()
        ticks: list[tuple[float, TickRecord]] = []
        # From the simulator loop's first decision (one window in), 0.8 tick after each of its ticks: Prometheus
        # (scraping every third of a tick) has sampled the fleet the simulator's tick left.
        k = int(cfg.controller.window_s / cfg.controller.tick_s)
        while thread.is_alive():
            time.sleep(max(0.0, start + (k + 0.8) * tick_wall - time.monotonic()))
            if thread.is_alive():
                ticks.append((time.time(), dry.tick()))
            k += 1
        prom.wait_for('sum(vllm:num_requests_running{model_name="m"})', lambda r: bool(r) and r[0]["value"][1] == "0")
        yield Run(cfg, live, ticks, prom, config_file)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=30)
        prom.stop()
        server.close()


def test_dry_run_makes_the_simulator_loops_decisions(run: Run) -> None:
    sim = [rec.services["llm"] for rec in run.live.ticks]
    wall = run.live.tick_wall_s
    exact = within = 0
    ratio_diffs = []
    mean_diffs = []
    rate_diffs = []
    overloaded = 0
    window = run.cfg.controller.window_s
    finished = [sr.t_finish for sr in run.live.sim.requests if sr.status == "completed"]
    for w, rec in run.dry:
        st = rec.services["llm"]
        assert st.estimate.errors == [], st.estimate.errors
        # The dry tick falls between two simulator ticks (0.8 tick after one): it may decide as either.
        i = max(j for j in range(len(wall)) if wall[j] <= w)
        both = [sim[j].applied for j in (i, i + 1) if j < len(sim)]
        near = [sim[j].applied for j in range(i - 1, i + 3) if 0 <= j < len(sim)]
        exact += st.applied in both
        within += st.applied in near
        k = min(range(len(wall)), key=lambda j: abs(wall[j] - w))  # signals: the tick nearest in time
        # Never more than one replica outside what the simulator decided up to two ticks before or after:
        # lag (a two-replica scale-down step taken one tick apart) and rounding, not a different policy
        # (an untracked PID, or rates read 400x too high, drift by several replicas for minutes).
        lag = [sim[j].applied for j in range(i - 2, i + 3) if 0 <= j < len(sim)]
        for v, n_dry in st.applied.items():
            assert min(a[v] for a in lag) - 1 <= n_dry <= max(a[v] for a in lag) + 1, (w, st.applied, lag)
        a, b = st.estimate.signals.slo_p95_ratio, sim[k].estimate.signals.slo_p95_ratio
        if a is not None and b is not None:
            ratio_diffs.append(abs(a - b) / b)
        a, b = st.estimate.signals.slo_mean_ratio, sim[k].estimate.signals.slo_mean_ratio
        if a is not None and b is not None:
            mean_diffs.append(abs(a - b) / b)
        # Rates are per second of the simulator's clock (the source runs SPEED x faster): the dry-run's
        # request rate is the completions the simulator made in its window, counted exactly.
        t = sim[k].estimate.time_s + (w - wall[k]) * SPEED
        done = sum(t - window < f <= t for f in finished)
        a = st.estimate.signals.request_rate_rps
        if a is not None and done:
            rate_diffs.append(abs(a - done / window) / (done / window))
        overloaded += (st.decision.terms.get("error") or 0.0) >= run.cfg.controller.pid.error_clip
    n = len(run.dry)
    print(f"\ndry-run vs simulator loop: {n} ticks compared, {exact} equal to a bracketing tick, "
          f"{within} within one tick more; median |slo_p95_ratio| difference {statistics.median(ratio_diffs):.1%}, "
          f"|slo_mean_ratio| {statistics.median(mean_diffs):.1%}, |request_rate_rps| "
          f"{statistics.median(rate_diffs):.1%}; overloaded ticks {overloaded}")
    totals = [sum(st.applied.values()) for st in sim]
    assert max(totals) > totals[0] and totals[-1] < max(totals)  # the run scaled up and back down
    assert n >= 20
    # Outside the overload both paths settle on the same fleet; through it (two crashes, a scale-up
    # every tick) a dry tick that reads data 0.8 tick fresher can be one replica ahead, within the bound above.
    assert within >= 0.75 * n and exact >= 0.6 * n
    assert statistics.median(ratio_diffs) < 0.1
    # The default signal, read through PromQL (rate(_sum) / rate(_count)), is the simulator's.
    assert len(mean_diffs) >= 0.8 * n and statistics.median(mean_diffs) < 0.1
    # The dry-run's window ends at Prometheus's last scrape, up to one scrape interval before its tick,
    # and rate() extrapolates each edge by up to half an interval: about one interval, 5 s of a 60-s
    # window, 8 %.
    assert len(rate_diffs) >= 0.8 * n and statistics.median(rate_diffs) < 0.08
    assert overloaded >= 2  # the crash overloads the fleet, and the paths still agree through it
    assert [c["applied"] for c in run.live.sim.crash_outcomes()] == [True, True]


def test_cli_once_json_interface(run: Run) -> None:
    res = CliRunner().invoke(app, ["dry-run", "--prometheus-url", run.prom.url, "--config", str(run.config_file),
                                   "--once", "--output", "json", "--speed", str(SPEED)])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    doc = json.loads(lines[0])
    svc = doc["services"]["llm"]
    assert svc["errors"] == []
    assert svc["signals"]["running"] == 0.0  # every request has ended
    counts = run.live.sim.services["llm"]
    for v in ("h100", "a100"):
        out = svc["variants"][v]
        assert out["current_replicas"] == counts.counts(v).current
        assert isinstance(out["desired_replicas"], int) and isinstance(out["reason"], str)
    # Every dry-run tick of the run: a row that changes nothing never gives a scaling reason.
    for _, rec in run.dry:
        st = rec.services["llm"]
        if st.applied == st.estimate.current:
            assert not st.reason.startswith(("scale up", "scale down")), st.reason


@pytest.mark.parametrize("spec", ["hpa", "keda:metric=queue", "wva", "mpc"])
def test_cli_runs_any_registry_controller(run: Run, spec: str) -> None:
    # Calibrated without a trace, from the fleet file and the profiles alone.
    res = CliRunner().invoke(app, ["dry-run", "--prometheus-url", run.prom.url, "--config", str(run.config_file),
                                   "--once", "--output", "json", "--speed", str(SPEED), "--controller", spec])
    assert res.exit_code == 0, res.output
    svc = json.loads(res.stdout.strip().splitlines()[-1])["services"]["llm"]
    assert svc["errors"] == []
    reason = svc["variants"]["h100"]["reason"]
    assert reason.startswith(spec.split(":")[0]), reason  # the baseline decided, not the PID
    plan = svc["decision"]["plan"]
    assert (plan is not None) == (spec == "mpc")  # only a planning controller has a plan
    if plan is not None:
        assert set(plan) == {"h100", "a100"} and all(len(p) == 40 for p in plan.values())
    counts = run.live.sim.services["llm"]
    for v in ("h100", "a100"):
        assert svc["variants"][v]["current_replicas"] == counts.counts(v).current
    bad = CliRunner().invoke(app, ["dry-run", "--prometheus-url", run.prom.url, "--config", str(run.config_file),
                                   "--once", "--controller", "static-ilp"])
    assert bad.exit_code == 2 and "static-ilp needs a trace" in bad.stderr


def test_cli_table_output_says_nothing_changes(run: Run) -> None:
    res = CliRunner().invoke(app, ["dry-run", "--prometheus-url", run.prom.url, "--config", str(run.config_file),
                                   "--once", "--speed", str(SPEED)])
    assert res.exit_code == 0, res.output
    assert "dry-run: nothing is changed" in res.stdout
    assert "h100" in res.stdout and "a100" in res.stdout


def test_cli_unreachable_prometheus_exits_1_with_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    res = CliRunner().invoke(app, ["dry-run", "--prometheus-url", url, "--once", "--output", "json"])
    assert res.exit_code == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot query Prometheus at")
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args", [["--once", "--ticks", "2"], ["--output", "yaml"], ["--speed", "0"]])
def test_cli_bad_arguments_exit_2(args: list[str]) -> None:
    res = CliRunner().invoke(app, ["dry-run", "--prometheus-url", "http://127.0.0.1:9", *args])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ")


def test_cli_table_shows_the_forecast_signals_when_the_stages_run(run: Run, tmp_path: Path) -> None:
    doc = yaml.safe_load(run.config_file.read_text())
    doc["controller"]["forecast"] = {"enabled": True}
    on = tmp_path / "fleet.yaml"
    on.write_text(yaml.safe_dump(doc))
    res = CliRunner().invoke(app, ["dry-run", "--prometheus-url", run.prom.url, "--config", str(on),
                                   "--once", "--speed", str(SPEED)])
    assert res.exit_code == 0, res.output
    # One tick: nothing learned yet, so the cache-warmth forecast is unknown ("-"), not 0.
    row = next(ln for ln in res.stdout.splitlines() if "forecast_prefix_hit_rate" in ln)
    assert "-" in row and " 0 " not in row
    assert "forecast_rate_rps" in res.stdout
    off = CliRunner().invoke(app, ["dry-run", "--prometheus-url", run.prom.url, "--config", str(run.config_file),
                                   "--once", "--speed", str(SPEED)])
    assert "forecast_" not in off.stdout


def test_cli_a_decision_that_raises_is_one_error_line_and_exit_1(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    # The PID's decide raises (a bug): the dry-run stops at its first tick with one line naming the controller,
    # the service and the exception, exit 1 (valid input, work not done), no traceback; before, the loop's
    # TickError escaped the command.
    from controllers.base import Decision
    from controllers.pid import PIDController

    def boom(self: PIDController, est: object, svc: object) -> Decision:
        raise ZeroDivisionError("gain over nothing")

    monkeypatch.setattr(PIDController, "decide", boom)
    res = CliRunner().invoke(app, ["dry-run", "--prometheus-url", run.prom.url, "--config", str(run.config_file),
                                   "--once", "--speed", str(SPEED)])
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert errors[0].startswith("error: controller pid: 1 service(s) raised in their decision")
    assert errors[0].endswith("(llm: ZeroDivisionError: gain over nothing); dry-run stopped after 0 tick(s)")
