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
            left = np.maximum(svc.demand_rps - serving, 0)
            shed = np.zeros(h) if svc.shed_rps is None else np.minimum(left, svc.shed_rps)
            if svc.shed_rps is not None and svc.shed_cost >= svc.miss_cost:
                shed = np.zeros(h)
            cost += dt * (svc.shed_cost * shed.sum() + svc.miss_cost * (left - shed).sum())
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


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("hull", [True, False])
def test_the_tuned_search_is_the_brute_force_optimum_with_two_capacities(seed: int, hull: bool) -> None:
    # Three variants of two capacities (15 and 6 req/s; two of 15), so the tuned search's demand rows
    # get their hull's facets (hull=True) or the MIR rows (False); some demand may be shed. Either
    # way the plan costs what the brute force's cheapest sequence does.
    rng = np.random.default_rng(300 + seed)
    h, dt = 3, 60.0
    demand = rng.uniform(5, 50, h)
    variants = [
        variant("a", h, price=3.0, cap=15.0, current=int(rng.integers(0, 2)), hi=2, warm=1, cold=2, warm_free=1,
                start=0.02),
        variant("b", h, price=1.5, cap=6.0, current=int(rng.integers(0, 3)), hi=2, warm=1, cold=2, start=0.01),
        variant("c", h, price=2.5, cap=15.0, current=int(rng.integers(0, 2)), hi=2, warm=1, cold=2, stop=0.01),
    ]
    shed = demand * 0.3 if seed % 2 else None
    svc = PlanService("s", variants, demand, miss_cost=0.002, max_up=2, max_down=1, shed_rps=shed,
                      shed_cost=0.001 if shed is not None else 0.0)
    plan = solve(PlanProblem([svc], dt, h, blocks=list(range(h)), mip_rel_gap=1e-9, tuned=True, hull=hull))
    assert plan.cost == pytest.approx(brute_force(svc, dt), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_a_plan_that_may_shed_is_the_brute_force_optimum(seed: int) -> None:
    # Up to a share of each step's demand may be shed at a cost between a replica's cost per request
    # and a miss's: the brute force sheds what is left unserved up to that share, the rest missed.
    rng = np.random.default_rng(100 + seed)
    h, dt = 4, 60.0
    demand = rng.uniform(10, 45, h)
    variants = [
        variant("a", h, price=3.0, cap=15.0, current=int(rng.integers(0, 3)), warm=1, cold=2, start=0.02),
        variant("b", h, price=1.5, cap=6.0, current=int(rng.integers(0, 3)), warm=1, cold=3, warm_free=1),
    ]
    svc = PlanService("s", variants, demand, miss_cost=0.002, max_up=2, max_down=1,
                      shed_rps=demand * rng.uniform(0.2, 0.6), shed_cost=float(rng.uniform(0.0001, 0.0015)))
    plan = solve(PlanProblem([svc], dt, h, blocks=list(range(h)), mip_rel_gap=1e-9))
    assert plan.cost == pytest.approx(brute_force(svc, dt), rel=1e-6, abs=1e-9)
    assert np.all(plan.shed_rps["s"] <= svc.shed_rps + 1e-9)
    served = sum(v.capacity_rps * plan.serving["s"][v.name] for v in variants)
    assert np.all(served + plan.unserved_rps["s"] + plan.shed_rps["s"] >= demand - 1e-6)


def shed_case(shed_cost: float, strengthen: bool | None = None) -> tuple[PlanService, PlanProblem]:
    # One replica of 10 req/s at $36/h ($0.01/s) serves 10 of 15 req/s; 5 are sheddable. A second
    # replica (ready 2 steps after its order) would serve those 5 at $0.01/s / 5 = $0.002 a request.
    h = 6
    svc = PlanService("s", [variant("a", h, price=36.0, cap=10.0, current=1, cold=2, hi=3)], np.full(h, 15.0),
                      miss_cost=0.05, shed_rps=np.full(h, 5.0), shed_cost=shed_cost)
    return svc, PlanProblem([svc], 60.0, h, blocks=list(range(h)), strengthen=strengthen)


@pytest.mark.parametrize("strengthen", [False, True])
def test_the_plan_sheds_where_a_replica_costs_more_per_request(strengthen: bool) -> None:
    # $0.001 a request shed < $0.002 served by a second replica: keep one, shed 5 req/s every step.
    _, problem = shed_case(0.001, strengthen)
    plan = solve(problem)
    assert plan.replicas["s"]["a"].tolist() == [1] * 6
    assert plan.shed_rps["s"] == pytest.approx(np.full(6, 5.0), abs=1e-6)
    assert plan.unserved_rps["s"] == pytest.approx(np.zeros(6), abs=1e-6)
    assert plan.cost == pytest.approx(6 * 60 * (0.01 + 5 * 0.001))


@pytest.mark.parametrize("strengthen", [False, True])
def test_the_plan_buys_a_replica_where_shedding_costs_more(strengthen: bool) -> None:
    # $0.004 a request shed > $0.002: order a second replica now; shed only until it is ready (2 steps).
    _, problem = shed_case(0.004, strengthen)
    plan = solve(problem)
    assert plan.replicas["s"]["a"].tolist() == [2] * 6
    assert plan.shed_rps["s"] == pytest.approx([5, 5, 0, 0, 0, 0], abs=1e-6)
    assert plan.cost == pytest.approx(6 * 60 * 0.02 + 2 * 60 * 5 * 0.004)


def test_shed_demand_beyond_the_sheddable_share_is_missed() -> None:
    # Nothing can be ordered (hi = 1): of the 5 req/s short, 3 may be shed, 2 are missed.
    h = 3
    svc = PlanService("s", [variant("a", h, price=36.0, cap=10.0, current=1, hi=1)], np.full(h, 15.0),
                      miss_cost=0.05, shed_rps=np.full(h, 3.0), shed_cost=0.001)
    plan = solve(PlanProblem([svc], 60.0, h))
    assert plan.shed_rps["s"] == pytest.approx(np.full(h, 3.0), abs=1e-6)
    assert plan.unserved_rps["s"] == pytest.approx(np.full(h, 2.0), abs=1e-6)


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
    PlanProblem([PlanService("s", [variant("a", 3)], np.ones(3), 1.0, shed_rps=np.full(3, 2.0))], 60.0, 3),
    PlanProblem([PlanService("s", [variant("a", 3)], np.ones(3), 1.0, shed_rps=np.ones(2))], 60.0, 3),
    PlanProblem([PlanService("s", [variant("a", 3)], np.ones(3), 1.0, shed_rps=np.ones(3), shed_cost=-1.0)],
                60.0, 3),
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


def covered_by_hand(plan_replicas: np.ndarray, cap: float, current: int, steps_to_ready: int) -> np.ndarray:
    """Requests/s the replicas serve per step when every order of step k serves from k + steps_to_ready."""
    ordered = np.maximum(np.diff([current, *plan_replicas]), 0).cumsum()
    lagged = np.concatenate([np.zeros(steps_to_ready), ordered[:len(ordered) - steps_to_ready]])
    return cap * np.minimum(plan_replicas, current + lagged)


def test_a_node_limit_stops_at_the_best_plan_so_far() -> None:
    # Three variants of odd capacities and GPU sizes under a shared quota: HiGHS needs more than one
    # branch-and-bound node for the optimum; stopped after one it keeps its best plan, which meets the
    # quotas and costs no less than the optimum.
    h = 8
    variants = [PlanVariant("a", "g0", 2, 1.79, np.full(h, 14.0), 0, np.zeros(h), 0, 12, 1, 2),
                PlanVariant("b", "g1", 3, 2.54, np.full(h, 7.0), 0, np.zeros(h), 0, 12, 1, 2),
                PlanVariant("c", "g0", 1, 2.0, np.full(h, 13.0), 0, np.zeros(h), 0, 12, 1, 2)]
    svc = PlanService("s", variants, np.array([58.0, 71.0, 51.0, 99.0, 52.0, 44.0, 85.0, 57.0]), miss_cost=0.0035)

    def problem(node_limit: int | None) -> PlanProblem:
        return PlanProblem([svc], 60.0, h, blocks=list(range(h)), gpu_quota={"g0": 15}, gpu_budget=15,
                           node_limit=node_limit)

    best = solve(problem(None))
    assert not best.stopped_at_limit and best.nodes is not None and best.nodes > 1
    plan = solve(problem(1))
    assert plan.stopped_at_limit and plan.fallback is None and plan.nodes == 1
    assert "node limit" in plan.message
    n = plan.replicas["s"]
    assert (2 * n["a"] + n["c"]).max() <= 15 and (2 * n["a"] + 3 * n["b"] + n["c"]).max() <= 15
    assert plan.cost >= best.cost - 1e-6


def test_no_plan_at_the_node_limit_falls_back_to_the_rounded_lp() -> None:
    # node_limit=0 stops HiGHS before its root node, with no plan. The LP relaxation serves 25 req/s
    # with 2.5 replicas of 10 req/s; rounded up, 3 from the first step (the step limit allows 3
    # orders), serving from step 2 (a 2-step start-up): the first two steps' demand is unserved.
    h = 5
    svc = PlanService("s", [variant("a", h, cap=10.0, hi=5, cold=2)], np.full(h, 25.0), miss_cost=1.0, max_up=3)
    plan = solve(PlanProblem([svc], 60.0, h, blocks=list(range(h)), node_limit=0))
    assert plan.stopped_at_limit and plan.fallback == "lp-rounded" and "lp-rounded" in plan.message
    assert list(plan.replicas["s"]["a"]) == [3] * h
    assert plan.unserved_rps["s"] == pytest.approx([25.0, 25.0, 0.0, 0.0, 0.0])
    assert covered_by_hand(plan.replicas["s"]["a"], 10.0, 0, 2)[2:].min() >= 25.0
    # the cost is the plan's own: 5 steps x 3 replicas x $1/h for a minute, and 2 minutes of 25 req/s missed
    assert plan.cost == pytest.approx(15 / 60 + 2 * 60 * 25 * 1.0)


def test_greedy_takes_the_cheapest_capacity_first_within_budget_and_step_limits() -> None:
    # "b": $3/h for 10 req/s ($0.30 per req/s) before "a": $2/h for 5 ($0.40). Demand 35 req/s from
    # step 2, a 2-step start-up: block 0 already looks at it. Hand: b to its cap of 3 (30 req/s), then
    # one a (35); at most 2 orders a step: b=2 first, then b=3 and a=1. With a budget of 3 GPUs, b alone.
    from models.planning import greedy_counts

    h = 4
    svc = PlanService("s", [variant("a", h, price=2.0, cap=5.0, hi=5, cold=2),
                            variant("b", h, price=3.0, cap=10.0, hi=3, cold=2)],
                      np.array([0.0, 0.0, 35.0, 35.0]), miss_cost=1.0, max_up=2)
    counts = greedy_counts(PlanProblem([svc], 60.0, h, blocks=list(range(h))))
    assert list(counts[0, 0]) == [0, 1, 1, 1] and list(counts[0, 1]) == [2, 3, 3, 3]
    unlimited = greedy_counts(PlanProblem([svc], 60.0, h, blocks=list(range(h))), limits=False)
    assert list(unlimited[0, 0]) == [1] * h and list(unlimited[0, 1]) == [3] * h
    budget = greedy_counts(PlanProblem([svc], 60.0, h, blocks=list(range(h)), gpu_budget=3), limits=False)
    assert list(budget[0, 0]) == [0] * h and list(budget[0, 1]) == [3] * h


def test_no_plan_at_the_time_limit_falls_back_to_the_greedy() -> None:
    # A zero time limit stops HiGHS (and the LP relaxation) at once. The greedy: 30 req/s at 10 per
    # replica is 3 replicas, ordered at once, serving after the 1-step start-up.
    h = 4
    svc = PlanService("s", [variant("a", h, cap=10.0, hi=5, cold=1)], np.full(h, 30.0), miss_cost=1.0)
    plan = solve(PlanProblem([svc], 60.0, h, blocks=list(range(h)), time_limit_s=0.0))
    assert plan.stopped_at_limit and plan.fallback == "greedy" and "time limit" in plan.message
    assert list(plan.replicas["s"]["a"]) == [3] * h
    assert plan.unserved_rps["s"] == pytest.approx([30.0, 0.0, 0.0, 0.0])


def test_the_greedy_removes_only_replicas_that_are_ready() -> None:
    # Three replicas starting, ready by step: 0, 1, 3; no demand. A removal takes a ready replica, so
    # the greedy removes none at step 0, one at step 1 (one ready), the other two at step 2.
    h = 3
    v = PlanVariant("a", "a", 1, 1.0, np.full(h, 10.0), 3, np.array([0.0, 1.0, 3.0]), 0, 5, 1, 2)
    svc = PlanService("s", [v], np.zeros(h), miss_cost=1.0)
    plan = solve(PlanProblem([svc], 60.0, h, blocks=list(range(h)), time_limit_s=0.0))
    assert plan.fallback == "greedy" and list(plan.replicas["s"]["a"]) == [3, 2, 0]


def test_the_greedy_reserves_what_other_services_cannot_remove_yet() -> None:
    # A budget of 4 GPUs, all held by service "a" (4 ready, no demand, one removal a step); "b" needs
    # 40 req/s at 10 per replica. Each step frees one GPU, which "b" takes: b 1, 2, 3, 4 while a goes
    # 3, 2, 1, 0, never more than 4 in all.
    h = 4
    a = PlanService("a", [variant("a", h, current=4, hi=5, gpu="g")], np.zeros(h), miss_cost=1.0, max_down=1)
    b = PlanService("b", [variant("b", h, hi=5, gpu="g")], np.full(h, 40.0), miss_cost=1.0)
    plan = solve(PlanProblem([b, a], 60.0, h, blocks=list(range(h)), gpu_budget=4, time_limit_s=0.0))  # b planned first
    assert plan.fallback == "greedy" and not plan.relaxed
    assert list(plan.replicas["a"]["a"]) == [3, 2, 1, 0] and list(plan.replicas["b"]["b"]) == [1, 2, 3, 4]


def test_a_problem_without_any_plan_stopped_at_its_limit_holds_todays_replicas() -> None:
    # Three replicas, none ready within the horizon, and a cap of 2: reaching the cap takes removing
    # one, and a removal takes a ready replica, so no plan exists. Solved to the end this raises;
    # stopped at a limit first, the planner cannot know that: it holds today's replicas and says so.
    h = 3
    svc = PlanService("s", [variant("a", h, current=3, ready=0, hi=2)], np.zeros(h), miss_cost=1.0)
    with pytest.raises(RuntimeError, match="no plan"):
        solve(PlanProblem([svc], 60.0, h, blocks=list(range(h))))
    plan = solve(PlanProblem([svc], 60.0, h, blocks=list(range(h)), time_limit_s=0.0))
    assert plan.stopped_at_limit and plan.fallback == "hold" and "hold" in plan.message
    assert list(plan.replicas["s"]["a"]) == [3, 3, 3]


def test_a_negative_node_limit_is_a_value_error() -> None:
    svc = PlanService("s", [variant("a", 3)], np.zeros(3), 1.0)
    with pytest.raises(ValueError, match="node_limit"):
        solve(PlanProblem([svc], 60.0, 3, node_limit=-1))


def test_a_decomposed_plan_carries_each_services_shed_column_within_the_shared_limits() -> None:
    # Four services under shared quotas, two of them may shed 30 % of their demand: planned service by
    # service, each keeps its demand covered (served + shed + missed), sheds within its bound, and the
    # services that may not shed have no shed column; the GPUs stay within the quotas and the budget,
    # and the cost is the joint optimum's within 1 % (the decomposition's documented tolerance).
    import dataclasses

    rng = np.random.default_rng(3)
    h = 12
    services = []
    for i in range(4):
        d = rng.uniform(10, 60, h)
        vs = [variant("a", h, price=3.0, cap=15.0, current=int(rng.integers(0, 3)), gpu="H100", hi=6, cold=2),
              variant("b", h, price=1.5, cap=6.0, current=int(rng.integers(0, 3)), gpu="GH200", hi=6, cold=3)]
        shed = {} if i % 2 else {"shed_rps": d * 0.3, "shed_cost": 0.0008}
        services.append(PlanService(f"s{i}", vs, d, 0.002, **shed))  # type: ignore[arg-type]
    joint_problem = PlanProblem(services, 60.0, h, gpu_quota={"H100": 8, "GH200": 10}, gpu_budget=15)
    joint = solve(joint_problem)
    plan = solve(dataclasses.replace(joint_problem, decompose=True))
    assert plan.message.startswith("decomposed")
    assert set(plan.shed_rps) == {"s0", "s2"} and plan.cost <= joint.cost * 1.01
    h100 = sum(plan.replicas[s.name]["a"] for s in services)
    gh200 = sum(plan.replicas[s.name]["b"] for s in services)
    assert h100.max() <= 8 and gh200.max() <= 10 and (h100 + gh200).max() <= 15
    for s in services:
        served = sum(v.capacity_rps * plan.serving[s.name][v.name] for v in s.variants)
        covered = served + plan.unserved_rps[s.name] + plan.shed_rps.get(s.name, 0.0)
        assert np.all(covered >= s.demand_rps - 1e-6)
        if s.shed_rps is not None:
            assert np.all(plan.shed_rps[s.name] <= s.shed_rps + 1e-6) and plan.shed_rps[s.name].max() > 0
