"""``PlanProblem.tail_up`` (``mpc:int_up=1``): only the first block whole, the later ones priced as
if their replica counts were rounded up. Checked against a brute-forced optimum worked out here from
the replica counts alone, on a tick of the ramp where the relaxed tail alone (``integer_blocks=1``)
orders an H100 late, and against replica counts the demand needs, computed by hand."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from models.planning import PlanProblem, PlanService, PlanVariant, solve

H, DT, COLD = 8, 15.0, 2
BLOCKS = [0, 1, 4]  # three blocks: the first step, steps 1-3, steps 4-7
CAP, PRICE = 10.0, 3.6  # req/s per replica, $/h: $0.015 a replica a step


def one_variant(demand: list[float], miss: float, current: int = 2) -> PlanProblem:
    v = PlanVariant("a", "G", 1, PRICE, np.full(H, CAP), current, np.full(H, float(current)), 0, 8,
                    COLD, COLD, 0, 0, 0.0, 0.0)
    return PlanProblem([PlanService("s", [v], np.asarray(demand, dtype=float), miss)], DT, H, blocks=BLOCKS)


def brute(problem: PlanProblem) -> dict[int, float]:
    """The cheapest plan's cost for each first-block count, every count 0..6 per block tried: GPU cost
    per block, an increase ordered cold (ready ``COLD`` steps after its block begins), a decrease a
    ready replica removed (infeasible when none is ready), each step serving ``min(count, ready)``
    and paying ``miss`` per request it leaves unserved."""
    svc = problem.services[0]
    v = svc.variants[0]
    ends = [*BLOCKS[1:], H]
    block_of = [max(b for b, s in enumerate(BLOCKS) if s <= k) for k in range(H)]
    best: dict[int, float] = {}
    for counts in itertools.product(range(7), repeat=len(BLOCKS)):
        prev, ordered, removed, orders, removals = v.current, 0, 0, [], []
        for n in counts:
            ordered += max(0, n - prev)
            removed += max(0, prev - n)
            orders.append(ordered)
            removals.append(removed)
            prev = n
        cost = sum(PRICE * DT / 3600.0 * (ends[b] - BLOCKS[b]) * counts[b] for b in range(len(BLOCKS)))
        feasible = True
        for k in range(H):
            ready = v.current - removals[block_of[k]] + (orders[block_of[k - COLD]] if k >= COLD else 0)
            if ready < 0:
                feasible = False
                break
            served = CAP * min(counts[block_of[k]], ready)
            cost += svc.miss_cost * DT * max(0.0, float(svc.demand_rps[k]) - served)
        if feasible:
            best[counts[0]] = min(best.get(counts[0], math.inf), cost)
    return best


@pytest.mark.parametrize("demand, miss", [
    ([20.5, 21, 21, 21.5, 22, 22, 23, 23], 0.002),  # a small rise where an order now first serves: 3
    ([20, 20, 20, 20, 20, 20, 20, 20], 0.002),       # steady: hold 2
    ([20, 20, 32, 38, 40, 40, 40, 40], 0.01),        # a steep rise: two ordered now (4)
    ([9, 9, 9, 9, 9, 9, 9, 9], 0.01),                # below one replica's 10 req/s: one removed now (1)
])
def test_tail_ups_first_step_is_the_brute_forced_optimums(demand: list[float], miss: float) -> None:
    problem = one_variant(demand, miss)
    best = brute(problem)
    first = min(best, key=lambda n: best[n])
    runner_up = min(cost for n, cost in best.items() if n != first)
    assert runner_up > best[first] + 1e-9  # the optimum's first step is the only optimal one
    plan = solve(dataclasses.replace(problem, integer_blocks=1, tail_up=True))
    assert int(plan.replicas["s"]["a"][0]) == first
    assert "later blocks priced rounded up" in plan.message


def test_tail_ups_rounding_never_plans_fewer_replicas_than_the_demand_needs() -> None:
    """Demand rising from 18 to 52 req/s, 10 req/s a replica, 2 held and missing dear: from the first
    step an order can serve (step 2) the replicas must be ceil(demand / 10) = 3, 4, 4, 4, 5, 6 at
    least, by hand; each plan's counts never fall, so the ready ones are 2 plus those ordered two or
    more steps earlier."""
    demand = [18.0, 19.0, 24.0, 31.0, 38.0, 38.0, 44.0, 52.0]
    needed = [3, 4, 4, 4, 5, 6]  # steps 2..7
    problem = dataclasses.replace(one_variant(demand, miss=0.01), blocks=None)  # the default blocks here
    plan = solve(dataclasses.replace(problem, integer_blocks=1, tail_up=True))
    n = plan.replicas["s"]["a"]
    assert np.all(n == np.round(n)) and np.all(np.diff(n) >= 0)
    for k, need in zip(range(COLD, H), needed, strict=True):
        ready = n[k - COLD]  # every count was ordered at least COLD steps before step k
        assert ready >= need, (k, n)
    assert np.all(plan.unserved_rps["s"][COLD:] <= 1e-6)


def ramp_tick() -> PlanProblem:
    """The ramp scenario's 125th tick (``benchmarks/compare.py ramp --controller mpc --seed 2``, commit
    0ec3b3c; the problem the MPC solved there, demand rounded to 0.01 req/s): 3 H100 (one warm node
    left), 1 A100 and 4 GH200 (their limit) against a forecast rising from 115 to 139 req/s."""
    demand = np.array([
        115.04, 115.04, 115.04, 115.04, 115.45, 116.27, 117.09, 117.9, 118.69, 119.43, 120.14, 120.89, 121.61,
        122.32, 123.02, 123.73, 124.42, 125.1, 125.78, 126.46, 127.13, 127.79, 128.45, 129.11, 129.76, 130.41,
        131.05, 131.7, 132.34, 132.97, 133.61, 134.24, 134.87, 135.49, 136.11, 136.73, 137.35, 137.96, 138.58,
        139.19])
    steps = len(demand)

    def variant(name: str, gpu: str, price: float, cap: float, current: int, low: int, high: int, warm_free: int,
                start_cost: float) -> PlanVariant:
        return PlanVariant(name, gpu, 1, price, np.full(steps, cap), current, np.full(steps, float(current)), low,
                           high, 6, 20, warm_free, 0, start_cost, 0.0)

    variants = [variant("h100", "H100-SXM", 2.99, 15.670085, 3, 0, 40, 1, 2.99 * 300 / 3600),
                variant("a100", "A100-80GB", 1.79, 6.131929, 1, 0, 40, 3, 1.79 * 300 / 3600),
                variant("gh200", "GH200", 1.49, 15.539646, 4, 1, 4, 0, 1.49 * 300 / 3600)]
    svc = PlanService("ramp", variants, demand, 0.0008108741051873708, max_up=8, max_down=2)
    return PlanProblem([svc], 15.0, steps, tuned=True)


def test_tail_up_orders_the_h100_the_exact_search_orders_on_the_ramp() -> None:
    problem = ramp_tick()
    exact = solve(problem)
    relaxed = solve(dataclasses.replace(problem, tuned=False, integer_blocks=1))
    up = solve(dataclasses.replace(problem, tuned=False, integer_blocks=1, tail_up=True))

    def first(plan: object) -> dict[str, int]:
        return {v: int(n[0]) for v, n in plan.replicas["ramp"].items()}  # type: ignore[attr-defined]

    assert first(exact)["h100"] == 4  # the exact search orders the 4th H100 now
    assert first(relaxed)["h100"] == 3  # the relaxed tail alone waits (the ramp's failure)
    assert first(up) == first(exact)
