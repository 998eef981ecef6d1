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
  ``u[k] >= demand[k] - sum_v capacity[v,k] s[v,k]``.

minimise  sum_k sum_v price_v dt / 3600 n[v,k]             (GPU cost, $)
        + sum_k miss_cost dt u[k]                            (requests left unserved, $)
        + sum_v start_cost_v (cw + cc)[v,H] + stop_cost cd[v,H]   (churn, $)

Move blocking (as MPC practice keeps integer plans small): replica counts change only at the start of
each block (``PlanProblem.blocks``: 0-based first steps, by default 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 8
steps long for 40 steps), so the integer variables are per block and the serving and unserved ones per
step; the first block is one step, the one applied.

subject to the variants' bounds (``min_replicas <= n <= min(max_replicas, quota)``, and ``n >=
keep`` for a service recovering from a loss: no warm replica removed), the service's largest change
per step (``max_up`` orders, ``max_down`` removals), and, across services, GPUs per GPU type within
``gpu_quota`` and all GPUs within ``gpu_budget`` (a fleet that already holds more, as one started by
hand can, may keep what it holds but never grows past it). Solved by ``scipy.optimize.milp`` (HiGHS); the
constraint matrix is sparse with a bounded number of entries per row, so a day of 60-s steps solves
as one problem.

At the solver's limit (``PlanProblem.time_limit_s``, or ``node_limit``: branch-and-bound nodes, a bound
on work that does not depend on machine load) the solve never raises: HiGHS's best plan so far is used
(``Plan.stopped_at_limit``), and without one a feasible plan is built instead (``Plan.fallback``): the
LP relaxation with its replica counts rounded up, else a greedy plan (``greedy_counts``), else today's
replicas held; the first two are used only when they meet every constraint.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, milp

BLOCK_VARS = 4  # per variant and block: n, cw, cc, cd
N, CW, CC, CD = range(BLOCK_VARS)

HIGHS_LIMITS = {13: "time limit", 14: "iteration limit", 16: "node limit"}
"""HiGHS's model statuses for a solve stopped at a limit (``HighsModelStatus`` in HiGHS's ``HConst.h``:
kTimeLimit, kIterationLimit, kSolutionLimit, which ``mip_max_nodes`` ends with). scipy maps the time
and iteration limits to ``status`` 1 but the node limit to 4 ("not recognized"), so the HiGHS status
in the message is read."""

FALLBACKS = ("lp-rounded", "greedy", "hold")
"""``Plan.fallback``'s values, in the order tried."""

FEASIBLE_TOL = 1e-6
"""Slack allowed when a fallback plan is checked against the constraints (HiGHS's default primal
feasibility tolerance is 1e-7; the rounded plans are whole numbers and sums of them)."""


def default_blocks(steps: int) -> list[int]:
    """First step (0-based) of each block: lengths 1, 1, 1, 1, 2, 2, 4, 4, then 8 until ``steps``."""
    starts, k, lengths = [], 0, [1, 1, 1, 1, 2, 2, 4, 4]
    while k < steps:
        starts.append(k)
        k += lengths.pop(0) if lengths else 8
    return starts


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
        keep: replicas that must stay at every step (the ready ones while recovering; 0 otherwise).
        start_cost: $ per replica ordered; ``stop_cost``: $ per replica removed.
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


@dataclass(frozen=True)
class PlanService:
    """One service: its variants, the demand to serve and its limits.

    Attributes:
        name: service name.
        variants: at least one.
        demand_rps: requests/s to serve in each step, shape (H,).
        miss_cost: $ per request of demand left unserved (> every variant's cost per request served,
            or the plan prefers missing to serving).
        max_up, max_down: most replicas ordered / removed per step, all variants together (None: no limit).
    """

    name: str
    variants: Sequence[PlanVariant]
    demand_rps: np.ndarray
    miss_cost: float
    max_up: int | None = None
    max_down: int | None = None


@dataclass(frozen=True)
class PlanProblem:
    """Every service of a fleet over ``steps`` steps of ``dt_s`` seconds.

    Attributes:
        gpu_quota: GPU type -> most GPUs of that type held by all services at any step.
        gpu_budget: most GPUs of any type held at any step (None: no budget).
        blocks: first step (0-based, ascending, the first 0) of each block over which replica counts
            stay constant; None = ``default_blocks(steps)``.
        integer_blocks: blocks kept integer, the first ones (None: all); the rest are relaxed.
        time_limit_s: HiGHS's time limit, seconds (also the LP relaxation's, when one is solved for a
            fallback); at the limit the best plan found is used (module docstring).
        node_limit: most branch-and-bound nodes HiGHS explores (``scipy.optimize.milp``'s
            ``node_limit``; 0 stops before the root), None for no limit; the same problem and limit
            give the same plan on any machine, where a time limit does not.
        mip_rel_gap: relative optimality gap at which HiGHS stops.
    """

    services: Sequence[PlanService]
    dt_s: float
    steps: int
    gpu_quota: Mapping[str, int] = field(default_factory=dict)
    gpu_budget: int | None = None
    blocks: Sequence[int] | None = None
    integer_blocks: int | None = None
    time_limit_s: float = 10.0
    node_limit: int | None = None
    mip_rel_gap: float = 1e-4


@dataclass(frozen=True)
class Plan:
    """The solved plan.

    Attributes:
        replicas: service -> variant -> ``n[v,k]`` for k = 1..H, integers, shape (H,).
        serving: service -> variant -> ``s[v,k]``, shape (H,).
        unserved_rps: service -> ``u[k]``, requests/s, shape (H,).
        cost: the objective, $.
        solve_ms: wall time of the solve, milliseconds.
        relaxed: True when the step limits had to be dropped to find any plan (today's fleet is
            further outside its bounds or quotas than the limits allow undoing in time).
        stopped_at_limit: True when HiGHS stopped at its time, node or iteration limit (the plan is
            then its best so far, or a fallback), not at the optimality gap.
        fallback: None for HiGHS's plan; else the plan built without it (``FALLBACKS``):
            ``lp-rounded``, ``greedy`` or ``hold``.
        message: what happened, one line (HiGHS's message, or the limit and the fallback).
        nodes: branch-and-bound nodes HiGHS explored (None when it does not say).
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


class _Index:
    """Column of every variable: per variant ``BLOCK_VARS x blocks`` integers then ``H`` serving
    variables; then per service ``H`` unserved ones."""

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
        self.unserved = {}
        for i in range(len(problem.services)):
            self.unserved[i] = col
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


class _Rows:
    """Sparse constraint rows ``lb <= A x <= ub``, built row by row."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lb: list[float] = []
        self.ub: list[float] = []

    def add(self, terms: Sequence[tuple[int, float]], lb: float, ub: float) -> None:
        r = len(self.lb)
        for c, v in terms:
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.lb.append(lb)
        self.ub.append(ub)

    def constraint(self, size: int) -> LinearConstraint:
        a = sparse.csr_array((self.vals, (self.rows, self.cols)), shape=(len(self.lb), size))
        return LinearConstraint(a, np.array(self.lb), np.array(self.ub))


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
        for v in svc.variants:
            if np.shape(v.capacity_rps) != (h,) or np.shape(v.ready) != (h,):
                raise ValueError(f"{svc.name}/{v.name}: capacity_rps and ready must have {h} steps")
            if v.min_replicas > v.max_replicas:
                raise ValueError(f"{svc.name}/{v.name}: min_replicas {v.min_replicas} > max_replicas {v.max_replicas}")
    if problem.node_limit is not None and problem.node_limit < 0:
        raise ValueError(f"node_limit must be >= 0 or None, got {problem.node_limit}")


def _build(problem: PlanProblem, limits: bool) -> tuple[np.ndarray, LinearConstraint, Bounds, np.ndarray]:
    idx = _Index(problem)
    h, dt, nb = problem.steps, problem.dt_s, idx.nb
    length = np.diff([*idx.starts, h])  # steps per block
    c = np.zeros(idx.size)
    lo = np.zeros(idx.size)
    hi = np.full(idx.size, np.inf)
    integral = np.zeros(idx.size)
    rows = _Rows()
    gpu_terms: dict[str | None, list[list[tuple[int, float]]]] = {}
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
            for b in range(nb):
                rows.add([(cols[N][b], 1.0), (cols[CW][b], -1.0), (cols[CC][b], -1.0), (cols[CD][b], 1.0)],
                         v.current, v.current)
                if b > 0:
                    for kind in (CW, CC, CD):
                        rows.add([(cols[kind][b], 1.0), (cols[kind][b - 1], -1.0)], 0.0, np.inf)
                for key in (v.gpu, None):
                    per_block = gpu_terms.setdefault(key, [[] for _ in range(nb)])
                    per_block[b].append((cols[N][b], float(v.gpus_per_replica)))
            for k in range(h):
                s = idx.s(i, j, k)
                rows.add([(s, 1.0), (cols[N][idx.block_of[k]], -1.0)], -np.inf, 0.0)
                ready = [(s, 1.0), (cols[CD][idx.block_of[k]], 1.0)]  # removals take ready replicas
                for kind, steps in ((CW, v.warm_steps), (CC, v.cold_steps)):
                    if k - steps >= 0:  # orders of the last block begun by then are ready
                        ready.append((cols[kind][idx.block_of[k - steps]], -1.0))
                rows.add(ready, -np.inf, float(v.ready[k]))
        for k in range(h):
            u = idx.u(i, k)
            c[u] = svc.miss_cost * dt
            rows.add([(u, 1.0)] + [(idx.s(i, j, k), float(v.capacity_rps[k])) for j, v in enumerate(svc.variants)],
                     float(svc.demand_rps[k]), np.inf)
        if not limits:
            continue
        for b in range(nb):
            for kinds, limit in (((CW, CC), svc.max_up), ((CD,), svc.max_down)):
                if limit is None:
                    continue
                terms = []
                for j in range(len(svc.variants)):
                    for kind in kinds:
                        terms.append((idx.var(i, j, kind, b), 1.0))
                        if b > 0:
                            terms.append((idx.var(i, j, kind, b - 1), -1.0))
                rows.add(terms, -np.inf, float(limit * length[b - 1] if b > 0 else limit))
    held: dict[str | None, int] = {None: 0}  # GPUs today's replicas hold, per GPU type and in all
    for svc in problem.services:
        for v in svc.variants:
            held[v.gpu] = held.get(v.gpu, 0) + v.current * v.gpus_per_replica
            held[None] += v.current * v.gpus_per_replica
    for key, per_block in gpu_terms.items():
        limit = problem.gpu_budget if key is None else problem.gpu_quota.get(key)
        if limit is None:
            continue
        for terms in per_block:  # a fleet already past a limit may keep what it holds, never grow
            rows.add(terms, -np.inf, float(max(limit, held.get(key, 0))))
    return c, rows.constraint(idx.size), Bounds(lo, hi), integral


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
    removal, every ready replica serving (at most ``n``), the rest of the demand unserved. The serving
    and unserved parts are the cheapest for these counts (serving costs nothing); whether the whole
    meets the constraints is ``_feasible``'s to say."""
    idx = _Index(problem)
    h = problem.steps
    x = np.zeros(idx.size)
    for i, svc in enumerate(problem.services):
        served = np.zeros(h)
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
            for k in range(h):
                ready = v.ready[k] - cum[CD, idx.block_of[k]]
                for kind, steps in ((CW, v.warm_steps), (CC, v.cold_steps)):
                    if k - steps >= 0:
                        ready += cum[kind, idx.block_of[k - steps]]
                s = max(0.0, min(n[idx.block_of[k]], ready))
                x[idx.s(i, j, k)] = s
                served[k] += v.capacity_rps[k] * s
        x[idx.u(i, 0):idx.u(i, 0) + h] = np.maximum(np.asarray(svc.demand_rps, dtype=float) - served, 0.0)
    return x


def _gpus(variants: Sequence[PlanVariant], counts: Sequence[int], gpu: str | None) -> int:
    """GPUs of type ``gpu`` (None: of any type) that ``counts`` replicas of ``variants`` hold."""
    return sum(n * v.gpus_per_replica for v, n in zip(variants, counts, strict=True) if gpu is None or v.gpu == gpu)


def greedy_counts(problem: PlanProblem, limits: bool = True) -> dict[tuple[int, int], np.ndarray]:
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
            for j in reversed(ranked[i]):  # the dearest go first
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
            covered = sum(v.capacity_rps[k0] * n for v, n in zip(svc.variants, target, strict=True))
            up = math.inf if svc.max_up is None or not limits else svc.max_up * length
            for j, v in enumerate(svc.variants):  # the lower bounds first, whatever they need
                before = target[j]
                target[j] = max(before, v.min_replicas, min(v.keep, v.max_replicas))
                covered += v.capacity_rps[k0] * (target[j] - before)
                up -= max(0, target[j] - max(prev[i][j], before))
                for key in (v.gpu, None):
                    used[key] = used.get(key, 0) + (target[j] - before) * v.gpus_per_replica
            for keep_back in (True, False):  # first the replicas held before, then new orders
                for j in ranked[i]:
                    v = svc.variants[j]
                    if v.capacity_rps[k0] <= 0:
                        continue
                    while (covered < need and target[j] < (prev[i][j] if keep_back else v.max_replicas)
                           and (keep_back or up >= 1)
                           and all(used.get(key, 0) + v.gpus_per_replica <= limit.get(key, math.inf)
                                   for key in (v.gpu, None))):
                        target[j] += 1
                        covered += v.capacity_rps[k0]
                        up -= 0 if target[j] <= prev[i][j] else 1
                        for key in (v.gpu, None):
                            used[key] = used.get(key, 0) + v.gpus_per_replica
            for j in range(len(svc.variants)):
                counts[i, j][b] = target[j]
                orders[i, j][b] = (orders[i, j][b - 1] if b else 0) + max(0, target[j] - prev[i][j])
                removed[i, j] += max(0, prev[i][j] - target[j])
    return counts


def _fallback(problem: PlanProblem, limits: bool, c: np.ndarray, cons: LinearConstraint,
              bounds: Bounds) -> tuple[np.ndarray, str, bool]:
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
        _, loose, loose_bounds, _ = _build(problem, limits=False)
        x = _complete(problem, greedy_counts(problem, limits=False))
        if _feasible(x, loose, loose_bounds):
            return x, "greedy", True
    held = {(i, j): np.full(idx.nb, v.current) for i, svc in enumerate(problem.services)
            for j, v in enumerate(svc.variants)}
    return _complete(problem, held), "hold", False


def solve(problem: PlanProblem) -> Plan:
    """The cheapest plan (module docstring).

    When no plan meets the step limits (today's fleet is further above a bound or quota than
    ``max_down`` removals undo in time), the limits are dropped and ``Plan.relaxed`` says so. At a
    time or node limit the best plan so far, or a fallback, is returned (module docstring):
    ``Plan.stopped_at_limit``, ``Plan.fallback`` and ``Plan.message`` say which.

    Raises:
        ValueError: malformed problem (shapes, bounds, a negative ``node_limit``).
        RuntimeError: no plan even without the step limits (the bounds, ``keep`` and the quotas
            contradict one another), naming HiGHS's message; never for a limit reached.
    """
    _check(problem)
    started = time.perf_counter()
    options: dict[str, float | int] = {"time_limit": problem.time_limit_s, "mip_rel_gap": problem.mip_rel_gap}
    if problem.node_limit is not None:
        options["node_limit"] = problem.node_limit
    relaxed = False
    c, cons, bounds, integral = _build(problem, limits=True)
    with _solver_stdout_silenced():
        res = milp(c, constraints=cons, bounds=bounds, integrality=integral, options=options)
        if res.x is None and _highs_limit(res) is None:  # no plan within the step limits
            relaxed = True
            c, cons, bounds, integral = _build(problem, limits=False)
            res = milp(c, constraints=cons, bounds=bounds, integrality=integral, options=options)
        limit = _highs_limit(res)
        if res.x is None and limit is None:
            raise RuntimeError(f"planner: HiGHS found no plan ({res.message})")
        nodes = None if res.get("mip_node_count") is None else int(res.mip_node_count)
        after = "" if nodes is None else f" after {nodes} nodes"
        fallback = None
        if res.x is not None:
            x = res.x
            message = str(res.message) if limit is None else f"HiGHS stopped at its {limit}{after}; its best plan"
        else:
            x, fallback, dropped = _fallback(problem, not relaxed, c, cons, bounds)
            relaxed = relaxed or dropped
            message = f"HiGHS stopped at its {limit}{after} without a plan; fallback: {fallback}"
    solve_ms = (time.perf_counter() - started) * 1000.0
    idx = _Index(problem)
    h = problem.steps
    replicas: dict[str, dict[str, np.ndarray]] = {}
    serving: dict[str, dict[str, np.ndarray]] = {}
    unserved: dict[str, np.ndarray] = {}
    for i, svc in enumerate(problem.services):
        replicas[svc.name], serving[svc.name] = {}, {}
        for j, v in enumerate(svc.variants):
            start = idx.var(i, j, N, 0)
            per_block = np.rint(x[start:start + idx.nb]).astype(int)
            replicas[svc.name][v.name] = per_block[idx.block_of]
            start = idx.s(i, j, 0)
            serving[svc.name][v.name] = x[start:start + h].copy()
        unserved[svc.name] = x[idx.u(i, 0):idx.u(i, 0) + h].copy()
    return Plan(replicas, serving, unserved, float(c @ x), solve_ms, relaxed, stopped_at_limit=limit is not None,
                fallback=fallback, message=message, nodes=nodes)
