"""The control loop: observe -> estimate -> (forecast) -> decide -> guard -> actuate, once per tick.

The same ``ControlLoop`` runs against the simulator, a live Prometheus (dry-run) and Kubernetes;
only the ``MetricsSource``, the ``Actuator`` and the ``AdmissionSink`` differ.

A controller that brings its own guard (``Controller.own_guard``: the anchors' baselines, fixed
fleets) is measured with its rules alone: the loop calls it on every tick (no warm-up hold, no
idle-to-minimum rule, no cap on a variant whose pods cannot be placed) and only clamps its
decision to each variant's ``[min_replicas, min(max_replicas, quota)]``. When the guard (or a
failed write) changes what a controller asked for, the loop tells it through
``Controller.on_guard_cut``.

Actuation: each variant whose count changes is written through the actuator; the result is kept in
``ServiceTick.actuation``, failures are counted in ``actuation_errors`` (service, variant, status)
and logged, and a failed variant stays at its current count in ``ServiceTick.applied`` (the drained
pods its write named for removal back in routing: ``loop.drain.restore``, after the failures are counted;
so too where the write raised, for the variants whose write had not landed, ``_Staged.written``; an
uncordon that raises is counted, target ``uncordon``, and the pods not yet put back stay draining). Every
service is decided, guarded and drained first (in order: the controller's and guard's state), then
the services' writes run, ``writers`` services at once (``loop.fanout``; 1 by default, one after
another; the daemon's 8), each service's in order (its pools', then its variants'), then each
service's results are told to the controller (and the policy's thresholds set), in order, then the
services' thresholds are published, ``writers`` at once as the writes (each a ConfigMap write on
Kubernetes: a fleet's first publish, and each ``admission_heartbeat_s``, writes every service's, but
for ConfigMaps already holding the same content written less than the heartbeat ago). A decision
that raises (the controller's, or the loop's guard or drain of it: a bug), a write that raises (a bug,
not a refusal), or a service's results that raise when told or published, costs its own service alone
(a service whose decision raised writes nothing that tick, so is never scaled down by it): every other
service is decided, its writes are run and its results told, counted and published, then ``tick``
raises ``TickError``, which
carries the tick's record of those other services (``TickError.record``, so the daemon still writes
their Events) and each failed service's exception (``TickError.errors``), the first as its
``__cause__``. Admission:
an admission policy (``controllers.admission``), when the loop has one, sets the thresholds of every
decision that carries none; a decision's thresholds go to the admission sink, when there is one,
with the same accounting.

Fail-static: when any metric query failed this tick (``ServiceObservation.errors``), the loop holds
every variant at its current count (no scale-down on an outage read as idle), adds the failures to
``query_failures`` and logs them, one line per cause (``log_failures``: an outage is one line a tick,
not one per query); rejected values (``ServiceEstimate.warnings``) are logged too.
When a variant's replica count is unknown (``VariantObservation.counts_known``), the loop holds the
service whatever the controller, before any other rule.

Capacities: each tick the estimate counts replicas at the capacities of the mix the service serves
(``autoscaler.loop.mix``, ``controller.capacity_mix``), which the guard, the controller and
``on_guard_cut`` read too.

Prefill/decode pools (``Service.roles``): a controller that does not scale them
(``Controller.scales_roles`` False) leaves them where they are, and a service of pools only is held
whole (reason ``fixed``), as before pools could be scaled. For one that does, the estimate carries each
pool's observation and one replica's capacity per pool variant (``ServiceEstimate.pools``,
``pool_weights``: ``controllers.roles.role_weights`` for the mix the decode pool serves, learnt as the
aggregated capacities are, ``autoscaler.loop.mix``);
the loop's own rules read the pools too (unknown pool counts hold the service; idle for the configured
ticks takes each pool toward its minimum, unless the controller's plan still serves with both pools:
``idle_pools``; a replica of a pool counts as one up, so no aggregated variant is scaled from zero while
the pools serve, and a service of pools only, none up while requests wait, gets one replica of each
pool's cheapest variant per capacity, ``scale_pools_from_zero``); each pool is guarded
as a service of its own
(``controllers.roles.pool_service``: its bounds, ``max_step_up`` / ``max_step_down`` and the cool-down,
with its own guard memory, or only its bounds for a controller with its own guard), and each pool
variant whose count changes is written through the actuator as its own scale target (the simulator's
pool, or on Kubernetes the pool variant's own workload, ``kubernetes.workloads``). What it got is
``ServiceTick.pool_applied``; a scale-down of a pool is not drained first (the simulator keeps a
draining decode replica until the KV it holds for a hand-over is read).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from functools import partial

from autoscaler.config import FleetConfig, Service
from autoscaler.loop.actuate import ActuationResult, ActuationStatus, Actuator, AdmissionSink, Drainer
from autoscaler.loop.drain import DrainState, drain, restore
from autoscaler.loop.estimate import ArrivalInference, estimate
from autoscaler.loop.fanout import run_all
from autoscaler.loop.forecast import ForecastStage
from autoscaler.loop.guard import Guarded, GuardState, clamp, guard
from autoscaler.loop.mix import MixTracker
from autoscaler.loop.observe import MetricsSource
from autoscaler.loop.warmth import WarmthStage
from autoscaler.state import ServiceEstimate, ServiceObservation
from controllers.admission import AdmissionPolicy
from controllers.base import Controller, Decision, Reason, hold
from controllers.roles import ROLES, pool_service, role_weights
from controllers.split import cost_per_capacity

log = logging.getLogger(__name__)

QUEUE_UNKNOWN_AT_ZERO = "no replica up and the queue unknown: not scaled from zero on the loop's rule"
"""The words a decision adds where no replica is up and the service's queue is unknown: the loop's scale
from zero (``scale_from_zero``) sizes from requests seen waiting, and an unknown queue is not "none
waiting" (it was read as 0 before, silently). Not a hold either: the controller still decides on what it
knows (the MPC on a gateway's arrival counter), since holding at zero would keep a fleet down while
requests arrive; where the controller cannot decide at zero (a signal-unknown hold: the PID, no replica
and so no latency) while the arrivals are known and above 0, the loop's rule wakes one replica on them.
The simulator's queue is always known; a Prometheus source's is unknown at zero replicas where no
gateway queue is scraped (``autoscaler.adapters.prometheus``)."""


@dataclass
class ServiceTick:
    """What the loop saw and did for one service at one tick.

    Attributes:
        estimate: the estimate the controller read.
        decision: what the controller asked for.
        applied: replicas per variant after the guard and the writes (a failed write keeps the
            variant at its current count); what a dry-run would set.
        reason: the decision's reason and the guard's notes.
        limits: the guard's cuts, named.
        actuation: variant -> result of its write (only variants whose count changed).
        admission: result of publishing the decision's admission thresholds (None when none were set
            or there is no sink).
        pool_applied: replicas per pool variant after the guard and the writes, for a controller that
            scales roles (``Controller.scales_roles``); empty otherwise. Their writes' results are in
            ``actuation`` beside the variants'.
    """

    estimate: ServiceEstimate
    decision: Decision
    applied: dict[str, int]
    reason: str
    limits: list[Reason] = field(default_factory=list)
    actuation: dict[str, ActuationResult] = field(default_factory=dict)
    admission: ActuationResult | None = None
    pool_applied: dict[str, int] = field(default_factory=dict)


@dataclass
class TickRecord:
    """One tick of the loop, all services."""

    time_s: float
    services: dict[str, ServiceTick] = field(default_factory=dict)
    unwritten: dict[str, list[str]] = field(default_factory=dict)
    """service -> the variants (and pool variants) whose writes were due when its writes raised
    (``TickError``) and did not come back: each counted as an ``error`` write, and not able to scale
    (``LoopMetrics``)."""
    written: dict[str, dict[str, ActuationResult]] = field(default_factory=dict)
    """service -> the results of the writes that came back before its writes raised (``_Staged.written``:
    applied or refused, each counted by its own result), which ``LoopMetrics`` reads as a service's
    ``ServiceTick.actuation``."""


class TickError(Exception):
    """A tick whose decision (with its guard and drain) of one service or more raised, or whose scale write
    raised (a bug, not a refusal: a refusal is an ``ActuationResult``), or whose results raised when told
    to the controller or published; raised by ``ControlLoop.tick`` once every other service is decided,
    its writes have run and its results are told. A service whose decision raised writes nothing that tick.

    Attributes:
        record: the tick's record of the services whose decision and writes did not raise, their results
            told, counted and published as on a tick that succeeds; a failed service is not in it.
        errors: service -> the exception its decision, writes or results raised, in the fleet's order (never
            empty); the
            first is also this exception's ``__cause__``.
    """

    def __init__(self, record: TickRecord, errors: dict[str, Exception]) -> None:
        self.record = record
        self.errors = errors
        causes = "; ".join(f"{name}: {type(exc).__name__}: {exc}" for name, exc in errors.items())
        super().__init__(f"{len(errors)} service(s) raised in their decision, scale writes or results at "
                         f"t={record.time_s:g} s ({causes})")


class ControlLoop:
    """Runs one controller over every service of a fleet.

    Args:
        cfg: the fleet.
        source: where signals come from.
        actuator: where replica counts are set; None for dry-run (never actuates).
        controller: the policy (``controllers.registry.build``).
        admission: where admission thresholds go; None when nothing consumes them.
        policy: the admission policy; None: only the controller's own thresholds, if any.
        idle_first_removal: on a scale-down the controller names no pods for, name them idle first
            (``idle_first``; the daemon sets it, the simulator has its own rule, the same one).
        drainer: takes pods out of routing so a scale-down removes them once they hold nothing
            (``autoscaler.loop.drain``; not for a controller with its own guard, measured as its
            users run it); None: pods are removed at once.
    """

    def __init__(self, cfg: FleetConfig, source: MetricsSource, actuator: Actuator | None, controller: Controller,
                 admission: AdmissionSink | None = None, policy: AdmissionPolicy | None = None,
                 idle_first_removal: bool = False, drainer: Drainer | None = None, writers: int = 1) -> None:
        self.cfg = cfg
        self.writers = writers
        self.drainer = drainer
        self.drains = {s.name: DrainState() for s in cfg.services}
        self.idle_first_removal = idle_first_removal
        self.source = source
        self.actuator = actuator
        self.controller = controller
        self.admission = admission
        self.policy = policy
        controller.on_admission(policy is not None)
        observed = cfg.controller.capacity_mix == "observed"
        self.mixes = {s.name: MixTracker(s, cfg.planning_engine(), cfg.controller.window_s, observed)
                      for s in cfg.services}
        self.weights = {s.name: self.mixes[s.name].weights for s in cfg.services}
        self.guards = {s.name: GuardState() for s in cfg.services}
        roles = controller.scales_roles
        self.pool_guards = {(s.name, r): GuardState() for s in cfg.services if roles and s.roles for r in ROLES}
        self.pool_mixes = {s.name: MixTracker(s, cfg.planning_engine(), cfg.controller.window_s, observed,
                                              weigh=role_weights, sizes=True)
                           for s in cfg.services if roles and s.roles}
        # the growth over the span the source reads the completions' rate over (the controller's window)
        self.arrivals = {s.name: ArrivalInference(controller.window_s) for s in cfg.services}
        self.started_s = 0.0
        self.query_failures = {s.name: 0 for s in cfg.services}
        self.actuation_errors: dict[tuple[str, str, ActuationStatus], int] = {}
        fc = cfg.controller.forecast
        wanted = fc.enabled or controller.forecast_horizon_s is not None
        self.forecasts = {s.name: ForecastStage(fc, controller.forecast_horizon_s, controller.forecast_model,
                                                  controller.forecast_demand, s.max_model_len,
                                                  controller.forecast_smooth_s)
                          for s in cfg.services} if wanted else {}
        router = fc.router or cfg.simulator.router
        self.warmth = {s.name: WarmthStage(fc, s, router) for s in cfg.services} if wanted else {}

    def start(self, now: float) -> None:
        """Mark the loop's start: it decides nothing until one signal window of data exists."""
        self.started_s = now

    def _decide(self, svc: Service, est: ServiceEstimate, now: float) -> Decision:
        """The decision for one service: the loop's own rules first, then the controller's."""
        ctrl = self.controller
        waiting = est.signals.queue_length  # None: unknown, never read as nothing waiting
        unknown = [n for n, v in est.variants.items() if not v.counts_known]
        unknown += [n for pool in est.pools.values() for n, v in pool.variants.items() if not v.counts_known]
        if unknown:  # never decide (nor scale from zero) on counts nobody knows
            why = f"replica count of {', '.join(unknown)} unknown"
            if est.errors:
                why = f"{len(est.errors)} metric queries failed ({est.errors[0]}); {why}"
            return hold(est.current, f"hold: {why}", Reason.COUNTS_UNKNOWN)
        if not svc.variants and not ctrl.scales_roles:  # prefill/decode pools only (``Service.roles``)
            return hold(est.current, "hold: no aggregated variant, and this controller does not scale the "
                        "prefill/decode pools", Reason.FIXED)
        if ctrl.own_guard:
            return ctrl.decide(est, svc)
        nothing_up = sum(est.current.values()) + sum(est.pool_current.values()) == 0
        if nothing_up and waiting is not None and waiting > 0:
            woken = self._wake(svc, est, f"{waiting:g} requests waiting")
            if woken is not None:
                return woken
        decision = self._decide_rest(svc, est, now)
        if nothing_up and waiting is None:  # the rule above cannot size from it; the controller may (arrivals)
            arriving = est.signals.arrival_rate_rps
            if (arriving is not None and arriving > 0 and decision.hold and decision.code is Reason.SIGNAL_UNKNOWN
                    and not any(decision.desired.values())):
                # the controller could not decide at zero (the PID: no replica, no latency) while requests
                # arrive: without a replica no signal ever appears, so the loop's rule wakes one. A zero
                # the controller planned (the MPC's, not a hold) stands: waking it would flap.
                woken = self._wake(svc, est, f"{arriving:g} req/s arriving, the queue unknown")
                if woken is not None:
                    return woken
            decision = replace(decision, reason=f"{decision.reason}; {QUEUE_UNKNOWN_AT_ZERO}")
        return decision

    def _wake(self, svc: Service, est: ServiceEstimate, why: str) -> Decision | None:
        """The loop's scale from zero for ``svc`` (``scale_from_zero`` or, pools only,
        ``scale_pools_from_zero``); None where nothing that could serve has room (every variant, or one
        role's every variant, capped at 0: e.g. marked unavailable with none ready, ``available``)."""
        if svc.variants:
            return scale_from_zero(svc, self.weights[svc.name], why)
        return scale_pools_from_zero(svc, est.pool_weights, why)

    def _decide_rest(self, svc: Service, est: ServiceEstimate, now: float) -> Decision:
        """``_decide``'s rules after the scale from zero: warm-up, failed queries, idle to minimum, then
        the controller."""
        gstate = self.guards[svc.name]
        ctrl = self.controller
        if now - self.started_s < ctrl.window_s:
            return hold(est.current, "warming up: less than one window of data", Reason.WARMING_UP)
        if est.history_s is not None and est.history_s < ctrl.window_s - ctrl.tick_s:
            return hold(est.current, f"warming up: the source holds {est.history_s:.0f} s of the {ctrl.window_s:g}-s "
                        "window", Reason.WARMING_UP)
        if est.errors:
            return hold(est.current, f"hold: {len(est.errors)} metric queries failed ({est.errors[0]})",
                        Reason.METRICS_ERROR)
        if gstate.idle_ticks >= self.cfg.controller.guard.idle_ticks_to_min:
            desired = {v.name: v.min_replicas for v in svc.variants}
            why = f"idle for {gstate.idle_ticks} ticks: toward minimum"
            if ctrl.scales_roles and svc.roles is not None:
                pools, kept = idle_pools(svc, est, ctrl.decide(est, svc))
                desired.update(pools)
                why += "; the pools kept at the controller's plan, which serves with both" if kept else ""
            return Decision(desired, why, Reason.IDLE_TO_MIN)
        return ctrl.decide(est, svc)

    def _guard_pools(self, svc: Service, decision: Decision, est: ServiceEstimate, now: float) -> Guarded:
        """Each pool of ``svc`` guarded as a service of its own (module docstring): pool variant -> replicas,
        the notes and the cuts; nothing for a controller that does not scale roles or a service without."""
        out = Guarded({}, "", [])
        if not self.controller.scales_roles or svc.roles is None:
            return out
        notes: list[str] = []
        weights = est.pool_weights
        for role in ROLES:
            if role not in est.pools:  # a source that does not observe the pools: nothing is written
                continue
            pool = pool_service(svc, role)
            current = {v.name: est.pools[role].variants[v.name].current for v in pool.variants}
            mine = Decision({v: n for v, n in decision.desired.items() if v in current}, "", decision.code,
                            hold=decision.hold)
            if self.controller.own_guard:
                g = clamp(mine, current, pool)
            else:
                g = guard(mine, current, pool, self.cfg.controller.guard, self.pool_guards[(svc.name, role)], now,
                          weights)
            out.replicas.update(g.replicas)
            notes += [f"{role}: {n}" for n in g.reason.split("; ")[1:]]
            out.limits += g.limits
        out.reason = "; ".join(notes)
        return out

    def _scale(self, svc: Service, current: dict[str, int], guarded: Guarded,
               remove_first: dict[str, list[str]], done: dict[str, ActuationResult]) -> dict[str, ActuationResult]:
        """Write every changed variant, in order; variant -> result. Each result is also put in ``done``
        (the service's own ``_Staged.written``) as it comes, so a later write that raises leaves known which
        landed. Only the actuator's calls and the service's own ``done``: the services' run side by side
        (``writers``), so nothing of the loop's is changed here."""
        results: dict[str, ActuationResult] = {}
        if self.actuator is None:
            return results
        for name, n in guarded.replicas.items():
            if n != current[name]:
                results[name] = done[name] = self.actuator.scale(
                    svc.name, name, n, remove_first.get(name, ()) if n < current[name] else ())
        return results

    def _applied(self, svc: Service, current: dict[str, int], guarded: Guarded,
                 results: dict[str, ActuationResult]) -> dict[str, int]:
        """The replicas the fleet now has asked for: the guarded counts, a failed write's variant at its
        current count (the failure counted)."""
        applied = dict(guarded.replicas)
        for name, res in results.items():
            if not res.ok:
                applied[name] = current[name]
                self._count(svc.name, name, res)
        return applied

    def _count(self, service: str, target: str, res: ActuationResult) -> None:
        key = (service, target, res.status)
        self.actuation_errors[key] = self.actuation_errors.get(key, 0) + 1
        log.warning("%s/%s: write %s: %s", service, target, res.status.value, res.message or "-")

    def tick(self, now: float) -> TickRecord:
        """Run every stage once at time ``now`` (seconds) and return what happened: observe, estimate
        each service (``_estimate``), let the controller see them all, then decide, guard, drain,
        actuate and publish per service (``_act``).

        Raises:
            TickError: a service's decision (with its guard and drain), scale write or results raised; it
                carries the record of the others (the class).
        """
        record = TickRecord(time_s=now)
        observations = self.source.observe(now)
        estimates = {svc.name: self._estimate(svc, observations[svc.name], now) for svc in self.cfg.services}
        self.controller.prepare(estimates)
        own = self.controller.own_guard
        decided: list[_Staged] = []
        raised: dict[str, Exception] = {}
        for svc in self.cfg.services:
            try:
                decided.append(self._stage(svc if own else available(svc, estimates[svc.name]), estimates[svc.name],
                                           now))
            except Exception as failed:  # a bug in one service's decision (or its guard) costs that service
                # alone: nothing of it is written this tick (no action, so never a scale-down), the others
                # are decided and written, then the tick raises naming it, as for a write that raised
                raised[svc.name] = failed
        if raised and self.controller.plans_jointly:  # one plan for all (shared GPU quotas, a budget): the
            # others' parts assume the failed one's, so writing them could pass the shared limit; none is
            # written, and no pod is cordoned (the drains below have not run)
            raise TickError(record, {s.name: raised[s.name] for s in self.cfg.services if s.name in raised}
                            ) from next(iter(raised.values()))
        staged: list[_Staged] = []
        for st in decided:
            try:
                staged.append(self._drain_stage(st, now))
            except Exception as failed:  # the drain's bug, likewise this service's alone
                raised[st.svc.name] = failed
                self._restore_quietly(st.svc)  # nothing of it is written: no pod it named stays out of routing
        written = run_all([partial(self._write, st) for st in staged], self.writers, "scale")
        acted: list[tuple[_Staged, ServiceTick]] = []
        for st, (results, exc) in zip(staged, written, strict=True):
            if results is None:  # a write raised (a bug, not a refusal): the other services' writes landed, so
                # their results are still told, counted and published; then the tick fails, naming each
                assert exc is not None
                raised[st.svc.name] = exc
                # counted as failed writes, so the failure alerts as a refused write does (the tick is still
                # recorded, so the loop does not read as stalled)
                # writes that came back before the raise (``_Staged.written``) stand: one that landed is
                # neither counted nor unwritten, and its pods named for removal stay out of routing
                got = st.written
                due = [v for v, n in st.guarded.replicas.items() if n != st.est.current.get(v)]
                due += [v for v, n in st.pools.replicas.items() if n != st.est.pool_current.get(v)]
                record.unwritten[st.svc.name] = [v for v in due if v not in got]
                record.written[st.svc.name] = {v: got[v] for v in due if v in got}
                for v in due:
                    if v not in got:
                        self._count(st.svc.name, v, _raised(exc))
                    elif not got[v].ok:
                        self._count(st.svc.name, v, got[v])
                # the others read as not landed: the pods named for removal back in routing
                self._restore_quietly(st.svc, {v for v, r in got.items() if r.ok})
                continue
            try:
                acted.append((st, self._act(st, results)))
            except Exception as failed:  # telling or publishing one service (a bug) must not cost the
                # services after it, whose writes landed too, their results
                raised[st.svc.name] = failed
        published = run_all([partial(self._send, st.svc, st.decision) for st, _ in acted], self.writers, "admission")
        for (st, done), (admission, exc) in zip(acted, published, strict=True):
            if exc is not None:
                self._count(st.svc.name, "admission", _raised(exc))
                raised[st.svc.name] = exc
                continue
            if admission is not None and not admission.ok:
                self._count(st.svc.name, "admission", admission)
            done.admission = admission
            record.services[st.svc.name] = done
        if raised:
            raised = {s.name: raised[s.name] for s in self.cfg.services if s.name in raised}  # the fleet's order
            raise TickError(record, raised) from next(iter(raised.values()))
        return record

    def _estimate(self, svc: Service, obs: ServiceObservation, now: float) -> ServiceEstimate:
        """The estimate stages of one service (estimate, arrivals, forecast, warmth), counting failed
        queries and the idle ticks."""
        self.weights[svc.name] = self.mixes[svc.name].update(obs.signals, now)
        est = estimate(obs, svc, self.weights[svc.name])
        if svc.name in self.pool_mixes:
            tracker = self.pool_mixes[svc.name]
            decode = obs.pools.get("decode")
            weights = tracker.weights if decode is None else tracker.update(decode.signals, now)
            est = replace(est, pool_weights=weights)
        elif est.pools:  # a controller that does not scale the pools is shown none of them
            est = replace(est, pools={})
        est = self.arrivals[svc.name].apply(est)
        if svc.name in self.forecasts:
            est = self.forecasts[svc.name].apply(est, self.controller.window_s - self.controller.tick_s)
            est = self.warmth[svc.name].apply(est)
        if est.errors:
            self.query_failures[svc.name] += len(est.errors)
        log_failures(svc.name, est.errors, obs.failed_optional)
        for line in est.warnings:
            log.warning(line)
        gstate = self.guards[svc.name]
        gstate.idle_ticks = gstate.idle_ticks + 1 if est.idle else 0
        return est

    def _stage(self, svc: Service, est: ServiceEstimate, now: float) -> _Staged:
        """Decide and guard one service (its variants', then its pools'): what its writes will be, before
        the drain (``_drain_stage``), whose cordon is the stage's one call out."""
        decision = self._decide(svc, est, now)
        current = est.current
        if self.controller.own_guard:
            guarded = clamp(decision, current, svc)
        else:
            guarded = guard(decision, current, svc, self.cfg.controller.guard, self.guards[svc.name], now,
                            self.weights[svc.name])
        remove_first = decision.remove_first
        if not remove_first and self.idle_first_removal:
            remove_first = idle_first(est, guarded.replicas)
        return _Staged(svc, est, decision, guarded, remove_first, {}, self._guard_pools(svc, decision, est, now))

    def _drain_stage(self, st: _Staged, now: float) -> _Staged:
        """``st`` after its drain (``_drain``): the pods cordoned before a scale-down, the counts it holds."""
        guarded, remove_first, draining = self._drain(st.svc, st.est, st.guarded, st.remove_first, now)
        return replace(st, guarded=guarded, remove_first=remove_first, draining=draining)

    def _write(self, st: _Staged) -> tuple[dict[str, ActuationResult], dict[str, ActuationResult]]:
        """One service's scale writes, in order: its pools', then its variants' (results of each). The
        services' run side by side, ``writers`` at once (``loop.fanout``)."""
        pools = (self._scale(st.svc, st.est.pool_current, st.pools, st.remove_first, st.written)
                 if st.pools.replicas else {})
        return self._scale(st.svc, st.est.current, st.guarded, st.remove_first, st.written), pools

    def _act(self, st: _Staged, written: tuple[dict[str, ActuationResult], dict[str, ActuationResult]]
             ) -> ServiceTick:
        """What one service's writes got, told to the controller; its admission thresholds published."""
        svc, est, decision, guarded, draining, pools = st.svc, st.est, st.decision, st.guarded, st.draining, st.pools
        current = est.current
        results = dict(written[0])
        applied = self._applied(svc, current, guarded, results)  # the refusals counted before the restore
        back = self._restore_quietly(svc, {v for v, r in results.items() if r.ok})
        # a drain in progress is the scale-down under way, not a cut the controller must track
        told = {v: draining.get(v, n) if v not in results or results[v].ok else n for v, n in applied.items()}
        pool_applied: dict[str, int] = {}
        if pools.replicas:
            pool_current = est.pool_current
            pool_applied = self._applied(svc, pool_current, pools, written[1])
            results.update(written[1])
            told.update(pool_applied)
            if pools.reason:
                guarded = Guarded(guarded.replicas, f"{guarded.reason}; {pools.reason}", guarded.limits + pools.limits)
        if not decision.hold and told != decision.desired:
            weights = {**self.weights[svc.name], **est.pool_weights}
            self.controller.on_guard_cut(svc.name, decision.desired, told, weights)
        try:
            self._thresholds(svc, est, decision)
        except Exception as exc:
            self._count(svc.name, "admission", _raised(exc))
            raise
        reason = guarded.reason
        if back is None:
            reason += "; putting drained pods back in routing raised: those not put back stay draining"
        elif back:
            reason += f"; {len(back)} drained pod(s) back in routing: their removal was not written"
        unchanged = applied == current and pool_applied == est.pool_current
        if unchanged and decision.code in (Reason.SCALE_UP, Reason.SCALE_DOWN):
            reason = f"no change: {reason}"  # asked for, but cut by the guard or a failed write
        return ServiceTick(est, decision, applied, reason, guarded.limits, results, None, pool_applied)

    def _drain(self, svc: Service, est: ServiceEstimate, guarded: Guarded, remove_first: dict[str, list[str]],
               now: float) -> tuple[Guarded, dict[str, list[str]], dict[str, int]]:
        """The guarded counts with scale-downs held while their pods drain (``loop.drain``), the removal
        order, and variant -> the count a drain in progress will reach; unchanged without a drainer."""
        timeout = self.cfg.controller.guard.drain_timeout_s
        if self.drainer is None or timeout <= 0 or self.controller.own_guard:
            return guarded, remove_first, {}
        order = remove_first or idle_first(est, guarded.replicas)
        replicas, remove_first, notes = drain(self.drainer, self.drains[svc.name], est, guarded.replicas,
                                              order, timeout, now)
        draining = {v: n for v, n in guarded.replicas.items() if replicas[v] != n}
        return Guarded(replicas, "; ".join([guarded.reason, *notes]), guarded.limits), remove_first, draining

    def _restore(self, svc: Service, landed: Collection[str]) -> list[str]:
        """The pods this tick's drain named for removal whose variant's write did not land (not in
        ``landed``), put back in routing (``loop.drain.restore``); none without a drainer."""
        if self.drainer is None:
            return []
        return restore(self.drainer, self.drains[svc.name], svc.name, landed)

    def _restore_quietly(self, svc: Service, landed: Collection[str] = ()) -> list[str] | None:
        """``_restore``, the pods put back in routing; None where the uncordon raised: it is logged and
        counted as a failed write of target ``uncordon`` (``actuation_errors``), the pods not yet put back
        stay tracked as draining (``loop.drain.restore``), and the tick goes on (where the service's drain
        or writes raised, that first exception stands). ``landed``: the variants whose write is known to
        have landed (none where the drain raised)."""
        try:
            return self._restore(svc, landed)
        except Exception as exc:
            log.exception("%s: putting the drained pods back in routing raised", svc.name)
            self._count(svc.name, UNCORDON, _raised(exc))
            return None

    def _thresholds(self, svc: Service, est: ServiceEstimate, decision: Decision) -> None:
        """The policy's admission thresholds set on a decision that carries none (``tick``: in the
        fleet's order, in the tick's thread, as the controller's own state is)."""
        if self.policy is not None and not decision.admission:
            decision.admission = self.policy.thresholds(est, svc)

    def _send(self, svc: Service, decision: Decision) -> ActuationResult | None:
        """The decision's admission thresholds and ITL budget written to the sink; None when there are
        neither or no sink. The services' run side by side, ``writers`` at once (``tick``): only the
        sink's call, nothing of the loop's is changed here."""
        if not (decision.admission or decision.itl_budget) or self.admission is None:
            return None
        return self.admission.publish(svc.name, decision.admission, decision.itl_budget)


UNCORDON = "uncordon"
"""``actuation_errors``' target for putting drained pods back in routing (``_restore_quietly``)."""


def _raised(exc: Exception) -> ActuationResult:
    """The result a write (or a publish) that raised ``exc`` is counted as: ``error``."""
    return ActuationResult(ActuationStatus.ERROR, f"raised {type(exc).__name__}: {exc}")


@dataclass
class _Staged:
    """One service between its decision and its writes (``ControlLoop._stage``)."""

    svc: Service
    est: ServiceEstimate
    decision: Decision
    guarded: Guarded
    remove_first: dict[str, list[str]]
    draining: dict[str, int]  # variant -> the count a drain in progress will reach
    pools: Guarded
    written: dict[str, ActuationResult] = field(default_factory=dict)
    """variant or pool variant -> its write's result, as each comes back (``_scale``)."""


def idle_first(est: ServiceEstimate, desired: dict[str, int]) -> dict[str, list[str]]:
    """variant -> its ready pods, fewest requests in flight (running + waiting) first, for the
    variants that shrink: the removal order of controllers that name none (the MPC names its own,
    coldest cache first), so a scale-down cuts the fewest generations."""
    out: dict[str, list[str]] = {}
    for v, n in desired.items():
        if v in est.variants and n < est.variants[v].current:
            pods = [p for p in est.pods if p.variant == v and p.name]
            out[v] = [p.name for p in sorted(pods, key=lambda p: (p.running + p.waiting, p.name))]
    return out


def available(svc: Service, est: ServiceEstimate) -> Service:
    """``svc`` as the controller and the guard see it this tick: a variant the source marks
    ``unavailable`` (its pods cannot be placed) capped at its ready replicas, so demand goes to the
    other variants and its Pending pods are given up; ``svc`` itself when none is."""
    marked = {name for name, obs in est.variants.items() if obs.unavailable}
    if not marked:
        return svc
    variants = [v.model_copy(update={"max_replicas": min(v.max_replicas, est.variants[v.name].ready),
                                     "min_replicas": min(v.min_replicas, est.variants[v.name].ready)})
                if v.name in marked else v for v in svc.variants]
    return svc.model_copy(update={"variants": variants})


def scale_from_zero(svc: Service, weights: dict[str, float], why: str) -> Decision | None:
    """One replica of the variant with the lowest cost per capacity (and room): requests are waiting
    (or arriving, the queue unknown) and no replica is ready or starting, so no latency signal can ever
    appear without one. ``why``: what was seen, e.g. "4 requests waiting". None where no variant has
    room (each capped at 0: marked unavailable with none ready, ``available``)."""
    candidates = [v for v in svc.variants if v.cap > 0]
    if not candidates:
        return None
    v = min(candidates, key=lambda v: cost_per_capacity(v, weights[v.name]))
    desired = {x.name: 0 for x in svc.variants}
    desired[v.name] = max(1, v.min_replicas)
    return Decision(desired, f"scale from zero: {why} and no replica", Reason.SCALE_FROM_ZERO)


def scale_pools_from_zero(svc: Service, weights: dict[str, float], why: str) -> Decision | None:
    """A service of prefill/decode pools only, none of whose replicas is ready or starting, while
    requests wait: one replica of each pool's variant with the lowest cost per capacity (and room),
    since one live role cannot serve alone (Kthena's ratio rule, ``controllers.roles``). None where a
    pool's variants all have a cap of 0 (the other role woken alone could serve nothing). ``weights``:
    pool variant -> one replica's capacity (``ServiceEstimate.pool_weights``; 1.0 where missing)."""
    desired: dict[str, int] = {}
    for role in ROLES:
        pool = pool_service(svc, role).variants
        desired.update({v.name: 0 for v in pool})
        candidates = [v for v in pool if v.cap > 0]
        if not candidates:
            return None
        v = min(candidates, key=lambda v: cost_per_capacity(v, weights.get(v.name, 1.0)))
        desired[v.name] = max(1, v.min_replicas)
    return Decision(desired, f"scale from zero: {why} and no prefill/decode replica",
                    Reason.SCALE_FROM_ZERO)


def cause(line: str) -> str:
    """The cause of a failed query's line ``WHAT: CAUSE`` (the whole line when it has no ``: ``)."""
    return line.partition(": ")[2] or line


def log_failures(service: str, errors: list[str], optional: list[str]) -> None:
    """One WARNING per cause of this tick's failed queries of ``service`` (an outage fails every query
    for one reason): how many failed, needed ones (``errors``: the loop holds) and ``optional`` ones,
    the first one's line; as fields too (``autoscaler.logs``)."""
    by_cause: dict[str, tuple[list[str], list[str]]] = {}
    for lines, i in ((errors, 0), (optional, 1)):
        for line in lines:
            by_cause.setdefault(cause(line), ([], []))[i].append(line)
    for why, (needed, other) in by_cause.items():
        first = (needed or other)[0]
        extra = {"service": service, "cause": why, "failed": len(needed), "failed_optional": len(other),
                 "first": first}
        if needed:
            log.warning("%s: %d metric queries failed, holding replicas", service, len(needed) + len(other),
                        extra=extra)
        else:
            log.warning("%s: %d optional metric queries failed, their signals unknown", service, len(other),
                        extra=extra)


def idle_pools(svc: Service, est: ServiceEstimate, planned: Decision) -> tuple[dict[str, int], bool]:
    """The prefill/decode pools' targets under the idle-to-minimum rule: pool variant -> replicas, and
    whether the controller's plan kept them.

    Each pool goes toward its minimum, as an aggregated variant does, unless the controller's own
    decision this tick (``planned``, not a hold) still serves with both pools (each pool's replicas
    summed > 0): then no pool variant goes below ``min(current, planned)``. A P/D pair serves only
    whole, and the pools the plan serves with are the service's capacity for the next burst: an idle
    gap shorter than the controller's own memory of the load (the MPC's 300-s hold) must not take
    the only decode replica away (issue 34: Azure code x20 lost its decode pool 30 s before a 571
    req/s burst, and 20 points of interactive attainment with it). The idle rule never scales a pool up.
    """
    floors = {v.name: v.min_replicas for _, v in svc.role_variants()}
    if planned.hold:
        return floors, False
    want = {v.name: planned.desired.get(v.name, est.pool_current.get(v.name, 0)) for _, v in svc.role_variants()}
    if not all(sum(want[v.name] for r, v in svc.role_variants() if r == role) > 0 for role in ROLES):
        return floors, False
    return {name: max(floor, min(est.pool_current.get(name, 0), want[name])) for name, floor in floors.items()}, True
