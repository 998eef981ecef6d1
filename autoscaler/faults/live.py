"""Live-layer fault scenarios: the daemon (``autoscaler.daemon``) with the real ``kubernetes`` client
against the emulated API server (``autoscaler.faults.kubeapi``), reading a real Prometheus
(``autoscaler.faults.promserver``) that scrapes a simulated fleet served at ``SPEED`` x real time.

The fleet's replicas follow the emulated Deployments' ``spec.replicas`` (as a ReplicaSet controller
would) and their status is reported back; nothing in the simulation decides. The scenario's faults
happen at simulated times: ``prometheus_down`` stops the Prometheus process (and starts it again on
its TSDB), ``prometheus_slow`` freezes it (connections accepted, nothing answered) and lets it run
again, ``external_edit`` patches a Deployment as ``kubectl`` would, ``api_errors`` makes the API
server answer every request 503/500 or every scale write 409, ``api_hang`` holds every call of one
daemon unanswered (then 504), ``second_daemon`` starts a second candidate for the Lease (``b``, or
one more ``a``: two processes with one identity; and kills the first without a release at
``kill_s``), ``stale_lease`` leaves a Lease of a gone holder, with a day-long duration, before the
daemons start. Lease timings and the other-writer quiet period are the fleet's divided by ``SPEED``
(wall seconds); every daemon's API calls have the deadline ``autoscaler run`` gives them
(``lease.renew_s / 2``).

Harm here reads the Deployments' ``spec.replicas`` history with who wrote each change:

- ``down_on_missing_data``: an autoscaler write lowering replicas while Prometheus was down;
- ``overwrote_other_writer``: an autoscaler write to a Deployment within the quiet period after
  another writer changed it (``kubernetes.other_writer_quiet_s``);
- ``two_writers``: an autoscaler write by a daemon while another held the Lease (read twice a
  second, before and after the write), or by a second process with the leader's identity;
- ``leaderless``: a stretch longer than the lease duration plus two retries (and the half second
  between two looks at the Lease) in which the Lease was free or held by a gone process (killed, or
  the stale holder) while a daemon ran: no one decided;
- the simulator-layer rules (``autoscaler.faults.harm``) on the same history.

The row also records the pace the fleet kept against its ``SPEED`` (``autoscaler.faults.pace``): on
a loaded machine it falls behind, and a row below ``STARVED_FRACTION`` of it is marked ``starved``.

Needs the ``prometheus`` binary and kmock (``pip install -e '.[faults]'``); RuntimeError otherwise.
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.config import FleetConfig
from autoscaler.faults.harm import Counts, RunFacts, count
from autoscaler.faults.pace import PaceMeter
from autoscaler.faults.rows import make_row
from autoscaler.faults.scenario import (
    ApiErrors,
    ApiHang,
    ExternalEdit,
    PrometheusDown,
    PrometheusSlow,
    Scenario,
    SecondDaemon,
    StaleLease,
    scenario_workload,
)
from autoscaler.report import summarize
from autoscaler.simulate import SimulationRun
from autoscaler.state import ServiceEstimate
from controllers.base import Controller, Decision, Reason, hold
from controllers.registry import build

SPEED = 20.0
SCRAPE = "250ms"  # 5 simulated seconds between Prometheus scrapes
NAMESPACE = "default"
LEASE_S = {"duration_s": 60.0, "renew_s": 40.0, "retry_s": 10.0}  # simulated; / SPEED on the wall clock
LIVE_RULES = ("down_on_missing_data", "overwrote_other_writer", "two_writers", "leaderless")
POLL_S = 0.5
"""How often the harness reads the Lease's holder, wall seconds."""
SECOND = "a (second)"
"""The User-Agent name of a second process started with identity ``a``."""


class FollowTheCluster(Controller):
    """The simulated cluster's own loop decides nothing: its replicas are what the API server says."""

    def __init__(self) -> None:
        super().__init__("cluster", 15.0, 60.0, own_guard=True)

    def decide(self, est: ServiceEstimate, svc: object) -> Decision:
        return hold(est.current, "the emulated Deployments decide", Reason.FIXED)


@dataclass
class Write:
    """A change of a Deployment's ``spec.replicas``: simulated time, variant, before, after, writer."""

    time_s: float
    variant: str
    before: int
    after: int
    writer: str


@dataclass
class LiveRecord:
    """What a live run left: the writes, the Lease holder over time, the fault windows."""

    writes: list[Write] = field(default_factory=list)
    holders: list[tuple[float, str | None]] = field(default_factory=list)
    edits: list[tuple[float, str]] = field(default_factory=list)
    gone: dict[str, float] = field(default_factory=dict)
    """Identity -> simulated time its process went away (killed; the stale holder at 0)."""
    end_s: float = 0.0

    def leaderless(self, limit_s: float) -> int:
        """Stretches longer than ``limit_s`` (simulated s) with the Lease free or held by a gone process."""
        out = 0
        ends = [t for t, _ in self.holders[1:]] + [self.end_s]
        for (t, holder), end in zip(self.holders, ends, strict=True):
            if holder is None:
                start = t
            elif holder in self.gone:
                start = max(t, self.gone[holder])
            else:
                continue
            out += end - start > limit_s
        return out

    def held_by_other(self, identity: str, t: float) -> bool:
        """Whether another candidate held the Lease both at the last look before ``t`` and at the
        first after (the holder is read twice a second: a write just after a takeover is not one)."""
        before = [h for s, h in self.holders if s <= t]
        after = [h for s, h in self.holders if s > t]
        return bool(before) and before[-1] != identity and (not after or after[0] != identity)


def live_config(cfg: FleetConfig) -> FleetConfig:
    """``cfg`` with the emulated cluster's namespace and the Lease and quiet times on the wall clock."""
    kube = cfg.kubernetes.model_copy(update={
        "namespace": NAMESPACE,
        "lease": cfg.kubernetes.lease.model_copy(update={k: v / SPEED for k, v in LEASE_S.items()}),
        "other_writer_quiet_s": cfg.kubernetes.other_writer_quiet_s / SPEED,
    })
    return cfg.model_copy(update={"kubernetes": kube})


def run_live_row(sc: Scenario, name: str, cfg: FleetConfig, data: Path) -> dict[str, Any]:
    """Run ``sc`` live against controller ``name``; its row (``autoscaler.faults.suite.make_row``),
    with the pace the fleet kept (``autoscaler.faults.pace``: sampled at every sub-step of the fleet).

    Raises:
        RuntimeError: the ``prometheus`` binary or kmock is missing, or a harness part did not start.
    """
    try:
        import urllib3
        from kubernetes import client

        from autoscaler.faults.kubeapi import deployment, emulated_cluster
    except ImportError as exc:
        raise RuntimeError(f"live scenario {sc.name} needs kmock: pip install -e '.[faults]' ({exc})") from None
    from autoscaler.adapters.kubernetes import with_deadline
    from autoscaler.adapters.prometheus import connect
    from autoscaler.daemon import Daemon
    from autoscaler.faults.promserver import PROMETHEUS, PromServer, Target, require
    from autoscaler.loop.export import serve
    from autoscaler.realtime import LiveSimulation
    from autoscaler.wiring import build_source

    require(PROMETHEUS)
    cfg = live_config(cfg)
    svc = cfg.services[0]
    workload = scenario_workload(sc, data)
    record = LiveRecord()
    deps = {v.name: cfg.kubernetes.workload_name(svc.name, v.name) for v in svc.variants}
    with tempfile.TemporaryDirectory(prefix=f"faults-{sc.name}-") as tmp, emulated_cluster() as cluster:
        apps = client.AppsV1Api(cluster.api(user_agent="replicaset-controller"))
        for v in svc.variants:
            apps.create_namespaced_deployment(NAMESPACE, deployment(deps[v.name], NAMESPACE, v.start_replicas))
        live = LiveSimulation(cfg, workload, "static", steady_start=False)
        live.loop.controller = FollowTheCluster()
        seen = {v.name: v.start_replicas for v in svc.variants}
        reported: dict[str, tuple[int, int]] = {}
        agents = cluster.emu.writes

        names = {d: v for v, d in deps.items()}
        meter = PaceMeter(SPEED)

        def follow(now: float) -> None:  # the ReplicaSet controller and kubelets: pods follow spec.replicas
            meter.mark(now)
            n_writes = len(agents)
            try:
                listed = apps.list_namespaced_deployment(NAMESPACE).items
            except client.ApiException:  # the API server is down for everyone: the pods stay as they are
                return
            wanted = {names[d.metadata.name]: int(d.spec.replicas) for d in listed if d.metadata.name in names}
            for v, n in wanted.items():
                if n != seen[v]:
                    who = [w[5] for w in agents[:n_writes] if w[3] == deps[v] and _sets_replicas(w)]
                    record.writes.append(Write(now, v, seen[v], n, who[-1] if who else "?"))
                    seen[v] = n
            with live.lock:
                for v, n in wanted.items():
                    live.sim.set_replicas(svc.name, v, n)
                counts = {v: live.sim.services[svc.name].counts(v) for v in wanted}
            for v, c in counts.items():
                if reported.get(v) != (c.current, c.ready):
                    try:
                        apps.patch_namespaced_deployment_status(deps[v], NAMESPACE, {"status": {
                            "replicas": c.current, "readyReplicas": c.ready}})
                    except client.ApiException:
                        continue
                    reported[v] = (c.current, c.ready)

        server = serve(live.registry, "127.0.0.1:0")
        prom = PromServer(Path(tmp) / "prom", [Target(f"127.0.0.1:{server.port}")], scrape_interval=SCRAPE)
        stop = threading.Event()
        sim = threading.Thread(target=live.run, kwargs={"speed": SPEED, "stop": stop, "on_step": follow},
                               name=f"sim-{sc.name}")

        def make_daemon(identity: str, agent: str | None = None) -> Daemon:
            source = build_source(cfg, connect(cfg.prometheus, prom.url), speed=SPEED,  # as autoscaler run reads:
                                  window_s=build(name, cfg).window_s,  # the controller's window,
                                  measured_speed=meter.speed_over)  # rates at the pace the fleet kept
            api = with_deadline(cluster.api(user_agent=f"autoscaler/{agent or identity}"),
                                cfg.kubernetes.lease.renew_s / 2)  # as autoscaler run connects
            return Daemon(cfg, name, source, api, identity, "127.0.0.1:0", namespace_self=NAMESPACE, speed=SPEED)

        daemons = {"a": make_daemon("a")}
        threads = {"a": threading.Thread(target=daemons["a"].run, name="daemon-a")}
        for fault in sc.faults:
            if isinstance(fault, StaleLease):
                _stale_lease(fault, cluster, cfg.kubernetes.lease.name)
                record.gone[fault.holder] = 0.0
        pending = sorted((f for f in sc.faults if not isinstance(f, StaleLease)),
                         key=lambda f: getattr(f, "time_s", getattr(f, "start_s", 0.0)))
        active: list[Any] = []
        coord = client.CoordinationV1Api(cluster.api(user_agent="observer"))
        lease_name = cfg.kubernetes.lease.name
        kill_s = next((f.kill_s for f in sc.faults if isinstance(f, SecondDaemon)), None)
        start = time.monotonic()
        try:
            prom.start()
            prom.wait_for("up", lambda r: bool(r) and r[0]["value"][1] == "1")
            meter.mark(live.sim.now)
            sim.start()
            threads["a"].start()
            next_poll = 0.0
            while sim.is_alive():
                now = live.sim.now
                if time.monotonic() >= next_poll:  # the Lease's holder, twice a second
                    next_poll = time.monotonic() + POLL_S
                    try:
                        lease = coord.read_namespaced_lease(lease_name, NAMESPACE, _request_timeout=2)
                        holder = lease.spec.holder_identity if lease.spec else None
                    except (client.ApiException, OSError, urllib3.exceptions.HTTPError):
                        holder = record.holders[-1][1] if record.holders else None
                    if not record.holders or record.holders[-1][1] != holder:
                        record.holders.append((now, holder))
                while pending and getattr(pending[0], "time_s", getattr(pending[0], "start_s", 0.0)) <= now:
                    fault = pending.pop(0)
                    _begin(fault, prom, cluster, deps, record, now, daemons, threads, make_daemon)
                    if isinstance(fault, PrometheusDown | ApiErrors | ApiHang | PrometheusSlow):
                        active.append(fault)
                for fault in [f for f in active if f.end_s <= now]:
                    active.remove(fault)
                    _end(fault, prom, cluster)
                first = daemons["a"]
                if kill_s is not None and now >= kill_s and not first.stopping.is_set():
                    first.elector.release = lambda: False  # type: ignore[method-assign]  # killed: no release
                    first.stop()
                    record.gone["a"] = now
                time.sleep(0.05)
        finally:
            record.end_s = live.sim.now
            stop.set()
            cluster.emu.down = cluster.emu.conflicts = False
            cluster.emu.hung.clear()
            prom.resume()
            for d in daemons.values():
                d.stop()
            for t in threads.values():
                if t.is_alive():
                    t.join(timeout=30)
            prom.stop()
            server.close()
        run = SimulationRun(live.sim, [], name, live.sim.now, time.monotonic() - start)
        summary = summarize(run)
    return live_row(sc, name, summary, live_harm(sc, run, record, cfg), meter)


def live_row(sc: Scenario, name: str, summary: dict[str, Any], harm: dict[str, int], meter: PaceMeter
             ) -> dict[str, Any]:
    """The row of a finished live run (``make_row``) with the pace ``meter`` measured. Where the pace
    cannot be read (``pace_figures`` raises ValueError: samples that go backwards), the row keeps its
    results, with ``pace`` null and the error in one line under ``pace_failed``: the run finished, and
    its figures are not lost for a measurement beside them."""
    try:
        pace, failed = meter.figures(), None
    except ValueError as exc:
        pace, failed = None, " ".join(f"{type(exc).__name__}: {exc}".split())
    return make_row(sc, name, summary, harm, pace=pace, pace_failed=failed)


def _sets_replicas(write: tuple[Any, ...]) -> bool:
    """Whether an emulator write (method, plural, namespace, name, body, agent) set spec.replicas."""
    method, plural, _, _, body, _ = write
    return plural.endswith("/scale") or (method in ("PATCH", "PUT") and plural == "deployments"
                                         and isinstance(body, dict) and "replicas" in (body.get("spec") or {}))


def _begin(fault: Any, prom: Any, cluster: Any, deps: dict[str, str], record: LiveRecord, now: float,
           daemons: dict[str, Any], threads: dict[str, threading.Thread], make_daemon: Any) -> None:
    from kubernetes import client

    if isinstance(fault, PrometheusDown):
        prom.stop()
    elif isinstance(fault, ApiErrors):
        if fault.status == 409:
            cluster.emu.conflicts = True
        else:
            cluster.emu.down = True
    elif isinstance(fault, ExternalEdit):
        record.edits.append((now, fault.variant))
        client.AppsV1Api(cluster.api(user_agent="kubectl")).patch_namespaced_deployment(
            deps[fault.variant], NAMESPACE, {"spec": {"replicas": fault.replicas}})
    elif isinstance(fault, SecondDaemon):
        key = "b" if fault.identity == "b" else SECOND
        daemons[key] = make_daemon(fault.identity, agent=None if fault.identity == "b" else SECOND)
        threads[key] = threading.Thread(target=daemons[key].run, name=f"daemon-{key}")
        threads[key].start()
    elif isinstance(fault, ApiHang):
        cluster.emu.hung.add(f"autoscaler/{fault.daemon}")
    elif isinstance(fault, PrometheusSlow):
        prom.pause()


def _end(fault: Any, prom: Any, cluster: Any) -> None:
    if isinstance(fault, PrometheusDown):
        prom.start()
    elif isinstance(fault, PrometheusSlow):
        prom.resume()
    elif isinstance(fault, ApiHang):
        cluster.emu.hung.discard(f"autoscaler/{fault.daemon}")
    else:
        cluster.emu.down = cluster.emu.conflicts = False


def _stale_lease(fault: StaleLease, cluster: Any, name: str) -> None:
    """The Lease of a gone holder, renewed now, with the fault's duration."""
    from datetime import UTC, datetime

    from kubernetes import client

    from autoscaler.adapters.lease import micro_time

    now = micro_time(datetime.now(UTC))
    client.CoordinationV1Api(cluster.api(user_agent="kubectl")).create_namespaced_lease(NAMESPACE, client.V1Lease(
        metadata=client.V1ObjectMeta(name=name, namespace=NAMESPACE),
        spec=client.V1LeaseSpec(holder_identity=fault.holder, lease_duration_seconds=fault.duration_s,
                                acquire_time=now, renew_time=now, lease_transitions=0)))


def live_harm(sc: Scenario, run: SimulationRun, record: LiveRecord, cfg: FleetConfig) -> dict[str, int]:
    """rule -> events for a live run (module docstring)."""
    ours = [w for w in record.writes if w.writer.startswith("autoscaler/")]
    facts = RunFacts(run, _counts(record.writes, ours, run))
    out: dict[str, int] = {}
    quiet = cfg.kubernetes.other_writer_quiet_s * SPEED
    for rule in sc.harm:
        if rule.rule == "down_on_missing_data":
            windows = [(f.start_s, f.end_s) for f in sc.faults if isinstance(f, PrometheusDown | PrometheusSlow)]
            out[rule.rule] = sum(1 for w in ours if w.after < w.before and any(a <= w.time_s <= b for a, b in windows))
        elif rule.rule == "overwrote_other_writer":
            out[rule.rule] = sum(1 for w in ours for t, v in record.edits
                                 if w.variant == v and t < w.time_s <= t + quiet)
        elif rule.rule == "two_writers":
            out[rule.rule] = sum(1 for w in ours
                                 if record.held_by_other(w.writer.removeprefix("autoscaler/"), w.time_s))
        elif rule.rule == "leaderless":
            lease = cfg.kubernetes.lease  # on the wall clock here (``live_config``)
            out[rule.rule] = record.leaderless((lease.duration_s + 2 * lease.retry_s + POLL_S) * SPEED)
        else:
            out[rule.rule] = int(count(rule, facts, sc))
    return out


def _counts(writes: list[Write], ours: list[Write], run: SimulationRun) -> list[Counts]:
    """The autoscaler's writes as (time, replicas before, after, no query failure) for ``RunFacts``."""
    svc = run.sim.cfg.service(run.sim.target)
    replicas = {v.name: v.start_replicas for v in svc.variants}
    out: list[Counts] = []
    for w in writes:
        before = dict(replicas)
        replicas[w.variant] = w.after
        if w in ours:
            out.append((w.time_s, before, dict(replicas), False))
    return out
