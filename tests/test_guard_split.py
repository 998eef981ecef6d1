"""Tests for the guard stage (autoscaler.loop.guard) and the variant split (controllers.split)."""

from __future__ import annotations

import itertools

import pytest

from autoscaler.config import GuardConfig
from autoscaler.config.loading import parse_config
from autoscaler.loop.guard import GuardState, guard
from controllers.base import Decision
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


# ====================================================================================== guard
def test_hold_keeps_current_and_does_not_touch_state() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    st = GuardState()
    out, reason = guard(
        Decision({"a": 9, "b": 0}, "hold: x unknown", hold=True),
        {"a": 2, "b": 3},
        svc,
        GCFG,
        st,
        0,
        weights=variant_weights(svc),
    )
    assert out == {"a": 2, "b": 3}
    assert reason == "hold: x unknown"
    assert st.last_scale_up_s is None


def test_clamps_to_min_max_and_quota() -> None:
    svc = service(
        variant("a", 1.0, min_replicas=2, max_replicas=10),
        variant("b", 2.0, max_replicas=10, quota=3),
        variant("c", 3.0, max_replicas=5),
    )
    big = GuardConfig(max_step_up=100, max_step_down=100, scale_down_cooldown_s=0)
    out, _ = guard(
        Decision({"a": 0, "b": 8, "c": 50}, "x"),
        {"a": 2, "b": 1, "c": 1},
        svc,
        big,
        GuardState(),
        0,
        weights=variant_weights(svc),
    )
    # a: below min 2 -> 2 ; b: quota 3 -> 3 ; c: max 5 -> 5
    assert out == {"a": 2, "b": 3, "c": 5}


def test_missing_variant_in_decision_keeps_current() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    out, _ = guard(Decision({"a": 3}, "x"), {"a": 2, "b": 4}, svc, GCFG, GuardState(), 0, weights=variant_weights(svc))
    assert out == {"a": 3, "b": 4}


def test_max_step_up_summed_over_variants() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    # wants +4 on a and +4 on b; budget 4 in total: a takes 4 (file order, a is also cheaper), b gets 0.
    out, reason = guard(
        Decision({"a": 5, "b": 5}, "up"), {"a": 1, "b": 1}, svc, GCFG, GuardState(), 0, weights=variant_weights(svc)
    )
    assert out == {"a": 5, "b": 1}
    assert sum(out.values()) - 2 == GCFG.max_step_up
    assert "step limited to +0" in reason


def test_max_step_down_summed_over_variants() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    out, reason = guard(
        Decision({"a": 2, "b": 2}, "down"), {"a": 5, "b": 5}, svc, GCFG, GuardState(), 0, weights=variant_weights(svc)
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
    weights = {"expensive": 1.0, "cheap": 1.0}
    current = {"expensive": 0, "cheap": 0}
    desired = split_capacity(6.0, svc.variants, current, weights)
    assert desired == {"expensive": 2, "cheap": 4}  # cheap to its cap 4, then 2 expensive
    out, _ = guard(Decision(desired, "up"), current, svc, GCFG, GuardState(), 0, weights=variant_weights(svc))
    # max_step_up 4: the 4 cheap replicas are the ones to keep
    assert out == {"expensive": 0, "cheap": 4}


def test_scale_down_held_during_cooldown_after_scale_up() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    st = GuardState()
    out, _ = guard(
        Decision({"a": 3, "b": 1}, "up"), {"a": 1, "b": 1}, svc, GCFG, st, now=100.0, weights=variant_weights(svc)
    )
    assert out == {"a": 3, "b": 1}
    assert st.last_scale_up_s == 100.0
    # 179 s later: still cooling (cool-down 180 s) -> scale-down held
    out, reason = guard(Decision({"a": 1, "b": 1}, "down"), out, svc, GCFG, st, now=279.0, weights=variant_weights(svc))
    assert out == {"a": 3, "b": 1}
    assert "cool-down" in reason
    # exactly 180 s later: allowed (max_step_down 2)
    out, _ = guard(Decision({"a": 1, "b": 1}, "down"), out, svc, GCFG, st, now=280.0, weights=variant_weights(svc))
    assert out == {"a": 1, "b": 1}
    assert st.last_scale_up_s == 100.0  # a scale-down does not restart the cool-down


def test_cooldown_blocks_only_the_down_part_of_a_mixed_decision() -> None:
    svc = service(variant("a", 1.0), variant("b", 2.0))
    st = GuardState(last_scale_up_s=0.0)
    out, _ = guard(
        Decision({"a": 3, "b": 0}, "mix"), {"a": 1, "b": 2}, svc, GCFG, st, now=10.0, weights=variant_weights(svc)
    )
    assert out == {"a": 3, "b": 2}
    assert st.last_scale_up_s == 10.0


def test_no_cooldown_before_any_scale_up() -> None:
    svc = service(variant("a", 1.0))
    out, _ = guard(Decision({"a": 1}, "down"), {"a": 3}, svc, GCFG, GuardState(), now=0.0, weights=variant_weights(svc))
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
    # current 3*2 + 2*1 + 2*1 = 10 rps; target 5. Most expensive first:
    # y: 10->9->8 (y=0); x: 8->6 (x=2), 6->4 < 5 stop; z: 6->5 (z=1), 5->4 < 5 stop.
    out = split_capacity(5.0, three().variants, {"x": 3, "y": 2, "z": 2}, W)
    assert out == {"x": 2, "y": 0, "z": 1}
    assert capacity_of(out, W) == pytest.approx(5.0)


def test_split_scale_down_respects_min() -> None:
    # y min 1: y 10->9 (y=1, stop at min); x 9->7->5 (x=1), 5->3 < 5 stop; z 5->4 < 5 stop.
    out = split_capacity(5.0, three(y_min=1).variants, {"x": 3, "y": 2, "z": 2}, W)
    assert out == {"x": 1, "y": 1, "z": 2}


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
def test_split_properties_over_a_grid(y_min: int) -> None:
    svc = three(y_min)
    total_cap = 10 * 2 + 10 * 1 + 2 * 1
    for target, cx, cy, cz in itertools.product([0, 0.5, 1, 3, 6.5, 11, 25.5, 32, 40], [0, 1, 4], [0, 3], [0, 2]):
        cur = {"x": cx, "y": cy, "z": cz}
        out = split_capacity(float(target), svc.variants, cur, W)
        for v in svc.variants:
            assert v.min_replicas <= out[v.name] <= v.cap
        cap = capacity_of(out, W)
        if target <= total_cap:
            assert cap >= target  # never undershoots
        else:
            assert out == {"x": 10, "y": 10, "z": 2}
        start = capacity_of(
            {k: min(max(n, v.min_replicas), v.cap) for (k, n), v in zip(cur.items(), svc.variants, strict=True)}, W
        )
        if start >= target:
            # Scale-down (or no change): only removes replicas, and removing any single one that is above
            # its minimum would undershoot.
            assert all(out[k] <= max(cur[k], v.min_replicas) for k, v in zip(cur, svc.variants, strict=True))
            for v in svc.variants:
                if out[v.name] > v.min_replicas:
                    assert cap - W[v.name] < target
        else:
            # Scale-up: only adds; a more expensive variant grows only if every cheaper one is at its cap.
            order = sorted(svc.variants, key=lambda v: cost_per_capacity(v, W[v.name]))
            for i, v in enumerate(order):
                if out[v.name] > max(cur[v.name], v.min_replicas):
                    assert all(out[c.name] == c.cap for c in order[:i])
