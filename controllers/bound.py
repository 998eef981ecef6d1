"""The bound: the cheapest schedule of the oracle's family that reaches the target attainment *in simulation*.

``oracle`` (``controllers.oracle``) plans on the capacity model, so where the model understates what a
replica serves its schedule is dearer than needed, and where it overstates, the schedule misses the
SLO: it is no bound. ``bound`` keeps the oracle's planner (perfect foresight of the demand, start-up
times, step limits, quotas) and corrects its one uncertain input by search: every variant's capacity
is scaled by a common factor ``c`` and the offline plan solved again; ``c`` > 1 believes replicas
serve more (a cheaper schedule), ``c`` < 1 less. Each candidate is simulated on the comparison's own
workload, seed and admission policy (the ``simulate`` callback the driver gives), and the search
keeps the cheapest one whose interactive attainment reaches ``target``:

1. ``c = 1`` (the oracle's own schedule);
2. a bracket: doubling the step away from 1 (``c = 1 +- 0.25, 1 +- 0.5, ...`` within
   ``SCALE_LIMITS``) until one candidate reaches the target and one does not;
3. bisection on ``log c`` inside the bracket, the remaining simulations.

The family is one-dimensional on purpose: each point costs a whole simulation, and attainment falls
with ``c`` (fewer replicas at every step), so bisection finds the family's cheapest feasible point to
the bracket's final width (``2^-k`` of its log-width after ``k`` bisections, 2-3 % with the default 8
simulations). It is an upper bound on the true optimum's cost (any schedule reaching the target
costs at least that optimum); it is tight where the model's error is the same for every variant and
every minute, and loose where it is not: a variant the model misjudges more than another, or a
minute whose mix differs from the hour's, would need a scale per variant or per time block, which
multiplies the simulations (docs/controllers.md, "The bound").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from controllers.oracle import OFFLINE_NODE_LIMIT, OracleController, oracle_controller

if TYPE_CHECKING:
    from autoscaler.config import FleetConfig, Service
    from autoscaler.state import ServiceEstimate
    from autoscaler.workload.types import Workload
    from controllers.base import Controller, Decision

SCALE_LIMITS = (0.25, 4.0)
"""Capacity scales searched: a model off by more than 4x is a wrong profile, not a bound to report."""

FIRST_STEP = 0.25
"""The first step of the bracket from ``c = 1``, in log units of ``c`` (x1.28 or /1.28)."""

DEFAULT_TARGET = 0.99
"""Interactive attainment the bound must reach (``autoscaler.compare``'s default floor)."""

DEFAULT_SIMULATIONS = 8
"""Simulations the search may run: one for the oracle's schedule, the rest bracket and bisect."""


@dataclass(frozen=True)
class Outcome:
    """What the ``simulate`` callback measures of one candidate: interactive attainment (None when
    unknown) and cost, $ (the objective the search minimises among those reaching the target)."""

    attainment: float | None
    cost_usd: float


Simulate = Callable[["Controller"], Outcome]


@dataclass(frozen=True)
class Trial:
    """One simulated candidate: its capacity scale, its outcome and whether it reached the target."""

    scale: float
    outcome: Outcome
    feasible: bool


class BoundController(OracleController):
    """The cheapest candidate found (``OracleController`` playing its schedule) and the search's
    record: ``scale`` (its capacity scale; None when no candidate reached the target, and then the
    schedule is the most capacious tried), ``trials`` (every candidate simulated, in order)."""

    scales_roles = False  # its candidates plan no pool (``bound_controller``)

    def __init__(self, chosen: OracleController, scale: float | None, trials: Sequence[Trial]) -> None:
        super().__init__(chosen.schedule, chosen.replicas, chosen.tick_s, chosen.window_s, chosen.plan_cost,
                         chosen.solve_ms, chosen.name, chosen.plan)
        self.scale = scale
        self.trials = tuple(trials)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """The chosen schedule's replicas; terms add ``capacity_scale`` (0 when none reached the
        target) and ``simulations`` (candidates simulated)."""
        d = super().decide(est, svc)
        terms = {**d.terms, "capacity_scale": self.scale or 0.0, "simulations": float(len(self.trials))}
        return replace(d, terms=terms)


def search_scales(try_scale: Callable[[float], Outcome], target: float, simulations: int) -> list[Trial]:
    """The search of the module docstring over capacity scales: ``try_scale(c)`` simulates the
    family's member at ``c``. Returns every trial in order (at most ``simulations``, >= 1).

    Raises:
        ValueError: ``simulations`` < 1 or ``target`` outside (0, 1].
    """
    if simulations < 1 or not 0 < target <= 1:
        raise ValueError(f"need simulations >= 1 and target in (0, 1], got {simulations} and {target}")
    trials: list[Trial] = []

    def run(c: float) -> bool:
        out = try_scale(c)
        ok = out.attainment is not None and out.attainment >= target
        trials.append(Trial(c, out, ok))
        return ok

    lo_log, hi_log = math.log(SCALE_LIMITS[0]), math.log(SCALE_LIMITS[1])
    ok, bad = (0.0, None) if run(1.0) else (None, 0.0)  # log c of a feasible and an infeasible point
    step = FIRST_STEP
    while len(trials) < simulations and (ok is None or bad is None):
        x = (ok + step) if ok is not None else (bad - step)  # type: ignore[operator]
        x = min(max(x, lo_log), hi_log)
        if (ok is not None and x <= ok) or (bad is not None and x >= bad):
            break  # at the limit of the search
        if run(math.exp(x)):
            ok = x
        else:
            bad = x
        step *= 2.0
    while len(trials) < simulations and ok is not None and bad is not None:
        mid = (ok + bad) / 2.0
        if run(math.exp(mid)):
            ok = mid
        else:
            bad = mid
    return trials


def bound_controller(cfg: FleetConfig, svc: Service, workload: Workload, weights: dict[str, float],
                     initial: dict[str, int], simulate: Simulate, target: float = DEFAULT_TARGET,
                     simulations: int = DEFAULT_SIMULATIONS, miss_weight: float = 10.0,
                     node_limit: int = OFFLINE_NODE_LIMIT, name: str = "bound") -> BoundController:
    """Search the oracle's family (module docstring) for ``svc`` on ``workload`` and wrap the cheapest
    candidate that reaches ``target`` as a controller. The candidates plan the aggregated variants
    alone (``oracle_controller``'s ``roles=False``): the search scales their capacities only.

    Args:
        weights: variant -> one replica's capacity by the model, requests/s (scaled by the search).
        initial: variant -> replicas ready at t = 0.
        simulate: runs a controller on the comparison's workload, seed and admission; its ``Outcome``.
        target: interactive attainment to reach, in (0, 1].
        simulations: most candidates simulated (>= 1).

    Raises:
        ValueError: as ``oracle_controller``; a bad ``target`` or ``simulations``.
        RuntimeError: as ``oracle_controller``.
    """
    built: dict[float, OracleController] = {}

    def candidate(c: float) -> OracleController:
        if c not in built:
            built[c] = oracle_controller(cfg, svc, workload, {v: w * c for v, w in weights.items()}, initial,
                                         miss_weight, node_limit, name, roles=False)
        return built[c]

    trials = search_scales(lambda c: simulate(candidate(c)), target, simulations)
    feasible = [t for t in trials if t.feasible]
    best = min(feasible, key=lambda t: t.outcome.cost_usd) if feasible else min(trials, key=lambda t: t.scale)
    chosen = candidate(best.scale)
    return BoundController(chosen, best.scale if feasible else None, trials)
