"""The MPC's hedge on starts that do not come up (``overdue=1``): a start still not ready a margin past
the start-up it can be sure of is capacity at risk, and the plan orders on another variant; every
figure worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from support.estimates import service_estimate

from autoscaler.config.loading import default_config
from autoscaler.state import ServiceEstimate, VariantObservation
from controllers.mpc import OVERDUE_MARGIN_S, MPCController, _ServiceMemory, starts_at_risk, sure_startup
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
# an H100 serves 20 req/s, so it is the cheapest per request after the GH200s (quota 4):
# $2.99 / 20 = $0.150 per req/s-hour against the A100's $1.79 / 10 = $0.179
WEIGHTS = {"h100": 20.0, "a100": 10.0, "gh200": 10.0}


def test_a_start_is_at_risk_once_past_its_start_up_and_the_margin() -> None:
    # starts seen at 0, 30 and 60 s, sure of 90, 90 and 300 s. At 200 s with a 60-s margin:
    # 200 > 90 + 60, 170 > 150, but 140 < 300 + 60.
    assert starts_at_risk([0.0, 30.0, 60.0], [90.0, 90.0, 300.0], 200.0, 60.0) == [True, True, False]
    assert starts_at_risk([0.0], [90.0], 150.0, 60.0) == [False]  # exactly at the start-up plus the margin
    assert starts_at_risk([0.0], [300.0], 361.0, 60.0) == [True]
    assert starts_at_risk([], [], 1e6) == []
    with pytest.raises(ValueError, match="starts_at_risk"):
        starts_at_risk([0.0], [], 10.0)


def test_a_start_is_sure_of_a_warm_node_only_while_one_is_free_of_every_replica() -> None:
    assert sure_startup(90.0, 300.0, 4, 3) == 90.0
    assert sure_startup(90.0, 300.0, 4, 4) == 300.0
    assert sure_startup(90.0, 300.0, 0, 0) == 300.0


def estimate(t: float, ready: dict[str, int], starting: dict[str, int], rate: float = 80.0) -> ServiceEstimate:
    return service_estimate(SVC, WEIGHTS, t, rate, ready, starting)


def controller(**kw: object) -> MPCController:
    return MPCController(CFG, {SVC.name: WEIGHTS}, forecast="last", **kw)  # type: ignore[arg-type]


def test_a_pending_start_past_its_start_up_is_not_counted_ready() -> None:
    # two H100 starts first seen at 600 s, the warm nodes (4) all free: sure of 90 s each. At 720 s
    # (120 s > 90 + 15) both are at risk: left out of the ready path, where without the hedge they
    # count as ready from step 0.
    h100 = next(v for v in SVC.variants if v.name == "h100")
    assert (h100.startup_warm_s, h100.warm_nodes, OVERDUE_MARGIN_S) == (90.0, 4, 15.0)
    for overdue, want, risky in ((1, 0.0, 2), (0, 2.0, 0)):
        ctrl, mem = controller(overdue=overdue), _ServiceMemory()
        first, _ = ctrl._ready_by_step(estimate(600.0, {}, {"h100": 2}), h100, mem)
        assert np.all(first[:6] == 0.0) and np.all(first[6:] == 2.0)  # ready at step ceil(90 / 15) = 6
        later, at_risk = ctrl._ready_by_step(estimate(720.0, {}, {"h100": 2}), h100, mem)
        assert at_risk == risky and np.all(later == want)
    # one tick earlier (705 s: 105 s, not past 90 + 15) neither is at risk
    ctrl, mem = controller(overdue=1), _ServiceMemory()
    ctrl._ready_by_step(estimate(600.0, {}, {"h100": 2}), h100, mem)
    assert ctrl._ready_by_step(estimate(705.0, {}, {"h100": 2}), h100, mem) == (pytest.approx(np.full(40, 2.0)), 0)


def test_ready_and_draining_replicas_take_the_warm_nodes_first() -> None:
    # 3 ready + 1 draining H100 may hold all 4 warm nodes: the start is sure of the cold 300 s only,
    # so at 720 s (120 s after it was seen) it is not at risk, and the ready path counts it as before
    h100 = next(v for v in SVC.variants if v.name == "h100")
    ctrl, mem = controller(overdue=1), _ServiceMemory()
    obs = {"h100": VariantObservation(3, 1, 1)}

    def est(t: float) -> ServiceEstimate:
        e = estimate(t, {}, {})
        e.variants.update(obs)
        return e

    ctrl._ready_by_step(est(600.0), h100, mem)
    ready, at_risk = ctrl._ready_by_step(est(720.0), h100, mem)
    assert at_risk == 0 and np.all(ready == 4.0)  # counted warm by the ready path: 90 s have run
    ready, at_risk = ctrl._ready_by_step(est(916.0), h100, mem)  # 316 s > 300 + 15
    assert at_risk == 1 and np.all(ready == 3.0)


def test_a_replica_removed_since_the_order_may_have_held_a_warm_node() -> None:
    # the last tick showed 4 ready H100s (every warm node may be taken); now 2 ready and 1 start: the
    # start may have been ordered while all 4 were up, so it is sure of the cold 300 s only, and at
    # 720 s (120 s after it was seen, past 90 + 15) it is not at risk
    h100 = next(v for v in SVC.variants if v.name == "h100")
    ctrl, mem = controller(overdue=1), _ServiceMemory()
    ctrl._ready_by_step(estimate(585.0, {"h100": 4}, {}), h100, mem)
    ctrl._ready_by_step(estimate(600.0, {"h100": 2}, {"h100": 1}), h100, mem)
    assert ctrl._ready_by_step(estimate(720.0, {"h100": 2}, {"h100": 1}), h100, mem)[1] == 0
    assert ctrl._ready_by_step(estimate(916.0, {"h100": 2}, {"h100": 1}), h100, mem)[1] == 1  # 316 > 315
    # seen without that history (a fresh controller), 2 ready leave 2 warm nodes free: at risk at 720 s
    ctrl, mem = controller(overdue=1), _ServiceMemory()
    ctrl._ready_by_step(estimate(600.0, {"h100": 2}, {"h100": 1}), h100, mem)
    assert ctrl._ready_by_step(estimate(720.0, {"h100": 2}, {"h100": 1}), h100, mem)[1] == 1


def test_starts_that_turned_ready_as_new_ones_came_leave_their_times() -> None:
    # 2 A100 starts seen at 300 s (2 live of 4 warm nodes: sure of the warm 90 s); at 600 s both are
    # ready (2 -> 4) and 2 new ones start: the count of starts is 2 throughout. By the count alone the new
    # starts would keep the first-seen 300 s and its 90 s, at risk at once (300 > 90 + 15); dropped as the
    # ready count rose, they are seen at 600 s, sure of the cold 300 s (4 live), at risk after 915 s.
    a100 = next(v for v in SVC.variants if v.name == "a100")
    ctrl, mem = controller(overdue=1), _ServiceMemory()
    ctrl._ready_by_step(estimate(285.0, {"a100": 2}, {}), a100, mem)
    ctrl._ready_by_step(estimate(300.0, {"a100": 2}, {"a100": 2}), a100, mem)
    ctrl._ready_by_step(estimate(600.0, {"a100": 4}, {"a100": 2}), a100, mem)
    assert mem.risk_seen["a100"] == [600.0, 600.0] and mem.sure_starting["a100"] == [300.0, 300.0]
    assert ctrl._ready_by_step(estimate(900.0, {"a100": 4}, {"a100": 2}), a100, mem)[1] == 0
    assert ctrl._ready_by_step(estimate(916.0, {"a100": 4}, {"a100": 2}), a100, mem)[1] == 2


def test_the_plan_orders_the_other_variant_for_the_starts_at_risk() -> None:
    # 80 req/s, 4 GH200 ready (40 req/s, their quota), 2 H100 started at 600 s that never come up.
    # Without the hedge the plan counts them (2 x 20 = 40 req/s) from 690 s and orders nothing more.
    # With it, at 720 s they count 0 and the H100 takes no new order: the 40 req/s short go to the
    # next cheapest variant, 40 / 10 = 4 A100s. The H100 starts are kept (not cancelled).
    for overdue, a100 in ((0, 0), (1, 4)):
        ctrl = controller(overdue=overdue)
        ctrl.decide(estimate(600.0, {"gh200": 4}, {"h100": 2}), SVC)
        d = ctrl.decide(estimate(720.0, {"gh200": 4}, {"h100": 2}), SVC)
        assert d.desired == {"h100": 2, "a100": a100, "gh200": 4}


def test_overdue_is_0_or_1() -> None:
    with pytest.raises(ValueError, match="overdue must be 0 or 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, overdue=2)
    assert parse_spec("mpc:trend=1:overdue=1") == ("mpc", {"trend": 1, "overdue": 1})
