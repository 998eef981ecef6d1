"""The Kubernetes adapters (autoscaler.adapters.kubernetes, autoscaler.adapters.lease) with the real
``kubernetes`` client over HTTP against the emulated API server (tests/kubeapi.py): scale applied
through the scale subresource with its resourceVersion, 409 retried, 403 named, an outage reported
and nothing written, deletion costs before a scale-down, the admission ConfigMap, Events, and leader
election on a Lease."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from autoscaler.adapters.kubernetes import DELETION_COST, ConfigMapSink, EventRecorder, KubernetesActuator
from autoscaler.adapters.lease import LeaderElector
from autoscaler.adapters.workloads import Scale
from autoscaler.config import LeaseConfig
from autoscaler.config.loading import parse_config
from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster
from autoscaler.loop.actuate import ActuationStatus, ExternalChange

NS = "llm"


@pytest.fixture
def cluster(make_fleet) -> Iterator[EmulatedCluster]:
    with emulated_cluster() as c:
        client.AppsV1Api(c.api()).create_namespaced_deployment(NS, deployment("svc-h100", NS, 2))
        yield c


@pytest.fixture
def fleet(make_fleet):
    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    return parse_config({**doc, "kubernetes": {"namespace": NS, "conflict_retries": 2}}, "<test>")


def replicas(c: EmulatedCluster, name: str = "svc-h100") -> int:
    return int(client.AppsV1Api(c.api()).read_namespaced_deployment(name, NS).spec.replicas)


def test_scale_goes_through_the_scale_subresource_with_its_resource_version(cluster, fleet) -> None:
    act = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api())
    res = act.scale("svc", "h100", 5)
    assert res.ok
    assert replicas(cluster) == 5
    put = [w[:5] for w in cluster.emu.writes if w[1] == "deployments/scale"]
    assert put == [("PUT", "deployments/scale", NS, "svc-h100", 5)]
    again = act.scale("svc", "h100", 5)  # already there (metrics lag the API server): no second write
    assert again.ok and not again.changed
    assert len([w for w in cluster.emu.writes if w[1] == "deployments/scale"]) == 1
    assert (res.before, res.after, res.changed, res.external) == (2, 5, True, None)  # what the daemon records


def test_a_conflict_is_re_read_and_retried_then_reported(cluster, fleet) -> None:
    waits: list[float] = []
    act = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api(), sleep=waits.append)
    apps = client.AppsV1Api(cluster.api())
    conn = act.connectors[("svc", "h100")]
    original = conn.read_scale
    edits = iter(range(2))  # the Deployment's metadata changes between our read and our write, twice

    def read_then_edit() -> Scale:
        got = original()
        if next(edits, None) is not None:
            apps.patch_namespaced_deployment("svc-h100", NS, {"metadata": {"annotations": {"x": str(time.time())}}})
        return got

    conn.read_scale = read_then_edit  # type: ignore[method-assign]
    assert act.scale("svc", "h100", 6).ok  # the third attempt reads the current version
    assert replicas(cluster) == 6 and waits == [0.1, 0.2]
    edits = iter(range(10))  # it keeps changing: three attempts (conflict_retries 2), then conflict
    res = act.scale("svc", "h100", 7)
    assert res.status is ActuationStatus.CONFLICT and "after 3 attempts" in res.message
    assert replicas(cluster) == 6 and res.external is None and not res.changed


def test_another_writer_is_left_alone_for_the_quiet_period(cluster, make_fleet) -> None:
    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "kubernetes": {"namespace": NS, "other_writer_quiet_s": 600}}, "<test>")
    clock = Clock()
    act = KubernetesActuator(cfg.kubernetes, cfg.services, cluster.api(), clock=clock)
    apps = client.AppsV1Api(cluster.api())
    assert act.scale("svc", "h100", 4).ok  # our write
    apps.patch_namespaced_deployment("svc-h100", NS, {"spec": {"replicas": 1}})  # someone scales it down
    clock.t = 5.0
    found = act.check_writers()  # seen at the next tick, before any write
    assert found == {("svc", "h100"): ExternalChange(4, 1, 600.0)} and act.paused("svc", "h100")
    clock.t = 10.0
    res = act.scale("svc", "h100", 5)
    assert res.status is ActuationStatus.CONFLICT and "another writer set 1 replicas" in res.message
    assert replicas(cluster) == 1 and res.external is None and act.paused("svc", "h100")  # reported once
    clock.t = 400.0  # still within 600 s of it: left alone, no write
    assert act.scale("svc", "h100", 5).status is ActuationStatus.CONFLICT and replicas(cluster) == 1
    clock.t = 611.0  # quiet for 600 s: ours again
    assert act.scale("svc", "h100", 5).ok and replicas(cluster) == 5 and not act.paused("svc", "h100")
    # a change during our own write (the 409's re-read shows other replicas) is another writer's too
    conn = act.connectors[("svc", "h100")]
    original = conn.read_scale
    calls = iter(range(1))

    def read_then_scale() -> Scale:
        got = original()
        if next(calls, None) is not None:
            apps.patch_namespaced_deployment("svc-h100", NS, {"spec": {"replicas": 2}})
        return got

    conn.read_scale = read_then_scale  # type: ignore[method-assign]
    res = act.scale("svc", "h100", 6)
    assert res.status is ActuationStatus.CONFLICT and replicas(cluster) == 2
    assert res.external == ExternalChange(5, 2, 600.0)
    # a new leader's actuator remembers nothing: what it reads first is the state, not another writer
    fresh = KubernetesActuator(cfg.kubernetes, cfg.services, cluster.api(), clock=clock)
    assert fresh.check_writers() == {} and fresh.connectors[("svc", "h100")].last == 2
    # and a variant it has never written is watched from that first read on
    apps.patch_namespaced_deployment("svc-h100", NS, {"spec": {"replicas": 7}})
    assert fresh.check_writers() == {("svc", "h100"): ExternalChange(2, 7, 600.0)} and fresh.paused("svc", "h100")


def test_forbidden_names_the_missing_permission_and_writes_nothing(cluster, fleet) -> None:
    cluster.emu.forbidden.add(("update", "deployments", "scale"))
    res = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api()).scale("svc", "h100", 4)
    assert res.status is ActuationStatus.FORBIDDEN
    assert res.message.startswith("forbidden: update deployments/scale llm/svc-h100 (API group apps)")
    assert 'cannot update resource "deployments/scale"' in res.message and "\n" not in res.message
    assert replicas(cluster) == 2


def test_an_api_server_down_is_unreachable_and_changes_nothing(cluster, fleet) -> None:
    cluster.emu.down = True
    res = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api()).scale("svc", "h100", 0)
    assert res.status is ActuationStatus.UNREACHABLE and "HTTP 503" in res.message
    cluster.emu.down = False
    assert replicas(cluster) == 2
    cluster.stop()  # nothing listening at all: still one line, no exception
    res = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api()).scale("svc", "h100", 0)
    assert res.status is ActuationStatus.UNREACHABLE and "\n" not in res.message


def test_a_missing_workload_is_invalid(cluster, fleet) -> None:
    client.AppsV1Api(cluster.api()).delete_namespaced_deployment("svc-h100", NS)
    res = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api()).scale("svc", "h100", 3)
    assert res.status is ActuationStatus.INVALID and "HTTP 404" in res.message


def test_pods_to_remove_first_get_the_lowest_deletion_cost_before_a_scale_down(cluster, fleet) -> None:
    core = client.CoreV1Api(cluster.api())
    for pod in ("svc-h100-a", "svc-h100-b"):
        core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
                                        "spec": {"containers": [{"name": "vllm", "image": "x"}]}})
    act = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api())
    assert act.scale("svc", "h100", 1, remove_first=["svc-h100-b"]).ok
    costs = {p: (core.read_namespaced_pod(p, NS).metadata.annotations or {}).get(DELETION_COST)
             for p in ("svc-h100-a", "svc-h100-b")}
    assert costs == {"svc-h100-a": None, "svc-h100-b": "-1"}
    order = [(w[1], w[3]) for w in cluster.emu.writes if w[1] in ("pods", "deployments/scale") and w[0] != "POST"]
    assert order == [("pods", "svc-h100-b"), ("deployments/scale", "svc-h100")]  # the cost is set first
    # a scale-up never touches pods; a failed annotation does not stop the scale-down
    cluster.emu.forbidden.add(("patch", "pods", None))
    res = act.scale("svc", "h100", 0, remove_first=["svc-h100-a"])
    assert res.ok and "deletion cost not set on svc-h100-a" in res.message and replicas(cluster) == 0


def test_admission_thresholds_go_to_a_configmap_per_service(cluster, fleet) -> None:
    sink = ConfigMapSink(fleet.kubernetes, cluster.api())
    assert sink.publish("svc", {"critical": None, "standard": 1.0, "sheddable": 0.0}).ok
    assert sink.publish("svc", {"critical": None, "standard": 0.5, "sheddable": 0.0}).ok  # replaced
    cm = client.CoreV1Api(cluster.api()).read_namespaced_config_map("autoscaler-admission-svc", NS)
    assert {k: v for k, v in cm.data.items() if k != "thresholds.json"} == {
        "critical": "none", "standard": "0.5", "sheddable": "0"}
    doc = json.loads(cm.data["thresholds.json"])
    assert doc["kind"] == "AdmissionThresholds" and doc["generation"] == 2
    assert doc["services"]["svc"]["thresholds"] == {"critical": None, "standard": 0.5, "sheddable": 0.0}
    bad = sink.publish("svc", {"standard": float("nan")})
    assert bad.status is ActuationStatus.INVALID
    assert client.CoreV1Api(cluster.api()).read_namespaced_config_map(
        "autoscaler-admission-svc", NS).data["standard"] == "0.5"  # the last good set stays
    cluster.emu.forbidden.add(("update", "configmaps", None))
    res = sink.publish("svc", {"standard": 2.0})
    assert res.status is ActuationStatus.FORBIDDEN and "update configmaps llm/autoscaler-admission-svc" in res.message


def test_a_scale_decision_is_an_event_on_the_workload(cluster, fleet) -> None:
    rec = EventRecorder(fleet.kubernetes, fleet.services, cluster.api(), "daemon-a")
    assert rec.scaled("svc", "h100", 2, 4, "scale up: slo_mean_ratio=0.61 vs setpoint 0.3")
    (event,) = client.CoreV1Api(cluster.api()).list_namespaced_event(NS).items
    assert event.reason == "ScaledUp" and event.involved_object.name == "svc-h100"
    assert event.involved_object.kind == "Deployment" and event.message.startswith("2 -> 4 replicas: scale up")
    cluster.emu.forbidden.add(("create", "events", None))
    assert not rec.scaled("svc", "h100", 4, 3, "scale down")  # logged, never raised


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_one_candidate_leads_and_a_follower_takes_over_after_the_lease(cluster) -> None:
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    clock = Clock()
    a = LeaderElector(cluster.api(), "autoscaler-leader", "autoscaler", "a", cfg, clock)
    b = LeaderElector(cluster.api(), "autoscaler-leader", "autoscaler", "b", cfg, clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    for _ in range(5):  # a renews every 2 s: b never takes over
        clock.t += 2
        assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    # a dies (stops renewing): b takes over once a full lease duration passed since the renewal it saw
    clock.t += 14
    assert not b.try_acquire_or_renew()
    clock.t += 1.5
    assert b.try_acquire_or_renew() and b.leading
    clock.t += 2
    assert not a.try_acquire_or_renew() and not a.leading  # a comes back as a follower
    lease = client.CoordinationV1Api(cluster.api()).read_namespaced_lease("autoscaler-leader", "autoscaler")
    assert lease.spec.holder_identity == "b" and lease.spec.lease_duration_seconds == 15


def test_a_released_lease_is_taken_at_the_next_try_and_an_outage_stops_leading(cluster) -> None:
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    clock = Clock()
    a = LeaderElector(cluster.api(), "l", "autoscaler", "a", cfg, clock)
    b = LeaderElector(cluster.api(), "l", "autoscaler", "b", cfg, clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    assert a.release() and not a.leading
    clock.t += 2
    assert b.try_acquire_or_renew()  # no need to wait out the 15 s
    # the API server goes away: b keeps leading until renew_s without a renewal, then stops
    cluster.emu.down = True
    clock.t += 2
    assert b.try_acquire_or_renew()
    clock.t += 8
    assert not b.try_acquire_or_renew() and not b.leading
    cluster.emu.down = False
    assert b.release() is False  # it is not leading any more: nothing to release


def test_of_two_candidates_racing_for_a_free_lease_only_one_wins(cluster) -> None:
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    a = LeaderElector(cluster.api(), "l", "autoscaler", "a", cfg, Clock())
    b = LeaderElector(cluster.api(), "l", "autoscaler", "b", cfg, Clock())
    assert a.try_acquire_or_renew() and a.release()  # the lease exists and is free
    stale = b.api.read_namespaced_lease("l", "autoscaler")  # b reads the free lease...
    assert not stale.spec.holder_identity
    assert a.try_acquire_or_renew()  # ...a takes it first...
    stale.spec = b._spec(None, 1)
    with pytest.raises(ApiException) as err:  # ...and b's write, from the stale read, is a 409
        b.api.replace_namespaced_lease("l", "autoscaler", stale)
    assert err.value.status == 409
    lease = client.CoordinationV1Api(cluster.api()).read_namespaced_lease("l", "autoscaler")
    assert lease.spec.holder_identity == "a"


def pod(name: str, labels: dict[str, str], phase: str, unschedulable_since: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if unschedulable_since is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "lastTransitionTime": unschedulable_since,
                                 "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels,
                                                            "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"containers": [{"name": "vllm", "image": "x"}]}, "status": status}


def test_a_variant_whose_pods_stay_unschedulable_is_marked_unavailable_for_a_while(cluster, make_fleet) -> None:
    from autoscaler.adapters.kubernetes import PendingPods

    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "kubernetes": {"namespace": NS, "pending_timeout_s": 300, "pending_retry_s": 900}},
                       "<test>")
    core = client.CoreV1Api(cluster.api())
    labels = {"app": "svc-h100"}  # the Deployment's selector
    core.create_namespaced_pod(NS, pod("svc-h100-a", labels, "Running"))
    core.create_namespaced_pod(NS, pod("svc-h100-b", labels, "Pending", "2026-12-01T10:00:00Z"))
    core.create_namespaced_pod(NS, pod("other-x", {"app": "other"}, "Pending", "2026-12-01T09:00:00Z"))
    t0 = 1000.0  # the daemon's own (monotonic) clock: the pods' timestamps are never compared with it
    now = [t0]
    pods = PendingPods(cfg.kubernetes, cfg.services, cluster.api(), clock=lambda: now[0])
    assert pods.unschedulable_for("svc", "h100") == 0.0  # first seen unschedulable now
    now[0] = t0 + 200
    assert pods.unschedulable_for("svc", "h100") == pytest.approx(200)  # the other app's pod is not ours
    assert not pods.unavailable("svc", "h100")  # 200 s < 300 s: still coming
    now[0] = t0 + 301
    assert pods.unavailable("svc", "h100")
    core.delete_namespaced_pod("svc-h100-b", NS)  # given up: the mark holds for pending_retry_s
    now[0] = t0 + 301 + 899
    assert pods.unavailable("svc", "h100")
    now[0] = t0 + 301 + 901
    assert not pods.unavailable("svc", "h100")  # retried: it may grow again
    cluster.emu.down = True
    assert pods.unschedulable_for("svc", "h100") is None and not pods.unavailable("svc", "h100")


def test_the_loop_gives_an_unavailable_variants_demand_to_the_others(make_fleet) -> None:
    from autoscaler.loop.runner import available
    from autoscaler.state import ServiceEstimate, Signals, VariantObservation

    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    svc = cfg.services[0]
    est = ServiceEstimate(service="svc", time_s=0.0, signals=Signals.of({}),
                          variants={"h100": VariantObservation(ready=2, starting=3, unavailable=True)},
                          weights={"h100": 1.0}, idle=False, capacity_rps=5.0, ready_capacity_rps=2.0, starting=3)
    view = available(svc, est)
    (v,) = view.variants
    assert (v.max_replicas, v.min_replicas) == (2, 1) and v.cap == 2  # capped at its ready replicas
    assert svc.variants[0].max_replicas == 8  # the fleet itself is untouched
    est.variants["h100"].unavailable = False
    assert available(svc, est) is svc


def test_statefulsets_and_custom_resources_scale_through_their_subresource(cluster, make_fleet) -> None:
    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    doc["services"][0]["variants"].append({**doc["services"][0]["variants"][0], "name": "lws"})
    cfg = parse_config({**doc, "kubernetes": {"namespace": NS, "workloads": {"svc": {
        "h100": {"kind": "StatefulSet", "name": "svc-sts"},
        "lws": {"kind": "LeaderWorkerSet", "api_version": "leaderworkerset.x-k8s.io/v1", "plural": "leaderworkersets",
                "name": "svc-lws"}}}}}, "<test>")
    cluster.emu.resources["leaderworkerset.x-k8s.io/v1/leaderworkersets"] = {}
    cluster.emu.scalable.add("leaderworkersets")
    sts = deployment("svc-sts", NS, 1) | {"kind": "StatefulSet"}
    sts["spec"]["serviceName"] = "svc-sts"
    client.AppsV1Api(cluster.api()).create_namespaced_stateful_set(NS, sts)
    custom = client.CustomObjectsApi(cluster.api())
    custom.create_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets", {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "svc-lws", "namespace": NS}, "spec": {"replicas": 1}})
    act = KubernetesActuator(cfg.kubernetes, cfg.services, cluster.api())
    assert act.scale("svc", "h100", 3).ok and act.scale("svc", "lws", 2).ok
    assert client.AppsV1Api(cluster.api()).read_namespaced_stateful_set("svc-sts", NS).spec.replicas == 3
    lws = custom.get_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets", "svc-lws")
    assert lws["spec"]["replicas"] == 2
    assert [w[1] for w in cluster.emu.writes if w[1].endswith("/scale")] == [
        "statefulsets/scale", "leaderworkersets/scale"]
    cluster.emu.forbidden.add(("update", "leaderworkersets", "scale"))
    res = act.scale("svc", "lws", 4)
    assert res.status is ActuationStatus.FORBIDDEN
    assert "leaderworkersets/scale llm/svc-lws (API group leaderworkerset.x-k8s.io)" in res.message


def test_pods_with_the_fewest_requests_in_flight_go_first_when_the_controller_names_none() -> None:
    from autoscaler.loop.runner import idle_first
    from autoscaler.state import PodObservation, ServiceEstimate, Signals, VariantObservation

    def p(name: str, running: float, waiting: float, variant: str = "h100") -> PodObservation:
        return PodObservation(variant=variant, kv_usage=0.1, waiting=waiting, running=running, kv_usage_max=0.1,
                              waiting_max=waiting, name=name)

    est = ServiceEstimate(service="svc", time_s=0.0, signals=Signals.of({}),
                          variants={"h100": VariantObservation(ready=3, starting=0),
                                    "a100": VariantObservation(ready=1, starting=0)},
                          weights={"h100": 1.0, "a100": 1.0}, idle=False, capacity_rps=4.0, ready_capacity_rps=4.0,
                          starting=0, pods=[p("h-1", 8, 2), p("h-2", 1, 0), p("h-3", 4, 0), p("a-1", 0, 0, "a100")])
    assert idle_first(est, {"h100": 1, "a100": 1}) == {"h100": ["h-2", "h-3", "h-1"]}  # a100 does not shrink


def test_leadership_ends_once_a_renewal_is_overdue_even_if_no_call_returns(cluster) -> None:
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    clock = Clock()
    a = LeaderElector(cluster.api(), "l", "autoscaler", "a", cfg, clock)
    assert a.try_acquire_or_renew() and a.leads()
    clock.t += 9.9  # no renewal attempt returned since (a hung call): still within renew_s
    assert a.leads()
    clock.t += 0.2
    assert a.leading and not a.leads()  # the flag says nothing: the renewal's age decides
    lease = client.CoordinationV1Api(cluster.api()).read_namespaced_lease("l", "autoscaler")
    assert lease.spec.lease_duration_seconds == 15


def test_a_fractional_lease_duration_is_truncated_as_client_go_writes_it(cluster) -> None:
    """client-go ``tryAcquireOrRenew``: ``LeaseDurationSeconds: int(LeaseDuration / time.Second)``."""
    a = LeaderElector(cluster.api(), "l", "autoscaler", "a", LeaseConfig(duration_s=3.7, renew_s=2.5, retry_s=2),
                      Clock())
    assert a.try_acquire_or_renew()
    lease = client.CoordinationV1Api(cluster.api()).read_namespaced_lease("l", "autoscaler")
    assert lease.spec.lease_duration_seconds == 3


@pytest.mark.parametrize(("duration", "renew", "retry"), [
    (15, 10, 9),  # client-go NewLeaderElector: renewDeadline must be greater than retryPeriod*JitterFactor (10.8)
    (2.4, 2.3, 1),  # the Lease holds 2 s: a follower could take over while the leader still writes
    (15, 15, 2),  # leaseDuration must be greater than renewDeadline
])
def test_lease_timings_client_go_refuses_are_refused(duration: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError, match=r"1.2 x retry_s < renew_s < duration_s in whole seconds"):
        LeaseConfig(duration_s=duration, renew_s=renew, retry_s=retry)


def test_a_renewal_on_a_whole_second_is_a_valid_micro_time(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Lease's times are ``metav1.MicroTime``: the API server parses RFC3339Micro and refuses a time
    without its six fraction digits (HTTP 400), which ``isoformat()`` drops at .000000."""
    import autoscaler.adapters.lease as lease_mod

    class WholeSecond(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime(2026, 12, 4, 6, 30, 0, tzinfo=tz)

    monkeypatch.setattr(lease_mod, "datetime", WholeSecond)
    a = LeaderElector(cluster.api(), "l", "autoscaler", "a", LeaseConfig(), Clock())
    assert a.try_acquire_or_renew() and a.leads()
    raw = cluster.emu.writes[-1][4]["spec"]
    assert raw["renewTime"] == raw["acquireTime"] == "2026-12-04T06:30:00.000001+00:00"
    assert a.try_acquire_or_renew()  # the renewal re-sends the acquire time read back: still six digits


def test_replica_counts_come_from_the_api_server(cluster, fleet) -> None:
    from autoscaler.adapters.kubernetes import ClusterSource, PendingPods
    from autoscaler.state import ServiceObservation, Signals, VariantObservation

    class Lagging:  # what kube-state-metrics said a scrape ago
        def observe(self, now: float) -> dict[str, ServiceObservation]:
            return {"svc": ServiceObservation("svc", now, Signals(), {"h100": VariantObservation(ready=4, starting=0)})}

    client.AppsV1Api(cluster.api()).patch_namespaced_deployment_status(
        "svc-h100", NS, {"status": {"replicas": 2, "readyReplicas": 1}})
    src = ClusterSource(Lagging(), PendingPods(fleet.kubernetes, fleet.services, cluster.api()), cluster.api())
    vo = src.observe(0.0)["svc"].variants["h100"]
    assert (vo.ready, vo.starting, vo.counts_known) == (1, 1, True)  # spec 2, 1 ready
    cluster.emu.down = True  # the API server does not answer: what Prometheus said stands
    vo = src.observe(0.0)["svc"].variants["h100"]
    assert (vo.ready, vo.starting) == (4, 0)


def test_the_observation_carries_how_long_the_variants_pods_have_been_unschedulable(cluster, make_fleet) -> None:
    """``VariantObservation.unschedulable_s`` from the pods' ``PodScheduled`` condition as the API
    server serves it, timed on the daemon's clock from the first read that saw the pod so; 0.0 with no
    such pod; None (never 0) when the pods cannot be read, or are not read because the variant is
    marked unavailable."""
    from autoscaler.adapters.kubernetes import ClusterSource, PendingPods
    from autoscaler.state import ServiceObservation, Signals, VariantObservation

    class Prom:
        def observe(self, now: float) -> dict[str, ServiceObservation]:
            return {"svc": ServiceObservation("svc", now, Signals(), {"h100": VariantObservation(ready=1, starting=1)})}

    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "kubernetes": {"namespace": NS, "pending_timeout_s": 300, "pending_retry_s": 900}},
                       "<test>")
    core = client.CoreV1Api(cluster.api())
    labels = {"app": "svc-h100"}
    core.create_namespaced_pod(NS, pod("svc-h100-a", labels, "Running"))
    now = [500.0]
    src = ClusterSource(Prom(), PendingPods(cfg.kubernetes, cfg.services, cluster.api(), clock=lambda: now[0]),
                        cluster.api())
    assert src.observe(0.0)["svc"].variants["h100"].unschedulable_s == 0.0  # a pod, none unschedulable
    core.create_namespaced_pod(NS, pod("svc-h100-b", labels, "Pending", "2026-12-01T10:00:00Z"))
    core.create_namespaced_pod(NS, pod("svc-h100-c", labels, "Pending"))  # Pending, not (yet) unschedulable
    now[0] = 515.0
    assert src.observe(0.0)["svc"].variants["h100"].unschedulable_s == 0.0  # first seen so now
    now[0] = 545.0
    vo = src.observe(0.0)["svc"].variants["h100"]
    assert (vo.unschedulable_s, vo.unavailable) == (pytest.approx(30.0), False)
    core.create_namespaced_pod(NS, pod("svc-h100-d", labels, "Pending", "2026-12-01T10:05:00Z"))
    now[0] = 560.0
    assert src.observe(0.0)["svc"].variants["h100"].unschedulable_s == pytest.approx(45.0)  # the longest
    core.delete_namespaced_pod("svc-h100-b", NS)  # scheduled or gone: the younger one is the longest now
    now[0] = 575.0
    assert src.observe(0.0)["svc"].variants["h100"].unschedulable_s == pytest.approx(15.0)
    cluster.emu.down = True  # nothing read: unknown, not 0
    vo = src.observe(0.0)["svc"].variants["h100"]
    assert vo.unschedulable_s is None and not vo.unavailable
    cluster.emu.down = False
    now[0] = 975.0  # d, first seen so at 560 s, stays: 415 s >= pending_timeout_s 300 marks the variant
    vo = src.observe(0.0)["svc"].variants["h100"]
    assert vo.unavailable and vo.unschedulable_s == pytest.approx(415.0)
    now[0] += 15  # marked: the pods are not read again, so the age is unknown
    vo = src.observe(0.0)["svc"].variants["h100"]
    assert vo.unavailable and vo.unschedulable_s is None


@pytest.mark.parametrize(("kube", "message"), [
    ({"admission_configmap": "cm-{svc}"}, "may hold only the placeholder {service}"),
    ({"admission_configmap": "CM_{service}"}, "is not a valid Kubernetes object name"),
    ({"lease": {"name": ""}}, "lease name '' is not a valid Kubernetes object name"),
    ({"lease": {"duration_s": 1e12}}, "less than or equal to 3600"),
    ({"workloads": {"svc": {"h100": {"name": ""}}}}, "name '' is not a valid Kubernetes object name"),
    ({"workloads": {"svc": {"h100": {"kind": "LeaderWorkerSet", "api_version": "a/b/c", "plural": "lws"}}}},
     "api_version 'a/b/c' is not group/version"),
])
def test_kubernetes_settings_that_would_fail_later_are_refused(make_fleet, kube: dict, message: str) -> None:
    from autoscaler.errors import ConfigError

    doc = make_fleet(1).model_dump(mode="json", exclude_unset=True)
    with pytest.raises(ConfigError, match="kubernetes") as err:
        parse_config({**doc, "kubernetes": kube}, "f.yaml")
    assert message in str(err.value)


@pytest.mark.parametrize("text", ["[]", "just a string", "a: [b", "users: 3"])
def test_a_kubeconfig_that_is_not_one_is_a_one_line_error(tmp_path, text: str) -> None:
    from autoscaler.adapters.kubernetes import KubernetesError, connect

    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(KubernetesError, match=f"kubeconfig {path}: ") as err:
        connect(path)
    assert "\n" not in str(err.value)


def test_a_missing_kubeconfig_says_so(tmp_path, monkeypatch) -> None:
    from autoscaler.adapters.kubernetes import KubernetesError, connect

    with pytest.raises(KubernetesError, match=f"kubeconfig {tmp_path}/none.yaml: no such file"):
        connect(tmp_path / "none.yaml")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "env.yaml"))  # the default names what it read
    (tmp_path / "env.yaml").write_text("[]")
    with pytest.raises(KubernetesError, match=f"kubeconfig {tmp_path}/env.yaml: "):
        connect(None)


def test_two_daemons_with_one_identity_never_both_lead(cluster, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 31, item 2: b, started with a's identity while a leads, finds the Lease under its name
    with a renew time it did not write: not its own, so it waits; seeing that renew time change (a
    renews), it knows another process shares its identity, says so and never leads; a leads on."""
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    clock = Clock()
    a = LeaderElector(cluster.api(), "l", "autoscaler", "same", cfg, clock)
    b = LeaderElector(cluster.api(), "l", "autoscaler", "same", cfg, clock)
    assert a.try_acquire_or_renew() and not a.duplicate
    for _ in range(10):
        clock.t += 2
        assert not b.try_acquire_or_renew()
        assert a.try_acquire_or_renew() and a.leads()
        assert not b.leads()
    assert b.duplicate and not a.duplicate
    assert "two daemons share this identity" in caplog.text
    clock.t += 60  # a goes away; b stays out, as it said
    assert not b.try_acquire_or_renew()


def test_a_process_that_finds_its_identity_renewed_by_another_after_it_led_stops(cluster) -> None:
    """The other order: a's renewals are lost for a while and b (same name) took the Lease after it
    ran out; a, back, finds a renew time it did not write after writing its own: it stops for good."""
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    clock = Clock()
    a = LeaderElector(cluster.api(), "l", "autoscaler", "same", cfg, clock)
    b = LeaderElector(cluster.api(), "l", "autoscaler", "same", cfg, clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b sees a's Lease and waits for it to run out
    clock.t += 16
    assert b.try_acquire_or_renew() and not b.duplicate  # a was silent past the duration: a takeover
    clock.t += 1
    assert not a.try_acquire_or_renew() and a.duplicate and not a.leads()
    assert b.try_acquire_or_renew() and b.leads()


def test_a_restart_under_the_same_identity_is_not_a_duplicate(cluster) -> None:
    """A new process with the identity of one that died (a pod restarted) takes the Lease over as its
    own once the dead one's lease has run out, as for any dead holder."""
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    clock = Clock()
    assert LeaderElector(cluster.api(), "l", "autoscaler", "p", cfg, clock).try_acquire_or_renew()
    again = LeaderElector(cluster.api(), "l", "autoscaler", "p", cfg, clock)  # nothing written yet
    clock.t += 2
    assert not again.try_acquire_or_renew() and not again.duplicate
    clock.t += 15
    for _ in range(3):
        assert again.try_acquire_or_renew() and not again.duplicate
        clock.t += 2


def test_no_write_once_leadership_is_not_certain_for_the_call(cluster, fleet) -> None:
    """Issue 31, item 1: the fence is asked between the Scale's read and its write; False abandons
    the write (a former leader whose GET returned late writes nothing)."""
    asked: list[int] = []

    def fence() -> bool:
        asked.append(len([w for w in cluster.emu.writes if w[1] == "deployments/scale"]))
        return False

    act = KubernetesActuator(fleet.kubernetes, fleet.services, cluster.api(), fence=fence)
    res = act.scale("svc", "h100", 5)
    assert res.status is ActuationStatus.NOT_LEADER and "may no longer lead" in res.message
    assert asked == [0] and replicas(cluster) == 2
    assert not [w for w in cluster.emu.writes if w[1] == "deployments/scale"]


def test_the_lease_left_is_what_a_write_may_count_on() -> None:
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    clock = Clock()
    el = LeaderElector(client.ApiClient(), "l", "autoscaler", "a", cfg, clock)
    assert el.lease_left_s() == 0.0  # not leading
    el.leading, el.last_renewed = True, 0.0
    clock.t = 3.0
    assert el.lease_left_s() == 7.0  # renew_s 10 - 3 s since the renewal
    clock.t = 10.0
    assert el.lease_left_s() == 0.0 and not el.leads()


def test_a_hung_api_server_ends_a_call_at_the_deadline() -> None:
    """A server that accepts and never answers: with the deadline the call fails (in time to renew
    the lease), instead of hanging the tick for ever."""
    import socket
    import threading

    import urllib3

    from autoscaler.adapters.kubernetes import with_deadline

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    conf = client.Configuration(host=f"http://127.0.0.1:{port}")
    api = with_deadline(client.ApiClient(conf), 0.5)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            client.AppsV1Api(api).read_namespaced_deployment_scale("x", "y")
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(timeout=60)  # without a deadline the call would still be waiting
    srv.close()
    assert not t.is_alive() and outcome
    assert isinstance(outcome[0], urllib3.exceptions.HTTPError)  # a timeout, which TRANSPORT_ERRORS covers


def test_pending_pods_are_timed_on_the_daemons_clock_whatever_the_servers(cluster, make_fleet) -> None:
    """Issue 31, item 5: a pod whose timestamps say it has been unschedulable for a day (the API
    server's clock an hour or a day ahead of ours) is 0 s old when first seen, and counts from there."""
    from autoscaler.adapters.kubernetes import PendingPods

    doc = make_fleet(2, min_replicas=0, max_replicas=8).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "kubernetes": {"namespace": NS, "pending_timeout_s": 300, "pending_retry_s": 900}},
                       "<test>")
    core = client.CoreV1Api(cluster.api())
    core.create_namespaced_pod(NS, pod("svc-h100-b", {"app": "svc-h100"}, "Pending", "2000-01-01T00:00:00Z"))
    now = [5.0]
    pods = PendingPods(cfg.kubernetes, cfg.services, cluster.api(), clock=lambda: now[0])
    assert pods.unschedulable_for("svc", "h100") == 0.0 and not pods.unavailable("svc", "h100")
    now[0] = 5.0 + 299
    assert not pods.unavailable("svc", "h100")
    now[0] = 5.0 + 301
    assert pods.unavailable("svc", "h100")


def test_no_kubeconfig_anywhere_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the client's 'Invalid kube-config file. No configuration found.' for a file that is not there."""
    from autoscaler.adapters.kubernetes import KubernetesError, connect

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(KubernetesError, match=r"^no kubeconfig: ~/\.kube/config does not exist, \$KUBECONFIG is unset"):
        connect()


def test_a_dead_holders_day_long_lease_is_held_no_longer_than_ours(cluster) -> None:
    """Issue 31, item 4: a Lease left with leaseDurationSeconds of a day is taken over after our own
    duration (15 s), not after the day."""
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    body = client.V1Lease(metadata=client.V1ObjectMeta(name="l", namespace="autoscaler"), spec=client.V1LeaseSpec(
        holder_identity="dead", lease_duration_seconds=86400, renew_time=datetime.now(UTC)))
    client.CoordinationV1Api(cluster.api()).create_namespaced_lease("autoscaler", body)
    clock = Clock()
    a = LeaderElector(cluster.api(), "l", "autoscaler", "a", cfg, clock)
    assert not a.try_acquire_or_renew()
    clock.t = 14.0
    assert not a.try_acquire_or_renew()
    clock.t = 15.5
    assert a.try_acquire_or_renew()


def test_a_candidate_that_cannot_reach_the_lease_says_why(cluster) -> None:
    """Readiness follows whether the daemon can take part in the election (``failing``)."""
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    a = LeaderElector(cluster.api(), "l", "autoscaler", "a", cfg, Clock())
    assert a.try_acquire_or_renew() and a.failing is None
    cluster.emu.down = True
    a.try_acquire_or_renew()
    assert a.failing == "lease autoscaler/l: HTTP 503"
    cluster.emu.down = False
    a.try_acquire_or_renew()
    assert a.failing is None


def _transitions(cluster: EmulatedCluster) -> int:
    return client.CoordinationV1Api(cluster.api()).read_namespaced_lease("l", "autoscaler").spec.lease_transitions


def test_each_leadership_is_a_new_term_kept_by_renewals_and_the_release(cluster) -> None:
    """Issue 31, item 7: generations restart with each daemon unless they rest on something the
    Lease keeps. client-go's rule: ``leaseTransitions`` + 1 when the holder changes, kept otherwise;
    here also + 1 when a restarted process takes back a Lease held under its own name."""
    cfg = LeaseConfig(duration_s=15, renew_s=10, retry_s=2)
    clock = Clock()
    a = LeaderElector(cluster.api(), "l", "autoscaler", "a", cfg, clock)
    b = LeaderElector(cluster.api(), "l", "autoscaler", "b", cfg, clock)
    assert a.try_acquire_or_renew() and a.term == 0 and _transitions(cluster) == 0  # created
    clock.t += 2
    assert a.try_acquire_or_renew() and a.term == 0 and _transitions(cluster) == 0  # renewed
    assert a.release() and _transitions(cluster) == 0  # released: kept
    assert b.try_acquire_or_renew() and b.term == 1 and _transitions(cluster) == 1  # a new holder
    assert not a.try_acquire_or_renew()  # a sees b's renewal; b then dies without releasing
    clock.t += 16  # a takes over once b's lease has run out on a's clock
    assert a.try_acquire_or_renew() and a.term == 2 and _transitions(cluster) == 2
    restarted = LeaderElector(cluster.api(), "l", "autoscaler", "a", cfg, clock)  # a's pod restarted
    assert not restarted.try_acquire_or_renew()  # its predecessor's lease runs out first
    clock.t += 16
    assert restarted.try_acquire_or_renew() and restarted.term == 3 and _transitions(cluster) == 3


def test_admission_configmaps_carry_the_leader_and_a_generation_that_grows_across_terms(cluster, fleet) -> None:
    """Issue 31, item 7: the term is the high part of the generation (term * 2**32 + n), so the first
    document of a later leader is newer than the last of an earlier one."""
    cm = client.CoreV1Api(cluster.api())

    def doc() -> dict[str, Any]:
        data = cm.read_namespaced_config_map("autoscaler-admission-svc", NS).data
        return json.loads(data["thresholds.json"])

    first = ConfigMapSink(fleet.kubernetes, cluster.api(), leader="a", term=0)
    for x in (1.0, 2.0, 3.0):
        assert first.publish("svc", {"sheddable": x}).ok
    assert (doc()["leader"], doc()["generation"]) == ("a", 3)
    second = ConfigMapSink(fleet.kubernetes, cluster.api(), leader="b", term=1)
    assert second.publish("svc", {"sheddable": 0.5}).ok
    assert (doc()["leader"], doc()["generation"]) == ("b", 2**32 + 1)


def test_a_configmap_is_not_written_once_leadership_is_not_certain(cluster, fleet) -> None:
    """Issue 31: the admission ConfigMap is fenced as a scale is, between its read and its write."""
    cm = client.CoreV1Api(cluster.api())
    assert ConfigMapSink(fleet.kubernetes, cluster.api()).publish("svc", {"sheddable": 1.0}).ok  # exists now
    asked: list[bool] = []

    def fence() -> bool:
        asked.append(True)
        return False

    before = len(cluster.emu.writes)
    res = ConfigMapSink(fleet.kubernetes, cluster.api(), fence=fence).publish("svc", {"sheddable": 9.0})
    assert res.status is ActuationStatus.NOT_LEADER and "may no longer lead" in res.message and asked == [True]
    assert len(cluster.emu.writes) == before
    assert cm.read_namespaced_config_map("autoscaler-admission-svc", NS).data["sheddable"] == "1"
    res = ConfigMapSink(fleet.kubernetes, cluster.api(), fence=fence).publish("other", {"sheddable": 9.0})
    assert res.status is ActuationStatus.NOT_LEADER  # a create is fenced too
    with pytest.raises(ApiException) as err:
        cm.read_namespaced_config_map("autoscaler-admission-other", NS)
    assert err.value.status == 404


def _configmap_calls(cluster: EmulatedCluster) -> dict[str, int]:
    """ConfigMap requests the emulated server served, by verb (a test's own reads taken out: none at 0)."""
    return {verb: n for (verb, plural), n in cluster.emu.requests.items() if plural == "configmaps" and n}


def test_an_unchanged_admission_configmap_is_written_only_on_its_heartbeat(cluster, fleet) -> None:
    """Issue 35: a steady fleet's tick sent a GET and a PUT per service for a ConfigMap whose content
    had not changed. Unchanged content is written again only ``admission_heartbeat_s`` (60 s) after
    its last write; a change is written at once, with the version this sink last wrote (no GET)."""
    cm = client.CoreV1Api(cluster.api())
    clock = Clock()
    sink = ConfigMapSink(fleet.kubernetes, cluster.api(), clock=clock)

    def doc() -> dict[str, Any]:  # this test's own read, not counted below
        cluster.emu.requests[("get", "configmaps")] -= 1
        return json.loads(cm.read_namespaced_config_map("autoscaler-admission-svc", NS).data["thresholds.json"])

    assert sink.publish("svc", {"sheddable": 1.0}, {"h100": 64}).ok
    assert _configmap_calls(cluster) == {"list": 1, "create": 1}  # not listed: created
    clock.t = 10.0
    assert sink.publish("svc", {"sheddable": 1.0, "standard": None}, {"h100": 64}).ok  # the same content
    assert _configmap_calls(cluster) == {"list": 1, "create": 1}  # nothing sent
    clock.t = 20.0
    assert sink.publish("svc", {"sheddable": 1.0}, {"h100": 32}).ok  # the ITL budget changed
    assert _configmap_calls(cluster) == {"list": 1, "create": 1, "update": 1}  # a PUT, no GET
    assert doc()["generation"] == 2 and doc()["services"]["svc"]["itl_budget"] == {"h100": 32}
    clock.t = 79.0  # 59 s after the last write
    assert sink.publish("svc", {"sheddable": 1.0}, {"h100": 32}).ok
    assert _configmap_calls(cluster)["update"] == 1
    clock.t = 80.0  # 60 s: the heartbeat
    assert sink.publish("svc", {"sheddable": 1.0}, {"h100": 32}).ok
    assert _configmap_calls(cluster) == {"list": 1, "create": 1, "update": 2} and doc()["generation"] == 3
    assert sink.publish("svc", {"sheddable": float("nan")}).status is ActuationStatus.INVALID  # still refused
    every = ConfigMapSink(fleet.kubernetes.model_copy(update={"admission_heartbeat_s": 0.0}), cluster.api(),
                          clock=clock)
    for _ in range(2):  # 0: every publish writes (the first of a new sink lists first: it has no version)
        assert every.publish("svc", {"sheddable": 1.0}, {"h100": 32}).ok
    assert _configmap_calls(cluster) == {"list": 2, "create": 1, "update": 4}


def test_a_configmap_changed_or_deleted_by_someone_else_is_read_again_then_written(cluster, fleet) -> None:
    """Issue 35: the PUT on the version this sink last wrote is refused (409) once someone else wrote
    the ConfigMap, and finds nothing (404) once it was deleted; then it is read and written as a
    first write would be, and the content is the sink's."""
    cm = client.CoreV1Api(cluster.api())
    clock = Clock()
    sink = ConfigMapSink(fleet.kubernetes, cluster.api(), clock=clock)
    assert sink.publish("svc", {"sheddable": 1.0}).ok
    other = cm.read_namespaced_config_map("autoscaler-admission-svc", NS)
    other.data["sheddable"] = "7"
    cm.replace_namespaced_config_map("autoscaler-admission-svc", NS, other)  # a new resourceVersion
    before = _configmap_calls(cluster)
    assert sink.publish("svc", {"sheddable": 2.0}).ok
    after = _configmap_calls(cluster)
    assert (after["update"] - before["update"], after["get"] - before["get"]) == (2, 1)  # 409, GET, PUT
    assert cm.read_namespaced_config_map("autoscaler-admission-svc", NS).data["sheddable"] == "2"
    cm.delete_namespaced_config_map("autoscaler-admission-svc", NS)
    assert sink.publish("svc", {"sheddable": 3.0}).ok  # 404 on the PUT, 404 on the GET, created
    assert cm.read_namespaced_config_map("autoscaler-admission-svc", NS).data["sheddable"] == "3"
    assert _configmap_calls(cluster)["create"] == 2


def test_a_changed_configmap_is_fenced_without_a_read_and_written_once_leading_again(cluster, fleet) -> None:
    """Issue 35: the PUT without a GET is still asked of the fence first; a refused write leaves the
    ConfigMap as it was, and the next publish of that content writes it (it was never written)."""
    cm = client.CoreV1Api(cluster.api())
    leading = [True]
    sink = ConfigMapSink(fleet.kubernetes, cluster.api(), fence=lambda: leading[0], clock=Clock())
    assert sink.publish("svc", {"sheddable": 1.0}).ok
    leading[0] = False
    before = len(cluster.emu.writes)
    assert sink.publish("svc", {"sheddable": 9.0}).status is ActuationStatus.NOT_LEADER
    assert len(cluster.emu.writes) == before
    assert cm.read_namespaced_config_map("autoscaler-admission-svc", NS).data["sheddable"] == "1"
    leading[0] = True
    assert sink.publish("svc", {"sheddable": 9.0}).ok
    assert cm.read_namespaced_config_map("autoscaler-admission-svc", NS).data["sheddable"] == "9"


SERVICES = [f"s{i}" for i in range(6)]


def _cm(service: str) -> str:
    return f"autoscaler-admission-{service}"


def _read(cluster: EmulatedCluster, service: str) -> dict[str, str]:
    """The ConfigMap's data, read by the test (taken out of the server's count)."""
    cluster.emu.requests[("get", "configmaps")] -= 1
    return client.CoreV1Api(cluster.api()).read_namespaced_config_map(_cm(service), NS).data


def _someone_elses_configmap(cluster: EmulatedCluster) -> None:
    """A ConfigMap of the namespace without the sink's label: no LIST of the sink's may send it."""
    client.CoreV1Api(cluster.api()).create_namespaced_config_map(NS, {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "model-config"}, "data": {"a": "1"}})


def test_a_first_round_on_an_empty_namespace_is_one_list_and_a_create_per_service(cluster, fleet) -> None:
    """Issue 35 (first publishes): N services never written, none there: one LIST (its label selector
    leaves out another ConfigMap of the namespace: 0 objects sent), N creates, no GET, counted at the
    server; each ConfigMap holds its service's document."""
    _someone_elses_configmap(cluster)
    cluster.emu.requests.clear()
    sink = ConfigMapSink(fleet.kubernetes, cluster.api(), leader="a", term=3)
    for i, svc in enumerate(SERVICES):
        assert sink.publish(svc, {"sheddable": float(i)}).ok
    assert _configmap_calls(cluster) == {"list": 1, "create": len(SERVICES)}
    assert cluster.emu.items_sent["configmaps"] == 0
    for i, svc in enumerate(SERVICES):
        doc = json.loads(_read(cluster, svc)["thresholds.json"])
        assert (doc["leader"], doc["generation"], doc["services"][svc]["thresholds"]["sheddable"]) == \
            ("a", 3 * 2**32 + 1, float(i))


def _round(fleet: Any, cluster: EmulatedCluster, leader: str, term: int, wall: float, x: float,
           clock: Clock | None = None, fence: Any = None) -> ConfigMapSink:
    sink = ConfigMapSink(fleet.kubernetes, cluster.api(), fence=fence, leader=leader, term=term,
                         clock=clock or Clock(), wall=lambda: wall)
    for svc in SERVICES:
        res = sink.publish(svc, {"sheddable": x}, {"h100": 8})
        assert res.ok or fence is not None, res
    return sink


def test_a_takeover_of_stale_configmaps_is_one_list_and_a_put_per_service(cluster, fleet) -> None:
    """Issue 35 (takeover): the ConfigMaps exist, written by the former leader 100 s ago (older than
    the 60-s heartbeat): one LIST, then a PUT per service on the listed resourceVersion, which lands
    (no 409: 6 updates, not 12), and no GET; the documents are the new leader's."""
    _round(fleet, cluster, "a", 1, 1000.0, 2.0)
    _someone_elses_configmap(cluster)
    cluster.emu.requests.clear()
    cluster.emu.items_sent.clear()
    _round(fleet, cluster, "b", 2, 1100.0, 2.0)
    assert _configmap_calls(cluster) == {"list": 1, "update": len(SERVICES)}
    assert cluster.emu.items_sent["configmaps"] == len(SERVICES)
    for svc in SERVICES:
        doc = json.loads(_read(cluster, svc)["thresholds.json"])
        got = (doc["leader"], doc["generation"], doc["services"][svc]["updated_unix_s"])
        assert got == ("b", 2 * 2**32 + 1, 1100.0)


def test_a_takeover_of_fresh_configmaps_of_the_same_content_writes_none_and_keeps_the_heartbeat(
        cluster, fleet) -> None:
    """Issue 35 (takeover, item 2): written by the former leader 10 s ago with the content the new one
    publishes: one LIST and no write; the heartbeat keeps its period from that write (due 60 s after
    it: 50 s on, not 60), then a PUT on the listed version (no GET, no 409). A service whose content
    changed, and one written 60 s ago (not less than the heartbeat), are written at once; a document
    dated in the future (another node's clock) is written over."""
    _round(fleet, cluster, "a", 1, 1000.0, 2.0)
    cluster.emu.requests.clear()
    clock = Clock()
    sink = _round(fleet, cluster, "b", 2, 1010.0, 2.0, clock=clock)
    assert _configmap_calls(cluster) == {"list": 1}
    assert json.loads(_read(cluster, "s0")["thresholds.json"])["leader"] == "a"
    clock.t = 49.9
    sink.wall = lambda: 1059.9
    assert all(sink.publish(svc, {"sheddable": 2.0}, {"h100": 8}).ok for svc in SERVICES)
    assert _configmap_calls(cluster) == {"list": 1}
    clock.t = 50.0
    sink.wall = lambda: 1060.0
    assert all(sink.publish(svc, {"sheddable": 2.0}, {"h100": 8}).ok for svc in SERVICES)
    assert _configmap_calls(cluster) == {"list": 1, "update": len(SERVICES)}
    doc = json.loads(_read(cluster, "s0")["thresholds.json"])
    assert (doc["leader"], doc["generation"], doc["services"]["s0"]["updated_unix_s"]) == ("b", 2 * 2**32 + 1, 1060.0)
    # a third leader: s0's content changed, s1 written 60 s before, s2 dated 5 s ahead, the rest 30 s old
    cluster.emu.requests.clear()
    third = ConfigMapSink(fleet.kubernetes, cluster.api(), leader="c", term=3, clock=Clock(), wall=lambda: 1090.0)
    assert third.publish("s0", {"sheddable": 3.0}, {"h100": 8}).ok
    third.wall = lambda: 1120.0
    assert third.publish("s1", {"sheddable": 2.0}, {"h100": 8}).ok
    third.wall = lambda: 1055.0
    assert third.publish("s2", {"sheddable": 2.0}, {"h100": 8}).ok
    third.wall = lambda: 1090.0
    assert all(third.publish(svc, {"sheddable": 2.0}, {"h100": 8}).ok for svc in SERVICES[3:])
    assert _configmap_calls(cluster) == {"list": 1, "update": 3}
    leaders = {svc: json.loads(_read(cluster, svc)["thresholds.json"])["leader"]
               for svc in SERVICES}
    assert leaders == {"s0": "c", "s1": "c", "s2": "c", "s3": "b", "s4": "b", "s5": "b"}


def test_a_writer_between_the_list_and_the_write_is_read_then_written_over(cluster, fleet) -> None:
    """Issue 35: after the LIST, someone else replaces s1's ConfigMap (the PUT on the listed version is
    a 409), deletes s2's (the PUT is a 404) and creates s4's, absent when listed (the create is a 409
    AlreadyExists): each is then read by name and written, and ends with this sink's content."""
    cm = client.CoreV1Api(cluster.api())
    _round(fleet, cluster, "a", 1, 1000.0, 2.0)
    for svc in ("s4", "s5"):
        cm.delete_namespaced_config_map(_cm(svc), NS)
    cluster.emu.requests.clear()
    sink = ConfigMapSink(fleet.kubernetes, cluster.api(), leader="b", term=2, clock=Clock(), wall=lambda: 1100.0)
    assert sink.publish("s0", {"sheddable": 5.0}).ok  # the LIST is taken now
    other = cm.read_namespaced_config_map(_cm("s1"), NS)
    other.data["sheddable"] = "7"
    cm.replace_namespaced_config_map(_cm("s1"), NS, other)
    cm.delete_namespaced_config_map(_cm("s2"), NS)
    cm.create_namespaced_config_map(NS, {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": _cm("s4")}, "data": {"sheddable": "7"}})
    cluster.emu.requests.clear()
    for svc in SERVICES[1:]:
        assert sink.publish(svc, {"sheddable": 5.0}).ok
    # s1: PUT 409, GET, PUT; s2: PUT 404, GET 404, create; s3: PUT; s4: create 409, GET, PUT; s5: create
    assert _configmap_calls(cluster) == {"update": 5, "get": 3, "create": 3}
    for svc in SERVICES:
        data = _read(cluster, svc)
        assert data["sheddable"] == "5" and json.loads(data["thresholds.json"])["leader"] == "b", svc


def test_a_fenced_first_round_writes_nothing(cluster, fleet) -> None:
    """Issue 35: a sink whose fence says no lists (a read) and writes nothing, neither the PUTs of
    existing ConfigMaps nor the create of an absent one; the fence is asked before each write. Once it
    says yes, each is written on what the LIST found (nothing was sent meanwhile): no GET, no 409."""
    cm = client.CoreV1Api(cluster.api())
    _round(fleet, cluster, "a", 1, 1000.0, 2.0)
    cm.delete_namespaced_config_map(_cm("s5"), NS)
    cluster.emu.requests.clear()
    before = len(cluster.emu.writes)
    asked: list[bool] = []

    def fence() -> bool:
        asked.append(False)
        return False

    sink = ConfigMapSink(fleet.kubernetes, cluster.api(), fence=fence, leader="b", term=2, clock=Clock(),
                         wall=lambda: 1100.0)
    results = [sink.publish(svc, {"sheddable": 9.0}) for svc in SERVICES]
    assert [r.status for r in results] == [ActuationStatus.NOT_LEADER] * len(SERVICES)
    assert len(asked) == len(SERVICES) and len(cluster.emu.writes) == before
    assert _configmap_calls(cluster) == {"list": 1}
    assert all(_read(cluster, s)["sheddable"] == "2" for s in SERVICES[:5])
    fence_ok = [True]
    sink.fence = lambda: fence_ok[0]  # leading again: nothing was sent, so the LIST still says what is there
    assert all(sink.publish(svc, {"sheddable": 9.0}).ok for svc in SERVICES)
    assert _configmap_calls(cluster) == {"list": 1, "update": 5, "create": 1}  # no GET, no 409
    assert all(_read(cluster, s)["sheddable"] == "9" for s in SERVICES)


def test_a_list_forbidden_reads_each_configmap_by_name_and_is_not_asked_again(cluster, fleet, caplog) -> None:
    """Issue 35: a Role without ``list`` on configmaps (an operator may withhold it): the LIST is
    refused once, logged once, and each first publish reads its ConfigMap by name, as before."""
    import logging

    cluster.emu.forbidden.add(("list", "configmaps", None))
    sink = ConfigMapSink(fleet.kubernetes, cluster.api(), leader="a", term=1)
    with caplog.at_level(logging.WARNING, logger="autoscaler.adapters.kubernetes"):
        for svc in SERVICES:
            assert sink.publish(svc, {"sheddable": 1.0}).ok
    assert _configmap_calls(cluster) == {"list": 1, "get": len(SERVICES), "create": len(SERVICES)}
    (warning,) = [r.getMessage() for r in caplog.records if "list configmaps" in r.getMessage()]
    assert "forbidden" in warning.lower() and "by name" in warning


def test_an_outage_is_one_warning_per_pass_and_cause_not_one_per_read(cluster, fleet, caplog) -> None:
    """Three variants, the API server down: the writer check and the observation each log one
    warning naming the three reads and their cause (a line per read was 9 a tick), and no workload is
    read twice in one observation."""
    import logging

    from autoscaler.adapters.kubernetes import ClusterSource, KubernetesActuator, PendingPods
    from autoscaler.state import ServiceObservation, Signals, VariantObservation

    doc = fleet.model_dump(mode="json", exclude_unset=True)
    h100 = doc["services"][0]["variants"][0]
    doc["services"][0]["variants"] += [{**h100, "name": "a100"}, {**h100, "name": "gh200"}]
    three = parse_config(doc, "<test>")
    for name in ("svc-a100", "svc-gh200"):
        client.AppsV1Api(cluster.api()).create_namespaced_deployment(NS, deployment(name, NS, 1))

    class Prom:
        def observe(self, now: float) -> dict[str, ServiceObservation]:
            return {"svc": ServiceObservation("svc", now, Signals(), {v: VariantObservation(ready=1, starting=0)
                                                                        for v in ("h100", "a100", "gh200")})}

    act = KubernetesActuator(three.kubernetes, three.services, cluster.api(), sleep=lambda _: None)
    src = ClusterSource(Prom(), PendingPods(three.kubernetes, three.services, cluster.api()), cluster.api())
    cluster.emu.down = True
    with caplog.at_level(logging.WARNING, logger="autoscaler.adapters"):
        act.check_writers()
        obs = src.observe(0.0)
    lines = [r for r in caplog.records if r.name.startswith("autoscaler.adapters")]
    assert [(r.getMessage().split(":")[1].strip(), r.failed, getattr(r, "pass")) for r in lines] == \
        [("3 read(s) failed in the writer check", 3, "writer check"),
         ("3 read(s) failed in the observation", 3, "observation")]
    assert lines[1].targets == ["Deployment llm/svc-h100", "Deployment llm/svc-a100", "Deployment llm/svc-gh200"]
    assert lines[1].getMessage().endswith(
        "(Deployment llm/svc-h100, Deployment llm/svc-a100, Deployment llm/svc-gh200)")
    assert [(vo.ready, vo.starting) for vo in obs["svc"].variants.values()] == [(1, 0)] * 3  # Prometheus's stand
