"""The MPC's adaptive hedge (``hedge=adaptive``): plan steps judged against the rate that came, the
band's z moved by their miss share, and the demand path it gives; every figure worked by hand."""

from __future__ import annotations

from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pytest

from autoscaler.config.loading import default_config
from autoscaler.state import RateForecast, ServiceEstimate, Signals, VariantObservation
from controllers.mpc import (
    MIN_SCORES,
    SCORE_WINDOW_S,
    Z95,
    Z_LIMITS,
    MPCController,
    band_scores,
    conformal_z,
)
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}
TICK = CFG.controller.tick_s


def test_band_scores_judge_each_plan_at_the_step_that_ends_now() -> None:
    # at t = 30 with 15-s ticks: the plan issued at 0 is judged at its step 1 (13 over its floor 8: it
    # needed (13 - 10) / 6 of the band's 95 % width, z = 0.5 z95), the one issued at 15 at its step 0
    # (13 under its floor 14: -inf), the one at 30 not yet, the one at -45 (step 4) is past its
    # horizon of 3, and one whose band had no width at that step gives none
    three = np.array([10.0, 10.0, 10.0])
    plans = [(-45.0, three, np.array([5.0, 5.0, 5.0]), 0.0), (0.0, three, np.array([5.0, 6.0, 7.0]), 8.0),
             (15.0, three, np.array([5.0, 6.0, 7.0]), 14.0), (15.0, three, np.array([0.0, 6.0, 7.0]), 1.0),
             (30.0, three, np.array([5.0, 6.0, 7.0]), 0.0)]
    out = band_scores(plans, 30.0, 15.0, 13.0)
    assert out[0] == pytest.approx(0.5 * 1.6448536, abs=1e-6)
    assert out[1] == -np.inf
    assert len(out) == 2
    # a rate under the mean needs a negative z
    assert band_scores(plans[1:2], 30.0, 15.0, 8.5)[0] == pytest.approx(-1.5 * Z95 / 6.0)


def test_conformal_z_is_the_ceil_n_plus_one_level_order_statistic() -> None:
    assert MIN_SCORES == 200
    scores = [0.01 * i for i in range(200)]  # 0.00 .. 1.99
    assert conformal_z(scores, 0.9) == pytest.approx(1.80)  # ceil(201 x 0.9) = 181st smallest
    assert conformal_z(scores, 0.99) == pytest.approx(1.98)  # ceil(198.99) = 199th
    assert conformal_z(scores, 0.999) == pytest.approx(1.99)  # ceil(200.8) = 201 > n: the largest
    assert conformal_z(scores[:199], 0.9) is None  # too few
    assert conformal_z([-np.inf] * 200, 0.9) == 0.0  # the floors covered every step: the mean
    assert conformal_z([5.0] * 200, 0.9) == pytest.approx(Z_LIMITS[1])  # at most z(0.99)
    assert Z_LIMITS[1] == pytest.approx(2.3263, abs=1e-4)


def estimate(t: float, rate: float, mean: float, upper: float) -> ServiceEstimate:
    variants = {v.name: VariantObservation(2 if i == 0 else 0, 0) for i, v in enumerate(SVC.variants)}
    est = ServiceEstimate(SVC.name, t, Signals.of({"arrival_rate_rps": rate, "queue_length": 0.0}), variants,
                          dict(WEIGHTS), False, 20.0, 20.0, 0)
    times = tuple(t + (k + 1) * TICK for k in range(40))
    return replace(est, rate_forecast=RateForecast(times, (mean,) * 40, (upper,) * 40))


def test_the_demand_path_reads_the_band_at_the_measured_z() -> None:
    c = MPCController(CFG, {SVC.name: WEIGHTS}, hedge="adaptive")
    z0 = NormalDist().inv_cdf(0.9)
    # a steady 12 req/s over a floor of 8, the band's mean 10 and 95 % point 15: every judged step
    # needed z = (12 - 10) / 5 x z95. Tick i judges min(i, 40) steps: 190 after tick 19, 210 after 20
    assert SCORE_WINDOW_S > 20 * TICK
    for i in range(21):
        d = c.demand(estimate(i * TICK, 12.0, 10.0, 15.0), SVC, 8.0)
        if i == 19:
            assert c.memory[SVC.name].z == pytest.approx(z0)
            assert d[5] == pytest.approx(10.0 + z0 / Z95 * 5.0)
    assert c.memory[SVC.name].z == pytest.approx(0.4 * Z95)
    assert d[5] == pytest.approx(12.0)  # the band now reaches just the rate that came


def test_the_band_hedge_keeps_its_fixed_quantile() -> None:
    c = MPCController(CFG, {SVC.name: WEIGHTS}, quantile=0.9)
    for i, rate in enumerate((8.0, 20.0, 5.0)):
        d = c.demand(estimate(i * TICK, rate, 10.0, 15.0), SVC, rate)
    assert d[5] == pytest.approx(10.0 + NormalDist().inv_cdf(0.9) / Z95 * 5.0)
    assert c.memory.get(SVC.name) is None or c.memory[SVC.name].z is None


def test_coverage_is_checked_and_needs_the_adaptive_hedge() -> None:
    with pytest.raises(ValueError, match="coverage must be in"):
        MPCController(CFG, {SVC.name: WEIGHTS}, hedge="adaptive", coverage=1.0)
    with pytest.raises(ValueError, match="hedge must be one of band, measured, adaptive"):
        MPCController(CFG, {SVC.name: WEIGHTS}, hedge="conformal")
    assert parse_spec("mpc:hedge=adaptive:coverage=0.8") == ("mpc", {"hedge": "adaptive", "coverage": 0.8})
    with pytest.raises(ValueError, match="coverage needs hedge=adaptive"):
        parse_spec("mpc:coverage=0.8")
