"""The planner's prefill:decode ratio (``PlanService.pd_ratio``, Kthena's rule as a constraint; issue 34),
checked against brute force and by hand."""

from __future__ import annotations

import numpy as np
import pytest
from support.brute_plans import sequences

from models.planning import PlanProblem, PlanService, PlanVariant, solve


def variant(name: str, h: int, *, role: str | None = None, price: float = 1.0, cap: float = 10.0, current: int = 0,
            hi: int = 3, cold: int = 1, start: float = 0.0) -> PlanVariant:
    return PlanVariant(name, name, 1, price, np.full(h, cap), current, np.full(h, float(current)), 0, hi,
                       cold, cold, 0, 0, start, 0.0, role=role)


def brute_force(svc: PlanService, dt: float, ratio: tuple[float, float]) -> float:
    """Cheapest cost over every combination of the three variants' sequences (an aggregated, a prefill and
    a decode variant, in that order) whose prefill and decode counts keep ``lo x D <= P <= hi x D`` at
    every step; the pools serve the smaller of their two capacities (at most the demand), the aggregated
    replica the rest, and what is left is missed."""
    agg, pre, dec = (sequences(v, dt) for v in svc.variants)
    lo, hi = ratio
    best = np.inf
    for a_cost, a_served in zip(agg[1], agg[2], strict=True):
        p_n, d_n = pre[0][:, None, :], dec[0][None, :, :]
        ok = np.all((p_n >= lo * d_n - 1e-9) & (p_n <= hi * d_n + 1e-9), axis=2)
        pools = np.minimum(np.minimum(pre[2][:, None, :], dec[2][None, :, :]), svc.demand_rps)
        left = np.maximum(svc.demand_rps - a_served - pools, 0.0)
        cost = a_cost + pre[1][:, None] + dec[1][None, :] + dt * svc.miss_cost * left.sum(axis=2)
        best = min(best, float(np.min(np.where(ok, cost, np.inf))))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_ratio_plan_is_the_brute_force_optimum(seed: int) -> None:
    # One aggregated, one prefill and one decode variant over 3 steps, a ratio drawn from Kthena-like
    # bounds: the MILP costs the cheapest combination that keeps the ratio at every step, and its
    # replica counts keep it.
    rng = np.random.default_rng(100 + seed)
    h, dt = 3, 60.0
    demand = rng.uniform(5, 45, h)
    ratio = (float(rng.choice([0.5, 1.0])), float(rng.choice([1.0, 1.5, 2.0])))
    variants = [
        variant("agg", h, price=float(rng.uniform(3, 6)), cap=float(rng.uniform(4, 10)),
                current=int(rng.integers(0, 3)), cold=2, start=0.01),
        variant("pre", h, role="prefill", price=float(rng.uniform(1, 4)), cap=float(rng.uniform(15, 40)),
                current=1, cold=1, start=0.01),
        variant("dec", h, role="decode", price=float(rng.uniform(1, 4)), cap=float(rng.uniform(5, 15)), current=1,
                cold=1),
    ]
    svc = PlanService("s", variants, demand, miss_cost=0.002, pd_ratio=ratio)
    plan = solve(PlanProblem([svc], dt, h, blocks=list(range(h)), mip_rel_gap=1e-9))
    assert plan.cost == pytest.approx(brute_force(svc, dt, ratio), rel=1e-6, abs=1e-9)
    p, d = plan.replicas["s"]["pre"], plan.replicas["s"]["dec"]
    assert np.all(p >= ratio[0] * d - 1e-9) and np.all(p <= ratio[1] * d + 1e-9)


def test_a_ratio_raises_the_pool_the_capacities_alone_would_not() -> None:
    # Ready at once, $1 a replica-step: 16 req/s on prefill replicas of 16 req/s and decode replicas of 4:
    # without a ratio 1 prefill + 4 decode ($5 a step); with min_ratio 0.5 (P >= D / 2), 2 + 4 ($6).
    h = 2

    def plan(ratio: tuple[float, float] | None) -> dict[str, int]:
        variants = [variant("pre", h, role="prefill", price=60.0, cap=16.0, hi=20, cold=0),
                    variant("dec", h, role="decode", price=60.0, cap=4.0, hi=20, cold=0)]
        svc = PlanService("s", variants, np.full(h, 16.0), miss_cost=10.0, pd_ratio=ratio)
        return {v: int(n[0]) for v, n in solve(PlanProblem([svc], 60.0, h, blocks=[0, 1])).replicas["s"].items()}

    assert plan(None) == {"pre": 1, "dec": 4}
    assert plan((0.5, 2.0)) == {"pre": 2, "dec": 4}
    # max_ratio 0.2 (D >= 5 P): 1 prefill needs 5 decode replicas
    assert plan((0.0, 0.2)) == {"pre": 1, "dec": 5}
