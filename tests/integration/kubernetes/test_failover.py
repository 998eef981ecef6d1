"""A shard's takeover against the emulated API server (issue 35: "a shard's failover within its lease
duration plus one tick, with no two writers to one workload at any time"): two daemons running their
own election and tick threads lead one shard each; one dies without a release, its shard's workload is
scaled to 0 with requests waiting, and the survivor's first write there comes after the dead leader's
lease ran out and within the lease's duration plus the election's lag, long before the survivor's next
tick on its schedule (the tick period is set to 600 s, so a takeover that waited for it could not pass);
every scale write of the run comes from the holder of its shard's Lease at that moment, in the
server's order."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from support.fleets import FLEET_DOC

from autoscaler.adapters.shards import lease_name
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.daemon import Daemon
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster
from autoscaler.state import ServiceObservation, Signals, VariantObservation

pytestmark = pytest.mark.slow  # two daemons run their threads in real time for twenty seconds or so

NS = "default"
LEASE = {"duration_s": 8.0, "renew_s": 6.0, "retry_s": 1.0}
"""Wall seconds, fleet_scale.py's: each Lease call may take ``renew_s / 2`` = 3 s and a write needs that
much of the lease left, so a loaded machine's slow calls (1 s at 3 / 2 / 0.5 s timed out at a load
average of 20) neither end leaderships nor refuse the writes."""
TICK_S = 600.0
"""``controller.tick_s`` (and ``window_s``, which may not be shorter), wall seconds at speed 1: far
longer than the test, so every write it sees is a takeover's first tick (``Daemon.wake``)."""
SETTLE_S = 120.0
"""The longest a step that normally takes a second may take on a loaded machine: a bound on a
failure, not a timing the test measures."""
MARGIN_S = 10.0
"""Slack on the takeover's deadline for a loaded machine's scheduling (two daemons' threads and the
emulated API server share one process on two shared cores), as test_shards.py and test_daemon.py
allow their takeovers."""
NAMES = ["svc-0", "svc-1"]


class Timed(list[Any]):
    """The emulator's write log with each write's monotonic time beside it (appended under the
    emulator's lock: in the server's order)."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def append(self, item: Any) -> None:
        self.at.append(time.monotonic())
        super().append(item)


class Waiting:
    """Prometheus as the loop reads it: requests waiting for every service (the replica counts come
    from the API server, ``ClusterSource``), so a workload at 0 replicas is scaled from zero."""

    deadline_s = None

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        return {n: ServiceObservation(n, now, Signals(queue_length=5.0),
                                      {v: VariantObservation(ready=0, starting=0) for v in ("h100", "a100")})
                for n in NAMES}


@dataclass
class Takeover:
    cfg: FleetConfig
    writes: Timed
    victim: str
    shard: int
    renewed: float
    """When the victim last renewed its shard's Lease (monotonic s, its clock before the call)."""
    zeroed: int
    """Index in ``writes`` just after the victim's workloads were scaled to 0."""


def fleet() -> FleetConfig:
    doc = copy.deepcopy(FLEET_DOC)
    svc = doc["services"][0]
    doc["services"] = [{**copy.deepcopy(svc), "name": n} for n in NAMES]
    doc.pop("simulator")
    doc["controller"].update(tick_s=TICK_S, window_s=TICK_S)
    doc["kubernetes"] = {"namespace": NS, "shards": 2, "service_shards": {"svc-0": 0, "svc-1": 1},
                         "lease": LEASE, "other_writer_quiet_s": 0}
    return parse_config(doc, "<test>")


def scaled(cluster: EmulatedCluster, service: str) -> int:
    apps = client.AppsV1Api(cluster.api())
    return sum(int(apps.read_namespaced_deployment(f"{service}-{v}", NS).spec.replicas) for v in ("h100", "a100"))


@pytest.fixture(scope="module")
def takeover() -> Iterator[Takeover]:
    cfg = fleet()
    with emulated_cluster() as cluster:
        writes = Timed()
        cluster.emu.writes = writes
        apps = client.AppsV1Api(cluster.api(user_agent="test"))
        for n in NAMES:
            for v in ("h100", "a100"):
                apps.create_namespaced_deployment(NS, deployment(f"{n}-{v}", NS, 0))
        daemons = {n: Daemon(cfg, "pid", Waiting(), cluster.api(user_agent=f"autoscaler/{n}"),  # type: ignore[arg-type]
                             n, "127.0.0.1:0", namespace_self="autoscaler") for n in ("a", "b")}
        threads = {n: threading.Thread(target=d.run, name=f"daemon-{n}") for n, d in daemons.items()}
        try:
            for t in threads.values():
                t.start()
            deadline = time.monotonic() + SETTLE_S
            # settled: one shard each, and each shard's workloads scaled from zero by its leader (a
            # first tick of a shard taken while spreading: none is on the schedule for 600 s)
            while not (sorted(len(d.shards.led()) for d in daemons.values()) == [1, 1]
                       and all(scaled(cluster, n) > 0 for n in NAMES)):
                assert time.monotonic() < deadline, {n: d.shards.led() for n, d in daemons.items()}
                time.sleep(0.05)
            victim = next(n for n, d in daemons.items() if d.shards.led() == [0])
            d = daemons[victim]
            d.shards.release = lambda leave=True: None  # type: ignore[method-assign]  # killed: no release
            d.stop()
            threads[victim].join(timeout=SETTLE_S)
            renewed = d.shards.electors[0].last_renewed
            assert renewed is not None
            for v in ("h100", "a100"):  # demand it can no longer answer: the new leader's first tick writes
                apps.patch_namespaced_deployment_scale(f"svc-0-{v}", NS, {"spec": {"replicas": 0}})
            zeroed = len(writes)
            survivor = daemons["b" if victim == "a" else "a"]
            deadline = time.monotonic() + SETTLE_S  # the test says what came (or did not) by then
            while not (survivor.shards.led() == [0, 1] and scaled(cluster, "svc-0") > 0) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            yield Takeover(cfg, writes, victim, 0, renewed, zeroed)
        finally:
            for dm in daemons.values():
                dm.stop()
            for t in threads.values():
                t.join(timeout=SETTLE_S)


def test_the_first_write_after_a_takeover_comes_within_the_lease_and_the_elections_lag(takeover: Takeover) -> None:
    lease = takeover.cfg.kubernetes.lease
    w = takeover.writes
    first = next((i for i in range(takeover.zeroed, len(w))
                  if w[i][1] == "deployments/scale" and w[i][3].startswith("svc-0-") and w[i][5] != "test"), None)
    assert first is not None, f"no write of the dead leader's shard within {SETTLE_S:g} s"
    assert w[first][5] != f"autoscaler/{takeover.victim}"
    took = w.at[first] - takeover.renewed
    # never before the dead leader's lease ran out: the survivor times the duration from when it saw
    # that renewal, which it wrote after ``renewed``
    assert took >= lease.duration_s, took
    # within the duration, the election's lag (the last renewal seen up to a retry late, the Lease taken
    # at the first round after it ran out: a retry more, each with client-go's jitter) and one tick's
    # work (a shard of one service), with slack for a loaded machine; far below the 600-s period the
    # survivor's next tick was due in, so a takeover that waited for its schedule fails here
    bound = lease.duration_s + 3 * lease.retry_s + MARGIN_S
    assert bound < TICK_S / 10
    assert took <= bound, took


def test_every_scale_write_comes_from_the_holder_of_its_shards_lease(takeover: Takeover) -> None:
    """Replayed in the server's order: each Lease write sets its shard's holder; each scale write by a
    daemon must come from that holder (a new leader never writes before it holds the Lease, nor the
    old one after it lost it). The log holds every PUT that passed and every POST the emulator stamped,
    including a create that then lost the race (409): only a Lease's first create counts. The test can
    fail: svc-0's workloads were written by both daemons."""
    leases = {lease_name("autoscaler-leader", 2, i): i for i in range(2)}
    shard_of = {f"{n}-{v}": i for i, n in enumerate(NAMES) for v in ("h100", "a100")}
    holder: dict[int, str | None] = {}
    held_by: list[str | None] = []  # shard 0's holders, in turn
    written: list[tuple[int, str]] = []  # svc-0's scale writes: (index in held_by, writer)
    for method, plural, _, name, body, agent in takeover.writes:
        if plural == "leases" and method in ("POST", "PUT"):
            body = body if isinstance(body, dict) else {}
            name = name or (body.get("metadata") or {}).get("name")  # a create names it in its body
            if name in leases and not (method == "POST" and leases[name] in holder):
                holder[leases[name]] = (body.get("spec") or {}).get("holderIdentity") or None
                if leases[name] == 0 and (not held_by or held_by[-1] != holder[0]):
                    held_by.append(holder[0])
        elif plural == "deployments/scale" and agent.startswith("autoscaler/"):
            shard = shard_of[name]
            assert agent == f"autoscaler/{holder.get(shard)}", (name, agent, holder)
            if shard == 0:
                written.append((len(held_by) - 1, agent))
    # the check had something to catch: shard 0 went from the victim to the survivor, which wrote it then
    survivor = "b" if takeover.victim == "a" else "a"
    assert [h for h in held_by if h][-2:] == [takeover.victim, survivor], held_by
    assert written[-1] == (len(held_by) - 1, f"autoscaler/{survivor}"), (written, held_by)
