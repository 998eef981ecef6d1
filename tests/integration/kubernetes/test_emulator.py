"""The emulated API server behaves as the real one where the daemon depends on it, so a bug the real
one would expose fails here too: a replace drops what the body leaves out, the server sets an
object's uid, creationTimestamp and generation, and a Lease's MicroTime must carry its fraction
(Kubernetes API conventions; apimachinery ``metav1.MicroTime``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from autoscaler.faults.kubeapi import EmulatedCluster, deployment, emulated_cluster, query_flag

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
    """The server's rule on the bytes sent (raw HTTP, so whatever a client version does to a time string
    does not enter): metav1.MicroTime parses with RFC3339Micro's six fractional digits, so a time
    without them is a 400 and a ``.000000`` one is stored. Then the official client: a time off the
    whole second reaches the server with its fraction (what adapters.lease.micro_time ensures)."""
    url = f"{cluster.url}/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"

    def post(name: str, renew: str) -> requests.Response:
        return requests.post(url, json={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                        "metadata": {"name": name},
                                        "spec": {"holderIdentity": "a", "renewTime": renew}}, timeout=30)

    refused = post("l", "2026-12-04T06:30:00+00:00")
    assert refused.status_code == 400 and "renewTime" in refused.text
    assert post("l", "2026-12-04T06:30:00Z").status_code == 400
    assert post("l", "2026-12-04T06:30:00.000000Z").status_code == 201
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "m"},
            "spec": {"holderIdentity": "a", "renewTime": "2026-12-04T06:30:00.000001Z"}}
    created = client.CoordinationV1Api(cluster.api()).create_namespaced_lease(NS, body)
    assert created.spec.renew_time.microsecond == 1


def test_selectors_are_honoured_or_refused_never_ignored(cluster: EmulatedCluster) -> None:
    """Pods p1 (app=a, tier=web), p2 (app=b), p3 (no labels): each selector answers the pods the
    Kubernetes docs' "Labels and Selectors" semantics give by hand (``!=`` and ``notin`` take the pod
    without the key; ``in`` and existence do not); what the API server cannot parse is HTTP 400, and so
    is a set-based field selector (fields take ``=``, ``==``, ``!=`` only)."""
    core = client.CoreV1Api(cluster.api())
    for name, labels in (("p1", {"app": "a", "tier": "web"}), ("p2", {"app": "b"}), ("p3", {})):
        core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
                                   "labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}})

    def names(selector: str) -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod(NS, label_selector=selector).items)

    assert names("app!=a") == ["p2", "p3"]
    assert names("app==a") == names("app=a") == ["p1"]
    assert names("app in (a, b)") == ["p1", "p2"]
    assert names("app in (b,c)") == ["p2"]
    assert names("app notin (a)") == ["p2", "p3"]
    assert names("tier") == ["p1"] and names("!tier") == ["p2", "p3"]
    assert names("app in (a,b),!tier") == ["p2"]
    assert names("app in (a,b),tier=web") == ["p1"]
    assert [p.metadata.name for p in core.list_namespaced_pod(NS, field_selector="metadata.name=p1").items] == ["p1"]
    for bad in ("app in ()", "app in (a", "app > 1", "app in (a),,"):
        with pytest.raises(ApiException) as err:
            core.list_namespaced_pod(NS, label_selector=bad)
        assert err.value.status == 400, bad
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, field_selector="metadata.name in (p1)")
    assert err.value.status == 400


def test_a_configmap_list_by_label_sends_the_labelled_ones_with_their_versions(cluster: EmulatedCluster) -> None:
    """What ``ConfigMapSink`` relies on (issue 35): a LIST of ConfigMaps with
    ``labelSelector=app.kubernetes.io/managed-by=autoscaler`` answers the labelled ones of its namespace
    only, each with the resourceVersion a GET of it answers, and a PUT on that version lands
    (Kubernetes v1.31 API concepts, "Efficient detection of changes": every object of a list carries
    its metadata.resourceVersion; "Labels and Selectors" for the selector). Through the client's
    ``list_namespaced_config_map(namespace, label_selector=...)``, as in kubernetes 31.0.0."""
    core = client.CoreV1Api(cluster.api())
    label = {"app.kubernetes.io/managed-by": "autoscaler"}
    for name, ns, labels in (("a", NS, label), ("b", NS, label), ("c", NS, {"app.kubernetes.io/managed-by": "helm"}),
                             ("d", NS, {}), ("e", "other", label)):
        core.create_namespaced_config_map(ns, {"apiVersion": "v1", "kind": "ConfigMap",
                                               "metadata": {"name": name, "labels": labels}, "data": {"k": name}})
    read = core.read_namespaced_config_map("b", NS).metadata.resource_version
    core.replace_namespaced_config_map("b", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "b", "labels": label, "resourceVersion": read}, "data": {"k": "b2"}})
    listed = core.list_namespaced_config_map(NS, label_selector="app.kubernetes.io/managed-by=autoscaler")
    got = {cm.metadata.name: (cm.metadata.resource_version, cm.data) for cm in listed.items}
    assert {k: v[1] for k, v in got.items()} == {"a": {"k": "a"}, "b": {"k": "b2"}}
    for name, (version, _) in got.items():
        assert version == core.read_namespaced_config_map(name, NS).metadata.resource_version
    out = core.replace_namespaced_config_map("a", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "a", "labels": label, "resourceVersion": got["a"][0]}, "data": {"k": "a2"}})
    assert out.data == {"k": "a2"} and out.metadata.resource_version != got["a"][0]


def _refusal(err: pytest.ExceptionInfo[ApiException]) -> dict:
    import json

    return json.loads(err.value.body)


@pytest.mark.parametrize("name", ["Upper", "under_score", "-dash-first", "dot-last.", "a" * 254])
def test_a_name_that_is_not_a_dns_subdomain_is_a_422_invalid(cluster: EmulatedCluster, name: str) -> None:
    """apimachinery ``IsDNS1123Subdomain``: lower-case alphanumerics, '-' and '.', alphanumeric at both ends,
    at most 253 characters; the API server answers ``errors.NewInvalid``: 422, reason Invalid, a cause on
    ``metadata.name``."""
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(cluster.api()).create_namespaced_deployment(NS, deployment(name, NS, 1))
    body = _refusal(err)
    assert err.value.status == 422 and body["reason"] == "Invalid" and body["kind"] == "Status"
    assert body["details"]["kind"] == "Deployment" and body["details"]["group"] == "apps"
    assert [c["field"] for c in body["details"]["causes"]] == ["metadata.name"]
    assert body["message"].startswith(f'Deployment.apps "{name}" is invalid: metadata.name: Invalid value')
    assert client.AppsV1Api(cluster.api()).list_namespaced_deployment(NS).items == []  # nothing stored


def test_names_the_api_server_accepts_are_created(cluster: EmulatedCluster) -> None:
    apps = client.AppsV1Api(cluster.api())
    for name in ("a", "llm-h100", "v1.2-x", "a" * 253):
        assert apps.create_namespaced_deployment(NS, deployment(name, NS, 1)).metadata.name == name


def test_event_names_follow_their_api_groups_rule(cluster: EmulatedCluster) -> None:
    """core/v1 Events keep the legacy rule (a path segment: ``ValidateEventCreate`` skips the name for v1),
    events.k8s.io/v1 Events need a DNS subdomain; a ConfigMap or a Lease is held to it too."""
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "namespace": NS}
    core = client.CoreV1Api(cluster.api())
    core.create_namespaced_event(NS, {"metadata": {"name": "D.Upper_ok"}, "involvedObject": ref,
                                      "reason": "R", "message": "m"})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_event(NS, {"metadata": {"name": "a%b"}, "involvedObject": ref, "reason": "R"})
    assert err.value.status == 422 and _refusal(err)["reason"] == "Invalid"
    with pytest.raises(ApiException) as err:
        client.EventsV1Api(cluster.api()).create_namespaced_event(NS, {
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "D.Upper"},
            "eventTime": "2026-12-04T06:30:00.000001Z", "reportingController": "x", "reportingInstance": "y",
            "action": "a", "reason": "R", "type": "Normal"})
    assert err.value.status == 422 and _refusal(err)["details"]["group"] == "events.k8s.io"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "Bad"}, "data": {}})
    assert err.value.status == 422
    # a generated name is checked once made: a generateName ending in '.' gets a suffix and passes
    made = core.create_namespaced_event(NS, {"metadata": {"generateName": "d."}, "involvedObject": ref, "reason": "R"})
    assert made.metadata.name.startswith("d.") and len(made.metadata.name) > 2


def test_a_put_whose_body_names_another_object_is_a_400(cluster: EmulatedCluster) -> None:
    """apiserver ``handlers/rest.go`` ``checkName``: the body's name must be the URL's (BadRequest)."""
    apps = client.AppsV1Api(cluster.api())
    created = apps.create_namespaced_deployment(NS, deployment("d", NS, 1))
    created.metadata.name = "e"
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment("d", NS, created)
    assert err.value.status == 400 and _refusal(err)["message"] == (
        "the name of the object (e) does not match the name on the URL (d)")
    scale = apps.read_namespaced_deployment_scale("d", NS)
    scale.metadata.name = "other"
    scale.spec.replicas = 4
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment_scale("d", NS, scale)
    assert err.value.status == 400
    assert apps.read_namespaced_deployment("d", NS).spec.replicas == 1  # neither was applied


def test_a_create_without_a_namespace_takes_the_requests_and_its_watch_sees_it(cluster: EmulatedCluster) -> None:
    """apiserver ``registry/rest/create.go`` ``BeforeCreate`` -> ``EnsureObjectNamespaceMatchesRequestNamespace``
    (kubernetes v1.31): a body without ``metadata.namespace`` is stored in the request path's namespace,
    so a namespaced watch resumed from an earlier list's resourceVersion delivers its ADDED; a body naming
    another namespace is a 400 and is not stored."""
    from kubernetes import watch

    core = client.CoreV1Api(cluster.api())
    since = core.list_namespaced_pod(NS).metadata.resource_version
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "a"}},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert core.create_namespaced_pod(NS, pod).metadata.namespace == NS
    assert core.read_namespaced_pod("p", NS).metadata.namespace == NS
    events = [(e["type"], e["object"].metadata.name, e["object"].metadata.namespace)
              for e in watch.Watch().stream(core.list_namespaced_pod, NS, label_selector="app=a",
                                            resource_version=since, timeout_seconds=1)]
    assert events == [("ADDED", "p", NS)]
    other = {**pod, "metadata": {"name": "q", "namespace": "elsewhere"}}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, other)
    assert err.value.status == 400
    assert [p.metadata.name for p in core.list_namespaced_pod(NS).items] == ["p"]


def test_a_boolean_parameter_is_read_as_the_api_server_reads_it() -> None:
    """apimachinery ``Convert_Slice_string_To_bool``: absent, ``0`` and ``false`` in any case are false;
    anything else, an empty value too, is true."""
    falses = [{}, {"watch": "0"}, {"watch": "false"}, {"watch": "False"}, {"watch": "FALSE"}, {"other": "true"}]
    trues = [{"watch": "true"}, {"watch": "True"}, {"watch": "1"}, {"watch": ""}, {"watch": "yes"}]
    assert [query_flag(p, "watch") for p in falses] == [False] * len(falses)
    assert [query_flag(p, "watch") for p in trues] == [True] * len(trues)


@pytest.mark.parametrize("flag", ["true", "True", "1"])
def test_watch_true_in_any_spelling_is_a_watch(cluster: EmulatedCluster, flag: str) -> None:
    """A GET of Deployments with ``watch=<flag>`` (``True``: what the official client up to 36 sends)
    streams watch events: from no resourceVersion, d as ADDED, then (``timeoutSeconds=1``) the end;
    with ``watch=false`` or ``0`` it is a list holding d."""
    client.AppsV1Api(cluster.api()).create_namespaced_deployment(NS, deployment("d", NS, 1))
    url = f"{cluster.url}/apis/apps/v1/namespaces/{NS}/deployments"
    resp = requests.get(url, params={"watch": flag, "timeoutSeconds": "1"}, timeout=30)
    events = [json.loads(line) for line in resp.text.splitlines() if line.strip()]
    assert resp.status_code == 200
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "d")]
    assert cluster.emu.requests[("watch", "deployments")] == 1
    for off in ("false", "0"):
        listed = requests.get(url, params={"watch": off}, timeout=30).json()
        assert [o["metadata"]["name"] for o in listed["items"]] == ["d"]
    assert cluster.emu.requests[("list", "deployments")] == 2


def test_a_selector_watch_gets_a_pod_relabelled_out_as_deleted_and_one_relabelled_in_as_added(
        cluster: EmulatedCluster) -> None:
    """As the API server's watch cache (``cacheWatcher.convertToWatchEvent``): pods p (``app=a``) and q
    (``app=b``), then p relabelled ``app=b``, q relabelled ``app=a``, q given ``tier=web``. A watch of
    ``app=a`` from before, with the official client, gets p as DELETED (its labels before, ``app=a``, at
    the relabel's resourceVersion), q as ADDED, then q as MODIFIED; a watch of ``app=c`` gets nothing;
    one without a selector gets the three as MODIFIED."""
    core = client.CoreV1Api(cluster.api())
    for name, app in (("p", "a"), ("q", "b")):
        core.create_namespaced_pod(NS, {"apiVersion": "v1", "kind": "Pod",
                                        "metadata": {"name": name, "namespace": NS, "labels": {"app": app}},
                                        "spec": {"containers": [{"name": "c", "image": "x"}]}})
    since = core.list_namespaced_pod(NS).metadata.resource_version
    rvs = [core.patch_namespaced_pod(name, NS, {"metadata": {"labels": labels}}).metadata.resource_version
           for name, labels in (("p", {"app": "b"}), ("q", {"app": "a"}), ("q", {"tier": "web"}))]

    def seen(**selector: str) -> list[tuple[str, str, str, str]]:
        return [(e["type"], e["object"].metadata.name, e["object"].metadata.labels["app"],
                 e["object"].metadata.resource_version)
                for e in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=since,
                                              timeout_seconds=1, **selector)]

    assert seen(label_selector="app=a") == [("DELETED", "p", "a", rvs[0]), ("ADDED", "q", "a", rvs[1]),
                                            ("MODIFIED", "q", "a", rvs[2])]
    assert seen(label_selector="app=c") == []
    assert seen() == [("MODIFIED", "p", "b", rvs[0]), ("MODIFIED", "q", "a", rvs[1]), ("MODIFIED", "q", "a", rvs[2])]
