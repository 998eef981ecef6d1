"""The simulation in (scaled) real time, for serving its metrics to a real Prometheus.

``LiveSimulation`` is the ``simulate.SimulationDriver`` of a run plus a metrics registry: the
simulator's replicas as a scrape target (``simulator.exposition.SimCollector``, read under the
driver's lock) and the loop's own ``autoscaler_*`` metrics (``loop.export.LoopMetrics``). Run it paced
(``run(speed=...)``) and a Prometheus scraping it sees a fleet that evolves as a real one would, only
faster; run it flat out with ``on_step`` to record its history (the backtest tests do).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from autoscaler.config import FleetConfig
from autoscaler.files import write_text
from autoscaler.loop.admission import PATH, AdmissionDocument, TeeSink
from autoscaler.loop.export import LoopMetrics, parse_address, serve
from autoscaler.simulate import SimulationDriver, default_admission
from autoscaler.simulator.exposition import SimCollector
from autoscaler.workload.types import PRIORITIES, Workload
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
        admission: the admission policy (None: ``simulate.default_admission``); its thresholds also go
            to ``document`` (a new one by default), which ``served`` serves at ``GET /v1/admission``.

    Attributes:
        registry: holds the simulator's metrics and the loop's own.
        document: the published admission thresholds (``autoscaler.loop.admission``).
        vllm_release: whose metric names the served replicas export (``simulator.exposition.RELEASE_NAMES``).
    """

    def __init__(self, cfg: FleetConfig, workload: Workload, controller: str = "pid", service: str | None = None,
                 namespace: str = "default", steady_start: bool = True,
                 registry: CollectorRegistry | None = None, admission: str | None = None,
                 document: AdmissionDocument | None = None, vllm_release: str = "0.11") -> None:
        ctrl = build(controller, cfg, service, workload)
        mode = default_admission(cfg, ctrl.name) if admission is None else admission
        super().__init__(cfg, workload, ctrl, service, steady_start, admission=mode)
        self.document = document if document is not None else AdmissionDocument()
        if self.loop.admission is not None:
            self.loop.admission = TeeSink(self.loop.admission, self.document)
        # the pods' role labels follow the fleet file's ``prometheus.role_labels``, which the source reads
        self.collector = SimCollector(self.sim, self.lock, namespace, vllm_release, created=True,
                                      role_labels=cfg.prometheus.roles)
        self.metrics = LoopMetrics(self.loop, registry, shed=self._shed)
        self.on_tick = self.metrics.record
        self.registry = self.metrics.registry
        self.registry.register(self.collector)

    def _shed(self) -> dict[tuple[str, str], int]:
        """(service, priority) -> attempts each gateway shed."""
        return {(name, p): svc.flow.shed[i] for name, svc in self.sim.services.items() if svc.flow is not None
                for i, p in enumerate(PRIORITIES)}


@dataclass
class Endpoint:
    """A bound metrics endpoint (``served``): serve a ``LiveSimulation`` built with its ``registry`` and
    ``document`` and a Prometheus scraping ``http://host:port/metrics`` sees it."""

    host: str
    port: int
    registry: CollectorRegistry
    document: AdmissionDocument


@contextmanager
def served(address: str, speed: float) -> Iterator[Endpoint]:
    """Bind ``HOST:PORT`` and serve a new registry's metrics and admission document (``GET /v1/admission``)
    while the block runs, so the address is known to work before any workload is read.

    Raises:
        ValueError: a speed that is not a finite number > 0, a bad address, or one that cannot be bound
            (each naming it).
    """
    if not 0 < speed < float("inf"):
        raise ValueError(f"--speed must be a finite number > 0, got {speed:g}")
    try:
        host, _ = parse_address(address)
    except ValueError as exc:
        raise ValueError(f"--serve-metrics {address}: {exc}") from None
    registry = CollectorRegistry()
    document = AdmissionDocument()
    try:
        server = serve(registry, address, {PATH: document.json})
    except OSError as exc:
        raise ValueError(f"--serve-metrics {address}: {exc.strerror or exc}") from None
    try:
        yield Endpoint(host, server.port, registry, document)
    finally:
        server.close()


def write_tick_times(live: LiveSimulation, speed: float, path: Path) -> None:
    """Write ``{"speed", "time_s": [...], "wall_unix_s": [...]}``: when each tick ran, to align a dry-run."""
    doc = {"speed": speed, "time_s": [r.time_s for r in live.ticks], "wall_unix_s": live.tick_wall_s}
    write_text(path, json.dumps(doc) + "\n")
