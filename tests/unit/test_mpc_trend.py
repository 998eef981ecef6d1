"""The MPC's trend floor (``trend=1``): the rise the last cold start's rates show, as its lower
one-sided bound, extrapolated for a cold start; every figure worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.estimates import service_estimate

from autoscaler.config.loading import default_config
from autoscaler.state import ServiceEstimate
from controllers.mpc import TREND_LEVEL, TREND_MIN_POINTS, MPCController, rising_slope, trend_path
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}
TICK = CFG.controller.tick_s
Z95 = 1.6448536269514722  # the standard normal's 0.95 quantile (TREND_LEVEL)


def test_a_straight_rise_is_its_slope() -> None:
    # 50, 51, ... 70 req/s every 15 s: 1/15 req/s per s, no residual, so no allowance is taken off
    rates = [(15.0 * i, 50.0 + i) for i in range(21)]
    assert rising_slope(rates, 300.0, 60.0) == pytest.approx(1.0 / 15.0)
    # only the last span counts: a flat start before it changes nothing
    flat_first = [(15.0 * i - 600.0, 50.0) for i in range(20)] + rates
    assert rising_slope(flat_first, 300.0, 60.0) == pytest.approx(1.0 / 15.0)


def test_the_slope_is_its_lower_bound_over_the_independent_windows() -> None:
    # 8 rates at t = 0, 15, ..., 105: 10 + 0.1 t, +1 and -1 alternately.
    # t - mean(t) = -52.5, -37.5, ..., 52.5: Sxx = 2 (52.5^2 + 37.5^2 + 22.5^2 + 7.5^2) = 9450;
    # sum of (t - mean) x noise = -52.5 + 37.5 - 22.5 + 7.5 + 7.5 - 22.5 + 37.5 - 52.5 = -60,
    # so the slope is 0.1 - 60 / 9450 and the residuals' squares sum to 8 - 60^2 / 9450.
    # The rates span 105 s + one 15-s spacing = 120 s of 60-s windows: 2 independent ones, so the
    # variance 8 - 60^2/9450 over (8 - 2) / Sxx is scaled by 8 / 2.
    assert TREND_LEVEL == 0.95 and TREND_MIN_POINTS == 8
    rates = [(15.0 * i, 10.0 + 1.5 * i + (1.0 if i % 2 == 0 else -1.0)) for i in range(8)]
    b = 0.1 - 60.0 / 9450.0
    se = math.sqrt((8.0 - 60.0 ** 2 / 9450.0) / 6.0 / 9450.0 * 8.0 / 2.0)
    assert b == pytest.approx(0.0936508, abs=1e-7) and se == pytest.approx(0.0231840, abs=1e-6)
    assert rising_slope(rates, 300.0, 60.0) == pytest.approx(b - Z95 * se)  # 0.05552
    # with 15-s windows the 8 rates are independent: the allowance is half as wide
    se_15 = math.sqrt((8.0 - 60.0 ** 2 / 9450.0) / 6.0 / 9450.0)
    assert rising_slope(rates, 300.0, 15.0) == pytest.approx(b - Z95 * se_15)


def test_noise_a_fall_or_too_few_rates_give_no_rise() -> None:
    noise = [(15.0 * i, 100.0 + (1.0 if i % 2 == 0 else -1.0)) for i in range(8)]
    assert rising_slope(noise, 300.0, 60.0) == 0.0  # its slope, -60 / 9450, is below 0
    fall = [(15.0 * i, 100.0 - i) for i in range(10)]
    assert rising_slope(fall, 300.0, 60.0) == 0.0
    assert rising_slope([(15.0 * i, 50.0 + i) for i in range(7)], 300.0, 60.0) == 0.0
    assert rising_slope([], 300.0, 60.0) == 0.0
    # a steep rise buried in noise: slope 0.2 but residuals of +-10 over 8 rates (two windows)
    loud = [(15.0 * i, 100.0 + 3.0 * i + (10.0 if i % 2 == 0 else -10.0)) for i in range(8)]
    assert rising_slope(loud, 300.0, 60.0) == 0.0  # 0.2 - 600/9450 - 1.645 x 0.2318 < 0


def test_the_trend_path_rises_for_a_cold_start_then_holds() -> None:
    assert trend_path(10.0, 0.1, 15.0, 4, 30.0) == pytest.approx([11.5, 13.0, 13.0, 13.0])
    assert trend_path(10.0, 0.0, 15.0, 3, 300.0) == pytest.approx([10.0, 10.0, 10.0])


def estimate(t: float, rate: float) -> ServiceEstimate:
    return service_estimate(SVC, WEIGHTS, t, rate, {SVC.variants[0].name: 2}, capacity=20.0)


def test_the_plan_demands_the_rise_on_a_straight_ramp_and_not_without_trend() -> None:
    # 40 req/s rising by 1 every tick (1/15 req/s per s): after 21 ticks the last cold start's
    # (300 s) rates are a straight line, so step k of the plan is 60 + (k + 1) x 1 up to step 19
    # (300 s ahead), then 80; without trend=1 the forecast-less plan is today's 60
    on = MPCController(CFG, {SVC.name: WEIGHTS}, trend=1)
    off = MPCController(CFG, {SVC.name: WEIGHTS})
    for i in range(21):
        a = on.decide(estimate(i * TICK, 40.0 + i), SVC)
        b = off.decide(estimate(i * TICK, 40.0 + i), SVC)
    cold = max(v.startup_cold_s for v in SVC.variants)
    assert cold == 300.0
    assert a.terms["demand_rps"] == pytest.approx(61.0)
    assert b.terms["demand_rps"] == pytest.approx(60.0)
    d = on.demand(estimate(20 * TICK, 60.0), SVC, 60.0, trend_path(60.0, 1.0 / 15.0, TICK, 40, cold))
    assert d[:3] == pytest.approx([61.0, 62.0, 63.0])
    assert d[19] == pytest.approx(80.0) and d[39] == pytest.approx(80.0)
    assert np.all(np.diff(d) >= 0)


def test_trend_is_0_or_1() -> None:
    with pytest.raises(ValueError, match="trend must be 0 or 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, trend=2)
    assert parse_spec("mpc:quantile=0.75:trend=1") == ("mpc", {"quantile": 0.75, "trend": 1})
