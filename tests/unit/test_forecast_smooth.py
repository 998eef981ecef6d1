"""The forecast fed a smoothed rate (``mpc:smooth_s=S``, issue 28): ``autoscaler.loop.forecast.smoothed`` and
the forecast stage's input. Every expected value is worked by hand in the comments."""

from __future__ import annotations

import math
from collections import deque

import pytest

from autoscaler.adapters.simulator import SimActuator, SimMetricsSource
from autoscaler.config import ForecastConfig
from autoscaler.loop.forecast import ForecastStage, smoothed
from autoscaler.loop.runner import ControlLoop
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.state import ServiceEstimate, Signals
from autoscaler.workload.types import Workload
from controllers.registry import build


def test_smoothed_by_hand_leaves_unknown_rates_out() -> None:
    rates: deque[tuple[float, float | None]] = deque()
    got = [smoothed(rates, t, r, 60.0) for t, r in
           ((15.0, 0.0), (30.0, 120.0), (45.0, None), (60.0, 60.0), (75.0, 0.0), (90.0, 240.0))]
    # 15: [0] -> 0; 30: [0, 120] -> 60; 45: None left out (not a 0) -> 60; 60: [0, 120, 60] -> 60;
    # 75: (15, 75] holds 120, None, 60, 0 -> 60; 90: (30, 90] holds None, 60, 0, 240 -> 100
    assert got == pytest.approx([0.0, 60.0, 60.0, 60.0, 60.0, 100.0])
    assert [t for t, _ in rates] == [45.0, 60.0, 75.0, 90.0]
    only_unknown: deque[tuple[float, float | None]] = deque()
    assert smoothed(only_unknown, 0.0, None, 60.0) is None  # nothing known: unknown, never 0
    with pytest.raises(ValueError, match="span_s"):
        smoothed(deque(), 0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="before"):
        smoothed(rates, 80.0, 1.0, 60.0)


def _history(smooth_s: float) -> list[float]:
    """The 60-s step values the stage's rate model is fed for an on/off rate: 200 req/s in the odd minutes,
    0 in the even ones (Azure code x20's shape: bursts a minute or two long, minutes apart), a tick each 15 s
    from 60 s to 525 s (step 8 open)."""
    stage = ForecastStage(ForecastConfig(enabled=True, step_s=60, horizon_s=120), smooth_s=smooth_s)
    for t in range(60, 540, 15):
        rate = 200.0 if (t // 60) % 2 else 0.0
        stage.apply(ServiceEstimate("svc", float(t), Signals(request_rate_rps=rate), {}, {}, False, 0.0, 0.0, 0))
    return list(stage.forecaster.models["rate_rps"].history)


def test_the_stage_feeds_the_smoothed_rate() -> None:
    # as shipped: each step's mean of its four 15-s ticks, 200 and 0 in turn
    assert _history(0.0) == pytest.approx([200.0, 0.0, 200.0, 0.0, 200.0, 0.0, 200.0])
    # smooth_s=120: step 1 (60-105 s) sees only 200s: 200. Step 2: at 120 s the ticks in (0, 120] are four
    # 200s and one 0: 800/5 = 160; at 135 s 800/6; 150 s 800/7; 165 s 800/8 = 100; their mean 126.905.
    # From 180 s on (t - 120, t] holds 8 ticks, four of them in an odd minute: 800/8 = 100 on every tick.
    step2 = (160.0 + 800.0 / 6 + 800.0 / 7 + 100.0) / 4
    assert step2 == pytest.approx(126.905, abs=1e-3)
    assert _history(120.0) == pytest.approx([200.0, step2, 100.0, 100.0, 100.0, 100.0, 100.0])
    with pytest.raises(ValueError, match="smooth_s"):
        ForecastStage(ForecastConfig(), smooth_s=-1.0)


def test_the_option_reaches_the_loop_s_stage(make_fleet) -> None:
    cfg = make_fleet(1)
    assert build("mpc", cfg).forecast_smooth_s == 0.0
    ctrl = build("mpc:smooth_s=300", cfg)
    assert ctrl.forecast_smooth_s == 300.0
    sim = FleetSimulator(cfg, Workload([]))
    loop = ControlLoop(cfg, SimMetricsSource(sim, ctrl.window_s), SimActuator(sim), ctrl)
    assert {s.smooth_s for s in loop.forecasts.values()} == {300.0}
    with pytest.raises(ValueError, match="smooth_s"):
        build("mpc:smooth_s=-5", cfg)


def test_an_unknown_rate_is_fed_unknown_with_smoothing_too() -> None:
    # 100 req/s on the ticks 60-105 s, then unknown (a Prometheus outage) from 120 s. Without smoothing the
    # second 60-s step is fed nothing known: NaN. With smooth_s=120 the known 100s are still in the window
    # at 120-165 s, but an unknown rate stays unknown (a gap), never the recent mean: NaN too.
    def history(smooth_s: float) -> list[float]:
        stage = ForecastStage(ForecastConfig(enabled=True, step_s=60, horizon_s=120), smooth_s=smooth_s)
        for t in range(60, 195, 15):
            rate = 100.0 if t < 120 else None
            stage.apply(ServiceEstimate("svc", float(t), Signals(request_rate_rps=rate), {}, {}, False, 0.0, 0.0, 0))
        return list(stage.forecaster.models["rate_rps"].history)

    for smooth_s in (0.0, 120.0):
        got = history(smooth_s)
        assert got[0] == pytest.approx(100.0)
        assert len(got) == 2 and math.isnan(got[1]), (smooth_s, got)


def test_smooth_s_is_refused_where_no_forecast_stage_runs() -> None:
    from autoscaler.config.loading import default_config
    from controllers.mpc import MPCController
    cfg = default_config()
    with pytest.raises(ValueError, match="smooth_s"):
        MPCController(cfg, {}, forecast="last", smooth_s=120.0)
    assert MPCController(cfg, {}, smooth_s=120.0).forecast_smooth_s == 120.0  # auto: the stage runs


def test_a_span_below_the_clocks_float_spacing_keeps_the_rate_just_recorded() -> None:
    # mpc:smooth_s=1e-300 passed the spec's check (> 0, finite) and ended a simulation with IndexError: at
    # t = 15 s, 15 - 1e-300 == 15.0 in floats, so the rate recorded at 15 s was pruned as out of the window
    # and the empty deque indexed. (15 - 1e-300, 15] holds exactly the rates recorded at 15 s.
    assert 15.0 - 1e-300 == 15.0
    rates: deque[tuple[float, float | None]] = deque()
    assert smoothed(rates, 15.0, 40.0, 1e-300) == 40.0
    assert smoothed(rates, 15.0, 20.0, 1e-300) == 30.0  # two rates at 15 s: (40 + 20) / 2
    assert smoothed(rates, 30.0, 10.0, 1e-300) == 10.0  # 15 s is out of (30 - 1e-300, 30]
    assert [t for t, _ in rates] == [30.0]
    assert smoothed(rates, 45.0, None, 1e-300) is None  # unknown, never read as 0
