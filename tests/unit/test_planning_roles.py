"""The planner with prefill/decode pools (``models.planning``, issue 34): one problem chooses between
aggregated variants and a P/D pair, checked against brute force and by hand."""

from __future__ import annotations

import numpy as np
import pytest
from support.brute_plans import pools_brute_force as brute_force

from models.planning import PlanProblem, PlanService, PlanVariant, greedy_counts, solve


def variant(name: str, h: int, *, role: str | None = None, price: float = 1.0, cap: float = 10.0, current: int = 0,
            hi: int = 3, lo: int = 0, warm: int = 1, cold: int = 2, warm_free: int = 0, start: float = 0.0,
            gpu: str | None = None, gpus: int = 1) -> PlanVariant:
    return PlanVariant(name, gpu or name, gpus, price, np.full(h, cap), current, np.full(h, float(current)), lo, hi,
                       warm, cold, warm_free, 0, start, 0.0, role=role)



@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tuned", [False, True])
def test_the_joint_plan_is_the_brute_force_optimum(seed: int, tuned: bool) -> None:
    # One aggregated variant, one prefill and one decode variant, 3 steps: the MILP (split of the
    # demand between the two ways of serving, start-ups, today's replicas) costs the cheapest sequence
    # of whole replica counts the enumeration finds.
    rng = np.random.default_rng(seed)
    h, dt = 3, 60.0
    demand = rng.uniform(2, 40, h)
    variants = [
        variant("agg", h, price=float(rng.uniform(2, 6)), cap=float(rng.uniform(4, 14)),
                current=int(rng.integers(0, 3)), cold=2, start=0.01),
        variant("pre", h, role="prefill", price=float(rng.uniform(1, 5)), cap=float(rng.uniform(8, 30)),
                current=int(rng.integers(0, 2)), warm=1, cold=1, start=0.01),
        variant("dec", h, role="decode", price=float(rng.uniform(1, 5)), cap=float(rng.uniform(6, 20)),
                current=int(rng.integers(0, 3)), warm=0, cold=1),
    ]
    svc = PlanService("s", variants, demand, miss_cost=0.002)
    plan = solve(PlanProblem([svc], dt, h, blocks=list(range(h)), mip_rel_gap=1e-9, tuned=tuned))
    assert plan.cost == pytest.approx(brute_force(svc, dt), rel=1e-6, abs=1e-9)
    # the pools' share is never more than either pool carries
    for role in ("prefill", "decode"):
        carried = sum(v.capacity_rps * plan.serving["s"][v.name] for v in variants if v.role == role)
        assert np.all(plan.pd_rps["s"] <= carried + 1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_a_pools_only_plan_is_the_brute_force_optimum(seed: int) -> None:
    # no aggregated variant: the pools serve everything that is served; two prefill generations
    rng = np.random.default_rng(50 + seed)
    h, dt = 3, 60.0
    demand = rng.uniform(5, 40, h)
    variants = [
        variant("pre-a", h, role="prefill", price=4.0, cap=25.0, current=int(rng.integers(0, 2)), hi=2, cold=1),
        variant("pre-b", h, role="prefill", price=1.5, cap=8.0, current=0, hi=2, cold=2),
        variant("dec", h, role="decode", price=2.0, cap=9.0, current=int(rng.integers(0, 3)), hi=4, warm=0, cold=1),
    ]
    svc = PlanService("s", variants, demand, miss_cost=0.002)
    plan = solve(PlanProblem([svc], dt, h, blocks=list(range(h)), mip_rel_gap=1e-9))
    assert plan.cost == pytest.approx(brute_force(svc, dt), rel=1e-6, abs=1e-9)


def steady(agg_cap: float, pre_cap: float, dec_cap: float, demand: float) -> tuple[PlanService, PlanProblem]:
    """Ready at once (no start-up), 2 steps of an hour's 60th, every replica $60/h ($1 a step): only the
    replica counts matter. Misses cost far above any replica."""
    h = 2
    variants = [variant("agg", h, price=60.0, cap=agg_cap, hi=20, warm=0, cold=0),
                variant("pre", h, role="prefill", price=60.0, cap=pre_cap, hi=20, warm=0, cold=0),
                variant("dec", h, role="decode", price=60.0, cap=dec_cap, hi=20, warm=0, cold=0)]
    svc = PlanService("s", variants, np.full(h, demand), miss_cost=10.0)
    return svc, PlanProblem([svc], 60.0, h, blocks=[0, 1], mip_rel_gap=1e-9)


def test_long_prompts_and_a_strict_itl_choose_the_pools() -> None:
    # Long prompts under a strict ITL: an aggregated replica's decode steps carry long prefill chunks,
    # so it serves 2 req/s; a prefill replica serves the prompts of 8 req/s, a decode replica 8 req/s.
    # 16 req/s: aggregated alone 8 replicas ($8 a step); the pools 2 + 2 ($4 a step).
    _, problem = steady(2.0, 8.0, 8.0, 16.0)
    plan = solve(problem)
    assert {v: int(n[0]) for v, n in plan.replicas["s"].items()} == {"agg": 0, "pre": 2, "dec": 2}
    assert plan.pd_rps["s"] == pytest.approx([16.0, 16.0])
    assert plan.cost == pytest.approx(2 * 4.0)


def test_short_prompts_choose_aggregated_serving() -> None:
    # Short prompts: an aggregated replica serves 10 req/s, a decode replica 12 (it prefills most
    # prompts itself: under the threshold), a prefill replica 40. 20 req/s: aggregated 2 ($2 a step);
    # the pools 1 + 2 ($3); 10 + 10 split: 1 aggregated + 1 + 1 ($3).
    _, problem = steady(10.0, 40.0, 12.0, 20.0)
    plan = solve(problem)
    assert {v: int(n[0]) for v, n in plan.replicas["s"].items()} == {"agg": 2, "pre": 0, "dec": 0}
    assert plan.pd_rps["s"] == pytest.approx([0.0, 0.0], abs=1e-9)
    assert plan.cost == pytest.approx(2 * 2.0)


def test_the_demand_is_split_where_whole_replicas_make_a_split_cheaper() -> None:
    # 18 req/s with the long-prompt capacities: the pools alone need 3 + 3 ($6 a step, 24 req/s),
    # aggregated alone 9 ($9); 2 + 2 pool replicas serve 16 and one aggregated replica the other 2 ($5).
    _, problem = steady(2.0, 8.0, 8.0, 18.0)
    plan = solve(problem)
    assert {v: int(n[0]) for v, n in plan.replicas["s"].items()} == {"agg": 1, "pre": 2, "dec": 2}
    assert plan.pd_rps["s"] == pytest.approx([16.0, 16.0])
    assert plan.cost == pytest.approx(2 * 5.0)


def test_pools_only_are_sized_by_their_own_capacities() -> None:
    # 20 req/s on pools alone: prefill replicas of 8 req/s (3), decode replicas of 5 req/s (4)
    h = 2
    variants = [variant("pre", h, role="prefill", price=60.0, cap=8.0, hi=20, warm=0, cold=0),
                variant("dec", h, role="decode", price=60.0, cap=5.0, hi=20, warm=0, cold=0)]
    svc = PlanService("s", variants, np.full(h, 20.0), miss_cost=10.0)
    plan = solve(PlanProblem([svc], 60.0, h, blocks=[0, 1]))
    assert {v: int(n[0]) for v, n in plan.replicas["s"].items()} == {"pre": 3, "dec": 4}
    assert plan.unserved_rps["s"] == pytest.approx([0.0, 0.0], abs=1e-9)


def test_a_gpu_quota_shared_with_the_pools_moves_the_choice() -> None:
    # The long-prompt case, but the pools' GPU type has a quota of 3 GPUs: two pairs no longer fit,
    # so one pair (8 req/s) and 4 aggregated replicas on another type (8 req/s): $6 a step.
    h = 2
    variants = [variant("agg", h, price=60.0, cap=2.0, hi=20, warm=0, cold=0, gpu="A100"),
                variant("pre", h, role="prefill", price=60.0, cap=8.0, hi=20, warm=0, cold=0, gpu="H100"),
                variant("dec", h, role="decode", price=60.0, cap=8.0, hi=20, warm=0, cold=0, gpu="H100")]
    svc = PlanService("s", variants, np.full(h, 16.0), miss_cost=10.0)
    plan = solve(PlanProblem([svc], 60.0, h, blocks=[0, 1], gpu_quota={"H100": 3}))
    assert {v: int(n[0]) for v, n in plan.replicas["s"].items()} == {"agg": 4, "pre": 1, "dec": 1}
    assert plan.cost == pytest.approx(2 * 6.0)


def test_decomposition_plans_role_variants_within_the_shared_limits() -> None:
    # Three services share an H100 quota: one aggregated-only, one with pools beside an aggregated
    # variant, one pools-only. Decomposed, the plan keeps the quota at every step and costs no less
    # than the joint optimum (and within a few percent of it here).
    rng = np.random.default_rng(7)
    h, dt = 6, 60.0
    services = []
    for i, roles in enumerate([(None,), (None, "prefill", "decode"), ("prefill", "decode")]):
        vs = []
        for role in roles:
            cap = {None: 5.0, "prefill": 20.0, "decode": 9.0}[role]
            vs.append(variant(f"{role or 'agg'}{i}", h, role=role, price=float(rng.uniform(2, 4)), cap=cap, hi=8,
                              current=1, warm=1, cold=2, gpu="H100"))
        services.append(PlanService(f"s{i}", vs, rng.uniform(10, 30, h), miss_cost=0.002, max_up=3, max_down=2))
    joint = solve(PlanProblem(services, dt, h, gpu_quota={"H100": 14}, mip_rel_gap=1e-9))
    parts = solve(PlanProblem(services, dt, h, gpu_quota={"H100": 14}, decompose=True))
    assert parts.message.startswith("decomposed")
    held = sum(parts.replicas[s.name][v.name] for s in services for v in s.variants)
    assert np.all(held <= 14)
    assert set(parts.pd_rps) == {"s1", "s2"}
    assert joint.cost - 1e-9 <= parts.cost <= joint.cost * 1.05
    for s in services[1:]:
        for role in ("prefill", "decode"):
            carried = sum(v.capacity_rps * parts.serving[s.name][v.name] for v in s.variants if v.role == role)
            assert np.all(parts.pd_rps[s.name] <= carried + 1e-6)


def test_the_greedy_fallback_covers_the_demand_with_the_cheaper_way() -> None:
    # The solver's fallback: with the long-prompt capacities the greedy plan orders pools; with the
    # short-prompt ones aggregated replicas; either way it covers the demand.
    for caps, want in (((2.0, 8.0, 8.0), {"agg": 0, "pre": 2, "dec": 2}),
                       ((10.0, 40.0, 12.0), {"agg": 2, "pre": 0, "dec": 0})):
        svc, problem = steady(*caps, 16.0 if caps[0] == 2.0 else 20.0)
        counts = greedy_counts(problem)
        assert {v.name: int(counts[0, j][0]) for j, v in enumerate(svc.variants)} == want


@pytest.mark.parametrize(("roles", "match"), [(("prefill",), "both roles"), (("prefill", "mixed"), "role must be")])
def test_a_malformed_pool_is_a_value_error(roles: tuple[str, ...], match: str) -> None:
    variants = [variant(f"v{j}", 2, role=r) for j, r in enumerate(roles)]
    with pytest.raises(ValueError, match=match):
        solve(PlanProblem([PlanService("s", variants, np.full(2, 5.0), miss_cost=1.0)], 60.0, 2))
