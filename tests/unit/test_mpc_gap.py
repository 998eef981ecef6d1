"""``mpc:gap=1`` (``controllers.mpc.resumed_after_gap``, ``hold_downs_after_gap``): no scale-down for a
signal window after the arrival rates come back from a gap longer than the window. The rates a
Prometheus back from an outage gives are worked by hand with Prometheus 2.x's ``extrapolatedRate``
(``autoscaler.adapters.simulator.extrapolated_rate`` follows it), 5-s scrapes of a 25 req/s counter."""

from __future__ import annotations

import numpy as np
import pytest
from support.estimates import service_estimate

from autoscaler.adapters.simulator import extrapolated_rate
from autoscaler.config.loading import default_config
from autoscaler.state import ServiceEstimate
from controllers.mpc import MPCController, hold_downs_after_gap, resumed_after_gap
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}  # every replica serves 10 req/s
TICK = CFG.controller.tick_s
WINDOW = 60.0


def test_a_window_holding_only_the_samples_since_a_restart_reads_an_eighth_of_the_load() -> None:
    # back at 1000 s, two scrapes 5 s apart, 125 arrivals between them: over [945, 1005] the increase
    # 125 is stretched over 5 + 2.5 s (the first sample is 55 s from the range's start, past 1.1 x the
    # 5-s interval: half an interval) and divided by 60: 125 x 7.5 / 5 / 60 = 3.125 req/s
    after = extrapolated_rate(np.array([1000.0, 1005.0]), np.array([25_000.0, 25_125.0]), 945.0, 1005.0)
    assert after == pytest.approx(3.125)
    # a gap shorter than the window keeps a sample before it in the range: 1375 arrivals over 55 s,
    # stretched by the 5 s to the range's start (< 1.1 x 27.5), over 60 s: 25 req/s, the load
    short = extrapolated_rate(np.array([0.0, 50.0, 55.0]), np.array([1000.0, 2250.0, 2375.0]), -5.0, 55.0)
    assert short == pytest.approx(25.0)


def test_resumed_after_gap_marks_a_gap_longer_than_the_window_only() -> None:
    assert resumed_after_gap(None, 0.0, WINDOW, None) is None  # the first rate: the loop's start, no gap
    assert resumed_after_gap(100.0, 115.0, WINDOW, None) is None  # one tick
    assert resumed_after_gap(100.0, 160.0, WINDOW, None) is None  # exactly a window: a sample stays in range
    assert resumed_after_gap(100.0, 175.0, WINDOW, None) == 175.0
    assert resumed_after_gap(175.0, 190.0, WINDOW, 175.0) == 175.0  # kept until the next gap
    assert resumed_after_gap(190.0, 400.0, WINDOW, 175.0) == 400.0
    with pytest.raises(ValueError, match="window_s > 0 and last_s <= now_s"):
        resumed_after_gap(200.0, 100.0, WINDOW, None)


def test_downs_are_held_for_one_window_after_the_rates_come_back() -> None:
    desired, current = {"h100": 0, "gh200": 1, "a100": 2}, {"h100": 2, "gh200": 1, "a100": 1}
    held = {"h100": 2, "gh200": 1, "a100": 2}  # the fall held, the rise passed
    assert hold_downs_after_gap(desired, current, 400.0, 400.0, WINDOW) == held
    assert hold_downs_after_gap(desired, current, 400.0, 445.0, WINDOW) == held
    assert hold_downs_after_gap(desired, current, 400.0, 460.0, WINDOW) == desired  # a whole window since
    assert hold_downs_after_gap(desired, current, None, 400.0, WINDOW) == desired  # no gap
    with pytest.raises(ValueError, match="window_s must be > 0"):
        hold_downs_after_gap(desired, current, 400.0, 400.0, 0.0)


def estimate(t: float, rate: float) -> ServiceEstimate:
    # three replicas of 10 req/s for 25 req/s
    return service_estimate(SVC, WEIGHTS, t, rate, {"h100": 2, "gh200": 1}, capacity=30.0)


def test_the_controller_keeps_its_replicas_through_the_first_window_after_an_outage() -> None:
    # 25 req/s for 21 ticks (0-300 s, past the 300-s hold's learning), then no rate for 315 s (the loop
    # holds on the failed queries and never asks), then back at 615 s reading 3.125 req/s (the first
    # test's figure) for four ticks, 615-660 s: the pre-outage rates are out of the 300-s hold, so the
    # plan is for 3.125 req/s, which the GH200 the fleet's minimum keeps covers. Without gap=1 the
    # H100s go at once; with it they stay until 675 s, a whole window after 615 s, where a rate read
    # low again is the plan's to act on.
    on = MPCController(CFG, {SVC.name: WEIGHTS}, gap=1)
    off = MPCController(CFG, {SVC.name: WEIGHTS})
    for i in range(21):
        a = on.decide(estimate(i * TICK, 25.0), SVC)
        b = off.decide(estimate(i * TICK, 25.0), SVC)
        assert a.desired == b.desired
    assert a.desired["h100"] == 2
    for t in (615.0, 630.0, 645.0, 660.0):
        a = on.decide(estimate(t, 3.125), SVC)
        b = off.decide(estimate(t, 3.125), SVC)
        assert b.desired["h100"] < 2
        assert a.desired["h100"] == 2
        assert "after a gap" in a.reason and "after a gap" not in b.reason
    a = on.decide(estimate(675.0, 3.125), SVC)
    assert a.desired["h100"] < 2
    assert "after a gap" not in a.reason


def test_gap_is_0_or_1() -> None:
    with pytest.raises(ValueError, match="gap must be 0 or 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, gap=2)
    assert parse_spec("mpc:quantile=0.8:gap=1") == ("mpc", {"quantile": 0.8, "gap": 1})
