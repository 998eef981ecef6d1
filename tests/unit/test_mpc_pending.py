"""The MPC's hedge on starts whose pods cannot be placed (``pending=1``): a variant whose pod has been
unschedulable for ``PENDING_GRACE_S`` (``VariantObservation.unschedulable_s``) has its starts since
that pod counted at risk at once, long before ``overdue=1``'s start-up has run; every figure by hand."""

from __future__ import annotations

import pytest
from support.estimates import service_estimate

from autoscaler.config.loading import default_config
from autoscaler.state import ServiceEstimate
from controllers.mpc import PENDING_GRACE_S, PENDING_READ_SLACK_S, MPCController, _ServiceMemory, pending_at_risk
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
H100 = next(v for v in SVC.variants if v.name == "h100")
# as tests/unit/test_mpc_overdue.py: an H100 serves 20 req/s, an A100 and a GH200 10 (GH200 quota 4)
WEIGHTS = {"h100": 20.0, "a100": 10.0, "gh200": 10.0}


def test_the_starts_since_the_longest_pending_pod_are_at_risk_past_the_grace() -> None:
    assert PENDING_GRACE_S == 15.0
    seen = [500.0, 540.0, 555.0]
    # at 570 s a pod Pending 30 s appeared at 540 s: the 500-s start was placed before it
    assert pending_at_risk(seen, 30.0, 570.0) == [False, True, True]
    assert pending_at_risk(seen, 15.0, 570.0) == [False, False, True]  # exactly the grace: 555 >= 555
    # live, one tick's wait can read a hair short of it (two reads a little closer than a tick apart):
    # within half a tick it counts as the grace; 14.99 alone is not at least 15
    assert PENDING_READ_SLACK_S == 7.5
    assert pending_at_risk(seen, 14.99, 570.0) == [False, False, True]
    assert pending_at_risk(seen, 7.6, 570.0) == [False, False, True]
    assert pending_at_risk(seen, 7.4, 570.0) == [False, False, False]  # below the grace by more than the slack
    assert pending_at_risk(seen, 200.0, 570.0) == [True, True, True]
    assert pending_at_risk(seen, None, 570.0) == [False, False, False]  # unknown is not unschedulable
    assert pending_at_risk(seen, 0.0, 570.0, grace_s=0.0) == [False, False, True]  # at least the newest
    assert pending_at_risk([500.0], 20.0, 570.0) == [True]  # timed from later (a restart): the newest still
    assert pending_at_risk([], 100.0, 570.0) == []
    for bad in ((seen, -1.0, 570.0, 15.0), (seen, 30.0, 570.0, -1.0), (seen, float("nan"), 570.0, 15.0)):
        with pytest.raises(ValueError, match="pending_at_risk"):
            pending_at_risk(*bad)


def estimate(t: float, ready: dict[str, int], starting: dict[str, int], pending_s: float | None,
             rate: float = 80.0) -> ServiceEstimate:
    return service_estimate(SVC, WEIGHTS, t, rate, ready, starting, unschedulable={"h100": pending_s})


def controller(**kw: object) -> MPCController:
    return MPCController(CFG, {SVC.name: WEIGHTS}, forecast="last", **kw)  # type: ignore[arg-type]


def test_a_start_whose_pod_is_unschedulable_leaves_the_ready_path_at_once() -> None:
    # an H100 start seen at 570 s (placed), a second ordered at 585 and seen at 600 s that cannot be
    # placed. At 615 s its pod has been Pending 30 s (>= 15): cutoff 615 - 30 = 585, so the 600-s start
    # is at risk, the 570-s one is not. Both warm (4 free warm nodes, 90 s): the first is ready at 660 s,
    # step ceil(45 / 15) = 3; the second at 690 s, step ceil(75 / 15) = 5. overdue=1 alone calls neither
    # (45 s and 15 s since seen, under 90 + 15).
    assert (H100.startup_warm_s, H100.warm_nodes) == (90.0, 4)
    for spec, pending_s, risky, want in (({"pending": 1}, 30.0, 1, [0, 0, 0, 1, 1, 1]),
                                         ({"pending": 1, "overdue": 1}, 30.0, 1, [0, 0, 0, 1, 1, 1]),
                                         ({"overdue": 1}, 30.0, 0, [0, 0, 0, 1, 1, 2]),
                                         ({}, 30.0, 0, [0, 0, 0, 1, 1, 2]),
                                         ({"pending": 1}, 0.0, 0, [0, 0, 0, 1, 1, 2]),  # none Pending
                                         ({"pending": 1}, None, 0, [0, 0, 0, 1, 1, 2])):  # not known
        ctrl, mem = controller(**spec), _ServiceMemory()
        ctrl._ready_by_step(estimate(570.0, {}, {"h100": 1}, 0.0), H100, mem)
        ctrl._ready_by_step(estimate(600.0, {}, {"h100": 2}, 15.0 if pending_s else pending_s), H100, mem)
        path, at_risk = ctrl._ready_by_step(estimate(615.0, {}, {"h100": 2}, pending_s), H100, mem)
        assert at_risk == risky, spec
        assert list(path[:6]) == want and path[-1] == want[-1], spec


def test_the_plan_orders_the_other_variant_the_tick_the_pod_is_seen_pending() -> None:
    # 80 req/s, 4 GH200 ready (40 req/s, their quota), 2 H100 ordered at 585 s and first seen at 600 s,
    # their pods Pending 15 s. Without the rule the plan counts them (2 x 20 = 40 req/s) from 690 s and
    # orders nothing more. With it both are at risk at once (seen at 600 >= 600 - 15): they count 0 and
    # the H100 takes no new order, so the 40 req/s short go to the next cheapest variant, 40 / 10 = 4
    # A100s, 120 s before overdue=1 could (tests/unit/test_mpc_overdue.py: at 720 s). The starts are kept.
    for spec, a100 in (({}, 0), ({"overdue": 1}, 0), ({"pending": 1}, 4)):
        d = controller(**spec).decide(estimate(600.0, {"gh200": 4}, {"h100": 2}, 15.0), SVC)
        assert d.desired == {"h100": 2, "a100": a100, "gh200": 4}, spec
    d = controller(pending=1).decide(estimate(600.0, {"gh200": 4}, {"h100": 2}, None), SVC)
    assert d.desired == {"h100": 2, "a100": 0, "gh200": 4}  # unknown: planned as without the rule


def test_pending_is_0_or_1() -> None:
    with pytest.raises(ValueError, match="pending must be 0 or 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, pending=2)
    assert parse_spec("mpc:overdue=1:pending=1") == ("mpc", {"overdue": 1, "pending": 1})
