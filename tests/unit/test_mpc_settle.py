"""``mpc:settle_s=S`` (``controllers.mpc.settle_downs``): Kubernetes HPA's scale-down stabilisation
window (``stabilizeRecommendationWithBehaviors`` in kubernetes/kubernetes
``pkg/controller/podautoscaler/horizontal.go``, Kubernetes 1.34, with a 0-s scale-up window): a variant's
count is brought into ``[desired, max(recommendations in (now - S, now])]``, never above today's; on a
fall of the service's total only, and the variants together keeping no more than that fall. Every
expected count below is worked by hand from that rule."""

from __future__ import annotations

import pytest
from support.estimates import service_estimate

from autoscaler.config.loading import default_config
from autoscaler.state import ServiceEstimate
from controllers.mpc import MPCController, settle_downs
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}  # every replica serves 10 req/s
TICK = CFG.controller.tick_s


def test_a_down_keeps_the_highest_recommendation_of_the_window_capped_at_today() -> None:
    # the plan recommended h100 5, 7, 6 at 0, 15, 30 s; at 30 s 7 run: the highest of the window is 7
    recs = [(0.0, {"h100": 5}), (15.0, {"h100": 7}), (30.0, {"h100": 6})]
    assert settle_downs({"h100": 6}, {"h100": 7}, recs, 30.0, 300.0) == {"h100": 7}
    # only 5 run: the window's 7 is above today's, so today's 5 stays (the rule never scales up)
    assert settle_downs({"h100": 4}, {"h100": 5}, [*recs, (45.0, {"h100": 4})], 45.0, 300.0) == {"h100": 5}
    # at 315 s the window is (15, 315]: 15 s is out, 30 s's 6 is the highest
    late = [*recs, (315.0, {"h100": 4})]
    assert settle_downs({"h100": 4}, {"h100": 7}, late, 315.0, 300.0) == {"h100": 6}
    # at 330 s, (30, 330]: only this tick's 4 is left, the down goes through
    assert settle_downs({"h100": 4}, {"h100": 7}, [*late, (330.0, {"h100": 4})], 330.0, 300.0) == {"h100": 4}


def test_a_swap_passes_and_a_fall_keeps_no_more_than_todays_total() -> None:
    recs = [(0.0, {"h100": 2, "a100": 2, "gh200": 2})]
    # a swap (h100 2 -> 3, a100 1 -> 0): the total stays 3, nothing is held though a100 had 2 within the window
    assert settle_downs({"h100": 3, "a100": 0}, {"h100": 2, "a100": 1}, recs, 15.0, 60.0) == {"h100": 3, "a100": 0}
    # a fall of 2 (6 -> 4) with a swap inside it: a100 (first of the variants going down, in desired's
    # order) keeps the 2 of the window, which uses up the fall, so gh200's down passes: 3 + 2 + 1 = 6,
    # today's total, where holding each variant apart would give 3 + 2 + 2 = 7
    desired, current = {"h100": 3, "a100": 0, "gh200": 1}, {"h100": 2, "a100": 2, "gh200": 2}
    assert settle_downs(desired, current, recs, 15.0, 60.0) == {"h100": 3, "a100": 2, "gh200": 1}
    # a fall of 1 (4 -> 3) with a swap of 2 inside: a100 keeps 1 of the window's 2, the fall, not both
    assert settle_downs({"h100": 3, "a100": 0}, {"h100": 2, "a100": 2}, recs, 15.0, 60.0) == {"h100": 3, "a100": 1}
    # at 60 s the window is (0, 60]: the recommendation at 0 s is out, the plan's counts pass
    assert settle_downs(desired, current, recs, 60.0, 60.0) == desired
    with pytest.raises(ValueError, match="settle_s must be > 0"):
        settle_downs(desired, current, recs, 15.0, 0.0)


def test_a_variant_missing_from_a_recommendation_counts_zero_there() -> None:
    recs = [(0.0, {"h100": 3, "gh200": 2}), (15.0, {"h100": 1})]
    desired, current = {"h100": 1, "gh200": 0}, {"h100": 1, "gh200": 2}
    assert settle_downs(desired, current, recs, 15.0, 60.0) == {"h100": 1, "gh200": 2}  # 0 s's 2 in the window
    assert settle_downs(desired, current, recs, 60.0, 60.0) == desired  # only 15 s's, without gh200: 0


def estimate(t: float, rate: float) -> ServiceEstimate:
    return service_estimate(SVC, WEIGHTS, t, rate, {"gh200": 3}, capacity=30.0)


def test_the_controller_holds_a_fall_for_the_window_after_its_last_high_recommendation() -> None:
    # hold_s=0: the plan follows today's rate alone (no forecast in these estimates). 25 req/s at
    # 0-60 s needs three 10-req/s replicas, three GH200s (the cheapest) as the fleet runs. At 75 s the
    # rate falls to 3.125 req/s: without settle_s two GH200s go at once (the fleet's minimum, one,
    # stays). With settle_s=60 the last tick that recommended three is 60 s, so they stay while 60 s
    # is in (now - 60, now]: at 75, 90 and 105 s; at 120 s it is out and the plan's down goes through,
    # the same as without the rule.
    on = MPCController(CFG, {SVC.name: WEIGHTS}, hold_s=0.0, settle_s=60.0)
    off = MPCController(CFG, {SVC.name: WEIGHTS}, hold_s=0.0)
    for t in (0.0, 15.0, 30.0, 45.0, 60.0):
        a, b = on.decide(estimate(t, 25.0), SVC), off.decide(estimate(t, 25.0), SVC)
        assert a.desired == b.desired
        assert a.desired == {"h100": 0, "a100": 0, "gh200": 3}
    low = off.decide(estimate(75.0, 3.125), SVC).desired
    assert low == {"h100": 0, "a100": 0, "gh200": 1}
    for t in (75.0, 90.0, 105.0):
        a = on.decide(estimate(t, 3.125), SVC)
        assert a.desired == {"h100": 0, "a100": 0, "gh200": 3}
        assert "scale-down held at the plan's highest of the last 60 s" in a.reason
    a = on.decide(estimate(120.0, 3.125), SVC)
    assert a.desired == low
    assert "scale-down held" not in a.reason


def test_a_rise_is_not_delayed() -> None:
    # from 3.125 req/s (one replica's worth) to 25 req/s: the plan's up is applied at once, rule or not
    on = MPCController(CFG, {SVC.name: WEIGHTS}, hold_s=0.0, settle_s=300.0)
    off = MPCController(CFG, {SVC.name: WEIGHTS}, hold_s=0.0)
    one = {"h100": 0, "gh200": 1}
    est = service_estimate(SVC, WEIGHTS, 0.0, 25.0, one, capacity=10.0)
    a, b = on.decide(est, SVC), off.decide(est, SVC)
    assert sum(b.desired.values()) >= 3  # 25 req/s at 10 req/s a replica
    assert a.desired == b.desired
    # A rise that moves replicas off one variant while the window holds a higher count for it: a 5 -> 2
    # beside b 0 -> 6 lifts the total 5 -> 8, so nothing is held (per variant, as the HPA holds, a would
    # stay at 5 and the total reach 11).
    assert settle_downs({"a": 2, "b": 6}, {"a": 5, "b": 0}, [(0.0, {"a": 5, "b": 0})], 30.0, 300.0) == \
        {"a": 2, "b": 6}


def test_settle_s_is_a_non_negative_option() -> None:
    with pytest.raises(ValueError, match="settle_s >= 0"):
        MPCController(CFG, {SVC.name: WEIGHTS}, settle_s=-1.0)
    assert parse_spec("mpc:settle_s=300") == ("mpc", {"settle_s": 300.0})
