"""Kubernetes behind the loop's interfaces (the official ``kubernetes`` client): the ``Actuator`` over
the scale subresource, the admission thresholds as a ConfigMap per service, and decisions as Events.

Scaling (``KubernetesActuator.scale``) reads the workload's scale subresource (apps/v1 Deployments
and StatefulSets; custom resources such as LeaderWorkerSet through ``CustomObjectsApi``) with its
resourceVersion and replaces it with the new ``spec.replicas``, so a write made since the read is a
409, not a lost update; a 409 (the Deployment's status or metadata changed since the read) is
re-read and retried up to ``kubernetes.conflict_retries`` times with a short backoff within the
tick, then reported as ``conflict``; one whose re-read shows other replicas is another writer's.
Before a scale-down, the pods the decision names to go first (``remove_first``) get the annotation
``controller.kubernetes.io/pod-deletion-cost`` (lowest first), so the ReplicaSet removes them and
keeps the rest (the annotation is honoured by ReplicaSets since Kubernetes 1.22).

Another writer: the actuator remembers what it last wrote to each variant (or found there when it
first read it).
When a read (before a write, or ``check_writers`` at every tick) finds other replicas than that,
someone else wrote them; the actuator does not fight
it: it leaves the variant at that count (``conflict``, "another writer ...") until
``kubernetes.other_writer_quiet_s`` has passed without another such change, and records the change
(``external``) for the daemon's Event and metric. A daemon that starts leading remembers nothing, so
its first read is taken as the state, not as another writer.

Results follow the actuator contract: 403 and 401 are ``forbidden`` with the missing permission
named (verb, resource and namespace), 404, 400 and 422 ``invalid``, 409 after the retries
``conflict``, anything else (5xx, refused connections, timeouts) ``unreachable``. A failed write
changes nothing; the loop keeps the variant at its count and retries next tick.

``ConfigMapSink`` is the daemon's ``AdmissionSink``: the ConfigMap ``autoscaler-admission-<service>``
(``kubernetes.admission_configmap``) holds the keys ``thresholds.json`` (the ``autoscaler/v1``
``AdmissionThresholds`` document of that service alone, docs/admission.md) and one key per priority
(``critical``, ``standard``, ``sheddable``: seconds, or ``none`` for no limit), created when absent
and replaced with its resourceVersion otherwise.

``PendingPods`` reads each variant's pods (the workload's ``spec.selector``) and marks a variant
``unavailable`` while pods of it have been unschedulable (``PodScheduled`` False, reason
``Unschedulable``) for ``kubernetes.pending_timeout_s``, for ``kubernetes.pending_retry_s``;
``ClusterSource`` lays that over a Prometheus observation. A failed read marks nothing (unknown is
not unavailable).

``EventRecorder`` writes each applied change as a core/v1 Event on the workload (reason
``ScaledUp`` / ``ScaledDown``, message the decision's reason), and each change by another writer
(reason ``OtherWriter``, type Warning), so ``kubectl describe`` shows why.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from autoscaler.config import FleetConfig, Workload
from autoscaler.errors import AutoscalerError
from autoscaler.loop.actuate import APPLIED, ActuationResult, ActuationStatus
from autoscaler.loop.admission import API_VERSION, KIND, check_thresholds
from autoscaler.loop.observe import MetricsSource, PendingMarks
from autoscaler.state import ServiceObservation
from autoscaler.urls import redact
from autoscaler.workload.types import PRIORITIES

log = logging.getLogger(__name__)

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
COMPONENT = "autoscaler"
CONFLICT_BACKOFF_S = 0.1
"""First wait before re-reading after a 409, doubled per retry (client-go's ``retry.DefaultRetry``
starts at 10 ms; a tick has seconds to spare)."""


class KubernetesError(AutoscalerError):
    """The Kubernetes API cannot be used at all (no kubeconfig, no in-cluster credentials)."""


def connect(kubeconfig: Path | None = None, context: str | None = None) -> client.ApiClient:
    """A client from ``kubeconfig`` (and ``context``), or the pod's service account in a cluster
    when no kubeconfig is given and one is mounted, else ``$KUBECONFIG`` or ``~/.kube/config``.

    Raises:
        KubernetesError: neither can be loaded (the message names the file and why).
    """
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if kubeconfig is not None and not kubeconfig.is_file():
        raise KubernetesError(f"kubeconfig {kubeconfig}: no such file")
    try:
        if kubeconfig is None and Path("/var/run/secrets/kubernetes.io/serviceaccount/token").is_file():
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        return config.new_client_from_config(config_file=str(kubeconfig) if kubeconfig else None, context=context)
    except (config.ConfigException, OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, TypeError | AttributeError | yaml.YAMLError):
            why = f"not a kubeconfig ({type(exc).__name__})"
        raise KubernetesError(f"kubeconfig {where}: {redact(why)}") from None


def describe(exc: BaseException) -> str:
    """One line from a failed call: the API server's message, else the transport's error."""
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"HTTP {exc.status}: {message or exc.reason}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def result_of(exc: BaseException, what: str) -> ActuationResult:
    """The actuator result of a failed call doing ``what`` (e.g. ``update deployments/scale llm/x``)."""
    if isinstance(exc, ApiException):
        if exc.status in (401, 403):
            return ActuationResult(ActuationStatus.FORBIDDEN, f"forbidden: {what} ({describe(exc)}); grant the "
                                   "daemon's service account that verb on that resource (deploy/base RBAC)")
        if exc.status == 409:
            return ActuationResult(ActuationStatus.CONFLICT, f"{what}: {describe(exc)}")
        if exc.status in (400, 404, 422):
            return ActuationResult(ActuationStatus.INVALID, f"{what}: {describe(exc)}")
    return ActuationResult(ActuationStatus.UNREACHABLE, f"{what}: {describe(exc)}")


TRANSPORT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


class ScaleClient:
    """Reads and replaces the scale subresource of one kind of workload."""

    def __init__(self, api: client.ApiClient) -> None:
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def resource(self, w: Workload) -> tuple[str, str]:
        """``(API group, plural)`` of ``w``, as RBAC names them."""
        if w.kind == "Deployment":
            return "apps", "deployments"
        if w.kind == "StatefulSet":
            return "apps", "statefulsets"
        assert w.api_version is not None and w.plural is not None  # the config requires them
        return w.api_version.split("/")[0], w.plural

    def where(self, w: Workload, namespace: str) -> str:
        """``w``'s scale as errors and logs name it, e.g. ``deployments/scale llm/x (API group apps)``."""
        group, plural = self.resource(w)
        return f"{plural}/scale {namespace}/{w.name} (API group {group or 'core'})"

    def read(self, w: Workload, namespace: str) -> tuple[int, str | None]:
        """``(spec.replicas, resourceVersion)`` of ``w``'s scale."""
        if w.kind == "Deployment":
            s = self.apps.read_namespaced_deployment_scale(w.name, namespace)
        elif w.kind == "StatefulSet":
            s = self.apps.read_namespaced_stateful_set_scale(w.name, namespace)
        else:
            group, version = (w.api_version or "").split("/")
            raw = self.custom.get_namespaced_custom_object_scale(group, version, namespace, w.plural, w.name)
            return int(raw.get("spec", {}).get("replicas", 0)), raw.get("metadata", {}).get("resourceVersion")
        return int(s.spec.replicas or 0), s.metadata.resource_version

    def replace(self, w: Workload, namespace: str, replicas: int, resource_version: str | None) -> None:
        """Set ``w``'s scale to ``replicas`` if it is still at ``resource_version`` (else HTTP 409)."""
        body = {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": w.name, "namespace": namespace, "resourceVersion": resource_version},
                "spec": {"replicas": replicas}}
        if w.kind == "Deployment":
            self.apps.replace_namespaced_deployment_scale(w.name, namespace, body)
        elif w.kind == "StatefulSet":
            self.apps.replace_namespaced_stateful_set_scale(w.name, namespace, body)
        else:
            group, version = (w.api_version or "").split("/")
            self.custom.replace_namespaced_custom_object_scale(group, version, namespace, w.plural, w.name, body)


class KubernetesActuator:
    """The ``Actuator`` over the scale subresource (module docstring).

    Args:
        cfg: the fleet (``kubernetes`` section: namespace, workloads, conflict retries).
        api: a client (``connect``).
        sleep: how to wait between conflict retries (tests pass a recorder).
    """

    def __init__(self, cfg: FleetConfig, api: client.ApiClient, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.kube = cfg.kubernetes
        self.scales = ScaleClient(api)
        self.core = client.CoreV1Api(api)
        self.sleep = sleep
        self.clock = clock
        self.written: dict[tuple[str, str], int] = {}
        """(service, variant) -> the replicas last written (or found already there)."""
        self.paused_until: dict[tuple[str, str], float] = {}
        self.external: list[tuple[str, str, int, int]] = []
        """``(service, variant, replicas we wrote, replicas found)`` of each change another writer made."""
        self.changes: list[tuple[str, str, int, int]] = []
        """``(service, variant, replicas before, after)`` of every write that changed a scale, in order;
        the daemon takes them to record Events."""

    def paused(self, service: str, variant: str) -> bool:
        """Whether the variant is left alone after another writer's change (module docstring)."""
        return self.clock() < self.paused_until.get((service, variant), float("-inf"))

    def _other_writer(self, key: tuple[str, str], current: int, where: str) -> ActuationResult | None:
        """A ``conflict`` when another writer changed the variant since our write or it is still
        paused after one; None when the write may go ahead."""
        ours = self.written.get(key)
        now = self.clock()
        if ours is not None and current != ours:  # changed behind our back: adopt it, pause
            self.external.append((*key, ours, current))
            self.written[key] = current
            self.paused_until[key] = now + self.kube.other_writer_quiet_s
            log.warning("%s: another writer set %d replicas (we wrote %d); left alone for %g s", where, current,
                        ours, self.kube.other_writer_quiet_s)
        if now < self.paused_until.get(key, float("-inf")):
            left = self.paused_until[key] - now
            return ActuationResult(ActuationStatus.CONFLICT, f"{where}: another writer set {current} replicas; "
                                   f"left alone for {left:.0f} s more")
        return None

    def check_writers(self) -> None:
        """Read every variant of the fleet and note another writer's change (``_other_writer``),
        whether or not this tick writes it: a hand edit is seen within a tick, not at the next write.
        A variant read for the first time is taken as it is (the state this actuator starts from)."""
        for svc in self.cfg.services:
            for v in svc.variants:
                key = (svc.name, v.name)
                w = self.kube.workload(*key)
                where = self.scales.where(w, self.kube.namespace)
                try:
                    current, _ = self.scales.read(w, self.kube.namespace)
                except TRANSPORT_ERRORS as exc:
                    log.warning("%s not read: %s", where, describe(exc))
                    continue
                if key not in self.written:
                    self.written[key] = current
                self._other_writer(key, current, where)

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        """Set the variant's replicas (module docstring); ``remove_first`` pods get the lowest deletion cost."""
        key = (service, variant)
        w = self.kube.workload(service, variant)
        ns = self.kube.namespace
        where = self.scales.where(w, ns)
        what = f"update {where}"
        note = ""
        for attempt in range(self.kube.conflict_retries + 1):
            try:
                current, version = self.scales.read(w, ns)
            except TRANSPORT_ERRORS as exc:
                return result_of(exc, f"get {where}")
            if attempt == 0:
                first = current
            elif current != first:  # the 409 was another writer changing the replicas, not a status update
                self.written[key] = first
            held = self._other_writer(key, current, where)
            if held is not None:
                return held
            if current == replicas:  # already there (the metrics lag the API server): nothing to write
                self.written[key] = current
                return APPLIED
            if replicas < current and remove_first and attempt == 0:
                note = self._deletion_cost(ns, remove_first)
            try:
                self.scales.replace(w, ns, replicas, version)
            except TRANSPORT_ERRORS as exc:
                if isinstance(exc, ApiException) and exc.status == 409 and attempt < self.kube.conflict_retries:
                    self.sleep(CONFLICT_BACKOFF_S * 2 ** attempt)
                    continue
                res = result_of(exc, what)
                if res.status is ActuationStatus.CONFLICT:
                    res = ActuationResult(res.status, f"{res.message} (after {attempt + 1} attempts)")
                return res
            self.changes.append((service, variant, current, replicas))
            self.written[key] = replicas
            return ActuationResult(ActuationStatus.APPLIED, note) if note else APPLIED
        raise AssertionError("unreachable: the loop returns on its last attempt")

    def _deletion_cost(self, namespace: str, pods: Sequence[str]) -> str:
        """Give ``pods`` deletion costs ``-len(pods)`` .. ``-1`` in order; a note when some failed (the
        scale-down goes ahead: the ReplicaSet then picks by its own rules)."""
        failed = []
        for i, pod in enumerate(pods):
            body = {"metadata": {"annotations": {DELETION_COST: str(i - len(pods))}}}
            try:
                self.core.patch_namespaced_pod(pod, namespace, body)
            except TRANSPORT_ERRORS as exc:
                failed.append(f"{pod} ({describe(exc)})")
        if failed:
            log.warning("deletion cost not set on %s", ", ".join(failed))
            return f"deletion cost not set on {', '.join(failed)}"
        return ""


class ConfigMapSink:
    """The ``AdmissionSink`` that writes one ConfigMap per service (module docstring)."""

    def __init__(self, cfg: FleetConfig, api: client.ApiClient) -> None:
        self.kube = cfg.kubernetes
        self.core = client.CoreV1Api(api)
        self.generation: dict[str, int] = {}

    def name(self, service: str) -> str:
        """The service's ConfigMap name."""
        return self.kube.admission_configmap.format(service=service)

    def data(self, service: str, thresholds: Mapping[str, float | None]) -> dict[str, str]:
        """The ConfigMap's ``data`` for ``thresholds`` (module docstring)."""
        full = {p: thresholds.get(p) for p in PRIORITIES}
        doc = {"apiVersion": API_VERSION, "kind": KIND, "generation": self.generation.get(service, 0),
               "unit": "seconds of estimated queue wait", "priorities": list(PRIORITIES),
               "services": {service: {"thresholds": full, "updated_unix_s": time.time()}}}
        return {"thresholds.json": json.dumps(doc, sort_keys=True),
                **{p: "none" if x is None else f"{x:g}" for p, x in full.items()}}

    def publish(self, service: str, thresholds: Mapping[str, float | None]) -> ActuationResult:
        """Write ``thresholds`` to the service's ConfigMap, or refuse a malformed set (``invalid``)."""
        why = check_thresholds(thresholds)
        if why is not None:
            return ActuationResult(ActuationStatus.INVALID, f"{service}: {why}")
        ns, name = self.kube.namespace, self.name(service)
        self.generation[service] = self.generation.get(service, 0) + 1
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": name, "namespace": ns,
                                             "labels": {"app.kubernetes.io/managed-by": COMPONENT}},
                                "data": self.data(service, thresholds)}
        try:
            existing = self.core.read_namespaced_config_map(name, ns)
        except ApiException as exc:
            if exc.status != 404:
                return result_of(exc, f"get configmaps {ns}/{name}")
            try:
                self.core.create_namespaced_config_map(ns, body)
            except TRANSPORT_ERRORS as exc2:
                return result_of(exc2, f"create configmaps {ns}/{name}")
            return APPLIED
        except TRANSPORT_ERRORS as exc:
            return result_of(exc, f"get configmaps {ns}/{name}")
        body["metadata"]["resourceVersion"] = existing.metadata.resource_version
        try:
            self.core.replace_namespaced_config_map(name, ns, body)
        except TRANSPORT_ERRORS as exc:
            return result_of(exc, f"update configmaps {ns}/{name}")
        return APPLIED


class PendingPods:
    """Which variants cannot place their pods (module docstring).

    Args:
        cfg: the fleet (``kubernetes``: namespace, workloads, pending timeout and retry).
        api: a client.
        clock: unix seconds (pod timestamps are wall time).
    """

    def __init__(self, cfg: FleetConfig, api: client.ApiClient, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.kube = cfg.kubernetes
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.clock = clock
        self.marks = PendingMarks(self.kube.pending_timeout_s, self.kube.pending_retry_s)

    def unschedulable_for(self, service: str, variant: str, dep: Any = None) -> float | None:
        """Seconds the longest-unschedulable pod of the variant has been so (0 when none is); None
        when the pods cannot be read (a Deployment only: other kinds are not read). ``dep``: the
        Deployment, when the caller has just read it."""
        w = self.kube.workload(service, variant)
        if w.kind != "Deployment":
            return None
        ns = self.kube.namespace
        try:
            if dep is None:
                dep = self.apps.read_namespaced_deployment(w.name, ns)
            labels = (dep.spec.selector.match_labels or {}) if dep.spec and dep.spec.selector else {}
            if not labels:
                return None
            selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            pods = self.core.list_namespaced_pod(ns, label_selector=selector).items
        except TRANSPORT_ERRORS as exc:
            log.warning("pods of %s/%s not read: %s", ns, w.name, describe(exc))
            return None
        now = self.clock()
        longest = 0.0
        for pod in pods:
            if pod.status is None or pod.status.phase != "Pending" or pod.metadata.deletion_timestamp is not None:
                continue
            for c in pod.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    since = c.last_transition_time or pod.metadata.creation_timestamp
                    if since is not None:
                        longest = max(longest, now - since.timestamp())
        return longest

    def unavailable(self, service: str, variant: str, dep: Any = None) -> bool:
        """Whether the variant is marked unavailable now (marking it when its pods have been
        unschedulable for ``pending_timeout_s``); ``dep`` as ``unschedulable_for``."""
        key = (service, variant)
        now = self.clock()
        if self.marks.marked(key, now):
            return True
        stuck = self.unschedulable_for(service, variant, dep)
        if self.marks.mark_if_stuck(key, stuck, now):
            log.warning("%s/%s: pods unschedulable for %.0f s: unavailable for %g s, its demand goes to the other "
                        "variants", service, variant, stuck, self.kube.pending_retry_s)
            return True
        return False


class ClusterSource:
    """A ``MetricsSource``: ``source``'s observation with each variant's replica counts read from the
    API server (the workload's ``spec.replicas`` and ``status.readyReplicas``: ready, and starting
    = wanted - ready, Pending pods included) where it answers, for Deployments and StatefulSets, and
    the variants ``pods`` marks unavailable. kube-state-metrics, through Prometheus, lags the API
    server by a scrape or more: a count read from it can turn a scale-up into an absolute write
    below what the workload already has."""

    def __init__(self, source: MetricsSource, pods: PendingPods, api: client.ApiClient) -> None:
        self.source = source
        self.pods = pods
        self.kube = pods.kube
        self.apps = client.AppsV1Api(api)

    def _read(self, service: str, variant: str) -> Any:
        """The variant's Deployment or StatefulSet from the API server; None for other kinds or when
        it does not answer."""
        w = self.kube.workload(service, variant)
        ns = self.kube.namespace
        try:
            if w.kind == "Deployment":
                return self.apps.read_namespaced_deployment(w.name, ns)
            if w.kind == "StatefulSet":
                return self.apps.read_namespaced_stateful_set(w.name, ns)
        except TRANSPORT_ERRORS as exc:
            log.warning("%s/%s not read: %s", ns, w.name, describe(exc))
        return None

    def counts(self, service: str, variant: str, obj: Any = None) -> tuple[int, int] | None:
        """``(ready, starting)`` of the variant's workload (``obj``, else read now); None when unknown."""
        obj = obj if obj is not None else self._read(service, variant)
        if obj is None:
            return None
        wanted = int(obj.spec.replicas if obj.spec and obj.spec.replicas is not None else 1)
        ready = int((obj.status.ready_replicas if obj.status else None) or 0)
        return min(ready, wanted), max(wanted - ready, 0)

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        """``source.observe(now)`` with the API server's counts and the unavailable variants flagged,
        from one read of each workload."""
        observations = self.source.observe(now)
        for name, obs in observations.items():
            for v, vo in obs.variants.items():
                obj = self._read(name, v)
                counted = self.counts(name, v, obj)
                if counted is not None:
                    vo.ready, vo.starting = counted
                    vo.counts_known = True
                vo.unavailable = self.pods.unavailable(name, v, obj)
        return observations


class EventRecorder:
    """Writes decisions as core/v1 Events on the workloads (module docstring); failures are logged,
    never raised (an Event is a record, not an action)."""

    def __init__(self, cfg: FleetConfig, api: client.ApiClient, identity: str) -> None:
        self.kube = cfg.kubernetes
        self.core = client.CoreV1Api(api)
        self.scales = ScaleClient(api)
        self.identity = identity

    def scaled(self, service: str, variant: str, before: int, after: int, reason: str) -> bool:
        """Record that ``variant`` of ``service`` went from ``before`` to ``after`` replicas because of
        ``reason``; False when the Event could not be written."""
        return self._event(service, variant, "ScaledUp" if after > before else "ScaledDown", "Normal",
                           f"{before} -> {after} replicas: {reason}")

    def other_writer(self, service: str, variant: str, ours: int, theirs: int, quiet_s: float) -> bool:
        """Record that another writer set ``theirs`` replicas where the daemon wrote ``ours``, and that the
        daemon leaves the variant alone for ``quiet_s``; False when the Event could not be written."""
        return self._event(service, variant, "OtherWriter", "Warning",
                           f"replicas set to {theirs} by another writer (the autoscaler wrote {ours}); the autoscaler "
                           f"leaves them alone until {quiet_s:g} s pass without another such change")

    def _event(self, service: str, variant: str, reason: str, kind: str, message: str) -> bool:
        w = self.kube.workload(service, variant)
        ns = self.kube.namespace
        now = datetime.now(UTC)
        group, _ = self.scales.resource(w)
        api_version = "apps/v1" if group == "apps" else (w.api_version or "")
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{w.name}.", namespace=ns),
            involved_object=client.V1ObjectReference(kind=w.kind, name=w.name, namespace=ns, api_version=api_version),
            reason=reason, type=kind, message=message,
            source=client.V1EventSource(component=COMPONENT, host=self.identity),
            reporting_component=COMPONENT, reporting_instance=self.identity,
            first_timestamp=now, last_timestamp=now, count=1)
        try:
            self.core.create_namespaced_event(ns, event)
        except TRANSPORT_ERRORS as exc:
            log.warning("event on %s/%s not written: %s", ns, w.name, describe(exc))
            return False
        return True
