"""``mpc:settle_s=S:settle_by=capacity`` (``controllers.mpc.settle_capacity``) and ``settle_final=1``
(``controllers.mpc.release_counts``): the scale-down stabilisation window of ``settle_s`` on the capacity
the plan's fleet serves (req/s: count x the per-replica capacity), and a fall the window let through made
final. Every expected count below is worked by hand from the rule in each docstring."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.estimates import service_estimate

from autoscaler.config.loading import default_config, parse_config
from autoscaler.state import ServiceEstimate
from controllers.mpc import (
    MPCController,
    _ServiceMemory,
    measured_settle,
    release_counts,
    settle_capacity,
    settle_downs,
)
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}  # every replica serves 10 req/s

PD_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet-pd.yaml"
CAP = {"h100": 2.0, "a100": 1.0}  # req/s a replica: an H100 serves twice an A100


def test_a_swap_that_keeps_the_count_but_cuts_capacity_is_held() -> None:
    # today 2 H100s (4 req/s); the plan swaps one for an A100 (1 + 1 replicas, 2 + 1 = 3 req/s). The count
    # rule passes it (the total stays 2); by capacity the window's 4 req/s (0 s) is above the plan's 3, so
    # the gap is 1 req/s: the H100 the plan removes (2 req/s, the only replica it removes) is kept
    desired, current = {"h100": 1, "a100": 1}, {"h100": 2, "a100": 0}
    assert settle_downs(desired, current, [(0.0, current)], 15.0, 60.0) == desired
    assert settle_capacity(desired, current, CAP, [(0.0, 4.0), (15.0, 3.0)], 15.0, 60.0) == {"h100": 2, "a100": 1}
    # once 0 s has left the window (0, 60], only 15 s's 3 req/s is left: the swap passes
    assert settle_capacity(desired, current, CAP, [(0.0, 4.0), (15.0, 3.0)], 60.0, 60.0) == desired


def test_a_fall_of_the_count_that_keeps_capacity_passes() -> None:
    # today 1 H100 + 2 A100s = 2 + 2 = 4 req/s; the plan asks 2 H100s = 4 req/s: the count falls 3 -> 2, so
    # the count rule keeps one A100 (the window had 2 of them, the fall is 1); by capacity nothing falls
    desired, current = {"h100": 2, "a100": 0}, {"h100": 1, "a100": 2}
    assert settle_downs(desired, current, [(0.0, current)], 15.0, 60.0) == {"h100": 2, "a100": 1}
    assert settle_capacity(desired, current, CAP, [(0.0, 4.0)], 15.0, 60.0) == desired
    # a replica of no capacity (the model gives the A100 0 req/s) goes at once: 2 H100s = 4 req/s either way
    zero = {"h100": 2.0, "a100": 0.0}
    assert settle_capacity({"h100": 2, "a100": 0}, {"h100": 2, "a100": 1}, zero, [(0.0, 4.0)], 15.0, 60.0) == \
        {"h100": 2, "a100": 0}


def test_the_replicas_kept_are_the_least_that_close_the_gap() -> None:
    cap = {"h100": 2.0, "a100": 1.0, "gh200": 3.0}
    # today 2 H100 + 2 A100 + 1 GH200 = 4 + 2 + 3 = 9 req/s; the plan keeps 1 + 1 + 0 = 3 req/s
    desired, current = {"h100": 1, "a100": 1, "gh200": 0}, {"h100": 2, "a100": 2, "gh200": 1}
    # window high 9: gap 6; none closes 6 alone -> the largest, GH200 (gap 3); none of 2 and 1 closes 3
    # -> H100 (gap 1); A100 closes 1: back to today's fleet
    assert settle_capacity(desired, current, cap, [(0.0, 9.0)], 15.0, 60.0) == current
    # window high 6: gap 3, closed by the GH200 alone (3 >= 3): 1 + 1 + 1 = 6 req/s
    assert settle_capacity(desired, current, cap, [(0.0, 6.0)], 15.0, 60.0) == {"h100": 1, "a100": 1, "gh200": 1}
    # window high 5: gap 2; H100 (2) and GH200 (3) each close it, the H100 is the smaller: 2 + 1 + 0 = 5
    assert settle_capacity(desired, current, cap, [(0.0, 5.0)], 15.0, 60.0) == {"h100": 2, "a100": 1, "gh200": 0}
    # window high 4.5: gap 1.5; H100 again (2 >= 1.5, less than 3): 5 req/s, 0.5 over the window's high
    assert settle_capacity(desired, current, cap, [(0.0, 4.5)], 15.0, 60.0) == {"h100": 2, "a100": 1, "gh200": 0}
    # window high 20, above today's 9: the target is today's 9, so today's fleet, nothing above it
    assert settle_capacity(desired, current, cap, [(0.0, 20.0)], 15.0, 60.0) == current
    with pytest.raises(ValueError, match="settle_s must be > 0"):
        settle_capacity(desired, current, cap, [], 15.0, 0.0)
    with pytest.raises(ValueError, match="negative"):
        settle_capacity(desired, current, {"h100": -1.0}, [], 15.0, 60.0)


def test_a_released_fall_is_not_taken_back_while_it_drains() -> None:
    # the step scenario's case: the plan recommended 3 H100s at 0 and 15 s; at 30 s it swaps one for an
    # A100 (3 + 0 -> 2 + 1, the total stays 3), which the rule passes
    recs = [(0.0, {"h100": 3, "a100": 0}), (15.0, {"h100": 3, "a100": 0}), (30.0, {"h100": 2, "a100": 1})]
    current = {"h100": 3, "a100": 0}
    desired = {"h100": 2, "a100": 1}
    assert settle_downs(desired, current, recs, 30.0, 60.0) == desired
    # at 45 s the H100 still drains (today's count holds it: 3 + 1 = 4) and the plan asks the same 2 + 1: a
    # fall of the total by 1, and the window's 3 H100s (0 and 15 s) take the draining one back
    later = [*recs, (45.0, dict(desired))]
    draining = {"h100": 3, "a100": 1}
    assert settle_downs(desired, draining, [(t, dict(r)) for t, r in later], 45.0, 60.0) == {"h100": 3, "a100": 1}
    # with the release made final at 30 s, the window counts at most 2 H100s: the fall goes through
    release_counts(recs, desired, current)
    assert recs == [(0.0, {"h100": 2, "a100": 0}), (15.0, {"h100": 2, "a100": 0}), (30.0, {"h100": 2, "a100": 1})]
    assert settle_downs(desired, draining, [*recs, (45.0, dict(desired))], 45.0, 60.0) == desired
    # a held fall releases nothing: 3 -> 1 held at 3 leaves the window as it was
    held = [(0.0, {"h100": 3})]
    release_counts(held, {"h100": 3}, {"h100": 3})
    assert held == [(0.0, {"h100": 3})]


def estimate(t: float, rate: float) -> ServiceEstimate:
    return service_estimate(SVC, WEIGHTS, t, rate, {"gh200": 3}, capacity=30.0)


def test_the_controller_holds_a_fall_of_capacity_for_the_window() -> None:
    # as test_mpc_settle's controller case (hold_s=0, 10-req/s replicas): three GH200s for 25 req/s at
    # 0-60 s, then 3.125 req/s. The plan's capacity was 30 req/s up to 60 s, so its fall to one GH200
    # (10 req/s) keeps the 3 GH200s (gap 20 req/s: two replicas of 10) while 60 s is in the window, at
    # 75, 90 and 105 s, and passes at 120 s
    on = MPCController(CFG, {SVC.name: WEIGHTS}, hold_s=0.0, settle_s=60.0, settle_by="capacity")
    off = MPCController(CFG, {SVC.name: WEIGHTS}, hold_s=0.0)
    for t in (0.0, 15.0, 30.0, 45.0, 60.0):
        assert on.decide(estimate(t, 25.0), SVC).desired == off.decide(estimate(t, 25.0), SVC).desired == \
            {"h100": 0, "a100": 0, "gh200": 3}
    low = off.decide(estimate(75.0, 3.125), SVC).desired
    assert low == {"h100": 0, "a100": 0, "gh200": 1}
    for t in (75.0, 90.0, 105.0):
        a = on.decide(estimate(t, 3.125), SVC)
        assert a.desired == {"h100": 0, "a100": 0, "gh200": 3}
        assert "scale-down held at the plan's highest capacity of the last 60 s" in a.reason
    assert on.decide(estimate(120.0, 3.125), SVC).desired == low


def test_settle_by_and_settle_final_are_checked() -> None:
    with pytest.raises(ValueError, match="settle_by must be one of count, capacity"):
        MPCController(CFG, {SVC.name: WEIGHTS}, settle_s=60.0, settle_by="replicas")
    with pytest.raises(ValueError, match="set settle_s > 0"):
        MPCController(CFG, {SVC.name: WEIGHTS}, settle_by="capacity")
    with pytest.raises(ValueError, match="set settle_s > 0"):
        MPCController(CFG, {SVC.name: WEIGHTS}, settle_final=1)
    assert parse_spec("mpc:settle_s=60:settle_by=capacity:settle_final=1") == \
        ("mpc", {"settle_s": 60.0, "settle_by": "capacity", "settle_final": 1})


def totals(dips: list[int], low: float = 4.0, n: int = 100) -> list[tuple[float, float]]:
    """The plan's total every 15 s for ``n`` ticks: 5 replicas, ``low`` at the ticks in ``dips``."""
    return [(15.0 * i, low if i in dips else 5.0) for i in range(n)]


def test_the_measured_window_is_the_shortest_whose_falls_did_not_reverse() -> None:
    # cold start 120 s. One-tick dips to 4 at ticks 30, 50 and 70, each back at 5 the next tick. Window 0:
    # the level is the total itself; the ticks judged are 1-91 (t - 15 >= 0, t + 120 <= 1485 s), 91 >= 40;
    # its 3 falls all come back to 5 within 120 s: 3 reversals > 0.1 x 3. Window 60 s: the level is the
    # highest of ticks i-3..i, 5 at every tick (a dip is one tick): no fall, so no reversal, judged ticks
    # 5-91 (87): 60 s
    assert measured_settle(totals([30, 50, 70]), 120.0) == 60.0
    # five-tick dips (ticks 30-34, 50-54, 70-74): at 60 s tick 33's level (ticks 30-33) is 4 below tick
    # 32's 5, a fall, and tick 35 (within 120 s) is 5 again: 3 of 3 reverse. At 120 s (ticks i-7..i) every
    # level holds a 5: no fall, judged ticks 9-91 (83): 120 s
    dips = [d + k for d in (30, 50, 70) for k in range(5)]
    assert measured_settle(totals(dips), 120.0) == 120.0
    # a fall that stays (5 -> 3 from tick 50 on): window 0 has one fall and no reversal (0 <= 0.1): 0 s
    assert measured_settle(totals(list(range(50, 100)), low=3.0), 120.0) == 0.0
    # too little history: 20 ticks leave 11 judged at window 0 (ticks 1-11), under 40 for every window,
    # and a lone tick none: the longest, 300 s
    assert measured_settle(totals([5], n=20), 120.0) == 300.0
    assert measured_settle([(0.0, 5.0)], 120.0) == 300.0


def test_the_measured_window_starts_at_the_longest() -> None:
    # the controller case above with settle=measured: no hour of history yet, so the window is 300 s;
    # the fall at 75 s is still held at 120 s (60 s's three GH200s are in (-180, 120]), where settle_s=60
    # lets it go
    on = MPCController(CFG, {SVC.name: WEIGHTS}, hold_s=0.0, settle="measured")
    for t in (0.0, 15.0, 30.0, 45.0, 60.0):
        on.decide(estimate(t, 25.0), SVC)
    for t in (75.0, 120.0):
        a = on.decide(estimate(t, 3.125), SVC)
        assert a.desired == {"h100": 0, "a100": 0, "gh200": 3}
        assert a.terms["settle_s"] == 300.0
        assert "scale-down held at the plan's highest of the last 300 s" in a.reason
    with pytest.raises(ValueError, match="settle must be one of fixed, measured"):
        MPCController(CFG, {SVC.name: WEIGHTS}, settle_s=60.0, settle="measured")
    assert parse_spec("mpc:settle=measured:settle_by=capacity") == \
        ("mpc", {"settle": "measured", "settle_by": "capacity"})


def test_pools_are_held_apart_from_the_aggregated_variants() -> None:
    # examples/fleet-pd.yaml with an aggregated H100 beside the prefill and decode pools (as
    # test_mpc_roles builds it). Per replica: aggregated 10 req/s, prefill 20, decode 5. At 0 s the plan
    # asks today's fleet: aggregated 2 x 10 = 20, prefill 2 x 20 = 40, decode 4 x 5 = 20 req/s. At 15 s it
    # asks 3 aggregated (30), 2 prefill (40), 2 decode (10): summed over all, 80 req/s both times, no fall;
    # but the decode pool's capacity falls 20 -> 10 with its window's 20, and an aggregated replica does
    # not serve a pool's share: 2 decode replicas (5 each) are kept, back to 4
    doc = yaml.safe_load(PD_EXAMPLE.read_text())
    doc["services"][0]["variants"] = [{"name": "h100", "gpu": "H100-SXM", "price_per_gpu_hour": 2.99,
                                       "min_replicas": 0, "max_replicas": 16, "initial_replicas": 0,
                                       "kv_cache_tokens": 400000, "profile": "llama-3-8b/h100-sxm"}]
    cfg = parse_config(doc, str(PD_EXAMPLE), PD_EXAMPLE.parent)
    svc = cfg.services[0]
    steady = {"h100": 10.0, "h100-prefill": 20.0, "h100-decode": 5.0}
    ctl = MPCController(cfg, {svc.name: steady}, settle_s=60.0, settle_by="capacity")
    mem = _ServiceMemory()
    today = {"h100": 2, "h100-prefill": 2, "h100-decode": 4}
    assert ctl._settle_capacity(dict(today), today, steady, svc, mem, 0.0, 60.0, 60.0) == today
    asked = {"h100": 3, "h100-prefill": 2, "h100-decode": 2}
    assert ctl._settle_capacity(dict(asked), today, steady, svc, mem, 15.0, 60.0, 60.0) == \
        {"h100": 3, "h100-prefill": 2, "h100-decode": 4}
    assert mem.recommended_cap[-1] == (15.0, {None: 30.0, "prefill": 40.0, "decode": 10.0})


def test_the_controller_lets_a_released_swap_drain_only_with_settle_final() -> None:
    # MPCController._settle, settle_s=60 by count: 3 H100s recommended at 0 and 15 s; at 30 s a swap
    # (3 + 0 -> 2 + 1, the total stays 3) passes. At 45 s the plan asks the same 2 + 1 while today's count
    # still holds the draining H100 (3 + 1 = 4): a fall of 1, and the window's 3 H100s (0, 15 s) take it
    # back to 3 + 1, unless settle_final=1 capped them at the 2 let through at 30 s
    def run(final: int) -> tuple[bool, dict[str, int], float]:
        ctl = MPCController(CFG, {SVC.name: WEIGHTS}, settle_s=60.0, settle_final=final)
        mem = _ServiceMemory()
        three = {"h100": 3, "a100": 0, "gh200": 0}
        swap = {"h100": 2, "a100": 1, "gh200": 0}
        for t in (0.0, 15.0):
            assert ctl._settle(dict(three), three, WEIGHTS, SVC, mem, t) == (False, three, 60.0)
        assert ctl._settle(dict(swap), three, WEIGHTS, SVC, mem, 30.0) == (False, swap, 60.0)
        return ctl._settle(dict(swap), {"h100": 3, "a100": 1, "gh200": 0}, WEIGHTS, SVC, mem, 45.0)

    assert run(0) == (True, {"h100": 3, "a100": 1, "gh200": 0}, 60.0)
    assert run(1) == (False, {"h100": 2, "a100": 1, "gh200": 0}, 60.0)


def test_the_controller_caps_a_released_capacity_beyond_a_shorter_measured_window() -> None:
    # MPCController._settle_capacity as settle=measured calls it: recommendations kept 300 s, the window
    # measured. (With a fixed window every recommendation kept is in it, and a fall lets through only
    # what is at or above the window's highest, so the cap changes nothing there.) Per replica H100 2
    # req/s. At 0 s 3 H100s (6 req/s). At 100 s under a 60-s window only 100 s's 2 req/s (1 H100) is
    # in it: the fall passes, and settle_final caps 0 s's 6 at the 2 kept. At 115 s the window is back
    # at 300 s while today's count still holds the 2 draining H100s: without the cap 0 s's 6 req/s is in
    # it, gap 6 - 2 = 4, H100s kept one at a time (2 req/s each) to 3; with it the highest is 2: no hold
    steady = {"h100": 2.0, "a100": 1.0, "gh200": 3.0}
    three = {"h100": 3, "a100": 0, "gh200": 0}
    one = {"h100": 1, "a100": 0, "gh200": 0}

    def run(final: int) -> tuple[dict[str, int], float]:
        ctl = MPCController(CFG, {SVC.name: steady}, settle="measured", settle_by="capacity", settle_final=final)
        mem = _ServiceMemory()
        assert ctl._settle_capacity(dict(three), three, steady, SVC, mem, 0.0, 60.0, 300.0) == three
        assert ctl._settle_capacity(dict(one), three, steady, SVC, mem, 100.0, 60.0, 300.0) == one
        first = mem.recommended_cap[0][1][None]
        return ctl._settle_capacity(dict(one), three, steady, SVC, mem, 115.0, 300.0, 300.0), first

    assert run(0) == (three, 6.0)
    assert run(1) == (one, 2.0)


def test_the_measured_window_moves_off_the_longest_once_judged() -> None:
    # settle=measured at a steady 25 req/s (three GH200s every tick, hold_s=0): the plan's total never
    # falls. The window is measured at 0 s and every HOLD_EVERY_S (300 s) after; cold start 300 s, tick
    # 15 s, so at T the ticks judged at window 0 are 15 .. T - 300 s: (T - 300) / 15 of them, 20 at
    # 600 s, 40 (HOLD_MIN_TICKS) at 900 s, where window 0 (no fall, no reversal) is chosen
    on = MPCController(CFG, {SVC.name: WEIGHTS}, hold_s=0.0, settle="measured")
    seen: dict[float, float] = {}
    for i in range(62):
        a = on.decide(estimate(15.0 * i, 25.0), SVC)
        assert a.desired == {"h100": 0, "a100": 0, "gh200": 3}
        seen[15.0 * i] = a.terms["settle_s"]
    assert {t for t, s in seen.items() if s == 300.0} == {15.0 * i for i in range(60)}
    assert seen[900.0] == seen[915.0] == 0.0
