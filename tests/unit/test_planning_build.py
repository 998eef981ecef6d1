"""The planner's model built in bulk (``models.planning._build``: the block rows from one pattern per
block count, the step limits and the valid inequalities of a service's steps at once) against the
row-by-row build of commit c5ad9fc (``tests.support.old_build``, its code verbatim but for the MIR rows'
clamp and margin, made in both): the same objective,
bounds, integrality, row bounds and matrix to the bit (indices, values and their dtypes; the GPU rows
``_usage`` makes too), so HiGHS gets
the same model and the same plan, on random problems that reach every kind of row (shedding, prefill/
decode pools with and without a ratio, fractional ready counts, blocks of other lengths, relaxed
blocks, the caps a decomposed solve sets, the blocks' lengths as step weights, the hull rows, with
and without the step limits), and whole solves of small fleets against the old build's plans."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import sparse
from support.old_build import OldRows, old_build, old_usage

from models import planning
from models.planning import PlanProblem, PlanService, PlanVariant


def _variant(rng: np.random.Generator, h: int, name: str, role: str | None, fractional: bool) -> PlanVariant:
    current = int(rng.integers(0, 5))
    ready = np.full(h, float(current))
    if fractional:
        ready = ready + 0.5
    cap = rng.choice([6.4, 15.8, 7.9, 3.0, 0.0], size=h) if rng.random() < 0.3 else np.full(h, rng.choice([6.4, 15.8,
                                                                                                           12.5]))
    return PlanVariant(name, str(rng.choice(["H100", "A100", "GH200"])), int(rng.integers(1, 3)),
                       float(rng.uniform(1, 3)), cap, current, ready, int(rng.integers(0, 2)), int(rng.integers(6, 12)),
                       int(rng.integers(1, 7)), int(rng.integers(3, 21)), int(rng.integers(0, 4)),
                       int(rng.integers(0, 2)), float(rng.uniform(0, 0.3)), float(rng.uniform(0, 0.1)), role)


def random_problem(seed: int) -> PlanProblem:
    """A random fleet reaching every kind of row ``_build`` makes (module docstring)."""
    rng = np.random.default_rng(seed)
    h = int(rng.choice([1, 5, 12, 40]))
    services = []
    for i in range(int(rng.integers(1, 4))):
        pools = rng.random() < 0.3
        roles: list[str | None] = [None] * int(rng.integers(1, 4))
        if pools:
            roles = [r for r in roles[:int(rng.integers(0, 2))]] + ["prefill", "decode"]
        fractional = rng.random() < 0.15
        variants = [_variant(rng, h, f"v{j}", role, fractional) for j, role in enumerate(roles)]
        demand = np.clip(rng.uniform(5, 60) + np.cumsum(rng.normal(0, 4, h)), 0, None)
        demand[rng.random(h) < 0.1] = 15.8 * 2  # a whole multiple of a capacity: no rounding row there
        shed = np.minimum(demand, rng.uniform(0, 10, h)) if rng.random() < 0.3 else None
        services.append(PlanService(f"s{i}", variants, demand, float(rng.uniform(0.01, 0.05)),
                                    max_up=None if rng.random() < 0.2 else int(rng.integers(1, 9)),
                                    max_down=None if rng.random() < 0.2 else int(rng.integers(1, 4)),
                                    shed_rps=shed, shed_cost=0.005,
                                    pd_ratio=(0.5, 2.0) if pools and rng.random() < 0.5 else None))
    blocks = None
    if h > 1 and rng.random() < 0.3:
        blocks = sorted({0, *rng.integers(1, h, size=int(rng.integers(1, h))).tolist()})
    strengthen = [None, True, False][int(rng.integers(0, 3))]
    tuned = rng.random() < 0.3
    return PlanProblem(services, 15.0, h, gpu_quota={"GH200": 10, "H100": 8} if rng.random() < 0.6 else {},
                       gpu_budget=int(rng.integers(10, 30)) if rng.random() < 0.5 else None, blocks=blocks,
                       integer_blocks=int(rng.integers(1, 4)) if rng.random() < 0.3 else None, strengthen=strengthen,
                       neighbourhood=0 if rng.random() < 0.5 else None, tuned=tuned, hull=tuned and rng.random() < 0.7)


def assert_same_model(new: planning.Model, old: planning.Model) -> None:
    """Every array of the two models equal to the bit, the matrix's CSR arrays and dtypes included."""
    for a, b in ((new[0], old[0]), (new[2].lb, old[2].lb), (new[2].ub, old[2].ub), (new[3], old[3]),
                 (new[1].lb, old[1].lb), (new[1].ub, old[1].ub)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    an, ao = sparse.csr_array(new[1].A), sparse.csr_array(old[1].A)
    assert an.shape == ao.shape
    for x, y in ((an.indptr, ao.indptr), (an.indices, ao.indices), (an.data, ao.data)):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


def _kinds(problem: PlanProblem) -> set[str]:
    """Which kinds of row ``random_problem`` drew for ``problem`` (to check the draw reaches them all)."""
    kinds = set()
    for svc in problem.services:
        kinds |= {"shed"} if svc.shed_rps is not None else set()
        kinds |= {"pools"} if planning._has_roles(svc) else set()
        kinds |= {"ratio"} if svc.pd_ratio is not None else set()
        kinds |= {"no limit"} if svc.max_up is None or svc.max_down is None else set()
        kinds |= {"fractional"} if any(np.any(v.ready % 1) for v in svc.variants) else set()
    kinds |= {"blocks"} if problem.blocks is not None else set()
    kinds |= {"relaxed"} if problem.integer_blocks is not None else set()
    kinds |= {"hull"} if problem.hull and problem.tuned else set()
    kinds |= {"strengthened"} if planning._strengthened(problem) else set()
    return kinds


def test_the_bulk_build_is_the_row_by_row_build_to_the_bit() -> None:
    seen: set[str] = set()
    for seed in range(160):
        problem = random_problem(seed)
        seen |= _kinds(problem)
        for limits in (True, False):
            assert_same_model(planning._build(problem, limits), old_build(problem, limits))
        keys = planning._limit_keys(problem)
        nb = planning._Index(problem).nb
        caps = {key: np.arange(nb, dtype=float) + 3 for key in keys}
        assert_same_model(planning._build(problem, True, caps), old_build(problem, True, caps))
        blocked, weights = planning._blocked(problem)
        assert_same_model(planning._build(blocked, True, weights=weights), old_build(blocked, True, weights=weights))
        for svc in problem.services:  # each service's own GPU rows (the decomposition's), every type asked
            sub = dataclasses.replace(problem, services=[svc])
            new_use = planning._usage(sub, ["A100", "GH200", "H100", None])
            old_use = old_usage(sub, ["A100", "GH200", "H100", None])
            for x, y in ((new_use.indptr, old_use.indptr), (new_use.indices, old_use.indices),
                         (new_use.data, old_use.data)):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
            assert new_use.shape == old_use.shape
    assert seen == {"shed", "pools", "ratio", "no limit", "fractional", "blocks", "relaxed", "hull", "strengthened"}


def test_the_comparison_sees_a_changed_bound_or_coefficient() -> None:
    # The check above is not blind: the old build of a problem one replica, one ready count or one
    # request/s of demand away differs from the new build of the first.
    problem = random_problem(3)
    svc = problem.services[0]
    v = svc.variants[0]
    moved = [dataclasses.replace(v, current=v.current + 1), dataclasses.replace(v, ready=v.ready + 1.0),
             dataclasses.replace(v, capacity_rps=v.capacity_rps * 1.01)]
    others = [dataclasses.replace(problem, services=[dataclasses.replace(svc, variants=[m, *svc.variants[1:]]),
                                                     *problem.services[1:]]) for m in moved]
    others.append(dataclasses.replace(problem, services=[dataclasses.replace(svc, demand_rps=svc.demand_rps + 1.0),
                                                         *problem.services[1:]]))
    new = planning._build(problem, True)
    for other in others:
        with pytest.raises(AssertionError):
            assert_same_model(new, old_build(other, True))


def test_rows_appended_in_bulk_are_the_rows_appended_one_by_one() -> None:
    # _Rows.add_rows and add_entries against the old row-by-row _Rows: the same entries in order.
    rng = np.random.default_rng(5)
    for _ in range(50):
        n_rows, n_terms = int(rng.integers(1, 7)), int(rng.integers(1, 5))
        cols = [np.where(rng.random(n_rows) < 0.3, -1, rng.integers(0, 40, n_rows)) for _ in range(n_terms)]
        vals: list[np.ndarray | float] = [rng.normal(size=n_rows) if t % 2 else float(t + 1) for t in range(n_terms)]
        lb, ub = rng.normal(size=n_rows), np.full(n_rows, np.inf)
        bulk, one = planning._Rows(), OldRows()
        bulk.add([(3, 2.0)], 0.0, 1.0)  # a row before: the new rows' numbers start after it
        one.add([(3, 2.0)], 0.0, 1.0)
        bulk.add_rows(cols, vals, lb, ub)
        for r in range(n_rows):
            terms = [(int(cols[t][r]), float(np.broadcast_to(vals[t], (n_rows,))[r]))
                     for t in range(n_terms) if cols[t][r] >= 0]
            one.add(terms, float(lb[r]), float(ub[r]))
        assert bulk.entries() == (one.rows, one.cols, one.vals, one.lb, one.ub)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decomposed_plans_are_the_old_builds_plans(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Five services under shared quotas, solved as the MPC solves them (decomposed near the LP
    # relaxation, two whole blocks) on four ticks of moving demand, with the bulk build and with the
    # old one put in its place: the same plans to the bit (replicas, serving, cost, prices).
    rng = np.random.default_rng(seed)
    h = 12
    services = []
    for i in range(5):
        variants = [PlanVariant(name, gpu, 1, price, np.full(h, cap), n, np.full(h, float(n)), 0, 12, 2, 6,
                                max(0, 4 - n), 0, price * 300 / 3600)
                    for (name, gpu, price, cap), n in zip((("h100", "H100", 2.99, 15.8), ("a100", "A100", 1.79, 6.4),
                                                          ("gh200", "GH200", 1.49, 15.8)),
                                                         rng.integers(0, 4, 3).tolist(), strict=True)]
        services.append(PlanService(f"s{i}", variants, rng.uniform(10, 60, h), 10 * 2.99 / 3600 / 6.4,
                                    max_up=4, max_down=2))
    problem = PlanProblem(services, 15.0, h, gpu_quota={"H100": 6, "GH200": 8}, gpu_budget=24, integer_blocks=2,
                          decompose=True, neighbourhood=0, coarsen=0)
    for tick in range(4):
        moved = [dataclasses.replace(s, demand_rps=np.asarray(s.demand_rps) * (1 + 0.1 * tick)) for s in services]
        tick_problem = dataclasses.replace(problem, services=moved)
        new = planning.solve(tick_problem)
        with monkeypatch.context() as m:
            m.setattr(planning, "_build", old_build)
            old = planning.solve(tick_problem)
        assert new.cost == old.cost and new.message == old.message
        for name, variants in old.replicas.items():
            for vname, n in variants.items():
                assert new.replicas[name][vname].tobytes() == n.tobytes()
                assert new.serving[name][vname].tobytes() == old.serving[name][vname].tobytes()
        assert new.gpu_prices is not None and old.gpu_prices is not None
        assert all(new.gpu_prices[k].tobytes() == old.gpu_prices[k].tobytes() for k in old.gpu_prices)
