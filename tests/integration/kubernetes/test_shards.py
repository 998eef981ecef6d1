"""The daemon sharded on Leases (autoscaler.adapters.shards) against the emulated API server with the
official ``kubernetes`` client: three daemons share six shards (each leads two), one is killed
without a release and the other two take its shards over within the lease duration plus a retry,
no workload ever has two writers at once, and the coordinator's GPU shares stay within the limit
while they follow demand."""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from support.fleets import FLEET_DOC

from autoscaler.adapters.kubernetes import KubernetesActuator
from autoscaler.adapters.prometheus import connect
from autoscaler.adapters.shards import SHARES, ShardElection, shard_services
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.daemon import Daemon, LeaderOnly
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster
from autoscaler.loop.actuate import ActuationResult, ActuationStatus
from autoscaler.wiring import build_source

pytestmark = pytest.mark.slow  # three daemons and their writers run in real time for tens of seconds

SETTLE_S = 120.0
"""The longest a step that normally takes a second may take on a loaded machine: a bound on a
failure, not a timing the test measures."""
MARGIN_S = 10.0
"""Slack on the takeover deadline for a loaded machine's scheduling (three daemons, three writers and
the emulated API server share one process on two cores: on an idle machine a takeover took 3.7 s
after the last renewal, under load up to 7.5 s), as test_daemon.py allows its failover."""
NS = "default"
SPEED = 5.0  # a tick every 15 s / 5 = 3 s of wall time, so a shard's new leader ticks (and is ready) soon
LEASE = {"duration_s": 3.0, "renew_s": 2.0, "retry_s": 0.5}  # wall seconds
SHARDS = 6
NAMES = [f"svc-{i}" for i in range(9)]


def fleet_doc(names: list[str], **kube: Any) -> dict[str, Any]:
    doc = copy.deepcopy(FLEET_DOC)
    svc = doc["services"][0]
    doc["services"] = [{**copy.deepcopy(svc), "name": n} for n in names]
    doc.pop("simulator")
    doc["kubernetes"] = {"namespace": NS, **kube}
    doc["prometheus"] = {"url": "http://127.0.0.1:1"}  # nothing there: the loops hold; the writers below write
    return doc


@dataclass
class Write:
    workload: str
    writer: str
    start: float
    end: float


@dataclass
class Recorder:
    """The inner actuator of a writer: records each write that got past the daemon's gate, with the
    writer's identity and its start and end (monotonic s), around a real scale write."""

    inner: KubernetesActuator
    identity: str
    writes: list[Write]
    lock: threading.Lock

    def scale(self, service: str, variant: str, replicas: int, remove_first: Any = ()) -> ActuationResult:
        start = time.monotonic()
        res = self.inner.scale(service, variant, replicas)
        with self.lock:
            self.writes.append(Write(f"{service}-{variant}", self.identity, start, time.monotonic()))
        return res


@dataclass
class Fleet:
    cfg: FleetConfig
    cluster: EmulatedCluster
    daemons: dict[str, Daemon]
    settled: dict[str, list[int]]
    killed: dict[int, float]
    """Shard -> when the killed daemon last renewed its Lease (monotonic s)."""
    taken: dict[int, float]
    """Shard -> when a survivor was first seen leading it."""
    after: dict[str, list[int]]
    writes: list[Write] = field(default_factory=list)
    metrics: dict[str, str] = field(default_factory=dict)
    readyz: dict[str, str] = field(default_factory=dict)
    leases: dict[int, str | None] = field(default_factory=dict)


def holders(cluster: EmulatedCluster) -> dict[int, str | None]:
    api = client.CoordinationV1Api(cluster.api())
    out: dict[int, str | None] = {}
    for i in range(SHARDS):
        try:
            out[i] = api.read_namespaced_lease(f"autoscaler-leader-shard-{i}", "autoscaler").spec.holder_identity
        except client.ApiException:
            out[i] = None
    return out


def led(daemons: dict[str, Daemon]) -> dict[str, list[int]]:
    return {n: d.shards.led() for n, d in daemons.items()}


def spread_ok(by: dict[str, list[int]]) -> bool:
    """Every shard led by exactly one daemon, each leading floor(N/k) or ceil(N/k)."""
    shards = sorted(i for s in by.values() for i in s)
    k = len(by)
    return shards == list(range(SHARDS)) and all(SHARDS // k <= len(s) <= -(-SHARDS // k) for s in by.values())


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def endpoints(daemons: dict[str, Daemon], deadline: float) -> tuple[dict[str, list[int]], dict[str, str],
                                                                   dict[str, str]]:
    """One settled view: what each daemon leads, and its /metrics and /readyz read just after (again
    until the view held still across the reads, or the deadline)."""
    while True:
        settled = led(daemons)
        metrics = {n: get(f"http://127.0.0.1:{d.server.port}/metrics") for n, d in daemons.items()}
        readyz = {n: get(f"http://127.0.0.1:{d.server.port}/readyz") for n, d in daemons.items()}
        if (spread_ok(settled) and settled == led(daemons)) or time.monotonic() > deadline:
            return settled, metrics, readyz
        time.sleep(0.05)


def agreed(daemons: dict[str, Daemon], cluster: EmulatedCluster,
           deadline: float) -> tuple[dict[str, list[int]], dict[int, str | None]]:
    """What the daemons lead and the Leases' holders at one moment (again until they agree, or the deadline)."""
    while True:
        after = led(daemons)
        leases = {i: h for i, h in holders(cluster).items() if h}
        if (leases == {i: h for h, s in after.items() for i in s} and after == led(daemons)) \
                or time.monotonic() > deadline:
            return after, leases
        time.sleep(0.05)


@pytest.fixture(scope="module")
def run() -> Iterator[Fleet]:
    cfg = parse_config(fleet_doc(NAMES, shards=SHARDS, lease=LEASE, other_writer_quiet_s=0), "<test>")
    by_shard = shard_services(cfg)
    with emulated_cluster() as cluster:
        apps = client.AppsV1Api(cluster.api())
        for svc in cfg.services:
            for v in svc.variants:
                apps.create_namespaced_deployment(NS, deployment(f"{svc.name}-{v.name}", NS, 1))
        daemons = {}
        for n in ("a", "b", "c"):
            source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
            daemons[n] = Daemon(cfg, "pid", source, cluster.api(user_agent=f"autoscaler/{n}"), n, "127.0.0.1:0",
                                namespace_self="autoscaler", speed=SPEED)
        writes: list[Write] = []
        lock = threading.Lock()
        stop_writing = {n: threading.Event() for n in daemons}

        def write(name: str) -> None:  # a writer per daemon: every service, through the daemon's gate
            d = daemons[name]
            gates = {i: LeaderOnly(Recorder(KubernetesActuator(cfg.kubernetes, by_shard[i], d.api), name, writes,
                                            lock), d, i) for i in range(SHARDS)}
            n = 0
            while not stop_writing[name].is_set():
                n += 1
                for i, gate in gates.items():
                    for svc in by_shard[i]:
                        gate.scale(svc.name, "a100", 1 + n % 2)
                time.sleep(0.01)

        threads = {n: threading.Thread(target=d.run, name=f"daemon-{n}") for n, d in daemons.items()}
        writers = {n: threading.Thread(target=write, args=(n,), name=f"writer-{n}") for n in daemons}
        try:
            for t in (*threads.values(), *writers.values()):
                t.start()
            deadline = time.monotonic() + SETTLE_S
            while not spread_ok(led(daemons)) and time.monotonic() < deadline:
                time.sleep(0.05)
            while not all(d.ticks for d in daemons.values()) and time.monotonic() < deadline:
                time.sleep(0.05)  # ready once a tick of the shards led is done
            settled, metrics, readyz = endpoints(daemons, deadline)
            # c crashes: no release, no more renewals, no more writes
            victim = daemons["c"]
            victim.shards.release = lambda leave=True: None  # type: ignore[method-assign]
            stop_writing["c"].set()
            writers["c"].join(timeout=SETTLE_S)
            victim.stop()
            threads["c"].join(timeout=SETTLE_S)
            # the shards whose Lease c held when it died, and when it last renewed each (monotonic s)
            killed = {i: victim.shards.electors[i].last_renewed or 0.0 for i, h in holders(cluster).items()
                      if h == "c"}
            survivors = {n: daemons[n] for n in ("a", "b")}
            taken: dict[int, float] = {}
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline:
                by = led(survivors)
                now = time.monotonic()
                taken.update({i: now for i in killed if i not in taken and any(i in s for s in by.values())})
                if len(taken) == len(killed) and spread_ok(by):
                    break
                time.sleep(0.02)
            time.sleep(4 * LEASE["retry_s"])  # a few more rounds of writes under the new leaders
            after, leases = agreed(survivors, cluster, deadline)
            yield Fleet(cfg, cluster, daemons, settled, killed, taken, after, writes, metrics, readyz, leases)
        finally:
            for ev in stop_writing.values():
                ev.set()
            for t in writers.values():
                t.join(timeout=SETTLE_S)
            for d in daemons.values():
                d.stop()
            for t in threads.values():
                t.join(timeout=SETTLE_S)


def test_every_shard_has_one_leader_and_each_daemon_its_share(run: Fleet) -> None:
    assert spread_ok(run.settled), run.settled
    assert sorted(len(s) for s in run.settled.values()) == [2, 2, 2]  # 6 shards, 3 daemons
    assert run.leases == {i: h for h, s in run.after.items() for i in s}  # the Leases agree with the daemons


def test_metrics_and_readiness_name_the_shards_led(run: Fleet) -> None:
    for name, shards in run.settled.items():
        for i in range(SHARDS):
            want = 1.0 if i in shards else 0.0
            assert f'autoscaler_shard_leader{{identity="{name}",shard="{i}"}} {want}' in run.metrics[name]
        assert run.readyz[name] == f"ready: leads shards {','.join(map(str, shards))} of {SHARDS}\n"


def test_a_dead_daemons_shards_are_taken_over_within_the_lease(run: Fleet) -> None:
    assert run.killed and set(run.taken) == set(run.killed), (run.killed, run.taken)
    lease = run.cfg.kubernetes.lease
    took = {i: run.taken[i] - run.killed[i] for i in run.killed}
    # never before the dead leader's lease ran out (a survivor times it from when it saw the last
    # renewal, after it was written), and within a lease duration and a retry of that renewal (plus
    # slack for a loaded machine's scheduling)
    assert all(lease.duration_s <= t <= lease.duration_s + lease.retry_s + MARGIN_S for t in took.values()), took
    assert spread_ok(run.after) and sorted(len(s) for s in run.after.values()) == [3, 3], run.after


def test_no_workload_ever_has_two_writers_at_once(run: Fleet) -> None:
    by: dict[str, list[Write]] = {}
    for w in run.writes:
        by.setdefault(w.workload, []).append(w)
    assert set(by) == {f"{n}-a100" for n in NAMES}
    handed = 0
    for workload, ws in by.items():
        ws.sort(key=lambda w: w.start)
        last_end: dict[str, float] = {}
        for w in ws:
            for other, end in last_end.items():
                assert other == w.writer or end <= w.start, (workload, other, w)
            last_end[w.writer] = max(last_end.get(w.writer, 0.0), w.end)
        handed += len(last_end) > 1
    # the test can fail: the dead daemon's workloads (and those moved while spreading) had two writers
    assert handed >= len([s for i in run.killed for s in shard_services(run.cfg)[i]])


def test_gpu_shares_stay_within_the_limit_and_follow_demand() -> None:
    """Two daemons' elections (rounds called in turn, no clock: the leases never run out), four
    shards of one service each with an A100 quota of 16 GPUs. Each shard's leader plans ``needed``
    A100 replicas within its share (at most its share) and reports it. The fallback split, by hand: each
    shard's ``min_replicas`` (1) plus 12 / 4, [4, 4, 4, 4]. Shard 0 needing 8 and the others 2 (14 of 16):
    its share grows until its need is met, and stays within the limit every round whichever generation
    each leader plans with; the need moved to shard 1, shard 1's share follows and shard 0's goes down
    to what it holds (2) and a GPU or two of what is left over."""
    names = ["s0", "s1", "s2", "s3"]
    slow = {"duration_s": 30.0, "renew_s": 20.0, "retry_s": 5.0}
    doc = fleet_doc(names, shards=4, lease=slow, service_shards={n: i for i, n in enumerate(names)})
    doc["gpu_limits"] = {"quota": {"A100-80GB": 16}}
    cfg = parse_config(doc, "<test>")
    key = "quota/A100-80GB"
    with emulated_cluster() as cluster:
        es = {n: ShardElection(cfg, cluster.api(user_agent=f"autoscaler/{n}"), "autoscaler", n) for n in "ab"}
        assert es["a"].share(0)[0] == 0 and [es["a"].share(i)[1].quota["A100-80GB"] for i in range(4)] == [4] * 4
        seen: list[list[int]] = []

        def rounds(needed: list[int], n: int) -> list[list[int]]:
            out = []
            for _ in range(n):
                for e in es.values():
                    e.round()
                used = []
                for i in range(4):
                    (leader,) = [e for e in es.values() if e.leads(i)] or [None]
                    if leader is None:
                        continue
                    gen, share = leader.share(i)
                    cap = share.quota["A100-80GB"]
                    used.append(cap)
                    plan = {(names[i], "a100"): min(needed[i], cap)}  # the shard's plan, within its share
                    leader.report(i, gen, plan, plan, share)
                assert sum(used) <= 16, used  # whichever generation each leader plans with
                seen.append(used)
                out.append([es["a"].share(i)[1].quota["A100-80GB"] for i in range(4)])
            return out

        first = rounds([8, 2, 2, 2], 20)
        assert all(s[0] >= 8 and min(s) >= 2 for s in first[-6:]), first  # every need met, settled
        second = rounds([2, 8, 2, 2], 20)
        assert all(s[1] >= 8 and 2 <= s[0] <= 4 for s in second[-6:]), second
        coordinator = [e for e in es.values() if e.coordinator is not None and e.coordinator.leading]
        assert len(coordinator) == 1
        lease = client.CoordinationV1Api(cluster.api()).read_namespaced_lease("autoscaler-leader-coordinator",
                                                                                "autoscaler")
        published = json.loads(lease.metadata.annotations[SHARES])
        assert published["generation"] > 4 and sum(published["shares"][key]) <= 16
        assert published["shares"][key] == second[-1]  # what the daemons plan with is what the Lease holds


def test_a_daemon_ticks_and_writes_only_the_shards_it_leads() -> None:
    """Two shards (svc-0, svc-1 in shard 0 and svc-2 in shard 1, by ``service_shards``); the daemon
    leads shard 0 only (shard 1's Lease is another's): its tick runs shard 0's services alone, the
    shard's writes pass while it leads and are refused once its renewal is overdue, and it never
    writes shard 1's services, whose gate it has no loop for."""
    names = ["svc-0", "svc-1", "svc-2"]
    slow = {"duration_s": 60.0, "renew_s": 40.0, "retry_s": 5.0}  # no thread renews here: a slow tick must not
    cfg = parse_config(fleet_doc(names, shards=2, lease=slow, service_shards={"svc-0": 0, "svc-1": 0, "svc-2": 1}),
                       "<test>")
    with emulated_cluster() as cluster:
        for n in names:
            client.AppsV1Api(cluster.api()).create_namespaced_deployment(NS, deployment(f"{n}-a100", NS, 1))
        client.CoordinationV1Api(cluster.api()).create_namespaced_lease("autoscaler", client.V1Lease(
            metadata={"name": "autoscaler-leader-shard-1"},
            spec=client.V1LeaseSpec(holder_identity="someone-else", lease_duration_seconds=3600)))
        source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
        d = Daemon(cfg, "pid", source, cluster.api(user_agent="autoscaler/d"), "d", "127.0.0.1:0",
                   namespace_self="autoscaler")
        try:
            d.shards.round()
            assert d.shards.led() == [0] and d.leading
            record = d.tick()
            assert record is not None and sorted(record.services) == ["svc-0", "svc-1"]
            assert sorted(d.loops) == [0] and [s.name for s in d.loops[0].cfg.services] == ["svc-0", "svc-1"]
            gate = d.loops[0].actuator
            d.shards.round()  # renewed just before the write
            assert isinstance(gate, LeaderOnly) and gate.scale("svc-0", "a100", 2).ok
            d.shards.electors[0].last_renewed = -1e9  # its renewal is long overdue: it no longer leads shard 0
            res = gate.scale("svc-0", "a100", 3)
            assert res.status is ActuationStatus.NOT_LEADER and "no longer leads shard 0" in res.message
            assert d.tick() is None and not d.loops  # nothing led: no loop
            writes = [w for w in cluster.emu.writes if w[1] == "deployments/scale" and w[5] == "autoscaler/d"]
            assert [w[3] for w in writes] == ["svc-0-a100"]
        finally:
            d.server.close()
