"""Replica planning over a horizon: one mixed-integer program for every service of a fleet.

The MPC (``controllers.mpc``) solves it every tick on forecast demand and applies the first step; the
oracle (``controllers.oracle``) solves it once on a trace's true demand. Steps ``k = 1..H`` of
``dt_s`` seconds; step ``k`` spans ``[(k - 1) dt, k dt)`` from now. For each variant ``v`` and step ``k``
(integer unless said otherwise):

- ``n[v,k]``: replicas ordered (ready + starting) during step ``k``; ``n[v,0]`` is today's count;
- ``cw[v,k]``, ``cc[v,k]``: replicas ordered so far that start warm (on a node holding the weights:
  at most ``warm_free``) and cold; ``cd[v,k]``: replicas removed so far. All three never decrease,
  and ``n[v,k] = n[v,0] + cw[v,k] + cc[v,k] - cd[v,k]``;
- ``s[v,k]`` (continuous): replicas serving in step ``k``: at most the replicas ready by then,
  ``ready0[v,k]`` (today's ready ones and the starting ones as they become ready) plus the orders old
  enough, ``cw[v,k - Lw] + cc[v,k - Lc]`` with ``L = ceil(startup / dt)``, less the removals
  ``cd[v,k]``. A removal takes a ready replica (a start is never cancelled, so an order and a removal
  in one step cannot pass for a ready replica), and ``s <= n`` follows;
- ``u[k]`` (continuous, per service): demand left unserved, requests/s:
  ``u[k] >= demand[k] - sum_v capacity[v,k] s[v,k] - d[k]``;
- ``d[k]`` (continuous, per service with ``PlanService.shed_rps``): demand the gateway sheds on
  purpose, requests/s, at most the sheddable demand ``shed_rps[k]``: the admission decision in the
  same objective as the GPUs (issue 29), so shedding is planned where it is cheaper than a replica
  that arrives too late or serves too little of its time.

minimise  sum_k sum_v price_v dt / 3600 n[v,k]             (GPU cost, $)
        + sum_k miss_cost dt u[k]                            (requests left unserved, $)
        + sum_k shed_cost dt d[k]                            (requests shed, $)
        + sum_v start_cost_v (cw + cc)[v,H] + stop_cost cd[v,H]   (churn, $)

Prefill/decode pools (issue 34): a service may offer, beside or instead of its aggregated variants,
a prefill pool and a decode pool, each with its own variants (``PlanVariant.role``; GPU generations,
each with its price, start-up and limits as any variant). Whether to disaggregate is then part of the
same problem, linear and exact: ``x[k]`` (continuous, requests/s, within [0, demand]) is the demand
the pools serve at step ``k``, and

- ``u[k] + d[k] + x[k] + sum_{v aggregated} capacity[v,k] s[v,k] >= demand[k]`` (the demand row);
- ``sum_{v prefill} capacity[v,k] s[v,k] >= x[k]`` and ``sum_{v decode} capacity[v,k] s[v,k] >=
  x[k]``: each pool carries the pools' share, a role variant's capacity being requests/s of the
  service's whole mix one replica of that role serves at the SLO (``models.capacity_roles``: a
  prefill replica's prompt tokens/s at the TTFT target over the mix's remote prompt tokens per
  request, the transfer included; a decode replica's sequences at the ITL target and KV), so
  ``prefill capacity >= (x / demand) x prompt-token demand`` and likewise for decode.

The shares ``a = 1 - x / demand`` and ``p = x / demand`` of the issue's statement are this with ``a + p
= 1``: a share above 1 never lowers the cost. The pools' replicas cost their price, count in the GPU
limits and start as any variant's; the aggregated-only problems are built exactly as before (no
``x``). A service whose variants are all role variants is planned on its pools alone. With
``PlanService.pd_ratio`` (Volcano Kthena's prefill:decode ratio, ``autoscaler.config.PDRatio``), every
block keeps ``min_ratio x D <= P <= max_ratio x D``, ``P`` and ``D`` the replicas ordered in each pool:
both pools at zero meet it (Kthena's coupled scale to zero), one pool alone does not (with
``min_ratio`` 0, a decode pool without prefill does: Kthena would raise the prefill pool to one). The
rows hold with and without the step limits, so a fleet outside the ratio today is brought within it
in the first step (the limits dropped where they forbid that, as for a bound). With
``PlanService.pd_spill`` ``r`` (a spill reserve, opt-in; 0 by default) the demand row counts the pools'
share at ``1 - r``: ``u[k] + d[k] + (1 - r) x[k] + sum_{v aggregated} capacity[v,k] s[v,k] >=
demand[k]``, i.e. the aggregated variants hold their own share plus ``r x[k]`` for the arrivals a
saturated prefill pool spills to them (``controllers.mpc``, ``spill``).

Move blocking (as MPC practice keeps integer plans small): replica counts change only at the start of
each block (``PlanProblem.blocks``: 0-based first steps, by default 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 8
steps long for 40 steps), so the integer variables are per block and the serving and unserved ones per
step; the first block is one step, the one applied.

subject to the variants' bounds (``min_replicas <= n <= min(max_replicas, quota)``, and ``n >=
keep`` for a service recovering from a loss: no warm replica removed), the service's largest change
per step (``max_up`` orders, ``max_down`` removals), and, across services, GPUs per GPU type within
``gpu_quota`` and all GPUs within ``gpu_budget`` (a fleet that already holds more, as one started by
hand can, may keep what it holds but never grows past it). Solved by ``scipy.optimize.milp`` (HiGHS), or
for the exact search through highspy, HiGHS's own binding, where asked and installed
(``PlanProblem.solver``); the constraint matrix is sparse with a bounded number of entries per row, so
a day of 60-s steps solves as one problem.

At the solver's limit (``PlanProblem.time_limit_s``, or ``node_limit``: branch-and-bound nodes, a bound
on work that does not depend on machine load) the solve never raises: HiGHS's best plan so far is used
(``Plan.stopped_at_limit``), and without one a feasible plan is built instead (``Plan.fallback``): the
LP relaxation with its replica counts rounded up, else a greedy plan (``greedy_counts``), else today's
replicas held; the first two are used only when they meet every constraint.

Solving fast (issue 28; ``docs/controllers.md#solving-fast`` has the measurements):

- Valid inequalities (``PlanProblem.strengthen``, on for the fast paths below): HiGHS spent its time at the root
  closing a 6 % (up to 23 %) gap between the LP relaxation and the optimum, almost all of it whole
  replicas covering fractional demand. Per service, step and capacity ``C`` of one of its variants,
  the mixed-integer rounding of the demand row over whole serving counts, with ``f`` the fractional
  part of ``demand / C``: ``sum_v (f floor(a_v) + min(frac(a_v), f)) s[v,k] + u[k] / C >= f
  ceil(demand / C)``, ``a_v = capacity_v / C``. Every plan with whole serving counts meets it, and an
  optimal plan serves ``min(n, ready)`` (whole when the ready counts are), so the optimum is
  unchanged; the relaxation comes within 0.5 % of it on average.
- The demand rows' convex hull (``PlanProblem.hull``, opt-in, the tuned search only): where a step's
  variants have two capacities, every facet of the hull of its demand row over whole serving counts
  (``_hull_facets``) in place of the MIR rows; the relaxation comes within 0.35 % of the optimum on
  average (the MIR rows: 0.68 %), but it lengthened the median and the consecutive ticks' tail.
- The search near the LP relaxation (``PlanProblem.neighbourhood``, RENS in MIP terms): the integer
  variables the relaxation leaves whole are fixed there, the fractional ones kept within ``k`` of their
  floor and ceiling, and HiGHS searches that box with its presolve (``NEAR_OPTIONS``: it drops the
  fixed columns) and without its symmetry detection and sub-MIP heuristics (``FAST_OPTIONS``), which
  cost more than they save on it; the full search only
  when the box holds no plan. The plan keeps every constraint (it is HiGHS's, in a smaller box).
- The tuned exact search (``PlanProblem.tuned``, the MPC's for one service): the valid inequalities
  and ``TUNED_OPTIONS`` (HiGHS's primal heuristics off, its cut pool kept to the cuts in use, one
  thread); the plan is the exact search's (the same gap), found in a third of the time at the median
  and half at the 99th percentile on consecutive ticks.
- A MIP start (``PlanProblem.start``, through highspy: ``scipy.optimize.milp`` takes none): the last
  tick's plan moved on a step (``shifted``), each block's count its steps' highest, clipped to the
  bounds, and checked against every constraint before HiGHS sees it (dropped otherwise). Measured,
  it saves nothing over the tuned search without it: on most ticks it is already the optimum, and
  the time is HiGHS's proof (its root's cut rounds), which a start does not shorten.
- Relaxed later blocks (``PlanProblem.integer_blocks``) are rounded to whole replicas, the cheapest of
  a few roundings that keeps every constraint (``_round_tail``), solved whole when none does. With
  ``PlanProblem.tail_up`` they are priced rounded up first (``_tail_up``): the LP relaxation's later
  counts rounded up and fixed, the first blocks searched whole against them, so that a fraction of a
  replica ordered later does not undercut a whole one ordered now.
- The decomposition by service (``PlanProblem.decompose``): the shared limits are shared out on the
  joint LP relaxation (for a large fleet on steps as long as the plan's blocks, ``_blocked``: the
  joint relaxation of 50 services on its own steps takes 2.4-3 s, on the blocks' 0.4-0.5 s, and the
  first blocks are single steps there, so the minutes applied first are shared exactly), each
  service's share rounded to whole GPUs per limit and block (never below what it cannot shed in
  time: today's fleet removed as fast as its step limits and ready replicas allow, the GPU types the
  relaxation prices going first, so that what it cannot shed sits where the relaxation keeps GPUs
  too), then each service is planned alone within its share (on the problem's own steps, the
  services whose shares came out fractional together, a few at a time); a service left with unserved
  demand where GPUs were left over plans again with them, and the few whose plans lie furthest above
  their own relaxation are searched exactly (the tuned search with the demand rows' hull and no
  strong branching: ``EXACT_HULL``, ``EXACT_OPTIONS``); then, up to 10 services (``PAIR_UP_TO``), the services
  leaving the most demand unserved are planned again two at a time within what the others leave them
  (``_pair_polish``), which settles the shares' rounding between two services as the joint optimum
  would; last, up to 20 services (``POLISH_UP_TO``), the joint problem is searched within a replica
  or two of the plan, started from it (``_polish``), which settles the GPUs moved along a chain of
  services. The parts' shares sum within every limit, so the joint plan keeps them; when even the
  services' least holdings break a limit the joint problem is solved.
- HiGHS is called through the build inside scipy without ``scipy.optimize.milp``'s wrapper
  (``_direct_milp``: the same model, options and answer, to the bit, 2-3 ms less per call), and a
  decomposed solve keeps each service's LP relaxation in HiGHS, so its second LP, with more GPUs,
  starts from the first's basis (``_WarmLp``: 5 dual simplex iterations against 277).
- The model built in bulk (``_build``): each variant's block rows from one pattern per block count
  (``_block_rows``), a service's step limits and valid inequalities from its steps at once, the rows
  kept as arrays; the same model to the bit as the row-by-row build it replaced
  (``tests/unit/test_planning_build.py``), half the time.
- The coordinator from the last tick's basis (``PlanProblem.warm_coordinator``, opt-in): the
  decomposition's coordinator LP solved from the final basis of the last tick's
  (``Plan.coordinator_basis``), where the LP has the same shape and rows (``CoordinatorBasis``): at
  50 services a median of 885-962 dual simplex iterations from a basis (max 1,393-2,703) against
  7,013-7,936 cold (a run's first tick; ``plan_solve.py --coordinator-warm 2 --ticks 10 --count 3``,
  seeds 0-2, commit 1db11c9). The same LP optimum; another optimal vertex may
  share the limits otherwise, so the plan can differ (``docs/controllers.md#solving-fast``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, OptimizeWarning, linprog, milp

highspy: ModuleType | None
try:  # HiGHS's own Python binding, optional: it takes a MIP start, which scipy.optimize.milp cannot
    highspy = importlib.import_module("highspy")
except ImportError:  # the exact search then goes through scipy (PlanProblem.solver)
    highspy = None

_core: ModuleType | None
_scipy_status: object | None
try:  # the HiGHS build inside scipy, called without scipy.optimize.milp's wrapper (_direct_milp)
    _core = importlib.import_module("scipy.optimize._highspy._core")
    _scipy_status = importlib.import_module("scipy.optimize._linprog_highs")._highs_to_scipy_status_message
except (ImportError, AttributeError):  # private to scipy: without them every solve goes through milp
    _core, _scipy_status = None, None

BLOCK_VARS = 4  # per variant and block: n, cw, cc, cd
N, CW, CC, CD = range(BLOCK_VARS)

HIGHS_LIMITS = {13: "time limit", 14: "iteration limit", 16: "node limit"}
"""HiGHS's model statuses for a solve stopped at a limit (``HighsModelStatus`` in HiGHS's ``HConst.h``:
kTimeLimit, kIterationLimit, kSolutionLimit, which ``mip_max_nodes`` ends with). scipy maps the time
and iteration limits to ``status`` 1 but the node limit to 4 ("not recognized"), so the HiGHS status
in the message is read."""

SOLVERS = ("scipy", "highspy")
"""``PlanProblem.solver``'s values."""

FALLBACKS = ("lp-rounded", "greedy", "hold")
"""``Plan.fallback``'s values, in the order tried."""

FEASIBLE_TOL = 1e-6
"""Slack allowed when a fallback plan is checked against the constraints (HiGHS's default primal
feasibility tolerance is 1e-7; the rounded plans are whole numbers and sums of them)."""


def default_blocks(steps: int) -> list[int]:
    """First step (0-based) of each block: lengths 1, 1, 1, 1, 2, 2, 4, 4, then 8 until ``steps``."""
    return list(_default_starts(steps))


@functools.cache
def _default_starts(steps: int) -> tuple[int, ...]:
    """``default_blocks(steps)``, made once per horizon (a solve asks for it a thousand times)."""
    starts, k, lengths = [], 0, [1, 1, 1, 1, 2, 2, 4, 4]
    while k < steps:
        starts.append(k)
        k += lengths.pop(0) if lengths else 8
    return tuple(starts)


@dataclass(frozen=True)
class PlanVariant:
    """One variant of a service, as the planner sees it.

    Attributes:
        name: variant name.
        gpu: GPU type (the key of ``PlanProblem.gpu_quota``).
        gpus_per_replica: GPUs one replica holds.
        price_per_hour: $ per replica-hour.
        capacity_rps: requests/s one serving replica serves within the SLO, per step, shape (H,).
        current: replicas today (ready + starting), ``n[v,0]``.
        ready: replicas ready by each step from today's replicas alone, shape (H,), non-decreasing
            (ready now, plus the starting ones from the step they become ready).
        min_replicas, max_replicas: bounds (``max_replicas`` already includes any quota).
        warm_steps, cold_steps: steps from an order to ready, warm and cold (``ceil(startup / dt)``).
        warm_free: orders that can still start warm over the horizon (free nodes holding the weights).
        keep: replicas that must stay at every step (the ready ones while recovering; a pool variant's
            ready and starting ones under the SLO hold, ``controllers.mpc``; 0 otherwise).
        start_cost: $ per replica ordered; ``stop_cost``: $ per replica removed.
        role: None for an aggregated variant (it prefills and decodes); ``prefill`` or ``decode`` for
            a variant of the service's prefill or decode pool (module docstring, "Prefill/decode
            pools"), whose ``capacity_rps`` is requests/s of the service's whole mix at the SLO that
            one replica of that role carries (``models.capacity_roles``).
    """

    name: str
    gpu: str
    gpus_per_replica: int
    price_per_hour: float
    capacity_rps: np.ndarray
    current: int
    ready: np.ndarray
    min_replicas: int
    max_replicas: int
    warm_steps: int
    cold_steps: int
    warm_free: int = 0
    keep: int = 0
    start_cost: float = 0.0
    stop_cost: float = 0.0
    role: str | None = None


@dataclass(frozen=True)
class PlanService:
    """One service: its variants, the demand to serve and its limits.

    Attributes:
        name: service name.
        variants: at least one; with role variants (``PlanVariant.role``), at least one of each role.
        demand_rps: requests/s to serve in each step, shape (H,).
        miss_cost: $ per request of demand left unserved (> every variant's cost per request served,
            or the plan prefers missing to serving).
        max_up, max_down: most replicas ordered / removed per step, all variants together (None: no limit).
        shed_rps: requests/s of ``demand_rps`` the gateway may shed in each step (the sheddable
            class's), shape (H,), each within [0, demand]; None: nothing is shed on purpose.
        shed_cost: $ per request shed (>= 0; below ``miss_cost``, or shedding is never planned).
        pd_ratio: ``(min_ratio, max_ratio)``: with role variants, every block keeps ``min_ratio x D <= P <=
            max_ratio x D`` for ``P``, ``D`` the prefill and decode replicas ordered (``n``, summed over
            each pool's variants; module docstring, "Prefill/decode pools"); None: no bound.
        pd_spill: with role variants, the share ``r`` in [0, 1) of the pools' requests/s ``x`` that the
            aggregated variants hold in reserve beside their own share (the demand row counts ``(1 - r) x``;
            module docstring, "Prefill/decode pools"); 0 (default): none. The reserve is not capped by the
            aggregated variants' ``max_replicas`` (nor their GPU quotas): where they cannot hold it, the
            plan meets the row by growing the pools instead, each request/s they take counting only
            ``1 - r`` (else leaving demand unserved), so a large ``r`` costs more for less (issue 34:
            ``mpc:spill=0.6`` asked for all 40 H100s the fleet allows, then bought prefill replicas).
    """

    name: str
    variants: Sequence[PlanVariant]
    demand_rps: np.ndarray
    miss_cost: float
    max_up: int | None = None
    max_down: int | None = None
    shed_rps: np.ndarray | None = None
    shed_cost: float = 0.0
    pd_ratio: tuple[float, float] | None = None
    pd_spill: float = 0.0


@dataclass(frozen=True)
class PlanProblem:
    """Every service of a fleet over ``steps`` steps of ``dt_s`` seconds.

    Attributes:
        gpu_quota: GPU type -> most GPUs of that type held by all services at any step.
        gpu_budget: most GPUs of any type held at any step (None: no budget).
        blocks: first step (0-based, ascending, the first 0) of each block over which replica counts
            stay constant; None = ``default_blocks(steps)``.
        integer_blocks: blocks kept integer, the first ones (None: all); the rest are relaxed.
        tail_up: with ``integer_blocks``, the relaxed blocks priced as if their replica counts were
            rounded up (``_tail_up``): the LP relaxation is solved, each relaxed block's count fixed at
            the ceiling of its relaxed count (within the variant's bounds), and the first
            ``integer_blocks`` searched whole against that tail. A fraction of a replica ordered
            later then costs a whole one, as in the exact search, so a whole order now is weighed
            against a whole order later, not against a cheap fraction (issue 28: the relaxed tail
            alone ordered each H100 of the ramp late). Where the LP or that search finds no plan,
            the relaxed tail is searched as without it.
        time_limit_s: HiGHS's time limit, seconds, shared by every HiGHS call of one solve (the
            decomposition's and the search near the LP relaxation's too; the LP relaxation solved for
            a fallback gets its own); at the limit the best plan found is used (module docstring).
        node_limit: most branch-and-bound nodes HiGHS explores (``scipy.optimize.milp``'s
            ``node_limit``; 0 stops before the root), None for no limit; the same problem and limit
            give the same plan on any machine, where a time limit does not.
        mip_rel_gap: relative optimality gap at which HiGHS stops.
        strengthen: add the valid inequalities that tighten the LP relaxation (``_mir_rows``; the
            optimum is unchanged, the LP bound comes much closer to it); None: with ``neighbourhood``,
            ``decompose`` or ``integer_blocks`` only (for the full search they halve the median
            solve but lengthen the slowest: ``docs/controllers.md#solving-fast``).
        decompose: with several services under shared GPU limits, share the limits on the joint
            LP relaxation, then plan service by service within those shares (module docstring,
            "Solving fast"); the plan meets every constraint the joint one does, at a cost close to
            the joint optimum's (``docs/controllers.md``). Ignored for one service or without shared
            limits.
        neighbourhood: None searches every integer plan; k >= 0 first searches only near the LP
            relaxation (module docstring, "Solving fast"): the integer variables it leaves whole are
            fixed, the fractional ones kept within k of their floor and ceiling; the full search
            only when that finds no plan.
        coarsen: with ``decompose``, the steps of the LP the limits are shared on: 0, as long as the
            plan's blocks (``_blocked``); k >= 1, the problem's own merged k at a time (1: the
            problem's own); None: 1 up to ``FINE_SHARES`` service-steps, else ``COORDINATOR`` (0).
        tuned: the exact search (``neighbourhood`` None, every block integer, not decomposed) with
            the valid inequalities (unless ``strengthen`` is False) and HiGHS's ``TUNED_OPTIONS``
            (module docstring, "Solving fast"); the MPC's for one service.
        hull: with ``tuned``, a step whose variants have two capacities gets every facet of its demand
            row's convex hull over whole serving counts in place of the MIR rows (``_mir_rows``; the
            optimum is unchanged). Off by default: measured, it shortens the slowest fresh solves on
            two of three seeds but lengthens the median and the consecutive ticks' tail, and the MPC's
            variants have three capacities, where it does nothing (``docs/controllers.md#solving-fast``).
        solver: ``scipy`` (``scipy.optimize.milp``) or ``highspy`` (HiGHS's own binding, an
            optional dependency, which takes ``start``) for the exact search's MILP; ``highspy``
            when it is not installed, or when it reports an error, solves through scipy
            (``Plan.message`` says which ran). The other searches always go through scipy.
        start: a plan to start HiGHS from (a MIP start; ``solver="highspy"`` only): service ->
            variant -> replicas per step, shape (steps,), as ``Plan.replicas`` (the last tick's plan
            moved on, ``shifted``). Each block gets the highest count of its steps (else its first
            step's), clipped to the variant's bounds; a start that then breaks a constraint, or
            lacks a service or variant, is dropped (``Plan.started`` False, ``Plan.message`` says
            why), never handed to HiGHS.
        warm_coordinator: with ``decompose``, the coordinator's LP (``_shares``) is solved through
            the HiGHS build inside scipy directly, from ``coordinator_basis`` where that is a basis of
            an LP of the same shape and rows (``CoordinatorBasis.fingerprint``), and
            ``Plan.coordinator_basis`` returns its final basis for the next tick (issue 28). The
            LP's optimum is the same, its solution may be another optimal vertex, so the shares and
            the plan may differ from the cold solve's
            (``docs/controllers.md#solving-fast`` has the costs). Off: ``scipy.optimize.linprog``, as
            before. Without scipy's build reachable it is solved as off (``Plan.message`` says so).
            Without ``decompose`` there is no coordinator: ignored, the plan the same as off, with no
            ``Plan.coordinator_basis`` (``mpc:joint_warm=1`` sets it on joint problems of every size
            and relies on that for those solved whole).
        coordinator_basis: the last tick's ``Plan.coordinator_basis`` (``warm_coordinator`` only).
    """

    services: Sequence[PlanService]
    dt_s: float
    steps: int
    gpu_quota: Mapping[str, int] = field(default_factory=dict)
    gpu_budget: int | None = None
    blocks: Sequence[int] | None = None
    integer_blocks: int | None = None
    tail_up: bool = False
    time_limit_s: float = 10.0
    node_limit: int | None = None
    mip_rel_gap: float = 1e-4
    strengthen: bool | None = None
    decompose: bool = False
    neighbourhood: int | None = None
    coarsen: int | None = None
    tuned: bool = False
    hull: bool = False
    solver: str = "scipy"
    start: Mapping[str, Mapping[str, np.ndarray]] | None = None
    warm_coordinator: bool = False
    coordinator_basis: CoordinatorBasis | None = None


@dataclass(frozen=True)
class CoordinatorBasis:
    """The final simplex basis of a decomposed solve's coordinator LP (``_shares``), to start the
    next tick's from (``PlanProblem.coordinator_basis``).

    Attributes:
        shape: (rows, columns) of the LP it is a basis of.
        fingerprint: what places each of its rows and columns (``_coordinator_fingerprint``): the
            services' and their variants' names, the limit keys, the model's block count and how
            many rows each service has; a basis is used only for an LP with the same fingerprint
            and shape (the same fleet, blocks and limits give them; a row of the valid inequalities
            comes and goes where a step's demand is a whole multiple of a capacity, and the same
            total of rows may fall otherwise between services).
        basis: HiGHS's ``HighsBasis`` (scipy's build), each column's and row's status.
        iterations: the simplex iterations that solve took.
        warm: whether that solve started from a basis of the tick before.
    """

    shape: tuple[int, int]
    fingerprint: tuple[object, ...]
    basis: object
    iterations: int
    warm: bool


@dataclass(frozen=True)
class Plan:
    """The solved plan.

    Attributes:
        replicas: service -> variant -> ``n[v,k]`` for k = 1..H, integers, shape (H,).
        serving: service -> variant -> ``s[v,k]``, shape (H,).
        unserved_rps: service -> ``u[k]``, requests/s, shape (H,).
        shed_rps: service -> ``d[k]``, requests/s, shape (H,), for the services with
            ``PlanService.shed_rps`` (the others have none).
        cost: the objective, $.
        solve_ms: wall time of the solve, milliseconds.
        relaxed: True when the step limits had to be dropped to find any plan (today's fleet is
            further outside its bounds or quotas than the limits allow undoing in time).
        stopped_at_limit: True when HiGHS stopped at its time, node or iteration limit (the plan is
            then its best so far, or a fallback), not at the optimality gap.
        fallback: None for HiGHS's plan; else the plan built without it (``FALLBACKS``):
            ``lp-rounded``, ``greedy`` or ``hold``.
        message: what happened, one line (HiGHS's message, or the limit and the fallback).
        nodes: branch-and-bound nodes HiGHS explored (None when it does not say; summed over the
            services when decomposed).
        gpu_prices: decomposed only: the shared limits' prices in the LP relaxation they were shared
            on (limit key, None for the budget -> $ per GPU per block; its duals).
        lower_bound: decomposed on the problem's own steps only: the LP relaxation's cost, a lower
            bound on the joint optimum's, so ``cost - lower_bound`` bounds how far from optimal.
        started: True when HiGHS was given ``PlanProblem.start`` (it met every constraint); False
            without one, when it was dropped, or on scipy's path.
        pd_rps: service -> ``x[k]``, the requests/s its prefill/decode pools serve, shape (H,), for
            the services with role variants (the others have none); the aggregated variants serve
            the rest of the demand served.
        coordinator_basis: decomposed with ``PlanProblem.warm_coordinator`` only: the coordinator
            LP's final basis, for the next tick's ``PlanProblem.coordinator_basis``.
    """

    replicas: dict[str, dict[str, np.ndarray]]
    serving: dict[str, dict[str, np.ndarray]]
    unserved_rps: dict[str, np.ndarray]
    cost: float
    solve_ms: float
    relaxed: bool = False
    stopped_at_limit: bool = False
    fallback: str | None = None
    message: str = ""
    nodes: int | None = None
    gpu_prices: dict[str | None, np.ndarray] | None = None
    lower_bound: float | None = None
    started: bool = False
    coordinator_basis: CoordinatorBasis | None = None
    shed_rps: dict[str, np.ndarray] = field(default_factory=dict)
    pd_rps: dict[str, np.ndarray] = field(default_factory=dict)


ROLES = ("prefill", "decode")
"""``PlanVariant.role``'s values besides None (aggregated)."""


def _has_roles(svc: PlanService) -> bool:
    """Whether ``svc`` offers prefill/decode pools (some variant has a role)."""
    return any(v.role is not None for v in svc.variants)


class _Index:
    """Column of every variable: per variant ``BLOCK_VARS x blocks`` integers then ``H`` serving
    variables; then per service ``H`` unserved ones, followed by ``H`` shed ones for a service that
    may shed and ``H`` P/D-served ones for a service with role variants."""

    def __init__(self, problem: PlanProblem) -> None:
        self.h = problem.steps
        self.starts = list(default_blocks(self.h) if problem.blocks is None else problem.blocks)
        self.nb = len(self.starts)
        self.integer_blocks = self.nb if problem.integer_blocks is None else min(problem.integer_blocks, self.nb)
        # block of each step
        self.block_of = np.searchsorted(self.starts, np.arange(self.h), side="right") - 1
        self.blocks: dict[tuple[int, int], int] = {}
        col = 0
        for i, svc in enumerate(problem.services):
            for j in range(len(svc.variants)):
                self.blocks[i, j] = col
                col += BLOCK_VARS * self.nb + self.h
        self.unserved: dict[int, int] = {}
        self.shed: dict[int, int] = {}
        self.pd: dict[int, int] = {}
        for i, svc in enumerate(problem.services):
            self.unserved[i] = col
            col += self.h
            if svc.shed_rps is not None:
                self.shed[i] = col
                col += self.h
            if _has_roles(svc):
                self.pd[i] = col
                col += self.h
        self.size = col

    def var(self, i: int, j: int, kind: int, b: int) -> int:
        """Column of variable ``kind`` of variant ``j`` of service ``i`` in block ``b``."""
        return self.blocks[i, j] + kind * self.nb + b

    def s(self, i: int, j: int, k: int) -> int:
        """Column of the serving replicas of variant ``j`` of service ``i`` at step ``k`` (0-based)."""
        return self.blocks[i, j] + BLOCK_VARS * self.nb + k

    def u(self, i: int, k: int) -> int:
        return self.unserved[i] + k

    def tail(self, i: int) -> int:
        """Columns of service ``i``'s unserved, shed and P/D-served variables (they follow one another)."""
        return self.h * (1 + (i in self.shed) + (i in self.pd))

    def missed(self, i: int) -> int:
        """Columns of service ``i``'s unserved and shed variables, the first of its tail."""
        return self.h * (2 if i in self.shed else 1)


class _Rows:
    """Sparse constraint rows ``lb <= A x <= ub``, appended in order, each batch of rows kept as
    arrays (entries row by row; ``constraint`` joins them once)."""

    def __init__(self) -> None:
        self._rows: list[np.ndarray] = []
        self._cols: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._lb: list[np.ndarray] = []
        self._ub: list[np.ndarray] = []
        self.count = 0  # rows so far

    def entries(self) -> tuple[list[int], list[int], list[float], list[float], list[float]]:
        """Every entry's row, column and value in the order appended, and the rows' bounds."""
        def flat(parts: list[np.ndarray]) -> list[Any]:
            return list(np.concatenate(parts).tolist()) if parts else []
        return flat(self._rows), flat(self._cols), flat(self._vals), flat(self._lb), flat(self._ub)

    def add(self, terms: Sequence[tuple[int, float]], lb: float, ub: float) -> None:
        self.add_entries(np.zeros(len(terms), dtype=np.int64), np.array([t for t, _ in terms], dtype=np.int64),
                         np.array([v for _, v in terms], dtype=float), np.array([lb], dtype=float),
                         np.array([ub], dtype=float))

    def add_entries(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, lb: np.ndarray,
                    ub: np.ndarray) -> None:
        """Rows ``0..len(lb) - 1`` after those so far: entry ``e`` at row ``rows[e]`` (counted from the
        first new row), column ``cols[e]``, value ``vals[e]``."""
        self._rows.append(self.count + np.asarray(rows, dtype=np.int64))
        self._cols.append(np.asarray(cols, dtype=np.int64))
        self._vals.append(np.asarray(vals, dtype=float))
        self._lb.append(np.asarray(lb, dtype=float))
        self._ub.append(np.asarray(ub, dtype=float))
        self.count += len(self._lb[-1])

    def add_rows(self, cols: Sequence[np.ndarray], vals: Sequence[np.ndarray | float], lb: np.ndarray,
                 ub: np.ndarray) -> None:
        """Rows ``r = 0..len(lb) - 1`` at once, row ``r`` with the terms ``(cols[t][r], vals[t][r])``
        in the order of ``t``, where ``cols[t][r] >= 0`` (a negative column: no such term)."""
        if len(cols) != len(vals):
            raise ValueError(f"_Rows.add_rows: {len(cols)} column arrays but {len(vals)} value arrays")
        cs = np.stack([np.asarray(col) for col in cols], axis=1)  # (rows, terms): each row's terms in order
        vs = np.stack([np.broadcast_to(np.asarray(val, dtype=float), cs.shape[:1]) for val in vals], axis=1)
        there = cs >= 0
        # row-major order: entries row by row, each row's terms in the order given (what add would append)
        self.add_entries(np.nonzero(there)[0], cs[there], vs[there], lb, ub)

    def constraint(self, size: int) -> LinearConstraint:
        if not self._lb:
            return LinearConstraint(sparse.csr_array((0, size)), np.zeros(0), np.zeros(0))
        a = sparse.csr_array((np.concatenate(self._vals), (np.concatenate(self._rows), np.concatenate(self._cols))),
                             shape=(self.count, size))
        return LinearConstraint(a, np.concatenate(self._lb), np.concatenate(self._ub))


@functools.cache
def _block_rows(nb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One variant's block rows, as ``_build`` appends them: per block ``b`` the balance row ``n - cw -
    cc + cd = current``, then from the second block on ``kind[b] - kind[b - 1] >= 0`` for ``cw``, ``cc``,
    ``cd``. Returns each entry's row, its column from the variant's first (``kind * nb + b``) and value,
    and which rows are balance rows. Made once per block count (the arrays are read, never written)."""
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    balance: list[bool] = []
    for b in range(nb):
        r = len(balance)
        for kind, val in ((N, 1.0), (CW, -1.0), (CC, -1.0), (CD, 1.0)):
            rows.append(r)
            cols.append(kind * nb + b)
            vals.append(val)
        balance.append(True)
        if b > 0:
            for kind in (CW, CC, CD):
                r = len(balance)
                rows += [r, r]
                cols += [kind * nb + b, kind * nb + b - 1]
                vals += [1.0, -1.0]
                balance.append(False)
    out = (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals), np.array(balance))
    for a in out:
        a.flags.writeable = False
    return out


def _check(problem: PlanProblem) -> None:
    h = problem.steps
    if h < 1 or not 0 < problem.dt_s < math.inf:
        raise ValueError(f"need steps >= 1 and a finite dt_s > 0, got {h} and {problem.dt_s}")
    if problem.blocks is not None:
        starts = list(problem.blocks)
        if not starts or starts[0] != 0 or any(b <= a for a, b in itertools.pairwise(starts)) or starts[-1] >= h:
            raise ValueError(f"blocks must ascend from 0 below steps ({h}), got {starts}")
    for svc in problem.services:
        if not svc.variants:
            raise ValueError(f"{svc.name}: no variant to plan")
        if np.shape(svc.demand_rps) != (h,) or not np.all(np.isfinite(svc.demand_rps)):
            raise ValueError(f"{svc.name}: demand_rps must be {h} finite numbers")
        if svc.shed_rps is not None:
            shed = np.asarray(svc.shed_rps, dtype=float)
            if (np.shape(shed) != (h,) or not np.all(np.isfinite(shed)) or np.any(shed < 0)
                    or np.any(shed > np.asarray(svc.demand_rps) + FEASIBLE_TOL)):
                raise ValueError(f"{svc.name}: shed_rps must be {h} finite numbers within [0, demand_rps]")
            if not 0 <= svc.shed_cost < math.inf:
                raise ValueError(f"{svc.name}: shed_cost must be a finite number >= 0, got {svc.shed_cost}")
        if not 0 <= svc.pd_spill < 1:
            raise ValueError(f"{svc.name}: pd_spill must be in [0, 1), got {svc.pd_spill}")
        roles = {v.role for v in svc.variants}
        if not roles <= {None, *ROLES}:
            raise ValueError(f"{svc.name}: a variant's role must be None, 'prefill' or 'decode', got "
                             f"{sorted(str(r) for r in roles - {None, *ROLES})}")
        if roles & set(ROLES) and not set(ROLES) <= roles:
            raise ValueError(f"{svc.name}: prefill/decode pools need variants of both roles, got only "
                             f"{sorted(str(r) for r in roles - {None})}")
        for v in svc.variants:
            if np.shape(v.capacity_rps) != (h,) or np.shape(v.ready) != (h,):
                raise ValueError(f"{svc.name}/{v.name}: capacity_rps and ready must have {h} steps")
            if not np.all(np.isfinite(v.capacity_rps)) or np.any(np.asarray(v.capacity_rps) < 0):
                raise ValueError(f"{svc.name}/{v.name}: capacity_rps must be {h} finite numbers >= 0")
            if v.min_replicas > v.max_replicas:
                raise ValueError(f"{svc.name}/{v.name}: min_replicas {v.min_replicas} > max_replicas {v.max_replicas}")
    if problem.node_limit is not None and problem.node_limit < 0:
        raise ValueError(f"node_limit must be >= 0 or None, got {problem.node_limit}")
    if problem.neighbourhood is not None and problem.neighbourhood < 0:
        raise ValueError(f"neighbourhood must be >= 0 or None, got {problem.neighbourhood}")
    if problem.coarsen is not None and problem.coarsen < 0:
        raise ValueError(f"coarsen must be >= 0 or None, got {problem.coarsen}")
    if problem.solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {problem.solver!r}")
    if problem.coordinator_basis is not None and not problem.warm_coordinator:
        raise ValueError("coordinator_basis is read only with warm_coordinator=True")
    for name, variants in (problem.start or {}).items():
        for vname, n in variants.items():
            if np.shape(n) != (h,) or not np.all(np.isfinite(n)) or np.any(np.asarray(n) < 0):
                raise ValueError(f"start {name}/{vname}: need {h} finite replica counts >= 0, got {np.asarray(n)!r}")


def _strengthened(problem: PlanProblem) -> bool:
    """Whether ``problem`` gets the valid inequalities: ``PlanProblem.strengthen``, or when None, with
    a fast path (``neighbourhood``, ``decompose``, relaxed blocks or ``tuned``) only."""
    if problem.strengthen is not None:
        return problem.strengthen
    return (problem.neighbourhood is not None or problem.decompose or problem.integer_blocks is not None
            or _tuned(problem))


def _limit_keys(problem: PlanProblem) -> list[str | None]:
    """The shared GPU limits that bind some variant: each quota'd GPU type a variant uses, then None
    for the budget when there is one."""
    used = {v.gpu for svc in problem.services for v in svc.variants}
    keys: list[str | None] = [g for g in sorted(problem.gpu_quota) if g in used]
    return keys + ([None] if problem.gpu_budget is not None else [])


def _held(problem: PlanProblem) -> dict[str | None, int]:
    """GPUs today's replicas hold, per GPU type and (None) in all."""
    held: dict[str | None, int] = {None: 0}
    for svc in problem.services:
        for v in svc.variants:
            held[v.gpu] = held.get(v.gpu, 0) + v.current * v.gpus_per_replica
            held[None] += v.current * v.gpus_per_replica
    return held


def _limits(problem: PlanProblem, keys: Sequence[str | None]) -> np.ndarray:
    """The shared limits per (limit, block), as ``_usage`` orders them: a fleet already past a limit
    may keep what it holds, never grow."""
    held, nb = _held(problem), _Index(problem).nb
    values = []
    for key in keys:
        limit = problem.gpu_budget if key is None else problem.gpu_quota[key]
        values.append(np.full(nb, float(held.get(key, 0) if limit is None else max(limit, held.get(key, 0)))))
    return np.concatenate(values) if values else np.zeros(0)


def _usage(problem: PlanProblem, keys: Sequence[str | None]) -> sparse.csr_array:
    """GPUs held per (limit, block): row ``ki * blocks + b`` sums ``gpus_per_replica n[v,b]`` over the
    variants of GPU type ``keys[ki]`` (None: of any type)."""
    idx = _Index(problem)
    rows, cols, vals = [], [], []
    blocks = np.arange(idx.nb)
    for ki, key in enumerate(keys):
        for i, svc in enumerate(problem.services):
            for j, v in enumerate(svc.variants):
                if key is None or v.gpu == key:
                    rows.append(ki * idx.nb + blocks)
                    cols.append(idx.var(i, j, N, 0) + blocks)
                    vals.append(np.full(idx.nb, float(v.gpus_per_replica)))
    if not rows:
        return sparse.csr_array(([], ([], [])), shape=(len(keys) * idx.nb, idx.size))
    return sparse.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                            shape=(len(keys) * idx.nb, idx.size))


HULL_COLUMNS = 200
"""Most whole counts of the larger capacity a step's demand spans for which ``_hull_facets`` is
computed (its candidates are built column by column); above, that step keeps the MIR rows."""


def _chain(points: Sequence[tuple[int, int]], upper: bool) -> list[tuple[int, int]]:
    """The upper (``upper``) or lower convex chain of 2-D ``points`` sorted by their first
    coordinate (Andrew's monotone chain)."""
    out: list[tuple[int, int]] = []
    for p in points:
        while len(out) >= 2:
            cross = ((out[-1][0] - out[-2][0]) * (p[1] - out[-2][1])
                     - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0]))
            if (cross >= 0) if upper else (cross <= 0):
                out.pop()
            else:
                break
        out.append(p)
    return out


def _hull_candidates(big: float, small: float, demand: float) -> np.ndarray:
    """Points ``(y1, y2, g)``, shape (n, 3), among which lie the vertices of the convex hull of
    ``{(y, g(y)): y whole >= 0}``, ``g(y) = max(0, demand - big y1 - small y2)``, up to its recession
    directions (+y, +g): the vertices of the whole points below the line ``big y1 + small y2 =
    demand`` (where ``g`` is that plane, its upper chain and the two ends on the y1 axis) and of those
    on or above it (``g = 0``, its lower chain). ``big >= small > 0``, ``demand > 0``."""
    top = math.floor(demand / big)
    below, above = [], []
    for y1 in range(top + 2):
        rest = demand - big * y1
        if rest > 0:
            a = math.floor(rest / small)
            below.append((y1, a))
            above.append((y1, a + 1 if a * small < rest else a))
        else:
            above.append((y1, 0))
    ends = [(0, 0), (top if demand - big * top > 0 else top - 1, 0)]
    pts = {(y1, y2) for y1, y2 in _chain(below, True) + ends + _chain(above, False) if y1 >= 0}
    return np.array([(y1, y2, max(0.0, demand - big * y1 - small * y2)) for y1, y2 in sorted(pts)], dtype=float)


def _hull_facets(big: float, small: float, demands: Sequence[float]) -> np.ndarray:
    """The facets ``alpha_1 y1 + alpha_2 y2 + g >= gamma`` (``gamma > 0``) of the convex hull of the
    mixed-integer knapsack ``{(y, g): big y1 + small y2 + g >= d, y whole >= 0, g >= 0}`` for each
    demand ``d`` of ``demands``: rows ``(position in demands, alpha_1, alpha_2, gamma)``, shape (m, 4),
    the row itself among them. Every plane through three of ``_hull_candidates``' points that lies
    on or below all of them and does not increase in ``y`` (so it keeps the recession directions
    below it too) is one; ``g`` is linear on each of the two sets the candidates span, so that check
    covers every whole point. ``gamma`` is lowered by 1e-9 x max(1, d) against rounding, and the
    planes found more than once are kept once, rounded outward (``_outward``). The tests
    check the facets against qhull's hull (scipy.spatial.ConvexHull) of every whole point of a box."""
    cands = [_hull_candidates(big, small, d) for d in demands]
    n = max(len(v) for v in cands)
    if n < 3:
        return np.zeros((0, 4))
    pts = np.stack([np.vstack([v, np.repeat(v[:1], n - len(v), axis=0)]) for v in cands])  # padded: (S, n, 3)
    tri = np.array(list(itertools.combinations(range(n), 3)))
    p1, p2, p3 = pts[:, tri[:, 0]], pts[:, tri[:, 1]], pts[:, tri[:, 2]]
    normal = np.cross(p2 - p1, p3 - p1)  # (S, T, 3): the plane through each triple
    vertical = np.abs(normal[..., 2]) <= 1e-9
    alpha = normal[..., :2] / np.where(vertical, 1.0, normal[..., 2])[..., None]
    gamma = p1[..., 2] + np.sum(alpha * p1[..., :2], axis=-1)
    lhs = pts[:, None, :, 2] + np.einsum("stk,snk->stn", alpha, pts[..., :2])
    tol = np.broadcast_to(1e-9 * np.maximum(1.0, np.asarray(demands, dtype=float))[:, None], gamma.shape)
    good = (~vertical & np.all(lhs >= (gamma - tol)[..., None], axis=2)
            & np.all(alpha >= -1e-12, axis=2) & (gamma > tol))
    step = np.nonzero(good)[0]
    rows = np.column_stack([step, np.maximum(alpha[good], 0.0), gamma[good] - tol[good]])
    return _outward(rows)


def _outward(rows: np.ndarray) -> np.ndarray:
    """``_hull_facets``' rows ``(position, alpha_1, alpha_2, gamma)`` (shape (m, 4)) with the planes that
    agree to 9 decimals (one facet, found through several triples) kept once, each coefficient
    rounded outward: ``alpha`` to 9 decimals where that is not below the largest of the group's,
    else that largest, and ``gamma`` where not above the smallest, else that smallest. The row then
    keeps every point each of its planes keeps (``y >= 0``): rounded to nearest, an ``alpha`` 5e-10
    low cut whole points at ``y2`` ~ 10^4 (a small capacity's count) by up to ~8e-6, more than
    ``gamma``'s 1e-9 x d. Sorted as ``np.unique`` sorts the rounded rows."""
    if not len(rows):
        return rows
    keys, group = np.unique(np.round(rows, 9), axis=0, return_inverse=True)
    group = np.ravel(group)
    out = keys.copy()
    for col, top in ((1, True), (2, True), (3, False)):
        worst = np.full(len(keys), -np.inf if top else np.inf)
        (np.maximum if top else np.minimum).at(worst, group, rows[:, col])
        out[:, col] = np.maximum(keys[:, col], worst) if top else np.minimum(keys[:, col], worst)
    return out


def _mir_rows(problem: PlanProblem, idx: _Index, rows: _Rows, hull: bool = False) -> None:
    """Valid inequalities that tighten the LP relaxation without changing the optimum (module
    docstring, "Solving fast"): per service and step, for each capacity ``C`` a variant has there,
    the mixed-integer rounding of ``sum_v capacity_v s_v / C + u / C >= demand / C`` over whole
    serving counts ``s_v`` (a coefficient's fractional part at least 0 where the capacity sits just below
    a whole multiple of ``C``, the right-hand side lowered by 1e-12 per whole unit of demand against
    rounding, so no row cuts a whole point of the demand row). An optimal plan serves
    ``s = min(n, ready)``, whole when the ready counts are, so a service with a fractional ``ready``
    gets none. With ``hull`` (the tuned search), a step
    whose variants have two capacities gets instead every facet of that row's convex hull over whole
    serving counts (``_hull_facets``, each capacity's variants summed; the two MIR rows are among
    them; each capacity, rounded to 9 decimals to match the variants, is taken at the largest unrounded
    capacity it stands for, so no facet cuts a point of the demand row); with one capacity the MIR row is
    the hull; with three or more the MIR rows stay. A
    service with prefill/decode pools gets them on its demand row alone, the pools' share ``x``
    counted as continuous as ``u`` is, its aggregated variants the only whole terms.

    Rows in order: per service, its steps' MIR rows (step by step, each step's capacities
    ascending), then its hull rows; each service's steps at once, with the arithmetic of a scalar
    loop (``tests/unit/test_planning_build.py`` holds it to the bit against the loop)."""
    h = problem.steps
    for i, svc in enumerate(problem.services):
        if any(np.any(np.abs(v.ready - np.round(v.ready)) > FEASIBLE_TOL) for v in svc.variants):
            continue
        loose = ([idx.u(i, 0)] + ([idx.shed[i]] if i in idx.shed else [])  # step 0's continuous
                 + ([idx.pd[i]] if i in idx.pd else []))  # the pools' share: continuous in the demand row
        # each loose column's coefficient in the demand row: 1, the pools' share 1 - pd_spill (1 without a reserve)
        coefficient = {col: 1.0 - svc.pd_spill if i in idx.pd and col == idx.pd[i] else 1.0 for col in loose}
        demand = np.asarray(svc.demand_rps, dtype=float)
        caps = np.array([np.asarray(v.capacity_rps, dtype=float) if v.role is None else np.zeros(h)
                         for v in svc.variants]).reshape(len(svc.variants), h)  # (variants, steps)
        values, at = np.unique(caps, return_inverse=True)
        rounded = np.array([round(float(value), 9) for value in values])[np.ravel(at)].reshape(caps.shape)
        units = np.sort(np.where(caps > FEASIBLE_TOL, rounded, np.inf), axis=0)  # each step's capacities, ascending
        distinct = np.isfinite(units)
        distinct[1:] &= units[1:] != units[:-1]
        pairs: dict[tuple[float, float], list[int]] = {}
        paired = np.zeros(h, dtype=bool)
        if hull:
            big = np.max(np.where(distinct, units, -np.inf), axis=0)
            paired = (distinct.sum(axis=0) == 2) & (demand > FEASIBLE_TOL)
            paired[paired] = demand[paired] / big[paired] <= HULL_COLUMNS
            for k in np.nonzero(paired)[0].tolist():
                pairs.setdefault((float(big[k]), float(units[0, k])), []).append(k)
        step, m = np.nonzero(distinct.T & ~paired[:, None])  # step by step, capacities ascending
        unit = units[m, step]
        beta = demand[step] / unit
        f = beta - np.floor(beta)
        keep = (f > 1e-6) & (f < 1.0 - 1e-6)  # whole: the rounding adds nothing
        step, unit, beta, f = step[keep], unit[keep], beta[keep], f[keep]
        if len(step):
            a = caps[:, step] / unit
            whole = np.floor(a + 1e-9)
            coef = np.where(a > 0, f * whole + np.minimum(np.maximum(a - whole, 0.0), f), 0.0)
            # the right-hand side lowered by 1e-12 per whole unit of demand: f, 1 / unit and the coefficients
            # each carry a rounding error, by which the row as written cut whole points of the demand row
            # by up to ~7e-14 (tests/unit/test_planning_fast.py, exact comparison)
            rows.add_rows([col + step for col in loose]
                          + [np.where(coef[j] > 0, idx.s(i, j, 0) + step, -1) for j in range(len(svc.variants))],
                          [coefficient[col] / unit for col in loose] + list(coef),
                          f * np.ceil(beta) - 1e-12 * np.ceil(beta),
                          np.full(len(step), np.inf))
        for (big_unit, small), steps in pairs.items():
            # built on the largest unrounded capacity of the variants each rounded one stands for (over
            # these steps): every point the demand row allows (its unrounded capacities) is then one of
            # the hull's knapsack, so no facet cuts it; built on the rounded ones, a facet cut such a
            # point by up to ~6e-7 where a capacity rounded down and its count was large
            grouped, unrounded = rounded[:, steps], caps[:, steps]
            facets = _hull_facets(float(np.max(unrounded[grouped == big_unit])),
                                  float(np.max(unrounded[grouped == small])),
                                  [float(svc.demand_rps[k]) for k in steps])
            at_step = np.asarray(steps)[facets[:, 0].astype(int)]  # each facet's step
            cols: list[np.ndarray] = [c + at_step for c in loose]
            vals: list[np.ndarray | float] = [coefficient[col] for col in loose]
            for j, v in enumerate(svc.variants):
                if v.role is not None:  # not in the demand row (the pools' rows have x, not demand)
                    continue
                cap_at = rounded[j, at_step]  # rounded as the units were: np.round differs ~2 in 10^6
                coefs = np.where(cap_at == big_unit, facets[:, 1], np.where(cap_at == small, facets[:, 2], 0.0))
                cols.append(np.where(coefs > 0, idx.s(i, j, 0) + at_step, -1))
                vals.append(coefs)
            rows.add_rows(cols, vals, facets[:, 3], np.full(len(facets), np.inf))


def _step_limit_rows(idx: _Index, i: int, svc: PlanService, length: np.ndarray, rows: _Rows) -> None:
    """Service ``i``'s step limits, per block ``b`` (``length``: each block's ``dt_s``): the orders
    (``cw + cc``) and then the removals (``cd``) of block ``b`` less those of block ``b - 1``, summed
    over its variants, within ``max_up`` and ``max_down`` per ``dt_s`` of block ``b - 1`` (the first
    block: within them); a limit that is None gives no rows."""
    nb = idx.nb
    kinds = [(ks, limit) for ks, limit in (((CW, CC), svc.max_up), ((CD,), svc.max_down)) if limit is not None]
    if not kinds:
        return
    blocks = np.arange(nb)
    per_row, cols, vals, ubs = [], [], [], []
    for t, (ks, limit) in enumerate(kinds):
        first = np.array([idx.var(i, j, kind, 0) for j in range(len(svc.variants)) for kind in ks])
        now = first[None, :] + blocks[:, None]  # (blocks, terms): this block's column of each term
        pair = np.stack([now, np.where(blocks[:, None] > 0, now - 1, -1)], axis=2).reshape(nb, -1)
        there = pair >= 0
        per_row.append(np.nonzero(there)[0] * len(kinds) + t)
        cols.append(pair[there])
        vals.append(np.broadcast_to(np.array([1.0, -1.0]), (nb, len(first), 2)).reshape(nb, -1)[there])
        ubs.append(np.concatenate([[float(limit)], limit * length[:-1]]))
    row = np.concatenate(per_row)
    order = np.argsort(row, kind="stable")  # block by block, the orders' row before the removals'
    rows.add_entries(row[order], np.concatenate(cols)[order], np.concatenate(vals)[order],
                     np.full(nb * len(kinds), -np.inf), np.ravel(np.column_stack(ubs)))


def _build(problem: PlanProblem, limits: bool, caps: Mapping[str | None, np.ndarray] | None = None,
           weights: np.ndarray | None = None) -> tuple[np.ndarray, LinearConstraint, Bounds, np.ndarray]:
    """The MILP ``(c, constraints, bounds, integrality)``; without ``limits`` the step limits are left
    out. ``caps`` (limit key -> GPUs per block) replace the shared quota and budget rows by rows of
    their own, the last ones (``_solve_decomposed`` sets them per service). ``weights``: each step
    lasts that many ``dt_s`` (shape (H,), whole numbers >= 1; None: 1 each), as in the model on the
    blocks' own lengths the limits are shared on (``_blocked``): costs per step scale with it, step
    limits with a block's length in ``dt_s``, and an order is ready from the first step that begins
    ``warm_steps`` / ``cold_steps`` ``dt_s`` after its block began."""
    idx = _Index(problem)
    h, dt, nb = problem.steps, problem.dt_s, idx.nb
    w = np.ones(h) if weights is None else np.asarray(weights, dtype=float)
    begins = np.concatenate([[0.0], np.cumsum(w)[:-1]])  # each step's start, in dt_s
    length = np.add.reduceat(w, idx.starts)  # dt_s per block
    c = np.zeros(idx.size)
    lo = np.zeros(idx.size)
    hi = np.full(idx.size, np.inf)
    integral = np.zeros(idx.size)
    rows = _Rows()
    for i, svc in enumerate(problem.services):
        for j, v in enumerate(svc.variants):
            cols = {kind: [idx.var(i, j, kind, b) for b in range(nb)] for kind in range(BLOCK_VARS)}
            for kind in (CW, CC, CD):  # n = current + cw + cc - cd is then whole too; HiGHS branches less
                integral[cols[kind][:idx.integer_blocks]] = 1
            c[cols[N]] = v.price_per_hour * dt / 3600.0 * length
            c[cols[CW][-1]] += v.start_cost
            c[cols[CC][-1]] += v.start_cost
            c[cols[CD][-1]] += v.stop_cost
            lo[cols[N]] = max(v.min_replicas, min(v.keep, v.max_replicas))
            hi[cols[N]] = v.max_replicas
            hi[cols[CW]] = v.warm_free
            # per block: n - cw - cc + cd = current, then (from the second) each of cw, cc, cd never falls
            block_rows, block_cols, block_vals, balance = _block_rows(nb)
            current = float(v.current)
            rows.add_entries(block_rows, idx.blocks[i, j] + block_cols, block_vals, np.where(balance, current, 0.0),
                             np.where(balance, current, np.inf))
            # per step k, two rows: s <= n, and s <= the replicas ready by then (today's, plus the
            # orders of the last block begun Lw / Lc steps before, less the removals: a removal
            # takes a ready replica)
            steps = np.arange(h)
            serve = np.repeat(idx.s(i, j, 0) + steps, 2)
            second = np.ravel(np.column_stack([np.asarray(cols[N])[idx.block_of], np.asarray(cols[CD])[idx.block_of]]))
            ordered = []
            for kind, lag in ((CW, v.warm_steps), (CC, v.cold_steps)):
                # the last step begun lag dt_s or more before each step's start (k - lag for steps of dt_s)
                src = np.searchsorted(begins, begins - lag + 1e-9, side="right") - 1
                col = np.where(src >= 0, np.asarray(cols[kind])[idx.block_of[np.maximum(src, 0)]], -1)
                ordered.append(np.ravel(np.column_stack([np.full(h, -1), col])))
            rows.add_rows([serve, second, *ordered], [1.0, np.tile([-1.0, 1.0], h), -1.0, -1.0],
                          np.full(2 * h, -np.inf),
                          np.ravel(np.column_stack([np.zeros(h), np.asarray(v.ready, dtype=float)])))
        c[idx.u(i, 0):idx.u(i, 0) + h] = svc.miss_cost * dt * w
        shed: list[np.ndarray] = []
        if i in idx.shed:
            c[idx.shed[i]:idx.shed[i] + h] = svc.shed_cost * dt * w
            hi[idx.shed[i]:idx.shed[i] + h] = np.asarray(svc.shed_rps, dtype=float)
            shed = [idx.shed[i] + np.arange(h)]
        pd: list[np.ndarray] = []
        if i in idx.pd:  # x[k]: the requests/s the pools serve, at most the demand, at no cost of its own
            pd = [idx.pd[i] + np.arange(h)]
            hi[pd[0]] = np.maximum(np.asarray(svc.demand_rps, dtype=float), 0.0)
        agg = [j for j, v in enumerate(svc.variants) if v.role is None]
        rows.add_rows([idx.u(i, 0) + np.arange(h), *shed, *pd]
                      + [idx.s(i, j, 0) + np.arange(h) for j in agg],
                      [1.0] * (1 + len(shed)) + [1.0 - svc.pd_spill] * len(pd)
                      + [np.asarray(svc.variants[j].capacity_rps, dtype=float) for j in agg],
                      np.asarray(svc.demand_rps, dtype=float), np.full(h, np.inf))
        for role in ROLES if pd else ():  # each pool carries the pools' share: sum capacity s - x >= 0
            mine = [j for j, v in enumerate(svc.variants) if v.role == role]
            rows.add_rows([idx.s(i, j, 0) + np.arange(h) for j in mine] + pd,
                          [np.asarray(svc.variants[j].capacity_rps, dtype=float) for j in mine] + [-1.0],
                          np.zeros(h), np.full(h, np.inf))
        if pd and svc.pd_ratio is not None:  # Kthena's ratio: min_ratio D <= P <= max_ratio D per block
            lo_r, hi_r = svc.pd_ratio
            pre = [j for j, v in enumerate(svc.variants) if v.role == "prefill"]
            dec = [j for j, v in enumerate(svc.variants) if v.role == "decode"]
            ratio_cols = [idx.var(i, j, N, 0) + np.arange(nb) for j in pre + dec]
            rows.add_rows(ratio_cols, [1.0] * len(pre) + [-lo_r] * len(dec), np.zeros(nb), np.full(nb, np.inf))
            rows.add_rows(ratio_cols, [1.0] * len(pre) + [-hi_r] * len(dec), np.full(nb, -np.inf), np.zeros(nb))
        if limits:
            _step_limit_rows(idx, i, svc, length, rows)
    if _strengthened(problem):
        _mir_rows(problem, idx, rows, hull=_tuned(problem) and problem.hull)
    cons = rows.constraint(idx.size)
    keys = list(caps) if caps is not None else _limit_keys(problem)
    if keys:
        usage = _usage(problem, keys)
        if caps is not None:
            ub = np.concatenate([np.asarray(caps[key], dtype=float) for key in keys])
        else:
            ub = _limits(problem, keys)
        cons = LinearConstraint(sparse.vstack([cons.A, usage], format="csr"),
                                np.concatenate([cons.lb, np.full(len(ub), -np.inf)]), np.concatenate([cons.ub, ub]))
    return c, cons, Bounds(lo, hi), integral


@contextmanager
def _solver_stdout_silenced() -> Iterator[None]:
    """File descriptor 1 on /dev/null meanwhile: HiGHS prints a debug line
    (``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();``) straight to
    stdout whatever its output options (ERGO-Code/HiGHS#2783), which breaks ``--json`` output."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(null)
        os.close(saved)


def _highs_limit(res: OptimizeResult) -> str | None:
    """The limit HiGHS stopped at (``HIGHS_LIMITS``), or None when it stopped for another reason."""
    m = re.search(r"HiGHS Status (\d+)", str(res.message))
    if m is not None and int(m.group(1)) in HIGHS_LIMITS:
        return HIGHS_LIMITS[int(m.group(1))]
    return "time or iteration limit" if res.status == 1 else None


def _feasible(x: np.ndarray, cons: LinearConstraint, bounds: Bounds) -> bool:
    """True when ``x`` meets every row and bound within ``FEASIBLE_TOL``."""
    ax = cons.A @ x
    return bool(np.all(ax >= cons.lb - FEASIBLE_TOL) and np.all(ax <= cons.ub + FEASIBLE_TOL)
                and np.all(x >= bounds.lb - FEASIBLE_TOL) and np.all(x <= bounds.ub + FEASIBLE_TOL))


def _complete(problem: PlanProblem, counts: Mapping[tuple[int, int], np.ndarray]) -> np.ndarray:
    """Every variable of the plan with replica counts ``counts`` ((service, variant) -> ``n`` per
    block, whole numbers): each increase ordered (warm while ``warm_free`` lasts), each decrease a
    removal, every ready replica serving (at most ``n``), the rest of the demand shed up to
    ``shed_rps`` (when ``shed_cost`` is below ``miss_cost``) and the remainder unserved; with
    prefill/decode pools, they serve what the smaller of their two capacities carries (at most the
    demand) before the aggregated variants. The serving, shed and unserved parts are the cheapest
    for these counts (serving costs nothing); whether the whole meets the constraints is
    ``_feasible``'s to say."""
    idx = _Index(problem)
    h = problem.steps
    x = np.zeros(idx.size)
    for i, svc in enumerate(problem.services):
        served = np.zeros(h)
        pools = {role: np.zeros(h) for role in ROLES}
        for j, v in enumerate(svc.variants):
            n = np.asarray(counts[i, j], dtype=float)
            cum = np.zeros((BLOCK_VARS, idx.nb))
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
            for kind in range(BLOCK_VARS):
                x[idx.var(i, j, kind, 0):idx.var(i, j, kind, 0) + idx.nb] = cum[kind]
            # every step at once, each step's arithmetic in the order a loop over the steps did it
            # (the same numbers to the bit: where rather than max/min, which could flip a zero's sign)
            ready = np.asarray(v.ready, dtype=float) - cum[CD, idx.block_of]
            for kind, steps in ((CW, v.warm_steps), (CC, v.cold_steps)):
                if steps < h:
                    ready[steps:] = ready[steps:] + cum[kind, idx.block_of[:h - steps]]
            held = n[idx.block_of]
            s = np.where(ready < held, ready, held)
            s = np.where(s > 0.0, s, 0.0)
            x[idx.s(i, j, 0):idx.s(i, j, 0) + h] = s
            role = served if v.role is None else pools[v.role]
            role += np.asarray(v.capacity_rps, dtype=float) * s
        demand = np.asarray(svc.demand_rps, dtype=float)
        if i in idx.pd:
            pd = np.minimum(np.minimum(pools["prefill"], pools["decode"]), np.maximum(demand, 0.0))
            x[idx.pd[i]:idx.pd[i] + h] = pd
            served = served + (1.0 - svc.pd_spill) * pd  # the demand row's coefficient (``pd_spill``)
        left = np.maximum(demand - served, 0.0)
        if i in idx.shed and svc.shed_cost < svc.miss_cost:
            shed = np.minimum(left, np.asarray(svc.shed_rps, dtype=float))
            x[idx.shed[i]:idx.shed[i] + h] = shed
            left = left - shed
        x[idx.u(i, 0):idx.u(i, 0) + h] = left
    return x


def settled_flows(svc: PlanService, replicas: Mapping[str, np.ndarray],
                  dt_s: float) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The serving ``s[v,k]`` (variant -> shape (H,)) and the pools' requests/s ``x[k]`` (None without
    role variants) that ``_complete`` gives ``svc`` for the plan's replica counts per step ``replicas``
    (``Plan.replicas[svc.name]``): every ready replica serving (at most ``n``), the pools the smaller
    of their two capacities (at most the demand).

    ``Plan.serving`` and ``Plan.pd_rps`` are the solver's columns, and with ``pd_spill`` above 0 the
    cost leaves them free within a range (the pools' share ``x`` and the aggregated serving that
    carries the rest cost nothing): the MPC's ``spill_idle`` reads these instead. Counts per step
    (one block a step) give the same values as the plan's own blocks, its counts being constant
    within each."""
    h = len(np.asarray(svc.demand_rps))
    problem = PlanProblem([svc], dt_s, h, blocks=list(range(h)))
    idx = _Index(problem)
    x = _complete(problem, {(0, j): np.asarray(replicas[v.name], dtype=float) for j, v in enumerate(svc.variants)})
    serving = {v.name: x[idx.s(0, j, 0):idx.s(0, j, 0) + h].copy() for j, v in enumerate(svc.variants)}
    pools = x[idx.pd[0]:idx.pd[0] + h].copy() if 0 in idx.pd else None
    return serving, pools


def _gpus(variants: Sequence[PlanVariant], counts: Sequence[int], gpu: str | None) -> int:
    """GPUs of type ``gpu`` (None: of any type) that ``counts`` replicas of ``variants`` hold."""
    return sum(n * v.gpus_per_replica for v, n in zip(variants, counts, strict=True) if gpu is None or v.gpu == gpu)


def _greedy_needs(svc: PlanService, k: int, need: float,
                  covered: Mapping[str | None, float]) -> dict[str | None, float]:
    """The capacity ``greedy_counts`` covers per role (None: aggregated), requests/s, for a demand
    ``need`` at step ``k``: all of it on the aggregated variants, unless the service has
    prefill/decode pools and no aggregated variant serves, or a pair of the cheapest prefill and
    decode variants (by $ per request/s) costs less per request/s than the cheapest aggregated one;
    then both pools cover what the aggregated replicas already ``covered`` leave.

    With a spill reserve ``R`` (``PlanService.pd_spill``) the demand row counts the pools' share ``P``
    at ``1 - R``, so the aggregated variants hold ``R P`` beside what they cover: they then need
    ``covered + R P``, and the pools are picked where ``(p + d) / (1 - R)`` is below the aggregated
    price ``a`` (per request/s of demand the pools' route costs ``p + d + R a``). ``R`` 0: the rule
    above, to the bit (a division by 1.0 and no aggregated need)."""
    def cheapest(role: str | None) -> float:
        return min((v.price_per_hour / v.capacity_rps[k] for v in svc.variants
                    if v.role == role and v.capacity_rps[k] > 0), default=math.inf)
    needs: dict[str | None, float] = dict.fromkeys([None, *ROLES], 0.0)
    spill = svc.pd_spill
    if not _has_roles(svc) or cheapest(None) <= (cheapest("prefill") + cheapest("decode")) / (1.0 - spill):
        needs[None] = need
    else:
        needs["prefill"] = needs["decode"] = max(0.0, need - covered[None])
        if spill > 0:  # the reserve on the aggregated variants (with none serving, nothing holds it)
            needs[None] = covered[None] + spill * needs["prefill"]
    return needs


def greedy_counts(problem: PlanProblem, limits: bool = True,
                  remove_first: Mapping[int, Sequence[int]] | None = None) -> dict[tuple[int, int], np.ndarray]:
    """A plan built without the solver: (service, variant) -> replicas per block, whole numbers.

    Block by block: each variant's floor is the fewest replicas it can hold, its count in the block
    before (today's for the first) less the removals allowed, from the dearest variant (by $ per
    request/s, ``price_per_hour / capacity_rps`` at the block's first step) first: within the step
    limit ``max_down`` (with ``limits``), never below ``min_replicas`` or ``keep``, and only of
    replicas ready by the block's first step (today's ready ones and the orders one cold start old:
    a removal takes a ready replica). Every service's floor is reserved against the GPU quotas and
    budget (a limit below today's holding counts as that holding); then, service by service, until
    the capacity covers the block's highest demand from its first step to the longest cold start of
    the service's variants after its last (so replicas are ordered before the demand they serve),
    replicas removed to reach the floor are kept back, cheapest first, then more are ordered,
    cheapest first, up to ``max_replicas``, within the GPU limits and (with ``limits``) ``max_up``.
    A service with prefill/decode pools covers the demand either with its aggregated variants or
    with both pools, whichever is cheaper per request/s, the aggregated variants then holding the
    spill reserve (``PlanService.pd_spill``) on the pools' share (``_greedy_needs``). ``remove_first``
    (service index -> its variants' indices) removes in that order instead of the dearest first
    (``_solve_decomposed``: the GPU types the coordinator prices first).
    """
    idx = _Index(problem)
    h = problem.steps
    ends = [*idx.starts[1:], h]
    held: dict[str | None, int] = {None: 0}
    for svc in problem.services:
        for v in svc.variants:
            held[v.gpu] = held.get(v.gpu, 0) + v.current * v.gpus_per_replica
            held[None] += v.current * v.gpus_per_replica
    limit: dict[str | None, float] = {key: math.inf for key in held}
    for gpu, q in problem.gpu_quota.items():
        limit[gpu] = max(q, held.get(gpu, 0))
    if problem.gpu_budget is not None:
        limit[None] = max(problem.gpu_budget, held[None])
    counts = {(i, j): np.zeros(idx.nb, dtype=int) for i, svc in enumerate(problem.services)
              for j in range(len(svc.variants))}
    orders = {key: np.zeros(idx.nb) for key in counts}  # replicas ordered by each block, cumulative
    removed = dict.fromkeys(counts, 0.0)  # replicas removed so far
    for b in range(idx.nb):
        k0 = idx.starts[b]
        length = 1 if b == 0 else ends[b - 1] - idx.starts[b - 1]
        prev, floor, ranked = {}, {}, {}
        for i, svc in enumerate(problem.services):
            order = [j for _, j in sorted((v.price_per_hour / v.capacity_rps[k0], j)
                                          for j, v in enumerate(svc.variants) if v.capacity_rps[k0] > 0)]
            ranked[i] = order + [j for j in range(len(svc.variants)) if j not in order]
            prev[i] = [int(v.current) if b == 0 else int(counts[i, j][b - 1]) for j, v in enumerate(svc.variants)]
            floor[i] = list(prev[i])
            down = math.inf if svc.max_down is None or not limits else svc.max_down * length
            for j in (remove_first[i] if remove_first is not None and i in remove_first
                      else reversed(ranked[i])):  # the dearest go first
                v = svc.variants[j]
                lag = k0 - v.cold_steps  # every order counted cold: ready no sooner than it may be
                ready = v.ready[k0] + (orders[i, j][idx.block_of[lag]] if lag >= 0 else 0) - removed[i, j]
                lowest = max(v.min_replicas, min(v.keep, v.max_replicas))
                shrink = int(max(0, min(prev[i][j] - lowest, down, math.floor(ready + FEASIBLE_TOL))))
                floor[i][j], down = prev[i][j] - shrink, down - shrink
        used = {key: sum(_gpus(svc.variants, floor[i], key) for i, svc in enumerate(problem.services))
                for key in limit}
        for i, svc in enumerate(problem.services):
            ahead = max(v.cold_steps for v in svc.variants)
            need = float(np.max(svc.demand_rps[k0:min(h, ends[b] + ahead)]))
            target = list(floor[i])
            covered = dict.fromkeys([None, *ROLES], 0.0)  # per role (None: aggregated), requests/s
            for v, n in zip(svc.variants, target, strict=True):
                covered[v.role] += v.capacity_rps[k0] * n
            up = math.inf if svc.max_up is None or not limits else svc.max_up * length
            for j, v in enumerate(svc.variants):  # the lower bounds first, whatever they need
                before = target[j]
                target[j] = max(before, v.min_replicas, min(v.keep, v.max_replicas))
                covered[v.role] += v.capacity_rps[k0] * (target[j] - before)
                up -= max(0, target[j] - max(prev[i][j], before))
                for key in (v.gpu, None):
                    used[key] = used.get(key, 0) + (target[j] - before) * v.gpus_per_replica
            needs = _greedy_needs(svc, k0, need, covered)
            for keep_back in (True, False):  # first the replicas held before, then new orders
                for j in ranked[i]:
                    v = svc.variants[j]
                    if v.capacity_rps[k0] <= 0:
                        continue
                    while (covered[v.role] < needs[v.role]
                           and target[j] < (prev[i][j] if keep_back else v.max_replicas)
                           and (keep_back or up >= 1)
                           and all(used.get(key, 0) + v.gpus_per_replica <= limit.get(key, math.inf)
                                   for key in (v.gpu, None))):
                        target[j] += 1
                        covered[v.role] += v.capacity_rps[k0]
                        up -= 0 if target[j] <= prev[i][j] else 1
                        for key in (v.gpu, None):
                            used[key] = used.get(key, 0) + v.gpus_per_replica
            for j in range(len(svc.variants)):
                counts[i, j][b] = target[j]
                orders[i, j][b] = (orders[i, j][b - 1] if b else 0) + max(0, target[j] - prev[i][j])
                removed[i, j] += max(0, prev[i][j] - target[j])
    return counts


def _fallback(problem: PlanProblem, limits: bool, c: np.ndarray, cons: LinearConstraint,
              bounds: Bounds, caps: Mapping[str | None, np.ndarray] | None = None) -> tuple[np.ndarray, str, bool]:
    """A plan without HiGHS's MILP: the first of ``FALLBACKS`` that meets the constraints (with
    ``limits``, the greedy is tried without the step limits too, as ``solve`` drops them when no
    plan keeps them), its name, and whether the step limits were dropped. The hold is used whatever
    it breaks: it is today's fleet, and only a problem without any plan gets that far."""
    idx = _Index(problem)
    res = milp(c, constraints=cons, bounds=bounds, integrality=np.zeros(idx.size),
               options={"time_limit": problem.time_limit_s})
    if res.x is not None:
        counts = {(i, j): np.ceil(res.x[idx.var(i, j, N, 0):idx.var(i, j, N, 0) + idx.nb] - FEASIBLE_TOL)
                  for i, svc in enumerate(problem.services) for j in range(len(svc.variants))}
        x = _complete(problem, counts)
        if _feasible(x, cons, bounds):
            return x, "lp-rounded", False
    x = _complete(problem, greedy_counts(problem, limits))
    if _feasible(x, cons, bounds):
        return x, "greedy", False
    if limits:
        _, loose, loose_bounds, _ = _build(problem, False, caps)
        x = _complete(problem, greedy_counts(problem, limits=False))
        if _feasible(x, loose, loose_bounds):
            return x, "greedy", True
    held = {(i, j): np.full(idx.nb, v.current) for i, svc in enumerate(problem.services)
            for j, v in enumerate(svc.variants)}
    return _complete(problem, held), "hold", False


FAST_OPTIONS: dict[str, float | bool] = {
    "presolve": False, "mip_detect_symmetry": False, "mip_heuristic_effort": 0.0, "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False, "mip_heuristic_run_feasibility_jump": False,
    "mip_heuristic_run_root_reduced_cost": False, "mip_pool_soft_limit": 1}
"""HiGHS options for the searches with few free integer variables over a tight relaxation: the
search near the LP relaxation (``_near_lp``) and a problem whose later blocks are relaxed. On the
one-service problem whose later blocks are relaxed, HiGHS's presolve, symmetry detection, sub-MIP
heuristics and cut pool cost more than the branching they save (first block integer: 11 / 34 ms CPU
p50 / p99 against 25 / 60 with them; the pool limit alone took the near search's p99 from 100-120 to
47-49 ms), for the same plans. The near search over several services, where most columns are fixed,
turns presolve back on (``NEAR_OPTIONS``)."""

NEAR_OPTIONS: dict[str, float | bool] = {"presolve": True}
"""HiGHS options of the search near the LP relaxation (``_near_lp``) over ``FAST_OPTIONS``: there
every integer variable whole in the relaxation is fixed (most of them: ~11 of a service's 150 left
free at 50 services), and HiGHS's presolve removes the fixed columns before the root, which HiGHS
otherwise solves whole from scratch. On the 91 such searches of three 50-service solves (seed 0 of
``benchmarks/plan_solve.py --mpc --sizes 50``, all ended at the root) 619 against 1,156 ms of CPU,
the same integer values on every one and the cost within 1e-14 relative (measured on those, not a
property: under a gap, a time or node limit, or tied variants presolve may end at another incumbent)
(``docs/benchmarks.md``, "The search near the relaxation with presolve")."""

JOINT_UP_TO = 400
"""Service-steps (services x steps) up to which the MPC solves its problem jointly (near the LP
relaxation); above, decomposed (10 services of 40 steps jointly: 0.4 s CPU and within 1.2 % of the
optimum, decomposed 0.7 s; 20 services jointly 2.0 s, decomposed 1.0 s; ``docs/controllers.md``)."""

FINE_SHARES = 400
"""Service-steps up to which a decomposed solve shares the limits on the LP relaxation of the
problem itself (10 services of 40 steps: 0.1-0.3 s); above, on steps as long as the plan's blocks
(``COORDINATOR``; 50 services of 40 steps: 0.4-0.5 s against 2.4-3 s on the steps themselves)."""

COORDINATOR = 0
"""``PlanProblem.coarsen`` above ``FINE_SHARES`` service-steps: 0, the model on the blocks' lengths
(``_blocked``; the plan's first blocks are single steps, where the 4x longer steps once used here put
the first minute in one step and cost 2-4 % at 50 services: ``docs/controllers.md``)."""

COORDINATOR_OPTIONS: dict[str, float | bool | str] = {"simplex_dual_edge_weight_strategy": "devex"}
"""HiGHS's options for the coordinator's LP (its dual simplex): devex pricing took 0.36-0.45 s at 50
services against 0.46-0.51 s with HiGHS's default (steepest edge), to the same cost."""

EDGE_WEIGHT_STRATEGIES: dict[str, int] = {"steepest-devex": -1, "dantzig": 0, "devex": 1, "steepest": 2}
"""``linprog``'s names for ``simplex_dual_edge_weight_strategy`` -> HiGHS's values
(``SimplexEdgeWeightStrategy``: choose, Dantzig, devex, steepest edge), as
``scipy.optimize._linprog_highs`` maps them."""

DUAL_SIMPLEX_STRATEGY = 1
"""HiGHS's ``simplex_strategy`` for the dual simplex (``kSimplexStrategyDual``), which ``linprog``'s
``method="highs-ds"`` sets."""

WARM_COORDINATOR_OPTIONS: dict[str, float | bool | int | str] = {
    **COORDINATOR_OPTIONS, "solver": "simplex", "simplex_strategy": DUAL_SIMPLEX_STRATEGY,
    "simplex_dual_edge_weight_strategy":
        EDGE_WEIGHT_STRATEGIES[str(COORDINATOR_OPTIONS["simplex_dual_edge_weight_strategy"])]}
"""``COORDINATOR_OPTIONS`` and ``linprog``'s ``method="highs-ds"`` in HiGHS's own spelling (derived
from them: the dual simplex, the same pricing), for the coordinator's LP through scipy's HiGHS build
directly (``PlanProblem.warm_coordinator``)."""

BLOCK_PEAK = True
"""Whether the model on the blocks' lengths (``_blocked``) reads each block's demand at its peak:
the plan holds a block's replicas for its highest step (a replica costs less than the miss of one
step in blocks of up to 8 steps), and on the 50-service problems the mean came out costlier."""

LP_OPTIONS: dict[str, float | bool] = {"presolve": False}
"""HiGHS options for the services' LP relaxations in a decomposed solve (half the time with presolve)."""

TUNED_OPTIONS: dict[str, float | bool | int] = {
    "threads": 1, "mip_heuristic_effort": 0.0, "mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False,
    "mip_heuristic_run_feasibility_jump": False, "mip_heuristic_run_root_reduced_cost": False,
    "mip_pool_soft_limit": 1}
"""HiGHS options of the tuned exact search (``PlanProblem.tuned``): no primal heuristics (with the
valid inequalities the relaxation's own solutions come close to the optimum, and the search's time
is its proof; the sub-MIPs RINS and RENS run at the root whatever ``mip_heuristic_effort`` says);
the cut pool's soft limit at 1, so its cuts age out at once (the slowest root rounds separated
~1,900 cuts in 0.4 s; on fresh problems the CPU p99 fell from 418 to 188 ms); and one thread
(highspy 1.16 searches with a worker per core: on this 2-core machine, shared, that cost more CPU
than it saved). ``benchmarks/plan_solve.py --warm --levers`` measures each
(``docs/controllers.md#solving-fast``)."""

_OPTION_NAMES = {"node_limit": "mip_max_nodes"}
"""``scipy.optimize.milp``'s option names that HiGHS spells otherwise (scipy 1.17 ``_milp.py``)."""

_SCIPY_STATUS = {7: 0, 13: 1, 14: 1, 8: 2, 10: 3}
"""HiGHS's model status -> ``scipy.optimize.milp``'s ``status`` (0 optimal, 1 time or iteration
limit, 2 infeasible, 3 unbounded, 4 anything else), so highspy's result reads as scipy's."""


def _highspy_milp(c: np.ndarray, cons: LinearConstraint, bounds: Bounds, integral: np.ndarray,
                  options: Mapping[str, float | bool | int], start: np.ndarray | None) -> OptimizeResult | None:
    """``_milp`` through highspy (HiGHS's own binding), from the MIP start ``start`` (every variable,
    meeting every constraint: ``_start_x``). Returns what ``scipy.optimize.milp`` would (``x``,
    ``fun``, ``status``, a message with "HiGHS Status N", ``mip_node_count``), or None when HiGHS
    reports an error (scipy's path then solves): a run fails when another user of highspy in this
    process set up HiGHS's threads with another count, so the thread scheduler is reset and the run
    tried once more first."""
    assert highspy is not None
    a = sparse.csr_array(cons.A)
    inf = highspy.kHighsInf
    for attempt in range(2):
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        for key, value in options.items():
            name = _OPTION_NAMES.get(key, key)
            val = ("choose" if value else "off") if name == "presolve" and isinstance(value, bool) else value
            if h.setOptionValue(name, val) != highspy.HighsStatus.kOk:
                raise ValueError(f"planner: HiGHS {h.version()} has no option {name}={val!r}")
        h.passModel(len(c), a.shape[0], a.nnz, 2, 1, 0.0, np.asarray(c, dtype=float),  # 2: row-wise, 1: minimise
                    np.asarray(bounds.lb, dtype=float), np.where(np.isfinite(bounds.ub), bounds.ub, inf),
                    np.where(np.isfinite(cons.lb), cons.lb, -inf), np.where(np.isfinite(cons.ub), cons.ub, inf),
                    a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data.astype(float),
                    np.asarray(integral, dtype=np.int32))
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = list(start)
            h.setSolution(sol)
        if h.run() != highspy.HighsStatus.kError:
            break
        if attempt == 0:
            highspy.Highs.resetGlobalScheduler(True)
    else:
        return None
    model = int(h.getModelStatus())
    info = h.getInfo()
    feasible = int(info.primal_solution_status) == 2  # kSolutionStatusFeasible
    x = np.array(h.getSolution().col_value) if feasible else None
    status = _SCIPY_STATUS.get(model, 4)
    text = h.modelStatusToString(h.getModelStatus())
    return OptimizeResult(x=x, fun=float(info.objective_function_value) if feasible else None, status=status,
                          success=status == 0, message=f"{text} (HiGHS Status {model}: {text})",
                          mip_node_count=int(info.mip_node_count), mip_gap=float(info.mip_gap),
                          mip_dual_bound=float(info.mip_dual_bound))


def _tuned(problem: PlanProblem) -> bool:
    """Whether ``problem``'s search is the tuned exact one (``PlanProblem.tuned``)."""
    return problem.tuned and problem.neighbourhood is None and not problem.decompose and problem.integer_blocks is None


def shifted(replicas: Mapping[str, Mapping[str, np.ndarray]], steps: int,
            horizon: int) -> dict[str, dict[str, np.ndarray]]:
    """``replicas`` (a ``Plan``'s, per step) as a start ``steps`` steps later (``PlanProblem.start``):
    the first ``steps`` dropped, the last step repeated to ``horizon`` steps.

    Raises:
        ValueError: ``steps`` < 0, ``horizon`` < 1, or an empty plan (naming its service and variant).
    """
    if steps < 0 or horizon < 1:
        raise ValueError(f"shifted: need steps >= 0 and horizon >= 1, got {steps} and {horizon}")
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, variants in replicas.items():
        out[name] = {}
        for v, n in variants.items():
            n = np.asarray(n, dtype=float)
            if n.ndim != 1 or len(n) == 0:
                raise ValueError(f"shifted: {name}/{v} has no steps")
            moved = n[min(steps, len(n) - 1):]
            out[name][v] = np.concatenate([moved, np.full(max(0, horizon - len(moved)), moved[-1])])[:horizon]
    return out


def _start_x(problem: PlanProblem, cons: LinearConstraint, bounds: Bounds) -> tuple[np.ndarray | None, str]:
    """Every variable of ``PlanProblem.start`` (``_complete``) when it meets every constraint of the
    model ``cons``, ``bounds``, and a note for ``Plan.message``: each block's count the highest of its
    steps, else its first step's, clipped to the variant's bounds; None when neither meets them or
    a service or variant has no start."""
    start = problem.start or {}
    idx = _Index(problem)
    peak: dict[tuple[int, int], np.ndarray] = {}
    first: dict[tuple[int, int], np.ndarray] = {}
    for i, svc in enumerate(problem.services):
        for j, v in enumerate(svc.variants):
            n = start.get(svc.name, {}).get(v.name)
            if n is None:
                return None, f"; start dropped: none for {svc.name}/{v.name}"
            lo, hi = max(v.min_replicas, min(v.keep, v.max_replicas)), v.max_replicas
            n = np.rint(np.asarray(n, dtype=float))
            peak[i, j] = np.clip(np.maximum.reduceat(n, idx.starts), lo, hi)
            first[i, j] = np.clip(n[idx.starts], lo, hi)
    for counts, how in ((peak, "each block's peak"), (first, "each block's first step")):
        x = _complete(problem, counts)
        if _feasible(x, cons, bounds):
            return x, f"; started from the given plan ({how})"
    return None, "; start dropped: it breaks a constraint"


@functools.cache
def _var_type(kind: int) -> object:
    """scipy's HiGHS ``HighsVarType`` of integrality ``kind`` (0 continuous, 1 integer), made once:
    building one per column took ~1 ms of a one-service solve's model hand-over."""
    assert _core is not None
    return _core.HighsVarType(kind)


def _highs_lp(c: np.ndarray, cons: LinearConstraint, bounds: Bounds, integral: np.ndarray) -> object:
    """The ``HighsLp`` of scipy's HiGHS build that ``scipy.optimize.milp`` would pass it (column-wise,
    every variable's integrality set)."""
    assert _core is not None
    a = sparse.csc_array(cons.A)
    n_col, n_row = len(c), a.shape[0]
    lp = _core.HighsLp()
    lp.num_col_, lp.num_row_ = n_col, n_row
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n_col, n_row
    lp.a_matrix_.format_ = _core.MatrixFormat.kColwise
    lp.col_cost_ = np.asarray(c, dtype=np.float64)
    lp.col_lower_ = np.broadcast_to(bounds.lb, (n_col,)).astype(np.float64)
    lp.col_upper_ = np.broadcast_to(bounds.ub, (n_col,)).astype(np.float64)
    lp.row_lower_ = np.asarray(cons.lb, dtype=np.float64)
    lp.row_upper_ = np.asarray(cons.ub, dtype=np.float64)
    # as lists: the matrix's vectors take Python numbers 2-3x faster than a NumPy array's (the same values)
    lp.a_matrix_.start_ = a.indptr.tolist()
    lp.a_matrix_.index_ = a.indices.tolist()
    lp.a_matrix_.value_ = a.data.astype(np.float64).tolist()
    kinds = np.asarray(integral, dtype=np.uint8)
    lp.integrality_ = ([_var_type(0)] * n_col if not kinds.any()  # an LP: every column continuous
                       else [_var_type(i) for i in kinds.tolist()])
    return lp


@functools.cache
def _settable(names: frozenset[str]) -> bool:
    """Whether scipy's HiGHS build is reachable and its options object has every one of ``names``
    (``scipy.optimize.milp``'s spelling); an older build lacks some (scipy 1.15's has no
    ``mip_heuristic_run_rins``), and ``milp`` then passes them on as it always did (ignored, with
    a warning)."""
    if _core is None or _scipy_status is None:
        return False
    opts = _core.HighsOptions()
    return all(hasattr(opts, _OPTION_NAMES.get(n, n)) for n in names)


def _highs_options(options: Mapping[str, float | bool | int | str]) -> object:
    """``options`` as scipy's HiGHS build takes them (``scipy.optimize.milp``'s names and defaults:
    no log to the console, ``node_limit`` as ``mip_max_nodes``, ``presolve`` as on/off)."""
    assert _core is not None
    opts = _core.HighsOptions()
    opts.log_to_console = False
    for key, value in options.items():
        name = _OPTION_NAMES.get(key, key)
        setattr(opts, name, ("on" if value else "off") if name == "presolve" else value)
    return opts


def _highs_result(h: object, mip: bool) -> OptimizeResult:
    """What ``scipy.optimize.milp`` returns after HiGHS ran (its ``_highs_wrapper`` and ``milp``,
    scipy 1.17): ``x`` and ``fun`` where HiGHS has a plan, ``status``, ``message`` (with "HiGHS
    Status N"), ``success``, and for a MILP with a plan ``mip_node_count``, ``mip_dual_bound``,
    ``mip_gap`` (else None)."""
    assert _core is not None and _scipy_status is not None
    model = h.getModelStatus()  # type: ignore[attr-defined]
    info = h.getInfo()  # type: ignore[attr-defined]
    stopped = (_core.HighsModelStatus.kTimeLimit, _core.HighsModelStatus.kIterationLimit,
               _core.HighsModelStatus.kSolutionLimit)
    failed = (model not in (_core.HighsModelStatus.kOptimal, *stopped)
              or (model in stopped and info.objective_function_value == _core.kHighsInf)) if mip \
        else model != _core.HighsModelStatus.kOptimal
    if failed:
        text = (f"model_status is {h.modelStatusToString(model)}; primal_status is "  # type: ignore[attr-defined]
                f"{h.solutionStatusToString(info.primal_solution_status)}")  # type: ignore[attr-defined]
        x, fun = None, None
    else:
        text = h.modelStatusToString(model)  # type: ignore[attr-defined]
        x, fun = np.array(h.getSolution().col_value), info.objective_function_value  # type: ignore[attr-defined]
    status, message = _scipy_status(model, text)  # type: ignore[operator]
    res = OptimizeResult(status=status, message=message, success=status == 0, x=x, fun=fun)
    if mip and not failed:  # scipy reads HiGHS's MIP info only with a plan
        res.update(mip_node_count=info.mip_node_count, mip_dual_bound=info.mip_dual_bound, mip_gap=info.mip_gap)
    else:
        res.update(mip_node_count=None, mip_dual_bound=None, mip_gap=None)
    return res


def _direct_milp(c: np.ndarray, cons: LinearConstraint, bounds: Bounds, integral: np.ndarray,
                 options: Mapping[str, float | bool | int], start: np.ndarray | None = None) -> OptimizeResult:
    """``scipy.optimize.milp`` on the same HiGHS build, the same model and options, without its
    wrapper: the same answer (``test_the_direct_call_answers_as_scipy_milp``) for less time (its
    option checks and Python loops took 2-3 ms of a one-service LP's 7-9 ms). ``start``: a MIP start
    (every variable, meeting every constraint), which ``milp`` cannot pass; HiGHS's plan is then
    never dearer than it."""
    assert _core is not None
    h = _core._Highs()
    h.passOptions(_highs_options(options))
    h.passModel(_highs_lp(c, cons, bounds, integral))
    if start is not None:
        sol = _core.HighsSolution()
        sol.col_value = np.asarray(start, dtype=np.float64)
        sol.value_valid = True
        h.setSolution(sol)
    h.run()
    return _highs_result(h, bool(np.any(np.asarray(integral) > 0)))


class _WarmLp:
    """The LP relaxation of one model kept in HiGHS between solves that change only the right-hand
    sides of its last rows (the caps a decomposed solve sets per service, ``_with_caps``): each solve
    after the first starts from the last one's basis (dual simplex: 5 iterations against 277 cold,
    0.4 against 5-7 ms, one service of ``benchmarks/plan_solve.py``). Its cost is the optimum's; its
    solution may be another optimal one than a cold solve's where the LP has several."""

    def __init__(self, model: Model, caps: int, options: Mapping[str, float | bool | int]) -> None:
        """``model`` (``_build``'s with ``caps`` cap rows, the last ones), HiGHS's ``options``."""
        assert _core is not None
        c, cons, bounds, _ = model
        self.caps = caps
        self.h = _core._Highs()
        self.h.passOptions(_highs_options(options))
        self.h.passModel(_highs_lp(c, cons, bounds, np.zeros(len(c))))
        self.rows = len(cons.ub)

    def solve(self, caps: np.ndarray, time_limit: float) -> OptimizeResult:
        """The LP with its cap rows' upper bounds set to ``caps`` (shape (caps,)), within ``time_limit`` s."""
        first = self.rows - self.caps
        for r, cap in enumerate(caps):
            self.h.changeRowBounds(first + r, -np.inf, float(cap))
        self.h.setOptionValue("time_limit", float(time_limit))
        self.h.run()
        return _highs_result(self.h, False)


def _milp(c: np.ndarray, cons: LinearConstraint, bounds: Bounds, integral: np.ndarray,
          options: Mapping[str, float | bool | int]) -> OptimizeResult:
    """``scipy.optimize.milp``, through the HiGHS build inside scipy directly where it can be reached
    (``_direct_milp``: the same answer, less time); options it does not name are HiGHS's own, passed
    on verbatim. scipy warns that it does so, twice where HiGHS lacks the option (scipy 1.15's build has
    no ``mip_heuristic_run_rins``, ``_settable``): ``milp``'s ``RuntimeWarning`` "Unrecognized options
    detected: {...}. These will be passed to HiGHS verbatim.", then its HiGHS wrapper's ``OptimizeWarning``
    "Unrecognized options detected: {...}" as it skips the option; both are silenced, by that message only."""
    if _settable(frozenset(options)):
        return _direct_milp(c, cons, bounds, integral, options)
    with warnings.catch_warnings():
        for category in (RuntimeWarning, OptimizeWarning):
            warnings.filterwarnings("ignore", message="Unrecognized options detected: ", category=category)
        return milp(c, constraints=cons, bounds=bounds, integrality=integral, options=dict(options))


def _left(deadline: float) -> float:
    """Seconds left until ``deadline`` (``time.perf_counter``'s clock), never below 0."""
    return max(0.0, deadline - time.perf_counter())


def _options(problem: PlanProblem, deadline: float,
             extra: Mapping[str, float | bool | int] | None = None) -> dict[str, float | bool | int]:
    """HiGHS's options for ``problem`` with the time left until ``deadline``, ``extra`` over them."""
    options: dict[str, float | bool | int] = {"time_limit": _left(deadline), "mip_rel_gap": problem.mip_rel_gap}
    if problem.node_limit is not None:
        options["node_limit"] = problem.node_limit
    idx = _Index(problem)
    if idx.integer_blocks < idx.nb:
        options.update(FAST_OPTIONS)
    if _tuned(problem):
        options.update(TUNED_OPTIONS)
    options.update(extra or {})
    return options


@dataclass(frozen=True)
class _Result:
    """One solve: the plan's variables and how they were found (``Plan``'s fields of the same names)."""

    x: np.ndarray
    cost: float
    relaxed: bool
    limit: str | None
    fallback: str | None
    message: str
    nodes: int | None
    relaxation: float | None = None  # the LP relaxation's cost, when it was solved
    started: bool = False  # HiGHS was given PlanProblem.start


ROUNDING = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Thresholds a relaxed block's replica count is rounded at: up from this fractional part, down
below it (0: always up, 1: always down); the cheapest rounding that meets the constraints is kept."""


def _round_tail(problem: PlanProblem, c: np.ndarray, x: np.ndarray, cons: LinearConstraint,
                bounds: Bounds) -> np.ndarray | None:
    """Whole replica counts for the relaxed blocks of ``x`` (the integer ones kept): of the roundings
    at each of ``ROUNDING``'s thresholds, the cheapest that meets every constraint; None when none
    does."""
    idx = _Index(problem)
    k = idx.integer_blocks
    best, best_cost = None, math.inf
    tried = set()  # roundings already weighed: another threshold often rounds every count alike
    for threshold in ROUNDING:
        counts = {}
        for i, svc in enumerate(problem.services):
            for j in range(len(svc.variants)):
                first = idx.var(i, j, N, 0)
                n = x[first:first + idx.nb]
                tail = n[k:]
                down = np.floor(tail + FEASIBLE_TOL)
                counts[i, j] = np.concatenate([np.rint(n[:k]), np.where(tail - down > max(threshold, FEASIBLE_TOL),
                                                                        down + 1, down)])
        seen = b"".join(n.tobytes() for n in counts.values())
        if seen in tried:  # the same plan, cost and feasibility as before: it changes nothing
            continue
        tried.add(seen)
        rounded = _complete(problem, counts)
        cost = float(c @ rounded)
        if cost < best_cost - 1e-12 and _feasible(rounded, cons, bounds):
            best, best_cost = rounded, cost
    return best


def _tail_up(problem: PlanProblem, c: np.ndarray, cons: LinearConstraint, bounds: Bounds, integral: np.ndarray,
             deadline: float) -> OptimizeResult | None:
    """``PlanProblem.tail_up``'s search: the LP relaxation's replica counts ``n`` in the relaxed blocks
    rounded up (clipped to their bounds) and fixed there, the first ``integer_blocks`` searched whole
    (their orders, warm or cold, and removals; the relaxed blocks' orders stay continuous, their sums
    whole). None when the LP or that search finds no plan (at a limit, or where a rounded-up count
    breaks a step limit or quota)."""
    lp = _milp(c, cons, bounds, np.zeros(len(c)), {"time_limit": _left(deadline), **LP_OPTIONS})
    if lp.x is None:
        return None
    x = lp.x
    idx = _Index(problem)
    lo, hi = np.array(bounds.lb, dtype=float), np.array(bounds.ub, dtype=float)
    for i, svc in enumerate(problem.services):
        for j in range(len(svc.variants)):
            tail = np.arange(idx.var(i, j, N, idx.integer_blocks), idx.var(i, j, N, 0) + idx.nb)
            up = np.clip(np.ceil(x[tail] - FEASIBLE_TOL), lo[tail], hi[tail])
            lo[tail] = hi[tail] = up
    res = _milp(c, cons, Bounds(lo, hi), integral, _options(problem, deadline))
    return res if res.x is not None else None


def _near_lp(problem: PlanProblem, c: np.ndarray, cons: LinearConstraint, bounds: Bounds, integral: np.ndarray,
             options: Mapping[str, float | bool | int], deadline: float,
             warm: _WarmLp | None = None) -> OptimizeResult | None:
    """HiGHS's search near the LP relaxation (``PlanProblem.neighbourhood``): the integer variables
    whole in the relaxation fixed there, the fractional ones kept within ``neighbourhood`` of their
    floor and ceiling. None when the relaxation or that search finds no plan (the full search is
    then made). ``warm``: the relaxation solved there, with ``cons``'s cap rows (not yet solved: the
    same solve as without it, kept for the decomposition's later LPs of this service)."""
    if warm is not None:
        lp = warm.solve(cons.ub[warm.rows - warm.caps:], _left(deadline))
    else:
        lp = _milp(c, cons, bounds, np.zeros(len(c)), {"time_limit": _left(deadline), **LP_OPTIONS})
    if lp.x is None:
        return None
    k = float(problem.neighbourhood or 0)
    x, whole = lp.x, integral > 0
    frac = whole & (np.abs(x - np.rint(x)) > FEASIBLE_TOL)
    if not frac.any():  # whole already: the relaxation's plan is the optimum (half the services at 50)
        x = np.where(whole, np.rint(x), x)
        return OptimizeResult(x=x, fun=float(c @ x), status=0, success=True, mip_node_count=0,
                              message="the LP relaxation is whole (HiGHS Status 7: Optimal)", relaxation=float(lp.fun))
    fixed = whole & ~frac
    lo, hi = np.array(bounds.lb, dtype=float), np.array(bounds.ub, dtype=float)
    lo[fixed] = hi[fixed] = np.rint(x[fixed])
    lo[frac] = np.maximum(lo[frac], np.floor(x[frac]) - k)
    hi[frac] = np.minimum(hi[frac], np.ceil(x[frac]) + k)
    res = _milp(c, cons, Bounds(lo, hi), integral,
                {**options, **FAST_OPTIONS, **NEAR_OPTIONS, "time_limit": _left(deadline)})
    res["relaxation"] = float(lp.fun)
    return res if res.x is not None else None


Model = tuple[np.ndarray, LinearConstraint, Bounds, np.ndarray]
"""``_build``'s MILP: ``(c, constraints, bounds, integrality)``."""


def _with_caps(model: Model, caps: np.ndarray) -> Model:
    """``model`` (built with caps) with its cap rows, the last ``len(caps)``, set to ``caps``."""
    c, cons, bounds, integral = model
    ub = np.array(cons.ub, dtype=float)
    ub[len(ub) - len(caps):] = caps
    return c, LinearConstraint(cons.A, cons.lb, ub), bounds, integral


def _solve_model(problem: PlanProblem, caps: Mapping[str | None, np.ndarray] | None = None,
                 model: Model | None = None, deadline: float | None = None, warm: _WarmLp | None = None,
                 extra: Mapping[str, float | bool | int] | None = None) -> _Result:
    """One MILP (``_build``'s with ``caps``, or ``model`` when already built): HiGHS's plan, the step
    limits dropped when no plan keeps them, a relaxed tail rounded (solved whole when no rounding
    meets the constraints), a fallback at a limit without a plan (``solve``). Every HiGHS call
    shares ``time_limit_s`` from now (or what is left until ``deadline``). ``warm``: ``_near_lp``'s.
    ``extra``: HiGHS options over ``_options``' for every MILP of this solve (``EXACT_OPTIONS``)."""
    if deadline is None:
        deadline = time.perf_counter() + problem.time_limit_s
    options = _options(problem, deadline, extra)
    relaxed = False
    c, cons, bounds, integral = model if model is not None else _build(problem, True, caps)
    res = None if problem.neighbourhood is None else _near_lp(problem, c, cons, bounds, integral, options, deadline,
                                                              warm)
    near = res is not None
    direct = res is None and problem.solver == "highspy"
    started, note = False, ""
    if direct:
        if highspy is None:
            direct, note = False, "; highspy is not installed: solved through scipy"
        else:
            start, note = _start_x(problem, cons, bounds) if problem.start is not None else (None, "")
            res = _highspy_milp(c, cons, bounds, integral, _options(problem, deadline, extra), start)
            started, direct = res is not None and start is not None, res is not None
            note = f"; through highspy{note}" if direct else "; highspy reported an error: solved through scipy"
    if res is None and problem.tail_up and _Index(problem).integer_blocks < _Index(problem).nb:
        res = _tail_up(problem, c, cons, bounds, integral, deadline)
        note += "; later blocks priced rounded up" if res is not None else ""
    if res is None:
        res = _milp(c, cons, bounds, integral, _options(problem, deadline, extra))
    if res.x is None and _highs_limit(res) is None:  # no plan within the step limits
        relaxed = True
        c, cons, bounds, integral = _build(problem, False, caps)
        loose = _highspy_milp(c, cons, bounds, integral, _options(problem, deadline, extra), None) if direct else None
        res = loose if loose is not None else _milp(c, cons, bounds, integral, _options(problem, deadline, extra))
    limit = _highs_limit(res)
    if res.x is None and limit is None:
        raise RuntimeError(f"planner: HiGHS found no plan ({res.message})")
    nodes = None if res.get("mip_node_count") is None else int(res.mip_node_count)
    after = "" if nodes is None else f" after {nodes} nodes"
    fallback = None
    if res.x is not None:
        x = res.x
        message = str(res.message) if limit is None else f"HiGHS stopped at its {limit}{after}; its best plan"
        if near:
            message += f"; searched within {problem.neighbourhood} of the LP relaxation's fractional counts"
        message += note
        idx = _Index(problem)
        if idx.integer_blocks < idx.nb:
            rounded = _round_tail(problem, c, x, cons, bounds)
            if rounded is None:
                whole = _solve_model(dataclasses.replace(problem, integer_blocks=None), caps, deadline=deadline)
                return dataclasses.replace(whole, relaxed=whole.relaxed or relaxed,
                                           message=f"{whole.message}; no rounding of the relaxed blocks met "
                                                   "the constraints: solved whole")
            x = rounded
            message += f"; blocks after the first {idx.integer_blocks} relaxed and rounded"
    else:
        x, fallback, dropped = _fallback(problem, not relaxed, c, cons, bounds, caps)
        relaxed = relaxed or dropped
        message = f"HiGHS stopped at its {limit}{after} without a plan; fallback: {fallback}{note}"
    return _Result(x, float(c @ x), relaxed, limit, fallback, message, nodes, res.get("relaxation"), started)


_Parts = tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, np.ndarray]], dict[str, np.ndarray],
               dict[str, np.ndarray]]


def _parts(problem: PlanProblem, x: np.ndarray) -> _Parts:
    """``Plan``'s replicas, serving, unserved_rps and shed_rps read from the variables ``x``."""
    idx = _Index(problem)
    h = problem.steps
    replicas: dict[str, dict[str, np.ndarray]] = {}
    serving: dict[str, dict[str, np.ndarray]] = {}
    unserved: dict[str, np.ndarray] = {}
    shed: dict[str, np.ndarray] = {}
    for i, svc in enumerate(problem.services):
        replicas[svc.name], serving[svc.name] = {}, {}
        for j, v in enumerate(svc.variants):
            start = idx.var(i, j, N, 0)
            per_block = np.rint(x[start:start + idx.nb]).astype(int)
            replicas[svc.name][v.name] = per_block[idx.block_of]
            start = idx.s(i, j, 0)
            serving[svc.name][v.name] = x[start:start + h].copy()
        unserved[svc.name] = x[idx.u(i, 0):idx.u(i, 0) + h].copy()
        if i in idx.shed:
            shed[svc.name] = x[idx.shed[i]:idx.shed[i] + h].copy()
    return replicas, serving, unserved, shed


def _pd_parts(problem: PlanProblem, x: np.ndarray) -> dict[str, np.ndarray]:
    """``Plan.pd_rps`` read from the variables ``x``."""
    idx = _Index(problem)
    return {svc.name: x[idx.pd[i]:idx.pd[i] + problem.steps].copy()
            for i, svc in enumerate(problem.services) if i in idx.pd}


def _coarse(problem: PlanProblem, factor: int) -> PlanProblem:
    """``problem`` on steps ``factor`` times longer (the default blocks on them): demand averaged over
    each coarse step, capacity and ready replicas read at its first fine step, start-ups and step
    limits scaled; a model of the same fleet to share the limits on, not to plan with."""
    h = math.ceil(problem.steps / factor)
    first = np.arange(h) * factor
    services = []
    for svc in problem.services:
        demand = np.array([float(np.mean(svc.demand_rps[k:k + factor])) for k in first])
        shed = None if svc.shed_rps is None else np.array([float(np.mean(svc.shed_rps[k:k + factor])) for k in first])
        variants = [dataclasses.replace(v, capacity_rps=np.asarray(v.capacity_rps)[first].copy(),
                                        ready=np.asarray(v.ready)[first].copy(),
                                        warm_steps=math.ceil(v.warm_steps / factor),
                                        cold_steps=math.ceil(v.cold_steps / factor)) for v in svc.variants]
        services.append(dataclasses.replace(svc, variants=variants, demand_rps=demand, shed_rps=shed,
                                            max_up=None if svc.max_up is None else svc.max_up * factor,
                                            max_down=None if svc.max_down is None else svc.max_down * factor))
    return dataclasses.replace(problem, services=services, steps=h, dt_s=problem.dt_s * factor, blocks=None,
                               integer_blocks=None, decompose=False)


def _blocked(problem: PlanProblem, peak: bool = BLOCK_PEAK) -> tuple[PlanProblem, np.ndarray]:
    """``problem`` on steps as long as its blocks (each step its own block), with each step's length
    in ``dt_s`` (``_build``'s ``weights``): demand and sheddable demand the block's highest (``peak``;
    else its mean), capacity and ready replicas read at the block's first step (ready replicas never
    decrease within a block, so that is their least); a model of the same fleet to share the limits
    on, exact in the first blocks (one step each), not to plan with."""
    idx = _Index(problem)
    starts = np.asarray(idx.starts)
    weights = np.diff([*starts, problem.steps])

    def per_block(values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=float)
        return np.maximum.reduceat(values, starts) if peak else np.add.reduceat(values, starts) / weights

    services = []
    for svc in problem.services:
        variants = [dataclasses.replace(v, capacity_rps=np.asarray(v.capacity_rps, dtype=float)[starts].copy(),
                                        ready=np.asarray(v.ready, dtype=float)[starts].copy()) for v in svc.variants]
        shed = None if svc.shed_rps is None else per_block(svc.shed_rps)
        demand = per_block(svc.demand_rps)
        services.append(dataclasses.replace(svc, variants=variants, demand_rps=demand,
                                            shed_rps=None if shed is None else np.minimum(shed, demand)))
    model = dataclasses.replace(problem, services=services, steps=idx.nb, blocks=list(range(idx.nb)),
                                integer_blocks=None, decompose=False)
    return model, weights


def _coordinator_fingerprint(model: PlanProblem, keys: Sequence[str | None],
                             cons: LinearConstraint) -> tuple[object, ...]:
    """``CoordinatorBasis.fingerprint`` of the coordinator's LP ``cons`` built from ``model``
    (``_build``; its last ``len(keys) * nb`` rows the shared limits'): the services' names with their
    variants', the limit keys, the block count and each service's rows (a row is the service's whose
    column comes first in it)."""
    idx = _Index(model)
    owner = np.empty(idx.size, dtype=np.int64)
    for (i, _), col in idx.blocks.items():
        owner[col:col + BLOCK_VARS * idx.nb + idx.h] = i
    for i, col in idx.unserved.items():
        owner[col:col + idx.tail(i)] = i
    a = sparse.csr_matrix(cons.A)
    own = a.shape[0] - len(keys) * idx.nb
    first = a.indices[a.indptr[:own][np.diff(a.indptr)[:own] > 0]]
    rows = np.bincount(owner[first], minlength=len(model.services))
    names = tuple((svc.name, tuple(v.name for v in svc.variants)) for svc in model.services)
    return names, tuple(keys), idx.nb, tuple(int(r) for r in rows), int(own - len(first))


def _warm_shares_lp(c: np.ndarray, cons: LinearConstraint, bounds: Bounds, start: CoordinatorBasis | None,
                    deadline: float, fingerprint: tuple[object, ...]
                    ) -> tuple[OptimizeResult, np.ndarray, CoordinatorBasis] | None:
    """The coordinator's LP (``_shares``) through scipy's HiGHS build directly, with HiGHS's dual
    simplex and devex pricing as ``linprog`` runs it (``COORDINATOR_OPTIONS``), from ``start``'s basis
    where it is one of an LP of this shape and ``fingerprint`` (``_coordinator_fingerprint``;
    ``PlanProblem.warm_coordinator``). Returns the result, the
    rows' duals (HiGHS's ``row_dual``: d cost / d bound, <= 0 on a binding upper bound, as
    ``linprog``'s ``ineqlin.marginals`` on those rows) and the final basis; None when it finds no
    optimum."""
    assert _core is not None
    h = _core._Highs()
    h.passOptions(_highs_options({"time_limit": _left(deadline), **WARM_COORDINATOR_OPTIONS}))
    h.passModel(_highs_lp(c, cons, bounds, np.zeros(len(c))))
    shape = (int(cons.A.shape[0]), int(cons.A.shape[1]))
    warm = (start is not None and start.shape == shape and start.fingerprint == fingerprint
            and h.setBasis(start.basis) != _core.HighsStatus.kError)
    h.run()
    res = _highs_result(h, False)
    if res.status != 0:
        return None
    iterations = int(h.getInfo().simplex_iteration_count)
    basis = CoordinatorBasis(shape, fingerprint, h.getBasis(), iterations, warm)
    return res, np.asarray(h.getSolution().row_dual), basis


def _shares(problem: PlanProblem, keys: Sequence[str | None], factor: int,
            deadline: float) -> tuple[list[np.ndarray], np.ndarray, float, CoordinatorBasis | None] | None:
    """The coordinator of the decomposition: the LP relaxation of the joint problem, on steps as long
    as its blocks (``_blocked``) when ``factor`` is 0, on steps ``factor`` times longer (``_coarse``)
    when above 1. Returns each service's share of the shared limits (GPUs per limit and block of
    ``problem``, as the relaxation holds them), the limits' prices (its duals, $ per GPU per block),
    its cost, and with ``PlanProblem.warm_coordinator`` its final basis (``_warm_shares_lp``; else
    None); None when it finds no solution."""
    weights = None
    if factor == 0:
        model, weights = _blocked(problem)
    else:
        model = _coarse(problem, factor) if factor > 1 else problem
    c, cons, bounds, _ = _build(model, True, weights=weights)
    idx, fine = _Index(model), _Index(problem)
    basis = None
    if problem.warm_coordinator and _core is not None and _scipy_status is not None:
        solved = _warm_shares_lp(c, cons, bounds, problem.coordinator_basis, deadline,
                                 _coordinator_fingerprint(model, keys, cons))
        if solved is None:
            return None
        res, duals, basis = solved
        coupling = duals[len(duals) - len(keys) * idx.nb:]  # the cap rows are the model's last (_build)
    else:
        a, lb, ub = cons.A, cons.lb, cons.ub
        eq = lb == ub
        upper, lower = np.isfinite(ub) & ~eq, np.isfinite(lb) & ~eq
        res = linprog(c, A_ub=sparse.vstack([a[upper], -a[lower]], format="csr"),
                      b_ub=np.concatenate([ub[upper], -lb[lower]]), A_eq=a[eq], b_eq=lb[eq],
                      bounds=np.column_stack([bounds.lb, bounds.ub]), method="highs-ds",
                      options={"time_limit": _left(deadline), **COORDINATOR_OPTIONS})
        if res.status != 0:
            return None
        coupling = np.asarray(res.ineqlin.marginals)[int(upper.sum()) - len(keys) * idx.nb:int(upper.sum())]
    block = (np.arange(fine.nb) if factor == 0  # the model's block each block begins in
             else idx.block_of[np.asarray(fine.starts) // factor])
    shares = []
    for i, svc in enumerate(problem.services):
        share = np.zeros(len(keys) * fine.nb)
        for j, v in enumerate(svc.variants):
            n = res.x[idx.var(i, j, N, 0):idx.var(i, j, N, 0) + idx.nb][block]
            for ki, key in enumerate(keys):
                if key is None or v.gpu == key:
                    share[ki * fine.nb:(ki + 1) * fine.nb] += v.gpus_per_replica * n
        shares.append(share)
    prices = np.maximum(-coupling, 0.0).reshape(len(keys), idx.nb)[:, block].ravel()
    return shares, prices, float(res.fun), basis


def _apportion(shares: Sequence[np.ndarray], floors: Sequence[np.ndarray], limit: np.ndarray) -> list[np.ndarray]:
    """Whole GPUs per service, limit and block that sum within ``limit`` and give each service at
    least its ``floors``: each share rounded down (never below the floor), the services furthest
    above their share giving GPUs back where the floors leave too few, then what is left handed out
    by the largest fractional parts (largest-remainder apportionment, per limit and block)."""
    share = np.array(shares, dtype=float)
    floor = np.ceil(np.array(floors, dtype=float) - FEASIBLE_TOL)
    whole = np.maximum(np.floor(share + FEASIBLE_TOL), floor)
    for r in range(len(limit)):
        while whole[:, r].sum() > limit[r] + FEASIBLE_TOL:  # floors above shares: others give back
            over = np.where(whole[:, r] > floor[:, r], whole[:, r] - share[:, r], -np.inf)
            whole[int(np.argmax(over)), r] -= 1.0
        left = math.floor(limit[r] - whole[:, r].sum() + FEASIBLE_TOL)
        for i in np.argsort(-(share[:, r] - whole[:, r]), kind="stable")[:max(left, 0)]:
            if share[i, r] - whole[i, r] > FEASIBLE_TOL:
                whole[i, r] += 1.0
    return list(whole)


GROUP = 4
"""Most services a decomposed solve plans together: those whose shares the coordinator left
fractional (the rounding between them is what the joint optimum decides), in groups of this many."""


ORDERS_UP_TO = 3
"""Most variants of a service for which a decomposed solve tries every order of removal for its
least holdings (3! = 6 greedy plans, for the services whose least holdings exceed their share)."""

EXACT_PARTS = 4
"""Most services a decomposed solve plans again with the exact (tuned) search: those whose plan
from the search near their relaxation lies furthest above it (``docs/controllers.md``)."""

EXACT_GAP = 1e-3
"""... and only while that gap is above this fraction of the whole plan's cost."""

EXACT_HULL = True
"""Whether a decomposed solve's exact searches (``EXACT_PARTS``) use the demand rows' convex hull
(``PlanProblem.hull``) in place of the MIR rows where a service's variants have two capacities (with
three or more the model is the MIR one)."""

EXACT_OPTIONS: dict[str, float | bool | int] = {"mip_pscost_minreliable": 0}
"""HiGHS options of a decomposed solve's exact searches over ``TUNED_OPTIONS``: no strong branching
(pseudocosts trusted from the first branching, ``mip_pscost_minreliable`` 0; strong branching was
65-76 % of the LP iterations of the slowest one-service searches). With ``EXACT_HULL``, on 50 services
of ``benchmarks/plan_solve.py --mpc --sizes 50`` (10 problems a seed, seeds 0-4; seed 1 tuned on) the
exact searches took 16-35 % less CPU a seed, the replica counts the same on every plan and the cost
within 6e-10 relative (``docs/benchmarks.md``, "The exact searches of a decomposed solve"). An
option that the installed HiGHS lacks (an older scipy's build) is left out."""


def _service_x(problem: PlanProblem, x: np.ndarray, i: int) -> np.ndarray:
    """The variables of service ``i`` of ``problem`` out of ``x``, as a problem of that service alone
    orders them."""
    idx = _Index(problem)
    first = idx.blocks[i, 0]
    width = len(problem.services[i].variants) * (BLOCK_VARS * idx.nb + problem.steps)
    return np.concatenate([x[first:first + width], x[idx.u(i, 0):idx.u(i, 0) + idx.tail(i)]])


def _pair_polish(problem: PlanProblem, subs: Sequence[PlanProblem], models: Sequence[Model],
                 usage: Sequence[sparse.csr_array], limit: np.ndarray, keys: Sequence[str | None],
                 xs: dict[int, np.ndarray], results: dict[int, _Result], planned: np.ndarray,
                 deadline: float) -> int:
    """The decomposition's last step: the ``PAIR_PARTS`` services whose plans leave the most demand
    unserved ($; then those whose GPUs cost most, the most to give), two at a time, planned together
    within what the others leave them (within ``PAIR_NEIGHBOURHOOD`` of their joint relaxation's
    counts); a pair's plan is kept where it costs less than the two plans it replaces, so the shares'
    rounding between two services is settled as the joint optimum would settle it. Updates ``xs``,
    ``results`` and ``planned`` (GPUs per limit and block) in place; returns how many pairs were kept."""
    ranked = []
    for i, (sub, (c, _, _, _)) in enumerate(zip(subs, models, strict=True)):
        sidx = _Index(sub)
        cols = slice(sidx.u(0, 0), sidx.u(0, 0) + sidx.missed(0))
        missed = float(c[cols] @ xs[i][cols])
        ranked.append((missed > FEASIBLE_TOL, missed, float(c @ xs[i]) - missed, i))
    ranked.sort(reverse=True)
    kept = 0
    for (*_, a), (*_, b) in itertools.combinations(ranked[:PAIR_PARTS], 2):
        if _left(deadline) <= 0:
            break
        before = float(models[a][0] @ xs[a] + models[b][0] @ xs[b])
        mine = usage[a] @ xs[a] + usage[b] @ xs[b]
        cap = limit - (planned - mine)
        part = dataclasses.replace(problem, services=[problem.services[a], problem.services[b]], gpu_quota={},
                                   gpu_budget=None, decompose=False,
                                   neighbourhood=PAIR_NEIGHBOURHOOD)
        caps = {key: cap[ki * (len(cap) // len(keys)):(ki + 1) * (len(cap) // len(keys))]
                for ki, key in enumerate(keys)}
        result = _solve_model(part, caps, None, deadline)
        if result.fallback is not None or result.relaxed:
            continue
        xa, xb = _service_x(part, result.x, 0), _service_x(part, result.x, 1)
        use = usage[a] @ xa + usage[b] @ xb
        if np.all(use <= cap + FEASIBLE_TOL) and float(models[a][0] @ xa + models[b][0] @ xb) < before - 1e-9:
            planned[:] = planned - mine + use
            xs[a], xs[b] = xa, xb
            results[a] = dataclasses.replace(result, x=xa)
            results[b] = dataclasses.replace(result, x=xb)
            kept += 1
    return kept


def _polish(problem: PlanProblem, subs: Sequence[PlanProblem], xs: dict[int, np.ndarray],
            deadline: float) -> bool:
    """The decomposition's repair pass over the whole problem (``POLISH_UP_TO``): the joint MILP, the
    shared limits' rows included, with every service's replica counts kept within ``POLISH_BOX`` of
    the decomposed plan's (``POLISH_WIDE_BOX`` on small problems); above ``POLISH_WHOLE_UP_TO``
    service-steps, of those counts, the ones where the LP relaxation of that box agrees with the
    plan are fixed (RINS, Danna, Rothberg and Le Pape 2005, "Exploring relaxation induced
    neighborhoods to improve MIP solutions", Math. Program. 102), and HiGHS searches the rest from the
    decomposed plan as its start, so it never returns a dearer plan; at the time limit its best so
    far. Replaces ``xs`` (each service's variables, as its own problem orders them) where the plan
    found costs less; returns whether it did. Skipped (False) without scipy's HiGHS build, which
    alone here takes a start without highspy. An older build (scipy 1.15) lacks some of
    ``FAST_OPTIONS``: the pass runs without them (HiGHS's defaults, its sub-MIP heuristics on)."""
    if not _settable(frozenset({"time_limit", "mip_rel_gap", *POLISH_OPTIONS})):
        return False
    fast = {k: v for k, v in FAST_OPTIONS.items() if _settable(frozenset({k}))}
    idx = _Index(problem)
    counts = {}
    for i, sub in enumerate(subs):
        sidx = _Index(sub)
        for j in range(len(sub.services[0].variants)):
            counts[i, j] = np.rint(xs[i][sidx.var(0, j, N, 0):sidx.var(0, j, N, 0) + sidx.nb])
    # every block whole, relaxed blocks or not (PlanProblem.integer_blocks): the pass returns counts
    # as they are, never rounds them, so a relaxed block here would leave a fractional plan
    c, cons, bounds, integral = _build(dataclasses.replace(problem, integer_blocks=None), True)
    x = _complete(problem, counts)  # the plan's counts, each served as cheaply as they can
    if not _feasible(x, cons, bounds):
        return False
    size = len(subs) * problem.steps
    small = size <= POLISH_WHOLE_UP_TO
    box = POLISH_WIDE_BOX if size <= POLISH_WIDE_UP_TO else POLISH_BOX
    lo, hi = np.array(bounds.lb, dtype=float), np.array(bounds.ub, dtype=float)
    for (i, j), n in counts.items():
        cols = idx.var(i, j, N, 0) + np.arange(idx.nb)
        lo[cols] = np.maximum(lo[cols], n - box)
        hi[cols] = np.minimum(hi[cols], n + box)
    if not small:
        lp = _milp(c, cons, Bounds(lo, hi), np.zeros(len(c)), {"time_limit": _left(deadline), **LP_OPTIONS})
        if lp.x is None:
            return False
        agree = (integral > 0) & (np.abs(lp.x - x) <= FEASIBLE_TOL)
        lo[agree] = hi[agree] = np.rint(x[agree])
    res = _direct_milp(c, cons, Bounds(lo, hi), integral,
                       {**fast, "mip_rel_gap": max(problem.mip_rel_gap, POLISH_GAP), **POLISH_OPTIONS,
                        "time_limit": _left(deadline)}, start=x)
    if res.x is None or not _feasible(res.x, cons, bounds) or float(c @ res.x) >= float(c @ x) - 1e-9:
        return False
    for i in range(len(subs)):
        xs[i] = _service_x(problem, res.x, i)
    return True


POLISH_UP_TO = 800
"""Service-steps up to which a decomposed solve ends with the repair pass over the whole problem
(``_polish``; 20 services of 40 steps). There it brought every problem measured within 1 % of the
joint optimum (``docs/controllers.md#solving-fast``); above, it is off: its joint LP alone grows
past the 2-s goal of 50 services."""

POLISH_BOX = 1
"""Replicas each count may move from the decomposed plan's in the repair pass (``_polish``)."""

POLISH_WHOLE_UP_TO = 400
"""Service-steps up to which the repair pass (``_polish``) searches the whole box around the
decomposed plan (10 services of 40 steps), no count fixed by its LP: on 4 problems of 5-10 services
(seeds 7-9) the search with counts fixed left one 1.2 % above the joint optimum where the whole box
came within 0.11 %, for 1.5-4.6 s of CPU for the whole solve against 0.9-2.6. Above, the counts
where the box's LP relaxation agrees with the plan are fixed (RINS)."""

POLISH_WIDE_UP_TO = 120
"""Service-steps up to which the repair pass (``_polish``) lets each count move ``POLISH_WIDE_BOX``
(3 services of 40 steps, the tests' fleets of up to 5 services of 12 steps): one service's move of
2 A100s (``fleet(710)`` of the tests) is what the optimum needed there. Above, that search took up
to 7 s of CPU (5 services, seed 9; 10 services, seed 8)."""

POLISH_WIDE_BOX = 2
"""``POLISH_BOX`` up to ``POLISH_WIDE_UP_TO`` service-steps."""

POLISH_GAP = 1e-3
"""HiGHS's relative gap in the repair pass's search (``_polish``), at least."""

POLISH_OPTIONS: dict[str, float | bool | int] = {"presolve": True}
"""HiGHS options of the repair pass's search (``_polish``) over ``FAST_OPTIONS``: with presolve, which
drops the fixed counts before the root, its search took 0.3-1.2 s at 20 services against 0.5-2.0 s
without (seed 7), to plans as cheap."""


PAIR_PARTS = 4
"""Most services a decomposed solve plans again two at a time (``_pair_polish``): those whose plans
leave the most demand unserved, so up to 6 pairs."""

PAIR_NEIGHBOURHOOD = 1
"""``PlanProblem.neighbourhood`` of a pair's search (``_pair_polish``): with 0, as the parts are
searched, it improved nothing on 2 of the 5 problems of 3-5 services above 0.5 % (seeds 710-719 of
the tests' fleets) where 1 brought 1.0112 -> 1.0000 and 1.0188 -> 1.0112."""

PAIR_UP_TO = 400
"""Service-steps (services x steps) up to which a decomposed solve plans pairs together
(``_pair_polish``; 10 services of 40 steps): there it took the worst of 10 problems of 5 services
from 2.4 % to 0.8 % above the joint optimum; at 50 services it saved 0-0.25 % for 0.3-0.7 s more,
where the solve is already above its 2-s goal. From 400 to 800 service-steps the repair pass after
it (``_polish``) does its work: at 20 services without the pairs, the worst of 6 problems 1.0047 and
1.0018 above the joint optimum (seeds 7 and 8) against 1.0047 and 1.0032 with them, in 13-35 % less
CPU at the median (``docs/controllers.md#solving-fast``)."""


def _solve_decomposed(problem: PlanProblem, started: float) -> Plan | None:
    """Service by service within shares of the shared limits (module docstring, "Solving fast");
    None when even the services' least holdings break a limit or the coordinator finds no solution
    (the joint solve then decides)."""
    keys = _limit_keys(problem)
    nb, h = _Index(problem).nb, problem.steps
    limit = _limits(problem, keys)
    problem = dataclasses.replace(problem, strengthen=_strengthened(problem))  # the parts as the whole
    subs = [dataclasses.replace(problem, services=[svc], gpu_quota={}, gpu_budget=None, decompose=False)
            for svc in problem.services]
    usage = [_usage(sub, keys) for sub in subs]
    unlimited = {key: np.full(nb, np.inf) for key in keys}
    models = [_build(sub, True, unlimited) for sub in subs]  # the cap rows set per solve (_with_caps)
    floors = []  # each service's least holdings: today's fleet removed as fast as the limits allow
    for sub, (_, cons, bounds, _) in zip(subs, models, strict=True):
        idle = dataclasses.replace(sub, services=[dataclasses.replace(sub.services[0], demand_rps=np.zeros(h))])
        x = _complete(sub, greedy_counts(idle))
        if not _feasible(x, cons, bounds):
            return None
        floors.append(x)
    floor_use = [u @ x for u, x in zip(usage, floors, strict=True)]
    if np.any(np.sum(floor_use, axis=0) > limit + FEASIBLE_TOL):
        return None
    factor = problem.coarsen if problem.coarsen is not None else (
        1 if len(subs) * h <= FINE_SHARES else COORDINATOR)
    deadline = started + problem.time_limit_s  # every HiGHS call below shares it
    coordinated = _shares(problem, keys, factor, deadline)
    if coordinated is None:
        return None
    shares, price, relaxation, basis = coordinated
    # the least holdings again in other orders of removal, each service's kept where they reach less
    # above its share in the limits the shares fill (there, holdings above a share are taken from
    # another service): every order for up to ORDERS_UP_TO variants, else the GPU types the
    # coordinator prices first (where it moves GPUs between services)
    worth = price.reshape(len(keys), nb).sum(axis=1)
    tight = np.sum(shares, axis=0) > limit - 1.0
    for i, (sub, (_, cons, bounds, _)) in enumerate(zip(subs, models, strict=True)):
        above = float(np.maximum(floor_use[i] - shares[i], 0)[tight].sum())
        if above <= FEASIBLE_TOL:
            continue  # nothing above its share where it counts
        variants = sub.services[0].variants
        if len(variants) <= ORDERS_UP_TO:
            orders = [list(order) for order in itertools.permutations(range(len(variants)))]
        else:
            value = [sum(worth[ki] for ki, key in enumerate(keys) if key is None or key == v.gpu) for v in variants]
            orders = [[j for *_, j in sorted((-value[j], -v.price_per_hour / max(float(v.capacity_rps[0]), 1e-9), j)
                                             for j, v in enumerate(variants))]]
        idle = dataclasses.replace(sub, services=[dataclasses.replace(sub.services[0], demand_rps=np.zeros(h))])
        for order in orders:
            counts = greedy_counts(idle, remove_first={0: order})
            use = np.zeros(len(limit))  # GPUs held per limit and block, from the counts alone
            for j, v in enumerate(variants):
                for ki, key in enumerate(keys):
                    if key is None or key == v.gpu:
                        use[ki * nb:(ki + 1) * nb] += v.gpus_per_replica * counts[0, j]
            reach = float(np.maximum(use - shares[i], 0)[tight].sum())
            if reach >= above - FEASIBLE_TOL:
                continue
            candidate = [*floor_use[:i], use, *floor_use[i + 1:]]
            x = _complete(sub, counts)
            if np.all(np.sum(candidate, axis=0) <= limit + FEASIBLE_TOL) and _feasible(x, cons, bounds):
                floors[i], floor_use, above = x, candidate, reach
    allotted = _apportion(shares, floor_use, limit)
    together = [i for i, share in enumerate(shares) if np.any(np.abs(share - np.rint(share)) > 1e-6)]
    if factor != 1:  # on longer steps (a large fleet): every service alone, for time (docs/controllers.md)
        together = []
    batches = [[i] for i in range(len(subs)) if i not in together]
    batches += [together[k:k + GROUP] for k in range(0, len(together), GROUP)]
    xs: dict[int, np.ndarray] = {}
    results: dict[int, _Result] = {}
    warms: dict[int, _WarmLp] = {}  # each service planned alone: its LP relaxation, kept for the LP below
    planned = np.zeros(len(limit))
    unplanned = np.sum(allotted, axis=0)
    nodes = 0
    for batch in batches:
        mine = np.sum([allotted[i] for i in batch], axis=0)
        unplanned = unplanned - mine
        cap = limit - planned - unplanned  # at least the batch's allotment: its least holdings fit
        part = dataclasses.replace(problem, services=[problem.services[i] for i in batch], gpu_quota={},
                                   gpu_budget=None, decompose=False)
        alone = _with_caps(models[batch[0]], cap) if len(batch) == 1 else None
        caps = {key: cap[ki * nb:(ki + 1) * nb] for ki, key in enumerate(keys)}
        warm = None
        direct = _settable(frozenset({"time_limit", *LP_OPTIONS}))
        if alone is not None and problem.neighbourhood is not None and direct:
            warm = warms[batch[0]] = _WarmLp(models[batch[0]], len(cap), {"time_limit": _left(deadline), **LP_OPTIONS})
        result = _solve_model(part, caps, alone, deadline, warm)
        nodes += result.nodes or 0
        for b, i in enumerate(batch):
            x = _service_x(part, result.x, b) if result.fallback != "hold" else floors[i]
            xs[i], results[i] = x, result
        use = np.sum([usage[i] @ xs[i] for i in batch], axis=0)
        if np.any(use > cap + FEASIBLE_TOL):  # a fallback past the caps: the least holdings instead
            for i in batch:
                xs[i] = floors[i]
            use = np.sum([usage[i] @ xs[i] for i in batch], axis=0)
        planned = planned + use
    improved = 0
    for i, (sub, (c, _, _, _), u) in enumerate(zip(subs, models, usage, strict=True)):
        # a service held to its allotment in a block where it leaves demand unserved and GPUs were
        # left over plans again with them
        mine = u @ xs[i]
        cap = limit - (planned - mine)
        missed = np.zeros(nb, dtype=bool)
        sidx = _Index(sub)
        left = xs[i][sidx.u(0, 0):sidx.u(0, 0) + sidx.missed(0)]  # unserved, then shed, per step
        missed[sidx.block_of[left.reshape(-1, h).sum(axis=0) > FEASIBLE_TOL]] = True
        room = (cap - mine).reshape(len(keys), nb)
        fits = np.zeros(nb, dtype=bool)  # a replica of some variant fits in every limit it counts in
        starts = np.asarray(_Index(sub).starts)
        for v in sub.services[0].variants:  # ... and is ready by then
            rows = [ki for ki, key in enumerate(keys) if key is None or key == v.gpu]
            soonest = v.warm_steps if v.warm_free > 0 else v.cold_steps
            fits |= np.all(room[rows] >= v.gpus_per_replica - FEASIBLE_TOL, axis=0) & (starts >= soonest)
        if not np.any(missed & fits):
            continue
        model = _with_caps(models[i], cap)
        if i in warms:  # from the basis of its relaxation within its share: a few iterations
            lp = warms[i].solve(cap, _left(deadline))
        else:
            lp = _milp(model[0], model[1], model[2], np.zeros(len(model[0])),
                       {"time_limit": _left(deadline), **LP_OPTIONS})
        before = results[i].relaxation if len(results[i].x) == len(c) else None
        if lp.x is None or float(lp.fun) >= (float(c @ xs[i]) if before is None else before) - 1e-9:
            continue  # the relaxation does no better with the GPUs left over
        caps = {key: cap[ki * nb:(ki + 1) * nb] for ki, key in enumerate(keys)}
        result = _solve_model(sub, caps, model, deadline)
        nodes += result.nodes or 0
        if (result.fallback != "hold" and np.all(u @ result.x <= cap + FEASIBLE_TOL)
                and float(c @ result.x) < float(c @ xs[i]) - 1e-9):
            planned = planned - mine + u @ result.x
            xs[i], results[i] = result.x, result
            improved += 1
    # the services whose plan the search near their relaxation left furthest above it, searched
    # exactly (the tuned search) within what the others leave them
    gaps = []
    for i, result in results.items():
        if result.relaxation is not None and len(result.x) == len(models[i][0]):  # planned alone
            gaps.append((float(models[i][0] @ xs[i]) - result.relaxation, i))
    gaps.sort(reverse=True)
    total = sum(float(m[0] @ xs[i]) for i, m in enumerate(models))
    exact = 0
    for gap, i in gaps[:EXACT_PARTS]:
        if gap <= EXACT_GAP * total:
            break
        u, c = usage[i], models[i][0]
        mine = u @ xs[i]
        cap = limit - (planned - mine)
        caps = {key: cap[ki * nb:(ki + 1) * nb] for ki, key in enumerate(keys)}
        tuned = dataclasses.replace(subs[i], neighbourhood=None, tuned=True, hull=EXACT_HULL)
        model = _build(tuned, True, unlimited) if EXACT_HULL else models[i]  # the hull rows for the MIR rows
        result = _solve_model(tuned, caps, _with_caps(model, cap), deadline,
                              extra={k: v for k, v in EXACT_OPTIONS.items() if _settable(frozenset({k}))}
                              if _tuned(tuned) else None)
        nodes += result.nodes or 0
        if (result.fallback is None and np.all(u @ result.x <= cap + FEASIBLE_TOL)
                and float(c @ result.x) < float(c @ xs[i]) - 1e-9):
            planned = planned - mine + u @ result.x
            xs[i], results[i] = result.x, result
            exact += 1
    paired = 0
    if len(subs) * h <= PAIR_UP_TO:
        paired = _pair_polish(problem, subs, models, usage, limit, keys, xs, results, planned, deadline)
    polished = len(subs) * h <= POLISH_UP_TO and _polish(problem, subs, xs, deadline)
    replicas: dict[str, dict[str, np.ndarray]] = {}
    serving: dict[str, dict[str, np.ndarray]] = {}
    unserved: dict[str, np.ndarray] = {}
    shed: dict[str, np.ndarray] = {}
    pd: dict[str, np.ndarray] = {}
    cost, relaxed, stopped, fallback = 0.0, False, False, None
    for i, (sub, (c, _, _, _)) in enumerate(zip(subs, models, strict=True)):
        cost += float(c @ xs[i])
        relaxed = relaxed or results[i].relaxed
        stopped = stopped or results[i].limit is not None
        fallback = fallback or results[i].fallback
        r, sv, un, sh = _parts(sub, xs[i])
        replicas.update(r)
        serving.update(sv)
        unserved.update(un)
        shed.update(sh)
        pd.update(_pd_parts(sub, xs[i]))
    bound = relaxation if factor == 1 else None
    message = (f"decomposed: {len(subs)} services within their shares of the shared limits (LP relaxation"
               + {1: "", 0: " on the blocks' lengths"}.get(factor, f" on {factor}x coarser steps")
               + f"), {len(together)} with fractional "
               f"shares planned in groups of up to {GROUP}, {improved} planned again with GPUs left over, "
               f"{exact} searched exactly, {paired} pairs planned together"
               + (", then repaired jointly near that plan" if polished else "")
               + ("" if basis is None else f"; the coordinator's LP {'from the last basis' if basis.warm else 'cold'} "
                  f"in {basis.iterations} simplex iterations")
               + ("; scipy's HiGHS build unreachable: the coordinator's LP solved cold through linprog"
                  if problem.warm_coordinator and basis is None else ""))
    return Plan(replicas, serving, unserved, cost, (time.perf_counter() - started) * 1000.0, relaxed,
                stopped_at_limit=stopped, fallback=fallback, message=message, nodes=nodes,
                gpu_prices={key: price[ki * nb:(ki + 1) * nb].copy() for ki, key in enumerate(keys)},
                lower_bound=bound, shed_rps=shed, pd_rps=pd, coordinator_basis=basis)


def solve(problem: PlanProblem) -> Plan:
    """The cheapest plan (module docstring).

    When no plan meets the step limits (today's fleet is further above a bound or quota than
    ``max_down`` removals undo in time), the limits are dropped and ``Plan.relaxed`` says so. At a
    time or node limit the best plan so far, or a fallback, is returned (module docstring):
    ``Plan.stopped_at_limit``, ``Plan.fallback`` and ``Plan.message`` say which. With
    ``PlanProblem.decompose`` and several services under shared limits, service by service within
    shares of the limits (``Plan.gpu_prices`` and ``Plan.lower_bound`` then say at which prices and
    how close).

    Raises:
        ValueError: malformed problem (shapes, bounds, a negative ``node_limit`` or ``neighbourhood``,
            a ``coarsen`` below 0).
        RuntimeError: no plan even without the step limits (the bounds, ``keep`` and the quotas
            contradict one another), naming HiGHS's message; never for a limit reached.
    """
    _check(problem)
    started = time.perf_counter()
    with _solver_stdout_silenced():
        if problem.decompose and len(problem.services) > 1 and _limit_keys(problem):
            plan = _solve_decomposed(problem, started)
            if plan is not None:
                return plan
        result = _solve_model(problem, deadline=started + problem.time_limit_s)
    replicas, serving, unserved, shed = _parts(problem, result.x)
    return Plan(replicas, serving, unserved, result.cost, (time.perf_counter() - started) * 1000.0,
                result.relaxed, stopped_at_limit=result.limit is not None, fallback=result.fallback,
                message=result.message, nodes=result.nodes, started=result.started, shed_rps=shed,
                pd_rps=_pd_parts(problem, result.x))
