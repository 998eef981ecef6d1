"""Kubernetes behind the loop's interfaces (the official ``kubernetes`` client): the ``Actuator`` over
each variant's workload connector, the admission thresholds as a ConfigMap per service, and
decisions as Events.

Each variant's workload is reached through the connector of its kind (``autoscaler.adapters.workloads``:
Deployment and StatefulSet through apps/v1's scale subresource, LeaderWorkerSet and any custom
resource through ``CustomObjectsApi``'s, a KServe InferenceService through its predictor's
``minReplicas`` / ``maxReplicas``); nothing here branches on the kind.

Scaling (``KubernetesActuator.scale``) reads the workload's replica count with its resourceVersion
and writes the new count with it, so a write made since the read is a 409, not a lost update; a 409
(the object's status or metadata changed since the read) is re-read and retried up to
``kubernetes.conflict_retries`` times with a short backoff within the tick, then reported as
``conflict``; one whose re-read shows other replicas is another writer's. The result carries
``before`` / ``after`` when the count changed and ``external`` for another writer's change, which the
daemon records as Events. Before a scale-down, the pods the decision names to go first
(``remove_first``) get the annotation ``controller.kubernetes.io/pod-deletion-cost`` (lowest first),
so the ReplicaSet removes them and keeps the rest (the annotation is honoured by ReplicaSets since
Kubernetes 1.22, so only for Deployments: a StatefulSet removes its highest ordinal, a
LeaderWorkerSet its highest group, other kinds as their controller chooses, and for them nothing is
annotated, ``WorkloadConnector.removal_order``, logged once). Costs an earlier scale-down left on
pods that stayed (the ReplicaSet may have removed others, or the decision changed) are cleared first:
the daemon marks the pods it annotates (``COST_MARK``) and removes both annotations from the
workload's other pods, so an old cost never picks the next victims.

Another writer: each connector remembers what was last written to its workload (or found there when
it was first read). When a read (before a write, or ``check_writers`` at every tick) finds other
replicas than that, someone else wrote them; the actuator does not fight it: it leaves the variant at
that count (``conflict``, "another writer ...") until ``kubernetes.other_writer_quiet_s`` has passed
without another such change, and returns the change (an ``ExternalChange``: in the write's result,
or from ``check_writers``) for the daemon's Event and metric. A daemon that starts leading remembers
nothing, so its first read is taken as the state, not as another writer.

Results follow the actuator contract: 403 and 401 are ``forbidden`` with the missing permission
named (verb, resource and namespace), 404, 400 and 422 ``invalid``, 409 after the retries
``conflict``, anything else (5xx, refused connections, timeouts) ``unreachable``. A failed write
changes nothing; the loop keeps the variant at its count and retries next tick.

``ConfigMapSink`` is the daemon's ``AdmissionSink``: the ConfigMap ``autoscaler-admission-<service>``
(``kubernetes.admission_configmap``) holds the keys ``thresholds.json`` (the ``autoscaler/v1``
``AdmissionThresholds`` document of that service alone, docs/admission.md) and one key per priority
(``critical``, ``standard``, ``sheddable``: seconds, or ``none`` for no limit), created when absent
and replaced with its resourceVersion otherwise. Its document carries the writing leader and a
generation in that leader's term (``loop.admission``), so a gateway can tell it from a former
leader's; like a scale, it is written only while the fence says the daemon still leads for longer
than the call may take. It is written only when its content changes (the thresholds or the ITL
budget) or ``kubernetes.admission_heartbeat_s`` after its last write (0: every publish), so a steady
fleet's tick sends no ConfigMap call; a change is a PUT with the resourceVersion this sink last
wrote (no GET), and a GET then a PUT again only when that PUT is refused (409: someone else wrote
it, 404: it was deleted, then created). The first publish of a sink (a new leader, a new term) finds
the ConfigMap in one LIST of the namespace's ConfigMaps labelled ``app.kubernetes.io/managed-by=autoscaler``,
taken once for all its services: absent, it is created; present, replaced on the listed version, or
not written at all when it already holds the same content written less than the heartbeat ago
(``ConfigMapSink``: why a reader cannot tell); a 409 or 404 on that write reads it by name, then writes.

``PendingPods`` reads each variant's pods (selected as its connector says) and marks a variant
``unavailable`` while pods of it have been unschedulable (``PodScheduled`` False, reason
``Unschedulable``) for ``kubernetes.pending_timeout_s``, for ``kubernetes.pending_retry_s``;
``ClusterSource`` lays that over a Prometheus observation, with the seconds the variant's
longest-unschedulable pod has been so (``VariantObservation.unschedulable_s``, on the daemon's clock;
None where the pods were not read). A failed read marks nothing (unknown is not unavailable).

Reads from a watch cache (``kubernetes.watch``, off by default): ``watch_cache`` builds one
``WorkloadCache`` (``autoscaler.adapters.workloads.cache``: a LIST then a WATCH per resource, in a
thread) that every connector of the actuator, ``PendingPods`` and ``EventRecorder`` reads Deployments,
StatefulSets and their pods from, so a tick sends the API server its writes alone; other kinds are
still read with GETs. A cache not listed yet, or whose watch has been down for longer than
``kubernetes.watch_stale_s``, fails every read (``CacheStale``): ``ClusterSource`` then marks the
variant's counts unknown (the loop holds it), the writer check skips it, a scale writes nothing
(``unreachable``). A write's answer goes to the cache, and after a 409 the scale is read again from
the API server, not from the cache.

``EventRecorder`` writes each applied change as a core/v1 Event on the workload (reason
``ScaledUp`` / ``ScaledDown``, message the decision's reason), and each change by another writer
(reason ``OtherWriter``, type Warning), so ``kubectl describe`` shows why; ``result`` writes those a
write's result calls for. The ``involvedObject`` is the connector's reference (with the object's uid).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from autoscaler.adapters.workloads import (
    TRANSPORT_ERRORS,
    WorkloadConnector,
    WorkloadError,
    WorkloadState,
    connector,
    connector_class,
)
from autoscaler.adapters.workloads.base import CacheStale, FailedReads, ObjectError, describe
from autoscaler.adapters.workloads.cache import CACHED, WorkloadCache
from autoscaler.config import KubernetesConfig, Service, Variant
from autoscaler.errors import AutoscalerError
from autoscaler.loop.actuate import APPLIED, ActuationResult, ActuationStatus, ExternalChange
from autoscaler.loop.admission import API_VERSION, KIND, TERM_BITS, check_itl_budget, check_thresholds
from autoscaler.loop.observe import MetricsSource, PendingMarks
from autoscaler.state import ServiceObservation
from autoscaler.urls import check_url, redact
from autoscaler.workload.types import PRIORITIES

log = logging.getLogger(__name__)

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
COST_MARK = "autoscaler/deletion-cost"
"""Set beside ``DELETION_COST`` on the pods the daemon annotates, so it clears only costs it set."""
COMPONENT = "autoscaler"
CONFLICT_BACKOFF_S = 0.1
"""First wait before re-reading after a 409, doubled per retry (client-go's ``retry.DefaultRetry``
starts at 10 ms; a tick has seconds to spare)."""


NO_RETRIES = 0
"""The client's retries (``Configuration.retries``, handed to urllib3): none. Left unset, urllib3's default
(3) re-sends a PUT whose answer did not come within the deadline (the call then lasts up to four
deadlines, and a write may land that long after the fence allowed it: "Fencing a former leader",
docs/daemon.md) and sleeps through up to three ``Retry-After`` waits of any length on a 429. client-go
retries a 429 after its Retry-After within the request's context deadline and never re-sends a
timed-out write; here a 429 fails the call and the actuator writes nothing before its Retry-After has
passed (``KubernetesActuator.scale``), and a write without an answer is the next tick's to repeat."""


class KubernetesError(AutoscalerError):
    """The Kubernetes API cannot be used at all (no kubeconfig, no in-cluster credentials)."""


def connect(kubeconfig: Path | None = None, context: str | None = None,
            timeout_s: float | None = None) -> client.ApiClient:
    """A client from ``kubeconfig`` (and ``context``), or the pod's service account in a cluster
    when no kubeconfig is given and one is mounted, else ``$KUBECONFIG`` or ``~/.kube/config``;
    every call of it gives up after ``timeout_s`` (connect and read; None: no deadline).

    Raises:
        KubernetesError: neither can be loaded, or the server is not an ``http(s)://HOST[:PORT][/path]``
            URL (the message names the file and why).
    """
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if kubeconfig is not None and not kubeconfig.is_file():
        raise KubernetesError(f"kubeconfig {kubeconfig}: no such file")
    in_cluster = Path("/var/run/secrets/kubernetes.io/serviceaccount/token").is_file()
    if kubeconfig is None and not in_cluster and not os.environ.get("KUBECONFIG") \
            and not Path("~/.kube/config").expanduser().is_file():
        raise KubernetesError("no kubeconfig: ~/.kube/config does not exist, $KUBECONFIG is unset and this is not "
                              "a pod with a service account (pass --kubeconfig)")
    try:
        cfg = client.Configuration()
        if kubeconfig is None and in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                    client_configuration=cfg, persist_config=False)
        cfg.retries = NO_RETRIES
        api = client.ApiClient(cfg)
        # the client takes any string as the server (`ht!tp://::::`) and fails at the first call instead
        check_url(api.configuration.host, "server URL")
        return with_deadline(api, timeout_s)
    except (config.ConfigException, OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, TypeError | AttributeError | yaml.YAMLError):
            why = f"not a kubeconfig ({type(exc).__name__})"
        raise KubernetesError(f"kubeconfig {where}: {redact(why)}") from None


def with_deadline(api: client.ApiClient, timeout_s: float | None) -> client.ApiClient:
    """``api`` with every call that names no ``_request_timeout`` of its own bounded by ``timeout_s``
    (connect and read): the client has no default, so a hung API server hangs a call, and the tick
    or the renewal making it, for ever. Unchanged for None.

    The generated API classes pass ``_request_timeout`` to ``ApiClient.call_api`` as a keyword (None
    when the caller gave none); this instance's ``call_api`` fills it in.
    """
    if timeout_s is None:
        return api
    call = api.call_api

    def call_api(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = (timeout_s, timeout_s)
        return call(*args, **kwargs)

    api.call_api = call_api
    return api


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
    if isinstance(exc, ObjectError):
        return ActuationResult(ActuationStatus.INVALID, f"{what}: {exc}")
    return ActuationResult(ActuationStatus.UNREACHABLE, f"{what}: {describe(exc)}")


def connectors(kube: KubernetesConfig, services: Sequence[Service], api: client.ApiClient,
               cache: WorkloadCache | None = None) -> dict[tuple[str, str], WorkloadConnector]:
    """``(service, variant) -> WorkloadConnector`` of every variant of ``services`` (``workloads.connector``),
    reading from ``cache`` the kinds it holds.

    Raises:
        WorkloadError: a workload of an unknown kind without api_version and plural, or a known kind
            with another API version (one line).
    """
    check_workloads(kube, services)
    out: dict[tuple[str, str], WorkloadConnector] = {}
    for svc in services:
        for v in scaled_variants(svc):
            conn = connector(api, kube.workload(svc.name, v.name), kube.namespace, kube.other_writer_quiet_s)
            if cache is not None and conn.group == "apps" and conn.plural in CACHED:
                conn.attach(cache.informer(conn.plural), cache.informer("pods"))
            out[(svc.name, v.name)] = conn
    return out


def scaled_variants(svc: Service) -> list[Variant]:
    """Every variant of ``svc`` with a workload of its own: its aggregated variants, then its prefill and
    decode pools' (``Service.roles``: each pool variant is scaled through its own workload)."""
    return svc.variants + [v for _, v in svc.role_variants()]


def watch_cache(kube: KubernetesConfig, services: Sequence[Service], api: client.ApiClient,
                clock: Callable[[], float] = time.monotonic) -> WorkloadCache | None:
    """The watch cache of the fleet's workloads and pods (``kubernetes.watch``), not started; None when
    ``kubernetes.watch`` is off or no workload's kind is cached.

    Raises:
        WorkloadError: as ``connectors``.
    """
    if not kube.watch:
        return None
    check_workloads(kube, services)
    plurals = {connector_class(kube.workload(s.name, v.name)).resolve(kube.workload(s.name, v.name))[1]
               for s in services for v in scaled_variants(s)}
    if not plurals & CACHED:
        return None
    return WorkloadCache(api, kube.namespace, plurals, kube.watch_stale_s, kube.watch_timeout_s, clock)


def cached_workloads(kube: KubernetesConfig, services: Sequence[Service]) -> dict[str, set[str]]:
    """Plural -> the names of ``services``' workloads of that kind (every variant with a workload of its
    own, ``scaled_variants``): what ``WorkloadCache.cover`` keeps for them.

    Raises:
        WorkloadError: as ``connectors``.
    """
    out: dict[str, set[str]] = {}
    for svc in services:
        for v in scaled_variants(svc):
            w = kube.workload(svc.name, v.name)
            out.setdefault(connector_class(w).resolve(w)[1], set()).add(str(w.name))
    return out


def check_workloads(kube: KubernetesConfig, services: Sequence[Service]) -> None:
    """Check every variant's workload against the connector registry, with no call to the API server
    (``autoscaler run`` does it before connecting).

    Raises:
        WorkloadError: one line naming ``kubernetes.workloads.<service>.<variant>`` and the problem.
    """
    for svc in services:
        for v in scaled_variants(svc):
            try:
                connector_class(kube.workload(svc.name, v.name))
            except WorkloadError as exc:
                raise WorkloadError(f"kubernetes.workloads.{svc.name}.{v.name}: {exc}") from None


class KubernetesActuator:
    """The ``Actuator`` over each variant's workload connector (module docstring).

    Args:
        kube: the fleet file's ``kubernetes`` section (namespace, workloads, conflict retries).
        services: the services whose variants' workloads it scales.
        api: a client (``connect``).
        sleep: how to wait between conflict retries (tests pass a recorder).
        clock: monotonic seconds (the other-writer quiet period).
        fence: asked immediately before each write (after its read): False abandons the write (the
            daemon's: it still leads for longer than a call may take); None: always write.
        cache: where the workloads are read from (``watch_cache``, started); None: GETs.

    Raises:
        WorkloadError: as ``connectors``.
    """

    def __init__(self, kube: KubernetesConfig, services: Sequence[Service], api: client.ApiClient,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, fence: Callable[[], bool] | None = None,
                 cache: WorkloadCache | None = None) -> None:
        self.kube = kube
        self.connectors = connectors(kube, services, api, cache)
        self.core = client.CoreV1Api(api)
        self._cost_ignored: set[tuple[str, str]] = set()  # workloads whose kind ignores deletion costs, logged
        self.sleep = sleep
        self.clock = clock
        self.fence = fence
        self.not_before = float("-inf")
        """``clock`` time before which no scale is written: a 429's ``Retry-After`` (``_throttled``)."""

    def paused(self, service: str, variant: str) -> bool:
        """Whether the variant is left alone after another writer's change (module docstring)."""
        return self.connectors[(service, variant)].paused_for(self.clock()) > 0

    def _note(self, conn: WorkloadConnector, current: int) -> ExternalChange | None:
        """``conn.note``, logged when it is another writer's change."""
        ext = conn.note(current, self.clock())
        if ext is not None:
            log.warning("%s: another writer set %d replicas (we wrote %d); left alone for %g s", conn.where(),
                        ext.theirs, ext.ours, ext.quiet_s)
        return ext

    def check_writers(self) -> dict[tuple[str, str], ExternalChange]:
        """Read every variant of the fleet and return another writer's changes, whether or not this
        tick writes the variant: a hand edit is seen within a tick, not at the next write. A variant
        read for the first time is taken as it is (the state this actuator starts from)."""
        found = {}
        failed = FailedReads("writer check")
        for key, conn in self.connectors.items():
            try:
                current = conn.read_scale().replicas
            except TRANSPORT_ERRORS as exc:
                failed.add(conn.where(), exc)
                continue
            ext = self._note(conn, current)
            if ext is not None:
                found[key] = ext
        failed.flush()
        return found

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        """Set the variant's replicas (module docstring); ``remove_first`` pods get the lowest deletion
        cost. The result carries ``before`` / ``after`` when the count changed and ``external`` when
        the read found another writer's change."""
        conn = self.connectors[(service, variant)]
        ns = self.kube.namespace
        where = conn.where()
        what = f"update {where}"
        wait = self.not_before - self.clock()
        if wait > 0:  # the API server asked for a pause (429 Retry-After): not a call before it ends
            return ActuationResult(ActuationStatus.UNREACHABLE, f"{where}: not written: the API server asked to "
                                   f"retry after {wait:.0f} s more (HTTP 429)")
        note = ""
        external: ExternalChange | None = None
        first = 0
        for attempt in range(self.kube.conflict_retries + 1):
            try:  # after a 409 the cache may not show the change yet: read the API server
                read = conn.read_scale(fresh=True) if attempt and getattr(conn, "cached", None) else conn.read_scale()
            except TRANSPORT_ERRORS as exc:
                self._throttled(exc)
                return replace(result_of(exc, f"get {where}"), external=external)
            current = read.replicas
            if attempt == 0:
                first = current
            elif current != first:  # the 409 was another writer changing the replicas, not a status update
                conn.wrote(first)
            external = self._note(conn, current) or external
            left = conn.paused_for(self.clock())
            if left > 0:
                return ActuationResult(ActuationStatus.CONFLICT, f"{where}: another writer set {current} replicas; "
                                       f"left alone for {left:.0f} s more", external=external)
            if current == replicas:  # already there (the metrics lag the API server): nothing to write
                conn.wrote(current)
                return replace(APPLIED, external=external)
            if self.fence is not None and not self.fence():  # leadership may have ended during the read
                return ActuationResult(ActuationStatus.NOT_LEADER, f"{where}: not written: this daemon may no longer "
                                       "lead by the time the write lands", external=external)
            if replicas < current and remove_first and attempt == 0 and self.kube.pod_deletion_cost:
                note = self._deletion_cost(conn, ns, remove_first)
            try:
                conn.scale(replicas, read.resource_version)
            except TRANSPORT_ERRORS as exc:
                self._throttled(exc)
                if not isinstance(exc, ApiException | ObjectError):  # no answer: it may have been applied
                    conn.maybe_wrote(replicas)
                if isinstance(exc, ApiException) and exc.status == 409 and attempt < self.kube.conflict_retries:
                    self.sleep(CONFLICT_BACKOFF_S * 2 ** attempt)
                    continue
                res = result_of(exc, what)
                if res.status is ActuationStatus.CONFLICT:
                    res = ActuationResult(res.status, f"{res.message} (after {attempt + 1} attempts)")
                return replace(res, external=external)
            conn.wrote(replicas)
            return ActuationResult(ActuationStatus.APPLIED, note, before=current, after=replicas, external=external)
        raise AssertionError("unreachable: the loop returns on its last attempt")

    def _throttled(self, exc: BaseException) -> None:
        """After a 429, write nothing before its ``Retry-After`` (seconds; 1 when absent or not a number,
        the API server's own value in its max-in-flight filter)."""
        if isinstance(exc, ApiException) and exc.status == 429:
            text = (exc.headers or {}).get("Retry-After")
            try:
                seconds = max(float(text), 0.0) if text is not None else 1.0
            except ValueError:
                seconds = 1.0
            self.not_before = max(self.not_before, self.clock() + seconds)

    def _deletion_cost(self, conn: WorkloadConnector, namespace: str, pods: Sequence[str]) -> str:
        """Give ``pods`` deletion costs ``-len(pods)`` .. ``-1`` in order, after clearing the costs this
        daemon left on the workload's other pods; a note when some failed (the scale-down goes ahead:
        the ReplicaSet then picks by its own rules). Nothing for a kind whose controller ignores the
        annotation (``removal_order``, logged once per workload)."""
        if conn.removal_order:
            if (conn.namespace, conn.name) not in self._cost_ignored:
                self._cost_ignored.add((conn.namespace, conn.name))
                log.info("%s: no pod-deletion-cost written: it removes %s", conn.where(), conn.removal_order)
            return ""
        failed = self._clear_costs(conn, namespace, set(pods))
        for i, pod in enumerate(pods):
            body = {"metadata": {"annotations": {DELETION_COST: str(i - len(pods)), COST_MARK: "set"}}}
            try:
                self.core.patch_namespaced_pod(pod, namespace, body)
            except TRANSPORT_ERRORS as exc:
                failed.append(f"{pod} ({describe(exc)})")
        if failed:
            log.warning("deletion cost not set on %s", ", ".join(failed))
            return f"deletion cost not set on {', '.join(failed)}"
        return ""

    def _clear_costs(self, conn: WorkloadConnector, namespace: str, keep: set[str]) -> list[str]:
        """Remove the costs this daemon set (``COST_MARK``) from ``conn``'s pods not in ``keep``; the
        pods it could not clear (or list), as notes."""
        try:
            selector = conn.state().selector
            if getattr(conn, "pod_cache", None) is not None:  # as served: dicts
                listed = [((p.get("metadata") or {}).get("name"), (p.get("metadata") or {}).get("annotations"))
                          for p in (conn.pods(selector) if selector else [])]  # type: ignore[attr-defined]
            else:
                listed = [(p.metadata.name, p.metadata.annotations) for p in self.core.list_namespaced_pod(
                    namespace, label_selector=",".join(f"{k}={v}" for k, v in sorted(selector.items()))).items
                          ] if selector else []
        except TRANSPORT_ERRORS as exc:
            return [f"earlier costs of {conn.name} (pods not listed: {describe(exc)})"]
        failed = []
        for name, marks in listed:
            if name in keep or COST_MARK not in (marks or {}):
                continue
            try:  # a merge patch's null deletes the key
                self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": {
                    DELETION_COST: None, COST_MARK: None}}})
            except TRANSPORT_ERRORS as exc:
                failed.append(f"{name} (an earlier cost not cleared: {describe(exc)})")
        return failed


LIST_RETRY_S = 5.0
"""After a failed LIST of the admission ConfigMaps (not a 403), the least wait before a first publish
lists again; meanwhile first publishes read their ConfigMap by name. Shorter than a tick (10-15 s), so
the next round lists again, and long enough that the publishes of one round, which run side by
side, do not each list after one failure."""


class ConfigMapSink:
    """The ``AdmissionSink`` that writes one ConfigMap per service in ``kube.namespace`` (module docstring).

    A service this sink has not written yet (its first publish in this term) is looked up in one LIST
    of the namespace's ConfigMaps labelled ``app.kubernetes.io/managed-by=autoscaler`` (the label every
    write sets), taken at the first such publish and kept for the sink's life (``listed``): absent,
    it is created; present, it is replaced on the listed resourceVersion. A 409 or 404 on that write
    (someone else created, wrote or deleted it since the LIST) falls back to a GET then a create or a
    PUT, as does a ConfigMap the LIST could not give (the LIST failed; a 403 is logged once and never
    retried, so a Role without ``list`` on configmaps costs a GET per first publish, as before). So a
    takeover of N services sends 1 LIST and N writes, not N GETs and N writes. A write the fence
    refuses sends nothing and forgets nothing: the next publish writes on the version known (the one
    this sink last wrote, or the listed one) without a GET; a write sent and failed is read by name next.

    A listed ConfigMap that already holds this publish's content (``content``: the thresholds and ITL
    budget, the per-priority keys and the rest of the document alike) and whose ``updated_unix_s``
    is less than ``admission_heartbeat_s`` old is not written at all; ``written`` is seeded from it
    (its content, its time on this sink's clock, its resourceVersion), so its heartbeat comes when it
    would have had this sink written it then. Safe because nothing a reader relies on differs from a
    write: the gateway's reader (``parse_document``, ``adapters.gateway_api``) takes the thresholds
    and the budget, which are this publish's; the liveness rule (docs/admission.md: ``updated_unix_s``
    at most the heartbeat plus one tick old while a leader lives) holds, as the next write comes at
    its time plus the heartbeat; and "keep the highest generation" holds, as no write is made with
    a lower one (this sink's first write has its own term's generation, higher than any former
    leader's). What differs: ``leader`` and ``generation`` still name the former writer until then.
    And no former leader's write can land over the skipped one: its fence let it write only while its
    call would end within its Lease (docs/daemon.md, "Fencing a former leader"), and this term began
    after that Lease ran out, so the LIST, taken in this term, saw the last of its writes. A time in
    the future (another node's clock ahead of this one) is written over; so is a ConfigMap changed by
    someone else after the LIST, at its heartbeat (as after a write of this sink's own).

    Args:
        kube: the fleet file's ``kubernetes`` section (``admission_heartbeat_s``: the longest a
            ConfigMap whose content did not change goes unwritten, seconds; 0 writes every publish).
        api: a client.
        fence: asked immediately before each write (after its read, if any), as ``KubernetesActuator``'s.
        leader, term: who writes and in which term (``LeaderElector.term``): the documents'
            ``leader`` and the base of their generations (``term * 2**32``).
        clock: monotonic seconds, the heartbeat's clock.
        wall: Unix seconds, the documents' ``updated_unix_s`` and the listed ones' age.
    """

    def __init__(self, kube: KubernetesConfig, api: client.ApiClient, fence: Callable[[], bool] | None = None,
                 leader: str | None = None, term: int = 0, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.core = client.CoreV1Api(api)
        self.fence = fence
        self.leader = leader
        self.generation: dict[str, int] = {}
        self.base = term << TERM_BITS
        self.clock = clock
        self.wall = wall
        self.written: dict[str, tuple[str, float, str | None]] = {}
        """service -> (the content last written, ``clock`` then, the resourceVersion the write returned)."""
        self.listed: dict[str, tuple[str | None, dict[str, str]]] | None = None
        """The LIST of this sink's ConfigMaps (class docstring): name -> (resourceVersion, ``data``); an
        entry is dropped once used (``_list``), as the ConfigMap may have changed by any later write."""
        self._used: set[str] = set()
        """The names whose listed entry was used: a later first publish of theirs (the one before was
        refused or failed) reads the ConfigMap by name."""
        self._listing = threading.Lock()
        """Held while listing: the publishes of a round run side by side, and one of them lists."""
        self._list_failed: float | None = None
        """``clock`` at the last failed LIST (``LIST_RETRY_S``); ``inf`` after a 403: never again."""

    def name(self, service: str) -> str:
        """The service's ConfigMap name."""
        return self.kube.admission_configmap.format(service=service)

    def data(self, service: str, thresholds: Mapping[str, float | None],
             itl_budget: Mapping[str, int] | None = None) -> dict[str, str]:
        """The ConfigMap's ``data`` for ``thresholds`` and ``itl_budget`` (module docstring)."""
        full = {p: thresholds.get(p) for p in PRIORITIES}
        entry: dict[str, Any] = {"thresholds": full, "updated_unix_s": self.wall()}
        if itl_budget:
            entry["itl_budget"] = dict(itl_budget)
        doc = {"apiVersion": API_VERSION, "kind": KIND, "generation": self.base + self.generation.get(service, 0),
               "leader": self.leader, "unit": "seconds of estimated queue wait", "priorities": list(PRIORITIES),
               "services": {service: entry}}
        return {"thresholds.json": json.dumps(doc, sort_keys=True),
                **{p: "none" if x is None else f"{x:g}" for p, x in full.items()}}

    @staticmethod
    def content(thresholds: Mapping[str, float | None], itl_budget: Mapping[str, int] | None) -> str:
        """What a reader of the ConfigMap relies on, as one comparable string: the thresholds of every
        priority and the ITL budget (not the time or the generation, which move with every write)."""
        return json.dumps([{p: thresholds.get(p) for p in PRIORITIES}, dict(itl_budget or {})], sort_keys=True)

    def due(self, service: str, thresholds: Mapping[str, float | None],
            itl_budget: Mapping[str, int] | None = None) -> bool:
        """Whether a publish of this content must write: never written by this sink, changed since,
        or last written ``admission_heartbeat_s`` ago or more."""
        last = self.written.get(service)
        if last is None or last[0] != self.content(thresholds, itl_budget):
            return True
        return self.clock() - last[1] >= self.kube.admission_heartbeat_s

    def held_since(self, service: str, data: Mapping[str, str] | None, thresholds: Mapping[str, float | None],
                   itl_budget: Mapping[str, int] | None) -> float | None:
        """The ``updated_unix_s`` of ``data`` (a listed ConfigMap's) when it holds exactly what this sink
        would write for ``thresholds`` and ``itl_budget`` but the document's ``generation``, ``leader``
        and time; None otherwise (another content, a key more or less, not a document of ours)."""
        ours = self.data(service, thresholds, itl_budget)
        if not isinstance(data, Mapping) or set(data) != set(ours) or any(
                data[k] != ours[k] for k in ours if k != "thresholds.json"):
            return None
        try:
            doc, mine = json.loads(data["thresholds.json"]), json.loads(ours["thresholds.json"])
            when = doc["services"][service].pop("updated_unix_s")
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        del mine["services"][service]["updated_unix_s"]
        for d in (doc, mine):
            d.pop("generation", None)
            d.pop("leader", None)
        if doc != mine or isinstance(when, bool) or not isinstance(when, int | float):
            return None
        return float(when)

    def _list(self, name: str) -> tuple[bool, tuple[str | None, dict[str, str]] | None]:
        """(whether the LIST answered for ``name``, its listed (resourceVersion, data), None when absent),
        taking the LIST first if none was taken (class docstring). Not answered: the LIST failed, or
        this name's entry was used already."""
        with self._listing:
            if name in self._used:
                return False, None
            if self.listed is None:
                failed = self._list_failed
                if failed is not None and self.clock() - failed < LIST_RETRY_S:
                    return False, None
                ns = self.kube.namespace
                try:
                    out = self.core.list_namespaced_config_map(
                        ns, label_selector=f"app.kubernetes.io/managed-by={COMPONENT}")
                except TRANSPORT_ERRORS as exc:
                    forbidden = isinstance(exc, ApiException) and exc.status == 403
                    self._list_failed = float("inf") if forbidden else self.clock()
                    log.warning("list configmaps %s: %s; reading each admission ConfigMap by name instead%s",
                                ns, result_of(exc, f"list configmaps {ns}").message,
                                "" if forbidden else f" for {LIST_RETRY_S:g} s")
                    return False, None
                items: dict[str, tuple[str | None, dict[str, str]]] = {}
                for cm in out.items or []:
                    meta = cm.metadata
                    if meta is not None and isinstance(meta.name, str):
                        items[meta.name] = (meta.resource_version, dict(cm.data or {}))
                self.listed = items
            self._used.add(name)
            return True, self.listed.pop(name, None)

    def publish(self, service: str, thresholds: Mapping[str, float | None],
                itl_budget: Mapping[str, int] | None = None) -> ActuationResult:
        """Write ``thresholds`` and ``itl_budget`` to the service's ConfigMap when ``due`` (else nothing
        is sent and the result is ``applied``: the ConfigMap holds them), or refuse a malformed set
        (``invalid``). A first publish in this term may find the listed ConfigMap holding them (class
        docstring): nothing is written then either."""
        why = check_thresholds(thresholds) or check_itl_budget(itl_budget or {})
        if why is not None:
            return ActuationResult(ActuationStatus.INVALID, f"{service}: {why}")
        if not self.due(service, thresholds, itl_budget):
            return APPLIED
        ns, name = self.kube.namespace, self.name(service)
        content = self.content(thresholds, itl_budget)
        last = self.written.get(service)
        version = None if last is None else last[2]
        create, found = False, None
        if last is None:  # first publish in this term: the LIST says what is there
            answered, found = self._list(name)
            if answered and found is None:
                create = True
            elif found is not None:
                version = found[0]
                when = self.held_since(service, found[1], thresholds, itl_budget)
                age = None if when is None else self.wall() - when
                if age is not None and 0.0 <= age < self.kube.admission_heartbeat_s:
                    self.written[service] = (content, self.clock() - age, version)
                    return APPLIED
        self.generation[service] = self.generation.get(service, 0) + 1
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": name, "namespace": ns,
                                             "labels": {"app.kubernetes.io/managed-by": COMPONENT}},
                                "data": self.data(service, thresholds, itl_budget)}
        if create or version is not None:  # no GET: create, or a PUT on the version known
            if self.fence is not None and not self.fence():
                if last is None:  # nothing was sent: what the LIST said still holds for the next publish
                    self._unlist(name, found)
                return self._fenced(ns, name)
            verb = "create" if create else "update"
            self.written.pop(service, None)  # sent: until it is answered, the version is in doubt
            try:
                if create:
                    out = self.core.create_namespaced_config_map(ns, body)
                else:
                    body["metadata"]["resourceVersion"] = version
                    out = self.core.replace_namespaced_config_map(name, ns, body)
            except ApiException as exc:
                # 409: someone else created or wrote it since; 404: deleted since. Read, then write.
                if exc.status not in ((409,) if create else (404, 409)):
                    return result_of(exc, f"{verb} configmaps {ns}/{name}")
                body["metadata"].pop("resourceVersion", None)
            except TRANSPORT_ERRORS as exc:
                return result_of(exc, f"{verb} configmaps {ns}/{name}")
            else:
                return self._wrote(service, content, out)
        self.written.pop(service, None)
        return self._read_then_write(service, content, body)

    def _unlist(self, name: str, found: tuple[str | None, dict[str, str]] | None) -> None:
        """Give ``name``'s listed entry back (``found``; None: listed as absent), for a first publish
        the fence refused before anything was sent."""
        with self._listing:
            self._used.discard(name)
            if found is not None and self.listed is not None:
                self.listed[name] = found

    def _read_then_write(self, service: str, content: str, body: dict[str, Any]) -> ActuationResult:
        """A GET of the ConfigMap, then a create (404) or a PUT on the version read, each fenced."""
        ns, name = self.kube.namespace, body["metadata"]["name"]
        try:
            existing = self.core.read_namespaced_config_map(name, ns)
        except ApiException as exc:
            if exc.status != 404:
                return result_of(exc, f"get configmaps {ns}/{name}")
            if self.fence is not None and not self.fence():
                return self._fenced(ns, name)
            try:
                out = self.core.create_namespaced_config_map(ns, body)
            except TRANSPORT_ERRORS as exc2:
                return result_of(exc2, f"create configmaps {ns}/{name}")
            return self._wrote(service, content, out)
        except TRANSPORT_ERRORS as exc:
            return result_of(exc, f"get configmaps {ns}/{name}")
        body["metadata"]["resourceVersion"] = existing.metadata.resource_version
        if self.fence is not None and not self.fence():  # leadership may have ended during the read
            return self._fenced(ns, name)
        try:
            out = self.core.replace_namespaced_config_map(name, ns, body)
        except TRANSPORT_ERRORS as exc:
            return result_of(exc, f"update configmaps {ns}/{name}")
        return self._wrote(service, content, out)

    def _wrote(self, service: str, content: str, out: Any) -> ActuationResult:
        """Remember a write that landed (its content, when, and the version the server answered)."""
        meta = getattr(out, "metadata", None)
        version = getattr(meta, "resource_version", None)
        self.written[service] = (content, self.clock(), version if isinstance(version, str) else None)
        return APPLIED

    @staticmethod
    def _fenced(ns: str, name: str) -> ActuationResult:
        return ActuationResult(ActuationStatus.NOT_LEADER, f"configmaps {ns}/{name}: not written: this daemon "
                               "may no longer lead by the time the write lands")


class PendingPods:
    """Which variants cannot place their pods (module docstring).

    Args:
        kube: the fleet file's ``kubernetes`` section (namespace, workloads, pending timeout and retry).
        services: the services whose variants' pods it watches.
        api: a client.
        clock: monotonic seconds: pending pods are timed on this clock alone, never against the API
            server's timestamps (another machine's clock).
        cache: where the workloads and pods are read from (``watch_cache``, started); None: GETs.

    Raises:
        WorkloadError: as ``connectors``.
    """

    def __init__(self, kube: KubernetesConfig, services: Sequence[Service], api: client.ApiClient,
                 clock: Callable[[], float] = time.monotonic, cache: WorkloadCache | None = None) -> None:
        self.kube = kube
        self.connectors = connectors(kube, services, api, cache)
        self.clock = clock
        self.marks = PendingMarks(self.kube.pending_timeout_s, self.kube.pending_retry_s)

    def unschedulable_for(self, service: str, variant: str, state: WorkloadState | None = None,
                          failed: FailedReads | None = None) -> float | None:
        """Seconds the longest-unschedulable pod of the variant has been so (0 when none is); None
        when the pods cannot be read (added to ``failed``, else logged) or selected. ``state``: the
        workload, when the caller has just read it."""
        return self.connectors[(service, variant)].unschedulable_for(self.clock(), state, failed)

    def unavailable(self, service: str, variant: str, state: WorkloadState | None = None,
                    failed: FailedReads | None = None) -> bool:
        """Whether the variant is marked unavailable now (marking it when its pods have been
        unschedulable for ``pending_timeout_s``); ``state`` and ``failed`` as ``unschedulable_for``."""
        return self.read(service, variant, state, failed)[0]

    def read(self, service: str, variant: str, state: WorkloadState | None = None,
             failed: FailedReads | None = None) -> tuple[bool, float | None]:
        """``(unavailable, unschedulable_s)``: whether the variant is marked unavailable now (as
        ``unavailable``) and the seconds its longest-unschedulable pod has been so (``unschedulable_for``:
        0.0 when none is; None when the pods could not be read, or not read because the variant is
        marked already: a marked variant's pods are not read again until the mark lifts)."""
        key = (service, variant)
        now = self.clock()
        if self.marks.marked(key, now):
            return True, None
        stuck = self.unschedulable_for(service, variant, state, failed)
        if self.marks.mark_if_stuck(key, stuck, now):
            log.warning("%s/%s: pods unschedulable for %.0f s: unavailable for %g s, its demand goes to the other "
                        "variants", service, variant, stuck, self.kube.pending_retry_s)
            return True, stuck
        return False, stuck


class ClusterSource:
    """A ``MetricsSource``: ``source``'s observation with each variant's replica counts read from the
    API server (the connector's desired and ready replicas: ready, and starting = wanted - ready,
    Pending pods included) where it answers, for every kind, and the variants ``pods`` marks
    unavailable, with each variant's longest-unschedulable pod's seconds (``unschedulable_s``; None
    where its pods were not read). kube-state-metrics, through Prometheus, lags the API server by a scrape or more
    (and has no series for custom resources): a count read from it can turn a scale-up into an
    absolute write below what the workload already has. ``states`` keeps each variant's last read
    (the daemon exports it). A variant whose watch cache is stale (``CacheStale``) has its counts
    marked unknown (the loop holds it), not left at Prometheus's."""

    def __init__(self, source: MetricsSource, pods: PendingPods, api: client.ApiClient) -> None:
        self.source = source
        self.pods = pods
        self.kube = pods.kube
        self.connectors = pods.connectors
        self.states: dict[tuple[str, str], WorkloadState] = {}
        self.stale: set[tuple[str, str]] = set()
        """The variants whose last read met a stale watch cache."""

    def _read(self, service: str, variant: str, failed: FailedReads | None = None) -> WorkloadState | None:
        """The variant's workload from the API server (or its watch cache); None when it does not answer
        (added to ``failed``, else logged)."""
        conn = self.connectors[(service, variant)]
        self.stale.discard((service, variant))
        try:
            return conn.state()
        except TRANSPORT_ERRORS as exc:
            if isinstance(exc, CacheStale):
                self.stale.add((service, variant))
            (failed or FailedReads("workload read")).add(f"{conn.workload_kind} {conn.namespace}/{conn.name}", exc,
                                                         now=failed is None)
        return None

    def counts(self, service: str, variant: str, state: WorkloadState | None = None) -> tuple[int, int] | None:
        """``(ready, starting)`` of the variant's workload (``state``, else read now); None when unknown."""
        state = state if state is not None else self._read(service, variant)
        if state is None:
            return None
        return min(state.ready, state.desired), max(state.desired - state.ready, 0)

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        """``source.observe(now)`` with the API server's counts and the unavailable variants flagged,
        from one read of each workload."""
        observations = self.source.observe(now)
        failed = FailedReads("observation")
        for name, obs in observations.items():
            pooled = [(v, vo) for pool in obs.pools.values() for v, vo in pool.variants.items()]
            for v, vo in [*obs.variants.items(), *pooled]:
                state = self._read(name, v, failed)
                if state is None:  # counts unknown; its pods are selected by it, so not read either
                    self.states.pop((name, v), None)
                    if (name, v) in self.stale:  # missing data: the loop holds, never reads it as 0
                        vo.counts_known = False
                    vo.unavailable = self.pods.marks.marked((name, v), self.pods.clock())
                    vo.unschedulable_s = None
                    continue
                self.states[(name, v)] = state
                counted = self.counts(name, v, state)
                if counted is not None:
                    vo.ready, vo.starting = counted
                    vo.counts_known = True
                vo.unavailable, vo.unschedulable_s = self.pods.read(name, v, state, failed)
        failed.flush()
        return observations


class EventRecorder:
    """Writes decisions as core/v1 Events on the workloads (module docstring); failures are logged,
    never raised (an Event is a record, not an action). The ``involvedObject`` is the connector's
    reference (apiVersion, kind, name, namespace and, when the workload can be read, uid).

    Raises:
        WorkloadError: as ``connectors``.
    """

    def __init__(self, kube: KubernetesConfig, services: Sequence[Service], api: client.ApiClient,
                 identity: str, cache: WorkloadCache | None = None) -> None:
        self.kube = kube
        self.core = client.CoreV1Api(api)
        self.connectors = connectors(kube, services, api, cache)
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

    def result(self, service: str, variant: str, res: ActuationResult, reason: str) -> int:
        """The Events a write's result calls for: ``OtherWriter`` when it found another writer's
        change, ``ScaledUp`` / ``ScaledDown`` when it changed the count; how many were written."""
        written = 0
        if res.external is not None:
            written += self.other_writer(service, variant, res.external.ours, res.external.theirs,
                                         res.external.quiet_s)
        if res.changed:
            assert res.before is not None and res.after is not None
            written += self.scaled(service, variant, res.before, res.after, reason)
        return written

    def _event(self, service: str, variant: str, reason: str, kind: str, message: str) -> bool:
        conn = self.connectors[(service, variant)]
        ns = conn.namespace
        now = datetime.now(UTC)
        try:
            state: WorkloadState | None = conn.state()
        except TRANSPORT_ERRORS:
            state = None  # the Event still names the object, without its uid
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{conn.name}.", namespace=ns),
            involved_object=conn.reference(state),
            reason=reason, type=kind, message=message,
            source=client.V1EventSource(component=COMPONENT, host=self.identity),
            reporting_component=COMPONENT, reporting_instance=self.identity,
            first_timestamp=now, last_timestamp=now, count=1)
        try:
            self.core.create_namespaced_event(ns, event)
        except TRANSPORT_ERRORS as exc:
            log.warning("event on %s/%s not written: %s", ns, conn.name, describe(exc))
            return False
        return True
