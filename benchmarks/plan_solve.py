"""Benchmark: solve time of the MPC's plan (``models.planning``), one service and many under shared quotas.

Problems are drawn from a seed: each service has the example fleet's three variants (H100 $2.99, A100
$1.79, GH200 $1.49 with 15.8, 6.4 and 15.8 req/s per replica, 90-s warm and 300-s cold starts, 4 warm
nodes), today's replicas drawn in 0..6, and a 40-step demand path of 15-s steps: a random walk around
a level drawn in 20..120 req/s. Shared across services: H100 and GH200 GPU quotas of 40 % of what
every service's peak would need of them, and a GPU budget of 80 % (never below what the services hold
today, so a plan exists within the step limits), so the quotas bind.

Prints p50 / p99 / max solve time (milliseconds; wall, and the process's CPU time, which load from
other processes on the machine moves less) per size over ``--trials`` problems, and how many plans
had the step limits relaxed, stopped at the solver's limit (``--node-limit``: branch-and-bound
nodes; the 60-s time limit) and were a fallback (``models.planning``), by kind. ``--mpc`` solves as
the MPC does (one service exactly, ``PlanProblem.tuned``; several ``--neighbourhood 0``, and
``--decompose`` above ``JOINT_UP_TO`` services x steps);
without options, the exact joint MILP (as the oracle does). ``--vs-exact`` also solves each problem
exactly and jointly (``--exact-time-limit``, 60 s; ``--exact-cache`` keeps the optima found, as a
50-service one takes minutes) and prints the cost over that optimum (p50 / max / each); with
``--first-step`` also how many plans' first step (what the MPC applies) is the exact plan's, and the
first step's regret: the exact optimum with the plan's first step fixed, over the optimum (p50 /
max). ``--integer-blocks K`` keeps the first K blocks integer (``mpc:int_blocks=K`` with ``--mpc``), and
``--tail-up`` prices the rest rounded up (``mpc:int_up=1``);
the fallbacks column counts "tail solved whole" where no rounding of the relaxed blocks kept the
constraints. ``--coarsen``
picks the steps a decomposed solve shares the limits on, ``--count`` the problems per size. Goals
(issues 13 and 28):
1 service x 3 variants x 40 steps p99 <= 50 ms; 50 services p99 <= 2 s.

``--paired K`` solves each problem as the MPC does (``--mpc``) and again with the first K blocks
integer (``mpc:int_blocks=K`` for one service, ``mpc:joint_blocks=K`` for several), the order
alternated problem by problem so that machine load falls on both alike: CPU p50 / p99 / max of each,
K's plan cost over the MPC's (p50 / max / min), and how many plans of each kept the shared GPU quotas
and budget at every step.

``--lever NAME`` solves each of ``--trials`` one-service problems (those of ``--mpc --sizes 1``, the
same seed) as the MPC does (the tuned exact search) and again with one lever of ``ONE_SERVICE_LEVERS``
(HiGHS options, the demand rows' hull, a MIP start), the order alternated problem by problem (the
start levers' base first: its plan is the start): CPU p50
/ p99 / max of each, how many plans' replica counts are not the base's, the lever's cost over the
base's on those, and the largest relative cost difference over all.

``--coordinator-warm K`` times several services (``--sizes``) on consecutive ticks: ``--count`` runs
(default 1) of ``--ticks``, each run from a problem drawn as above and moved on tick by tick as
``--warm`` moves one service (``next_joint_tick``), the shared limits kept. Each tick is solved as the
MPC solves it with ``mpc:joint_blocks=K`` (0: every block integer; decomposed, ``--neighbourhood
0``), once with the coordinator's LP cold (as the MPC solves today) and once from the last tick's
basis (``PlanProblem.warm_coordinator``), the order alternated tick by tick: CPU p50 / p99 / max of
each, the warm solve's p99 over the ticks that had a basis, how many used one, the warm solve's
simplex iterations (p50 / max) on those ticks and on the others (a run's first, cold through scipy's
HiGHS build), the warm plan's cost over the cold one's (p50 / max / min), how many plans were the
cold one's to the replica, and how many kept the limits. The next tick follows the cold plan. Every
size must be 2 or more; ``--warm`` and ``--paired`` are refused beside it.

``--warm`` times the one-service solve on consecutive ticks, where ``mpc:warm=1`` starts each solve from
its last plan (``PlanProblem.solver`` and ``start``): ``--trials`` ticks in runs of ``--ticks``, each run
from a problem drawn as above; from tick to tick the demand path moves on one step and its new last
step continues the walk (standard deviation a twentieth of the first path's mean), today's replicas
are the last plan's first step (each increase ordered warm while warm nodes are free, else cold;
ready as its start-up ends; a decrease a ready replica removed) and the last plan, moved on one step
(``models.planning.shifted``), is the start. Each tick is solved by every solver of ``SOLVERS``
(with ``--levers``, ``LEVERS`` too), in turn, the order rotated tick by tick so that machine load
falls on all alike: wall and CPU p50 / p99 / max, the CPU p99 of the ticks with a start (a run's
first has none), how many started, and each solver's largest relative cost difference from
``scipy`` (the exact solve as the MPC made it before: every one of them solves to the same gap, so
a difference above 1e-4 is a wrong plan). The next tick follows the ``warm`` solver's plan.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds

from models import planning
from models.planning import JOINT_UP_TO, Plan, PlanProblem, PlanService, PlanVariant, shifted, solve

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

STEPS = 40
DT_S = 15.0
VARIANTS = (("h100", "H100", 2.99, 15.8), ("a100", "A100", 1.79, 6.4), ("gh200", "GH200", 1.49, 15.8))


def service(i: int, rng: np.random.Generator) -> PlanService:
    level = rng.uniform(20, 120)
    demand = np.clip(level + np.cumsum(rng.normal(0, level / 20, STEPS)), 0, None)
    variants = []
    for name, gpu, price, cap in VARIANTS:
        n = int(rng.integers(0, 7))
        variants.append(PlanVariant(name, gpu, 1, price, np.full(STEPS, cap), n, np.full(STEPS, float(n)), 0, 40,
                                    math.ceil(90 / DT_S), math.ceil(300 / DT_S), max(0, 4 - n), 0,
                                    price * 300 / 3600))
    miss = 10 * max(p / 3600 / c for _, _, p, c in VARIANTS)
    return PlanService(f"s{i}", variants, demand, miss, max_up=8, max_down=2)


def problem(n_services: int, rng: np.random.Generator, integer_blocks: int | None = None,
            gap: float = 1e-4, node_limit: int | None = None, **options: object) -> PlanProblem:
    services = [service(i, rng) for i in range(n_services)]
    peak_gpus = sum(math.ceil(s.demand_rps.max() / 15.8) for s in services)
    held = {gpu: sum(v.current for s in services for v in s.variants if v.gpu == gpu) for _, gpu, _, _ in VARIANTS}
    quota = {gpu: max(held[gpu], int(0.4 * peak_gpus)) for gpu in ("H100", "GH200")}  # never below today's
    budget = max(sum(held.values()), int(0.8 * peak_gpus)) if n_services > 1 else None
    return PlanProblem(services, DT_S, STEPS, gpu_quota=quota if n_services > 1 else {}, gpu_budget=budget,
                       integer_blocks=integer_blocks, time_limit_s=60.0, mip_rel_gap=gap, node_limit=node_limit,
                       **options)  # type: ignore[arg-type]


def first_step(plan: Plan) -> dict[str, dict[str, int]]:
    """``plan``'s first step: service -> variant -> replicas (what the MPC applies)."""
    return {s: {v: int(n[0]) for v, n in vs.items()} for s, vs in plan.replicas.items()}


def fixed_first_cost(prob: PlanProblem, plan: Plan) -> float:
    """The cost of the cheapest plan of ``prob`` (exactly, to its gap) whose first block is ``plan``'s
    first step: over the optimum's cost, what ``plan``'s first step costs an MPC that plans the rest
    exactly (``--first-step``). Raises RuntimeError when HiGHS finds none (the step was infeasible)."""
    c, cons, bounds, integral = planning._build(prob, True)
    idx = planning._Index(prob)
    lo, hi = np.array(bounds.lb, dtype=float), np.array(bounds.ub, dtype=float)
    for i, svc in enumerate(prob.services):
        for j, v in enumerate(svc.variants):
            col = idx.var(i, j, planning.N, 0)
            lo[col] = hi[col] = plan.replicas[svc.name][v.name][0]
    res = planning._milp(c, cons, Bounds(lo, hi), integral,
                         {"time_limit": prob.time_limit_s, "mip_rel_gap": prob.mip_rel_gap})
    if res.x is None:
        raise RuntimeError(f"no plan with the first step fixed: {res.message}")
    return float(res.fun)


def next_tick(prob: PlanProblem, plan: Plan, sd: float, rng: np.random.Generator) -> PlanProblem:
    """The one-service ``prob`` one step later, after ``plan``'s first step (module docstring, ``--warm``)."""
    svc = prob.services[0]
    demand = np.append(svc.demand_rps[1:], max(0.0, float(svc.demand_rps[-1]) + rng.normal(0.0, sd)))
    k = np.arange(prob.steps)
    variants = []
    for v in svc.variants:
        n = int(plan.replicas[svc.name][v.name][0])
        warm = min(max(0, n - v.current), v.warm_free)
        cold, removed = max(0, n - v.current) - warm, max(0, v.current - n)
        ready = (np.append(v.ready[1:], v.ready[-1]) - removed + warm * (k >= v.warm_steps - 1)
                 + cold * (k >= v.cold_steps - 1))
        variants.append(dataclasses.replace(v, current=n, ready=np.clip(ready, 0, n), warm_free=v.warm_free - warm))
    return dataclasses.replace(prob, services=[dataclasses.replace(svc, variants=variants, demand_rps=demand)])


SOLVERS: dict[str, dict[str, object]] = {
    "scipy": {},  # the exact solve as the MPC made it before issue 28's tuning: scipy.optimize.milp, HiGHS's options
    "tuned": {"tuned": True},  # the MPC's now: the valid inequalities and TUNED_OPTIONS, through scipy
    "warm": {"tuned": True, "solver": "highspy", "start": True},  # mpc:warm=1: through highspy from the last plan
}
"""``--warm``'s solvers: ``PlanProblem`` fields (``start``: the last plan moved on), and with
``options``, ``TUNED_OPTIONS`` replaced for that solve (``cutoff``: the start's cost as HiGHS's
``objective_bound``, the start itself not given)."""

NO_HEURISTICS = {"mip_heuristic_effort": 0.0, "mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False,
                 "mip_heuristic_run_feasibility_jump": False, "mip_heuristic_run_root_reduced_cost": False}
HIGHSPY = {"tuned": True, "solver": "highspy"}
TUNED = planning.TUNED_OPTIONS
LEVERS: dict[str, dict[str, object]] = {
    "highspy": {**HIGHSPY, "strengthen": False, "options": {"threads": 1}},
    "highspy, start": {**HIGHSPY, "start": True, "strengthen": False, "options": {"threads": 1}},
    "highspy, start, cuts": {**HIGHSPY, "start": True, "options": {"threads": 1}},
    "highspy, start, no heuristics": {**HIGHSPY, "start": True, "strengthen": False,
                                      "options": {"threads": 1, **NO_HEURISTICS}},
    "highspy, start, pool 1": {**HIGHSPY, "start": True, "strengthen": False,
                               "options": {"threads": 1, "mip_pool_soft_limit": 1}},
    "highspy tuned, no start": HIGHSPY,
    "highspy tuned, cutoff": {**HIGHSPY, "cutoff": True},
    "scipy, cuts": {"tuned": True, "options": {"threads": 1}},
    "scipy, no heuristics": {"tuned": True, "strengthen": False, "options": {"threads": 1, **NO_HEURISTICS}},
    "scipy, pool 1": {"tuned": True, "strengthen": False, "options": {"threads": 1, "mip_pool_soft_limit": 1}},
    "scipy, cuts, no heuristics": {"tuned": True, "options": {"threads": 1, **NO_HEURISTICS}},
    "warm, no symmetry": {**SOLVERS["warm"], "options": {**TUNED, "mip_detect_symmetry": False}},
    "warm, default pool": {**SOLVERS["warm"], "options": {**TUNED, "mip_pool_soft_limit": 10000}},
    "warm, lp age 1": {**SOLVERS["warm"], "options": {**TUNED, "mip_lp_age_limit": 1, "mip_pool_age_limit": 1}},
    "warm, no restart": {**SOLVERS["warm"], "options": {**TUNED, "mip_allow_restart": False}},
    "warm, no presolve": {**SOLVERS["warm"], "options": {**TUNED, "presolve": False}},
    "warm, no lifting": {**SOLVERS["warm"], "options": {**TUNED, "mip_lifting_for_probing": 0}},
    "tuned, default pool": {"tuned": True, "options": {**TUNED, "mip_pool_soft_limit": 10000}},
    "tuned, hull": {"tuned": True, "hull": True},
    "1 block integer": {"tuned": True, "integer_blocks": 1},
    "2 blocks integer": {"tuned": True, "integer_blocks": 2},
    "4 blocks integer": {"tuned": True, "integer_blocks": 4},
}
"""``--levers``: the tuned search's levers one at a time; ``highspy`` alone is HiGHS's own options
but one thread (a thread count other than the first solve's makes highspy reset its scheduler).
``mip_lifting_for_probing`` is highspy's only: scipy 1.17's HiGHS 1.12 has no such option.
``tuned, hull``: the tuned search with the demand rows' hull facets in place of the MIR rows where
the variants have two capacities (``PlanProblem.hull``, opt-in). ``K block(s) integer``: only the
first K blocks integer, the rest relaxed and rounded (``PlanProblem.integer_blocks``, ``mpc:int_blocks=K``;
its plans differ from the exact one's, so its cost difference is reported, not a wrong plan)."""


def warm_runs(args: argparse.Namespace) -> None:
    """``--warm`` (module docstring)."""
    solvers = {**SOLVERS, **LEVERS}
    names = list(SOLVERS) + list(LEVERS if args.levers else args.also)
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    cpu_started: dict[str, list[float]] = {k: [] for k in names}
    started = Counter[str]()
    diff = dict.fromkeys(names, 0.0)
    rng = np.random.default_rng((args.seed, 1))
    default_options = dict(planning.TUNED_OPTIONS)
    if args.threads is not None:
        default_options["threads"] = args.threads
    offered = 0
    plans: dict[str, Plan] = {}
    for tick in range(args.trials):
        if tick % args.ticks == 0:
            prob = problem(1, rng, gap=args.gap, node_limit=args.node_limit)
            sd, start = float(np.mean(prob.services[0].demand_rps)) / 20.0, None
        else:
            prob = next_tick(prob, plans["warm"], sd, rng)
            start = shifted(plans["warm"].replicas, 1, STEPS)
            offered += 1
        plans = {}
        for name in names[tick % len(names):] + names[:tick % len(names)]:
            how = solvers[name]
            fields = {k: v for k, v in how.items() if k in ("tuned", "solver", "strengthen", "hull", "integer_blocks")}
            drawn = dataclasses.replace(prob, **fields, start=start if how.get("start") else None)  # type: ignore[arg-type]
            options = dict(how.get("options", default_options))  # type: ignore[call-overload]
            if args.threads is not None:
                options["threads"] = args.threads
            if how.get("cutoff") and start is not None:
                c, cons, bounds, _ = planning._build(drawn, True)
                x, _ = planning._start_x(dataclasses.replace(drawn, start=start), cons, bounds)
                if x is not None:
                    options["objective_bound"] = float(c @ x) * (1 + 1e-9)
            planning.TUNED_OPTIONS = options
            try:
                t0, c0 = time.perf_counter(), time.process_time()
                plans[name] = solve(drawn)
                cpu_ms = (time.process_time() - c0) * 1000.0
                wall[name].append((time.perf_counter() - t0) * 1000.0)
            finally:
                planning.TUNED_OPTIONS = TUNED
            cpu[name].append(cpu_ms)
            if start is not None:
                cpu_started[name].append(cpu_ms)
            started[name] += plans[name].started
        for name in names:
            diff[name] = max(diff[name], abs(plans[name].cost - plans["scipy"].cost) / plans["scipy"].cost)
    print(f"one service, {args.trials} ticks in runs of {args.ticks} ({offered} with a start); ms")
    print("| solver | p50 | p99 | max | cpu p50 | cpu p99 | cpu max | cpu p99 started | started "
          "| cost vs scipy, max rel. diff |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        w50, w99 = np.percentile(wall[name], [50, 99])
        c50, c99 = np.percentile(cpu[name], [50, 99])
        s99 = np.percentile(cpu_started[name], 99) if cpu_started[name] else math.nan
        print(f"| {name} | {w50:.0f} | {w99:.0f} | {max(wall[name]):.0f} | {c50:.0f} | {c99:.0f} "
              f"| {max(cpu[name]):.0f} | {s99:.0f} | {started[name]}/{offered} | {diff[name]:.1e} |", flush=True)


def within_limits(prob: PlanProblem, plan: Plan) -> bool:
    """Whether ``plan``'s replicas keep ``prob``'s GPU quotas and budget at every step (1e-6 slack;
    ``Plan.relaxed`` drops the step limits, never these)."""
    held: dict[str | None, np.ndarray] = {}
    for svc in prob.services:
        for v in svc.variants:
            gpus = v.gpus_per_replica * np.asarray(plan.replicas[svc.name][v.name], dtype=float)
            held[v.gpu] = held.get(v.gpu, 0.0) + gpus
            held[None] = held.get(None, 0.0) + gpus
    limits: dict[str | None, float] = {key: float(n) for key, n in prob.gpu_quota.items()}
    if prob.gpu_budget is not None:
        limits[None] = prob.gpu_budget
    return all(np.all(held.get(key, 0.0) <= limit + 1e-6) for key, limit in limits.items())


def paired_runs(args: argparse.Namespace, options: dict[str, object]) -> None:
    """``--paired K`` (module docstring): each problem as the MPC solves it, and again with the first K
    blocks integer, the order alternated problem by problem."""
    print(f"as the MPC solves (--mpc) against the first {args.paired} blocks integer (mpc:joint_blocks="
          f"{args.paired} above one service), seed {args.seed}; CPU ms")
    print("| services | problems | base cpu p50 | base cpu p99 | base max | K cpu p50 | K cpu p99 | K max "
          "| cost K / base p50 | max | min | limits kept base / K |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        rng = np.random.default_rng((args.seed, n))
        trials = args.count or (args.trials if n < 50 else max(3, args.trials // 6))
        cpu: dict[str, list[float]] = {"base": [], "K": []}
        kept = Counter[str]()
        ratios = []
        for k in range(trials):
            decompose = options["decompose"] or n * STEPS > JOINT_UP_TO
            drawn = problem(n, rng, None, args.gap, args.node_limit,
                            **{**options, "decompose": decompose, "neighbourhood": 0 if n > 1 else None,
                               "tuned": n == 1})
            how = {"base": drawn, "K": dataclasses.replace(drawn, integer_blocks=args.paired)}
            plans = {}
            for name in (("base", "K") if k % 2 == 0 else ("K", "base")):
                started = time.process_time()
                plans[name] = solve(how[name])
                cpu[name].append((time.process_time() - started) * 1000.0)
                kept[name] += within_limits(drawn, plans[name])
            ratios.append(plans["K"].cost / plans["base"].cost)
        b50, b99 = np.percentile(cpu["base"], [50, 99])
        k50, k99 = np.percentile(cpu["K"], [50, 99])
        print(f"| {n} | {trials} | {b50:.0f} | {b99:.0f} | {max(cpu['base']):.0f} | {k50:.0f} | {k99:.0f} "
              f"| {max(cpu['K']):.0f} | {np.median(ratios):.4f} | {max(ratios):.4f} | {min(ratios):.4f} "
              f"| {kept['base']}/{trials} / {kept['K']}/{trials} |", flush=True)


PSCOST0 = {**planning.TUNED_OPTIONS, "mip_pscost_minreliable": 0}
ONE_SERVICE_LEVERS: dict[str, dict[str, object]] = {
    "pscost 0": {"options": PSCOST0},
    "pscost 1": {"options": {**planning.TUNED_OPTIONS, "mip_pscost_minreliable": 1}},
    "no presolve": {"options": {**planning.TUNED_OPTIONS, "presolve": False}},
    "no symmetry": {"options": {**planning.TUNED_OPTIONS, "mip_detect_symmetry": False}},
    "lp age 1": {"options": {**planning.TUNED_OPTIONS, "mip_lp_age_limit": 1, "mip_pool_age_limit": 1}},
    "no shifting, zi round": {"options": {**planning.TUNED_OPTIONS, "mip_heuristic_run_shifting": False,
                                          "mip_heuristic_run_zi_round": False}},
    "gap 1e-3": {"options": {**planning.TUNED_OPTIONS, "mip_rel_gap": 1e-3}},
    "hull": {"fields": {"hull": True}},
    "hull, pscost 0": {"fields": {"hull": True}, "options": PSCOST0},
    "highspy": {"fields": {"solver": "highspy"}},
    "highspy, hull, pscost 0, no restart": {"fields": {"hull": True, "solver": "highspy"},
                                            "options": {**PSCOST0, "mip_allow_restart": False}},
    "highspy, hull, pscost 0, no restart, no node cuts": {
        "fields": {"hull": True, "solver": "highspy"},
        "options": {**PSCOST0, "mip_allow_restart": False, "mip_allow_cut_separation_at_nodes": False}},
    "greedy start": {"start": "greedy"},
    "optimum as start": {"start": "optimum"},
    "optimum as cutoff": {"start": "cutoff"},
}
"""``--lever``'s levers on the tuned one-service search (the MPC's): ``options`` replace
``TUNED_OPTIONS`` (scipy's HiGHS build; ``mip_pscost_minreliable`` 0: no strong branching, pseudocosts
from the first node; ``mip_allow_restart`` and ``mip_allow_cut_separation_at_nodes``: highspy's HiGHS
only), ``fields`` set ``PlanProblem`` fields
(``hull``; ``solver="highspy"``: the search through highspy's newer HiGHS, scipy's where it is not
installed), ``start`` hands HiGHS a MIP start
through scipy's build (``_direct_milp``): ``greedy`` the greedy plan (``greedy_counts``, completed, where
it meets every constraint), ``optimum`` the base search's own optimal plan (what no start can beat:
the bound on what a start saves), ``cutoff`` that plan's cost as HiGHS's ``objective_bound`` alone."""


Solved = tuple[dict[str, dict[str, np.ndarray]], float, float, np.ndarray | None]
"""``lever_solve``'s answer: replicas, cost, CPU ms, HiGHS's variables (start levers only)."""


def highspy_lacks(lever: str) -> str | None:
    """The first of lever ``lever``'s options that the installed highspy's HiGHS has not (highspy
    1.11 has no ``mip_allow_cut_separation_at_nodes``; the planner then refuses the lever with a
    ValueError naming it), or None: every one there, not a highspy lever, or no highspy."""
    how = ONE_SERVICE_LEVERS[lever]
    if planning.highspy is None or how.get("fields", {}).get("solver") != "highspy":  # type: ignore[attr-defined]
        return None
    h = planning.highspy.Highs()
    h.setOptionValue("output_flag", False)
    for key, value in how.get("options", {}).items():  # type: ignore[attr-defined]
        name = planning._OPTION_NAMES.get(key, key)  # as the planner's highspy path sets them
        val = ("choose" if value else "off") if name == "presolve" and isinstance(value, bool) else value
        if h.setOptionValue(name, val) != planning.highspy.HighsStatus.kOk:
            return str(name)
    return None


def lever_solve(prob: PlanProblem, lever: dict[str, object] | None, base_x: np.ndarray | None = None) -> Solved:
    """One tuned one-service solve of ``prob`` with ``lever`` (None: as the MPC solves): its replicas,
    cost, CPU ms and, for a start lever (and the base beside one, ``lever`` ``{"start": None}``),
    HiGHS's variables. A start lever's solve (and its base) is the build and HiGHS's call through
    scipy's build, as ``solve`` makes them, less ``Plan``'s assembly."""
    how = lever or {}
    fields = dict(how.get("fields", {}))  # type: ignore[call-overload]
    drawn = dataclasses.replace(prob, **fields)
    if "start" not in how:
        saved = planning.TUNED_OPTIONS
        planning.TUNED_OPTIONS = dict(how.get("options", saved))  # type: ignore[call-overload]
        try:
            started = time.process_time()
            plan = solve(drawn)
            cpu = (time.process_time() - started) * 1000.0
        finally:
            planning.TUNED_OPTIONS = saved
        return plan.replicas, plan.cost, cpu, None
    started = time.process_time()
    c, cons, bounds, integral = planning._build(drawn, True)
    # an option this scipy build's HiGHS lacks (scipy 1.15 has no mip_heuristic_run_rins) is left out:
    # solve's scipy.optimize.milp passes it on there, and HiGHS ignores it
    options = {k: v for k, v in planning._options(drawn, time.perf_counter() + drawn.time_limit_s).items()
               if planning._settable(frozenset({k}))}
    start = None
    if how["start"] == "greedy":
        x = planning._complete(drawn, planning.greedy_counts(drawn, True))
        start = x if planning._feasible(x, cons, bounds) else None
    elif how["start"] == "optimum":
        start = base_x
    elif how["start"] == "cutoff" and base_x is not None:
        options["objective_bound"] = float(c @ base_x) * (1 + 1e-9)
    res = planning._direct_milp(c, cons, bounds, integral, options, start)
    cpu = (time.process_time() - started) * 1000.0
    if res.x is None:
        raise RuntimeError(f"no plan: {res.message}")
    return planning._parts(drawn, res.x)[0], float(c @ res.x), cpu, res.x


def lever_runs(args: argparse.Namespace) -> None:
    """``--lever NAME``: one service, each of ``--trials`` problems solved as the MPC solves it (the
    tuned search) and with the lever (``ONE_SERVICE_LEVERS``), the order alternated problem by problem
    so that load falls on both alike: CPU p50 / p99 / max of each, how many plans have other replica
    counts than the base's, the lever's plan cost over the base's (max, min) on those, and the largest
    relative cost difference over every plan (a plan with the base's counts may serve otherwise)."""
    lever = ONE_SERVICE_LEVERS[args.lever]
    rng = np.random.default_rng((args.seed, 1))
    cpu: dict[str, list[float]] = {"base": [], "lever": []}
    differ, ratios, drift = 0, [], 0.0
    for k in range(args.trials):
        prob = problem(1, rng, None, args.gap, args.node_limit, tuned=True)
        out: dict[str, Solved] = {}
        base_how: dict[str, object] | None = {"start": None} if "start" in lever else None
        if lever.get("start") in ("optimum", "cutoff"):
            out["base"] = lever_solve(prob, base_how)
            out["lever"] = lever_solve(prob, lever, out["base"][3])
        else:
            for name in (("base", "lever") if k % 2 == 0 else ("lever", "base")):
                out[name] = lever_solve(prob, lever if name == "lever" else base_how)
        for name in cpu:
            cpu[name].append(out[name][2])
        same = all(np.array_equal(n, out["lever"][0][s][v]) for s, vs in out["base"][0].items() for v, n in vs.items())
        drift = max(drift, abs(out["lever"][1] - out["base"][1]) / out["base"][1])
        if not same:
            differ += 1
            ratios.append(out["lever"][1] / out["base"][1])
    b50, b99 = np.percentile(cpu["base"], [50, 99])
    l50, l99 = np.percentile(cpu["lever"], [50, 99])
    cost = f"{max(ratios):.6f} | {min(ratios):.6f}" if ratios else "- | -"
    print(f"one service, {args.trials} problems, seed {args.seed}: the tuned search (the MPC's) against "
          f"'{args.lever}'; CPU ms")
    print("| base cpu p50 | base cpu p99 | base max | lever cpu p50 | lever cpu p99 | lever max | plans not the base's "
          "| cost lever / base on those, max | min | largest relative cost difference, all plans |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {b50:.0f} | {b99:.0f} | {max(cpu['base']):.0f} | {l50:.0f} | {l99:.0f} | {max(cpu['lever']):.0f} "
          f"| {differ}/{args.trials} | {cost} | {drift:.1e} |", flush=True)


def next_joint_tick(prob: PlanProblem, plan: Plan, sds: list[float], rng: np.random.Generator) -> PlanProblem:
    """``prob`` of several services one step later, after ``plan``'s first step: each service moved on
    as ``next_tick`` moves one (``sds``: each walk's standard deviation), the shared limits kept."""
    services = [next_tick(dataclasses.replace(prob, services=[svc]), plan, sd, rng).services[0]
                for svc, sd in zip(prob.services, sds, strict=True)]
    return dataclasses.replace(prob, services=services)


def coordinator_runs(args: argparse.Namespace, options: dict[str, object],
                     k_blocks: int | None) -> None:
    """``--coordinator-warm K`` (module docstring): consecutive ticks of several services (``args.sizes``,
    each 2 or more: ``main`` checks), each solved as the MPC solves it with ``mpc:joint_blocks=K``
    (``k_blocks``: None for K = 0, every block integer; the cold solve: the coordinator's LP through
    ``linprog``) and again with the coordinator's LP from the last tick's basis
    (``PlanProblem.warm_coordinator``), the order alternated tick by tick; the next tick follows the
    cold plan. The warm solve's simplex iterations (``CoordinatorBasis.iterations``) are printed for
    the ticks with a basis and for the first ticks, solved cold through scipy's HiGHS build."""
    print(f"consecutive ticks, the coordinator's LP cold against from the last tick's basis (warm), "
          f"joint_blocks={args.coordinator_warm}, seed {args.seed}; CPU ms")
    print("| services | ticks | cold cpu p50 | cold cpu p99 | cold max | warm cpu p50 | warm cpu p99 | warm max "
          "| warm p99, ticks with a basis | basis used | iterations with a basis p50 | max "
          "| iterations without p50 | max | cost warm / cold p50 | max | min | same plan "
          "| limits kept cold / warm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        rng = np.random.default_rng((args.seed, n, 2))
        cpu: dict[str, list[float]] = {"base": [], "warm": []}
        cpu_started: list[float] = []
        iterations: dict[bool, list[int]] = {True: [], False: []}
        kept = Counter[str]()
        ratios, same, used, ticks = [], 0, 0, 0
        plans: dict[str, Plan] = {}
        for _ in range(args.count or 1):
            prob = problem(n, rng, k_blocks, args.gap, args.node_limit,
                           **{**options, "decompose": True, "neighbourhood": 0, "tuned": False})
            sds = [float(np.mean(svc.demand_rps)) / 20.0 for svc in prob.services]
            basis = None
            for tick in range(args.ticks):
                if tick > 0:
                    prob = next_joint_tick(prob, plans["base"], sds, rng)
                how = {"base": prob,
                       "warm": dataclasses.replace(prob, warm_coordinator=True, coordinator_basis=basis)}
                for name in (("base", "warm") if ticks % 2 == 0 else ("warm", "base")):
                    started = time.process_time()
                    plans[name] = solve(how[name])
                    cpu[name].append((time.process_time() - started) * 1000.0)
                    kept[name] += within_limits(prob, plans[name])
                warm = plans["warm"].coordinator_basis
                if warm is not None:
                    iterations[warm.warm].append(warm.iterations)
                if warm is not None and warm.warm:
                    used += 1
                    cpu_started.append(cpu["warm"][-1])
                basis = warm
                ratios.append(plans["warm"].cost / plans["base"].cost)
                same += all(np.array_equal(plans["warm"].replicas[s][v], r)
                            for s, vs in plans["base"].replicas.items() for v, r in vs.items())
                ticks += 1
        b50, b99 = np.percentile(cpu["base"], [50, 99])
        w50, w99 = np.percentile(cpu["warm"], [50, 99])
        s99 = np.percentile(cpu_started, 99) if cpu_started else math.nan
        its = " | ".join(f"{np.median(iterations[w]):.0f} | {max(iterations[w])}" if iterations[w] else "- | -"
                         for w in (True, False))
        print(f"| {n} | {ticks} | {b50:.0f} | {b99:.0f} | {max(cpu['base']):.0f} | {w50:.0f} | {w99:.0f} "
              f"| {max(cpu['warm']):.0f} | {s99:.0f} | {used}/{ticks} | {its} | {np.median(ratios):.4f} "
              f"| {max(ratios):.4f} | {min(ratios):.4f} | {same}/{ticks} "
              f"| {kept['base']}/{ticks} / {kept['warm']}/{ticks} |", flush=True)


def check_coordinator_warm(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--coordinator-warm``'s arguments, before anything is printed: K >= 0, every size 2 or more
    (a decomposed solve), neither ``--warm`` nor ``--paired`` beside it (other runs); ``ap.error``
    (exit 2, one line) on the first that is not."""
    if args.coordinator_warm < 0:
        ap.error(f"--coordinator-warm must be >= 0, got {args.coordinator_warm}")
    for flag, given in (("--warm", args.warm), ("--paired", args.paired is not None)):
        if given:
            ap.error(f"--coordinator-warm and {flag} are different runs: give one")
    if any(n < 2 for n in args.sizes):
        ap.error(f"--coordinator-warm needs --sizes of 2 or more services (a decomposed solve), "
                 f"got {' '.join(map(str, args.sizes))}")


def one_service_runs(ap: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """``--lever`` or ``--warm`` (one service), run; False when neither is asked for."""
    if args.lever is not None:
        others = [flag for flag, on in (("--warm", args.warm), ("--paired", args.paired is not None),
                                        ("--coordinator-warm", args.coordinator_warm is not None)) if on]
        if others:
            ap.error(f"--lever and {others[0]} are different runs: give one")
        if args.lever.startswith("highspy") and planning.highspy is None:
            ap.error(f"--lever '{args.lever}' needs highspy (pip install highspy)")
        if (lacking := highspy_lacks(args.lever)) is not None:
            ap.error(f"--lever '{args.lever}' sets {lacking}, which this highspy's HiGHS has not")
        lever_runs(args)
        return True
    if args.warm:
        if planning.highspy is None:
            ap.error("--warm needs highspy (pip install highspy)")
        warm_runs(args)
        return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--sizes", type=int, nargs="*", default=[1, 10, 50], help="services per problem")
    ap.add_argument("--trials", type=int, default=30,
                    help="random problems per size (a sixth of them, at least 3, from 50 services)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random problems")
    ap.add_argument("--integer-blocks", type=int, default=None,
                    help="blocks kept integer (the rest relaxed); default all, as the MPC solves")
    ap.add_argument("--tail-up", action="store_true",
                    help="with --integer-blocks: the relaxed blocks' counts rounded up from the LP relaxation, the "
                         "first blocks searched against them (PlanProblem.tail_up, mpc:int_up=1)")
    ap.add_argument("--gap", type=float, default=1e-4, help="HiGHS's relative optimality gap (the MPC's: 1e-4)")
    ap.add_argument("--node-limit", type=int, default=None,
                    help="most branch-and-bound nodes per solve (0 stops before the root); default none, as the MPC")
    ap.add_argument("--neighbourhood", type=int, default=None,
                    help="search only within K of the LP relaxation's fractional counts (the MPC: 0); "
                         "default the full search")
    ap.add_argument("--decompose", action="store_true",
                    help="several services: plan service by service within shares of the shared limits (the MPC does)")
    ap.add_argument("--strengthen", choices=("on", "off", "auto"), default="auto",
                    help="the valid inequalities (PlanProblem.strengthen); auto: with a fast path only")
    ap.add_argument("--mpc", action="store_true",
                    help="as the MPC solves: one service exactly (tuned); several with --neighbourhood 0, and "
                         "--decompose above JOINT_UP_TO service-steps")
    ap.add_argument("--vs-exact", action="store_true",
                    help="also solve each problem exactly and jointly, and print the cost over that optimum")
    ap.add_argument("--exact-time-limit", type=float, default=60.0,
                    help="--vs-exact: seconds for each exact joint solve (one that stops there is no optimum: "
                         "the row says how many did)")
    ap.add_argument("--exact-cache", type=Path, default=None,
                    help="--vs-exact: JSON file of exact joint optima by seed, size and problem, read and added to "
                         "(a 50-service optimum takes minutes)")
    ap.add_argument("--first-step", action="store_true",
                    help="--vs-exact: also how often the plan's first step is the exact plan's, and the first "
                         "step's regret: the exact optimum with the plan's first step fixed over the optimum")
    ap.add_argument("--coarsen", type=int, default=None,
                    help="decomposed: the steps the limits are shared on (PlanProblem.coarsen: 0 the blocks' "
                         "lengths, K >= 1 the problem's own merged K at a time); default as the MPC")
    ap.add_argument("--count", type=int, default=None,
                    help="problems per size (default --trials, a sixth of it from 50 services); --coordinator-warm: "
                         "runs of --ticks per size (default 1)")
    ap.add_argument("--warm", action="store_true",
                    help="one service on consecutive ticks, each solve started from the last plan, against "
                         "the exact solve without (module docstring); needs highspy")
    ap.add_argument("--ticks", type=int, default=10, help="--warm, --coordinator-warm: consecutive ticks per run")
    ap.add_argument("--levers", action="store_true", help="--warm: also each of the tuned search's levers alone")
    ap.add_argument("--also", nargs="*", default=[], choices=list(LEVERS), metavar="LEVER",
                    help="--warm: also these of the levers (LEVERS' names)")
    ap.add_argument("--threads", type=int, default=None,
                    help="--warm: HiGHS's threads for every solve (default TUNED_OPTIONS': 1; 0: HiGHS chooses)")
    ap.add_argument("--lever", default=None, choices=list(ONE_SERVICE_LEVERS),
                    help="one service: each problem solved as the MPC does and with this lever (HiGHS options, "
                         "the hull rows, a MIP start), alternated: CPU times, plans that differ, cost ratio")
    ap.add_argument("--paired", type=int, default=None, metavar="K",
                    help="each problem as the MPC solves it and with the first K blocks integer (mpc:int_blocks=K "
                         "for one service, mpc:joint_blocks=K for several), alternated: CPU times, cost ratio")
    ap.add_argument("--coordinator-warm", type=int, default=None, metavar="K",
                    help="consecutive ticks (--count runs of --ticks) of --sizes services, each solved as the MPC "
                         "solves with mpc:joint_blocks=K (0: every block integer), the coordinator's LP cold and "
                         "from the last tick's basis (PlanProblem.warm_coordinator), alternated: CPU times, cost "
                         "ratio")
    args = ap.parse_args()
    if args.tail_up and not args.integer_blocks:
        ap.error("--tail-up prices the relaxed blocks: it needs --integer-blocks K >= 1")
    if args.ticks < 1:
        ap.error(f"--ticks must be >= 1, got {args.ticks}")
    if args.coordinator_warm is not None:
        check_coordinator_warm(ap, args)
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    for flag, value, least in (("--node-limit", args.node_limit, 0), ("--neighbourhood", args.neighbourhood, 0),
                               ("--coarsen", args.coarsen, 0), ("--count", args.count, 1),
                               ("--trials", args.trials, 1)):
        if value is not None and value < least:
            ap.error(f"{flag} must be >= {least}, got {value}")
    if one_service_runs(ap, args):
        return
    options = {"neighbourhood": args.neighbourhood, "decompose": args.decompose, "coarsen": args.coarsen,
               "tail_up": args.tail_up,
               "strengthen": {"on": True, "off": False, "auto": None}[args.strengthen]}
    if args.coordinator_warm is not None:
        coordinator_runs(args, options, args.coordinator_warm or None)
        return
    if args.paired is not None:
        if args.paired < 1:
            ap.error(f"--paired must be >= 1, got {args.paired}")
        paired_runs(args, options)
        return
    cache = json.loads(args.exact_cache.read_text()) if args.exact_cache and args.exact_cache.exists() else {}
    first = args.vs_exact and args.first_step
    extra = (" cost / exact p50 | max | each |" if args.vs_exact else "") + (
        " first step as exact | first-step regret p50 | max |" if first else "")
    print("| services | variables | p50 ms | p99 ms | max ms | cpu p50 ms | cpu p99 ms | relaxed | at limit "
          "| fallbacks |" + extra)
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.vs_exact else "")
          + ("---|---|---|" if first else ""))
    for n in args.sizes:
        rng = np.random.default_rng((args.seed, n))
        times, cpu, relaxed, at_limit, fallbacks, ratios, unproven = [], [], 0, 0, Counter[str](), [], 0
        same_first, regrets = 0, []
        trials = args.count or (args.trials if n < 50 else max(3, args.trials // 6))
        for k in range(trials):
            decompose = options["decompose"] or (args.mpc and n * STEPS > JOINT_UP_TO)
            near = 0 if args.mpc and n > 1 else options["neighbourhood"]
            drawn = problem(n, rng, args.integer_blocks, args.gap, args.node_limit,
                            **{**options, "decompose": decompose, "neighbourhood": near, "tuned": args.mpc and n == 1})
            started = time.process_time()
            plan = solve(drawn)
            cpu.append((time.process_time() - started) * 1000.0)
            if args.vs_exact:
                key, demand = f"{args.seed},{n},{k}", float(sum(s.demand_rps.sum() for s in drawn.services))
                exact_problem = dataclasses.replace(drawn, integer_blocks=None, neighbourhood=None, decompose=False,
                                                    tail_up=False,
                                                    tuned=False, coarsen=None, time_limit_s=args.exact_time_limit)
                if (key not in cache or not math.isclose(cache[key]["demand"], demand, rel_tol=1e-12)
                        or (first and "first" not in cache[key])):
                    exact = solve(exact_problem)
                    cache[key] = {"cost": exact.cost, "demand": demand, "at_limit": exact.stopped_at_limit,
                                  "first": first_step(exact)}
                    if args.exact_cache:
                        args.exact_cache.write_text(json.dumps(cache, indent=1))
                unproven += cache[key]["at_limit"]
                ratios.append(plan.cost / cache[key]["cost"])
                if first:
                    same_first += first_step(plan) == cache[key]["first"]
                    regrets.append(fixed_first_cost(exact_problem, plan) / cache[key]["cost"])
            times.append(plan.solve_ms)
            relaxed += plan.relaxed
            at_limit += plan.stopped_at_limit
            if plan.fallback:
                fallbacks[plan.fallback] += 1
            if "solved whole" in plan.message:  # --integer-blocks: no rounding of the tail kept the constraints
                fallbacks["tail solved whole"] += 1
        p50, p99 = np.percentile(times, [50, 99])
        size = n * len(VARIANTS) * (4 * 11 + STEPS) + n * STEPS
        kinds = ", ".join(f"{k} {c}" for k, c in sorted(fallbacks.items())) or "none"
        gaps = (f" {np.median(ratios):.4f} | {max(ratios):.4f} | {', '.join(f'{r:.4f}' for r in ratios)} |"
                + (f" ({unproven} exact solves stopped at the limit) |" if unproven else "")) if ratios else ""
        if first:
            gaps += f" {same_first}/{trials} | {np.median(regrets):.5f} | {max(regrets):.5f} |"
        c50, c99 = np.percentile(cpu, [50, 99])
        print(f"| {n} | {size} | {p50:.0f} | {p99:.0f} | {max(times):.0f} | {c50:.0f} | {c99:.0f} | {relaxed}/{trials} "
              f"| {at_limit}/{trials} "
              f"| {kinds} |{gaps}", flush=True)


if __name__ == "__main__":
    main()
