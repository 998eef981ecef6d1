"""The replica planner (``models.planning``) against brute force and the constraints it must keep."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from models.planning import PlanProblem, PlanService, PlanVariant, default_blocks, solve


def variant(name: str, h: int, *, price: float = 1.0, cap: float = 10.0, current: int = 0, ready: int | None = None,
            hi: int = 3, lo: int = 0, warm: int = 1, cold: int = 2, warm_free: int = 0, keep: int = 0,
            start: float = 0.0, stop: float = 0.0, gpu: str | None = None) -> PlanVariant:
    return PlanVariant(name, gpu or name, 1, price, np.full(h, cap), current,
                       np.full(h, float(current if ready is None else ready)), lo, hi, warm, cold, warm_free, keep,
                       start, stop)


def brute_force(svc: PlanService, dt: float) -> float:
    """Cheapest cost over every replica sequence, each step its own block. Orders are the increases (warm
    while warm nodes are free: the same price, ready sooner), removals the decreases, each taking a ready
    replica (none ready: the sequence is infeasible); a step serves the replicas ready by then."""
    h = len(svc.demand_rps)
    best = np.inf
    ranges = [range(v.min_replicas, v.max_replicas + 1) for v in svc.variants]
    per_variant = [list(itertools.product(r, repeat=h)) for r in ranges]
    for combo in itertools.product(*per_variant):
        cost, serving = 0.0, np.zeros(h)
        ups = np.zeros(h)
        downs = np.zeros(h)
        for v, seq in zip(svc.variants, combo, strict=True):
            if any(n < v.keep for n in seq):
                break
            warm = np.zeros(h)
            cold = np.zeros(h)
            prev, warm_used = v.current, 0
            for k, n in enumerate(seq):
                d = n - prev
                if d > 0:
                    w = min(d, v.warm_free - warm_used)
                    warm_used += w
                    warm[k], cold[k] = w, d - w
                    ups[k] += d
                    cost += v.start_cost * d
                elif d < 0:
                    downs[k] -= d
                    cost += v.stop_cost * -d
                prev = n
            removed = np.maximum(-np.diff([v.current, *seq]), 0)
            cw, cc, cd = np.cumsum(warm), np.cumsum(cold), np.cumsum(removed)
            ready = [v.ready[k] + (cw[k - v.warm_steps] if k >= v.warm_steps else 0)
                     + (cc[k - v.cold_steps] if k >= v.cold_steps else 0) - cd[k] for k in range(h)]
            if min(ready) < 0:
                break
            for k, n in enumerate(seq):
                serving[k] += v.capacity_rps[k] * ready[k]
                cost += v.price_per_hour * dt / 3600 * n
        else:
            if (svc.max_up is not None and ups.max() > svc.max_up) or (
                    svc.max_down is not None and downs.max() > svc.max_down):
                continue
            cost += svc.miss_cost * dt * np.maximum(svc.demand_rps - serving, 0).sum()
            best = min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_plan_is_the_brute_force_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    h, dt = 4, 60.0
    demand = rng.uniform(0, 45, h)
    variants = [
        variant("a", h, price=3.0, cap=15.0, current=int(rng.integers(0, 3)), warm=1, cold=2,
                warm_free=int(rng.integers(0, 2)), start=0.02, stop=0.01),
        variant("b", h, price=1.5, cap=6.0, current=int(rng.integers(0, 3)), warm=1, cold=3, warm_free=1,
                start=0.01),
    ]
    svc = PlanService("s", variants, demand, miss_cost=0.002, max_up=2, max_down=1)
    plan = solve(PlanProblem([svc], dt, h, blocks=list(range(h)), mip_rel_gap=1e-9))
    assert plan.cost == pytest.approx(brute_force(svc, dt), rel=1e-6, abs=1e-9)
    assert not plan.relaxed


def test_a_replica_serves_only_after_its_startup() -> None:
    # Nothing runs; demand is 20 req/s from step 5 on; a replica serves 10 req/s and starts in 3 steps
    # (no warm node). Two replicas must be ordered by step 2 (0-based) and nothing serves before step 3.
    h = 10
    demand = np.array([0, 0, 0, 0, 0, 20, 20, 20, 20, 20], float)
    svc = PlanService("s", [variant("a", h, cold=3, hi=5, start=0.001)], demand, miss_cost=1.0)
    plan = solve(PlanProblem([svc], 60.0, h, blocks=list(range(h))))
    n = plan.replicas["s"]["a"]
    assert n[2] >= 2 and n[5:].min() >= 2
    assert plan.unserved_rps["s"] == pytest.approx(np.zeros(h), abs=1e-6)
    assert plan.serving["s"]["a"][:3] == pytest.approx(np.zeros(3), abs=1e-9)


def test_demand_before_any_replica_can_start_is_unserved() -> None:
    h = 6
    demand = np.full(h, 20.0)
    svc = PlanService("s", [variant("a", h, cold=3, hi=5)], demand, miss_cost=1.0)
    plan = solve(PlanProblem([svc], 60.0, h, blocks=list(range(h))))
    assert plan.unserved_rps["s"][:3] == pytest.approx(np.full(3, 20.0))
    assert plan.unserved_rps["s"][3:] == pytest.approx(np.zeros(3), abs=1e-6)
    assert plan.replicas["s"]["a"][0] == 2  # ordered at once: every step of delay leaves demand unserved


def test_shared_gpu_quota_and_budget_hold_at_every_step() -> None:
    h = 8
    services = [PlanService(f"s{i}", [variant("h100", h, cap=10.0, hi=10, gpu="H100"),
                                      variant("a100", h, price=2.0, cap=10.0, hi=10, gpu="A100")],
                            np.full(h, 60.0), miss_cost=1.0) for i in range(2)]
    plan = solve(PlanProblem(services, 60.0, h, gpu_quota={"H100": 7}, gpu_budget=11))
    h100 = sum(plan.replicas[s.name]["h100"] for s in services)
    total = h100 + sum(plan.replicas[s.name]["a100"] for s in services)
    assert h100.max() <= 7 and total.max() <= 11
    assert h100[-1] == 7  # the cheaper GPU is used up to its quota first
    assert total[-1] == 11  # 120 req/s of demand: the budget binds


def test_a_fleet_past_its_quota_keeps_what_it_holds_and_never_grows() -> None:
    # 6 H100s held (all kept: the first ticks remove no ready replica) against a quota of 4, and
    # demand for 9: the plan is feasible, never holds more than the 6, and adds A100s for the rest.
    h = 8
    svc = PlanService("s", [variant("h100", h, current=6, keep=6, hi=10, gpu="H100", warm_free=5),
                            variant("a100", h, price=2.0, hi=10, gpu="A100", warm_free=5)],
                      np.full(h, 90.0), miss_cost=1.0)
    plan = solve(PlanProblem([svc], 60.0, h, gpu_quota={"H100": 4}))
    assert plan.replicas["s"]["h100"].max() == 6 and plan.replicas["s"]["a100"][-1] == 3
    budget = solve(PlanProblem([svc], 60.0, h, gpu_budget=5))  # past the budget: the same rule
    total = budget.replicas["s"]["h100"] + budget.replicas["s"]["a100"]
    assert total.max() == 6


def test_keep_holds_ready_replicas_while_recovering() -> None:
    # Five ready replicas and no demand: without keep the plan removes them (max_down 2 per step);
    # with keep=5 it removes none.
    h = 6
    for keep, expect_min in ((0, 0), (5, 5)):
        svc = PlanService("s", [variant("a", h, current=5, hi=8, keep=keep)], np.zeros(h), miss_cost=1.0,
                          max_down=2)
        n = solve(PlanProblem([svc], 60.0, h, blocks=list(range(h)))).replicas["s"]["a"]
        assert n.min() == expect_min
        if keep == 0:
            assert list(n[:3]) == [3, 1, 0]  # the step limit: two removals a step


def test_step_limits_are_dropped_only_when_no_plan_meets_them() -> None:
    # Ten replicas today, a cap of 4 and at most one removal a step: no plan can keep the limit.
    h = 3
    svc = PlanService("s", [variant("a", h, current=10, hi=4)], np.zeros(h), miss_cost=1.0, max_down=1)
    plan = solve(PlanProblem([svc], 60.0, h))
    assert plan.relaxed and plan.replicas["s"]["a"].max() <= 4


def test_default_blocks_cover_the_horizon() -> None:
    assert default_blocks(40) == [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    assert default_blocks(1) == [0]


@pytest.mark.parametrize("problem", [
    PlanProblem([PlanService("s", [variant("a", 3)], np.zeros(2), 1.0)], 60.0, 3),
    PlanProblem([PlanService("s", [variant("a", 3)], np.array([1.0, np.nan, 1.0]), 1.0)], 60.0, 3),
    PlanProblem([PlanService("s", [], np.zeros(3), 1.0)], 60.0, 3),
    PlanProblem([PlanService("s", [variant("a", 3)], np.zeros(3), 1.0)], 60.0, 3, blocks=[1, 2]),
    PlanProblem([PlanService("s", [variant("a", 3, lo=4, hi=3)], np.zeros(3), 1.0)], 60.0, 3),
])
def test_malformed_problem_is_a_value_error(problem: PlanProblem) -> None:
    with pytest.raises(ValueError):
        solve(problem)


def test_the_solver_cannot_write_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    # HiGHS prints a debug line to file descriptor 1 whatever its options (ERGO-Code/HiGHS#2783);
    # during a solve fd 1 goes nowhere, and it is restored after.
    import os

    from models.planning import _solver_stdout_silenced

    with _solver_stdout_silenced():
        os.write(1, b"HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();\n")
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "after\n"
