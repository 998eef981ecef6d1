"""Counting harmful actions in a finished simulation (``Scenario.harm``).

Capacity is what the capacity model gives one replica of each variant at the interactive SLO for
the scenario's own request sizes and the prefix-cache hit rate the run reached
(``models.capacity.variant_weights`` on the workload's ``RequestMix``; a prefill or decode pool's
variant: ``controllers.roles.role_weights``, the capacity the PID and MPC size pools by), requests/s;
*demand* at ``t`` is the highest 60-s arrival rate of the workload's requests (first attempts:
retries are the failure's echo, not demand) over ``[t - 120 s, t + lookahead_s]``. The aggregated
variants and each prefill/decode pool are *groups*, each sized to the whole demand (every request
passes its decode pool and, prefilled remotely, its prefill pool). A tick *scales a group down* when
the capacity it leaves asked for is below what it found (a swap of GPU generations at equal or
higher capacity is not one), *up* when above; a tick changing two groups is two changes. The rules,
each counting events:

- ``down_on_missing_data``: a scale-down at a tick inside a window where metrics were missing (the
  scenario's ``prometheus_down`` or ``pod_metrics_missing``) or a query failed: an outage read as idle.
- ``down_while_missing_slo``: a scale-down while the interactive requests (accepted: a request
  refused as too long is not the fleet's miss) that arrived in the 120 s before it meet their SLO
  less often than ``objective``: capacity removed from a fleet that is failing (a warm replica
  removed while recovering from a crash, say). Only the past: a crash the next minute is not the
  controller's to foresee.
- ``overshoot``: a scale-up to more than ``factor`` x demand + one replica of capacity (and above
  the minimum replicas): past what the demand needs, e.g. doubling while new pods emit no metrics.
- ``killed_starting``: a replica removed before it was ready (Pending or starting) while the SLO
  was being missed (as ``down_while_missing_slo``): the pod the waiting demand needed.
- ``cut_generations``: requests a scale-down killed when the termination grace ran out.
- ``held_pending``: a replica left Pending longer than ``after_s`` (default
  ``kubernetes.pending_timeout_s`` + 60 s): the controller waits on pods no node can take.
- ``held_idle``: replicas alive at ``after_s`` (seconds from the first arrival) beyond what the demand
  then needs (``factor`` x demand in replicas of the largest capacity, at least the minimum): held
  after the load stopped.
- ``flaps``: a scale-down within ``window_s`` after a scale-up of the same group, or the reverse: a
  target reversing under a steady mean.
- ``down_while_pool_lost``: a scale-down of any group while a pool is lost: from a ``crash`` that took
  a prefill or decode pool's replicas until that pool has as many ready replicas as just before it
  (at most ``window_s``). The demand has not moved: the lost pool's requests queue, and the other
  pool's signals then read low (a prefill pool idles while decode is lost), so removing capacity
  of either answers the fault, not a load change, and leaves the fleet short when the pool is back.
- ``down_on_link_slowdown``: a scale-down of any group from a ``link_slowdown``'s start until
  ``DEMAND_BEHIND_S`` after its end (the signals' windows still hold it) while the arrival rate over
  the past ``DEMAND_BEHIND_S`` is at least ``LOAD_KEPT`` of what it was when the slowdown began (and
  that was above 0: with no arrivals the link holds nothing, so a scale-down answers the idle load): the
  slow link holds requests waiting for their KV (decode replicas reserve it, run fewer sequences)
  and lengthens TTFT; a controller reading that as less work removes capacity the load still needs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoscaler.faults.scenario import CrashFault, HarmRule, LinkSlow, PodMetricsMissing, PrometheusDown, Scenario
from autoscaler.report import request_outcomes
from autoscaler.simulate import SimulationRun
from autoscaler.simulator.engine import REJECTED
from autoscaler.workload.stream import columns
from autoscaler.workload.types import INTERACTIVE
from controllers.roles import role_weights
from models.capacity import RequestMix, variant_weights

DEMAND_BIN_S = 60.0
DEMAND_BEHIND_S = 120.0
LOAD_KEPT = 0.9
"""``down_on_link_slowdown``: a fall of the arrival rate by more than 10 % is a load change a controller
may follow (the suite's own threshold, not a published one)."""
AGGREGATED = ""
"""The group of a service's aggregated variants (``Change.group``); a pool's is its role."""


@dataclass
class Change:
    """One tick's net change of one group of the target service (module docstring): time, capacity
    found and asked for (req/s), whether the tick's metric queries failed, the group (``AGGREGATED``,
    ``prefill`` or ``decode``)."""

    time_s: float
    before_rps: float
    after_rps: float
    errors: bool
    group: str = AGGREGATED


Counts = tuple[float, dict[str, int], dict[str, int], bool]
"""A tick's (time s, replicas found, replicas asked for, whether its queries failed), per variant:
aggregated and pool variants alike (their names are unique within a service)."""


class RunFacts:
    """What the rules read from one run: capacities, demand, SLO outcomes by arrival, changes.

    ``counts``: the run's changes of replicas, when not its loop's ticks (a live run's writes).
    """

    def __init__(self, run: SimulationRun, counts: list[Counts] | None = None) -> None:
        sim = run.sim
        self.run = run
        self.svc = sim.cfg.service(sim.target)
        cols = columns(sim.workload)
        replicas = [r for s in sim.services.values() for r in s.replicas]
        queries = sum(r.metrics.prefix_queries for r in replicas)
        hit = min(sum(r.metrics.prefix_hits for r in replicas) / queries, 0.99) if queries else 0.0
        mix = RequestMix.from_requests(cols.input_tokens.tolist(), cols.output_tokens.tolist(), hit)
        self.capacity = {**variant_weights(self.svc, sim.cfg.engine, mix),
                         **role_weights(self.svc, sim.cfg.engine, mix)}
        self.group_of = {v.name: AGGREGATED for v in self.svc.variants}
        self.group_of.update({v.name: role for role, v in self.svc.role_variants()})
        arrivals = cols.arrival_s
        self.end_s = run.end_s
        n_bins = max(1, math.ceil((self.end_s + DEMAND_BIN_S) / DEMAND_BIN_S))
        self.rate = np.bincount((arrivals // DEMAND_BIN_S).astype(int), minlength=n_bins) / DEMAND_BIN_S
        o = request_outcomes(run)
        inter = (o["cls"] == INTERACTIVE) & (o["status"] != REJECTED)  # as summarize counts attainment
        order = np.argsort(arrivals[inter], kind="stable")
        self.inter_arrival = arrivals[inter][order]
        self.inter_ok = np.concatenate([[0], np.cumsum(o["ok"][inter][order])])
        if counts is None:  # a controller that does not scale the pools leaves them as found
            counts = [(tick.time_s, {**st.estimate.current, **st.estimate.pool_current},
                       {**st.applied, **(st.pool_applied or st.estimate.pool_current)}, bool(st.estimate.errors))
                      for tick in run.ticks if (st := tick.services.get(sim.target)) is not None]
        self.groups = sorted(set(self.group_of.values()))
        self.changes: list[Change] = []
        for t, found, asked, errors in counts:
            for g in self.groups:
                before, after = self.capacity_of(found, g), self.capacity_of(asked, g)
                if not math.isclose(before, after):
                    self.changes.append(Change(t, before, after, errors, g))
        minimum = {v.name: v.min_replicas for v in self.svc.variants}
        minimum.update({v.name: v.min_replicas for _, v in self.svc.role_variants()})
        self.min_rps = {g: self.capacity_of(minimum, g) for g in self.groups}

    def capacity_of(self, replicas: dict[str, int], group: str = AGGREGATED) -> float:
        """Capacity of ``replicas`` (variant -> count) of ``group``'s variants, requests/s."""
        return sum(n * self.capacity.get(v, 0.0) for v, n in replicas.items() if self.group_of.get(v) == group)

    def one(self, group: str = AGGREGATED) -> float:
        """The largest replica's capacity in ``group``, requests/s: the slack every sizing rule allows
        (0 for a group the service lacks)."""
        return max((c for v, c in self.capacity.items() if self.group_of.get(v) == group), default=0.0)

    def recent_rate(self, t: float) -> float:
        """Mean arrival rate over the 60-s bins of ``[t - 120 s, t]``, requests/s."""
        lo = max(0, int((t - DEMAND_BEHIND_S) // DEMAND_BIN_S))
        hi = min(len(self.rate), int(t // DEMAND_BIN_S) + 1)
        return float(self.rate[lo:hi].mean()) if hi > lo else 0.0

    def ready_in(self, role: str, t: float) -> int:
        """Ready replicas of the target service's ``role`` pool at ``t`` (not yet removed nor gone)."""
        return sum(1 for r in _replicas(self) if r.role == role and r.ready_s <= t
                   and (r.removed_s is None or r.removed_s > t) and (r.gone_s is None or r.gone_s > t))

    def demand(self, t: float, lookahead_s: float) -> float:
        """Highest 60-s arrival rate over ``[t - 120, t + lookahead_s]``, requests/s."""
        lo = max(0, int((t - DEMAND_BEHIND_S) // DEMAND_BIN_S))
        hi = min(len(self.rate), int((t + lookahead_s) // DEMAND_BIN_S) + 1)
        return float(self.rate[lo:hi].max()) if hi > lo else 0.0

    def attainment(self, start: float, end: float) -> float | None:
        """Interactive SLO attainment of the requests arriving in ``[start, end)``; None when none do."""
        i, j = np.searchsorted(self.inter_arrival, [start, end])
        return float(self.inter_ok[j] - self.inter_ok[i]) / (j - i) if j > i else None


def _missing_windows(sc: Scenario) -> list[tuple[float, float]]:
    return [(f.start_s, f.end_s) for f in sc.faults if isinstance(f, PrometheusDown | PodMetricsMissing)]


def _downs(facts: RunFacts) -> list[Change]:
    return [c for c in facts.changes if c.after_rps < c.before_rps]


def _replicas(facts: RunFacts) -> list[Any]:
    sim = facts.run.sim
    return [r for s in sim.services.values() for r in s.replicas if s.cfg.name == sim.target]


def _missing_slo(facts: RunFacts, rule: HarmRule, t: float) -> bool:
    att = facts.attainment(t - DEMAND_BEHIND_S, t)
    return att is not None and att < rule.objective


def _down_on_missing_data(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    windows = _missing_windows(sc)
    return sum(1 for c in _downs(facts) if c.errors or any(a <= c.time_s <= b for a, b in windows))


def _down_while_missing_slo(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    return sum(1 for c in _downs(facts) if _missing_slo(facts, rule, c.time_s))


def _overshoot(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    ups = [c for c in facts.changes if c.after_rps > c.before_rps]
    return sum(1 for c in ups if c.after_rps > max(facts.min_rps[c.group],
                                                   rule.factor * facts.demand(c.time_s, rule.lookahead_s)
                                                   + facts.one(c.group)))


def _killed_starting(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    return sum(1 for r in _replicas(facts)
               if r.removed_s is not None and r.removed_s < r.ready_s and _missing_slo(facts, rule, r.removed_s))


def _cut_generations(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    return facts.run.sim.cut_requests


def _held_pending(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    limit = rule.after_s if rule.after_s is not None else facts.run.sim.cfg.kubernetes.pending_timeout_s + 60.0
    return sum(1 for r in _replicas(facts)
               if min(x for x in (r.scheduled_s, r.removed_s, r.gone_s, facts.end_s) if x is not None)
               - r.created_s > limit)


def _held_idle(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    at = rule.after_s if rule.after_s is not None else facts.end_s
    alive = sum(1 for r in _replicas(facts) if r.created_s <= at and (r.removed_s is None or r.removed_s > at)
                and (r.gone_s is None or r.gone_s > at))
    need = 0
    for g in facts.groups:  # each group sized to the whole demand (module docstring)
        mins = [v.min_replicas for v in facts.svc.variants] if g == AGGREGATED else \
            [v.min_replicas for role, v in facts.svc.role_variants() if role == g]
        need += max(sum(mins), math.ceil(rule.factor * facts.demand(at, 0.0) / facts.one(g)) if facts.one(g) else 0)
    return max(0, alive - need)


def _flaps(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    n = 0
    for g in facts.groups:
        changes = [c for c in facts.changes if c.group == g]
        n += sum(1 for a, b in itertools.pairwise(changes)
                 if (a.after_rps > a.before_rps) != (b.after_rps > b.before_rps)
                 and b.time_s - a.time_s <= rule.window_s)
    return n


def pool_loss_windows(facts: RunFacts, sc: Scenario, limit_s: float) -> list[tuple[float, float]]:
    """(start, end) seconds of each pool loss (``down_while_pool_lost``): from a ``crash`` that takes a
    prefill or decode pool's replicas (its ``role``, its ``variant``'s pool, or every pool for a crash
    of every variant) to when that pool is back at its ready replicas just before, at most ``limit_s``.
    A pool the crash took no replica of opens no window: one with none ready just before, and one a crash
    of every variant (the oldest ready replicas first) or of one of its variants left whole.

    The replicas a crash took are those it retired at once, not removed by a scale-down (``removed_s``
    None, ``gone_s`` set), at the first such instant at or after its ``time_s`` (the injector applies it
    at the first sub-step there) and before the next crash's ``time_s``."""
    roles = {v.name: role for role, v in facts.svc.role_variants()}
    pools = sorted(set(roles.values()))
    crashes = sorted((f for f in sc.faults if isinstance(f, CrashFault)), key=lambda f: f.time_s)
    out = []
    for i, f in enumerate(crashes):
        until = crashes[i + 1].time_s if i + 1 < len(crashes) else math.inf
        retired = [r for r in _replicas(facts) if r.removed_s is None and r.gone_s is not None
                   and f.time_s <= r.gone_s < until]
        at = min((r.gone_s for r in retired), default=None)
        took = {r.role for r in retired if r.gone_s == at}
        lost: list[str]
        if f.role is not None:
            lost = [f.role]
        elif f.variant is not None:  # a pool variant's pool; an aggregated variant's crash loses no pool
            lost = [roles[f.variant]] if f.variant in roles else []
        else:
            lost = pools
        for role in lost:
            before = facts.ready_in(role, f.time_s - 1e-9)
            if before == 0 or role not in took:
                continue
            times = sorted({r.ready_s for r in _replicas(facts) if r.role == role and f.time_s < r.ready_s})
            back = next((t for t in times if facts.ready_in(role, t) >= before), math.inf)
            out.append((f.time_s, min(back, f.time_s + limit_s)))
    return out


def _down_while_pool_lost(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    windows = pool_loss_windows(facts, sc, rule.window_s)
    return sum(1 for c in _downs(facts) if any(a <= c.time_s <= b for a, b in windows))


def _down_on_link_slowdown(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    windows = [(f.start_s, f.end_s + DEMAND_BEHIND_S) for f in sc.faults if isinstance(f, LinkSlow)]
    # no arrivals when the slowdown began: nothing the link holds, so a scale-down answers the idle load
    return sum(1 for c in _downs(facts)
               if any(a <= c.time_s <= b and facts.recent_rate(a) > 0
                      and facts.recent_rate(c.time_s) >= LOAD_KEPT * facts.recent_rate(a)
                      for a, b in windows))


RULES: dict[str, Callable[[HarmRule, RunFacts, Scenario], int]] = {
    "down_on_missing_data": _down_on_missing_data,
    "down_while_missing_slo": _down_while_missing_slo,
    "overshoot": _overshoot,
    "killed_starting": _killed_starting,
    "cut_generations": _cut_generations,
    "held_pending": _held_pending,
    "held_idle": _held_idle,
    "flaps": _flaps,
    "down_while_pool_lost": _down_while_pool_lost,
    "down_on_link_slowdown": _down_on_link_slowdown,
}
"""The simulator layer's rules (module docstring); the live layer adds its own (``autoscaler.faults.live``)."""


def count(rule: HarmRule, facts: RunFacts, sc: Scenario) -> int:
    """The events ``rule`` counts in the run (module docstring).

    Raises:
        ValueError: a rule counted only in the live layer.
    """
    if rule.rule not in RULES:
        raise ValueError(f"{rule.rule}: counted only in the live layer")
    return int(RULES[rule.rule](rule, facts, sc))


def harm_counts(sc: Scenario, run: SimulationRun) -> dict[str, Any]:
    """rule name -> events it counts in ``run`` (every rule of the scenario)."""
    facts = RunFacts(run)
    return {rule.rule: int(count(rule, facts, sc)) for rule in sc.harm}
