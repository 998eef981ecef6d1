"""``mpc:rise=1`` (``controllers.mpc.hold_downs_while_rising``): no aggregated scale-down while the
last ``RISE_SPAN_S`` of arrival rates rise. Rates are 15-s ticks of 60-s windows, as the MPC keeps
them; every slope below is worked by hand (least squares over the rates, ``rising_slope``'s lower
one-sided 95 % bound, which is the slope itself where the residuals are 0)."""

from __future__ import annotations

import pytest
from support.estimates import service_estimate

from autoscaler.config.loading import default_config
from autoscaler.state import ServiceEstimate
from controllers.mpc import RISE_SPAN_S, MPCController, hold_downs_while_rising, rising_slope
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}  # every replica serves 10 req/s
TICK = CFG.controller.tick_s


def test_a_straight_rise_holds_every_variant_going_down_and_passes_the_rest() -> None:
    # 9 rates over the last 120 s, 50 + i: slope 1/15 req/s per s, no residual, so its bound is > 0
    rates = [(15.0 * i, 50.0 + i) for i in range(9)]
    desired, current = {"h100": 1, "gh200": 3, "a100": 0}, {"h100": 2, "gh200": 2, "a100": 1}
    assert hold_downs_while_rising(desired, current, rates, 120.0, 60.0) == {"h100": 2, "gh200": 3, "a100": 1}
    # nothing going down: untouched
    assert hold_downs_while_rising({"h100": 2}, {"h100": 2}, rates, 120.0, 60.0) == {"h100": 2}


def test_a_turn_up_from_a_trough_is_a_rise_over_two_minutes_not_over_a_cold_start() -> None:
    # 21 rates over 300 s: 20 down to 8 (i = 0..12), then back up to 16 (i = 12..20), the sinusoid's
    # trough. Over 300 s: sum (i - 10) r_i = -218, so Sxy = 15 x -218 = -3270 against
    # Sxx = 15^2 x 770 = 173250: slope -0.0189 < 0, no rise (trend=1's span reads it as a fall).
    # Over the last 120 s (i = 12..20): 8, 9, ..., 16, a straight rise of 1/15 req/s per s.
    rates = [(15.0 * i, 20.0 - i if i <= 12 else 8.0 + (i - 12)) for i in range(21)]
    assert rising_slope(rates, 300.0, 60.0) == 0.0
    assert rising_slope(rates, 120.0, 60.0) == pytest.approx(1.0 / 15.0)
    assert RISE_SPAN_S == 120.0
    assert hold_downs_while_rising({"gh200": 2}, {"gh200": 3}, rates, RISE_SPAN_S, 60.0) == {"gh200": 3}
    assert hold_downs_while_rising({"gh200": 2}, {"gh200": 3}, rates, 300.0, 60.0) == {"gh200": 2}


def test_noise_a_fall_or_a_rise_buried_in_noise_let_the_scale_down_through() -> None:
    down, current = {"h100": 1}, {"h100": 2}
    noise = [(15.0 * i, 100.0 + (1.0 if i % 2 == 0 else -1.0)) for i in range(8)]  # slope -60/9450 < 0
    fall = [(15.0 * i, 100.0 - i) for i in range(9)]
    # slope 0.2 - 600/9450 = 0.1365, but its standard error over two 60-s windows is 0.2318:
    # 0.1365 - 1.645 x 0.2318 < 0 (test_mpc_trend's hand figures)
    loud = [(15.0 * i, 100.0 + 3.0 * i + (10.0 if i % 2 == 0 else -10.0)) for i in range(8)]
    few = [(15.0 * i, 50.0 + i) for i in range(7)]  # 7 rates: fewer than rising_slope reads
    for rates in (noise, fall, loud, few, []):
        assert hold_downs_while_rising(down, current, rates, 120.0, 60.0) == down


def test_a_bad_span_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="span_s must be > 0"):
        hold_downs_while_rising({"h100": 1}, {"h100": 2}, [], 0.0, 60.0)


def estimate(t: float, rate: float) -> ServiceEstimate:
    # two H100s, and the one GH200 the fleet's minimum keeps
    return service_estimate(SVC, WEIGHTS, t, rate, {"h100": 2, "gh200": 1}, capacity=20.0)


def test_the_controller_keeps_its_replicas_on_a_rise_and_removes_them_without_rise() -> None:
    # 2 req/s for 21 ticks (past the 300-s hold's learning), then +0.5 a tick to 6.5 req/s at tick 29.
    # Two H100s and a GH200 (10 req/s each) hold 30 req/s for a demand of at most 6.5 (no forecast:
    # today's rate over the hold), which the GH200 alone covers: without rise=1 the plan removes the
    # H100s; with it the last 120 s (2.5 to 6.5 over 8 ticks, residuals 0) rise and both stay.
    on = MPCController(CFG, {SVC.name: WEIGHTS}, rise=1)
    off = MPCController(CFG, {SVC.name: WEIGHTS})
    h100 = "h100"
    for i in range(30):
        rate = 2.0 if i <= 20 else 2.0 + 0.5 * (i - 20)
        a = on.decide(estimate(i * TICK, rate), SVC)
        b = off.decide(estimate(i * TICK, rate), SVC)
    assert rate == 6.5
    assert b.desired[h100] < 2
    assert a.desired[h100] == 2
    assert {n: k for n, k in a.desired.items() if n != h100} == {n: k for n, k in b.desired.items() if n != h100}


def test_rise_is_0_or_1() -> None:
    with pytest.raises(ValueError, match="rise must be 0 or 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, rise=2)
    assert parse_spec("mpc:quantile=0.8:rise=1") == ("mpc", {"quantile": 0.8, "rise": 1})
