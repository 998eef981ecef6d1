"""The emulated API server behaves as the real one where the daemon depends on it, so a bug the real
one would expose fails here too: a replace drops what the body leaves out, the server sets an
object's uid, creationTimestamp and generation, and a Lease's MicroTime must carry its fraction
(Kubernetes API conventions; apimachinery ``metav1.MicroTime``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster

NS = "llm"


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster() as c:
        yield c


def test_a_replace_drops_what_the_body_leaves_out(cluster: EmulatedCluster) -> None:
    core = client.CoreV1Api(cluster.api())
    core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"),
                                                             data={"a": "1", "b": "2"}))
    cm = core.read_namespaced_config_map("c", NS)
    cm.data = {"a": "3"}
    core.replace_namespaced_config_map("c", NS, cm)
    assert core.read_namespaced_config_map("c", NS).data == {"a": "3"}  # a patch would have kept b


def test_the_server_sets_uid_creation_time_and_generation(cluster: EmulatedCluster) -> None:
    apps = client.AppsV1Api(cluster.api())
    body = deployment("d", NS, 1)
    body["metadata"].update(uid="mine", generation=7)
    created = apps.create_namespaced_deployment(NS, body)
    assert created.metadata.uid != "mine" and created.metadata.generation == 1
    assert created.metadata.creation_timestamp is not None
    created.metadata.uid = "changed"
    created.spec.replicas = 3
    after = apps.replace_namespaced_deployment("d", NS, created)
    assert after.metadata.uid == apps.read_namespaced_deployment("d", NS).metadata.uid != "changed"
    assert after.metadata.generation == 2  # the spec changed
    after.metadata.labels = {"x": "y"}
    assert apps.replace_namespaced_deployment("d", NS, after).metadata.generation == 2  # metadata only


def test_a_lease_time_without_microseconds_is_a_400(cluster: EmulatedCluster) -> None:
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
            "spec": {"holderIdentity": "a", "renewTime": "2026-12-04T06:30:00+00:00"}}
    with pytest.raises(ApiException) as err:
        client.CoordinationV1Api(cluster.api()).create_namespaced_lease(NS, body)
    assert err.value.status == 400 and "renewTime" in str(err.value.body)
    # The official client parses a time string and writes it with isoformat(), which drops a fraction of
    # .000000 too, so only a time off the whole second passes (what adapters.lease.micro_time ensures).
    body["spec"]["renewTime"] = "2026-12-04T06:30:00.000000Z"
    with pytest.raises(ApiException):
        client.CoordinationV1Api(cluster.api()).create_namespaced_lease(NS, body)
    body["spec"]["renewTime"] = "2026-12-04T06:30:00.000001Z"
    created = client.CoordinationV1Api(cluster.api()).create_namespaced_lease(NS, body)
    assert created.spec.renew_time.microsecond == 1


def test_selectors_are_honoured_or_refused_never_ignored(cluster: EmulatedCluster) -> None:
    core = client.CoreV1Api(cluster.api())
    for name, app in (("p1", "a"), ("p2", "b")):
        core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
                                   "labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    names = [p.metadata.name for p in core.list_namespaced_pod(NS, label_selector="app!=a").items]
    assert names == ["p2"]
    assert [p.metadata.name for p in core.list_namespaced_pod(NS, field_selector="metadata.name=p1").items] == ["p1"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, label_selector="app in (a,b)")  # set-based: not evaluated here
    assert err.value.status == 400
