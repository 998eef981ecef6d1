"""deploy/: every kustomization renders with ``kubectl kustomize`` (kustomize v5, kubectl >= 1.27) with no
deprecated field and no warning, every object is valid Kubernetes (kubernetes-validate, strict), and the manifests
hold what ``autoscaler run`` needs and nothing more: the fleet in the ConfigMap loads, the daemon is
hardened and probed, its RBAC is exactly the least-privilege set derived from that fleet, and the
example vLLM Deployments are the fleet's variants under the names the default Prometheus selectors expect.

``KUBECTL`` names the kubectl to run (default: ``kubectl`` on PATH; ``support.kubectl``); .ci/run unpacks
one where the machine's has no kustomize v5.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
import subprocess
import tomllib
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from support.kubectl import kubectl
from support.paths import ROOT

from autoscaler.adapters.workloads import CONNECTORS
from autoscaler.adapters.workloads.scale import ScaleConnector
from autoscaler.config import FleetConfig
from autoscaler.config.loading import load_config
from autoscaler.promql import exact_alternation

DEPLOY = ROOT / "deploy"
BASE, VLLM, OVERLAY = "deploy/base", "deploy/examples/vllm", "deploy/overlays/example"
KUSTOMIZATIONS = [BASE, VLLM, OVERLAY]

# The newest Kubernetes release whose schemas kubernetes-validate 1.37 ships.
K8S_VERSION = "1.37"

# kustomize v5 fields this repository allows itself, and those kustomize v5 deprecates (``kustomize edit
# fix`` rewrites them; kubectl warns on each).
FIELDS = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "configMapGenerator", "patches"}
DEPRECATED = {"bases", "commonLabels", "patchesStrategicMerge", "patchesJson6902", "vars", "imageTags"}
KUSTOMIZE_MAJOR = 5
PART_OF = {"app.kubernetes.io/part-of": "llm-autoscaler"}  # deploy/base's label on every object it renders

SELF_NS, SERVING_NS = "autoscaler", "llm"
SA = ("autoscaler", "autoscaler")  # (namespace, name) of the daemon's ServiceAccount
DAEMON_ARGS = ["run", "--config", "/etc/autoscaler/fleet.yaml", "--port", "8080", "--log-format", "json"]
PORT = 8080

# The label NVIDIA's GPU feature discovery sets on a node, per fleet `gpu`.
GPU_PRODUCTS = {"H100-SXM": "NVIDIA-H100-80GB-HBM3", "A100-80GB": "NVIDIA-A100-SXM4-80GB",
                "GH200": "NVIDIA-GH200-480GB"}

# Custom resources kubernetes-validate has no schema for (it ships the core API's only): checked by
# ``check_custom`` against the fields prometheus-operator's CRDs define and these manifests use.
CUSTOM = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("endpoints", {"namespaceSelector", "selector", "endpoints",
                                                                   "jobLabel", "targetLabels", "podTargetLabels"}),
    ("monitoring.coreos.com/v1", "PodMonitor"): ("podMetricsEndpoints", {"namespaceSelector", "selector",
                                                                         "podMetricsEndpoints", "jobLabel",
                                                                         "podTargetLabels"}),
}
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "scheme", "honorLabels", "relabelings",
                   "metricRelabelings"}
DURATION = re.compile(r"^(\d+(ms|s|m|h))+$")


# ---------------------------------------------------------------------------------------------- helpers
@functools.cache
def kustomize_version() -> str:
    """The kustomize the kubectl under test embeds (``v5.5.0``); the test fails on one older than v5,
    which cannot read ``labels`` or ``patches`` (kubectl 1.20's v2.0.3 reports none)."""
    proc = subprocess.run([kubectl(), "version", "--client", "-o", "json"], capture_output=True, text=True,
                          timeout=60, check=False)
    version = json.loads(proc.stdout or "{}").get("kustomizeVersion", "") if proc.returncode == 0 else ""
    major = re.match(r"v(\d+)\.", version)
    if major is None or int(major.group(1)) < KUSTOMIZE_MAJOR:
        pytest.fail(f"{kubectl()} embeds kustomize {version or 'unknown'}; deploy/ needs v{KUSTOMIZE_MAJOR} "
                    "(kubectl >= 1.27): set KUBECTL to one (.ci/run unpacks one)", pytrace=False)
    return version


@functools.cache
def _rendered(path: str) -> tuple[str, str]:
    kustomize_version()
    proc = subprocess.run([kubectl(), "kustomize", str(ROOT / path)], capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        pytest.fail(f"kubectl kustomize {path} failed (exit {proc.returncode}): {proc.stderr.strip()}",
                    pytrace=False)
    return proc.stdout, proc.stderr


def _render(path: str) -> str:
    return _rendered(path)[0]


def render(path: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize path`` prints (a fresh copy each call)."""
    return [d for d in yaml.safe_load_all(_render(path)) if d is not None]


def objects(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None, namespace: str | None = None,
        ) -> dict[str, Any]:
    found = [o for o in objects(objs, kind) if (name is None or o["metadata"]["name"] == name)
             and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"expected one {kind} {namespace}/{name}, found {len(found)}"
    return found[0]


def daemon(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objs, "Deployment", "autoscaler", SELF_NS)


def fleet_text(objs: list[dict[str, Any]]) -> tuple[str, str]:
    """(name, fleet.yaml) of the generated fleet ConfigMap."""
    cms = [o for o in objects(objs, "ConfigMap") if o["metadata"]["name"].startswith("autoscaler-fleet")]
    assert len(cms) == 1, f"expected one autoscaler-fleet ConfigMap, found {len(cms)}"
    assert set(cms[0]["data"]) == {"fleet.yaml"}, cms[0]["data"].keys()
    return cms[0]["metadata"]["name"], cms[0]["data"]["fleet.yaml"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> FleetConfig:
    """The fleet in deploy/base's ConfigMap, read as the daemon reads it (``load_config``)."""
    path = tmp_path_factory.mktemp("fleet") / "fleet.yaml"
    path.write_text(fleet_text(render(BASE))[1])
    return load_config(path)


def variants(cfg: FleetConfig) -> Iterator[tuple[Any, Any]]:
    for svc in cfg.services:
        for v in svc.variants:
            yield svc, v


def container_port(container: dict[str, Any], port: int | str) -> int:
    """A probe's or Service's port (a number or a container port's name) as a number."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    assert port in named, f"port {port!r} names no port of container {container['name']}"
    return named[port]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels, matchExpressions) selects ``labels``."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def flags(args: list[str]) -> dict[str, str]:
    """``--name=value`` and ``--name value`` arguments as a dict."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            out[k] = v
        elif a.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[a] = args[i + 1]
            i += 1
        else:
            out[a] = ""
        i += 1
    return out


def check_custom(obj: dict[str, Any]) -> None:
    """Structural check of a ServiceMonitor or PodMonitor: the fields the CRD defines, with their types."""
    key = (obj["apiVersion"], obj["kind"])
    assert key in CUSTOM, f"{key}: no schema in kubernetes-validate and no structural check here"
    endpoints_key, spec_fields = CUSTOM[key]
    meta, spec = obj["metadata"], obj["spec"]
    assert set(obj) <= {"apiVersion", "kind", "metadata", "spec"}, set(obj)
    assert isinstance(meta.get("name"), str) and isinstance(meta.get("namespace"), str), meta
    assert all(isinstance(v, str) for v in meta.get("labels", {}).values()), meta
    assert set(spec) <= spec_fields, f"{obj['kind']}: unknown spec fields {set(spec) - spec_fields}"
    assert set(spec["selector"]) <= {"matchLabels", "matchExpressions"}, spec["selector"]
    assert all(isinstance(v, str) for v in spec["selector"].get("matchLabels", {}).values())
    for e in spec["selector"].get("matchExpressions", []):
        assert e["operator"] in {"In", "NotIn", "Exists", "DoesNotExist"}, e
        assert ("values" in e) == (e["operator"] in {"In", "NotIn"}), e
    assert set(spec.get("namespaceSelector", {})) <= {"matchNames", "any"}, spec.get("namespaceSelector")
    assert all(isinstance(n, str) for n in spec.get("namespaceSelector", {}).get("matchNames", []))
    assert all(isinstance(n, str) for n in spec.get("podTargetLabels", []))
    assert spec[endpoints_key], f"{obj['kind']} has no {endpoints_key}"
    for ep in spec[endpoints_key]:
        assert set(ep) <= ENDPOINT_FIELDS, f"unknown endpoint fields {set(ep) - ENDPOINT_FIELDS}"
        assert isinstance(ep["port"], str) and ep.get("path", "/metrics").startswith("/"), ep
        for d in ("interval", "scrapeTimeout"):
            assert d not in ep or DURATION.match(ep[d]), f"{d}: {ep[d]!r} is not a duration"


def validate(obj: dict[str, Any]) -> None:
    if (obj["apiVersion"], obj["kind"]) in CUSTOM:
        check_custom(obj)
        return
    have = kubernetes_validate.latest_version()
    if tuple(map(int, have.split("."))) < tuple(map(int, K8S_VERSION.split("."))):
        pytest.fail(f"kubernetes-validate has schemas up to {have} only: install kubernetes-validate>={K8S_VERSION}",
                    pytrace=False)
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{obj['kind']} {obj['metadata'].get('name')}: {exc}", pytrace=False)


def kustomization(path: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / path / "kustomization.yaml").read_text())


# -------------------------------------------------------------------------------- rendering, validity
def test_every_kustomization_under_deploy_is_tested() -> None:
    found = sorted(str(p.parent.relative_to(ROOT)) for p in DEPLOY.rglob("kustomization.yaml"))
    assert found == sorted(KUSTOMIZATIONS)


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_kustomizations_use_no_deprecated_field_and_render_without_a_warning(path: str) -> None:
    k = kustomization(path)
    assert not set(k) & DEPRECATED, f"{path}: deprecated in kustomize v5: {set(k) & DEPRECATED}"
    assert set(k) <= FIELDS, f"{path}: fields this repo avoids: {set(k) - FIELDS}"
    assert (k.get("apiVersion"), k.get("kind")) == ("kustomize.config.k8s.io/v1beta1", "Kustomization")
    # kubectl prints "# Warning: 'bases' is deprecated..." and the like on stderr
    assert _rendered(path)[1].strip() == "", f"kubectl kustomize {path} (kustomize {kustomize_version()}) warned"
    for entry in k.get("resources", []):  # a file, or a directory with its own kustomization
        target = ROOT / path / entry
        assert target.is_file() or (target / "kustomization.yaml").is_file(), f"{path}: {entry} is neither"
    for patch in k.get("patches", []):  # strategic-merge patches from files, each naming its target itself
        assert set(patch) == {"path"} and (ROOT / path / patch["path"]).is_file(), f"{path}: {patch}"
    for label in k.get("labels", []):
        assert set(label) <= {"pairs", "includeSelectors", "includeTemplates"}, label
    for gen in k.get("configMapGenerator", []):
        assert set(gen) <= {"name", "namespace", "files", "behavior"}, gen
        for f in gen.get("files", []):
            assert (ROOT / path / f.split("=", 1)[-1]).is_file(), f"{path}: {f} is not a file"
    for image in k.get("images", []):
        assert set(image) <= {"name", "newName", "newTag", "digest"}, image


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_renders_to_valid_objects_in_the_two_namespaces(path: str) -> None:
    objs = render(path)
    assert objs, f"{path} renders nothing"
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys)), f"{path}: an object twice"
    for o in objs:
        validate(o)
        assert not o["kind"].startswith("Cluster"), f"{path}: {o['kind']} (cluster-wide) in a least-privilege deploy"
        if o["kind"] == "Namespace":
            assert o["metadata"]["name"] in {SELF_NS, SERVING_NS}
        else:  # an object without a namespace lands in whatever namespace kubectl's context has
            assert o["metadata"].get("namespace") in {SELF_NS, SERVING_NS}, f"{o['kind']} {o['metadata']}"


def test_the_validation_fails_on_a_misspelt_field() -> None:
    dep = daemon(render(BASE))
    validate(dep)
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {"httpGet": {"path": "/readyz"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    monitor = one(render(BASE), "ServiceMonitor")
    check_custom(monitor)
    for edit in ({"endpoint": []}, {"endpoints": [{"port": "http-metrics", "interval": "15 s"}]}):
        bad = copy.deepcopy(monitor)
        bad["spec"].update(edit)
        with pytest.raises(AssertionError):
            check_custom(bad)


# ------------------------------------------------------------------------------------- the fleet file
def test_the_fleet_configmap_loads_and_points_at_the_serving_namespace(fleet: FleetConfig) -> None:
    objs = render(BASE)
    name, _ = fleet_text(objs)
    assert re.fullmatch(r"autoscaler-fleet-[a-z0-9]{10}", name), f"{name}: not the generator's hashed name"
    assert one(objs, "ConfigMap", name)["metadata"]["namespace"] == SELF_NS
    k = fleet.kubernetes
    assert (k.namespace, k.namespace_self, k.lease.name) == (SERVING_NS, SELF_NS, "autoscaler-leader")
    assert fleet.prometheus.namespace == SERVING_NS, "the default Prometheus selectors would look elsewhere"
    # the example's services are examples/fleet.yaml's (the copy must not drift)
    example = yaml.safe_load((ROOT / "examples" / "fleet.yaml").read_text())
    assert yaml.safe_load(fleet_text(objs)[1])["services"] == example["services"]
    # the Deployment mounts that ConfigMap where --config reads it
    spec = daemon(objs)["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    config = Path(flags(c["args"])["--config"])
    vol = {v["name"]: v for v in spec["volumes"]}
    mounts = [m for m in c["volumeMounts"] if Path(m["mountPath"]) == config.parent]
    assert len(mounts) == 1 and mounts[0].get("readOnly") is True, c["volumeMounts"]
    assert vol[mounts[0]["name"]]["configMap"]["name"] == name
    assert config.name == "fleet.yaml"


# --------------------------------------------------------------------------------------- the daemon
def test_the_daemon_deployment_is_hardened_probed_and_bounded() -> None:
    dep = daemon(render(BASE))
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SA[1] and pod.get("automountServiceAccountToken", True) is True
    assert pod["terminationGracePeriodSeconds"] == 30
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 65532, psc
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}, psc
    (c,) = pod["containers"]
    assert c["args"] == DAEMON_ARGS
    csc = c["securityContext"]
    assert csc["readOnlyRootFilesystem"] is True and csc["allowPrivilegeEscalation"] is False, csc
    assert csc["capabilities"] == {"drop": ["ALL"]}, csc
    assert csc.get("privileged", False) is False
    assert csc.get("runAsNonRoot", True) is True and csc.get("runAsUser", 65532) == 65532, csc
    assert csc.get("seccompProfile", psc["seccompProfile"]) == {"type": "RuntimeDefault"}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind]), c["resources"]
    assert c["ports"] == [{"name": "http-metrics", "containerPort": PORT, "protocol": "TCP"}]
    env = {e["name"]: e for e in c.get("env", [])}  # each replica's own identity in the Lease
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, env.get("POD_NAME")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path and container_port(c, get["port"]) == PORT, (probe, get)
    tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert len(tmp) == 1, "the read-only root filesystem needs a writable /tmp"
    assert "emptyDir" in {v["name"]: v for v in pod["volumes"]}[tmp[0]["name"]]
    pdb = one(render(BASE), "PodDisruptionBudget", namespace=SELF_NS)
    assert pdb["spec"]["minAvailable"] == 1
    assert selects(pdb["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])


def test_the_service_and_servicemonitor_reach_the_metrics_port() -> None:
    objs = render(BASE)
    dep = daemon(objs)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    svc = one(objs, "Service", "autoscaler", SELF_NS)
    assert selects({"matchLabels": svc["spec"]["selector"]}, labels)
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (port,) = svc["spec"]["ports"]
    assert (port["name"], port["port"]) == ("http-metrics", PORT)
    assert container_port(c, port["targetPort"]) == PORT
    mon = one(objs, "ServiceMonitor", namespace=SELF_NS)
    assert selects(mon["spec"]["selector"], svc["metadata"]["labels"])
    assert mon["spec"]["namespaceSelector"] == {"matchNames": [SELF_NS]}
    (ep,) = mon["spec"]["endpoints"]
    assert (ep["port"], ep.get("path", "/metrics")) == ("http-metrics", "/metrics")


def test_the_daemons_port_is_the_run_commands_default_and_not_prometheuss(fleet: FleetConfig) -> None:
    """`autoscaler run` listens where the manifests and the image expect it without --port, and not on
    9090, where a Prometheus beside it (its default, and the fleet's) listens."""
    from autoscaler.cli.run import run_daemon

    default = inspect.signature(run_daemon).parameters["port"].default  # typer's default is the argument's
    assert default == PORT == 8080
    prometheus = urllib.parse.urlsplit(fleet.prometheus.url or "")
    assert (prometheus.port, default) != (9090, 9090) and prometheus.port == 9090
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"^EXPOSE (\d+)$", dockerfile, re.M) == [str(PORT)]


def test_the_base_labels_every_object_and_selector_it_renders_and_nothing_of_the_example() -> None:
    """``labels`` (includeSelectors) renders what ``commonLabels`` did: the part-of label on every
    object of deploy/base, its pod templates and its selectors (a Deployment's selector cannot change,
    so an upgrade applies over the earlier render); the example vLLM fleet's objects are not the
    autoscaler's and carry none."""
    objs = render(BASE)
    for o in objs:
        assert PART_OF.items() <= o["metadata"].get("labels", {}).items(), f"{o['kind']} {o['metadata']['name']}"
    dep = daemon(objs)
    assert PART_OF.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert PART_OF.items() <= dep["spec"]["selector"]["matchLabels"].items()
    assert PART_OF.items() <= one(objs, "Service", "autoscaler", SELF_NS)["spec"]["selector"].items()
    assert PART_OF.items() <= one(objs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items()
    for o in render(VLLM):
        assert "app.kubernetes.io/part-of" not in o["metadata"].get("labels", {}), o["metadata"]["name"]
    over = {(o["kind"], o["metadata"]["name"]) for o in render(OVERLAY)
            if PART_OF.items() <= o["metadata"].get("labels", {}).items()}
    assert over == {(o["kind"], o["metadata"]["name"]) for o in objs}


# ------------------------------------------------------------------------------------------- RBAC
Atom = tuple[str, str, str, str, str]  # (namespace, apiGroup, resource, verb, resourceName or "*")


def atoms(namespace: str, groups: list[str], resources: list[str], verbs: list[str], names: list[str],
          ) -> set[Atom]:
    return {(namespace, g, r, v, n) for g in groups for r in resources for v in verbs for n in (names or ["*"])}


def workload_resource(w: Any) -> tuple[str, str, bool]:
    """(API group, plural, written through ``<plural>/scale``) of a fleet ``kubernetes.workloads``
    entry, from the connectors' registry."""
    cls = CONNECTORS.get(w.kind, ScaleConnector)
    api_version = w.api_version or cls.default_api_version
    plural = w.plural or cls.default_plural
    return api_version.rpartition("/")[0], plural, cls.scale_subresource


def expected_permissions(cfg: FleetConfig) -> set[Atom]:
    """The least-privilege set for ``cfg``: what the daemon's calls need (docs/deploy.md), by name where
    Kubernetes can restrict a verb by name (get, update, patch of one object)."""
    k = cfg.kubernetes
    ns, self_ns = k.namespace, k.namespace_self
    by_resource: dict[tuple[str, str, bool], list[str]] = {}
    for svc, v in variants(cfg):
        w = k.workload(svc.name, v.name)
        by_resource.setdefault(workload_resource(w), []).append(w.name)
    out: set[Atom] = set()
    for (group, plural, scale), names in by_resource.items():
        out |= atoms(ns, [group], [plural], ["get"], names)
        if scale:
            out |= atoms(ns, [group], [f"{plural}/scale"], ["get", "update"], names)
        else:  # the object itself is replaced (a KServe InferenceService)
            out |= atoms(ns, [group], [plural], ["update"], names)
    out |= atoms(ns, [""], ["pods"], ["list", "patch"] if k.pod_deletion_cost else ["list"], [])
    admission = [k.admission_configmap.format(service=s.name) for s in cfg.services]
    out |= atoms(ns, [""], ["configmaps"], ["get", "update"], admission)
    out |= atoms(ns, [""], ["configmaps"], ["create", "list"], [])
    out |= atoms(self_ns, ["coordination.k8s.io"], ["leases"], ["get", "update"], [k.lease.name])
    out |= atoms(self_ns, ["coordination.k8s.io"], ["leases"], ["create"], [])
    out |= atoms(ns, [""], ["events"], ["create"], [])
    return out


def granted_rules(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(namespace, rule) of every Role rule bound to the daemon's ServiceAccount."""
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects(objs, "Role")}
    out = []
    for b in objects(objs, "RoleBinding"):
        ns = b["metadata"]["namespace"]
        if not any(s["kind"] == "ServiceAccount" and (s.get("namespace"), s["name"]) == SA for s in b["subjects"]):
            continue
        assert b["roleRef"]["kind"] == "Role", b["roleRef"]
        role = roles[(ns, b["roleRef"]["name"])]
        out += [(ns, r) for r in role["rules"]]
    return out


def granted_permissions(objs: list[dict[str, Any]]) -> set[Atom]:
    out: set[Atom] = set()
    for ns, r in granted_rules(objs):
        out |= atoms(ns, r["apiGroups"], r["resources"], r["verbs"], r.get("resourceNames", []))
    return out


def allowed(objs: list[dict[str, Any]], verb: str, ns: str, group: str, resource: str, name: str | None) -> bool:
    """RBAC's decision for the daemon's ServiceAccount (a request without a name matches no resourceNames)."""
    for rns, r in granted_rules(objs):
        names = r.get("resourceNames", [])
        if (rns == ns and group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                and (not names or name in names)):
            return True
    return False


def test_rbac_is_exactly_the_least_privilege_set_for_the_fleet(fleet: FleetConfig) -> None:
    objs = render(BASE)
    granted, expected = granted_permissions(objs), expected_permissions(fleet)
    assert granted - expected == set(), "granted beyond what the daemon's calls need"
    assert expected - granted == set(), "a call the daemon makes is not granted"
    bound_roles = {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in objects(objs, "RoleBinding")}
    assert bound_roles == {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects(objs, "Role")}
    for b in objects(objs, "RoleBinding"):
        assert [(s["kind"], s.get("namespace"), s["name"]) for s in b["subjects"]] == [("ServiceAccount", *SA)]
    for ns, r in granted_rules(objs):
        assert "*" not in r["verbs"] + r["resources"] + r["apiGroups"] + r.get("resourceNames", []), r
        assert "nonResourceURLs" not in r, r
        if r.get("resourceNames"):  # these verbs ignore no name: with resourceNames they would be refused
            assert not set(r["verbs"]) & {"create", "list", "watch", "deletecollection"}, (ns, r)


def test_rbac_allows_the_daemons_calls_and_refuses_the_rest(fleet: FleetConfig) -> None:
    objs = render(BASE)
    names = [f"{s.name}-{v.name}" for s, v in variants(fleet)]
    pod, cm = f"{names[0]}-5d4f8b7c9-x2x7q", f"autoscaler-admission-{fleet.services[0].name}"
    calls = [("get", SERVING_NS, "apps", "deployments", n) for n in names]
    calls += [(v, SERVING_NS, "apps", "deployments/scale", n) for v in ("get", "update") for n in names]
    calls += [("list", SERVING_NS, "", "pods", None), ("create", SERVING_NS, "", "events", None)]
    calls += [("get", SERVING_NS, "", "configmaps", cm), ("update", SERVING_NS, "", "configmaps", cm),
              ("create", SERVING_NS, "", "configmaps", None), ("list", SERVING_NS, "", "configmaps", None)]
    calls += [(v, SELF_NS, "coordination.k8s.io", "leases", "autoscaler-leader") for v in ("get", "update")]
    calls += [("create", SELF_NS, "coordination.k8s.io", "leases", None)]
    for call in calls:
        assert allowed(objs, *call), f"refused: {call}"
    refused = [
        ("update", SERVING_NS, "apps", "deployments", names[0]),  # the whole Deployment, not its Scale
        ("patch", SERVING_NS, "apps", "deployments", names[0]),
        ("delete", SERVING_NS, "apps", "deployments", names[0]),
        ("create", SERVING_NS, "apps", "deployments", None),
        ("update", SERVING_NS, "apps", "deployments/scale", "someone-elses-deployment"),
        ("patch", SERVING_NS, "apps", "deployments/scale", names[0]),  # the daemon PUTs the Scale
        ("get", SERVING_NS, "apps", "deployments", "someone-elses-deployment"),
        ("update", SERVING_NS, "apps", "statefulsets/scale", names[0]),  # no StatefulSet in this fleet
        ("delete", SERVING_NS, "", "pods", pod),
        ("create", SERVING_NS, "", "pods/eviction", pod),
        ("update", SERVING_NS, "", "pods", pod),
        ("get", SERVING_NS, "", "secrets", "hf-token"),
        ("list", SERVING_NS, "", "secrets", None),
        ("update", SERVING_NS, "", "configmaps", "someone-elses-configmap"),
        ("delete", SERVING_NS, "", "configmaps", cm),
        ("list", SELF_NS, "", "configmaps", None),
        ("update", SELF_NS, "coordination.k8s.io", "leases", "someone-elses-lease"),
        ("delete", SELF_NS, "coordination.k8s.io", "leases", "autoscaler-leader"),
        ("create", SERVING_NS, "coordination.k8s.io", "leases", None),
        ("create", SELF_NS, "", "configmaps", None),
        ("get", "default", "apps", "deployments/scale", names[0]),
        ("list", SELF_NS, "", "pods", None),
        ("delete", SERVING_NS, "", "events", None),
        # granted before issue 31's least-privilege pass, called by no code (tests/integration/kubernetes/test_rbac.py)
        ("list", SERVING_NS, "apps", "deployments", None),
        ("watch", SERVING_NS, "apps", "deployments", None),
        ("get", SERVING_NS, "", "pods", pod),
        ("watch", SERVING_NS, "", "pods", None),
        ("patch", SERVING_NS, "", "pods", pod),  # the deletion cost is off in the shipped fleet
        ("patch", SERVING_NS, "", "events", None),
        ("create", SERVING_NS, "events.k8s.io", "events", None),
        ("create", SELF_NS, "", "events", None),
    ]
    for call in refused:
        assert not allowed(objs, *call), f"allowed: {call}"


def test_every_rbac_rule_is_commented_with_the_call_that_needs_it() -> None:
    lines = (ROOT / BASE / "rbac.yaml").read_text().splitlines()
    rules = [i for i, line in enumerate(lines) if re.match(r"^\s*- apiGroups:", line)]
    assert len(rules) == len(granted_rules(render(BASE)))
    for i in rules:
        above = lines[i - 1].strip() if i else ""
        assert above.startswith("#") and len(above) > 10, f"rbac.yaml line {i + 1}: no comment above the rule"


# ------------------------------------------------------------------------------ the example vLLM fleet
def vllm_deployments() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in objects(render(VLLM), "Deployment")}


def test_the_example_vllm_deployments_are_the_fleets_variants(fleet: FleetConfig) -> None:
    deps = vllm_deployments()
    assert set(deps) == {f"{s.name}-{v.name}" for s, v in variants(fleet)}
    for svc, v in variants(fleet):
        name = f"{svc.name}-{v.name}"
        assert fleet.kubernetes.workload(svc.name, v.name).kind == "Deployment"
        assert fleet.kubernetes.workload(svc.name, v.name).name == name
        d = deps[name]
        assert d["metadata"]["namespace"] == fleet.kubernetes.namespace == fleet.prometheus.namespace
        assert "replicas" not in d["spec"], f"{name}: spec.replicas would undo the autoscaler on every apply"
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert labels["variant"] == v.name and labels["app.kubernetes.io/name"] == svc.name, labels
        assert d["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert {"variant", "app.kubernetes.io/name"} <= set(d["spec"]["selector"]["matchLabels"])
        pod = d["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] >= fleet.simulator.client_timeout_s, "too short to drain"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": GPU_PRODUCTS[v.gpu]}
        (c,) = pod["containers"]
        assert c["image"].rsplit(":", 1)[0] == "vllm/vllm-openai"
        f = flags(c["args"])
        assert f["--model"] == svc.model
        assert int(f["--max-model-len"]) == svc.max_model_len
        assert int(f.get("--tensor-parallel-size", "1")) == v.gpus_per_replica
        engine = fleet.engine
        assert (int(f["--max-num-seqs"]), int(f["--max-num-batched-tokens"]), int(f["--block-size"])) == (
            engine.max_num_seqs, engine.max_num_batched_tokens, engine.block_size)
        for kind in ("requests", "limits"):
            assert c["resources"][kind]["nvidia.com/gpu"] == str(v.gpus_per_replica), c["resources"]
        port = int(f.get("--port", "8000"))
        for probe in ("readinessProbe", "startupProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            assert get["path"] == "/health" and container_port(c, get["port"]) == port, (name, probe)
        sp = c["startupProbe"]
        budget = sp.get("initialDelaySeconds", 0) + sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3)
        assert budget >= v.startup_cold_s, f"{name}: liveness would kill a cold start ({budget} s)"
        assert c["lifecycle"]["preStop"]["exec"]["command"], f"{name}: no preStop drain"


def test_pod_names_match_only_their_own_variants_default_selector(fleet: FleetConfig) -> None:
    deps = vllm_deployments()
    # the Deployment controller names pods <deployment>-<template hash>-<5 chars>
    pods = {name: f"{name}-5d4f8b7c9-x2x7q" for name in deps}
    for name in deps:  # the adapter's default: pod=~"<service>-<variant>-.*" (RE2, anchored)
        regex = exact_alternation([name]) + "-.*"
        assert {p for p, pod in pods.items() if re.fullmatch(regex, pod)} == {name}, regex
    for a, da in deps.items():  # no Deployment's selector takes another's pods
        for b, db in deps.items():
            if a != b:
                assert not selects(da["spec"]["selector"], db["spec"]["template"]["metadata"]["labels"]), (a, b)


def test_the_podmonitor_scrapes_every_vllm_pod_and_labels_the_variant(fleet: FleetConfig) -> None:
    objs = render(VLLM)
    mon = one(objs, "PodMonitor", namespace=fleet.prometheus.namespace)
    assert mon["spec"]["namespaceSelector"] == {"matchNames": [fleet.prometheus.namespace]}
    assert "variant" in mon["spec"].get("podTargetLabels", [])
    (ep,) = mon["spec"]["podMetricsEndpoints"]
    assert ep.get("path", "/metrics") == "/metrics"
    for d in objects(objs, "Deployment"):
        assert selects(mon["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"]), d["metadata"]["name"]
        (c,) = d["spec"]["template"]["spec"]["containers"]
        container_port(c, ep["port"])
        assert "prometheus.io/scrape" not in d["spec"]["template"]["metadata"].get("annotations", {}), \
            "scraped twice (annotations and the PodMonitor) doubles every sum"
    assert not selects(mon["spec"]["selector"], daemon(render(BASE))["spec"]["template"]["metadata"]["labels"])


# --------------------------------------------------------------------------------------- the overlay
def contains(obj: Any, patch: Any) -> bool:
    """Whether ``obj`` holds every value of a strategic-merge ``patch`` (lists of named items by name)."""
    if isinstance(patch, dict):
        return isinstance(obj, dict) and all(k in obj and contains(obj[k], v) for k, v in patch.items())
    if isinstance(patch, list) and all(isinstance(p, dict) and "name" in p for p in patch):
        by_name = {o.get("name"): o for o in obj} if isinstance(obj, list) else {}
        return all(p["name"] in by_name and contains(by_name[p["name"]], p) for p in patch)
    return bool(obj == patch)


def test_the_overlay_keeps_namespaces_overrides_images_and_applies_its_patches() -> None:
    def index(objs: list[dict[str, Any]]) -> dict[tuple[str, str | None, str], dict[str, Any]]:
        def name(o: dict[str, Any]) -> str:  # the generated ConfigMap's hash differs between kustomize versions
            n = o["metadata"]["name"]
            return "autoscaler-fleet" if n.startswith("autoscaler-fleet-") else n
        return {(o["kind"], o["metadata"].get("namespace"), name(o)): o for o in objs}

    over, below = index(render(OVERLAY)), {**index(render(BASE)), **index(render(VLLM))}
    assert set(over) == set(below)
    k = kustomization(OVERLAY)
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in k["images"]}
    assert len(images) == 2
    seen = set()
    for key, o in below.items():
        if key[0] != "Deployment":
            continue
        for c, co in zip(o["spec"]["template"]["spec"]["containers"],
                         over[key]["spec"]["template"]["spec"]["containers"], strict=True):
            name = c["image"].rsplit(":", 1)[0]
            assert co["image"] == images.get(name, c["image"]), (key, co["image"])
            if name in images:
                assert co["image"] != c["image"], f"images entry {name}: overrides nothing"
                seen.add(name)
    assert set(images) <= seen, "an images entry matches no container"
    for patch_file in (p["path"] for p in k["patches"]):
        for patch in yaml.safe_load_all((ROOT / OVERLAY / patch_file).read_text()):
            key = (patch["kind"], patch["metadata"]["namespace"], patch["metadata"]["name"])
            assert key in over, f"{patch_file}: patches no object"
            assert contains(over[key], patch), f"{patch_file}: not applied to {key}"
            assert not contains(below[key], patch), f"{patch_file}: changes nothing in {key}"


# -------------------------------------------------------------------------------------------- image
def test_the_dockerfile_runs_the_deployments_command_as_its_user() -> None:
    text = (ROOT / "Dockerfile").read_text()
    instr = [line.split(None, 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
             and not line.startswith((" ", "\t"))]
    by = {}
    for word, *rest in instr:
        by.setdefault(word.upper(), []).append(rest[0] if rest else "")
    # one base, by digest: a tag moves (issue 31, item 13)
    assert len({f.split()[0] for f in by["FROM"]}) == 1, by["FROM"]
    assert all(re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", f.split()[0]) for f in by["FROM"])
    pod = daemon(render(BASE))["spec"]["template"]["spec"]
    (user,) = by["USER"]
    assert int(user.split(":")[0]) == pod["securityContext"]["runAsUser"]
    entry, cmd = json.loads(by["ENTRYPOINT"][-1]), json.loads(by["CMD"][-1])
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry == ["autoscaler"] and entry[0] in scripts
    assert cmd == ["run", "--config", "/etc/autoscaler/fleet.yaml", "--port", str(PORT)]
    assert pod["containers"][0]["args"][: len(cmd)] == cmd
    # the dependencies only from the lock, checked against its hashes; the package itself adds none
    assert re.search(r"pip install --require-hashes --no-deps -r requirements\.lock(\s|$)", text), text
    assert re.search(r"pip install --no-deps \.(\s|$)", text), "the package is not installed with `pip install .`"
    # the build context (.dockerignore) holds exactly what the Dockerfile copies from it
    copied = {src.rstrip("/") for line in by["COPY"] if not line.startswith("--from")
              for src in line.split()[:-1]}
    ignore = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    assert ignore[0] == "*" and {ln[1:] for ln in ignore if ln.startswith("!")} == copied, (ignore, copied)


# ---------------------------------------------------------------- RBAC from the code's own calls
def _calls_of_the_daemons_adapters(cfg: FleetConfig) -> set[tuple[str, str, str, str | None, str | None]]:
    """Every request the daemon's Kubernetes adapters make for ``cfg``, as the emulated API server saw
    them (``Emulator.seen``: verb, group, resource, namespace, name): the components ``autoscaler run``
    builds (autoscaler/daemon.py), each through every path that reaches the server: the Lease
    acquired, renewed and released (``LeaderElector``), each variant's workload read (``ClusterSource``),
    its pods listed (``PendingPods``), scaled up and down with pods to remove first
    (``KubernetesActuator``), an Event per change (``EventRecorder``), the admission ConfigMaps listed,
    each created then replaced, and read by name when the LIST fails (``ConfigMapSink``)."""
    from kubernetes import client

    from autoscaler.adapters.kubernetes import ConfigMapSink, EventRecorder, KubernetesActuator, PendingPods
    from autoscaler.adapters.lease import LeaderElector
    from autoscaler.faults.kubeapi import deployment, emulated_cluster

    k = cfg.kubernetes
    with emulated_cluster() as c:
        api = c.api()
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        for svc, v in variants(cfg):
            name = k.workload(svc.name, v.name).name
            apps.create_namespaced_deployment(k.namespace, deployment(name, k.namespace, 2))
            core.create_namespaced_pod(k.namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-abc", "labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        c.emu.seen.clear()  # the fixtures' own requests are not the daemon's
        elector = LeaderElector(api, k.lease.name, k.namespace_self or k.namespace, "daemon-a", k.lease)
        assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew() and elector.release()
        pending, act = PendingPods(k, cfg.services, api), KubernetesActuator(k, cfg.services, api)
        events, sink = EventRecorder(k, cfg.services, api, "daemon-a"), ConfigMapSink(k, api)
        for svc, v in variants(cfg):
            name = k.workload(svc.name, v.name).name
            assert pending.unschedulable_for(svc.name, v.name) == 0
            assert act.scale(svc.name, v.name, 3).ok and events.scaled(svc.name, v.name, 2, 3, "up")
            assert act.scale(svc.name, v.name, 1, remove_first=[f"{name}-abc"]).ok
        for svc in cfg.services:
            assert sink.publish(svc.name, {"standard": 1.0}).ok and sink.publish(svc.name, {"standard": 0.5}).ok
        c.emu.forbidden.add(("list", "configmaps", None))  # a LIST that fails: each is read by name
        again = ConfigMapSink(k, api)
        for svc in cfg.services:
            assert again.publish(svc.name, {"standard": 2.0}).ok
        return set(c.emu.seen)


def test_rbac_grants_exactly_the_calls_the_daemons_code_makes(fleet: FleetConfig) -> None:
    """Least privilege measured (issue 31, item 13): every request the adapters make is allowed by the
    rendered Roles, and every (namespace, group, resource, verb) the Roles grant is one some request
    used: a grant no code calls fails here (before: deployments list/watch, pods get/watch, events
    patch, events.k8s.io, events in the daemon's namespace)."""
    objs = render(BASE)
    seen = _calls_of_the_daemons_adapters(fleet)
    for verb, group, resource, ns, name in sorted(seen, key=str):
        assert ns is not None and allowed(objs, verb, ns, group, resource, name), \
            f"refused: {verb} {group or 'core'}/{resource} {ns}/{name}"
    used = {(ns, group, resource, verb) for verb, group, resource, ns, _ in seen}
    granted = {(ns, g, r, v) for ns, g, r, v, _ in granted_permissions(objs)}
    assert granted - used == set(), "granted, called by no code"
    # the deletion cost is the one optional call: off in the shipped fleet, it patches pods when on
    assert not any(r == "pods" and v == "patch" for v, _, r, _, _ in seen)
    on = fleet.model_copy(update={"kubernetes": fleet.kubernetes.model_copy(update={"pod_deletion_cost": True})})
    extra = {(ns, g, r, v) for v, g, r, ns, _ in _calls_of_the_daemons_adapters(on)} - used
    assert extra == {(SERVING_NS, "", "pods", "patch")}
