"""The oracle: the planner of ``models.planning`` solved once, offline, on a trace's true demand.

It knows every arrival in advance, so its schedule is the lowest cost this fleet reaches at the SLO
with these start-up times, as far as the capacity model is right; it is then *simulated* like any
controller, so its attainment is measured, not assumed. ``compare`` ranks every row's cost against it
when it is present (``autoscaler.compare``).

The problem: steps of the loop's tick (coarser when the trace is long: at most ``MAX_STEPS`` steps),
replica counts constant over ``BLOCK_S`` blocks; demand per block the highest 60-s arrival rate of
the served requests in any window overlapping it (``true_demand``: the peak rule of ``static``, per
block); each replica's capacity as the MPC's (the trace's
mix, ``models.capacity``); the fleet starts where every adaptive controller starts in simulation
(``autoscaler.simulate.start_at``: sized for the opening minutes), ready; warm nodes, step limits and
quotas as the MPC's; starting a replica costs its cold start's GPU time; a request left unserved costs
``miss_weight`` times the dearest variant's cost per request.

Prefill/decode pools (issue 34; opt-in, ``oracle:roles=1``, then ``scales_roles``): a service with ``roles`` has
its pools' variants in
the same problem as its aggregated variants, as the MPC plans them (``models.planning``, "Prefill/decode
pools": the plan chooses per step the share of the demand the pools serve), each pool replica's
capacity ``controllers.roles.pool_capacities`` for the trace's mix times ``pd_util`` (the MPC's rule and
knob, default 1; the MPC's runtime ``pool_scale`` has no offline counterpart: it is read off what the
pools complete), the pools starting at their ``start_replicas`` (the fleet file's ``initial_replicas``,
as the simulator starts them) and the service's ``roles.ratio`` a constraint of the plan
(``controllers.mpc.pd_ratio``). So on a fleet with both, the oracle's schedule is the hindsight answer,
on the capacity models, to whether disaggregation pays there (the simulated pools may serve less than
modelled: docs/benchmarks.md, "Issue 34: the MPC with roles at the oracle's attainment" (d)). By default
(``roles`` False) the oracle plans the aggregated variants alone and the loop holds the pools: its row stays
the reference ``compare`` divides by, and at ``pd_util`` 1 the pools' plan serves 8 points under it on Azure
code. A service without ``roles`` is planned exactly as before; a pools-only service is refused as before.

Solved by work, not wall time: HiGHS stops after ``OFFLINE_NODE_LIMIT`` branch-and-bound nodes (its
best plan by then, or a fallback: ``models.planning``), so the oracle's schedule is the same on a
loaded machine as on an idle one; ``OFFLINE_TIME_LIMIT_S`` is only a backstop. Its decisions' reason
and terms say when the plan stopped at a limit (``controllers.mpc.limit_note``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from controllers.base import POOLS_ONLY, Decision, FleetMismatchError, Reason
from controllers.mpc import (
    DEFAULT_PD_UTIL,
    all_variants,
    limit_note,
    limit_terms,
    log,
    miss_cost,
    pd_ratio,
    plan_variant,
    pool_off_note,
    pools_queues,
)
from controllers.roles import pool_capacities
from controllers.static import PEAK_WINDOW_S, ScheduledController, served
from models.capacity import RequestMix, pooled_weights
from models.planning import Plan, PlanProblem, PlanService, solve

if TYPE_CHECKING:
    from autoscaler.config import FleetConfig, Service
    from autoscaler.state import ServiceEstimate
    from autoscaler.workload.types import Workload

BLOCK_S = 60.0
"""Seconds over which the oracle's replica counts stay constant and its demand is averaged (one
60-s block: the peak window ``static`` is sized on)."""

MAX_STEPS = 2000
"""Most steps in the offline problem (a day of 60-s steps is 1,440); longer traces get coarser steps."""

OFFLINE_NODE_LIMIT = 500
"""Branch-and-bound nodes the offline solve may explore: a bound on work, so the plan does not depend
on machine load (a 120-s time limit under load left a day trace without a plan: issue 31). The
shipped scenarios need far fewer (``docs/controllers.md#at-the-solvers-limit``)."""

OFFLINE_TIME_LIMIT_S = 3600.0
"""A backstop only: a solve this long is a bug to report, not a limit the node limit should meet."""

OFFLINE_GAP = 1e-3
"""HiGHS's relative optimality gap offline: 0.1 % of the plan's cost, below the differences between
controllers that ``compare`` reports."""


def true_demand(svc: Service, workload: Workload, dt_s: float, steps: int, block_steps: int,
                window_s: float = PEAK_WINDOW_S) -> np.ndarray:
    """Requests/s of ``svc``'s served requests per step, shape (steps,): for each block of
    ``block_steps`` steps, the most arrivals in any ``window_s``-second window that overlaps it, over
    ``window_s`` (the rule ``static`` applies to the whole trace, applied per block), repeated for
    the block's steps."""
    t = np.sort(np.array([r.arrival_s for r in served(workload, svc.max_model_len)]))
    block_s = dt_s * block_steps
    n_blocks = math.ceil(steps / block_steps)
    per_start = np.zeros(n_blocks)  # most arrivals in a window starting in each block
    if len(t):
        counts = np.searchsorted(t, t + window_s, side="left") - np.arange(len(t))
        np.maximum.at(per_start, np.minimum((t // block_s).astype(int), n_blocks - 1), counts)
    reach = math.ceil(window_s / block_s)  # windows starting this many blocks earlier still overlap
    overlap = np.array([per_start[max(0, j - reach):j + 1].max() for j in range(n_blocks)])
    return np.repeat(overlap / window_s, block_steps)[:steps]


class OracleController(ScheduledController):
    """Plays a schedule solved in advance; starts from ``initial`` (service -> variant -> replicas).

    Args:
        schedule: ``(start_s, replicas)`` pairs, as ``ScheduledController``.
        initial: the fleet ready at t = 0 (``autoscaler.simulate.start_at`` reads ``replicas``).
        plan_cost: the objective of the offline plan, $; ``solve_ms``: its solve time.
        plan: the solved plan, for its solver notes (``stopped_at_limit``, ``fallback``); None: none.

        scales_roles: whether the schedule holds the pools' variants too (``oracle_controller``'s
            ``roles``, opt-in: ``oracle:roles=1``); then the loop applies them to each pool, clamped to
            their bounds as the aggregated variants are (``own_guard``); else the loop holds the pools.
        route: service -> variant -> the plan's capacity of one replica per step, requests/s, shape
            (steps,), steps of ``route_dt_s`` seconds from t = 0 (past the last step, the last): each
            decision's ``route_weights`` are the step's holding its time, so a simulated P/D router
            splits the demand between the aggregated replicas and the pools as the plan did
            (``FleetSimulator.follow_plan``; the MPC's ``route_weights``). None (the default): no route
            weights, the router keeps its own (``oracle_controller`` gives it with ``roles`` unless ``route=0``).
        route_dt_s: seconds per step of ``route`` (> 0 when ``route`` is given).

    Raises:
        ValueError: ``route`` given with ``route_dt_s`` not > 0.
    """

    def __init__(self, schedule: list[tuple[float, dict[str, dict[str, int]]]],
                 initial: dict[str, dict[str, int]], tick_s: float, window_s: float, plan_cost: float,
                 solve_ms: float, name: str = "oracle", plan: Plan | None = None, scales_roles: bool = False,
                 route: dict[str, dict[str, np.ndarray]] | None = None, route_dt_s: float = 0.0) -> None:
        if route is not None and not route_dt_s > 0:
            raise ValueError(f"{name}: route needs its steps' length, route_dt_s > 0, got {route_dt_s}")
        super().__init__(schedule, tick_s, window_s, name)
        self.scales_roles = scales_roles
        self.route = route
        self.route_dt_s = route_dt_s
        self.replicas = initial
        self.plan_cost = plan_cost
        self.solve_ms = solve_ms
        self.plan = plan

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """The schedule's replicas for ``est.time_s``; the reason and terms say when the plan stopped
        at the solver's limit."""
        d = super().decide(est, svc)
        route = self.route_weights(svc.name, est.time_s)
        if self.plan is None:
            return Decision(d.desired, f"{self.name}: offline plan", Reason.FIXED, route_weights=route)
        return Decision(d.desired, f"{self.name}: offline plan{limit_note(self.plan)}", Reason.FIXED,
                        terms=limit_terms(self.plan), route_weights=route)

    def route_weights(self, service: str, time_s: float) -> dict[str, float]:
        """variant -> one replica's capacity in the plan's step holding ``time_s`` (s >= 0), requests/s
        (``route``); empty without ``route`` or for a service it does not hold."""
        caps = None if self.route is None else self.route.get(service)
        if not caps:
            return {}
        steps = min(len(c) for c in caps.values())
        k = min(max(0, math.floor(time_s / self.route_dt_s)), steps - 1)
        return {v: float(c[k]) for v, c in caps.items()}


def oracle_controller(cfg: FleetConfig, svc: Service, workload: Workload, weights: dict[str, float],
                      initial: dict[str, int], miss_weight: float = 10.0, node_limit: int = OFFLINE_NODE_LIMIT,
                      name: str = "oracle", pool: int = 1, mix: RequestMix | None = None,
                      roles: bool = False, pd_util: float = DEFAULT_PD_UTIL, route: bool = True,
                      peak_s: float = PEAK_WINDOW_S) -> OracleController:
    """Solve the offline plan for ``svc`` on ``workload`` (module docstring) and wrap it as a controller.

    Args:
        weights: variant -> one replica's capacity, requests/s.
        initial: variant -> replicas ready at t = 0.
        node_limit: branch-and-bound nodes the solve may explore (>= 0).
        pool: above 1, each step's capacities are those of a replica pooled behind the least-loaded
            router with as many others as that step's demand needs, at most ``pool``
            (``models.capacity.pooled_weights`` on ``mix``, the mix ``weights`` were computed for);
            1: ``weights`` as given, every step.
        mix: the trace's mix ``weights`` were computed for: ``pool`` > 1 pools on it, and a service's
            prefill/decode pool replicas get their capacities for it (``pool_capacities``; None: 0, no
            pool replica ordered).
        roles: plan the service's prefill/decode pools with its aggregated variants (module docstring;
            ``oracle:roles=1``); False (the default) plans its aggregated variants alone (as
            ``controllers.bound``'s candidates, whose capacity scale applies to the aggregated variants only).
        pd_util: the share of a pool replica's modelled capacity the plan counts on, in (0, 1] (the MPC's
            ``pd_util``, its default 1; ``oracle:roles=1:pd_util=0.6`` plans the pools with the MPC's tuned
            headroom); only with ``roles``, else refused.
        route: with ``roles`` on a service with pools, each decision carries the plan's capacities of the
            step as ``route_weights`` (``OracleController``'s ``route``; on by default, as the MPC hands its
            own; ``oracle:roles=1:route=0`` turns it off): without them the simulated P/D router weighs an
            aggregated replica and a decode replica by their aggregated rates (``FleetSimulator.pd_weights``),
            not by the plan's split.
        peak_s: the window of ``true_demand``, seconds (> 0; default ``PEAK_WINDOW_S``, 60): each block's
            demand is the most arrivals in any window this long overlapping it, over its length, so a
            shorter window plans for the trace's shorter bursts (opt-in, ``oracle:peak_s=20``; issue 34:
            a prefill pool sized at its modelled capacity has little slack for a burst within a minute).

    Raises:
        ValueError: no variant can serve within the SLO, or a bad argument.
        RuntimeError: no plan exists (the bounds and quotas contradict one another); never for a
            limit reached.
    """
    c = cfg.controller
    if not workload.requests:
        raise ValueError(f"{name} needs a trace with requests")
    if not svc.variants:  # refused before the demand is binned and the variants planned
        raise FleetMismatchError(f"{name}: " + POOLS_ONLY.format(service=svc.name))
    duration = max(r.arrival_s for r in workload.requests) + c.tick_s
    dt = c.tick_s * max(1, math.ceil(duration / c.tick_s / MAX_STEPS))
    steps = math.ceil(duration / dt)
    block_steps = max(1, round(BLOCK_S / dt))
    if not peak_s > 0:
        raise ValueError(f"{name}: peak_s must be > 0, got {peak_s}")
    demand = true_demand(svc, workload, dt, steps, block_steps, window_s=peak_s)
    off = pool_off_note(cfg, pool)
    if off is not None:  # planned once per service: said once per service
        log.warning("%s: %s: %s", name, svc.name, off)
    if pool > 1 and pools_queues(cfg):  # behind prefix affinity no queue is shared: every replica alone
        if mix is None:
            raise ValueError(f"{name}: pool={pool} needs the mix the capacities are computed for")
        per_step = pooled_weights(svc, cfg.planning_engine(), mix, demand, pool)
    else:
        per_step = {v.name: np.full(steps, weights[v.name]) for v in svc.variants}
    if not 0 < pd_util <= 1:
        raise ValueError(f"{name}: pd_util must be in (0, 1], got {pd_util}")
    planned = all_variants(svc) if roles else [(None, v) for v in svc.variants]
    if len(planned) > len(svc.variants):  # the pools' capacities: the MPC's rule, for the trace's mix
        caps = {v.name: 0.0 for _, v in svc.role_variants()} if mix is None else pool_capacities(
            svc, cfg.planning_engine(), mix)
        per_step.update({v.name: np.full(steps, caps[v.name] * pd_util) for _, v in svc.role_variants()})
        initial = {**initial, **{v.name: v.start_replicas for _, v in svc.role_variants()}}
    variants = [plan_variant(v, dt, per_step[v.name], initial[v.name], np.full(steps, float(initial[v.name])),
                             role=role) for role, v in planned]
    miss = miss_cost(variants, miss_weight)
    if miss is None:
        raise ValueError(f"{name}: no variant of {svc.name} can serve its requests within the SLO")
    limit = round(dt / c.tick_s)  # the guard's limits are per tick
    problem = PlanProblem([PlanService(svc.name, variants, demand, miss,
                                       c.guard.max_step_up * limit, c.guard.max_step_down * limit,
                                       pd_ratio=pd_ratio(svc) if roles else None)],
                          dt, steps, blocks=list(range(0, steps, block_steps)), gpu_quota=dict(cfg.gpu_limits.quota),
                          gpu_budget=cfg.gpu_limits.budget, time_limit_s=OFFLINE_TIME_LIMIT_S,
                          node_limit=node_limit, mip_rel_gap=OFFLINE_GAP)
    plan = solve(problem)
    counts = plan.replicas[svc.name]
    schedule: list[tuple[float, dict[str, dict[str, int]]]] = []
    for k in range(steps):
        now = {v: int(n[k]) for v, n in counts.items()}
        if not schedule or schedule[-1][1][svc.name] != now:
            schedule.append((k * dt, {svc.name: now}))
    if schedule[0][0] != 0:
        schedule.insert(0, (0.0, {svc.name: dict(initial)}))
    start = {v.name: initial[v.name] for v in svc.variants}  # ``start_at`` sets the aggregated ones
    pools = roles and svc.roles is not None
    routed = {svc.name: {name: per_step[name] for name in (v.name for _, v in planned)}} if pools and route else None
    return OracleController(schedule, {svc.name: start}, c.tick_s, c.window_s, plan.cost, plan.solve_ms, name, plan,
                            scales_roles=pools, route=routed, route_dt_s=dt)
