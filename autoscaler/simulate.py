"""Run the control loop against the embedded fleet simulator on a workload.

``SimulationDriver`` wires the simulator adapters into ``ControlLoop`` and steps them until every
request has ended: flat out for ``autoscaler simulate`` and ``compare`` (``run_simulation``), or paced
at a speed for a served simulation (``autoscaler.realtime``), with the same stepping either way.

The loop ticks at the controller's own period (``Controller.tick_s``, e.g. Knative's 2 s or
Dynamo's 180 s) with its signal window (``Controller.window_s``). The metrics source samples every
pod at multiples of ``simulator.scrape_interval_s`` (15 s by default, Prometheus's usual interval),
or of the tick of a controller that ticks faster (its anchor reads the pods itself, as Knative's
autoscaler does every second); a tick between two scrapes sees the last one, as an instant query
would, and the signals are what PromQL would compute from those samples
(``autoscaler.adapters.simulator``). Run flat out, stretches in which nothing can change
(no request in flight, the fleet idle and settled) are skipped up to the next arrival.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from autoscaler.adapters.simulator import SimActuator, SimAdmissionSink, SimDrainer, SimMetricsSource
from autoscaler.config import FleetConfig
from autoscaler.loop.observe import PendingMarks
from autoscaler.loop.runner import TickRecord
from autoscaler.simulator.fleet import FleetSimulator, heap_frozen
from autoscaler.wiring import admission_policy, build_loop
from autoscaler.workload.stream import AnyWorkload, arrival_times
from controllers.base import Controller
from controllers.bound import Outcome
from controllers.registry import ANCHORS, build
from controllers.static import StaticController, steady_start_fleet

MAX_DRAIN_S = 4 * 3600.0
# Wall seconds between sub-steps when paced: ten fresh states per second for a 1 s scrape interval.
PACED_SUBSTEP_WALL_S = 0.1


@dataclass
class SimulationRun:
    """A finished simulation.

    Attributes:
        sim: the simulator, holding every request's outcome and every replica's lifetime.
        ticks: the loop's record of each tick.
        controller: controller name.
        admission: the admission policy (``none``, ``pid``, ``mpc``).
        end_s: simulated time when the last request ended (or the drain limit), seconds.
        wall_s: wall-clock seconds the run took.
    """

    sim: FleetSimulator
    ticks: list[TickRecord]
    controller: str
    end_s: float
    wall_s: float
    admission: str = "none"


def start_at(cfg: FleetConfig, controller: Controller, workload: AnyWorkload, service: str | None,
             steady_start: bool) -> FleetConfig:
    """The fleet with its initial replicas set: a static controller's fixed counts, or (with
    ``steady_start``) the replicas ``provision_for`` gives for the workload's opening rate (its
    highest 60-s arrival rate in the first 5 minutes, ``opening_rate_rps``: the rule the static
    baseline applies to the whole trace) at the PID setpoint's mean ITL (setpoint x ITL SLO), as a
    fleet that has been serving this traffic for a while would have. Otherwise the fleet file's counts."""
    if isinstance(controller, StaticController):
        start = controller.replicas
    elif steady_start:
        svc = cfg.service(service)
        itl = cfg.controller.pid.setpoint * svc.slo["interactive"].itl_s
        start = {svc.name: steady_start_fleet(svc, cfg.engine, workload, itl)}
    else:
        return cfg
    cfg = cfg.model_copy(deep=True)
    for svc in cfg.services:
        fixed = start.get(svc.name, {})
        for v in svc.variants:
            if v.name in fixed:
                v.initial_replicas = fixed[v.name]
    return cfg


class SimulationDriver:
    """The simulator, its adapters and the loop, stepped tick by tick (module docstring).

    Args:
        cfg: the fleet.
        workload: the requests (all sent to ``service``, default the first); a ``WorkloadStream``
            (``autoscaler.workload.stream``) needs ``keep_requests=False``.
        controller: the policy.
        service: the service the workload targets.
        steady_start: start adaptive controllers from the fleet sized for the workload's first
            5 minutes (``start_at``) instead of the fleet file's ``initial_replicas``.
        on_tick: called after each tick with its record and its wall time, seconds.
        admission: the admission policy, ``none``, ``pid`` or ``mpc`` (``controllers.admission``); with
            one, the gateway runs flow control (``autoscaler.simulator.gateway``).
        keep_requests: as ``FleetSimulator``'s: False keeps no ``SimRequest`` per request after it ends,
            and ``ticks`` keeps each estimate without its per-pod gauges (``ServiceEstimate.pods``, read
            by the loop at its tick and by nothing after: results, timeline, fault harm): ~80 pods x
            ~0.3 KB a tick otherwise, ~1.9 GB over a 14-day replay (issue 33).

    Attributes:
        lock: held while the simulation advances; readers of ``sim`` from other threads take it.
        ticks: the loop's records; ``tick_wall_s``: unix time at which each ran.
    """

    def __init__(self, cfg: FleetConfig, workload: AnyWorkload, controller: Controller, service: str | None = None,
                 steady_start: bool = True,
                 on_tick: Callable[[TickRecord, float], None] | None = None, admission: str = "none",
                 keep_requests: bool = True) -> None:
        self.ctrl = controller
        self.cfg = start_at(cfg, controller, workload, service, steady_start)
        policy = admission_policy(self.cfg, "simulate", admission)
        self.admission = admission
        self.sim = FleetSimulator(self.cfg, workload, service, admission=policy is not None,
                                  keep_requests=keep_requests)
        kube = self.cfg.kubernetes
        self.source = SimMetricsSource(self.sim, controller.window_s,
                                       min(self.cfg.simulator.scrape_interval_s, controller.tick_s),
                                       PendingMarks(kube.pending_timeout_s, kube.pending_retry_s))
        self.loop = build_loop(self.cfg, "simulate", self.source, controller, actuator=SimActuator(self.sim),
                               sink=SimAdmissionSink(self.sim) if policy is not None else None, policy=policy,
                               drainer=SimDrainer(self.sim))
        self.on_tick = on_tick
        self.lock = threading.Lock()
        self.ticks: list[TickRecord] = []
        self.tick_wall_s: list[float] = []
        self._lean_ticks = not keep_requests

    def run(
        self,
        speed: float | None = None,
        substep_s: float | None = None,
        on_step: Callable[[float], None] | None = None,
        stop: threading.Event | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> SimulationRun:
        """Run until every request has ended (or the drain limit, or ``stop`` is set).

        Args:
            speed: simulated seconds per wall second; None runs as fast as possible and skips quiet stretches.
            substep_s: simulated seconds per sub-step; default ``speed * 0.1`` when paced, else the tick.
            on_step: called with the simulated time after each sub-step, before a tick due then.
            stop: set from another thread to end the run early.
            progress: called after each tick with the fraction of requests ended (0..1).

        Raises:
            ValueError: ``speed`` or ``substep_s`` not > 0.
        """
        if speed is not None and not speed > 0:
            raise ValueError(f"--speed must be > 0, got {speed}")
        tick = self.ctrl.tick_s
        step = substep_s or (min(tick, speed * PACED_SUBSTEP_WALL_S) if speed else tick)
        if not step > 0:
            raise ValueError(f"sub-step must be > 0, got {step}")
        with heap_frozen():  # the run's objects live as long as it: the collector skips them
            interval = self.source.scrape_interval_s
            sim = self.sim
            t_wall = time.perf_counter()
            t0 = time.monotonic()
            limit = sim.last_arrival_s + MAX_DRAIN_S
            quiet = self.cfg.controller.guard.idle_ticks_to_min + 2
            now = 0.0
            while not (sim.done and now >= sim.last_arrival_s) and now < limit:
                if stop is not None and stop.is_set():
                    break
                if speed is None:
                    now = _fast_forward(sim, now, tick, self.ticks, quiet)
                end = now + tick
                for target in (*_grid(now, end, interval), end):
                    while now < target:
                        now = min(now + step, target)
                        if speed:
                            time.sleep(max(0.0, t0 + now / speed - time.monotonic()))
                        with self.lock:
                            sim.run_until(now)
                        if on_step is not None:
                            on_step(now)
                    if target < end:
                        with self.lock:
                            self.source.scrape(now)
                with self.lock:
                    started = time.perf_counter()
                    record = self.loop.tick(now)
                    for name, st in record.services.items():
                        if st.decision.route_weights:
                            sim.follow_plan(name, st.decision.route_weights)
                    if self.on_tick is not None:
                        self.on_tick(record, time.perf_counter() - started)
                self.ticks.append(_without_pods(record) if self._lean_ticks else record)
                self.tick_wall_s.append(time.time())
                if progress is not None:
                    progress(1 - sim.open_requests / max(sim.request_count, 1))
            with self.lock:
                if not sim.done:
                    sim.fail_open()
            last_end = sim.last_end_s()
            end_s = sim.last_arrival_s if last_end is None else max(sim.last_arrival_s, last_end)
            return SimulationRun(sim, self.ticks, self.ctrl.name, end_s, time.perf_counter() - t_wall, self.admission)


def run_simulation(
    cfg: FleetConfig,
    workload: AnyWorkload,
    controller: str | Controller = "pid",
    service: str | None = None,
    progress: Callable[[float], None] | None = None,
    steady_start: bool = True,
    admission: str | None = None,
    measure: Callable[[SimulationRun], Outcome] | None = None,
    on_step: Callable[[float], None] | None = None,
    on_search: Callable[[int], None] | None = None,
    keep_requests: bool = True,
) -> SimulationRun:
    """Simulate ``workload`` on the fleet under ``controller`` until every request has ended, flat out.

    Args:
        cfg: the fleet.
        workload: requests (all sent to ``service``, default the first); a ``WorkloadStream`` is read
            as the run goes (``FleetSimulator``), with ``keep_requests=False`` and a controller that
            does not need the whole workload up front (not ``oracle``, ``bound`` or a perfect forecast).
        controller: a spec (``controllers.registry``) or a controller object (e.g.
            ``controllers.static.ScheduledController``).
        progress: called after each tick with the fraction of requests ended (0..1).
        steady_start: as ``SimulationDriver``.
        admission: the admission policy (``none``, ``pid``, ``mpc``); None: ``default_admission``.
        measure: what a run's attainment and cost are (``autoscaler.report.outcome``): with it,
            ``bound`` can search by simulating candidates on this fleet, workload and admission.
        on_step: called with the simulated time (s) after each sub-step (``autoscaler.progress``), in
            ``bound``'s search runs too.
        on_search: called with the number (1, 2, ...) of each of ``bound``'s search runs as it
            starts, and with 0 after the last, before the run itself (``Rows.searcher``).
        keep_requests: keep each request's ``SimRequest`` objects in ``run.sim`` (``FleetSimulator``);
            False keeps only what ``autoscaler.report`` reads (``FleetSimulator.outcome_arrays``), in
            ``bound``'s search runs too.

    Raises:
        ValueError: unknown controller, service or admission policy, or a bad controller parameter.
    """
    simulate = None
    searched = 0  # bound's search runs so far
    if measure is not None:
        def simulate(candidate: Controller) -> Outcome:
            nonlocal searched
            searched += 1
            if on_search is not None:
                on_search(searched)
            policy = default_admission(cfg, candidate.name) if admission is None else admission
            driver = SimulationDriver(cfg, workload, candidate, service, steady_start, admission=policy,
                                      keep_requests=keep_requests)
            return measure(driver.run(on_step=on_step))
    ctrl = build(controller, cfg, service, workload, simulate) if isinstance(controller, str) else controller
    if on_search is not None and searched:
        on_search(0)
    mode = default_admission(cfg, ctrl.name) if admission is None else admission
    return SimulationDriver(cfg, workload, ctrl, service, steady_start, admission=mode,
                            keep_requests=keep_requests).run(progress=progress, on_step=on_step)


def default_admission(cfg: FleetConfig, controller: str) -> str:
    """The admission policy a run gets without ``--admission``: ``none`` for the anchors' autoscalers
    (``controllers.registry.ANCHORS``: measured as their users run them), the fleet file's
    ``controller.admission`` otherwise."""
    return "none" if controller.split(":")[0] in ANCHORS else cfg.controller.admission


LONG_GAP_S = 86400.0  # a day without arrivals
LONG_RUN_S = 7 * 86400.0  # a week of simulated time


def long_run_warning(cfg: FleetConfig, workload: AnyWorkload, service: str | None = None) -> str | None:
    """One line when the workload spans more than a week or has a gap of more than a day between
    arrivals (a row dated a year late, a large ``--time-scale``): the fleet is paid for the whole span,
    at least its minimum replicas, and the line says how much that is. None otherwise."""
    arrivals = arrival_times(workload)
    if len(arrivals) < 1:
        return None
    span = float(arrivals[-1] - arrivals[0])
    gaps = np.diff(arrivals)
    gap, after = 0.0, 0
    if len(gaps):
        gap = float(gaps.max())
        after = int(np.flatnonzero(gaps == gap)[-1]) + 1  # the latest of equal gaps
    if span <= LONG_RUN_S and gap <= LONG_GAP_S:
        return None
    svc = cfg.service(service)
    gpu_h = sum(v.min_replicas * v.gpus_per_replica for v in svc.variants) * span / 3600
    usd = sum(v.min_replicas * v.price_per_replica_hour for v in svc.variants) * span / 3600
    why = f"a gap of {gap / 86400:.1f} days after request {after}" if gap > LONG_GAP_S else "a long trace"
    return (f"{workload.source}: arrivals span {span / 86400:.1f} days ({why}); the fleet is paid for all of it: "
            f"at least {gpu_h:,.0f} GPU-hours (${usd:,.0f}) at its minimum replicas")


def _grid(start: float, end: float, interval: float) -> list[float]:
    """The scrape times ``k * interval`` strictly inside ``(start, end)``, seconds."""
    k = math.floor(start / interval + 1e-9) + 1
    out = []
    while k * interval < end - 1e-9:
        out.append(k * interval)
        k += 1
    return out


def _without_pods(record: TickRecord) -> TickRecord:
    """``record`` with each service's estimate's per-pod gauges left out (a copy: the loop's own
    objects are not touched)."""
    return replace(record, services={name: replace(st, estimate=replace(st.estimate, pods=[]))
                                     for name, st in record.services.items()})


def _fast_forward(sim: FleetSimulator, now: float, tick: float, ticks: list[TickRecord], quiet: int) -> float:
    """Skip ticks that cannot change anything, up to the last tick before the next arrival.

    Safe when nothing is in flight (no request on a replica or at the gateway), no replica is
    starting or draining, and the last ``quiet`` ticks all saw the service idle (its window empty
    of traffic) and changed no replica count (so the idle rule has acted and the fleet is settled):
    until the next arrival every signal stays what it is.
    Without this, a trace with hours of silence would be ticked through every 15 s.
    """
    nxt = sim.next_arrival_s
    if nxt is None or nxt - now < 2 * tick or sim.in_flight or len(ticks) < quiet:
        return now
    for rec in ticks[-quiet:]:
        for st in rec.services.values():
            moving = any(v.starting or v.draining for v in st.estimate.variants.values()) or any(
                v.starting or v.draining for pool in st.estimate.pools.values() for v in pool.variants.values())
            if moving or st.estimate.idle is not True or st.applied != st.estimate.current \
                    or (st.pool_applied and st.pool_applied != st.estimate.pool_current):
                return now
    return now + math.floor((nxt - now) / tick - 1) * tick
