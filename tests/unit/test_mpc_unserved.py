"""``mpc:unserved=1`` (``controllers.mpc.seen_shortfall``, ``UNSERVED_WEIGHT``): a shortfall below the
hold's highest arrival rate, on the steps from the fastest start-up on, is priced at 100 x the dearest
way to serve a request instead of ``miss_weight`` (10) x. Every figure below is worked by hand.

The plan case: only the GH200 serves (16 req/s a replica; the H100 and A100 are given no capacity), two
are ready, two more warm nodes are free (90-s start-up: 6 steps of 15 s), the horizon 40 steps (600 s).
A GH200 costs 1.49 $/h, so a request served by it 1.49 / 3600 / 16 = 2.587e-5 $, and the miss cost is
10 x that, 2.587e-4 $ a request. At 33 req/s held, two replicas (32 req/s) leave 1 req/s unserved:
- a third GH200 ordered now serves from step 6, saving 1 req/s x 34 steps x 15 s = 510 requests, and
  costs 40 steps x 15 s x 1.49 / 3600 = $0.248 plus its start (300 s of GPU time, $0.124) = $0.372;
- without the rule those 510 requests cost 510 x 2.587e-4 = $0.132 < $0.372: no order, 1 req/s unserved;
- with it they cost 510 x 2.587e-3 = $1.319 > $0.372: the third GH200 is ordered.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.estimates import service_estimate

from autoscaler.config.loading import default_config
from autoscaler.state import RateForecast, ServiceEstimate
from controllers.mpc import UNSERVED_WEIGHT, MPCController, seen_shortfall
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {"h100": 0.0, "a100": 0.0, "gh200": 16.0}  # only the GH200 serves


def estimate(rate: float, forecast: float | None = None) -> ServiceEstimate:
    est = service_estimate(SVC, WEIGHTS, 0.0, rate, {"gh200": 2})
    if forecast is not None:  # a flat forecast of ``forecast`` req/s with no interval: the plan's demand
        times = tuple(15.0 * (k + 1) for k in range(40))
        est.rate_forecast = RateForecast(times, (forecast,) * 40, (forecast,) * 40)
    return est


def test_seen_shortfall_by_hand() -> None:
    demand = np.array([5.0, 5.0, 6.0, 7.0, 4.0])
    # before step 2 all of it; from step 2 what lies above 5.5 (0.5, 1.5, and 0 for 4 < 5.5)
    assert seen_shortfall(demand, 5.5, 2).tolist() == [5.0, 5.0, 0.5, 1.5, 0.0]
    assert seen_shortfall(demand, 0.0, 0).tolist() == demand.tolist()
    assert seen_shortfall(demand, 9.0, 5).tolist() == demand.tolist()
    with pytest.raises(ValueError, match="seen_shortfall: need held_rps >= 0"):
        seen_shortfall(demand, -1.0, 0)
    with pytest.raises(ValueError, match="first_step >= 0"):
        seen_shortfall(demand, 1.0, -1)


def test_a_seen_shortfall_of_1_rps_orders_the_next_replica_only_with_the_rule() -> None:
    assert UNSERVED_WEIGHT == 100.0
    off = MPCController(CFG, {SVC.name: WEIGHTS}).decide(estimate(33.0), SVC)
    on = MPCController(CFG, {SVC.name: WEIGHTS}, unserved=1).decide(estimate(33.0), SVC)
    assert off.desired["gh200"] == 2
    assert off.terms["unserved_rps_max"] == pytest.approx(1.0)
    assert on.desired["gh200"] == 3
    # the 1 req/s before the order is ready (steps 0-5) is left all the same, and none after it
    assert on.terms["unserved_rps_max"] == pytest.approx(1.0)
    assert on.terms["unserved_seen_rps_max"] == pytest.approx(0.0, abs=1e-9)
    # the rule's tier is not shedding: the reason says none (no priorities, no admission)
    assert "sheds" not in on.reason and "sheds" not in off.reason


def test_a_shortfall_above_the_rate_seen_stays_at_the_miss_cost() -> None:
    # 31 req/s seen (within the 32 two replicas serve), a forecast of 33: the 1 req/s the plan leaves
    # unserved lies above the rate seen, so it is priced as without the rule and nothing is ordered
    on = MPCController(CFG, {SVC.name: WEIGHTS}, unserved=1).decide(estimate(31.0, forecast=33.0), SVC)
    off = MPCController(CFG, {SVC.name: WEIGHTS}).decide(estimate(31.0, forecast=33.0), SVC)
    assert off.terms["demand_rps"] == pytest.approx(33.0)
    assert on.desired == off.desired
    assert on.desired["gh200"] == 2
    assert on.terms["unserved_rps_max"] == pytest.approx(1.0)


def test_the_option_off_plans_as_plain_mpc() -> None:
    # the candidate's options, spelled out, with and without an explicit unserved=0
    for rate in (12.0, 33.0, 47.5):
        plain = MPCController(CFG, {SVC.name: WEIGHTS}, floor=1, quantile=0.8, trend=1, rise=1,
                              overdue=1).decide(estimate(rate), SVC)
        zero = MPCController(CFG, {SVC.name: WEIGHTS}, floor=1, quantile=0.8, trend=1, rise=1, overdue=1,
                             unserved=0).decide(estimate(rate), SVC)
        assert plain.desired == zero.desired
        assert {k: v for k, v in plain.terms.items() if k != "solve_ms"} == \
            {k: v for k, v in zero.terms.items() if k != "solve_ms"}
        assert "unserved_seen_rps_max" not in zero.terms


def test_parsing_and_bad_combinations() -> None:
    assert parse_spec("mpc:quantile=0.8:unserved=1") == ("mpc", {"quantile": 0.8, "unserved": 1})
    with pytest.raises(ValueError, match="unserved must be 0 or 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, unserved=2)
    with pytest.raises(ValueError, match=r"unserved=1 .* needs shed=0"):
        MPCController(CFG, {SVC.name: WEIGHTS}, unserved=1, shed=1)
    with pytest.raises(ValueError, match="miss_weight < 100"):
        MPCController(CFG, {SVC.name: WEIGHTS}, unserved=1, miss_weight=100.0)
