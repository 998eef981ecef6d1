"""``autoscaler run``: the control loop as a service on a cluster.

One ``Daemon`` is one candidate. A thread runs leader election on the Lease
(``autoscaler.adapters.lease``) every ``kubernetes.lease.retry_s``; while it leads, the main thread
ticks a ``ControlLoop`` every ``controller.tick_s`` over Prometheus (``PrometheusSource``; a variant
whose pods cannot be placed is marked unavailable from the API server, ``PendingPods``), writing
replicas through the scale subresource (``KubernetesActuator``), admission thresholds to their
ConfigMaps (``ConfigMapSink``) and to ``GET /v1/admission``, and an Event per scale change. A
follower never writes: it does not run the loop at all, and a leader checks its leadership at each
write (``LeaderOnly``), so a tick that outlives it writes nothing more. A daemon that starts leading
builds its loop afresh from what the cluster and Prometheus hold (replica counts from the API
server, a window of history), so the first decision after a restart or a failover is bounded by the
guard like any other, and, as the previous leader may just have scaled up, it scales nothing down
for the guard's cool-down. It does not wait for its next period for that first decision: the election
thread wakes the tick loop when it takes a Lease (``wake``), which ticks the shards just taken at once,
alone (``tick(only_new=True)``), and the next tick on the schedule ticks them with the others. So a
takeover's first write comes within the Lease's duration (the old leader's writes stopped ``renew_s``
after its last renewal, before the Lease runs out; the election's rule, unchanged), the election's lag
(seeing the last renewal and the next round: up to two ``retry_s`` plus a round's calls) and the first
tick's own work, where waiting for the period added up to a whole ``tick_s`` (issue 35).

Sharded (``kubernetes.shards`` > 1, ``autoscaler.adapters.shards``): the election thread runs one
round of ``ShardElection`` (an elector per shard Lease, the members' counters, the spread, the
coordinator) instead; the main thread ticks one loop per shard led (``loops``), each over its
shard's services and, with ``gpu_limits``, within its share (``ShardElection.share``: the MPC's
``gpu_limits``), all from one Prometheus observation per tick (``ShardView``); each write is allowed
only while the service's own shard is led (``LeaderOnly(shard=)``), counted in flight
(``ShardElection.writing``) so that a shard handed to another daemon is released only once its
writes in progress are done; after each shard's tick
its GPUs held and wanted are reported for the coordinator. The loop metrics of the shards are
exported as one set (``MergedMetrics``), ``autoscaler_shard_leader{identity,shard}`` says which
shards are led, ``autoscaler_tick_failures_total{identity,shard}`` counts the ticks in which a shard's
loop raised (the other shards' ticks keep the loop's duration counting), and ``/v1/admission``
answers 503 (no daemon holds every service's thresholds: the ConfigMaps do).
With one shard all of this is the single Lease and the single loop above.

``dry_run`` does everything but the writes: the actuator and the sink log what they would write
and report it applied, and no Lease is taken (every dry-run daemon acts as a leader that writes
nothing).

Each variant's workload is reached through the connector of its kind
(``autoscaler.adapters.workloads``: Deployment, StatefulSet, LeaderWorkerSet, InferenceService, any
custom resource with a scale subresource); an unknown kind stops the daemon at startup with one line.
With ``kubernetes.watch`` the Deployments, StatefulSets and pods are read from a watch cache
(``adapters.kubernetes.watch_cache``) started with the daemon, leader or not, and stopped with it.
It holds only the workloads of the services this daemon may write and their pods (``cover``, issue
35: memory grows with the services led, not with the fleet or the namespace): unsharded, every
service of the fleet, leader or not (a follower's takeover starts from a full cache); sharded, the
services of the shards led now. At the start of each tick the cache is narrowed to the shards led
(a lost shard's objects dropped) and a shard just taken is listed, in the tick's thread, before its
loop is built: its first decision reads a full cache, and a list that failed leaves that part
unreadable (``CacheStale``: its counts unknown, the loop holds), never empty.
Events come from the results: a write that changed a count (``ActuationResult.before`` / ``after``) is
a ``ScaledUp`` / ``ScaledDown`` Event on the workload, and another writer's change (``external``, from
a write's read or from ``KubernetesActuator.check_writers`` at the start of each tick) an
``OtherWriter`` one. A shard's loop whose scale write raised (``TickError``: a bug, not a refusal)
still hands over the record of its other services: the tick goes on with the other shards, writes
the Events and metrics of every service written, and then raises the first shard's ``TickError``
(logged as ``tick failed``, naming each failed service and its error; the next tick retries); that
shard reports no GPUs for the coordinator this tick, as its record lacks the failed services; a
service whose decision raised is one of them (nothing of it written that tick). A shard's loop that
raises anything else (before its writes and decisions: observe, estimate, the controller's
``prepare``) costs that shard's tick alone in the same way.

Another writer (``KubernetesActuator``): a variant whose replicas someone else changed is left alone
for ``kubernetes.other_writer_quiet_s``; each such change is an Event (``OtherWriter``) and counts in
``autoscaler_external_writes_total``, and ``autoscaler_paused`` is 1 while it is left alone.

HTTP on ``address``: ``/metrics`` (the loop's, ``autoscaler_leader``, ``autoscaler_external_writes_total``,
``autoscaler_paused``, and ``autoscaler_workload_desired_replicas`` / ``autoscaler_workload_ready_replicas``
labelled ``service``, ``variant``, ``kind`` and ``workload``: the counts last read from the API server,
for every kind, where kube-state-metrics has series for apps/v1 kinds only), ``/v1/admission`` (the
leader's document, its generations built on the Lease's term; a follower or a former leader answers
503 with the leader's identity, and the document holds only what the ConfigMaps were written with),
``/healthz`` (200 unless a tick has stalled, below) and ``/readyz`` (200 once the first election
attempt and, when leading, the first tick are done; 503 while the Lease cannot be read or written,
or a tick has stalled).

A stalled tick (one running longer than ``stall_s``: three tick periods, two lease durations, or the
Prometheus deadline plus a lease duration, whichever is longest, so neither a slow solve nor a
Prometheus that does not answer counts) gives the Lease up:
the election thread stops renewing for a loop that does nothing, releases the Lease so that another
daemon leads at its next try, and takes part in the election again only once the tick has returned
(whose writes, meanwhile, are refused: it no longer leads). ``stop()`` (SIGTERM) lets the tick in
progress finish for ``kubernetes.stop_grace_s``, then releases the Lease and closes the server,
leaving a tick that has not finished behind (``abandoned``): the process exits within the pod's grace
period whatever a call in flight does.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from autoscaler.adapters.kubernetes import (
    ClusterSource,
    ConfigMapSink,
    EventRecorder,
    KubernetesActuator,
    PendingPods,
    cached_workloads,
    watch_cache,
)
from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.adapters.shards import ShardElection, shard_of
from autoscaler.adapters.workloads import TRANSPORT_ERRORS
from autoscaler.config import FleetConfig
from autoscaler.loop.actuate import APPLIED, ActuationResult, ActuationStatus, ExternalChange
from autoscaler.loop.admission import PATH, TERM_BITS, AdmissionDocument, TeeSink, check_itl_budget, check_thresholds
from autoscaler.loop.export import LoopMetrics, MetricsServer, serve
from autoscaler.loop.fanout import run_jobs
from autoscaler.loop.runner import ControlLoop, TickError, TickRecord
from autoscaler.loop.ticker import next_due
from autoscaler.wiring import admission_policy, build_loop
from controllers.registry import build

log = logging.getLogger(__name__)


EVENT_WRITERS = 8
"""Events written at once (one thread each) after a tick: a tick that scales 100 services wrote its 100
Events one after another (~3 s of it on the emulated API server, issue 35); 8 overlaps their round
trips. A bound on concurrency, not a rate: the Python client has no client-side limiter, where
client-go's default is 5 queries per second with a burst of 10 (k8s.io/client-go rest/config.go,
``DefaultQPS`` / ``DefaultBurst``); 8 in flight stays under that burst."""


SCALE_WRITERS = EVENT_WRITERS
"""Scale writes of different services at once (``ControlLoop``'s ``writers``): the same bound and reason
as the Events'. Each write still passes ``LeaderOnly``'s check of the shard's Lease."""


def freeze_heap() -> None:
    """Leave the objects alive now (the interpreter's imports: the Kubernetes client's models, numpy,
    scipy, statsmodels, pydantic's schemas; the daemon as built) out of the cyclic garbage collector's
    full collections, after one collection (``gc.collect``, then ``gc.freeze``). They live as long as
    the process, but each full collection scanned them all: a 50-service tick holds tens of thousands of
    Prometheus samples long enough to reach the oldest generation, which triggered 3 full collections a
    tick, 0.56 s of its ~2 s of CPU (issue 35, 2f7f68e). Objects frozen are freed by reference counting
    as before; only a cycle among them that became garbage later would never be collected."""
    gc.collect()
    gc.freeze()


def scaled_clock(speed: float) -> Callable[[], float]:
    """Monotonic seconds times ``speed``: the loop's own seconds when the daemon runs at ``speed`` x real
    time (the fault harness's 20x), so that what is timed on it (a pod's unschedulable wait, the pending
    timeout) is in the seconds the controllers and the fleet file use.

    Raises:
        ValueError: ``speed`` not > 0.
    """
    if not speed > 0:
        raise ValueError(f"scaled_clock: need a speed > 0, got {speed}")
    return lambda: time.monotonic() * speed


def write_events(jobs: Sequence[Sequence[Callable[[], object]]], workers: int = EVENT_WRITERS) -> None:
    """Run each of ``jobs`` (one workload's Event writes, in order) at most ``workers`` at once
    (``loop.fanout.run_jobs``), and return once all are done. An Event write logs its own failure
    (``EventRecorder``); one that raises is logged here and the others still run."""

    def run(calls: Sequence[Callable[[], object]]) -> None:
        for call in calls:
            try:
                call()
            except Exception:  # an Event is best effort: never the tick's end
                log.exception("event not written")

    run_jobs([partial(run, calls) for calls in jobs], workers, "events")


class LoggingActuator:
    """``--dry-run``'s actuator: logs the write it would make and reports it applied."""

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        """Log ``would scale``."""
        first = f", removing {', '.join(remove_first)} first" if remove_first else ""
        log.info("dry-run: would scale %s/%s to %d replicas%s", service, variant, replicas, first)
        return APPLIED


class LoggingSink:
    """``--dry-run``'s admission sink: logs the thresholds it would write (a malformed set is still refused)."""

    def publish(self, service: str, thresholds: Mapping[str, float | None],
                itl_budget: Mapping[str, int] | None = None) -> ActuationResult:
        """Log ``would publish``."""
        why = check_thresholds(thresholds) or check_itl_budget(itl_budget or {})
        if why is not None:
            return ActuationResult(ActuationStatus.INVALID, f"{service}: {why}")
        log.info("dry-run: would publish admission thresholds of %s", service,
                 extra={"service": service, "thresholds": dict(thresholds),
                        **({"itl_budget": dict(itl_budget)} if itl_budget else {})})
        return APPLIED


class LeaderOnly:
    """An actuator or admission sink that writes only while ``daemon`` leads ``shard`` (the one Lease
    when unsharded), checked at each write: a tick that outlives its leadership (a slow Prometheus, a
    renewal that failed meanwhile) writes nothing more (``not_leader``). The write counts
    in flight (``ShardElection.writing``), so a shard handed to another daemon is released only once
    its writes in progress are done."""

    def __init__(self, inner: Any, daemon: Daemon, shard: int = 0) -> None:
        self.inner = inner
        self.daemon = daemon
        self.shard = shard

    def _lost(self) -> ActuationResult:
        what = "" if self.daemon.shards.n == 1 else f" shard {self.shard}"
        return ActuationResult(ActuationStatus.NOT_LEADER, f"{self.daemon.identity} no longer leads{what}: not written")

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        """The inner actuator's ``scale`` while leading."""
        if self.daemon.dry_run:
            return self.inner.scale(service, variant, replicas, remove_first)
        with self.daemon.shards.writing(self.shard) as ok:
            return self.inner.scale(service, variant, replicas, remove_first) if ok else self._lost()

    def publish(self, service: str, thresholds: Mapping[str, float | None],
                itl_budget: Mapping[str, int] | None = None) -> ActuationResult:
        """The inner sink's ``publish`` while leading."""
        if self.daemon.dry_run:
            return self.inner.publish(service, thresholds, itl_budget)
        with self.daemon.shards.writing(self.shard) as ok:
            return self.inner.publish(service, thresholds, itl_budget) if ok else self._lost()


class MergedMetrics(Collector):
    """The loop metrics of several shard loops as one set of families: samples of one name and label
    set are summed for counters and histograms (ticks of all the shard loops) and the first is kept
    for the rest (the shards' services are disjoint, so only the loop-wide gauges repeat)."""

    def __init__(self) -> None:
        self.parts: dict[int, LoopMetrics] = {}

    def describe(self) -> Iterable[Metric]:
        """Nothing up front (``LoopMetrics.describe``)."""
        return []

    def collect(self) -> Iterable[Metric]:
        """Each family once, its samples merged."""
        families: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
        for _, part in sorted(self.parts.items()):
            for fam in part.collect():
                if fam.name not in families:
                    families[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                    values[fam.name] = {}
                summed = fam.type in ("counter", "histogram", "summary")
                for smp in fam.samples:
                    key = (smp.name, tuple(sorted(smp.labels.items())))
                    seen = values[fam.name].get(key)
                    if seen is None:
                        values[fam.name][key] = smp
                    elif summed:
                        values[fam.name][key] = smp._replace(value=seen.value + smp.value)
        for name, fam in families.items():
            fam.samples = list(values[name].values())
        return list(families.values())


class ShardView:
    """A ``MetricsSource`` of one shard's services: the daemon's one observation of a tick
    (``Daemon.observe``), filtered."""

    def __init__(self, daemon: Daemon, services: Sequence[str]) -> None:
        self.daemon = daemon
        self.services = set(services)

    def observe(self, now: float) -> dict[str, Any]:
        """The shard's services of the tick's observation."""
        return {k: v for k, v in self.daemon.observe(now).items() if k in self.services}


class Daemon:
    """One candidate of ``autoscaler run`` (module docstring).

    Args:
        cfg: the fleet.
        controller: a registry spec (``pid``, ``mpc``, ``hpa:...``).
        source: a ``PrometheusSource`` (real time).
        api: a Kubernetes client (``adapters.kubernetes.connect``).
        identity: this candidate's name (the pod's name in a cluster).
        address: ``HOST:PORT`` of the HTTP endpoints (port 0: any free one).
        dry_run: write nothing (module docstring).
        namespace_self: where the Lease lives (default ``kubernetes.namespace_self``, else
            ``kubernetes.namespace``).
        speed: the source's seconds per wall second (1 on a cluster; a simulator served faster in
            tests): the loop ticks every ``tick_s / speed`` wall seconds on the source's clock.
        admission_address: ``HOST:PORT`` serving ``/v1/admission`` alone (None: on ``address`` with
            the metrics and probes), so that gateways and scrapers can be given different ports.

    Raises:
        OSError: an address cannot be bound (nothing is left listening).
    """

    def __init__(self, cfg: FleetConfig, controller: str, source: PrometheusSource, api: client.ApiClient,
                 identity: str, address: str, dry_run: bool = False, namespace_self: str | None = None,
                 speed: float = 1.0, admission_address: str | None = None) -> None:
        build(controller, cfg)  # an unknown spec fails here, before anything starts
        self.cfg = cfg
        self.spec = controller
        self.cache = watch_cache(cfg.kubernetes, cfg.services, api)
        """The watch cache the workloads are read from (``kubernetes.watch``), None: GETs."""
        pods = PendingPods(cfg.kubernetes, cfg.services, api, clock=scaled_clock(speed), cache=self.cache)
        self.source = ClusterSource(source, pods, api)
        self.api = api
        self.identity = identity
        self.dry_run = dry_run
        self.speed = speed
        kube = cfg.kubernetes
        lease_ns = namespace_self or kube.namespace_self or kube.namespace
        self.shards = ShardElection(cfg, api, lease_ns, identity)
        self.elector = self.shards.electors[0]
        """Shard 0's elector: with one shard, the Lease (``kubernetes.lease.name``)."""
        self.document = AdmissionDocument()
        self.registry = CollectorRegistry()
        self.leader_gauge = Gauge("autoscaler_leader", "1 while this daemon leads (writes), else 0.",
                                  ["identity"], registry=self.registry)
        self.leader_gauge.labels(identity).set(0)
        self.shard_gauge = Gauge("autoscaler_shard_leader", "1 while this daemon leads the shard (writes its "
                                 "services), else 0.", ["identity", "shard"], registry=self.registry)
        for i in range(self.shards.n):
            self.shard_gauge.labels(identity, str(i)).set(0)
        self.coordinator_gauge = Gauge("autoscaler_shard_coordinator", "1 while this daemon splits the shared GPU "
                                       "limits between the shards, else 0.", ["identity"], registry=self.registry)
        self.coordinator_gauge.labels(identity).set(0)
        self.duplicate_gauge = Gauge("autoscaler_duplicate_identity", "1 once another process renewed the Lease "
                                     "under this daemon's identity (this one no longer leads), else 0.",
                                     ["identity"], registry=self.registry)
        self.duplicate_gauge.labels(identity).set(0)
        self.tick_failures = Counter("autoscaler_tick_failures", "Ticks in which a shard's loop raised (a bug in "
                                     "a stage, a source that raised, or a write that raised): not all of its "
                                     "services were decided and written.", ["identity", "shard"],
                                     registry=self.registry)
        for i in range(self.shards.n):
            self.tick_failures.labels(identity, str(i))
        self.external = Counter("autoscaler_external_writes", "Changes another writer made to a variant's replicas.",
                                ["service", "variant"], registry=self.registry)
        self.paused = Gauge("autoscaler_paused", "1 while a variant is left alone after another writer's change.",
                            ["service", "variant"], registry=self.registry)
        for svc in cfg.services:
            for v in svc.variants:
                self.external.labels(svc.name, v.name)
                self.paused.labels(svc.name, v.name).set(0)
        labels = ["service", "variant", "kind", "workload"]
        self.workload_desired = Gauge("autoscaler_workload_desired_replicas", "Replicas the variant's workload "
                                      "wants, as last read from the API server.", labels, registry=self.registry)
        self.workload_ready = Gauge("autoscaler_workload_ready_replicas", "Replicas of the variant's workload ready "
                                    "(LeaderWorkerSet: groups), as last read from the API server.", labels,
                                    registry=self.registry)
        self.events = EventRecorder(cfg.kubernetes, cfg.services, api, identity, cache=self.cache)
        self.writers: dict[int, KubernetesActuator] = {}
        """Shard -> the actuator writing its services to the cluster while this daemon leads it (none in
        dry-run or as a follower)."""
        self.loops: dict[int, ControlLoop] = {}
        """Shard -> its loop while this daemon leads it (the one loop, shard 0, when unsharded)."""
        self.terms: dict[int, int] = {}
        """Shard -> the term its loop was built under (``_term``): a loop of an earlier term is rebuilt."""
        self.merged = MergedMetrics() if self.shards.n > 1 else None
        if self.merged is not None:
            self.registry.register(self.merged)
        self._observed: tuple[float, dict[str, Any] | Exception] | None = None
        self.stopping = threading.Event()
        self.wake = threading.Event()
        """Set by the election thread when it takes a shard (and by ``stop``): the tick loop ticks the
        newly led shards at once instead of at its next period (module docstring, failover)."""
        self._ticking: list[int] = []
        """The shards the tick in progress ticks (``observe`` queries their services only)."""
        self.stop_signal: str | None = None
        """The signal that stopped the daemon (``SIGTERM``, ``SIGINT``), None when none did (yet)."""
        self.metrics: LoopMetrics | None = None
        self.ticks = 0
        self.last_tick: float | None = None
        self.tick_began: float | None = None
        """When the tick in progress began (monotonic s), None between ticks."""
        period = cfg.controller.tick_s / speed
        self.stall_s = max(3 * period, 2 * kube.lease.duration_s, (source.deadline_s or 0.0) + kube.lease.duration_s)
        """A tick running longer than this (wall s) has stalled (module docstring)."""
        self.abandoned = False
        """``run`` returned with a tick still in progress (it outlived ``stop_grace_s``)."""
        self.elected_once = threading.Event()
        self.started = time.monotonic()
        probes = {"/healthz": self._healthz, "/readyz": self._readyz}
        self.admission_server: MetricsServer | None = None
        if admission_address is None:
            self.server: MetricsServer = serve(self.registry, address, {PATH: self._admission, **probes})
        else:  # the gateways' port apart from the scrapers' and the kubelet's
            self.admission_server = serve(None, admission_address, {PATH: self._admission})
            try:
                self.server = serve(self.registry, address, probes)
            except BaseException:
                self.admission_server.close()
                raise
        if self.cache is not None:  # unsharded, a follower keeps it too: a failover starts from a listed cache
            self._cover(set(range(self.shards.n)) if dry_run else set())  # not started: lists nothing
            self.cache.start()

    # ------------------------------------------------------------------ HTTP
    def _admission(self) -> tuple[int, bytes]:
        """The admission document while this daemon leads and has begun its term's document; else 503
        naming the leader (a follower or a former leader serves no thresholds). Sharded, no daemon
        holds every service's thresholds: 503 pointing to the ConfigMaps."""
        if self.shards.n > 1 and not self.dry_run:
            why = {"error": f"the services are split into {self.shards.n} shards: read each service's admission "
                            "ConfigMap", "leader": None}
            return 503, (json.dumps(why) + "\n").encode()
        if self.dry_run or (self.leading and self.document.leader == self.identity
                            and self.document.generation >> TERM_BITS == self.elector.term):
            return 200, self.document.json()
        why = {"error": f"{self.identity} does not lead: ask the leader", "leader": self.elector.holder}
        return 503, (json.dumps(why) + "\n").encode()

    def stalled_for(self) -> float | None:
        """How long the tick in progress has run past ``stall_s`` (s), or None when no tick has stalled."""
        began = self.tick_began
        if began is None:
            return None
        over = time.monotonic() - began - self.stall_s
        return over if over > 0 else None

    def _healthz(self) -> tuple[int, bytes]:
        return (503, b"tick loop stalled\n") if self.stalled_for() is not None else (200, b"ok\n")

    def _readyz(self) -> tuple[int, bytes]:
        failing = next((e.failing for e in self.shards.electors if e.failing is not None), None)
        if failing is not None and not self.dry_run:  # it cannot take part in the election
            return 503, f"not ready: {failing}\n".encode()
        if self.stalled_for() is not None:
            return 503, f"not ready: a tick has run for more than {self.stall_s:g} s\n".encode()
        ready = self.elected_once.is_set() and (not self.leading or self.ticks > 0)
        if ready and self.shards.n > 1:
            led = ",".join(map(str, self.shards.led())) or "none"
            return 200, f"ready: leads shards {led} of {self.shards.n}\n".encode()
        return (200, b"ready\n") if ready else (503, b"not ready\n")

    @property
    def leading(self) -> bool:
        """Whether this daemon decides now: it holds a Lease (any shard's) renewed less than
        ``renew_s`` ago (every dry-run daemon decides, and writes nothing)."""
        return self.dry_run or bool(self.shards.led())

    def leads(self, shard: int) -> bool:
        """Whether this daemon may write ``shard``'s services now (every dry-run daemon may: it writes nothing)."""
        return self.dry_run or self.shards.leads(shard)

    @property
    def loop(self) -> ControlLoop | None:
        """Shard 0's loop: the one loop when unsharded (None while not leading)."""
        return self.loops.get(0)

    @property
    def writer(self) -> KubernetesActuator | None:
        """Shard 0's actuator: the one actuator when unsharded."""
        return self.writers.get(0)

    # ------------------------------------------------------------------ election
    def _elect(self) -> None:
        while not self.stopping.is_set():
            if not self.dry_run and self.stalled_for() is not None:
                if any(e.leading for e in self.shards.electors):  # renewing for a loop that does nothing
                    log.error("%s: a tick has run for more than %g s: releasing the Lease until it returns",
                              self.identity, self.stall_s)
                    self.shards.release(leave=False)
            elif not self.dry_run:
                was, before = self.leading, set(self.shards.led())
                self.shards.round()
                if set(self.shards.led()) - before:  # a shard taken: its first tick now, not at the next period
                    self.wake.set()
                now = self.leading
                if now != was:
                    log.info("%s %s", self.identity, "leads" if now else "follows")
            self.leader_gauge.labels(self.identity).set(1 if self.leading and not self.dry_run else 0)
            for i in range(self.shards.n):
                self.shard_gauge.labels(self.identity, str(i)).set(1 if self.shards.leads(i) else 0)
            coordinator = self.shards.coordinator
            self.coordinator_gauge.labels(self.identity).set(1 if coordinator is not None and coordinator.leads()
                                                             else 0)
            duplicate = any(e.duplicate for e in self.shards.electors)
            self.duplicate_gauge.labels(self.identity).set(1 if duplicate else 0)
            self.elected_once.set()
            self.stopping.wait(self.cfg.kubernetes.lease.retry_s)

    # ------------------------------------------------------------------ loop
    def _shard_cfg(self, shard: int) -> FleetConfig:
        """The fleet as shard ``shard``'s loop sees it: its services (all of them when unsharded)."""
        if self.shards.n == 1:
            return self.cfg
        return self.cfg.model_copy(update={"services": self.shards.services[shard]})

    def _new_loop(self, now: float, shard: int = 0) -> ControlLoop:
        cfg = self._shard_cfg(shard)
        # a shard may hold no service (the name hash leaves some empty): its loop never ticks (``tick``),
        # but the controller is calibrated on a service, so on the fleet's first
        ctrl = build(self.spec, cfg if cfg.services else self.cfg)
        term = self.terms[shard] = self._term(shard)
        sharded = self.shards.n > 1
        if not sharded:
            self.document.begin(self.identity, term)
        if self.dry_run:
            sink: Any = TeeSink(LoggingSink(), self.document)
            actuator: Any = LoggingActuator()
            self.writers.pop(shard, None)
        else:  # the ConfigMap first: the endpoint serves only what the cluster holds

            def fence() -> bool:
                return self.may_write(shard)

            configmaps = ConfigMapSink(self.cfg.kubernetes, self.api, fence=fence, leader=self.identity, term=term)
            gate = LeaderOnly(configmaps, self, shard)
            sink = gate if sharded else TeeSink(gate, self.document)
            writer = KubernetesActuator(self.cfg.kubernetes, cfg.services, self.api, fence=fence, cache=self.cache)
            self.writers[shard] = writer
            actuator = LeaderOnly(writer, self, shard)
        source: Any = self.source if not sharded else ShardView(self, [s.name for s in cfg.services])
        loop = build_loop(cfg, "run", source, ctrl, actuator=actuator, sink=sink,
                          policy=admission_policy(cfg, "run"), writers=SCALE_WRITERS)
        for g in loop.guards.values():  # the previous leader may just have scaled up: no scale-down for a cool-down
            g.last_scale_up_s = now
        if self.merged is not None:
            self.merged.parts[shard] = LoopMetrics(loop)
        else:
            if self.metrics is not None:
                self.registry.unregister(self.metrics)
            self.metrics = LoopMetrics(loop, registry=self.registry)
        return loop

    def _cached_services(self, led: set[int]) -> list[Any]:
        """The services whose objects the watch cache keeps while this daemon leads ``led`` (module
        docstring): every service when unsharded, else those of the shards led."""
        if self.shards.n == 1:
            return list(self.cfg.services)
        return [s for i in sorted(led) for s in self.shards.services[i]]

    def _cover(self, led: set[int]) -> None:
        """Narrow the watch cache to ``led`` and list what it lacks of it (``WorkloadCache.cover``); a
        list that failed is logged, its part left unreadable until the next tick lists it."""
        if self.cache is None:
            return
        try:
            self.cache.cover(cached_workloads(self.cfg.kubernetes, self._cached_services(led)))
        except (*TRANSPORT_ERRORS, ValueError) as exc:
            log.warning("%s: listing the watch cache for the shards led failed (their reads wait for the next "
                        "tick's list): %s", self.identity, exc)

    def _term(self, shard: int) -> int:
        """The term ``shard`` is led under (the Lease's ``leaseTransitions`` as taken; 0 in dry-run)."""
        return 0 if self.dry_run else self.shards.electors[shard].term

    def shard(self, service: str) -> int:
        """The shard of ``service`` (0 when unsharded)."""
        return shard_of(self.cfg, service) if self.shards.n > 1 else 0

    def may_write(self, shard: int = 0) -> bool:
        """Whether a write started now lands while this daemon still leads ``shard``: its lease has more
        time left than one API call may take (the elector's call deadline, ``renew_s / 2``)."""
        e = self.shards.electors[shard]
        return self.dry_run or e.lease_left_s() > e.timeout

    def observe(self, now: float) -> dict[str, Any]:
        """One observation of the services of every shard led, shared by the shard loops of a tick; a
        source that raised raises the same to each of them (queried once a tick either way)."""
        if self._observed is None or self._observed[0] != now:
            inner = self.source.source
            if hasattr(inner, "services"):  # a PrometheusSource: query the led shards' services only
                names = {s.name for i in self._ticking for s in self.shards.services[i]}
                inner.services = [s for s in self.cfg.services if s.name in names]
            try:
                self._observed = (now, self.source.observe(now))
            except Exception as exc:  # each shard's loop gets it, not another query of a source that raised
                self._observed = (now, exc)
        got = self._observed[1]
        if isinstance(got, Exception):
            raise got
        return got

    def tick(self, only_new: bool = False) -> TickRecord | None:
        """One tick of the loop of each shard this daemon leads (building a shard's loop on the first),
        else None. ``only_new``: only the shards led that have no loop of their current term (a
        takeover's first tick, ``_tick_loop``), touching no other loop; None when there are none.

        Raises:
            TickError: a shard loop's scale write raised, once every shard led has ticked and the
                Events of the services written are written (module docstring); the first shard's.
            TickError: a shard loop's service decision raised (a bug), likewise.
            Exception: whatever a shard's loop raised before its decisions and writes (a bug in its
                observe or estimate stage, or the controller's ``prepare``), likewise once the other
                shards have ticked; the first.
        """
        led = set(range(self.shards.n)) if self.dry_run else set(self.shards.led())
        self._cover(led)  # before any loop of a shard just taken reads it
        # a later leadership (another term, even of a shard led again since the last tick) starts from
        # the cluster's state, not from ours
        stale = {i for i in self.loops if self.terms.get(i) != self._term(i)}
        if only_new:
            led = {i for i in led if i not in self.loops or i in stale}
            if not led:
                return None
            stale &= led  # the others' loops are the schedule's to drop
        else:
            stale |= set(self.loops) - led
        for i in stale:
            del self.loops[i]
            self.writers.pop(i, None)
            if self.merged is not None:
                self.merged.parts.pop(i, None)
        if not led:
            return None
        self._ticking = sorted(led)
        now = (time.monotonic() - self.started) * self.speed
        for i in sorted(led - set(self.loops)):
            self.loops[i] = self._new_loop(now, i)
            what = "" if self.shards.n == 1 else f" for shard {i}"
            log.info("%s starts its loop%s (%s)", self.identity, what, self.spec)
        record = TickRecord(now)
        found: dict[tuple[str, str], ExternalChange] = {}
        failed: list[Exception] = []
        for i in sorted(led):
            loop = self.loops[i]
            gen, share = self.shards.share(i)
            if self.shards.limits and hasattr(loop.controller, "gpu_limits"):
                loop.controller.gpu_limits = share  # the MPC plans within the shard's share
            started = time.perf_counter()
            writer = self.writers.get(i)
            found.update(writer.check_writers() if writer is not None else {})
            whole = True
            try:
                rec = loop.tick(now) if loop.cfg.services else TickRecord(now)
            except TickError as exc:  # the services written still get their Events; raised below
                rec, whole = exc.record, False
                failed.append(exc)
                self.tick_failures.labels(self.identity, str(i)).inc()
            except Exception as exc:  # raised before any decision or write of this shard (observe, estimate):
                # nothing of it to record, but the other shards are still ticked and their Events written
                failed.append(exc)
                self.tick_failures.labels(self.identity, str(i)).inc()  # the others' ticks hide it from LoopStalled
                continue
            record.services.update(rec.services)
            metrics = self.merged.parts[i] if self.merged is not None else self.metrics
            assert metrics is not None
            metrics.record(rec, time.perf_counter() - started)
            if whole:  # a partial record would report no GPUs held by its failed services
                self._report(i, gen, share, rec)
        self.ticks += not failed  # as before: a failed tick does not count (``/readyz``)
        self._record(found, record)
        for name, st in record.services.items():  # counts nobody knows are no counts, not zeros
            known = {v: n for v, n in st.applied.items() if st.estimate.variants[v].counts_known}
            log.info("%s: decision", name, extra={"service": name, "reason": st.reason, "applied": known,
                                                   "hold": st.decision.hold})
        for later in failed[1:]:  # the first is raised, and logged by ``_tick_once``
            log.error("tick failed: %s", later, exc_info=later)
        if failed:
            raise failed[0]
        return record

    def _report(self, shard: int, generation: int, share: Any, rec: TickRecord) -> None:
        """Shard ``shard``'s GPUs held and wanted after its tick, for the coordinator (sharded with limits)."""
        if not self.shards.limits:
            return
        held = {(name, v): n for name, st in rec.services.items() for v, n in st.applied.items()}
        wanted = dict(held)
        for name, st in rec.services.items():
            plan = st.decision.desired if not st.decision.hold else {}
            wanted.update({(name, v): n for v, n in plan.items()})
        self.shards.report(shard, generation, held, wanted, share)

    def _record(self, found: Mapping[tuple[str, str], ExternalChange], record: TickRecord) -> None:
        """Events and metrics of one tick: another writer's changes ``found`` before it, and each
        write's result (``EventRecorder.result``); the paused variants; the workloads' counts. The
        Events of different workloads are written concurrently (``write_events``), each workload's in
        order (its ``OtherWriter`` before its ``ScaledUp``)."""
        led = {i: self.leads(i) for i in range(self.shards.n)}  # one that lost a Lease in the tick writes no Event

        def leads(service: str) -> bool:
            return led[self.shard(service)]

        jobs: dict[tuple[str, str], list[Callable[[], object]]] = {}
        for (name, v), ext in found.items():
            self.external.labels(name, v).inc()
            if leads(name):
                jobs.setdefault((name, v), []).append(
                    partial(self.events.other_writer, name, v, ext.ours, ext.theirs, ext.quiet_s))
        for name, st in record.services.items():
            for v, res in st.actuation.items():
                if res.external is not None:
                    self.external.labels(name, v).inc()
                if leads(name) and (res.changed or res.external is not None):
                    jobs.setdefault((name, v), []).append(partial(self.events.result, name, v, res, st.reason))
        write_events(list(jobs.values()))
        for svc in self.cfg.services:
            for var in svc.variants:
                writer = self.writers.get(self.shard(svc.name))
                paused = writer is not None and writer.paused(svc.name, var.name)
                self.paused.labels(svc.name, var.name).set(1 if paused else 0)
        for (name, v), conn in self.source.connectors.items():
            labels = (name, v, conn.workload_kind, conn.name)
            state = self.source.states.get((name, v))
            if state is None:
                for gauge in (self.workload_desired, self.workload_ready):
                    with contextlib.suppress(KeyError):
                        gauge.remove(*labels)
                continue
            self.workload_desired.labels(*labels).set(state.desired)
            self.workload_ready.labels(*labels).set(state.ready)

    def run(self) -> None:
        """Elect and tick until ``stop()``; then release the Lease and close the server (module docstring)."""
        freeze_heap()
        elector = threading.Thread(target=self._elect, name="leader-election", daemon=True)
        elector.start()
        self.elected_once.wait(timeout=self.cfg.kubernetes.lease.duration_s)
        ticker = threading.Thread(target=self._tick_loop, name="tick-loop", daemon=True)
        ticker.start()
        try:
            self.stopping.wait()
        except KeyboardInterrupt:
            self.stop_signal = self.stop_signal or "SIGINT"
            raise
        finally:
            self.stopping.set()
            log.info("%s: shutting down", self.identity,
                     extra={"identity": self.identity, **({"signal": self.stop_signal} if self.stop_signal else {})})
            grace = self.cfg.kubernetes.stop_grace_s
            ticker.join(timeout=grace)
            if ticker.is_alive():
                self.abandoned = True
                log.warning("%s: the tick in progress did not finish within %g s of the stop: exiting without it",
                            self.identity, grace)
            elector.join(timeout=5)
            self.shards.release()
            if self.cache is not None:
                self.cache.stop()
            for i in range(self.shards.n):
                self.shard_gauge.labels(self.identity, str(i)).set(0)
            self.leader_gauge.labels(self.identity).set(0)
            self.server.close()
            if self.admission_server is not None:
                self.admission_server.close()

    def _tick_loop(self) -> None:
        """Tick every period until ``stop()``; missed ticks are skipped, not replayed. Between two, a
        shard the election takes (``wake``) is ticked at once, alone (``tick(only_new=True)``), and then
        with the others on the schedule, which it does not move."""
        period = self.cfg.controller.tick_s / self.speed
        due = time.monotonic()
        while not self.stopping.is_set():
            self._tick_once(False)
            due, skipped = next_due(due, period, time.monotonic())
            if skipped:
                log.warning("a tick took %.0f s: %d tick(s) skipped, not replayed",
                            time.monotonic() - (self.last_tick or 0.0), skipped)
            while not self.stopping.is_set() and self.wake.wait(max(0.0, due - time.monotonic())):
                self.wake.clear()
                if not self.stopping.is_set() and time.monotonic() < due:
                    left = due - time.monotonic()
                    if self._tick_once(True):
                        log.info("%s ticked the shards it just took, %.1f s before its next tick", self.identity, left)

    def _tick_once(self, only_new: bool) -> bool:
        """One tick (``tick``), its failure logged; whether it ticked any shard."""
        self.last_tick = self.tick_began = time.monotonic()
        try:
            return (self.tick(only_new=True) if only_new else self.tick()) is not None
        except Exception:  # a bug in one tick must not kill the daemon; the next tick retries
            log.exception("tick failed")
            return True
        finally:
            self.tick_began = None

    def stop(self, signal_name: str | None = None) -> None:
        """Ask ``run`` to finish its tick (for ``kubernetes.stop_grace_s`` at most) and shut down;
        ``signal_name`` (``SIGTERM``) is the reason its ``shutting down`` line gives."""
        self.stop_signal = self.stop_signal or signal_name
        self.stopping.set()
        self.wake.set()
