"""Run the control loop against the embedded fleet simulator on a workload.

``run_simulation`` wires the simulator adapters into ``ControlLoop``, ticks it until every request
has ended, and returns the run (simulator, tick records, wall time) for ``autoscaler.report``.

The loop ticks at the controller's own period (``tick_s`` attribute, e.g. Knative's 2 s or Dynamo's
180 s; default the fleet file's ``controller.tick_s``) with its signal window (``window_s``
attribute, default ``controller.window_s``). Between ticks longer than ``controller.tick_s`` the
metrics source is scraped every ``controller.tick_s`` (Prometheus's scrape interval), so windowed
gauge signals such as ``max_over_time`` see the samples a real Prometheus would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from autoscaler.adapters.simulator import SimActuator, SimMetricsSource
from autoscaler.config import FleetConfig
from autoscaler.loop.runner import ControlLoop, TickRecord
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import Workload
from controllers.base import Controller
from controllers.baselines import BASELINE_NAMES, make_baseline
from controllers.pid import PIDController
from controllers.static import StaticController, opening_rate_rps, peak_provisioning, provision_for

CONTROLLERS = ("pid", "static", *BASELINE_NAMES)
MAX_DRAIN_S = 4 * 3600.0


@dataclass
class SimulationRun:
    """A finished simulation.

    Attributes:
        sim: the simulator, holding every request's outcome and every replica's lifetime.
        ticks: the loop's record of each tick.
        controller: controller name.
        end_s: simulated time when the last request ended (or the drain limit), seconds.
        wall_s: wall-clock seconds the run took.
    """

    sim: FleetSimulator
    ticks: list[TickRecord]
    controller: str
    end_s: float
    wall_s: float


def make_controller(name: str, cfg: FleetConfig, workload: Workload, service: str | None) -> Controller:
    """Build a controller by name.

    ``static`` sizes every service's variants for the workload's peak rate; the fleet starts at
    that size (its ``initial_replicas`` are overridden by the caller through ``static_start``).

    Raises:
        ValueError: unknown controller name.
    """
    if name == "pid":
        return PIDController()
    if name == "static":
        svc = cfg.service(service)
        return StaticController({svc.name: peak_provisioning(svc, workload)})
    if name.split(":", 1)[0] in BASELINE_NAMES:
        return make_baseline(name, cfg, workload, service)
    raise ValueError(f"unknown controller '{name}'; choose one of: {', '.join(CONTROLLERS)}")


def start_at(cfg: FleetConfig, controller: Controller, workload: Workload, service: str | None,
             steady_start: bool) -> FleetConfig:
    """The fleet with its initial replicas set: a static controller's fixed counts, or (with
    ``steady_start``) the replicas ``provision_for`` gives for the workload's opening rate (its
    highest 60-s arrival rate in the first 5 minutes, ``opening_rate_rps``: the rule the static
    baseline applies to the whole trace) with the PID setpoint's headroom (ITL at setpoint x SLO),
    as a fleet that has been serving this traffic for a while would have. Otherwise the fleet
    file's counts."""
    if isinstance(controller, StaticController):
        start = controller.replicas
    elif steady_start:
        svc = cfg.service(service)
        opening = opening_rate_rps(workload, max_model_len=svc.max_model_len)
        start = {svc.name: provision_for(svc, workload, opening, cfg.controller.pid.setpoint)}
    else:
        return cfg
    cfg = cfg.model_copy(deep=True)
    for svc in cfg.services:
        fixed = start.get(svc.name, {})
        for v in svc.variants:
            if v.name in fixed:
                v.initial_replicas = fixed[v.name]
    return cfg


def run_simulation(
    cfg: FleetConfig,
    workload: Workload,
    controller: str | Controller = "pid",
    service: str | None = None,
    progress: Callable[[float], None] | None = None,
    steady_start: bool = True,
) -> SimulationRun:
    """Simulate ``workload`` on the fleet under ``controller`` until every request has ended.

    Args:
        cfg: the fleet.
        workload: requests (all sent to ``service``, default the first).
        controller: ``pid``, ``static``, a baseline spec (``controllers.baselines``), or a
            controller object (e.g. ``controllers.static.ScheduledController``).
        progress: called after each tick with the fraction of requests ended (0..1).
        steady_start: start adaptive controllers from the fleet sized for the workload's first
            5 minutes (see ``start_at``) instead of the fleet file's ``initial_replicas``.

    Raises:
        ValueError: unknown controller or service.
    """
    t_wall = time.perf_counter()
    ctrl = make_controller(controller, cfg, workload, service) if isinstance(controller, str) else controller
    cfg = start_at(cfg, ctrl, workload, service, steady_start)
    sim = FleetSimulator(cfg, workload, service)
    source = SimMetricsSource(sim, getattr(ctrl, "window_s", cfg.controller.window_s))
    loop = ControlLoop(cfg, source, SimActuator(sim), ctrl)
    tick = getattr(ctrl, "tick_s", cfg.controller.tick_s)
    scrapes = max(1, round(tick / cfg.controller.tick_s))
    ticks: list[TickRecord] = []
    total = max(len(sim.requests), 1)
    limit = sim.last_arrival_s + MAX_DRAIN_S
    now = 0.0
    quiet = cfg.controller.guard.idle_ticks_to_min + 2
    while not (sim.done and now >= sim.last_arrival_s) and now < limit:
        now = _fast_forward(sim, now, tick, ticks, quiet)
        for k in range(1, scrapes):
            sim.run_until(now + k * tick / scrapes)
            source.scrape(now + k * tick / scrapes)
        now += tick
        sim.run_until(now)
        sim.expire_gateway()
        ticks.append(loop.tick(now))
        if progress is not None:
            progress(1 - sim.open_requests / total)
    if not sim.done:
        sim.fail_open()
    finished = [sr.t_finish for sr in sim.requests if sr.t_finish is not None]
    end_s = max([sim.last_arrival_s, *finished])
    return SimulationRun(sim, ticks, ctrl.name, end_s, time.perf_counter() - t_wall)


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
            moving = any(v.starting or v.draining for v in st.estimate.variants.values())
            if moving or st.estimate.idle is not True or st.applied != st.estimate.current:
                return now
    return now + math.floor((nxt - now) / tick - 1) * tick
