"""The watch cache kept to the services a daemon may write (issue 35, "memory per daemon linear in the
services it leads"), against the emulated API server with the official ``kubernetes`` client: an
informer stores only its scope; a part added to the scope reads as missing (``CacheStale``), never as
absent or empty, until a list has filled it, and the watch goes on from that list; a sharded daemon's
cache holds its led shards' workloads and pods only, fills a shard it takes before that shard's first
decision (a takeover whose list fails holds instead of deciding), and drops a lost shard's objects.

Waits poll until a condition holds (bounded); nothing asserts how long anything took."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from support.fleets import FLEET_DOC
from support.polling import wait_for

from autoscaler.adapters.workloads.base import CacheStale
from autoscaler.adapters.workloads.cache import Informer, Scope, WorkloadCache, label_queries
from autoscaler.config.loading import parse_config
from autoscaler.daemon import Daemon
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster
from autoscaler.state import ServiceObservation, Signals, VariantObservation

NS = "default"
AGENT = "autoscaler/d"
WAIT_S = 30.0
NAMES = ["svc-0", "svc-1"]
VARIANTS = ["h100", "a100"]
REPLICAS = {"svc-0": 2, "svc-1": 3}
"""Each service's Deployments' replicas, all ready, with as many pods each."""


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster() as c:
        yield c


def replicas(inf: Informer, name: str) -> int | None:
    obj = inf.get(name)
    return None if obj is None else int(obj["spec"]["replicas"])


def test_an_informer_stores_its_scope_and_reads_a_widened_part_as_missing_until_it_is_listed(
        cluster: EmulatedCluster) -> None:
    """Deployments a, b, c; the informer kept to a: it stores a alone and a read of b raises (outside,
    not "absent"). Widened to a and b: b still raises until ``fill`` lists it, then reads as served,
    and the watch resumed from that list shows a later scale of b; c, outside, is never stored.
    Narrowed back to a: b is dropped and raises again."""
    apps = client.AppsV1Api(cluster.api(user_agent="someone"))
    for name, n in (("a", 1), ("b", 2), ("c", 3)):
        apps.create_namespaced_deployment(NS, deployment(name, NS, n))
    inf = Informer(client.AppsV1Api(cluster.api(user_agent=AGENT)).list_namespaced_deployment, NS,
                   f"deployments {NS}", 30.0, 60, backoff_s=0.05, backoff_max_s=0.2)
    assert not inf.rescope(Scope(names=frozenset({"a"})))  # nothing listed yet: the first list is scoped
    inf.start()
    try:
        assert inf.wait_synced(WAIT_S)
        assert sorted(inf.objects) == ["a"] and replicas(inf, "a") == 1
        with pytest.raises(CacheStale, match="outside the cache's scope"):
            inf.get("b")
        assert inf.rescope(Scope(names=frozenset({"a", "b"})))  # wider than what was listed
        with pytest.raises(CacheStale, match="not listed since"):
            inf.get("b")
        inf.fill()
        assert replicas(inf, "b") == 2 and sorted(inf.objects) == ["a", "b"]
        scale = apps.read_namespaced_deployment_scale("b", NS)
        scale.spec.replicas = 5
        apps.replace_namespaced_deployment_scale("b", NS, scale)
        apps.patch_namespaced_deployment("c", NS, {"spec": {"replicas": 7}})
        wait_for("b scaled to 5 through the watch after the fill", lambda: replicas(inf, "b") == 5)
        assert "c" not in inf.objects
        assert not inf.rescope(Scope(names=frozenset({"a"})))  # narrower: no list needed
        assert sorted(inf.objects) == ["a"]
        with pytest.raises(CacheStale, match="outside"):
            inf.get("b")
        assert inf.lists == 2
    finally:
        inf.stop()


def test_a_list_comes_in_pages_and_keeps_only_the_scope_of_each(cluster: EmulatedCluster) -> None:
    """Seven Deployments listed two at a time (``limit`` 2): four LISTs (2 + 2 + 2 + 1), each after the
    first carrying the previous page's ``continue``; the informer keeps the three of its scope, the
    same as one unpaged list keeps, at the resourceVersion of the list."""
    apps = client.AppsV1Api(cluster.api(user_agent="someone"))
    names = [f"d{i}" for i in range(7)]
    for name in names:
        apps.create_namespaced_deployment(NS, deployment(name, NS, 1))
    scope = Scope(names=frozenset({"d0", "d3", "d6"}))
    lists = []
    for page in (2, 1000):
        before = cluster.emu.requests[("list", "deployments")]
        inf = Informer(client.AppsV1Api(cluster.api(user_agent=AGENT)).list_namespaced_deployment, NS,
                       f"deployments {NS}", 30.0, 60, page=page)
        inf.rescope(scope)
        inf.fill()  # no thread: the list alone
        lists.append(cluster.emu.requests[("list", "deployments")] - before)
        assert sorted(inf.objects) == ["d0", "d3", "d6"]
        assert inf.resource_version == apps.list_namespaced_deployment(NS).metadata.resource_version
    assert lists == [4, 1]
    assert cluster.emu.pages == {}  # every token used


def pod(name: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}


def app_a_informer(cluster: EmulatedCluster, pods: dict[str, str]) -> tuple[client.CoreV1Api, Informer]:
    """``pods`` (name -> its ``app`` label) created, and a started pod informer kept to ``app=a``; the
    creating client with it."""
    core = client.CoreV1Api(cluster.api(user_agent="someone"))
    for name, app in pods.items():
        core.create_namespaced_pod(NS, pod(name, app))
    inf = Informer(client.CoreV1Api(cluster.api(user_agent=AGENT)).list_namespaced_pod, NS, f"pods {NS}", 30.0, 60,
                   backoff_s=0.05, backoff_max_s=0.2)
    inf.rescope(Scope(selectors=frozenset({sel(app="a")})))
    return core, inf.start()


def test_a_fill_closes_the_watch_of_the_narrower_selector_and_the_next_one_carries_the_wider(
        cluster: EmulatedCluster) -> None:
    """Pods a-0 (``app=a``) and b-0 (``app=b``); the informer kept to ``app=a`` watches with that selector.
    Widened to ``app=a`` or ``app=b`` and filled: the list holds b-0, and the watch in progress, which the
    server sends no event of b's on, is closed at once; the next carries ``app in (a,b)``, so b-1,
    created after, reaches the cache. Left open, the first watch would end only at its 60 s timeout,
    past the wait (as with kubernetes 31, whose ``Watch`` keeps no response to close, and urllib3 2.0.2,
    which has no ``HTTPResponse.shutdown``)."""
    core, inf = app_a_informer(cluster, {"a-0": "a", "b-0": "b"})
    try:
        assert inf.wait_synced(WAIT_S)
        wait_for("the watch of app=a connected", lambda: inf.watches == 1)
        assert sorted(inf.objects) == ["a-0"]
        assert inf.rescope(Scope(selectors=frozenset({sel(app="a"), sel(app="b")})))
        inf.fill()
        assert sorted(inf.objects) == ["a-0", "b-0"]
        core.create_namespaced_pod(NS, pod("b-1", "b"))
        wait_for("b-1 watched", lambda: "b-1" in inf.objects)
        assert [text for plural, text in cluster.emu.watch_selectors if plural == "pods"] == ["app=a",
                                                                                             "app in (a,b)"]
    finally:
        inf.stop()


def test_a_pod_relabelled_out_of_the_watched_selector_is_dropped_and_one_relabelled_in_is_kept(
        cluster: EmulatedCluster) -> None:
    """The informer kept to ``app=a`` watches with that selector, so the server sends a pod relabelled out
    of it as DELETED and one relabelled in as ADDED (as the API server does): p (``app=a``) relabelled
    ``app=b`` leaves the cache, q (``app=b``) relabelled ``app=a`` enters it, with its new labels."""
    core, inf = app_a_informer(cluster, {"p": "a", "q": "b"})
    try:
        assert inf.wait_synced(WAIT_S)
        assert sorted(inf.objects) == ["p"]
        core.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "b"}}})
        wait_for("p dropped", lambda: "p" not in inf.objects)
        core.patch_namespaced_pod("q", NS, {"metadata": {"labels": {"app": "a"}}})
        wait_for("q kept", lambda: [o["metadata"]["name"] for o in inf.select({"app": "a"})] == ["q"])
        assert sorted(inf.objects) == ["q"]
        assert [text for plural, text in cluster.emu.watch_selectors if plural == "pods"] == ["app=a"]
    finally:
        inf.stop()


def seed(cluster: EmulatedCluster, names: list[str]) -> dict[str, list[str]]:
    """Each service's Deployments (``<service>-<variant>``) at ``REPLICAS`` with their pods; and a
    Deployment of another team in the namespace, with pods. Returns service -> its pods' names."""
    pods: dict[str, list[str]] = {}
    deps, items = [], []
    for svc in [*names, "other-team"]:
        for v in VARIANTS:
            w = f"{svc}-{v}"
            n = REPLICAS.get(svc, 4)
            body = deployment(w, NS, n)
            body["status"] = {"replicas": n, "readyReplicas": n, "availableReplicas": n}
            deps.append(body)
            for k in range(n):
                items.append({"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": f"{w}-{k}", "namespace": NS, "labels": {"app": w}},
                              "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "x"}]},
                              "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
                pods.setdefault(svc, []).append(f"{w}-{k}")
    cluster.put("apps/v1/deployments", deps)
    cluster.put("v1/pods", items)
    return pods


def test_cover_keeps_the_workloads_given_and_their_pods_and_drops_what_leaves(cluster: EmulatedCluster) -> None:
    """``WorkloadCache.cover`` with svc-0's Deployments: their pods alone are held (not svc-1's, nor
    another team's); with svc-1's added, its Deployments and pods are listed and selectable; svc-1
    dropped and added back, it is listed again (what was dropped never reads as absent); with none,
    nothing is held and every selection raises."""
    pods = seed(cluster, NAMES)
    cache = WorkloadCache(cluster.api(user_agent=AGENT), NS, {"deployments"}, 30.0, 60)
    svc0 = {f"svc-0-{v}" for v in VARIANTS}
    svc1 = {f"svc-1-{v}" for v in VARIANTS}
    cache.cover({"deployments": svc0})  # before the start: the first lists are scoped
    cache.start()
    try:
        assert cache.wait_synced(WAIT_S)
        deps, pod_cache = cache.informers["deployments"], cache.informers["pods"]
        assert sorted(deps.objects) == sorted(svc0)
        cache.cover({"deployments": svc0})  # the selectors now known: svc-0's pods listed
        assert sorted(pod_cache.objects) == sorted(pods["svc-0"])
        assert [p["metadata"]["name"] for p in pod_cache.select({"app": "svc-0-a100"})] == ["svc-0-a100-0",
                                                                                            "svc-0-a100-1"]
        with pytest.raises(CacheStale):
            pod_cache.select({"app": "svc-1-a100"})
        cache.cover({"deployments": svc0 | svc1})
        assert sorted(deps.objects) == sorted(svc0 | svc1)
        assert sorted(pod_cache.objects) == sorted(pods["svc-0"] + pods["svc-1"])
        assert len(pod_cache.select({"app": "svc-1-h100"})) == REPLICAS["svc-1"]
        assert cache.held() == 4 + 2 * (REPLICAS["svc-0"] + REPLICAS["svc-1"])
        lists = (deps.lists, pod_cache.lists)
        cache.cover({"deployments": svc0})  # svc-1 lost: dropped at once, no list
        assert sorted(pod_cache.objects) == sorted(pods["svc-0"]) and (deps.lists, pod_cache.lists) == lists
        with pytest.raises(CacheStale):
            deps.get("svc-1-a100")
        cache.cover({"deployments": svc0 | svc1})  # taken back: listed again, never read as dropped
        assert (deps.lists, pod_cache.lists) == (lists[0] + 1, lists[1] + 1)
        assert replicas(deps, "svc-1-a100") == REPLICAS["svc-1"]
        assert len(pod_cache.select({"app": "svc-1-a100"})) == REPLICAS["svc-1"]
        cache.cover({})
        assert cache.held() == 0
        with pytest.raises(CacheStale):
            pod_cache.select({"app": "svc-0-a100"})
    finally:
        cache.stop()


def sel(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def test_label_queries_combine_a_shared_key_else_list_per_selector_else_the_namespace() -> None:
    """Selectors differing in one key's value become one set-based selector holding exactly their
    union (the other labels as equalities); selectors that differ otherwise one list each, up to
    ``most``; past it, a scope by names, or one keeping everything: the namespace (None)."""
    assert label_queries(Scope(selectors=frozenset({sel(app="a")}))) == ["app=a"]
    assert label_queries(Scope(selectors=frozenset({sel(app="b"), sel(app="a")}))) == ["app in (a,b)"]
    assert label_queries(Scope(selectors=frozenset({sel(app="a", team="t"), sel(app="b", team="t")}))) == [
        "app in (a,b),team=t"]
    mixed = Scope(selectors=frozenset({sel(app="a", team="t"), sel(app="b", team="u")}))  # two keys vary
    assert label_queries(mixed) == ["app=a,team=t", "app=b,team=u"]
    other = Scope(selectors=frozenset({sel(app="a"), sel(name="b")}))  # not the same keys
    assert label_queries(other) == ["app=a", "name=b"]
    assert label_queries(other, most=1) is None
    assert label_queries(Scope()) is None and label_queries(Scope(names=frozenset({"a"}))) is None
    assert label_queries(Scope(selectors=frozenset({sel(), sel(app="a")}))) is None  # {} selects all
    assert label_queries(Scope(selectors=frozenset())) is None
    three = Scope(selectors=frozenset({sel(app="a"), sel(app="b"), sel(app="c")}))
    assert label_queries(three, max_chars=len("app in (a,b)")) == ["app in (a,b)", "app in (c)"]
    assert label_queries(three, max_chars=len("app in (a)")) == ["app in (a)", "app in (b)", "app in (c)"]
    assert label_queries(three, most=2, max_chars=len("app in (a)")) is None


def test_the_pod_list_and_watch_send_the_shards_selector_and_the_server_sends_only_its_pods(
        cluster: EmulatedCluster) -> None:
    """``cover`` with svc-0's Deployments: the pod list carries ``app in (svc-0-a100,svc-0-h100)`` and
    the server sends svc-0's 4 pods of the 18 (its own count), not the namespace; svc-1 added: one list
    of 4 + 6; then a pod of svc-1 created and one of the other team: the watch, opened with the same
    selector, delivers svc-1's and the server never sends the other team's (it is not stored, and the
    watch request carries the selector)."""
    pods = seed(cluster, NAMES)
    assert sum(len(v) for v in pods.values()) == 18
    cache = WorkloadCache(cluster.api(user_agent=AGENT), NS, {"deployments"}, 30.0, 60)
    svc0 = {f"svc-0-{v}" for v in VARIANTS}
    svc1 = {f"svc-1-{v}" for v in VARIANTS}
    cache.cover({"deployments": svc0})
    cache.start()
    try:
        assert cache.wait_synced(WAIT_S)
        pod_cache = cache.informers["pods"]
        sent, lists = cluster.emu.items_sent["pods"], cluster.emu.requests[("list", "pods")]
        cache.cover({"deployments": svc0})
        assert cluster.emu.items_sent["pods"] - sent == len(pods["svc-0"]) == 4
        assert cluster.emu.requests[("list", "pods")] - lists == 1
        assert sorted(pod_cache.objects) == sorted(pods["svc-0"])
        sent = cluster.emu.items_sent["pods"]
        cache.cover({"deployments": svc0 | svc1})
        assert cluster.emu.items_sent["pods"] - sent == len(pods["svc-0"]) + len(pods["svc-1"]) == 10
        assert len(pod_cache.select({"app": "svc-1-a100"})) == REPLICAS["svc-1"]
        core = client.CoreV1Api(cluster.api(user_agent="someone"))
        for name, app in (("svc-1-a100-new", "svc-1-a100"), ("other-team-a100-new", "other-team-a100")):
            core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        # svc-1-a100 held REPLICAS["svc-1"] pods before: the new one makes one more
        wait_for("the new svc-1 pod watched",
                 lambda: len(pod_cache.select({"app": "svc-1-a100"})) == REPLICAS["svc-1"] + 1)
        assert "other-team-a100-new" not in pod_cache.objects
        watched = [text for plural, text in cluster.emu.watch_selectors if plural == "pods"]
        assert watched[-1] == "app in (svc-0-a100,svc-0-h100,svc-1-a100,svc-1-h100)", watched
    finally:
        cache.stop()


def test_selectors_that_cannot_be_combined_list_one_by_one_or_the_namespace(cluster: EmulatedCluster) -> None:
    """Two Deployments whose pod selectors differ in their keys (``app=x,tier=web``; ``name=y``): one
    list each, and the server sends their 2 + 1 pods of 6; with ``max_lists`` 1, one namespace-wide
    list (all 6 sent) keeping the same 3. Both read the same counts."""
    apps = client.AppsV1Api(cluster.api(user_agent="someone"))
    core = client.CoreV1Api(cluster.api(user_agent="someone"))
    for name, labels in (("dx", {"app": "x", "tier": "web"}), ("dy", {"name": "y"})):
        body = deployment(name, NS, 1)
        body["spec"]["selector"] = {"matchLabels": labels}
        body["spec"]["template"]["metadata"] = {"labels": labels}
        apps.create_namespaced_deployment(NS, body)
    for name, labels in (("x1", {"app": "x", "tier": "web"}), ("x2", {"app": "x", "tier": "web"}),
                         ("x3", {"app": "x"}), ("y1", {"name": "y"}), ("z1", {"name": "z"}),
                         ("z2", {"tier": "web"})):
        core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    for most, sent_want, lists_want in ((16, 3, 2), (1, 6, 1)):
        cache = WorkloadCache(cluster.api(user_agent=AGENT), NS, {"deployments"}, 30.0, 60)
        cache.informers["pods"].max_lists = most
        cache.cover({"deployments": {"dx", "dy"}})  # before the start: the first lists are scoped
        cache.start()
        assert cache.wait_synced(WAIT_S)
        sent, lists = cluster.emu.items_sent["pods"], cluster.emu.requests[("list", "pods")]
        cache.cover({"deployments": {"dx", "dy"}})  # their selectors known: the pods listed
        assert (cluster.emu.items_sent["pods"] - sent, cluster.emu.requests[("list", "pods")] - lists) == (
            sent_want, lists_want), most
        pod_cache = cache.informers["pods"]
        assert sorted(pod_cache.objects) == ["x1", "x2", "y1"]
        assert [len(pod_cache.select(s)) for s in ({"app": "x", "tier": "web"}, {"name": "y"})] == [2, 1]
        with pytest.raises(CacheStale):
            pod_cache.select({"name": "z"})
        cache.stop()


class Prom:
    """Prometheus's part of an observation: each service asked for (``services``, as the daemon sets
    it) with 1 ready replica of each variant and no signal; the counts the loop uses are the cache's."""

    deadline_s = None

    def __init__(self, services: list[Any]) -> None:
        self.services = services

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        return {s.name: ServiceObservation(s.name, now, Signals(), {v: VariantObservation(1, 0) for v in VARIANTS},
                                           history_s=3600.0) for s in self.services}


def takes(d: Daemon, led: list[int]) -> Callable[[], bool]:
    """An election round of ``d``, then whether it leads ``led``."""
    def done() -> bool:
        d.shards.round()
        return d.shards.led() == led
    return done


def shard_1_held_elsewhere(cluster: EmulatedCluster) -> client.CoordinationV1Api:
    """Shard 1's Lease held by another daemon for an hour (until the test deletes it); the Lease API."""
    leases = client.CoordinationV1Api(cluster.api())
    leases.create_namespaced_lease("autoscaler", client.V1Lease(
        metadata={"name": "autoscaler-leader-shard-1"},
        spec=client.V1LeaseSpec(holder_identity="someone-else", lease_duration_seconds=3600)))
    return leases


def sharded_daemon(cluster: EmulatedCluster) -> Daemon:
    doc = copy.deepcopy(FLEET_DOC)
    svc = doc["services"][0]
    doc["services"] = [{**copy.deepcopy(svc), "name": n} for n in NAMES]
    doc.pop("simulator")
    slow = {"duration_s": 60.0, "renew_s": 40.0, "retry_s": 5.0}  # no thread renews here
    doc["kubernetes"] = {"namespace": NS, "watch": True, "shards": 2, "lease": slow,
                         "service_shards": {"svc-0": 0, "svc-1": 1}}
    cfg = parse_config(doc, "<test>")
    return Daemon(cfg, "pid", Prom(list(cfg.services)), cluster.api(user_agent=AGENT), "d",  # type: ignore[arg-type]
                  "127.0.0.1:0", namespace_self="autoscaler")


def test_a_taken_shard_is_listed_before_its_first_decision_and_a_lost_one_is_dropped(
        cluster: EmulatedCluster) -> None:
    """Two shards (svc-0, svc-1), shard 1's Lease another's: the daemon's cache holds shard 0's
    Deployments and pods alone (not shard 1's nor another team's). The other holder's Lease goes and
    the daemon takes shard 1; its first tick's decision for svc-1 reads the counts the cluster has (3
    ready of 3, not the source's 1, not unknown): listed in that tick, before the loop read it. Then
    shard 1 is lost (its renewal overdue): the next tick drops its objects, back to shard 0's."""
    pods = seed(cluster, NAMES)
    leases = shard_1_held_elsewhere(cluster)
    d = sharded_daemon(cluster)
    try:
        assert d.cache is not None and d.cache.wait_synced(WAIT_S)
        d.shards.round()
        assert d.shards.led() == [0]
        record = d.tick()
        assert record is not None and sorted(record.services) == ["svc-0"]
        deps, pod_cache = d.cache.informers["deployments"], d.cache.informers["pods"]
        assert sorted(deps.objects) == [f"svc-0-{v}" for v in sorted(VARIANTS)]
        assert sorted(pod_cache.objects) == sorted(pods["svc-0"])
        held_one = d.cache.held()
        with pytest.raises(CacheStale):
            deps.get("svc-1-a100")
        leases.delete_namespaced_lease("autoscaler-leader-shard-1", "autoscaler")
        wait_for("shard 1 taken", takes(d, [0, 1]))
        lists = (deps.lists, pod_cache.lists)
        sent = cluster.emu.items_sent["pods"]
        record = d.tick()
        assert record is not None and sorted(record.services) == NAMES
        for v in VARIANTS:
            seen = record.services["svc-1"].estimate.variants[v]
            assert seen.counts_known and seen.current == REPLICAS["svc-1"], (v, record.services["svc-1"].reason)
        assert (deps.lists, pod_cache.lists) == (lists[0] + 1, lists[1] + 1)  # the fill: one list of each
        # the server sent the led shards' pods alone (one set-based selector), not the other team's
        assert cluster.emu.items_sent["pods"] - sent == len(pods["svc-0"]) + len(pods["svc-1"])
        assert sorted(pod_cache.objects) == sorted(pods["svc-0"] + pods["svc-1"])
        assert d.cache.held() == held_one + 2 + len(pods["svc-1"])
        d.shards.electors[1].last_renewed = -1e9  # overdue: shard 1 no longer led
        record = d.tick()
        assert record is not None and sorted(record.services) == ["svc-0"]
        assert d.cache.held() == held_one and sorted(pod_cache.objects) == sorted(pods["svc-0"])
    finally:
        d.server.close()
        if d.cache is not None:
            d.cache.stop()


def test_a_takeover_whose_list_fails_holds_instead_of_reading_an_empty_cache(cluster: EmulatedCluster) -> None:
    """The daemon takes shard 1 while its client is refused (429, the API server throttling it): the
    takeover's list fails, and svc-1's first decision has its counts unknown (a hold: nothing written
    for it), never the empty cache's "no workload, no pods". Once the server answers again, the next
    tick lists svc-1 and reads its counts."""
    seed(cluster, NAMES)
    leases = shard_1_held_elsewhere(cluster)
    d = sharded_daemon(cluster)
    try:
        assert d.cache is not None and d.cache.wait_synced(WAIT_S)
        d.shards.round()
        assert d.tick() is not None
        leases.delete_namespaced_lease("autoscaler-leader-shard-1", "autoscaler")
        wait_for("shard 1 taken", takes(d, [0, 1]))
        before = [w for w in cluster.emu.writes if w[1] == "deployments/scale"]
        cluster.emu.throttled[AGENT] = 60
        record = d.tick()
        assert record is not None and "svc-1" in record.services
        st = record.services["svc-1"]
        assert not any(st.estimate.variants[v].counts_known for v in VARIANTS), st.reason
        assert "unknown" in st.reason and st.actuation == {}
        assert [w for w in cluster.emu.writes if w[1] == "deployments/scale"] == before
        del cluster.emu.throttled[AGENT]
        record = d.tick()
        assert record is not None
        seen = record.services["svc-1"].estimate.variants["a100"]
        assert seen.counts_known and seen.current == REPLICAS["svc-1"]
    finally:
        d.server.close()
        if d.cache is not None:
            d.cache.stop()


def test_a_cache_that_keeps_nothing_lists_and_watches_nothing_until_it_is_widened(cluster: EmulatedCluster) -> None:
    """A daemon that leads no shard covers no workload: its cache reads as listed (``wait_synced``) but sends
    no list and opens no watch of Deployments or pods (the emulator counts 0 of each, where the namespace
    holds 18 pods); covered with svc-0, one list of each (4 pods sent, svc-0's) and a pod watch with svc-0's
    selector, which delivers a pod of svc-0 created afterwards; covered with nothing again, it drops them."""
    pods = seed(cluster, NAMES)
    cache = WorkloadCache(cluster.api(user_agent=AGENT), NS, {"deployments"}, 30.0, 60)
    cache.cover({"deployments": set()})
    cache.start()
    try:
        assert cache.wait_synced(WAIT_S)
        cache.cover({"deployments": set()})  # as each tick of a daemon leading nothing does
        emu = cluster.emu
        assert [emu.requests[(verb, p)] for verb in ("list", "watch") for p in ("deployments", "pods")] == [0] * 4
        assert emu.items_sent["pods"] == 0 and cache.held() == 0
        svc0 = {f"svc-0-{v}" for v in VARIANTS}
        cache.cover({"deployments": svc0})
        assert (emu.requests[("list", "deployments")], emu.requests[("list", "pods")]) == (1, 1)
        assert emu.items_sent["pods"] == len(pods["svc-0"]) == 4
        pod_cache = cache.informers["pods"]
        assert sorted(pod_cache.objects) == sorted(pods["svc-0"])
        wait_for("the pod watch opened", lambda: ("pods", "app in (svc-0-a100,svc-0-h100)") in emu.watch_selectors)
        client.CoreV1Api(cluster.api(user_agent="someone")).create_namespaced_pod(NS, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "svc-0-a100-new", "labels": {"app": "svc-0-a100"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]}})
        wait_for("the new svc-0 pod watched",
                 lambda: len(pod_cache.select({"app": "svc-0-a100"})) == REPLICAS["svc-0"] + 1)
        assert [text for plural, text in emu.watch_selectors if plural == "pods"] == ["app in (svc-0-a100,svc-0-h100)"]
        cache.cover({"deployments": set()})
        assert cache.held() == 0
    finally:
        cache.stop()
