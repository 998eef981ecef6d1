"""The control loop: observe -> estimate -> decide -> guard -> actuate, once per tick.

The same ``ControlLoop`` runs against the simulator, a live Prometheus (dry-run) and Kubernetes;
only the ``MetricsSource`` and ``Actuator`` differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.config import FleetConfig
from autoscaler.loop.actuate import Actuator
from autoscaler.loop.estimate import ServiceEstimate, estimate
from autoscaler.loop.guard import GuardState, guard
from autoscaler.loop.observe import MetricsSource
from controllers.base import Controller, Decision
from models.capacity import variant_weights


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
            gstate = self.guards[svc.name]
            gstate.idle_ticks = gstate.idle_ticks + 1 if est.idle else 0
            if now - self.started_s < ctrl.window_s:
                decision = Decision(dict(est.current), "warming up: less than one window of data", hold=True)
            elif gstate.idle_ticks >= ctrl.guard.idle_ticks_to_min:
                decision = Decision({v.name: v.min_replicas for v in svc.variants},
                                    f"idle for {gstate.idle_ticks} ticks: toward minimum")
            else:
                decision = self.controller.decide(est, svc, ctrl)
            current = est.current
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
