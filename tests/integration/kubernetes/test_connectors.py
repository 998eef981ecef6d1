"""The workload connectors (autoscaler.adapters.workloads) with the real ``kubernetes`` client over HTTP
against the emulated API server (autoscaler.faults.kubeapi), one case per kind: Deployment,
StatefulSet, LeaderWorkerSet, KServe InferenceService and a custom resource with a scale
subresource. Each kind's object is put in the emulator with known counts, pods and uid; the tests
read what the connectors report and compare it with those values, and read what a write did back
from the emulator with the generic custom-objects client, not through the connector.

The LeaderWorkerSet names (``leaderworkerset.sigs.k8s.io/name`` on every pod, ``status.readyReplicas``
in groups, the scale subresource's ``.status.hpaPodSelector``) are kubernetes-sigs/lws v0.9.0's
(``api/leaderworkerset/v1/leaderworkerset_types.go``); the InferenceService's
(``spec.predictor.minReplicas`` / ``maxReplicas``, the pod labels ``serving.kserve.io/inferenceservice``
and ``component=predictor``, no scale subresource, ready = Running and Ready predictor pods, not
``modelStatus.copies.totalCopies``, which the objects here set to a different number) are kserve/kserve
v0.20.0's (``pkg/apis/serving/v1beta1/component.go``, ``inference_service_status.go``,
``pkg/constants/constants.go``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from autoscaler.adapters.kubernetes import (
    DELETION_COST,
    ClusterSource,
    EventRecorder,
    KubernetesActuator,
    PendingPods,
)
from autoscaler.adapters.workloads import CONNECTORS, WorkloadError, connector
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster
from autoscaler.loop.actuate import ActuationStatus, ExternalChange

NS = "llm"
NAME = "w"
DESIRED, READY = 3, 2


@dataclass(frozen=True)
class Kind:
    """One kind as the tests set it up: its fleet-file entry, its object, where its replicas are."""

    kind: str
    group: str
    version: str
    plural: str
    entry: dict[str, Any]
    body: Callable[[], dict[str, Any]]
    pod_labels: dict[str, str]
    replicas_path: tuple[str, ...] = ("spec", "replicas")


def _apps(kind: str) -> dict[str, Any]:
    body = deployment(NAME, NS, DESIRED) | {"kind": kind, "status": {"replicas": DESIRED, "readyReplicas": READY}}
    if kind == "StatefulSet":
        body["spec"]["serviceName"] = NAME
    return body


def _lws() -> dict[str, Any]:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": NAME},
            "spec": {"replicas": DESIRED, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {
                "containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}}}},
            "status": {"replicas": DESIRED, "readyReplicas": READY,
                       "hpaPodSelector": f"leaderworkerset.sigs.k8s.io/name={NAME},"
                                         "leaderworkerset.sigs.k8s.io/worker-index=0"}}


def _isvc() -> dict[str, Any]:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": NAME},
            "spec": {"predictor": {"minReplicas": DESIRED, "maxReplicas": DESIRED,
                                   "model": {"modelFormat": {"name": "huggingface"}, "storageUri": "hf://m"}}},
            "status": {"conditions": [{"type": "PredictorReady", "status": "False"}],
                       "modelStatus": {"copies": {"failedCopies": 0, "totalCopies": DESIRED}}}}


def _custom() -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "ModelServer", "metadata": {"name": NAME},
            "spec": {"replicas": DESIRED}, "status": {"readyReplicas": READY, "selector": f"app={NAME}"}}


KINDS = [
    Kind("Deployment", "apps", "v1", "deployments", {"kind": "Deployment"}, lambda: _apps("Deployment"),
         {"app": NAME}),
    Kind("StatefulSet", "apps", "v1", "statefulsets", {"kind": "StatefulSet"}, lambda: _apps("StatefulSet"),
         {"app": NAME}),
    Kind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", {"kind": "LeaderWorkerSet"}, _lws,
         {"leaderworkerset.sigs.k8s.io/name": NAME}),
    Kind("InferenceService", "serving.kserve.io", "v1beta1", "inferenceservices", {"kind": "InferenceService"}, _isvc,
         {"serving.kserve.io/inferenceservice": NAME, "component": "predictor"},
         ("spec", "predictor", "minReplicas")),
    Kind("ModelServer", "example.com", "v1", "modelservers",
         {"kind": "ModelServer", "api_version": "example.com/v1", "plural": "modelservers"}, _custom, {"app": NAME}),
]


def pod(name: str, labels: dict[str, str], ready: bool, unschedulable_since: str | None = None) -> dict[str, Any]:
    """A pod that is Running and Ready, or Pending (unschedulable since the given time)."""
    if unschedulable_since is None:
        status: dict[str, Any] = {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}
    else:
        status = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "lastTransitionTime": unschedulable_since,
             "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels,
                                                            "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"containers": [{"name": "vllm", "image": "x"}]}, "status": status}


@dataclass
class Setup:
    kind: Kind
    cluster: EmulatedCluster
    cfg: FleetConfig

    @property
    def api(self) -> client.ApiClient:
        return self.cluster.api()

    def raw(self) -> dict[str, Any]:
        """The object as the emulator holds it (the generic client, not the connector)."""
        k = self.kind
        obj: dict[str, Any] = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            k.group, k.version, NS, k.plural, NAME)
        return obj

    def replicas(self) -> int:
        x: Any = self.raw()
        for key in self.kind.replicas_path:
            x = x[key]
        return int(x)

    def set_replicas(self, n: int) -> None:
        """Another writer's edit of the object."""
        patch: dict[str, Any] = n  # type: ignore[assignment]
        for key in reversed(self.kind.replicas_path):
            patch = {key: patch}
        if self.kind.kind == "InferenceService":  # pinned, as a hand edit that means a count would be
            patch["spec"]["predictor"]["maxReplicas"] = max(n, 1)
        k = self.kind
        client.CustomObjectsApi(self.api).patch_namespaced_custom_object(k.group, k.version, NS, k.plural, NAME, patch)


def fleet(make_fleet: Callable[..., FleetConfig], entry: dict[str, Any], **kube: Any) -> FleetConfig:
    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    return parse_config({**doc, "kubernetes": {"namespace": NS, "workloads": {"svc": {"h100": {**entry, "name": NAME}}},
                                               **kube}}, "<test>")


@pytest.fixture(params=KINDS, ids=[k.kind for k in KINDS])
def setup(request: pytest.FixtureRequest, make_fleet: Callable[..., FleetConfig]) -> Iterator[Setup]:
    kind: Kind = request.param
    with emulated_cluster() as cluster:
        if kind.kind == "ModelServer":  # a custom resource the product has no connector of its own for
            cluster.emu.resources["example.com/v1/modelservers"] = {}
            cluster.emu.scalable.add("modelservers")
            cluster.emu.selector_paths["modelservers"] = "selector"
        api = cluster.api()
        client.CustomObjectsApi(api).create_namespaced_custom_object(kind.group, kind.version, NS, kind.plural,
                                                                     kind.body())
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(NS, pod(f"{NAME}-a", kind.pod_labels, True))
        core.create_namespaced_pod(NS, pod(f"{NAME}-b", kind.pod_labels, True))
        core.create_namespaced_pod(NS, pod(f"{NAME}-c", kind.pod_labels, False, "2026-12-01T10:00:00Z"))
        core.create_namespaced_pod(NS, pod("other-x", {"app": "other"}, False, "2026-12-01T09:00:00Z"))
        yield Setup(kind, cluster, fleet(make_fleet, kind.entry, other_writer_quiet_s=600, pending_timeout_s=300,
                                         pending_retry_s=900))


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_counts_are_the_workloads(setup: Setup) -> None:
    conn = KubernetesActuator(setup.cfg.kubernetes, setup.cfg.services, setup.api).connectors[("svc", "h100")]
    state = conn.state()
    raw = setup.raw()
    assert (state.desired, state.ready) == (DESIRED, READY)
    assert state.resource_version == raw["metadata"]["resourceVersion"] and state.uid == raw["metadata"]["uid"]
    src = ClusterSource(None, PendingPods(setup.cfg.kubernetes, setup.cfg.services, setup.api), setup.api)  # type: ignore[arg-type]
    assert src.counts("svc", "h100") == (READY, DESIRED - READY)


def test_a_scale_carries_the_version_read_and_a_stale_one_is_409(setup: Setup) -> None:
    conn = KubernetesActuator(setup.cfg.kubernetes, setup.cfg.services, setup.api).connectors[("svc", "h100")]
    read = conn.read_scale()
    assert read.replicas == DESIRED and read.resource_version == setup.raw()["metadata"]["resourceVersion"]
    conn.scale(5, read.resource_version)
    assert setup.replicas() == 5
    if setup.kind.kind == "InferenceService":  # pinned: KServe's own autoscaler has no room
        assert setup.raw()["spec"]["predictor"]["maxReplicas"] == 5
    with pytest.raises(ApiException) as err:
        conn.scale(6, read.resource_version)  # the version before our own write
    assert err.value.status == 409 and setup.replicas() == 5


def test_the_actuator_reports_before_after_and_another_writer(setup: Setup) -> None:
    clock = Clock()
    act = KubernetesActuator(setup.cfg.kubernetes, setup.cfg.services, setup.api, clock=clock)
    res = act.scale("svc", "h100", 4)
    assert res.ok and (res.before, res.after, res.external) == (DESIRED, 4, None) and setup.replicas() == 4
    setup.set_replicas(1)  # someone scales it down by hand
    clock.t = 5.0
    assert act.check_writers() == {("svc", "h100"): ExternalChange(4, 1, 600.0)}
    clock.t = 10.0
    held = act.scale("svc", "h100", 5)
    assert held.status is ActuationStatus.CONFLICT and "another writer set 1 replicas" in held.message
    assert setup.replicas() == 1
    clock.t = 611.0
    assert act.scale("svc", "h100", 5).ok and setup.replicas() == 5


def test_pending_pods_of_the_workload_mark_it_unavailable(setup: Setup) -> None:
    now = [50.0]  # the daemon's own clock
    pods = PendingPods(setup.cfg.kubernetes, setup.cfg.services, setup.api, clock=lambda: now[0])
    assert pods.unschedulable_for("svc", "h100") == 0.0  # first seen now
    now[0] = 250.0
    assert pods.unschedulable_for("svc", "h100") == pytest.approx(200)  # the other app's pod is not this one's
    assert not pods.unavailable("svc", "h100")
    now[0] = 351.0
    assert pods.unavailable("svc", "h100")


def test_events_name_the_workload_with_its_uid(setup: Setup) -> None:
    rec = EventRecorder(setup.cfg.kubernetes, setup.cfg.services, setup.api, "daemon-a")
    assert rec.scaled("svc", "h100", 3, 4, "scale up")
    (event,) = client.CoreV1Api(setup.api).list_namespaced_event(NS).items
    ref = event.involved_object
    raw = setup.raw()
    k = setup.kind
    assert (ref.api_version, ref.kind, ref.name, ref.namespace, ref.uid) == (
        f"{k.group}/{k.version}", k.kind, NAME, NS, raw["metadata"]["uid"])
    assert event.reason == "ScaledUp" and event.message.startswith("3 -> 4 replicas")


def test_an_absent_workload_is_invalid(setup: Setup) -> None:
    k = setup.kind
    client.CustomObjectsApi(setup.api).delete_namespaced_custom_object(k.group, k.version, NS, k.plural, NAME)
    res = KubernetesActuator(setup.cfg.kubernetes, setup.cfg.services, setup.api).scale("svc", "h100", 2)
    assert res.status is ActuationStatus.INVALID and "HTTP 404" in res.message


def test_the_registry_is_the_one_list_of_kinds() -> None:
    assert set(CONNECTORS) == {"Deployment", "StatefulSet", "LeaderWorkerSet", "InferenceService"}
    assert all(cls.kind == kind for kind, cls in CONNECTORS.items())


def test_an_unknown_kind_is_refused_at_startup_in_one_line(make_fleet: Callable[..., FleetConfig]) -> None:
    with emulated_cluster() as cluster:
        cfg = fleet(make_fleet, {"kind": "RayService"})  # the fleet file takes it ...
        with pytest.raises(WorkloadError, match="kind RayService is not one of Deployment, StatefulSet") as err:
            KubernetesActuator(cfg.kubernetes, cfg.services, cluster.api())  # ... the registry does not
        assert "\n" not in str(err.value)
        wrong = fleet(make_fleet, {"kind": "StatefulSet", "api_version": "apps/v2", "plural": "statefulsets"})
        with pytest.raises(WorkloadError, match="kind StatefulSet is apps/v1"):
            connector(cluster.api(), wrong.kubernetes.workload("svc", "h100"), NS)


def test_autoscaler_run_refuses_an_unknown_kind_in_one_line(tmp_path: Path,
                                                           make_fleet: Callable[..., FleetConfig]) -> None:
    import yaml
    from typer.testing import CliRunner

    from autoscaler.cli import app

    doc = make_fleet(2).model_dump(mode="json", exclude_unset=True)
    doc["kubernetes"] = {"workloads": {"svc": {"h100": {"kind": "RayService"}}}}
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump({  # never contacted: the kind is refused first
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    res = CliRunner().invoke(app, ["run", "--config", str(tmp_path / "fleet.yaml"), "--kubeconfig",
                                   str(tmp_path / "kubeconfig"), "--prometheus-url", "http://127.0.0.1:1",
                                   "--port", "0", "--host", "127.0.0.1"])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "error: kubernetes.workloads.svc.h100: kind RayService is not one of Deployment, " \
        "StatefulSet" in lines[0]
    # the fleet file's error comes before the kubeconfig's: a missing kubeconfig does not hide it
    res = CliRunner().invoke(app, ["run", "--config", str(tmp_path / "fleet.yaml"), "--kubeconfig",
                                   str(tmp_path / "missing"), "--prometheus-url", "http://127.0.0.1:1"])
    assert res.exit_code == 2 and "kubernetes.workloads.svc.h100: kind RayService" in res.output


@pytest.mark.parametrize(("entry", "message"), [
    ({"api_version": "v1", "plural": "modelservers"}, "api_version 'v1' is not group/version"),
    ({"api_version": "Example.com/v1", "plural": "modelservers"}, "api_version 'Example.com/v1' is not group/version"),
    ({"api_version": "example.com/v1", "plural": "Model_Servers"}, "plural 'Model_Servers' is not"),
    ({"api_version": "example.com/v1"}, "a custom resource needs api_version (group/version, e.g. "
                                        "leaderworkerset.x-k8s.io/v1) and plural (e.g. leaderworkersets), both or "
                                        "neither"),
])
def test_a_custom_resource_is_named_by_group_version_and_plural(make_fleet: Callable[..., FleetConfig],
                                                               entry: dict[str, str], message: str) -> None:
    """Refused when the file loads, naming what is wrong (not 'both or neither' when both are given)."""
    with pytest.raises(ConfigError, match=re.escape(f"kubernetes.workloads.svc.h100: kind ModelServer: {message}")):
        fleet(make_fleet, {"kind": "ModelServer", **entry})


def test_an_inference_service_is_scaled_through_the_daemons_tick(make_fleet: Callable[..., FleetConfig]) -> None:
    """End to end: the daemon leads, reads the InferenceService's counts, writes its predictor's
    replicas with the static controller's count, and records the Event from the write's result; a
    hand edit is seen at the next tick, recorded once, and left alone."""
    from autoscaler.daemon import Daemon
    from autoscaler.state import ServiceObservation, Signals, VariantObservation

    class Quiet:  # Prometheus: the service exists, nothing is known yet of its pods
        deadline_s = None  # as PrometheusSource's: its observe has no common deadline

        def observe(self, now: float) -> dict[str, ServiceObservation]:
            return {"svc": ServiceObservation("svc", now, Signals(), {"h100": VariantObservation(0, 0)},
                                              history_s=3600.0)}

    doc = make_fleet(4, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "kubernetes": {"namespace": NS, "workloads": {"svc": {"h100": {
        "kind": "InferenceService", "name": NAME}}}}}, "<test>")
    with emulated_cluster() as cluster:
        api = cluster.api(user_agent="autoscaler/d")
        custom = client.CustomObjectsApi(api)
        body = _isvc()
        body["spec"]["predictor"].update(minReplicas=2, maxReplicas=2)
        custom.create_namespaced_custom_object("serving.kserve.io", "v1beta1", NS, "inferenceservices", body)
        for i in range(2):
            client.CoreV1Api(api).create_namespaced_pod(NS, pod(f"{NAME}-{i}", {
                "serving.kserve.io/inferenceservice": NAME, "component": "predictor"}, True))
        d = Daemon(cfg, "static", Quiet(), api, "d", "127.0.0.1:0",  # type: ignore[arg-type]
                   namespace_self="autoscaler")
        try:
            assert d.elector.try_acquire_or_renew()
            record = d.tick()
            assert record is not None
            isvc = custom.get_namespaced_custom_object("serving.kserve.io", "v1beta1", NS, "inferenceservices",
                                                       NAME)
            assert (isvc["spec"]["predictor"]["minReplicas"], isvc["spec"]["predictor"]["maxReplicas"]) == (4, 4)
            assert [w[:4] for w in cluster.emu.writes if w[1] == "inferenceservices" and w[0] != "POST"] == [
                ("PUT", "inferenceservices", NS, NAME)]  # one write of the object, by the daemon
            (event,) = client.CoreV1Api(api).list_namespaced_event(NS).items
            assert event.reason == "ScaledUp" and event.message.startswith("2 -> 4 replicas")
            assert (event.involved_object.kind, event.involved_object.uid) == ("InferenceService",
                                                                               isvc["metadata"]["uid"])
            labels = {"service": "svc", "variant": "h100", "kind": "InferenceService", "workload": NAME}
            assert d.registry.get_sample_value("autoscaler_workload_ready_replicas", labels) == 2.0  # the Ready pods
            assert d.registry.get_sample_value("autoscaler_workload_desired_replicas", labels) == 2.0  # read first
            # someone pins the predictor to 1 by hand: the next tick sees it before writing, records it
            # and leaves the InferenceService alone
            custom.patch_namespaced_custom_object("serving.kserve.io", "v1beta1", NS, "inferenceservices", NAME,
                                                  {"spec": {"predictor": {"minReplicas": 1, "maxReplicas": 1}}})
            assert d.tick() is not None
            isvc = custom.get_namespaced_custom_object("serving.kserve.io", "v1beta1", NS, "inferenceservices",
                                                       NAME)
            assert isvc["spec"]["predictor"]["minReplicas"] == 1
            other = [e for e in client.CoreV1Api(api).list_namespaced_event(NS).items if e.reason == "OtherWriter"]
            assert len(other) == 1 and other[0].involved_object.uid == isvc["metadata"]["uid"]
            assert "replicas set to 1 by another writer (the autoscaler wrote 4)" in other[0].message
            sv = {"service": "svc", "variant": "h100"}
            assert d.registry.get_sample_value("autoscaler_external_writes_total", sv) == 1.0
            assert d.registry.get_sample_value("autoscaler_paused", sv) == 1.0
        finally:
            d.server.close()


ISVC = next(k for k in KINDS if k.kind == "InferenceService")


def _isvc_setup(cluster: EmulatedCluster, make_fleet: Callable[..., FleetConfig], predictor: Any,
                pods: int) -> KubernetesActuator:
    """An InferenceService with ``predictor`` as its spec.predictor and ``pods`` Running, Ready predictor pods."""
    api = cluster.api()
    body = _isvc()
    body["spec"]["predictor"] = predictor
    client.CustomObjectsApi(api).create_namespaced_custom_object(ISVC.group, ISVC.version, NS, ISVC.plural, body)
    for i in range(pods):
        client.CoreV1Api(api).create_namespaced_pod(NS, pod(f"{NAME}-{i}", ISVC.pod_labels, True))
    cfg = fleet(make_fleet, ISVC.entry)
    return KubernetesActuator(cfg.kubernetes, cfg.services, api)


@pytest.mark.parametrize(("predictor", "expected"), [
    ({"maxReplicas": 10}, 5),  # minReplicas unset (1), KServe's autoscaler runs 5 pods: 5, not 1
    ({"minReplicas": 2, "maxReplicas": 10}, 5),  # the same above a minimum of 2
    ({"minReplicas": 7, "maxReplicas": 10}, 7),  # pods still starting: at least the minimum
    ({"minReplicas": 4, "maxReplicas": 4}, 4),  # pinned (as this connector writes it): the pin
    ({"minReplicas": 0, "maxReplicas": 1}, 0),  # a scale to zero as this connector writes it
])
def test_an_autoscaled_inference_service_counts_its_pods(make_fleet: Callable[..., FleetConfig],
                                                         predictor: dict[str, Any], expected: int) -> None:
    with emulated_cluster() as cluster:
        act = _isvc_setup(cluster, make_fleet, predictor, pods=5)
        conn = act.connectors[("svc", "h100")]
        assert conn.read_scale().replicas == expected
        assert conn.state().desired == expected
        if expected == 5:  # a write to 3 is a scale-down from the 5 KServe runs, reported as such
            res = act.scale("svc", "h100", 3)
            assert res.status is ActuationStatus.APPLIED and (res.before, res.after) == (5, 3)


@pytest.mark.parametrize("predictor", [None, {"minReplicas": "3", "maxReplicas": 3}, {"minReplicas": True},
                                       {"minReplicas": 2, "maxReplicas": -1}])
def test_a_malformed_inference_service_is_invalid_not_zero(make_fleet: Callable[..., FleetConfig],
                                                           predictor: Any) -> None:
    """A predictor that is not an object or bounds that are not counts: the write is INVALID naming the
    field, the counts are unknown (None), never 0, and no exception escapes the tick."""
    with emulated_cluster() as cluster:
        act = _isvc_setup(cluster, make_fleet, predictor, pods=2)
        res = act.scale("svc", "h100", 2)
        assert res.status is ActuationStatus.INVALID and "spec.predictor" in res.message
        cfg = fleet(make_fleet, ISVC.entry)
        src = ClusterSource(None, PendingPods(cfg.kubernetes, cfg.services, cluster.api()),  # type: ignore[arg-type]
                            cluster.api())
        assert src.counts("svc", "h100") is None


def test_deletion_costs_go_where_a_replicaset_reads_them_and_earlier_ones_are_cleared(setup: Setup) -> None:
    """Only the ReplicaSet controller reads ``controller.kubernetes.io/pod-deletion-cost`` (Kubernetes
    1.22+, ``pkg/controller/replicaset``): a StatefulSet removes its highest ordinal, a LeaderWorkerSet
    its highest group, so for them no pod is patched. For a Deployment the cost set before one
    scale-down is cleared before the next, so a pod that stayed is not the next one removed."""
    act = KubernetesActuator(setup.cfg.kubernetes, setup.cfg.services, setup.api)
    core = client.CoreV1Api(setup.api)

    def costs() -> dict[str, str | None]:
        return {p: (core.read_namespaced_pod(f"{NAME}-{p}", NS).metadata.annotations or {}).get(DELETION_COST)
                for p in ("a", "b", "c")}

    assert act.scale("svc", "h100", DESIRED - 1, remove_first=[f"{NAME}-a"]).ok
    if setup.kind.kind != "Deployment":
        assert costs() == {"a": None, "b": None, "c": None}
        assert not [w for w in setup.cluster.emu.writes if w[:2] == ("PATCH", "pods")]
        return
    assert costs() == {"a": "-1", "b": None, "c": None}
    assert act.scale("svc", "h100", DESIRED - 2, remove_first=[f"{NAME}-b"]).ok  # pod a stayed
    assert costs() == {"a": None, "b": "-1", "c": None}
