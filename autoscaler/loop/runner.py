"""The control loop: observe -> estimate -> decide -> guard -> actuate, once per tick.

The same ``ControlLoop`` runs against the simulator, a live Prometheus (dry-run) and Kubernetes;
only the ``MetricsSource`` and ``Actuator`` differ.

A controller with ``own_guard = True`` (the anchors' baselines, ``controllers.baselines``) brings
its own stabilisation and rate limits, so it is measured with its rules alone: the loop calls it on
every tick (no warm-up hold, no idle-to-minimum rule) and only clamps its decision to each
variant's ``[min_replicas, min(max_replicas, quota)]``.

Fail-static: when any metric query failed this tick (``ServiceObservation.errors``), the loop holds
every variant at its current count (no scale-down on an outage read as idle), adds the failures to
``query_failures`` and logs them; rejected values (``ServiceEstimate.warnings``) are logged too.
When a variant's replica count is unknown (``VariantObservation.counts_known``), the loop holds the
service whatever the controller, before any other rule.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from autoscaler.config import FleetConfig, Service
from autoscaler.loop.actuate import Actuator
from autoscaler.loop.estimate import estimate
from autoscaler.loop.forecast import ForecastStage
from autoscaler.loop.guard import GuardState, guard
from autoscaler.loop.observe import MetricsSource
from autoscaler.loop.warmth import WarmthStage
from autoscaler.state import ServiceEstimate
from controllers.base import Controller, Decision
from controllers.split import cost_per_capacity
from models.capacity import variant_weights

log = logging.getLogger(__name__)


@dataclass
class ServiceTick:
    """What the loop saw and did for one service at one tick."""

    estimate: ServiceEstimate
    decision: Decision
    applied: dict[str, int]
    reason: str


@dataclass
class TickRecord:
    """One tick of the loop, all services."""

    time_s: float
    services: dict[str, ServiceTick] = field(default_factory=dict)


def bounds_only(decision: Decision, current: dict[str, int], svc: Service) -> dict[str, int]:
    """The decision clamped to each variant's bounds; the current replicas when it holds."""
    if decision.hold:
        return dict(current)
    return {v.name: min(max(decision.desired.get(v.name, current[v.name]), v.min_replicas), v.cap)
            for v in svc.variants}


class ControlLoop:
    """Runs one controller over every service of a fleet.

    Args:
        cfg: the fleet.
        source: where signals come from.
        actuator: where replica counts are read and set; None for dry-run (never actuates).
        controller: the policy.
    """

    def __init__(
        self, cfg: FleetConfig, source: MetricsSource, actuator: Actuator | None, controller: Controller
    ) -> None:
        self.cfg = cfg
        self.source = source
        self.actuator = actuator
        self.controller = controller
        self.weights = {s.name: variant_weights(s) for s in cfg.services}
        self.guards = {s.name: GuardState() for s in cfg.services}
        self.started_s = 0.0
        self.query_failures = {s.name: 0 for s in cfg.services}
        fc = cfg.controller.forecast
        self.forecasts = {s.name: ForecastStage(fc) for s in cfg.services} if fc.enabled else {}
        router = fc.router or cfg.simulator.router
        self.warmth = {s.name: WarmthStage(fc, s, router) for s in cfg.services} if fc.enabled else {}

    def start(self, now: float) -> None:
        """Mark the loop's start: it decides nothing until one signal window of data exists."""
        self.started_s = now

    def tick(self, now: float) -> TickRecord:
        """Run every stage once at time ``now`` (seconds) and return what happened."""
        record = TickRecord(time_s=now)
        observations = self.source.observe(now)
        ctrl = self.cfg.controller
        for svc in self.cfg.services:
            obs = observations[svc.name]
            est = estimate(obs, svc, self.weights[svc.name])
            if svc.name in self.forecasts:
                self.forecasts[svc.name].apply(est)
                self.warmth[svc.name].apply(est)
            if est.errors:
                self.query_failures[svc.name] += len(est.errors)
                log.warning("%s: %d metric queries failed, holding replicas; first: %s",
                            svc.name, len(est.errors), est.errors[0])
            for line in est.warnings:
                log.warning(line)
            gstate = self.guards[svc.name]
            gstate.idle_ticks = gstate.idle_ticks + 1 if est.idle else 0
            own_guard = getattr(self.controller, "own_guard", False)
            waiting = est.signals.get("queue_length") or 0.0
            unknown = [n for n, v in est.variants.items() if not v.counts_known]
            if unknown:  # never decide (nor scale from zero) on counts nobody knows
                why = f"replica count of {', '.join(unknown)} unknown"
                if est.errors:
                    why = f"{len(est.errors)} metric queries failed ({est.errors[0]}); {why}"
                decision = Decision(dict(est.current), f"hold: {why}", hold=True)
            elif own_guard:
                decision = self.controller.decide(est, svc, ctrl)
            elif est.capacity_rps == 0 and waiting > 0:
                decision = scale_from_zero(svc, self.weights[svc.name], waiting)
            elif now - self.started_s < ctrl.window_s:
                decision = Decision(dict(est.current), "warming up: less than one window of data", hold=True)
            elif est.errors:
                decision = Decision(dict(est.current), f"hold: {len(est.errors)} metric queries failed "
                                    f"({est.errors[0]})", hold=True)
            elif gstate.idle_ticks >= ctrl.guard.idle_ticks_to_min:
                decision = Decision({v.name: v.min_replicas for v in svc.variants},
                                    f"idle for {gstate.idle_ticks} ticks: toward minimum")
            else:
                decision = self.controller.decide(est, svc, ctrl)
            current = est.current
            if own_guard:
                applied, reason = bounds_only(decision, current, svc), decision.reason
            else:
                applied, reason = guard(decision, current, svc, ctrl.guard, gstate, now, self.weights[svc.name])
            feedback = getattr(self.controller, "guarded", None)
            if feedback is not None and not decision.hold and applied != decision.desired:
                feedback(svc.name, decision.desired, applied, self.weights[svc.name])
            if self.actuator is not None:
                for name, n in applied.items():
                    if n != current[name]:
                        self.actuator.scale(svc.name, name, n)
            record.services[svc.name] = ServiceTick(est, decision, applied, reason)
        return record


def scale_from_zero(svc: Service, weights: dict[str, float], waiting: float) -> Decision:
    """One replica of the variant with the lowest cost per capacity (and room): requests are waiting
    and no replica is ready or starting, so no latency signal can ever appear without one."""
    candidates = [v for v in svc.variants if v.cap > 0]
    v = min(candidates, key=lambda v: cost_per_capacity(v, weights[v.name]))
    desired = {x.name: 0 for x in svc.variants}
    desired[v.name] = max(1, v.min_replicas)
    return Decision(desired, f"scale from zero: {waiting:g} requests waiting and no replica")
