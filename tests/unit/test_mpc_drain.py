"""The MPC's backlog drained where an order can serve it (``drain=1``, issue 28): today's queue is charged
from the first plan step at which a replica can serve it (``drain_start``), not from step 0. Every figure
by hand: 15-s ticks, a 40-step horizon, ``DRAIN_S`` 60 s, cold start-ups of 300 s (20 steps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from support.estimates import service_estimate

from autoscaler.config.loading import default_config, parse_config
from controllers.mpc import (
    DRAIN_S,
    MPCController,
    _Inputs,
    backlog_steps,
    drain_start,
    first_serving_step,
)
from controllers.registry import build, parse_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet-pd.yaml"
PD = parse_config(yaml.safe_load(EXAMPLE.read_text()), str(EXAMPLE), EXAMPLE.parent)
PD_SVC = PD.services[0]
CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {"h100": 20.0, "a100": 10.0, "gh200": 10.0}  # as tests/unit/test_mpc_pending.py


def test_the_drain_is_the_same_rate_over_the_same_steps_moved_to_its_start() -> None:
    assert DRAIN_S == 60.0
    # 3,600 requests, 44 req/s held, a 300-s start-up at 15-s ticks: 20 + 60 / 15 = 24 steps (360 s);
    # 3600 / 360 = 10 req/s, under the cap max(44, 3600 / 300 = 12)
    today = backlog_steps(3600.0, 44.0, 20, 0, 15.0, 40)
    assert list(today) == [10.0] * 24 + [0.0] * 16
    # from step 20: the same 10 req/s on steps 20-43, cut at the horizon (steps 20-39)
    assert list(backlog_steps(3600.0, 44.0, 20, 20, 15.0, 40)) == [0.0] * 20 + [10.0] * 20
    assert list(backlog_steps(3600.0, 44.0, 20, 5, 15.0, 40)) == [0.0] * 5 + [10.0] * 24 + [0.0] * 11
    # backlog_rps's cap, max(held, queue / 300 s), binds only on a drain period under 300 s: a warm
    # start-up of 90 s (6 steps) gives 6 + 4 = 10 steps, 150 s; 3600 / 150 = 24 req/s, capped at
    # max(12, 3600 / 300 = 12) = 12, and at max(30, 12) = 30 above it (24 then)
    assert list(backlog_steps(3600.0, 12.0, 6, 20, 15.0, 40)) == [0.0] * 20 + [12.0] * 10 + [0.0] * 10
    assert backlog_steps(3600.0, 30.0, 6, 20, 15.0, 40)[20] == pytest.approx(24.0)
    # uncapped: 360 / 150 = 2.4 req/s (under max(12, 1.2))
    warm = backlog_steps(360.0, 12.0, 6, 3, 15.0, 40)
    assert list(warm) == pytest.approx([0.0] * 3 + [2.4] * 10 + [0.0] * 27)
    assert not backlog_steps(0.0, 12.0, 20, 20, 15.0, 40).any()  # no queue, nothing charged
    assert not backlog_steps(3600.0, 12.0, 20, 40, 15.0, 40).any()  # past the horizon
    for bad in ((3600.0, 12.0, 20, -1, 15.0, 40), (3600.0, 12.0, -1, 0, 15.0, 40), (3600.0, 12.0, 20, 0, 0.0, 40)):
        with pytest.raises(ValueError, match="backlog_steps"):
            backlog_steps(*bad)


def test_the_first_step_a_replica_can_serve() -> None:
    # ready now: step 0; none ready, a start ready at step 7: 7, before a 20-step order; none: the order
    assert first_serving_step(np.array([1.0] * 40), 20) == 0
    assert first_serving_step(np.array([0.0] * 7 + [1.0] * 33), 20) == 7
    assert first_serving_step(np.array([0.0] * 25 + [1.0] * 15), 20) == 20
    assert first_serving_step(np.zeros(40), 6) == 6
    with pytest.raises(ValueError, match="first_serving_step"):
        first_serving_step(np.zeros(40), -1)
    # a request needs an aggregated replica, or a prefill replica and a decode one
    assert drain_start({"prefill": [0], "decode": [20]}) == 20  # decode lost: both pools only at 20
    assert drain_start({"prefill": [20, 6], "decode": [3]}) == 6  # the faster prefill variant
    assert drain_start({None: [12], "prefill": [0], "decode": [20]}) == 12  # an aggregated one sooner
    assert drain_start({None: [0, 20]}) == 0  # a variant with replicas ready: from now, as without
    assert drain_start({}) == 0
    assert drain_start({"prefill": [5]}) == 0  # no pair and nothing aggregated: as without the rule


def pd_controller(drain: int) -> MPCController:
    return MPCController(PD, {PD_SVC.name: {}}, forecast="last", drain=drain)


def test_a_lost_decode_pool_orders_the_extra_replica_with_the_drain_where_it_serves() -> None:
    # examples/fleet-pd.yaml at its typical request: a decode replica serves 24.14 req/s, a prefill one
    # 35.67 (the model's; checked below). Prefill 2 ready; the decode pool lost whole, its 2 cold
    # replacements first seen now: ready from step 300 / 15 = 20. 44 req/s held, 3,600 queued: the backlog
    # is 10 req/s over 24 steps (above). From step 20 the 2 decodes serve 48.29 req/s.
    # Without the rule the demand is 54 req/s on steps 0-23 and 44 after: short 5.71 req/s on steps 20-23
    # only, where an order now could serve; the plan keeps 2. With it 44 on steps 0-19 and 54 on 20-39:
    # short 5.71 req/s on the 20 steps an order serves, and it orders the third decode (3 x 24.14 = 72.4).
    est = service_estimate(PD_SVC, {}, 2400.0, 44.0, {"h100-prefill": 2}, {"h100-decode": 2}, queue=3600.0)
    caps = pd_controller(0).role_weights(est, PD_SVC)
    assert caps["h100-decode"] == pytest.approx(24.14, abs=0.01)
    assert caps["h100-prefill"] == pytest.approx(35.67, abs=0.01)
    want = {0: [54.0] * 24 + [44.0] * 16, 1: [44.0] * 20 + [54.0] * 20}
    decode = {0: 2, 1: 3}
    for drain in (0, 1):
        ctrl = pd_controller(drain)
        inputs = ctrl._inputs(est, PD_SVC)
        assert isinstance(inputs, _Inputs)
        assert list(inputs.service.demand_rps) == pytest.approx(want[drain])
        d = pd_controller(drain).decide(est, PD_SVC)
        assert d.desired == {"h100-prefill": 2, "h100-decode": decode[drain]}, drain
    # at 40 req/s the same queue leaves 40 + 10 - 48.29 = 1.71 req/s short from step 20: no order either way
    small = service_estimate(PD_SVC, {}, 2400.0, 40.0, {"h100-prefill": 2}, {"h100-decode": 2}, queue=3600.0)
    for drain in (0, 1):
        assert pd_controller(drain).decide(small, PD_SVC).desired == {"h100-prefill": 2, "h100-decode": 2}


def test_where_a_replica_serves_now_the_plan_is_the_same_with_and_without_the_rule() -> None:
    # the aggregated fleet with replicas ready, and the pools with both sides ready: the drain starts at 0
    cases = ((CFG, SVC, WEIGHTS, service_estimate(SVC, WEIGHTS, 600.0, 80.0, {"h100": 2, "gh200": 2},
                                                  {"a100": 2}, queue=2000.0)),
             (PD, PD_SVC, {}, service_estimate(PD_SVC, {}, 2400.0, 44.0, {"h100-prefill": 2, "h100-decode": 1},
                                               {"h100-decode": 1}, queue=3600.0)))
    for cfg, svc, weights, est in cases:
        plans = []
        for spec in ({}, {"drain": 0}, {"drain": 1}):
            ctrl = MPCController(cfg, {svc.name: weights}, forecast="last", **spec)  # type: ignore[arg-type]
            inputs = ctrl._inputs(est, svc)
            plans.append((list(inputs.service.demand_rps), MPCController(  # type: ignore[union-attr]
                cfg, {svc.name: weights}, forecast="last", **spec).decide(est, svc).desired))  # type: ignore[arg-type]
        assert plans[0] == plans[1] == plans[2]
        assert max(plans[0][0]) > min(plans[0][0])  # the queue is charged (on the first steps)


def test_drain_is_0_or_1_and_parsed() -> None:
    assert not MPCController(CFG, {SVC.name: WEIGHTS}).drain
    with pytest.raises(ValueError, match="drain must be 0 or 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, drain=2)
    assert parse_spec("mpc:drain=1:overdue=1") == ("mpc", {"drain": 1, "overdue": 1})
    on, off = build("mpc:drain=1", CFG), build("mpc", CFG)
    assert isinstance(on, MPCController) and on.drain
    assert isinstance(off, MPCController) and not off.drain
    with pytest.raises(ValueError, match="drain"):
        parse_spec("mpc:drain=2")
