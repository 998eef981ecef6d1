"""The simulation in (scaled) real time, for serving its metrics to a real Prometheus.

``LiveSimulation`` is the ``simulate.SimulationDriver`` of a run plus a metrics registry: the
simulator's replicas as a scrape target (``simulator.exposition.SimCollector``, read under the
driver's lock) and the loop's own ``autoscaler_*`` metrics (``loop.export.LoopMetrics``). Run it paced
(``run(speed=...)``) and a Prometheus scraping it sees a fleet that evolves as a real one would, only
faster; run it flat out with ``on_step`` to record its history (the backtest tests do).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from autoscaler.config import FleetConfig
from autoscaler.files import write_text
from autoscaler.loop.export import LoopMetrics, serve
from autoscaler.simulate import SimulationDriver, SimulationRun
from autoscaler.simulator.exposition import SimCollector
from autoscaler.workload.types import Workload
from controllers.registry import build


class LiveSimulation(SimulationDriver):
    """A simulation with its metrics registry (module docstring).

    Args:
        cfg: the fleet.
        workload: the requests (all sent to ``service``, default the first).
        controller: a spec (``controllers.registry``).
        service: the service the workload targets.
        namespace: ``namespace`` label of the served metrics.
        steady_start: as ``SimulationDriver``.
        registry: where to register the metrics (one already served, say); a new one by default.

    Attributes:
        registry: holds the simulator's metrics and the loop's own.
    """

    def __init__(self, cfg: FleetConfig, workload: Workload, controller: str = "pid", service: str | None = None,
                 namespace: str = "default", steady_start: bool = True,
                 registry: CollectorRegistry | None = None) -> None:
        super().__init__(cfg, workload, build(controller, cfg, service, workload), service, steady_start)
        self.collector = SimCollector(self.sim, self.lock, namespace)
        self.metrics = LoopMetrics(self.loop, registry)
        self.on_tick = self.metrics.record
        self.registry = self.metrics.registry
        self.registry.register(self.collector)


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
    write_text(path, json.dumps(doc) + "\n")
