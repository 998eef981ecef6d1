"""The loop's forecast stage (autoscaler.loop.forecast): wired into the loop, timeline and exports."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.adapters.simulator import SimActuator, SimMetricsSource
from autoscaler.loop.export import LoopMetrics
from autoscaler.loop.runner import ControlLoop
from autoscaler.report import timeline_rows
from autoscaler.simulate import run_simulation
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.state import Signals
from autoscaler.workload.types import Request, Workload
from controllers.registry import build


def steady(rate_rps: float, duration_s: float) -> Workload:
    n = int(rate_rps * duration_s)
    return Workload([Request(arrival_s=i / rate_rps, input_tokens=500, output_tokens=20) for i in range(n)])


def test_forecast_signals_follow_a_steady_load(make_fleet) -> None:
    # 4 req/s of 500-in / 20-out requests for 20 minutes: once a few 60-s steps have closed, the
    # forecast rate must be about 4 req/s (the observed completion rate), its interval must contain
    # the point, and the token mix must be 500 and 20 (+1 token generated at prefill is counted).
    cfg = make_fleet(2, controller={"forecast": {"enabled": True, "horizon_s": 300, "step_s": 60}})
    run = run_simulation(cfg, steady(4.0, 1200.0), "pid")
    rows = [r for r in timeline_rows(run) if 600 <= r["time_s"] <= 1150]
    assert rows
    for r in rows:
        assert abs(r["forecast_rate_rps"] - 4.0) <= 0.4
        assert r["forecast_rate_lower_rps"] <= r["forecast_rate_rps"] <= r["forecast_rate_upper_rps"]
        assert abs(r["forecast_input_tokens"] - 500) <= 25
        assert abs(r["forecast_output_tokens"] - 20) <= 2


def test_forecast_is_off_by_default_and_exported_when_on(make_fleet) -> None:
    off = run_simulation(make_fleet(1), steady(2.0, 300.0), "pid")
    assert all(r["forecast_rate_rps"] is None for r in timeline_rows(off))

    cfg = make_fleet(1, controller={"forecast": {"enabled": True}})
    sim = FleetSimulator(cfg, steady(2.0, 400.0))
    loop = ControlLoop(cfg, SimMetricsSource(sim, 60.0), SimActuator(sim), build("pid", cfg))
    metrics = LoopMetrics(loop, CollectorRegistry())
    for k in range(1, 31):  # the forecaster is fed once the source holds the PID's 300-s window
        sim.run_until(15.0 * k)
        metrics.record(loop.tick(15.0 * k), 0.001)
    text = generate_latest(metrics.registry).decode()
    assert 'autoscaler_forecast_rate_rps{bound="point",service="svc"}' in text
    assert 'autoscaler_forecast_tokens{kind="input",service="svc"}' in text


def test_rates_over_a_partial_window_are_not_fed() -> None:
    # A source holding 100 s of a 300-s window reports rates over a third of it (a ramp from zero no
    # traffic made): nothing is fed, so no forecast exists; once it holds the window, the steps are.
    from autoscaler.config import ForecastConfig
    from autoscaler.loop.forecast import ForecastStage
    from autoscaler.state import ServiceEstimate

    stage = ForecastStage(ForecastConfig(enabled=True, step_s=60, horizon_s=120))

    def tick(t: float, history_s: float) -> ServiceEstimate:
        est = ServiceEstimate("svc", t, Signals(request_rate_rps=5.0, prompt_tokens_rps=500.0,
                                                generation_tokens_rps=100.0), {}, {}, False, 0.0, 0.0, 0,
                              history_s=history_s)
        est = stage.apply(est, window_s=300.0)
        return est

    for t in range(15, 300, 15):
        assert tick(float(t), float(t)).signals.forecast.rate_rps is None
    seen = [tick(float(t), float(t)).signals.forecast.rate_rps for t in range(300, 480, 15)]
    assert seen[0] is None  # the first full-window tick opens a step; no step has closed yet
    assert seen[-1] == 5.0
