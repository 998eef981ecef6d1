"""The planner's model as commit c5ad9fc built it, row by row (``models.planning._build``,
``_mir_rows``, ``_usage`` and ``_Rows`` copied verbatim, only renamed), kept as the reference the faster build is
checked against to the bit (``tests/unit/test_planning_build.py``): the same objective, bounds,
integrality, row bounds and matrix (its indices and values), so HiGHS gets the same model and gives
the same plan. One departure, made in both builds since: the MIR row's fractional part of a coefficient
is at least 0 (a capacity just below its rounded unit), and its right-hand side is lowered by 1e-12 per
whole unit of demand (``models.planning._mir_rows``), so no row cuts a whole point of the demand row."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint

from models.planning import (
    BLOCK_VARS,
    CC,
    CD,
    CW,
    FEASIBLE_TOL,
    HULL_COLUMNS,
    ROLES,
    N,
    PlanProblem,
    _hull_facets,
    _Index,
    _limit_keys,
    _limits,
    _strengthened,
    _tuned,
)


class OldRows:
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

    def add_rows(self, cols: Sequence[np.ndarray], vals: Sequence[np.ndarray | float], lb: np.ndarray,
                 ub: np.ndarray) -> None:
        """Rows ``r = 0..len(lb) - 1`` at once, row ``r`` with the terms ``(cols[t][r], vals[t][r])``
        in the order of ``t``, where ``cols[t][r] >= 0`` (a negative column: no such term)."""
        if len(cols) != len(vals):
            raise ValueError(f"_Rows.add_rows: {len(cols)} column arrays but {len(vals)} value arrays")
        first = len(self.lb)
        cs = np.stack([np.asarray(col) for col in cols], axis=1)  # (rows, terms): each row's terms in order
        vs = np.stack([np.broadcast_to(np.asarray(val, dtype=float), cs.shape[:1]) for val in vals], axis=1)
        there = cs >= 0
        # row-major order: entries row by row, each row's terms in the order given (what add would append)
        self.rows.extend((first + np.nonzero(there)[0]).tolist())
        self.cols.extend(cs[there].tolist())
        self.vals.extend(vs[there].tolist())
        self.lb.extend(np.asarray(lb, dtype=float).tolist())
        self.ub.extend(np.asarray(ub, dtype=float).tolist())

    def constraint(self, size: int) -> LinearConstraint:
        a = sparse.csr_array((self.vals, (self.rows, self.cols)), shape=(len(self.lb), size))
        return LinearConstraint(a, np.array(self.lb), np.array(self.ub))


def old_mir_rows(problem: PlanProblem, idx: _Index, rows: OldRows, hull: bool = False) -> None:
    """Valid inequalities that tighten the LP relaxation without changing the optimum (module
    docstring, "Solving fast"): per service and step, for each capacity ``C`` a variant has there,
    the mixed-integer rounding of ``sum_v capacity_v s_v / C + u / C >= demand / C`` over whole
    serving counts ``s_v``. An optimal plan serves ``s = min(n, ready)``, whole when the ready counts
    are, so a service with a fractional ``ready`` gets none. With ``hull`` (the tuned search), a step
    whose variants have two capacities gets instead every facet of that row's convex hull over whole
    serving counts (``_hull_facets``, each capacity's variants summed; the two MIR rows are among
    them); with one capacity the MIR row is the hull; with three or more the MIR rows stay. A
    service with prefill/decode pools gets them on its demand row alone, the pools' share ``x``
    counted as continuous as ``u`` is, its aggregated variants the only whole terms."""
    for i, svc in enumerate(problem.services):
        if any(np.any(np.abs(v.ready - np.round(v.ready)) > FEASIBLE_TOL) for v in svc.variants):
            continue
        loose = ([(idx.u(i, 0), 1.0)] + ([(idx.shed[i], 1.0)] if i in idx.shed else [])  # step 0's continuous
                 + ([(idx.pd[i], 1.0)] if i in idx.pd else []))  # the pools' share: continuous in the demand row
        pairs: dict[tuple[float, float], list[int]] = {}
        for k in range(problem.steps):
            d = float(svc.demand_rps[k])
            caps = [float(v.capacity_rps[k]) if v.role is None else 0.0 for v in svc.variants]
            units = sorted({round(cap, 9) for cap in caps if cap > FEASIBLE_TOL})
            if hull and len(units) == 2 and d > FEASIBLE_TOL and d / units[1] <= HULL_COLUMNS:
                pairs.setdefault((units[1], units[0]), []).append(k)
                continue
            for unit in units:
                beta = d / unit
                f = beta - math.floor(beta)
                if not 1e-6 < f < 1.0 - 1e-6:  # whole: the rounding adds nothing
                    continue
                terms = [(c + k, 1.0 / unit) for c, _ in loose]
                for j, cap in enumerate(caps):
                    a = cap / unit
                    coef = f * math.floor(a + 1e-9) + min(max(a - math.floor(a + 1e-9), 0.0), f) if a > 0 else 0.0
                    if coef > 0:
                        terms.append((idx.s(i, j, k), coef))
                rows.add(terms, f * math.ceil(beta) - 1e-12 * math.ceil(beta), np.inf)
        for (big, small), steps in pairs.items():
            facets = _hull_facets(big, small, [float(svc.demand_rps[k]) for k in steps])
            at = np.asarray(steps)[facets[:, 0].astype(int)]  # each facet's step
            cols: list[np.ndarray] = [c + at for c, _ in loose]
            vals: list[np.ndarray | float] = [1.0] * len(loose)
            for j, v in enumerate(svc.variants):
                if v.role is not None:  # not in the demand row (the pools' rows have x, not demand)
                    continue
                cap_at = np.round(np.asarray(v.capacity_rps, dtype=float)[at], 9)
                coefs = np.where(cap_at == big, facets[:, 1], np.where(cap_at == small, facets[:, 2], 0.0))
                cols.append(np.where(coefs > 0, idx.s(i, j, 0) + at, -1))
                vals.append(coefs)
            rows.add_rows(cols, vals, facets[:, 3], np.full(len(facets), np.inf))


def old_build(problem: PlanProblem, limits: bool, caps: Mapping[str | None, np.ndarray] | None = None,  # noqa: C901
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
    rows = OldRows()
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
                      [1.0] * (1 + len(shed) + len(pd))
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
    if _strengthened(problem):
        old_mir_rows(problem, idx, rows, hull=_tuned(problem) and problem.hull)
    cons = rows.constraint(idx.size)
    keys = list(caps) if caps is not None else _limit_keys(problem)
    if keys:
        usage = old_usage(problem, keys)
        if caps is not None:
            ub = np.concatenate([np.asarray(caps[key], dtype=float) for key in keys])
        else:
            ub = _limits(problem, keys)
        cons = LinearConstraint(sparse.vstack([cons.A, usage], format="csr"),
                                np.concatenate([cons.lb, np.full(len(ub), -np.inf)]), np.concatenate([cons.ub, ub]))
    return c, cons, Bounds(lo, hi), integral


def old_usage(problem: PlanProblem, keys: Sequence[str | None]) -> sparse.csr_array:
    """GPUs held per (limit, block): row ``ki * blocks + b`` sums ``gpus_per_replica n[v,b]`` over the
    variants of GPU type ``keys[ki]`` (None: of any type)."""
    idx = _Index(problem)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for ki, key in enumerate(keys):
        for i, svc in enumerate(problem.services):
            for j, v in enumerate(svc.variants):
                if key is None or v.gpu == key:
                    first = idx.var(i, j, N, 0)
                    rows.extend(range(ki * idx.nb, (ki + 1) * idx.nb))
                    cols.extend(range(first, first + idx.nb))
                    vals.extend([float(v.gpus_per_replica)] * idx.nb)
    return sparse.csr_array((vals, (rows, cols)), shape=(len(keys) * idx.nb, idx.size))
