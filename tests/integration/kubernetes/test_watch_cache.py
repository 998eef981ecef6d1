"""The watch cache (``kubernetes.watch``: autoscaler.adapters.workloads.cache) with the real ``kubernetes``
client's ``Watch`` against the emulated API server, which serves watches as Kubernetes API concepts
describe them ("Efficient detection of changes": a list's resourceVersion to resume from, events in
order, 410 Gone from a resourceVersion no longer held): the cache follows another client's create,
scale and delete; lists again after a 410; reads as missing, never zero, once its watch has been
down past ``watch_stale_s`` (the daemon's loop then holds instead of scaling down); shows our own
write at once; and with it a tick's API calls are its writes alone, counted at the server.

Waits poll the cache until a condition holds (bounded, so a broken cache fails instead of hanging);
nothing asserts how long anything took. Staleness is measured on a clock the test moves."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from support.polling import wait_for

from autoscaler.adapters.kubernetes import ClusterSource, EventRecorder, KubernetesActuator, PendingPods, watch_cache
from autoscaler.adapters.workloads.base import CacheStale
from autoscaler.adapters.workloads.cache import Informer, WorkloadCache
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster
from autoscaler.state import ServiceObservation, Signals, VariantObservation

NS = "llm"
CACHE_AGENT = "autoscaler/cache"
WAIT_S = 30.0


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster() as c:
        yield c


def informer(cluster: EmulatedCluster, clock: Callable[[], float] = time.monotonic, stale_s: float = 30.0,
             timeout_s: int = 60) -> Informer:
    apps = client.AppsV1Api(cluster.api(user_agent=CACHE_AGENT))
    inf = Informer(apps.list_namespaced_deployment, NS, f"deployments {NS}", stale_s, timeout_s, clock,
                   backoff_s=0.05, backoff_max_s=0.2)
    inf.start()
    assert inf.wait_synced(WAIT_S)
    return inf


def replicas(inf: Informer, name: str) -> int | None:
    obj = inf.get(name)
    return None if obj is None else int(obj["spec"]["replicas"])


def test_the_cache_follows_another_clients_create_scale_and_delete(cluster: EmulatedCluster) -> None:
    """Each change made through another client shows in the cache, as the watch delivers it; a LIST at
    the start and one WATCH (no relist, no GET) are all the cache asked for."""
    apps = client.AppsV1Api(cluster.api(user_agent="someone"))
    apps.create_namespaced_deployment(NS, deployment("a", NS, 2))
    inf = informer(cluster)
    try:
        assert replicas(inf, "a") == 2  # from the list
        apps.create_namespaced_deployment(NS, deployment("b", NS, 1))
        wait_for("b created", lambda: replicas(inf, "b") == 1)
        scale = apps.read_namespaced_deployment_scale("b", NS)
        scale.spec.replicas = 5
        apps.replace_namespaced_deployment_scale("b", NS, scale)
        wait_for("b scaled to 5", lambda: replicas(inf, "b") == 5)
        # the cache's resourceVersion of b is the server's: a write carrying it is not a conflict
        assert inf.get("b")["metadata"]["resourceVersion"] == apps.read_namespaced_deployment(  # type: ignore[index]
            "b", NS).metadata.resource_version
        apps.delete_namespaced_deployment("a", NS)
        wait_for("a deleted", lambda: inf.get("a") is None)
        assert replicas(inf, "b") == 5
        assert (inf.lists, inf.expired) == (1, 0)
    finally:
        inf.stop()


def test_a_watch_from_a_compacted_resource_version_is_410_and_the_cache_lists_again(
        cluster: EmulatedCluster) -> None:
    """The cache's watch is cut and kept out (429s to its client) while another client creates b and
    the server compacts its history: the rewatch from the old resourceVersion is answered 410
    (``Expired``), the cache lists again and holds b."""
    apps = client.AppsV1Api(cluster.api(user_agent="someone"))
    apps.create_namespaced_deployment(NS, deployment("a", NS, 2))
    inf = informer(cluster)
    try:
        old = inf.resource_version
        cluster.emu.throttled[CACHE_AGENT] = 1
        cluster.emu.drop_watches()
        apps.create_namespaced_deployment(NS, deployment("b", NS, 3))
        cluster.emu.compact()
        wait_for("the cache's rewatch refused", lambda: any(r[0] == "GET" and r[3] == 429
                                                             for r in cluster.emu.refused))
        assert inf.get("b") is None and inf.resource_version == old  # not seen: the watch is down
        del cluster.emu.throttled[CACHE_AGENT]
        wait_for("b listed", lambda: replicas(inf, "b") == 3)
        assert (inf.expired, inf.lists) == (1, 2)
        assert replicas(inf, "a") == 2
    finally:
        inf.stop()


def test_a_watch_down_longer_than_the_bound_reads_as_missing_not_zero(cluster: EmulatedCluster) -> None:
    """Down for ``stale_s`` or less, the last state is served; past it every read raises ``CacheStale``
    (a failed read); once the watch is back, reads come back with what changed meanwhile."""
    apps = client.AppsV1Api(cluster.api(user_agent="someone"))
    apps.create_namespaced_deployment(NS, deployment("a", NS, 2))
    clock = Clock()
    inf = informer(cluster, clock, stale_s=30.0)
    try:
        cluster.emu.throttled[CACHE_AGENT] = 1
        cluster.emu.drop_watches()
        wait_for("the watch seen down", lambda: inf.down_since is not None)
        clock.now += 30.0
        assert replicas(inf, "a") == 2  # at the bound: still served
        clock.now += 0.5
        with pytest.raises(CacheStale, match=r"watch down for 30 s \(kubernetes.watch_stale_s 30\)"):
            inf.get("a")
        with pytest.raises(CacheStale):
            inf.select({"app": "a"})
        apps.patch_namespaced_deployment("a", NS, {"spec": {"replicas": 4}})
        del cluster.emu.throttled[CACHE_AGENT]
        wait_for("back, with the change", lambda: replicas(inf, "a") == 4)
    finally:
        inf.stop()


def test_a_cache_not_listed_yet_reads_as_missing() -> None:
    inf = Informer(lambda *a, **k: None, NS, "deployments llm", 30.0, 60)  # never started
    with pytest.raises(CacheStale, match="not listed yet"):
        inf.get("a")


def fleet(make_fleet: Callable[..., FleetConfig], watch: bool, stale_s: float = 30.0) -> FleetConfig:
    doc = make_fleet(4, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    return parse_config({**doc, "kubernetes": {"namespace": NS, "watch": watch, "watch_stale_s": stale_s,
                                               "workloads": {"svc": {"h100": {"name": "w"}}}}}, "<test>")


def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def seed(cluster: EmulatedCluster, replicas: int, ready: int) -> None:
    api = cluster.api(user_agent="someone")
    body = deployment("w", NS, replicas)
    client.AppsV1Api(api).create_namespaced_deployment(NS, body)
    client.AppsV1Api(api).patch_namespaced_deployment_status("w", NS, {"status": {"readyReplicas": ready}})
    for i in range(ready):
        client.CoreV1Api(api).create_namespaced_pod(NS, pod(f"w-{i}", {"app": "w"}))


def reads(cluster: EmulatedCluster) -> int:
    """Requests other than writes and watches the server has served (or refused)."""
    return sum(n for (verb, _), n in cluster.emu.requests.items() if verb in ("get", "list"))


def writes(cluster: EmulatedCluster) -> int:
    return sum(n for (verb, _), n in cluster.emu.requests.items() if verb in ("create", "update", "patch", "delete"))


class Prom:
    """Prometheus's part of an observation: the variant at 4 ready replicas (as kube-state-metrics
    says), nothing else known."""

    deadline_s = None

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        return {"svc": ServiceObservation("svc", now, Signals(), {"h100": VariantObservation(4, 0)},
                                          history_s=3600.0)}


@pytest.mark.parametrize("watch", [False, True])
def test_with_the_cache_a_ticks_api_calls_are_its_writes(cluster: EmulatedCluster,
                                                         make_fleet: Callable[..., FleetConfig], watch: bool) -> None:
    """What one tick of the daemon's adapters sends (the writer check, the observation with the pods, a
    scale and its Event), counted at the server after the cache has listed: with the cache, the scale
    and the Event (2 writes) and no read; without, a GET of the Scale for the writer check and one
    before the write, a GET of the Deployment for the counts and one for the Event, a pod list (5)."""
    seed(cluster, 2, 2)
    cfg = fleet(make_fleet, watch)
    api = cluster.api(user_agent=CACHE_AGENT)
    cache = watch_cache(cfg.kubernetes, cfg.services, api)
    assert (cache is not None) == watch
    if cache is not None:
        assert sorted(cache.informers) == ["deployments", "pods"]
        assert cache.start().wait_synced(WAIT_S)
    try:
        act = KubernetesActuator(cfg.kubernetes, cfg.services, api, cache=cache)
        src = ClusterSource(Prom(), PendingPods(cfg.kubernetes, cfg.services, api, cache=cache), api)
        events = EventRecorder(cfg.kubernetes, cfg.services, api, "d", cache=cache)
        before_reads, before_writes = reads(cluster), writes(cluster)
        assert act.check_writers() == {}
        obs = src.observe(0.0)["svc"].variants["h100"]
        assert (obs.ready, obs.starting, obs.counts_known) == (2, 0, True)
        res = act.scale("svc", "h100", 3)
        assert res.ok and (res.before, res.after) == (2, 3)
        assert events.result("svc", "h100", res, "up") == 1
        assert writes(cluster) - before_writes == 2
        assert reads(cluster) - before_reads == (0 if watch else 5)
        # the next tick reads our write, whether or not the watch has delivered it yet: no other writer
        assert act.check_writers() == {}
        assert src.observe(1.0)["svc"].variants["h100"].starting == 1  # 3 wanted, 2 ready
        assert act.scale("svc", "h100", 3).ok  # already there: nothing written
        assert writes(cluster) - before_writes == 2
    finally:
        if cache is not None:
            cache.stop()


def test_after_a_write_the_cache_never_shows_the_state_before_it(cluster: EmulatedCluster,
                                                                 make_fleet: Callable[..., FleetConfig]) -> None:
    """With the watch held back (its client throttled after the write), the cache still reads our write,
    from the write's answer, and its resourceVersion, so the next write is not a conflict."""
    seed(cluster, 2, 2)
    cfg = fleet(make_fleet, True)
    cache = watch_cache(cfg.kubernetes, cfg.services, cluster.api(user_agent=CACHE_AGENT))
    assert cache is not None and cache.start().wait_synced(WAIT_S)
    try:
        act = KubernetesActuator(cfg.kubernetes, cfg.services, cluster.api(user_agent="autoscaler/d"), cache=cache)
        cluster.emu.throttled[CACHE_AGENT] = 1
        cluster.emu.drop_watches()
        assert act.scale("svc", "h100", 5).ok
        conn = act.connectors[("svc", "h100")]
        assert conn.read_scale().replicas == 5 and conn.state().desired == 5
        assert act.scale("svc", "h100", 6).ok  # carries the first write's resourceVersion: no 409
        assert [r for r in cluster.emu.refused if r[3] == 409] == []
        del cluster.emu.throttled[CACHE_AGENT]
        informer = cache.informer("deployments")
        assert informer is not None
        wait_for("the watch caught up with both writes", lambda: informer.overlay == {})
        assert conn.state().desired == 6
    finally:
        cache.stop()


def test_a_stale_cache_holds_the_daemons_loop_instead_of_scaling_down(
        cluster: EmulatedCluster, make_fleet: Callable[..., FleetConfig]) -> None:
    """The daemon with ``kubernetes.watch`` and the static controller (4 replicas wanted) over a
    Deployment at 6 (its source's clock sped up past the first leader's scale-down cool-down): the
    first tick scales down to 4. Someone scales it to 8 by hand and its Event's other-writer pause
    ends; with the cache fresh, the next tick would scale 8 down to 4. With the cache's watch down past
    the bound instead, the counts are unknown: the loop holds (``replica count of h100 unknown``) and
    writes nothing."""
    from autoscaler.daemon import Daemon

    seed(cluster, 6, 6)
    doc = fleet(make_fleet, True, stale_s=30.0).model_dump(mode="json", exclude_unset=True)
    doc["kubernetes"]["other_writer_quiet_s"] = 0.0
    cfg = parse_config(doc, "<test>")
    api = cluster.api(user_agent=CACHE_AGENT)
    d = Daemon(cfg, "static", Prom(), api, "d", "127.0.0.1:0", namespace_self="autoscaler",  # type: ignore[arg-type]
               speed=1e6)
    try:
        assert d.cache is not None and d.cache.wait_synced(WAIT_S)
        clock = Clock()
        for inf in d.cache.informers.values():
            inf.clock = clock
        assert d.elector.try_acquire_or_renew()
        record = d.tick()
        assert record is not None and record.services["svc"].applied["h100"] == 4, record.services["svc"].reason
        scale_writes = [w for w in cluster.emu.writes if w[1] == "deployments/scale"]
        assert [w[4] for w in scale_writes] == [4]
        cluster.emu.throttled[CACHE_AGENT] = 1  # the daemon's own client: its watches (and writes) refused
        cluster.emu.drop_watches()
        for inf in d.cache.informers.values():
            wait_for(f"{inf.what} seen down", lambda inf=inf: inf.down_since is not None)  # type: ignore[misc]
        client.AppsV1Api(cluster.api(user_agent="someone")).patch_namespaced_deployment(
            "w", NS, {"spec": {"replicas": 8}})
        clock.now += 31.0
        record = d.tick()
        assert record is not None
        st = record.services["svc"]
        assert not st.estimate.variants["h100"].counts_known
        assert "replica count of h100 unknown" in st.reason
        assert st.actuation == {}
        assert [w for w in cluster.emu.writes if w[1] == "deployments/scale"] == scale_writes
        assert not any(r[1] == "deployments" and r[0] == "PUT" for r in cluster.emu.refused)  # nothing even tried
    finally:
        d.server.close()
        if d.cache is not None:
            d.cache.stop()


def test_kinds_the_cache_does_not_hold_keep_their_gets(make_fleet: Callable[..., FleetConfig]) -> None:
    doc = make_fleet(4).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "kubernetes": {"namespace": NS, "watch": True, "workloads": {"svc": {"h100": {
        "kind": "InferenceService", "name": "w"}}}}}, "<test>")
    assert watch_cache(cfg.kubernetes, cfg.services, client.ApiClient()) is None
    assert isinstance(WorkloadCache(client.ApiClient(), NS, {"statefulsets", "leaderworkersets"}, 30.0, 60).informers,
                      dict)


def test_select_reads_the_label_index_and_answers_as_a_scan_would_through_adds_relabels_and_deletes() -> None:
    """Issue 35: ``select`` scanned every pod for each variant (10,500 x 1,500 at 500 services). It now
    reads a (label, value) index kept through the list and every event; its answer must be the scan's:
    the objects carrying every label, in the cache's order."""
    import json as _json

    class Listed:
        def __init__(self, items: list[dict[str, Any]]) -> None:
            self.data = _json.dumps({"metadata": {"resourceVersion": "1"}, "items": items}).encode()

        def release_conn(self) -> None:
            pass

    first = [pod(f"p{i}", {"app": f"w{i % 3}", "tier": "gpu" if i % 2 else "cpu"}) for i in range(12)]
    inf = Informer(lambda *a, **k: Listed(first), NS, "pods llm", 30.0, 60)
    inf._list()

    def scan(labels: dict[str, str]) -> list[str]:
        return [n for n, o in inf.objects.items()
                if all(((o.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in labels.items())]

    def check() -> None:
        for labels in ({"app": "w0"}, {"app": "w1", "tier": "gpu"}, {"tier": "cpu"}, {"app": "w2", "tier": "none"},
                       {"app": "nope"}, {}):
            assert [o["metadata"]["name"] for o in inf.select(labels)] == scan(labels), labels

    check()
    assert [o["metadata"]["name"] for o in inf.select({"app": "w0"})] == ["p0", "p3", "p6", "p9"]
    inf._apply({"type": "MODIFIED", "raw_object": pod("p3", {"app": "w1", "tier": "gpu"})})  # relabelled
    inf._apply({"type": "DELETED", "raw_object": pod("p6", {"app": "w0"})})
    inf._apply({"type": "ADDED", "raw_object": pod("p99", {"app": "w0", "tier": "gpu"})})
    inf._apply({"type": "MODIFIED", "raw_object": pod("p0", {"app": "w0"})})  # a label removed
    inf._apply({"type": "BOOKMARK", "raw_object": {"metadata": {"resourceVersion": "9"}}})
    check()
    assert [o["metadata"]["name"] for o in inf.select({"app": "w0"})] == ["p0", "p9", "p99"]
    assert [o["metadata"]["name"] for o in inf.select({"app": "w1", "tier": "gpu"})] == ["p1", "p3", "p7"]
    assert [o["metadata"]["name"] for o in inf.select({"tier": "cpu"})] == ["p2", "p4", "p8", "p10"]
