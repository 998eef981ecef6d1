"""Injecting a scenario's simulator-layer faults into a ``SimulationDriver``.

- ``crash``: at the first sub-step at or after ``time_s``, the ``fraction`` of the target service's
  ready replicas (at least one; the oldest first) crash: of every variant, aggregated and
  prefill/decode pools alike, or of the fault's ``variant`` or ``role`` pool only; each is replaced,
  cold, as a ReplicaSet replaces a pod (``FleetSimulator.crash``).
- ``link_slowdown``: the service's KV-transfer link is slower inside the window
  (``FleetSimulator.slow_link``: a read starting then takes its bytes over the divided bandwidth,
  plus the extra latency).
- ``prometheus_down``: inside the window nothing is scraped (neither on the scrape grid nor by an
  observation, which scrapes a stale source first) and every observation carries a failed query and
  no signal, as the Prometheus source reports an unreachable server; replica counts stay known (the
  daemon reads them from the API server). So the samples have a gap, and for a window after it the
  rates are read over what was scraped since, as from a Prometheus that was down.
- ``pod_metrics_missing`` / ``new_pods_silent``: the pods concerned are not scraped
  (``SimMetricsSource.silent``); they go on serving.
"""

from __future__ import annotations

import dataclasses
import math

from autoscaler.adapters.simulator import SimMetricsSource
from autoscaler.config.simulator import LinkSlowdown
from autoscaler.faults.scenario import (
    CrashFault,
    LinkSlow,
    NewPodsSilent,
    PodMetricsMissing,
    PrometheusDown,
    Scenario,
)
from autoscaler.simulate import SimulationDriver
from autoscaler.simulator.disagg import PREFILL
from autoscaler.simulator.engine import Replica
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.state import ServiceObservation, Signals

UNREACHABLE = "prometheus unreachable (injected fault)"


class FaultySource:
    """A ``MetricsSource`` over a ``SimMetricsSource`` that fails inside the ``prometheus_down`` windows."""

    def __init__(self, inner: SimMetricsSource, down: list[PrometheusDown]) -> None:
        self.inner = inner
        self.down = down
        self.scrape_interval_s = inner.scrape_interval_s

    def _is_down(self, now: float) -> bool:
        return any(f.start_s <= now < f.end_s for f in self.down)

    def scrape(self, now: float) -> None:
        """Scrape unless Prometheus is down."""
        if not self._is_down(now):
            self.inner.scrape(now)

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        """The inner observation, or inside a window every signal unknown and a failed query."""
        if not self._is_down(now):
            return self.inner.observe(now)
        out = {}
        for name, obs in self.inner.observe(now, scrape=False).items():  # a Prometheus that is down scrapes nothing
            variants = {v: dataclasses.replace(o, signals=Signals()) for v, o in obs.variants.items()}
            out[name] = dataclasses.replace(obs, signals=Signals(), variants=variants, pods=[],
                                            errors=[UNREACHABLE])
        return out


class Injector:
    """Installs ``scenario``'s faults on ``driver``; pass ``on_step`` to ``driver.run``."""

    def __init__(self, scenario: Scenario, driver: SimulationDriver) -> None:
        self.driver = driver
        self.crashes = sorted((f for f in scenario.faults if isinstance(f, CrashFault)), key=lambda f: f.time_s)
        self.crashed: list[tuple[float, int, int]] = []  # (time, replicas crashed, requests failed)
        down = [f for f in scenario.faults if isinstance(f, PrometheusDown)]
        missing = [f for f in scenario.faults if isinstance(f, PodMetricsMissing)]
        silent_new = [f.delay_s for f in scenario.faults if isinstance(f, NewPodsSilent)]
        sim = driver.sim
        inner = driver.source
        for f in scenario.faults:
            if isinstance(f, LinkSlow):
                sim.slow_link(LinkSlowdown(service=sim.target, start_s=f.start_s, end_s=f.end_s,
                                           bandwidth_factor=f.bandwidth_factor, extra_latency_s=f.extra_latency_s))

        def silent(r: Replica, now: float) -> bool:
            if any(now < r.ready_s + d for d in silent_new):
                return True
            for f in missing:
                if f.start_s <= now < f.end_s:
                    ready = sorted((x for x in sim.services[r.service].replicas
                                    if x.variant == f.variant and x.ready_s <= f.start_s and x.gone_s is None),
                                   key=lambda x: x.ready_s)
                    if r in ready[: f.pods]:
                        return True
            return False

        inner.silent = silent
        if down:
            source = FaultySource(inner, down)
            driver.source = source  # type: ignore[assignment]
            driver.loop.source = source

    def on_step(self, now: float) -> None:
        """Apply the crashes due by ``now`` (seconds)."""
        sim = self.driver.sim
        while self.crashes and self.crashes[0].time_s <= now:
            fault = self.crashes.pop(0)
            victims = crash_victims(self.driver.sim, fault)
            failed = sum(sim.crash_replica(r) for r in victims)
            self.crashed.append((now, len(victims), failed))


def crash_victims(sim: FleetSimulator, fault: CrashFault) -> list[Replica]:
    """The replicas ``fault`` crashes now: ``ceil(fraction x n)`` (at least one) of the ``n`` ready
    replicas of the target service it names (every variant, its ``variant``, or its ``role`` pool), the
    oldest first; none when none is ready."""
    svc = sim.services[sim.target]
    if fault.role is not None:
        pool = svc.prefill_ready if fault.role == PREFILL else svc.decode_ready
    else:
        pool = svc.ready + svc.prefill_ready + svc.decode_ready
    ready = sorted((r for r in pool if fault.variant is None or r.variant == fault.variant), key=lambda r: r.ready_s)
    return ready[: max(1, math.ceil(fault.fraction * len(ready) - 1e-9))] if ready else []
