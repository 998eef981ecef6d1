"""What the daemon needs of a kind of workload, and the parts every kind shares.

``WorkloadConnector`` is the contract: read the replica counts (desired, ready, the object's
resourceVersion), read and write the replica count with optimistic concurrency (a write carrying a
stale resourceVersion is HTTP 409, raised as the client's ``ApiException``), the seconds the
longest-unschedulable pod of the workload has been so, the reference an Event names
(``involvedObject``), and another writer's change (``note`` / ``wrote`` / ``paused_for``).

``Connector`` implements what every kind shares: pending pods from the pods selected by
``WorkloadState.selector`` (Pending, not being deleted, condition ``PodScheduled`` False with reason
``Unschedulable``, timed on the daemon's own clock from when it first saw the pod so: the API
server's timestamps are another machine's clock, and a skew of an hour would mark a variant
unavailable a second after its pod went Pending; after a restart the timing starts again), the
Event reference, and the other-writer memory (what this connector last wrote or first read; a
different count read later is another writer's, and the variant is left alone for
``quiet_s`` after it). A kind subclasses it with ``read_scale``, ``scale`` and ``state``.

Every call that talks to the API server raises what the client raises (``TRANSPORT_ERRORS``); the
actuator turns them into results.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from autoscaler.config import Workload
from autoscaler.errors import AutoscalerError
from autoscaler.loop.actuate import ExternalChange

log = logging.getLogger(__name__)

class ObjectError(ValueError):
    """An object the API server returned that is not shaped as its kind says (a field of the wrong
    type, a section that is null): the variant is then unknown for the tick, never read as 0."""


class CacheStale(Exception):  # noqa: N818 (a state, as the message says)
    """A read from a watch cache (``workloads.cache``) that has not listed yet, or whose watch has been
    down for longer than ``kubernetes.watch_stale_s``: the read failed, the counts are unknown."""


TRANSPORT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ObjectError, CacheStale)
"""What reading or writing a workload may raise: an HTTP error status, no answer at all, an
object not shaped as its kind (``ObjectError``), or a watch cache too stale to read (``CacheStale``)."""


class ObjectCache(Protocol):
    """What a connector reads of a watch cache (``workloads.cache.Informer``): objects as served (JSON)."""

    def get(self, name: str) -> dict[str, Any] | None:
        """The object ``name``, None when absent (raises ``CacheStale``)."""
        ...

    def select(self, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The objects carrying every label of ``labels`` (raises ``CacheStale``)."""
        ...

    def wrote(self, name: str, resource_version: str | None, patch: Mapping[str, Any]) -> None:
        """Our write set ``patch`` on ``name`` at ``resource_version``."""
        ...


def describe(exc: BaseException) -> str:
    """One line from a failed call: the API server's message, else the transport's error."""
    if isinstance(exc, ApiException):
        try:
            message = json.loads(exc.body or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"HTTP {exc.status}: {message or exc.reason}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


FAILED_NAMED = 3
"""Reads a warning names before ``and N more``."""


class FailedReads:
    """API server reads that failed during one pass over the fleet (the writer check, or one
    observation), logged once per cause when the pass ends (``flush``): in an outage every read fails
    for one reason, and a line per read, 9 a tick for 3 variants (each workload twice and its pods),
    buried everything else. The logs' one warning per cause per tick, as for Prometheus's queries.

    Args:
        what: the pass, as the warning names it (``writer check``, ``observation``).
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.by_cause: dict[str, list[str]] = {}

    def add(self, target: str, exc: BaseException, now: bool = False) -> None:
        """``target`` (``deployments/scale llm/x ...``) was not read because of ``exc``; ``now``: log it
        at once (a read outside any pass)."""
        self.by_cause.setdefault(describe(exc), []).append(target)
        if now:
            self.flush()

    def flush(self) -> None:
        """One WARNING per cause: how many reads failed, the cause and the first few targets (all of
        them in the ``targets`` field); then forget them."""
        for cause, targets in self.by_cause.items():
            named = ", ".join(targets[:FAILED_NAMED]) + (f" and {len(targets) - FAILED_NAMED} more"
                                                         if len(targets) > FAILED_NAMED else "")
            log.warning("Kubernetes API: %d read(s) failed in the %s: %s (%s)", len(targets), self.what, cause, named,
                        extra={"cause": cause, "failed": len(targets), "targets": targets, "pass": self.what})
        self.by_cause.clear()


def unschedulable_keys(pods: list[Any]) -> list[tuple[str, str]]:
    """(name, when its condition last changed) of each pod of ``pods`` (``V1Pod`` or as served) that is
    Pending, not being deleted, with ``PodScheduled`` False for reason ``Unschedulable``."""
    out = []
    for pod in pods:
        if isinstance(pod, dict):
            meta, st = pod.get("metadata") or {}, pod.get("status") or {}
            if st.get("phase") != "Pending" or meta.get("deletionTimestamp") is not None:
                continue
            for c in st.get("conditions") or []:
                if (c.get("type"), c.get("status"), c.get("reason")) == ("PodScheduled", "False", "Unschedulable"):
                    when = c.get("lastTransitionTime") or meta.get("creationTimestamp")
                    out.append((str(meta.get("name")), str(when)))
            continue
        if pod.status is None or pod.status.phase != "Pending" or pod.metadata.deletion_timestamp is not None:
            continue
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                out.append((str(pod.metadata.name), str(c.last_transition_time or pod.metadata.creation_timestamp)))
    return out


class WorkloadError(AutoscalerError):
    """A workload the daemon cannot handle (an unknown kind, a kind with the wrong API version);
    raised once, at startup, with a one-line message."""


@dataclass(frozen=True)
class Scale:
    """A workload's replica count as its scale is read: ``replicas`` and the resourceVersion a
    write must carry."""

    replicas: int
    resource_version: str | None


@dataclass(frozen=True)
class WorkloadState:
    """One read of a workload.

    Attributes:
        desired: the replicas it wants (``spec.replicas`` or the kind's equivalent).
        ready: the replicas ready (the kind's status; for a LeaderWorkerSet, whole groups).
        resource_version: the object's ``metadata.resourceVersion``.
        uid: the object's ``metadata.uid`` (None when the server gave none).
        selector: the labels that select its pods (equality only); None when unknown.
    """

    desired: int
    ready: int
    resource_version: str | None
    uid: str | None
    selector: dict[str, str] | None = field(default=None)


class WorkloadConnector(Protocol):
    """One workload of one kind (module docstring).

    Attributes:
        workload_kind: its kind, as Events name it (``Deployment``, ``LeaderWorkerSet``, ...).
        api_version: its ``group/version`` (``apps/v1``).
        plural: its resource's plural (``deployments``).
        name, namespace: the object's.
        removal_order: "" when its controller removes the pods with the lowest
            ``controller.kubernetes.io/pod-deletion-cost`` first (a Deployment's ReplicaSet), else
            which pods it removes instead (the annotation is then not written).
    """

    workload_kind: str
    api_version: str
    plural: str
    name: str
    namespace: str

    @property
    def removal_order(self) -> str:
        """See the class docstring."""
        ...

    def where(self) -> str:
        """The workload as errors name it, e.g. ``deployments/scale llm/x (API group apps)``."""
        ...

    def read_scale(self, fresh: bool = False) -> Scale:
        """The replica count the daemon writes, and the resourceVersion a write must carry; ``fresh``:
        from the API server even when a watch cache serves the workload (after a 409)."""
        ...

    def scale(self, replicas: int, resource_version: str | None) -> None:
        """Set the replica count to ``replicas`` if the object is still at ``resource_version``
        (else the server answers 409)."""
        ...

    def state(self) -> WorkloadState:
        """Desired and ready replicas, resourceVersion, uid and pod selector, from one read."""
        ...

    def unschedulable_for(self, now: float, state: WorkloadState | None = None,
                          failed: FailedReads | None = None) -> float | None:
        """Seconds (``now``: the daemon's monotonic clock) the longest-unschedulable pod has been seen
        so; 0 when none is; None when the pods cannot be read (added to ``failed``, else logged) or
        selected."""
        ...

    def reference(self, state: WorkloadState | None = None) -> client.V1ObjectReference:
        """The ``involvedObject`` of an Event about this workload."""
        ...

    def note(self, current: int, now: float) -> ExternalChange | None:
        """Remember ``current`` replicas read at ``now`` (monotonic seconds); another writer's change
        when it differs from what was last written or read."""
        ...

    def wrote(self, replicas: int) -> None:
        """Remember that ``replicas`` is now the count (written, or found already there)."""
        ...

    def maybe_wrote(self, replicas: int) -> None:
        """Remember a write of ``replicas`` whose outcome is unknown (no answer within the deadline: the
        API server may have applied it): a later read of that count is this daemon's, not another writer's."""
        ...

    def paused_for(self, now: float) -> float:
        """Seconds the workload is still left alone after another writer's change (0: not paused)."""
        ...


def selector_of(match_labels: dict[str, str] | None) -> dict[str, str] | None:
    """``match_labels`` when it selects anything, else None."""
    return dict(match_labels) if match_labels else None


def parse_selector(text: str | None) -> dict[str, str] | None:
    """A label selector string (``a=b,c=d``, as a Scale's ``status.selector``) as labels; None when
    empty or when it uses set-based operators (``in``, ``!=``, ``exists``), which are not read."""
    if not text:
        return None
    labels: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.endswith("!") or " " in part.strip() or value.startswith("="):
            return None
        labels[key.strip()] = value.strip()
    return labels


class Connector(ABC):
    """The parts of a ``WorkloadConnector`` every kind shares (module docstring).

    Subclasses set ``kind``, ``default_api_version`` and ``default_plural`` and implement
    ``read_scale``, ``scale`` and ``state``.

    Args:
        api: a client.
        workload: the variant's workload (its name filled in: ``KubernetesConfig.workload``).
        namespace: where it lives.
        quiet_s: how long a variant is left alone after another writer's change, seconds.

    Raises:
        WorkloadError: ``workload`` names another API version or plural than the kind's.
    """

    kind: ClassVar[str] = ""
    default_api_version: ClassVar[str | None] = None
    """``group/version`` of the kind (None: the fleet file must give it)."""
    default_plural: ClassVar[str | None] = None
    removal_order: ClassVar[str] = ("its controller's own choice (only the ReplicaSet controller reads "
                                    "pod-deletion-cost)")
    """See ``WorkloadConnector``; the kinds the ReplicaSet controller serves set ""."""
    scale_subresource: ClassVar[bool] = True
    """Whether writes go through ``<plural>/scale`` (RBAC: get and update on it); False: the object
    itself is read and replaced (get and update on ``<plural>``)."""

    @classmethod
    def resolve(cls, workload: Workload) -> tuple[str, str]:
        """``(api_version, plural)`` of ``workload`` as this class serves it.

        Raises:
            WorkloadError: a known kind given another API version or plural; a custom resource
                without both.
        """
        given = (workload.api_version, workload.plural)
        if cls.default_api_version is not None and given != (None, None) and given != (
                cls.default_api_version, cls.default_plural):
            raise WorkloadError(f"kind {workload.kind} is {cls.default_api_version} ({cls.default_plural}): leave "
                                f"api_version and plural unset, got {given[0]} and {given[1]}")
        api_version = workload.api_version or cls.default_api_version
        plural = workload.plural or cls.default_plural
        if api_version is None or plural is None:
            raise WorkloadError(f"kind {workload.kind}: a custom resource with a scale subresource needs api_version "
                                "(group/version) and plural in kubernetes.workloads")
        return api_version, plural  # their format: autoscaler.config.kubernetes.Workload

    def __init__(self, api: client.ApiClient, workload: Workload, namespace: str, quiet_s: float = 0.0) -> None:
        api_version, plural = self.resolve(workload)
        assert workload.name is not None  # KubernetesConfig.workload fills it in
        self.api = api
        self.api_version = api_version
        self.plural = plural
        self.group, _, self.version = api_version.rpartition("/")
        self.name = workload.name
        self.namespace = namespace
        self.workload_kind = workload.kind
        self.quiet_s = quiet_s
        self.core = client.CoreV1Api(api)
        self._unschedulable: dict[tuple[str, str], float] = {}
        """(pod, the condition's transition) -> when this connector first saw it unschedulable, local s."""
        self.last: int | None = None
        """Replicas last written or found (None: never read)."""
        self.maybe: int | None = None
        """Replicas of a write left unanswered since (``maybe_wrote``)."""
        self.paused_until = float("-inf")
        self.cached: ObjectCache | None = None
        """The watch cache of this kind's objects, when reads come from one (``attach``)."""
        self.pod_cache: ObjectCache | None = None
        """The watch cache of the namespace's pods, likewise."""

    def attach(self, objects: ObjectCache | None, pods: ObjectCache | None) -> None:
        """Read the workload from ``objects`` and its pods from ``pods`` instead of the API server
        (kinds that cannot be read from a cache ignore it: the base class's reads are GETs)."""
        self.cached, self.pod_cache = objects, pods

    def cached_object(self) -> dict[str, Any]:
        """The workload from its watch cache.

        Raises:
            CacheStale: the cache cannot be read.
            ApiException: 404 when the cache holds no such object (as a GET would answer).
        """
        assert self.cached is not None
        obj = self.cached.get(self.name)
        if obj is None:
            raise ApiException(status=404, reason=f"{self.plural} {self.namespace}/{self.name} not found (watch cache)")
        return obj

    # ------------------------------------------------------------------ per kind
    @abstractmethod
    def read_scale(self, fresh: bool = False) -> Scale:
        """See ``WorkloadConnector``."""
        ...

    @abstractmethod
    def scale(self, replicas: int, resource_version: str | None) -> None:
        """See ``WorkloadConnector``."""
        ...

    @abstractmethod
    def state(self) -> WorkloadState:
        """See ``WorkloadConnector``."""
        ...

    # ------------------------------------------------------------------ shared
    def where(self) -> str:
        """See ``WorkloadConnector``."""
        return f"{self.plural}/scale {self.namespace}/{self.name} (API group {self.group or 'core'})"

    def pods(self, selector: dict[str, str]) -> list[Any]:
        """The pods in the namespace carrying every label of ``selector`` (``V1Pod``; from the pod cache,
        when attached, as served: dicts)."""
        if self.pod_cache is not None:
            return self.pod_cache.select(selector)
        text = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=text).items)

    def unschedulable_for(self, now: float, state: WorkloadState | None = None,
                          failed: FailedReads | None = None) -> float | None:
        """See ``WorkloadConnector``; a failed read is None (unknown is not unschedulable)."""
        try:
            selector = (state if state is not None else self.state()).selector
            if not selector:
                return None
            pods = self.pods(selector)
        except TRANSPORT_ERRORS as exc:
            (failed or FailedReads("pod read")).add(f"pods of {self.workload_kind} {self.namespace}/{self.name}", exc,
                                                    now=failed is None)
            return None
        seen: dict[tuple[str, str], float] = {}
        for key in unschedulable_keys(pods):
            seen[key] = self._unschedulable.get(key, now)
        self._unschedulable = seen  # a pod scheduled, deleted or pending anew starts over
        return max((now - first for first in seen.values()), default=0.0)

    def reference(self, state: WorkloadState | None = None) -> client.V1ObjectReference:
        """See ``WorkloadConnector``; the uid when ``state`` has it."""
        return client.V1ObjectReference(api_version=self.api_version, kind=self.workload_kind, name=self.name,
                                        namespace=self.namespace, uid=state.uid if state is not None else None)

    def note(self, current: int, now: float) -> ExternalChange | None:
        """See ``WorkloadConnector``: the first read is taken as the state, not as another writer."""
        ours, maybe = self.last, self.maybe
        self.last, self.maybe = current, None
        if ours is None or ours == current or maybe == current:  # ours, or our unanswered write that landed
            return None
        self.paused_until = now + self.quiet_s
        return ExternalChange(ours, current, self.quiet_s)

    def wrote(self, replicas: int) -> None:
        """See ``WorkloadConnector``."""
        self.last, self.maybe = replicas, None

    def maybe_wrote(self, replicas: int) -> None:
        """See ``WorkloadConnector``."""
        self.maybe = replicas

    def paused_for(self, now: float) -> float:
        """See ``WorkloadConnector``."""
        return max(0.0, self.paused_until - now)

