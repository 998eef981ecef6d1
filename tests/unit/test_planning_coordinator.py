"""The decomposition's coordinator LP from the last tick's basis (``PlanProblem.warm_coordinator``,
``mpc:joint_warm=1``; issue 28): the same LP optimum as the cold solve, plans that keep every joint
constraint at a cost the cold decomposition's own bounds hold, against optima found independently."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from test_planning_fast import brute_force, check, fleet, two_under_a_quota

from models import planning
from models.planning import PlanProblem, solve


def moved_on(problem: PlanProblem, seed: int) -> PlanProblem:
    """``problem`` with every service's demand redrawn within +-20 % (the same fleet, blocks and limits,
    so its coordinator LP has the same shape): a stand-in for the tick before."""
    rng = np.random.default_rng(seed)
    services = [dataclasses.replace(s, demand_rps=np.asarray(s.demand_rps) * rng.uniform(0.8, 1.2, problem.steps))
                for s in problem.services]
    return dataclasses.replace(problem, services=services)


def warm_plan(problem: PlanProblem, seed: int) -> planning.Plan:
    """``problem`` solved with the coordinator's LP from the basis the tick before (``moved_on``) ended at."""
    before = solve(dataclasses.replace(moved_on(problem, seed), warm_coordinator=True))
    assert before.coordinator_basis is not None and not before.coordinator_basis.warm  # the first tick: cold
    plan = solve(dataclasses.replace(problem, warm_coordinator=True, coordinator_basis=before.coordinator_basis))
    assert plan.coordinator_basis is not None and plan.coordinator_basis.warm, plan.message
    assert "from the last basis" in plan.message
    return plan


@pytest.mark.parametrize("seed", [1, 4, 10])
def test_a_warm_coordinator_keeps_the_quota_and_costs_near_the_brute_forced_optimum(seed: int) -> None:
    # Two services, two variants, three single-step blocks under a binding GH200 quota: every plan
    # enumerated (brute_force). Decomposed as the MPC solves (near the LP relaxation), the coordinator
    # from the last tick's basis: the LP relaxation it shares the limits on has the cold one's optimum
    # (Plan.lower_bound: the problem's own steps, 6 service-steps), and the plan keeps every
    # constraint (checked by hand) at a cost between the optimum and the optimum plus one replica of
    # every variant in every relaxed block (the bound the cold plans keep: rounding each relaxed count
    # up by less than one replica; with every block whole, 0 of them: the repair pass, _polish,
    # searches the joint problem whole around the plan and finds the optimum here).
    problem = two_under_a_quota(seed)
    optimum = brute_force(problem)
    for blocks in (None, 1, 2):
        shaped = dataclasses.replace(problem, integer_blocks=blocks, neighbourhood=0, decompose=True)
        cold, warm = solve(shaped), warm_plan(shaped, seed)
        assert warm.lower_bound is not None and cold.lower_bound is not None
        assert warm.lower_bound == pytest.approx(cold.lower_bound, rel=1e-9, abs=1e-9)
        cost = check(problem, warm)
        gh200 = np.sum([warm.replicas[s.name]["gh200"] for s in problem.services], axis=0)
        assert gh200.max() <= problem.gpu_quota["GH200"]
        relaxed = 0 if blocks is None else problem.steps - blocks
        extra = sum(v.price_per_hour * problem.dt_s / 3600 + v.start_cost
                    for s in problem.services for v in s.variants) * relaxed
        assert optimum - 1e-6 <= cost <= optimum + extra + 1e-6


@pytest.mark.parametrize("seed", range(8))
def test_a_warm_coordinator_on_the_blocks_lengths_stays_within_1_percent_of_the_joint_optimum(seed: int) -> None:
    # How 50 services are planned (the limits shared on the model on the blocks' lengths, coarsen=0;
    # each service near its relaxation), on 2-5 services whose quotas and budget bind, small enough
    # to solve jointly and exactly: with the coordinator from the last tick's basis the plan keeps
    # every joint constraint (checked by hand) within 1 % of the joint optimum, the bound the cold
    # coordinator keeps on these fleets (test_planning_fast, 24 problems).
    problem = fleet(700 + seed, services=2 + seed % 4)
    joint = solve(problem)
    plan = warm_plan(dataclasses.replace(problem, decompose=True, neighbourhood=0, coarsen=0), seed)
    assert "on the blocks' lengths" in plan.message
    cost = check(problem, plan)
    assert joint.cost - 1e-6 <= cost <= 1.01 * joint.cost


def test_the_coordinators_own_basis_needs_no_iteration_and_gives_the_cold_optimum_and_prices() -> None:
    # The LP solved from its own optimal basis: that basis is optimal already, so 0 simplex
    # iterations, and the same vertex: the same shares and prices. The cost is the cold linprog's.
    # The limits' prices (HiGHS's row duals, the sign linprog gives them) are complementary to the
    # shares: a price above 0 only where the shares fill the limit, and the quotas bind here, so
    # some price is above 0 (with the dual's sign the wrong way round, every price would read 0).
    # (The prices need not equal linprog's: this LP has several optimal duals.) A basis of an LP of
    # another shape (a fleet of two services against three) is not used: solved cold.
    problem = dataclasses.replace(fleet(305, services=3), decompose=True, neighbourhood=0, strengthen=True)
    keys = planning._limit_keys(problem)
    deadline = time.perf_counter() + 60.0
    cold = planning._shares(problem, keys, 1, deadline)
    first = planning._shares(dataclasses.replace(problem, warm_coordinator=True), keys, 1, deadline)
    assert cold is not None and first is not None and first[3] is not None and cold[3] is None
    again = planning._shares(dataclasses.replace(problem, warm_coordinator=True, coordinator_basis=first[3]),
                             keys, 1, deadline)
    assert again is not None and again[3] is not None
    assert again[3].warm and again[3].iterations == 0 and not first[3].warm and first[3].iterations > 0
    limit = planning._limits(problem, keys)
    np.testing.assert_array_equal(again[1], first[1])
    assert all(np.array_equal(a, b) for a, b in zip(again[0], first[0], strict=True))
    for coordinated in (first, again):
        assert coordinated[2] == pytest.approx(cold[2], rel=1e-9)
        used = np.sum(coordinated[0], axis=0)
        assert np.all(used <= limit + 1e-6)
        assert np.all(coordinated[1] >= 0) and coordinated[1].max() > 1e-6
        assert np.all(used[coordinated[1] > 1e-9] >= limit[coordinated[1] > 1e-9] - 1e-6)
    other = dataclasses.replace(fleet(306, services=2), decompose=True, neighbourhood=0, strengthen=True)
    mismatched = planning._shares(dataclasses.replace(other, warm_coordinator=True, coordinator_basis=first[3]),
                                  planning._limit_keys(other), 1, deadline)
    assert mismatched is not None and mismatched[3] is not None and not mismatched[3].warm


def test_a_basis_without_warm_coordinator_is_a_value_error() -> None:
    problem = dataclasses.replace(fleet(305, services=2), decompose=True)
    basis = solve(dataclasses.replace(problem, warm_coordinator=True)).coordinator_basis
    assert basis is not None and basis.iterations > 0 and not basis.warm  # solved, and cold: no basis before
    with pytest.raises(ValueError, match="coordinator_basis is read only with warm_coordinator=True"):
        solve(dataclasses.replace(problem, coordinator_basis=basis))


def test_a_basis_of_an_lp_of_the_same_shape_but_other_services_or_rows_is_not_used() -> None:
    # The same fleet under other names, and its services in the other order, give an LP of the same
    # shape (rows, columns) whose rows and columns belong to other services: the basis is not used
    # (solved cold, in as many iterations as without one); the same problem again uses it (0
    # iterations: its own optimal basis).
    problem = dataclasses.replace(fleet(305, services=3), decompose=True, neighbourhood=0, strengthen=True,
                                  warm_coordinator=True)
    keys = planning._limit_keys(problem)
    deadline = time.perf_counter() + 60.0
    first = planning._shares(problem, keys, 1, deadline)
    assert first is not None and first[3] is not None
    renamed = dataclasses.replace(problem, services=[dataclasses.replace(s, name=f"other-{s.name}")
                                                     for s in problem.services])
    reordered = dataclasses.replace(problem, services=list(reversed(problem.services)))
    for other in (renamed, reordered):
        cold = planning._shares(other, keys, 1, deadline)
        assert cold is not None and cold[3] is not None and cold[3].shape == first[3].shape
        got = planning._shares(dataclasses.replace(other, coordinator_basis=first[3]), keys, 1, deadline)
        assert got is not None and got[3] is not None
        assert not got[3].warm and got[3].iterations == cold[3].iterations > 0
    again = planning._shares(dataclasses.replace(problem, coordinator_basis=first[3]), keys, 1, deadline)
    assert again is not None and again[3] is not None and again[3].warm and again[3].iterations == 0
    # each service's rows in the fingerprint: those of the service's LP built alone (less its limit rows)
    alone = []
    for svc in problem.services:
        one = dataclasses.replace(problem, services=[svc])
        _, cons, _, _ = planning._build(one, True)
        alone.append(cons.A.shape[0] - len(planning._limit_keys(one)) * planning._Index(one).nb)
    assert first[3].fingerprint[3] == tuple(alone) and sum(alone) > 0


def test_the_warm_coordinators_highs_options_are_linprogs_highs_ds_with_coordinator_options() -> None:
    # WARM_COORDINATOR_OPTIONS is derived from COORDINATOR_OPTIONS through HiGHS's values, which must
    # be the ones scipy's own linprog passes (its _linprog_highs maps the names to these constants).
    constants = pytest.importorskip("scipy.optimize._highspy._core").simplex_constants
    weights = constants.SimplexEdgeWeightStrategy
    assert {
        "steepest-devex": int(weights.kSimplexEdgeWeightStrategyChoose),
        "dantzig": int(weights.kSimplexEdgeWeightStrategyDantzig),
        "devex": int(weights.kSimplexEdgeWeightStrategyDevex),
        "steepest": int(weights.kSimplexEdgeWeightStrategySteepestEdge)} == planning.EDGE_WEIGHT_STRATEGIES
    assert int(constants.SimplexStrategy.kSimplexStrategyDual) == planning.DUAL_SIMPLEX_STRATEGY
    warm = planning.WARM_COORDINATOR_OPTIONS
    assert warm["solver"] == "simplex" and warm["simplex_strategy"] == planning.DUAL_SIMPLEX_STRATEGY
    assert warm["simplex_dual_edge_weight_strategy"] == planning.EDGE_WEIGHT_STRATEGIES[
        str(planning.COORDINATOR_OPTIONS["simplex_dual_edge_weight_strategy"])]
    assert set(planning.COORDINATOR_OPTIONS) <= set(warm)


def test_without_scipys_highs_build_or_without_decompose_the_plan_is_the_cold_ones() -> None:
    # scipy's HiGHS build unreachable (as where scipy moves it): warm_coordinator falls back to
    # linprog, the plan the cold one's to the replica, no basis, and the message says so. Without
    # decompose there is no coordinator: warm_coordinator is ignored, the plan the same as without.
    # (Every HiGHS call then goes through scipy's public milp and linprog, the cold plan too.)
    problem = dataclasses.replace(fleet(305, services=2), decompose=True, neighbourhood=0)
    planning._settable.cache_clear()  # it caches whether the build is reachable
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(planning, "_core", None)
            cold = solve(problem)
            fallen = solve(dataclasses.replace(problem, warm_coordinator=True))
    finally:
        planning._settable.cache_clear()
    assert "coordinator's LP" not in cold.message
    assert fallen.coordinator_basis is None
    assert "scipy's HiGHS build unreachable: the coordinator's LP solved cold through linprog" in fallen.message
    assert fallen.replicas.keys() == cold.replicas.keys()
    for name, variants in cold.replicas.items():
        for v, n in variants.items():
            np.testing.assert_array_equal(fallen.replicas[name][v], n)
    assert fallen.cost == cold.cost
    whole = dataclasses.replace(problem, decompose=False)
    plain, ignored = solve(whole), solve(dataclasses.replace(whole, warm_coordinator=True))
    assert ignored.coordinator_basis is None and "coordinator's LP" not in ignored.message
    assert ignored.cost == plain.cost and ignored.message == plain.message


def looped_complete(problem: PlanProblem, counts: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
    """``planning._complete`` as it was at f03142d, whole (a copy: the step loop it had before it
    worked out every step at once): every variable of the plan, not only the serving counts."""
    idx = planning._Index(problem)
    h = problem.steps
    x = np.zeros(idx.size)
    for i, svc in enumerate(problem.services):
        served = np.zeros(h)
        pools = {role: np.zeros(h) for role in planning.ROLES}
        for j, v in enumerate(svc.variants):
            n = np.asarray(counts[i, j], dtype=float)
            cum = np.zeros((planning.BLOCK_VARS, idx.nb))
            prev, cw, cc, cd = float(v.current), 0.0, 0.0, 0.0
            for b in range(idx.nb):
                d = n[b] - prev
                if d > 0:
                    warm = min(d, max(0.0, v.warm_free - cw))
                    cw, cc = cw + warm, cc + d - warm
                else:
                    cd -= d
                cum[:, b] = (n[b], cw, cc, cd)
                prev = n[b]
            for kind in range(planning.BLOCK_VARS):
                x[idx.var(i, j, kind, 0):idx.var(i, j, kind, 0) + idx.nb] = cum[kind]
            for k in range(h):
                ready = v.ready[k] - cum[planning.CD, idx.block_of[k]]
                for kind, steps in ((planning.CW, v.warm_steps), (planning.CC, v.cold_steps)):
                    if k - steps >= 0:
                        ready += cum[kind, idx.block_of[k - steps]]
                s = max(0.0, min(n[idx.block_of[k]], ready))
                x[idx.s(i, j, k)] = s
                (served if v.role is None else pools[v.role])[k] += v.capacity_rps[k] * s
        demand = np.asarray(svc.demand_rps, dtype=float)
        if i in idx.pd:
            pd = np.minimum(np.minimum(pools["prefill"], pools["decode"]), np.maximum(demand, 0.0))
            x[idx.pd[i]:idx.pd[i] + h] = pd
            served = served + pd
        left = np.maximum(demand - served, 0.0)
        if i in idx.shed and svc.shed_cost < svc.miss_cost:
            shed = np.minimum(left, np.asarray(svc.shed_rps, dtype=float))
            x[idx.shed[i]:idx.shed[i] + h] = shed
            left = left - shed
        x[idx.u(i, 0):idx.u(i, 0) + h] = left
    return x


@pytest.mark.parametrize("seed", range(6))
def test_complete_gives_every_variable_as_the_step_by_step_loop_did_to_the_bit(seed: int) -> None:
    # _complete works out every step's serving count at once (the decomposition calls it about 350
    # times a 50-service solve): the whole array the same to the bit as f03142d's loop over the
    # steps (looped_complete), on fractional counts (so the order of each sum shows), fractional
    # ready counts, some of them negative, start-ups of 0 to past the 24-step horizon and few warm nodes
    # (the loop's order of additions shows: adding the cold orders before the warm ones fails it).
    rng = np.random.default_rng(seed)
    problem = fleet(900 + seed, services=3, h=24)
    services = []
    for svc in problem.services:
        variants = [dataclasses.replace(v, warm_steps=int(rng.integers(0, 28)), cold_steps=int(rng.integers(0, 28)),
                                        warm_free=int(rng.integers(0, 3)),
                                        ready=rng.uniform(-2, 5, problem.steps))
                    for v in svc.variants]
        services.append(dataclasses.replace(svc, variants=variants))
    problem = dataclasses.replace(problem, services=services)
    nb = planning._Index(problem).nb
    for _ in range(20):
        counts = {(i, j): rng.uniform(0, 8, nb)
                  for i, svc in enumerate(problem.services) for j in range(len(svc.variants))}
        assert planning._complete(problem, counts).tobytes() == looped_complete(problem, counts).tobytes()
