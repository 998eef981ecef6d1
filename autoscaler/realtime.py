"""The simulation in (scaled) real time, or stepped with a hook, for serving or recording its metrics.

``LiveSimulation`` wires the same pieces as ``simulate.run_simulation`` (``FleetSimulator``,
``SimMetricsSource``, ``SimActuator``, ``ControlLoop``) and advances them in sub-steps: with
``speed`` it paces simulated time at ``speed`` simulated seconds per wall second, so a scrape
target (``simulator.exposition.SimCollector``, read under ``lock``) shows a fleet that evolves as a
real one would, only faster; without ``speed`` it runs flat out and calls ``on_step`` at every
sub-step (e.g. to record history for a backtest). The loop ticks every ``controller.tick_s``
simulated seconds and actuates the simulator, as in ``autoscaler simulate``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autoscaler.adapters.simulator import SimActuator, SimMetricsSource
from autoscaler.config import FleetConfig
from autoscaler.loop.export import LoopMetrics, serve
from autoscaler.loop.runner import ControlLoop, TickRecord
from autoscaler.simulate import MAX_DRAIN_S, SimulationRun, make_controller, start_at
from autoscaler.simulator.exposition import SimCollector
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import Workload

# Wall seconds between sub-steps when paced: ten fresh states per second for a 1 s scrape interval.
PACED_SUBSTEP_WALL_S = 0.1


@dataclass
class LiveSimulation:
    """A simulation run step by step (see the module docstring).

    Args:
        cfg: the fleet.
        workload: the requests (all sent to ``service``, default the first).
        controller: ``pid`` or another name ``simulate.make_controller`` knows.
        namespace: ``namespace`` label of the served metrics.
        steady_start: as in ``run_simulation``.

    Attributes:
        lock: held while the simulation advances; collectors read under it.
        registry: holds the simulator's metrics (``SimCollector``) and the loop's own (``LoopMetrics``).
        tick_wall_s: unix time at which each tick of ``ticks`` ran.
    """

    cfg: FleetConfig
    workload: Workload
    controller: str = "pid"
    service: str | None = None
    namespace: str = "default"
    steady_start: bool = True
    ticks: list[TickRecord] = field(default_factory=list)
    tick_wall_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ctrl = make_controller(self.controller, self.cfg, self.workload, self.service)
        self.cfg = start_at(self.cfg, self.ctrl, self.workload, self.service, self.steady_start)
        self.sim = FleetSimulator(self.cfg, self.workload, self.service)
        # As run_simulation: a baseline controller may bring its own tick and window.
        self.tick_s: float = getattr(self.ctrl, "tick_s", self.cfg.controller.tick_s)
        self.source = SimMetricsSource(self.sim, getattr(self.ctrl, "window_s", self.cfg.controller.window_s))
        self.loop = ControlLoop(self.cfg, self.source, SimActuator(self.sim), self.ctrl)
        self.lock = threading.Lock()
        self.collector = SimCollector(self.sim, self.lock, self.namespace)
        self.metrics = LoopMetrics(self.loop)
        self.registry = self.metrics.registry
        self.registry.register(self.collector)

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
            speed: simulated seconds per wall second; None runs as fast as possible.
            substep_s: simulated seconds per sub-step; default ``speed * 0.1`` when paced, else the tick.
            on_step: called with the simulated time after each sub-step, before a tick due then.
            progress: called after each tick with the fraction of requests ended (0..1).

        As ``run_simulation``, the metrics source also samples gauges every ``controller.tick_s``
        within a longer controller tick; unlike it, quiet stretches are ticked through, not skipped,
        so a served fleet evolves in real time.

        Raises:
            ValueError: ``speed`` or ``substep_s`` not > 0.
        """
        if speed is not None and speed <= 0:
            raise ValueError(f"--speed must be > 0, got {speed}")
        tick = self.tick_s
        step = substep_s or (min(tick, speed * PACED_SUBSTEP_WALL_S) if speed else tick)
        if step <= 0:
            raise ValueError(f"sub-step must be > 0, got {step}")
        scrapes = max(1, round(tick / self.cfg.controller.tick_s))
        sim = self.sim
        t_wall = time.perf_counter()
        t0 = time.monotonic()
        limit = sim.last_arrival_s + MAX_DRAIN_S
        now = 0.0
        while not (sim.done and now >= sim.last_arrival_s) and now < limit:
            if stop is not None and stop.is_set():
                break
            start = now
            for j in range(1, scrapes + 1):
                target = start + tick if j == scrapes else start + j * tick / scrapes
                while now < target:
                    now = min(now + step, target)
                    if speed:
                        time.sleep(max(0.0, t0 + now / speed - time.monotonic()))
                    with self.lock:
                        sim.run_until(now)
                    if on_step is not None:
                        on_step(now)
                if j < scrapes:
                    with self.lock:
                        self.source.scrape(now)
            with self.lock:
                sim.expire_gateway()
                started = time.perf_counter()
                record = self.loop.tick(now)
                self.metrics.record(record, time.perf_counter() - started)
            self.ticks.append(record)
            self.tick_wall_s.append(time.time())
            if progress is not None:
                progress(1 - sim.open_requests / max(len(sim.requests), 1))
        with self.lock:
            if not sim.done:
                sim.fail_open()
        finished = [sr.t_finish for sr in sim.requests if sr.t_finish is not None]
        end_s = max([sim.last_arrival_s, *finished])
        return SimulationRun(sim, self.ticks, self.ctrl.name, end_s, time.perf_counter() - t_wall)


def serve_simulation(live: LiveSimulation, address: str, speed: float,
                     progress: Callable[[float], None] | None = None,
                     on_serving: Callable[[int], None] | None = None) -> SimulationRun:
    """Run ``live`` paced at ``speed`` while serving its registry at ``HOST:PORT``; stop serving at the end.

    ``on_serving`` gets the bound port once the server is up.

    Raises:
        ValueError: bad address or speed.
        OSError: the address cannot be bound.
    """
    server = serve(live.registry, address)
    try:
        if on_serving is not None:
            on_serving(server.port)
        return live.run(speed=speed, progress=progress)
    finally:
        server.close()


def write_tick_times(live: LiveSimulation, speed: float, path: Path) -> None:
    """Write ``{"speed", "time_s": [...], "wall_unix_s": [...]}``: when each tick ran, to align a dry-run."""
    doc = {"speed": speed, "time_s": [r.time_s for r in live.ticks], "wall_unix_s": live.tick_wall_s}
    path.write_text(json.dumps(doc) + "\n")
