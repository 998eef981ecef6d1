"""The MPC's adaptive hedge (``hedge=adaptive``): plan steps judged against the rate that came, the
band's z moved by their miss share, and the demand path it gives; every figure worked by hand."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pytest

from autoscaler.config.loading import default_config
from autoscaler.state import RateForecast, ServiceEstimate, Signals, VariantObservation
from controllers.mpc import (
    ADAPT_GAIN,
    MISS_TARGET,
    Z95,
    Z_LIMITS,
    MPCController,
    adapted_z,
    plan_misses,
)

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}
TICK = CFG.controller.tick_s


def test_plan_misses_judges_each_path_at_the_step_that_ends_now() -> None:
    # at t = 30 with 15-s ticks: the path issued at 0 is judged at its step 1 (6 < 6.5: short), the
    # one issued at 15 at its step 0 (7 >= 6.5: covered), the one issued at 30 not yet, and one issued
    # at -45 at its step 4, past its horizon of 3: not judged
    plans = deque([(-45.0, np.array([9.0, 9.0, 9.0])), (0.0, np.array([5.0, 6.0, 7.0])),
                   (15.0, np.array([7.0, 8.0, 9.0])), (30.0, np.array([1.0, 1.0, 1.0]))])
    assert plan_misses(plans, 30.0, 15.0, 6.5) == (1, 2)
    assert plan_misses(plans, 30.0, 15.0, 6.0) == (0, 2)  # equal is covered
    assert plan_misses(deque(), 30.0, 15.0, 6.0) == (0, 0)


def test_adapted_z_moves_by_the_gain_times_the_miss_share_over_the_target() -> None:
    assert (ADAPT_GAIN, MISS_TARGET) == (0.3, 0.1)
    assert adapted_z(1.0, 1, 4) == pytest.approx(1.0 + 0.3 * (0.25 - 0.1))  # 1.045
    assert adapted_z(1.0, 0, 5) == pytest.approx(0.97)
    assert adapted_z(1.0, 3, 3) == pytest.approx(1.27)
    assert adapted_z(1.0, 0, 0) == 1.0  # nothing judged: unchanged
    assert adapted_z(0.01, 0, 5) == 0.0  # never below the mean
    assert Z_LIMITS[1] == pytest.approx(2.3263, abs=1e-4)  # z(0.99)
    assert adapted_z(2.3, 4, 4) == pytest.approx(Z_LIMITS[1])


def estimate(t: float, rate: float, mean: float, upper: float) -> ServiceEstimate:
    variants = {v.name: VariantObservation(2 if i == 0 else 0, 0) for i, v in enumerate(SVC.variants)}
    est = ServiceEstimate(SVC.name, t, Signals.of({"arrival_rate_rps": rate, "queue_length": 0.0}), variants,
                          dict(WEIGHTS), False, 20.0, 20.0, 0)
    times = tuple(t + (k + 1) * TICK for k in range(40))
    return replace(est, rate_forecast=RateForecast(times, (mean,) * 40, (upper,) * 40))


def test_the_demand_path_reads_the_band_at_the_adapted_z() -> None:
    c = MPCController(CFG, {SVC.name: WEIGHTS}, hedge="adaptive")
    z0 = NormalDist().inv_cdf(0.9)
    # first tick: z(0.9), nothing judged; band mean 10, upper 15 (95 %): 10 + z0 / z95 x 5
    d = c.demand(estimate(0.0, 8.0, 10.0, 15.0), SVC, 8.0)
    assert d[0] == pytest.approx(10.0 + z0 / Z95 * 5.0)
    assert c.memory[SVC.name].z == pytest.approx(z0)
    # next tick the rate is 20: last tick's step 0 (~13.9) fell short, 1 of 1 judged
    z1 = z0 + 0.3 * (1.0 - 0.1)
    d = c.demand(estimate(TICK, 20.0, 10.0, 15.0), SVC, 8.0)
    assert c.memory[SVC.name].z == pytest.approx(z1)
    assert d[5] == pytest.approx(10.0 + z1 / Z95 * 5.0)
    # then a rate of 5: both earlier paths' matured steps covered, 0 of 2 short
    d = c.demand(estimate(2 * TICK, 5.0, 10.0, 15.0), SVC, 5.0)
    assert c.memory[SVC.name].z == pytest.approx(z1 - 0.3 * 0.1)


def test_the_band_hedge_keeps_its_fixed_quantile() -> None:
    c = MPCController(CFG, {SVC.name: WEIGHTS}, quantile=0.9)
    for i, rate in enumerate((8.0, 20.0, 5.0)):
        d = c.demand(estimate(i * TICK, rate, 10.0, 15.0), SVC, rate)
    assert d[5] == pytest.approx(10.0 + NormalDist().inv_cdf(0.9) / Z95 * 5.0)
    assert c.memory.get(SVC.name) is None or c.memory[SVC.name].z is None
