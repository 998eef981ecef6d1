"""The emulator's controller step (autoscaler.faults.kubeapi: ``deployment_delay_s``, ``replicaset_pods``)
and what the daemon's writes meet because of it: the deployment controller writes a Deployment's status
a moment after each scale (a new resourceVersion, so the daemon's write carrying the version it read
before that is a 409, re-read and retried), and on a scale-down the ReplicaSet controller removes the pods
with the lowest ``controller.kubernetes.io/pod-deletion-cost``, the ones the daemon annotated."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from autoscaler.adapters.kubernetes import KubernetesActuator
from autoscaler.adapters.workloads import Scale
from autoscaler.config.loading import parse_config
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster, removal_order

NS = "llm"
DELAY_S = 0.05
SETTLE_S = 60.0
"""A bound on a failure (CI's two cores may be busy), never a timing the tests measure."""


def wait_for(what: Callable[[], Any], why: str) -> Any:
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError(f"not within {SETTLE_S} s: {why}")


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster() as c:
        c.emu.deployment_delay_s = DELAY_S
        yield c


@pytest.fixture
def fleet(make_fleet):
    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    return parse_config({**doc, "kubernetes": {"namespace": NS, "conflict_retries": 2}}, "<test>")


def status_of(c: EmulatedCluster, name: str = "svc-h100") -> Any:
    return client.AppsV1Api(c.api()).read_namespaced_deployment(name, NS)


def observed(c: EmulatedCluster, generation: int, name: str = "svc-h100") -> Any:
    d = status_of(c, name)
    return d if d.status is not None and d.status.observed_generation == generation else None


def test_the_status_is_written_after_each_scale_and_a_write_from_before_it_is_a_409(cluster) -> None:
    apps = client.AppsV1Api(cluster.api())
    apps.create_namespaced_deployment(NS, deployment("svc-h100", NS, 2))
    first = wait_for(lambda: observed(cluster, 1), "the status of generation 1")
    assert (first.status.replicas, first.status.updated_replicas) == (2, 2)
    assert first.status.ready_replicas in (0, None)  # no pods, nobody reported any ready
    scale = apps.read_namespaced_deployment_scale("svc-h100", NS)
    scale.spec.replicas = 3
    written = apps.replace_namespaced_deployment_scale("svc-h100", NS, scale)
    after = wait_for(lambda: observed(cluster, 2), "the status of generation 2 (the scale's)")
    assert (after.status.replicas, after.status.updated_replicas) == (3, 3)
    assert int(after.metadata.resource_version) > int(written.metadata.resource_version)
    written.spec.replicas = 4  # carries the version from before the status write
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment_scale("svc-h100", NS, written)
    assert err.value.status == 409 and status_of(cluster).spec.replicas == 3


def test_the_daemons_write_meets_the_status_writers_409_and_retries(cluster, fleet) -> None:
    """The everyday conflict: the daemon reads the Scale, the deployment controller writes the status
    (here made to land in between), the daemon's PUT is a 409; it re-reads and writes once more."""
    client.AppsV1Api(cluster.api()).create_namespaced_deployment(NS, deployment("svc-h100", NS, 2))
    wait_for(lambda: observed(cluster, 1), "the first status")
    waits: list[float] = []
    act = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api(), sleep=waits.append)
    assert act.scale("svc", "h100", 3).ok and waits == []
    conn = act.connectors[("svc", "h100")]
    original = conn.read_scale
    calls = iter(range(1))

    def read_then_let_the_controller_write() -> Scale:
        got = original()
        if next(calls, None) is not None:
            wait_for(lambda: observed(cluster, 2), "the status write of the first scale")
        return got

    conn.read_scale = read_then_let_the_controller_write  # type: ignore[method-assign]
    res = act.scale("svc", "h100", 5)
    assert res.ok and (res.before, res.after, res.external) == (3, 5, None)  # a status write, not another writer
    assert waits == [0.1] and status_of(cluster).spec.replicas == 5
    assert ("PUT", "deployments/scale", "svc-h100", 409) in cluster.emu.refused


def pod(name: str, created: str, *, ready: bool = True, cost: int | None = None, phase: str = "Running",
        node: str | None = "n1") -> dict[str, Any]:
    annotations = {} if cost is None else {"controller.kubernetes.io/pod-deletion-cost": str(cost)}
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_the_removal_order_is_the_replicaset_controllers() -> None:
    """``ActivePodsWithRanks.Less`` (pkg/controller/controller_utils.go): unassigned, then Pending before
    Running, then not ready before ready, and only then the lower deletion cost (a ready pod's cost
    never puts it before a pod that is not ready), then the newest."""
    t0, t1, t2 = "2026-12-04T06:00:00Z", "2026-12-04T06:00:05Z", "2026-12-04T06:00:09Z"
    pods = [pod("old-ready", t0), pod("new-ready", t1), pod("cheap", t0, cost=-5), pod("dear", t1, cost=7),
            pod("not-ready", t0, ready=False, cost=100), pod("pending", t0, phase="Pending", node="n1"),
            pod("unassigned", t0, phase="Pending", node=None), pod("bad-cost", t2, cost=None)]
    pods[-1]["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": "x"}  # not an int: 0
    order = [p["metadata"]["name"] for p in removal_order(pods)]
    assert order == ["unassigned", "pending", "not-ready", "cheap", "bad-cost", "new-ready", "old-ready", "dear"]


def test_a_scale_down_removes_the_pod_the_daemon_annotated(cluster, fleet) -> None:
    cluster.emu.replicaset_pods = True
    client.AppsV1Api(cluster.api()).create_namespaced_deployment(NS, deployment("svc-h100", NS, 3))
    core = client.CoreV1Api(cluster.api())

    def pods() -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod(NS, label_selector="app=svc-h100").items)

    wait_for(lambda: observed(cluster, 1), "three pods")
    made = pods()
    assert len(made) == 3 and status_of(cluster).status.ready_replicas == 3
    for chosen in (made[1], made[0]):  # the middle one, then (at 2 -> 1) the oldest name: not the default pick
        act = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api())
        before = pods()
        res = act.scale("svc", "h100", len(before) - 1, remove_first=[chosen])
        assert res.ok and res.message == ""  # every cost written
        generation = status_of(cluster).metadata.generation
        wait_for(lambda g=generation: observed(cluster, g), "the scale-down")
        assert pods() == [p for p in before if p != chosen]
    assert [w[3] for w in cluster.emu.writes if w[:2] == ("DELETE", "pods")] == [made[1], made[0]]
