"""Tests for the guard stage (autoscaler.loop.guard) and the variant split (controllers.split)."""

from __future__ import annotations

import itertools

import pytest

from autoscaler.config import EngineConfig, GuardConfig
from autoscaler.config.loading import parse_config
from autoscaler.loop.guard import GuardState, guard
from controllers.base import Decision, Reason
from controllers.split import capacity_of, cost_per_capacity, split_capacity
from models.capacity import variant_weights

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, price: float, **kw) -> dict:
    v = {
        "name": name,
        "gpu": "H100-SXM",
        "price_per_gpu_hour": price,
        "max_replicas": 10,
        "kv_cache_tokens": 400000,
        "profile": "llama-3-8b/h100-sxm",
    }
    v.update(kw)
    return v


def service(*variants: dict):
    cfg = parse_config({"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": list(variants)}]})
    return cfg.services[0]


GCFG = GuardConfig(max_step_up=4, max_step_down=2, scale_down_cooldown_s=180)


def weights(svc) -> dict[str, float]:
    return variant_weights(svc, EngineConfig())


def run_guard(*args, **kw) -> tuple[dict[str, int], str]:
    g = guard(*args, **kw)
    return g.replicas, g.reason


# ====================================================================================== guard
def test_hold_keeps_current_and_does_not_touch_state() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    st = GuardState()
    out, reason = run_guard(
        Decision({"a": 9, "b": 0}, "hold: x unknown", hold=True),
        {"a": 2, "b": 3},
        svc,
        GCFG,
        st,
        0,
        weights=weights(svc),
    )
    assert out == {"a": 2, "b": 3}
    assert reason == "hold: x unknown"
    assert st.last_scale_up_s is None


def test_a_hold_stays_within_the_bounds_unless_the_counts_are_unknown() -> None:
    svc = service(variant("a", 1.0, min_replicas=2), variant("b", 2.0, max_replicas=3))
    st = GuardState()
    g = guard(Decision({"a": 0, "b": 0}, "hold: x unknown", hold=True), {"a": 0, "b": 5}, svc, GCFG, st, 0.0,
              weights=weights(svc))
    assert g.replicas == {"a": 2, "b": 3} and g.limits == [Reason.TOO_FEW_REPLICAS, Reason.TOO_MANY_REPLICAS]
    assert "a: kept at its minimum 2" in g.reason and "b: capped at 3" in g.reason
    unknown = Decision({"a": 0, "b": 0}, "hold: replica count of a unknown", Reason.COUNTS_UNKNOWN, hold=True)
    g = guard(unknown, {"a": 0, "b": 5}, svc, GCFG, GuardState(), 0.0, weights=weights(svc))
    assert g.replicas == {"a": 0, "b": 5} and g.limits == []  # placeholders: nothing can be set


def test_clamps_to_min_max_and_quota() -> None:
    svc = service(
        variant("a", 1.0, min_replicas=2, max_replicas=10),
        variant("b", 2.0, max_replicas=10, quota=3),
        variant("c", 3.0, max_replicas=5),
    )
    big = GuardConfig(max_step_up=100, max_step_down=100, scale_down_cooldown_s=0)
    out, _ = run_guard(
        Decision({"a": 0, "b": 8, "c": 50}, "x"),
        {"a": 2, "b": 1, "c": 1},
        svc,
        big,
        GuardState(),
        0,
        weights=weights(svc),
    )
    # a: below min 2 -> 2 ; b: quota 3 -> 3 ; c: max 5 -> 5
    assert out == {"a": 2, "b": 3, "c": 5}
    g = guard(Decision({"a": 0, "b": 8, "c": 50}, "x"), {"a": 2, "b": 1, "c": 1}, svc, big, GuardState(), 0,
              weights=weights(svc))
    assert g.limits == [Reason.TOO_FEW_REPLICAS, Reason.TOO_MANY_REPLICAS, Reason.TOO_MANY_REPLICAS]


def test_missing_variant_in_decision_keeps_current() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    out, _ = run_guard(Decision({"a": 3}, "x"), {"a": 2, "b": 4}, svc, GCFG, GuardState(), 0, weights=weights(svc))
    assert out == {"a": 3, "b": 4}


def test_max_step_up_summed_over_variants() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    # wants +4 on a and +4 on b; budget 4 in total: a takes 4 (file order, a is also cheaper), b gets 0.
    out, reason = run_guard(
        Decision({"a": 5, "b": 5}, "up"), {"a": 1, "b": 1}, svc, GCFG, GuardState(), 0, weights=weights(svc)
    )
    assert out == {"a": 5, "b": 1}
    assert sum(out.values()) - 2 == GCFG.max_step_up
    assert "step limited to +0" in reason


def test_max_step_down_summed_over_variants() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    out, reason = run_guard(
        Decision({"a": 2, "b": 2}, "down"), {"a": 5, "b": 5}, svc, GCFG, GuardState(), 0, weights=weights(svc)
    )
    assert sum(out.values()) == 10 - GCFG.max_step_down
    assert all(2 <= n <= 5 for n in out.values())
    assert "step limited" in reason


def test_step_limited_scale_up_adds_cheapest_first() -> None:
    # Guard docstring: additions go to the lowest cost per capacity first -- the split adds
    # capacity cheapest first, so when the step limit cuts a scale-up, the cheap variant's replicas must
    # be the ones kept, whatever the variants' order in the fleet file (the example fleet lists the
    # cheapest, gh200, last).
    svc = service(variant("expensive", 3.0), variant("cheap", 1.0, max_replicas=4))
    w = {"expensive": 1.0, "cheap": 1.0}
    current = {"expensive": 0, "cheap": 0}
    desired = split_capacity(6.0, svc.variants, current, w)
    assert desired == {"expensive": 2, "cheap": 4}  # cheap to its cap 4, then 2 expensive
    out, _ = run_guard(Decision(desired, "up"), current, svc, GCFG, GuardState(), 0, weights=weights(svc))
    # max_step_up 4: the 4 cheap replicas are the ones to keep
    assert out == {"expensive": 0, "cheap": 4}


def test_scale_down_held_during_cooldown_after_scale_up() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    st = GuardState()
    out, _ = run_guard(
        Decision({"a": 3, "b": 1}, "up"), {"a": 1, "b": 1}, svc, GCFG, st, now=100.0, weights=weights(svc)
    )
    assert out == {"a": 3, "b": 1}
    assert st.last_scale_up_s == 100.0
    # 179 s later: still cooling (cool-down 180 s) -> scale-down held
    out, reason = run_guard(Decision({"a": 1, "b": 1}, "down"), out, svc, GCFG, st, now=279.0, weights=weights(svc))
    assert out == {"a": 3, "b": 1}
    assert "cool-down" in reason
    # exactly 180 s later: allowed (max_step_down 2)
    out, _ = run_guard(Decision({"a": 1, "b": 1}, "down"), out, svc, GCFG, st, now=280.0, weights=weights(svc))
    assert out == {"a": 1, "b": 1}
    assert st.last_scale_up_s == 100.0  # a scale-down does not restart the cool-down


def test_cooldown_blocks_only_the_down_part_of_a_mixed_decision() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    st = GuardState(last_scale_up_s=0.0)
    out, _ = run_guard(
        Decision({"a": 3, "b": 0}, "mix"), {"a": 1, "b": 2}, svc, GCFG, st, now=10.0, weights=weights(svc)
    )
    assert out == {"a": 3, "b": 2}
    assert st.last_scale_up_s == 10.0


def test_no_cooldown_before_any_scale_up() -> None:
    svc = service(variant("a", 1.0))
    out, _ = run_guard(Decision({"a": 1}, "down"), {"a": 3}, svc, GCFG, GuardState(), now=0.0, weights=weights(svc))
    assert out == {"a": 1}


# ====================================================================================== split
# Three variants with hand-picked weights (requests/s per replica):
#   x: $4/h, 2 rps -> $2/h per rps ; y: $3/h, 1 rps -> $3/h per rps ; z: $1/h, 1 rps -> $1/h per rps, quota 2
# Cheapest first: z, x, y.
W = {"x": 2.0, "y": 1.0, "z": 1.0}


def three(y_min: int = 0):
    return service(variant("x", 4.0), variant("y", 3.0, min_replicas=y_min), variant("z", 1.0, quota=2))


def test_cost_per_capacity() -> None:
    svc = three()
    assert [cost_per_capacity(v, W[v.name]) for v in svc.variants] == pytest.approx([2.0, 3.0, 1.0])


def test_split_scale_up_hand_example() -> None:
    # current capacity: y=1 -> 1 rps; target 6.5.
    # z +1 (2), z +1 (3, quota reached); x +1 (5), x +1 (7 >= 6.5) -> stop. y untouched.
    out = split_capacity(6.5, three().variants, {"x": 0, "y": 1, "z": 0}, W)
    assert out == {"x": 2, "y": 1, "z": 2}
    assert capacity_of(out, W) == pytest.approx(7.0)


def test_split_scale_down_hand_example() -> None:
    # current 3*2 + 2*1 + 2*1 = 10 rps ($22/h); target 5: keep >= 5 rps at the lowest price.
    # Kept sets reaching 5: {x2, z1} $9, {x1, y1, z2} $9, {x2, y1} $11, {x1, y2, z1} $11, ... nothing
    # under $9; of the two at $9, {x1, y1, z2} changes 3 replicas (x -2, y -1), {x2, z1} changes 4.
    out = split_capacity(5.0, three().variants, {"x": 3, "y": 2, "z": 2}, W)
    assert out == {"x": 1, "y": 1, "z": 2}
    assert capacity_of(out, W) == pytest.approx(5.0)


def test_split_never_keeps_a_dearer_replica_when_removing_it_meets_the_target() -> None:
    # The example fleet's case: 7 H100 ($2.99, 16 rps) and 1 GH200 ($1.49, 17 rps) for a target of 112:
    # dropping the GH200 leaves exactly 112 ($20.93/h); dropping an H100 leaves 113 ($19.43/h): drop an H100.
    svc = service(variant("h100", 2.99, max_replicas=20), variant("gh200", 1.49, max_replicas=4))
    w = {"h100": 16.0, "gh200": 17.0}
    assert split_capacity(112.0, svc.variants, {"h100": 7, "gh200": 1}, w) == {"h100": 6, "gh200": 1}


def test_split_scale_down_respects_min() -> None:
    # y min 1: the cheapest kept set of the hand example above already keeps one y.
    out = split_capacity(5.0, three(y_min=1).variants, {"x": 3, "y": 2, "z": 2}, W)
    assert out == {"x": 1, "y": 1, "z": 2}
    out = split_capacity(1.0, three(y_min=1).variants, {"x": 3, "y": 2, "z": 2}, W)
    assert out == {"x": 0, "y": 1, "z": 0}


def test_split_above_total_cap_fills_everything() -> None:
    svc = three()
    out = split_capacity(1000.0, svc.variants, {}, W)
    assert out == {"x": 10, "y": 10, "z": 2}


def test_split_current_above_quota_is_clamped() -> None:
    out = split_capacity(0.0, three().variants, {"x": 0, "y": 0, "z": 5}, W)
    assert out["z"] == 0
    out = split_capacity(2.0, three().variants, {"x": 0, "y": 0, "z": 5}, W)
    assert out == {"x": 0, "y": 0, "z": 2}


@pytest.mark.parametrize("y_min", [0, 1])
def test_split_is_the_cheapest_one_way_change_by_brute_force(y_min: int) -> None:
    svc = three(y_min)
    price = {v.name: v.price_per_replica_hour for v in svc.variants}
    bounds = {v.name: (v.min_replicas, v.cap) for v in svc.variants}
    total_cap = 10 * 2 + 10 * 1 + 2 * 1
    for target, cx, cy, cz in itertools.product([0, 0.5, 1, 3, 6.5, 11, 25.5, 32, 40], [0, 1, 4], [0, 3], [0, 2]):
        cur = {"x": cx, "y": cy, "z": cz}
        out = split_capacity(float(target), svc.variants, cur, W)
        if target > total_cap:
            assert out == {"x": 10, "y": 10, "z": 2}
            continue
        start = {k: min(max(n, bounds[k][0]), bounds[k][1]) for k, n in cur.items()}
        up = capacity_of(start, W) < target
        # every assignment that only adds (or only removes) replicas from ``start`` and covers the target
        options = [dict(zip("xyz", n, strict=True)) for n in itertools.product(
            *(range(bounds[k][0], bounds[k][1] + 1) for k in "xyz"))]
        options = [o for o in options if capacity_of(o, W) >= target - 1e-9
                   and all((o[k] >= start[k]) if up else (o[k] <= start[k]) for k in "xyz")]
        best = min(sum(price[k] * o[k] for k in "xyz") for o in options)
        assert out in options
        assert sum(price[k] * out[k] for k in "xyz") == pytest.approx(best)
