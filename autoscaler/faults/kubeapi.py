"""An emulated Kubernetes API server over HTTP on 127.0.0.1 (kmock's ``KubernetesEmulator``, extended),
in a background thread, for the official ``kubernetes`` client: the fault suite's live scenarios and
the tests run the daemon against it. kmock comes with the ``faults`` (and ``test``) extra.

kmock keeps objects in memory and serves create / read / list / watch / replace / patch / delete.
``Emulator`` adds what the daemon relies on and kmock leaves out:

- replace (PUT, which kmock leaves unserved) and ``metadata.resourceVersion`` on every object,
  from one counter bumped by every write, with optimistic concurrency: a replace carrying an older
  resourceVersion is answered HTTP 409 Conflict, as the real API server does;
- the ``scale`` subresource of Deployments, StatefulSets and the custom resources named in
  ``scalable`` (LeaderWorkerSets from the start): GET answers an ``autoscaling/v1`` Scale built from
  the object (its spec.replicas, status.replicas, the object's resourceVersion, and
  ``status.selector`` from the status field ``selector_paths`` names, ``SELECTOR_PATHS`` at first);
  PUT checks the resourceVersion and sets spec.replicas; PATCH sets it unchecked; a Scale of an
  absent object is HTTP 404;
- the custom resources ``CUSTOM_RESOURCES`` (LeaderWorkerSet, KServe InferenceService) served like
  built-in ones (a PUT of the whole object is checked as above);
- ``metadata.uid``, ``creationTimestamp`` and ``generation`` set by the server on create (whatever the
  client sent), ``metadata.generateName`` on create (a name is made from it);
- lists in chunks (``limit`` and ``continue``; Kubernetes API concepts, "Retrieving large results sets
  in chunks"): a list with ``limit`` answers that many objects and a ``continue`` token while more
  remain; each later page is cut from the first page's snapshot and carries its resourceVersion, as
  the API server serves every page from one consistent read; a token not known (or used once
  already) is HTTP 410 Expired;
- ``labelSelector`` and ``fieldSelector`` on lists and watches as the API server parses them
  (``selector_terms``): on labels equality-based (``=``, ``==``, ``!=``) and set-based (``in``,
  ``notin``, ``key``, ``!key``) requirements, on any dotted field (``involvedObject.uid``: how
  ``kubectl describe`` finds an object's Events) equality ones; anything else refused with HTTP 400,
  never ignored (the same for every resource: ``ConfigMapSink``'s LIST of ConfigMaps by
  ``app.kubernetes.io/managed-by`` gets the labelled ones of its namespace, each with its
  resourceVersion, as from the API server: Kubernetes v1.31 API concepts); ``items_sent`` counts
  the objects lists sent, by plural, and ``watch_selectors`` logs each watch's selector;
- replace as the API server does it: the body replaces the object whole (a field the client dropped
  is gone), the server's metadata kept, ``generation`` bumped when the spec changed, the status kept;
- a Lease's ``acquireTime`` and ``renewTime`` parsed as ``metav1.MicroTime`` (RFC3339 with exactly six
  fraction digits): anything else is HTTP 400 BadRequest, as the API server refuses it;
- names checked as the API server checks them: ``metadata.name`` a DNS-1123 subdomain (at most 253
  lower-case alphanumerics, '-' and '.', alphanumeric at both ends) for every kind served but core/v1
  Events (a path segment: no '/', '%', not '.' or '..'), else HTTP 422 Invalid with the Status the
  API server sends (``name_problems``, ``invalid``); a generated name is checked once made; a PUT whose
  body names another object (or namespace) than its URL is HTTP 400 BadRequest (``_bad_identity``);
- ``metadata.generation`` bumped by every spec change (a replace, a patch of the spec, a scale);
- a controller step (off unless ``deployment_delay_s`` is set): ``deployment_delay_s`` after a
  Deployment's spec changes, its status is written (observedGeneration, replicas, updated, ready and
  available replicas) with a new resourceVersion, as the deployment controller does, so a write
  carrying the version read before it is a 409; with ``replicaset_pods`` the Deployment's pods are kept
  at ``spec.replicas``, removed in the ReplicaSet controller's order (``removal_order``: pod-deletion-cost);
- RBAC refusals: a request whose ``(verb, plural, subresource)`` is in ``forbidden`` is answered
  HTTP 403 Forbidden with the API server's message;
- watches as the API server serves them (``_serve_watch``; Kubernetes API concepts, "Efficient detection
  of changes" and "Watch bookmarks", kubernetes.io/docs/reference/using-api/api-concepts/): every event
  (ADDED, MODIFIED, DELETED) is logged with the resourceVersion of the write that made it (a deletion
  gets a new one), a list carries the resourceVersion of the last event in ``metadata``, and a watch
  from a resourceVersion sends every event after it, for its namespace, ``labelSelector`` and
  ``fieldSelector``; without one (or ``0``) it first sends the objects there now as ADDED. The log
  keeps the last ``watch_window`` events (the API server's watch cache keeps a bounded window and etcd
  compacts its history): a watch from before the oldest kept is answered as the API server answers it,
  HTTP 200 then one ``ERROR`` event holding a Status 410 ``Expired`` ("too old resource version"), and
  ``compact()`` drops the whole log now. ``timeoutSeconds`` ends the stream (with a ``BOOKMARK`` of
  the last resourceVersion first when ``allowWatchBookmarks`` is set); ``drop_watches()`` ends every
  open stream at once (a dropped connection), and so does ``down``. A write never waits for the
  watches (it sets an event they wait on; no lock they share), so a watch cancelled when its client
  goes away cannot hold a write up. A request is a watch when its ``watch`` parameter is true as the
  API server reads a boolean (``query_flag``: ``watch=True``, what the official client up to 36 sends,
  too). An object modified so that it leaves a watch's selectors is sent to it as DELETED (its state
  before, at the new resourceVersion) and one that enters them as ADDED, as the API server's watch
  cache does (``as_watched``);
- ``requests``: how many requests were served, by (verb, plural or plural/subresource), the verb as
  RBAC derives it (a watch counted once, when it opens);
- a bounded request log (``REQUEST_LOG``), so an emulator serving a daemon for minutes keeps pace;
- a way down: ``down`` set makes every request fail with HTTP 503 (the server itself stays up,
  so a test can bring it back); ``conflicts`` set answers every write of a scale subresource
  HTTP 409, as when another writer always gets there first;
- faults as they come in production, per client (User-Agent): ``slow`` delays a request past the
  client's deadline and then serves it (the write lands although the client gave up), ``throttled``
  answers HTTP 429 TooManyRequests with ``Retry-After`` unserved; ``conflicts_left`` answers the next
  scale writes 409 (transient, unlike ``conflicts``); ``EmulatedCluster.close_port`` refuses every
  connection until ``open_port``; every refusal is listed in ``refused``;
- a hang: a request whose User-Agent is in ``hung`` is held unanswered while it stays there, then
  answered HTTP 504 Timeout unprocessed (the real API server ends a request at its
  ``--request-timeout``, 60 s by default, with 504), so a client without a deadline waits for ever
  and a client with one gives up.

``EmulatedCluster`` runs it in a thread with its own event loop and gives a configured client.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import datetime
import itertools
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp.web
import kmock
from kubernetes import client

SCALABLE = {"deployments", "statefulsets", "leaderworkersets"}
"""Plurals served with a scale subresource."""
SELECTOR_PATHS = {"leaderworkersets": "hpaPodSelector"}
"""Plural -> the status field a Scale's ``status.selector`` is read from (the CRD's
``selectorpath``; LeaderWorkerSet's is ``.status.hpaPodSelector``, kubernetes-sigs/lws
``leaderworkerset_types.go``)."""
CUSTOM_RESOURCES = ("leaderworkerset.x-k8s.io/v1/leaderworkersets", "serving.kserve.io/v1beta1/inferenceservices")
"""Custom resources served from the start: LeaderWorkerSet (with its scale subresource) and KServe's
InferenceService (none: KServe's CRD has no scale subresource)."""


MICRO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})")
"""apimachinery ``metav1.RFC3339Micro`` (``2006-01-02T15:04:05.000000Z07:00``), which ``MicroTime``'s
JSON decoding parses with Go's ``time.Parse``: the six fraction digits are required."""
MICRO_TIME_FIELDS = {"leases": ("acquireTime", "renewTime")}
"""Plural -> the ``spec`` fields of type ``MicroTime`` (coordination.k8s.io/v1 ``LeaseSpec``)."""


Term = tuple[str, str, frozenset[str]]
"""One selector requirement: (key, operator, values), the operator ``in`` (``key=v``, ``key==v``,
``key in (v1,v2)``), ``notin`` (``key!=v``, ``key notin (v1,v2)``), ``exists`` (``key``) or ``!``
(``!key``); values empty for the last two."""
_KEY = r"[A-Za-z0-9_./-]+"
_VALUE = r"[A-Za-z0-9_.-]*"
_EQUALITY = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")


def _requirements(text: str) -> list[str] | None:
    """``text`` split at the commas outside parentheses (None when they do not pair up)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth not in (0, 1):
            return None
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return None if depth else [*parts, text[start:]]


def selector_terms(text: str, fields: bool = False) -> list[Term] | None:
    """A ``labelSelector``'s requirements as the API server parses them (Kubernetes docs, "Labels and
    Selectors", kubernetes.io/docs/concepts/overview/working-with-objects/labels/, v1.31: equality-based
    ``=``, ``==``, ``!=`` and set-based ``in``, ``notin``, ``key``, ``!key``, comma-separated, all to be
    met), or with ``fields`` a ``fieldSelector``'s (docs "Field Selectors": ``=``, ``==``, ``!=`` only;
    ``involvedObject.uid=y``). None when ``text`` is not one of those (the server answers HTTP 400);
    ``[]`` for an empty selector (everything)."""
    if not text or not text.strip():
        return []
    parts = _requirements(text)
    if parts is None:
        return None
    out: list[Term] = []
    for part in parts:
        if (m := _EQUALITY.fullmatch(part)) is not None:
            out.append((m[1], "notin" if m[2] == "!=" else "in", frozenset([m[3]])))
        elif not fields and (m := _SET.fullmatch(part)) is not None:
            values = [v.strip() for v in m[3].split(",")]
            if not all(re.fullmatch(_VALUE, v) for v in values) or values == [""]:
                return None  # "values set can't be empty" (apimachinery labels.NewRequirement)
            out.append((m[1], m[2], frozenset(values)))
        elif not fields and (m := _EXISTS.fullmatch(part)) is not None:
            out.append((m[2], "!" if m[1] else "exists", frozenset()))
        else:
            return None
    return out


def _field(obj: dict[str, Any], path: str) -> str:
    x: Any = obj
    for key in path.split("."):
        x = x.get(key) if isinstance(x, dict) else None
    return "" if x is None else str(x)


def _meets(have: dict[str, Any], key: str, op: str, values: frozenset[str]) -> bool:
    """One requirement on ``have`` (label -> value): ``!=`` and ``notin`` are met by an object without
    the key, as the docs say ("Labels and Selectors": "all resources ... not having a label with key")."""
    if op == "exists":
        return key in have
    if op == "!":
        return key not in have
    inside = key in have and str(have[key]) in values
    return inside if op == "in" else not inside


def selected(obj: dict[str, Any], labels: list[Term], fields: list[Term]) -> bool:
    """Whether ``obj`` meets every label and field requirement (a field absent reads as empty)."""
    have = (obj.get("metadata") or {}).get("labels") or {}
    return (all(_meets(have, k, op, vals) for k, op, vals in labels)
            and all((_field(obj, k) in vals) == (op == "in") for k, op, vals in fields))


SERVER_META = ("uid", "creationTimestamp", "name", "namespace")
"""Metadata the API server keeps across a replace (immutable, or the request path's)."""


def replaced(old: dict[str, Any], body: dict[str, Any], version: str) -> dict[str, Any]:
    """The object a PUT of ``body`` leaves, as the API server stores it: ``body`` whole (a field it
    leaves out is gone, unlike a patch), with the server's metadata of ``old`` (``SERVER_META``), the
    new ``resourceVersion``, ``metadata.generation`` bumped when the spec changed, and ``old``'s status
    (a replace of the main resource does not write the status subresource)."""
    new = copy.deepcopy(body)
    meta = new.setdefault("metadata", {})
    old_meta = old.get("metadata") or {}
    for key in SERVER_META:
        if key in old_meta:
            meta[key] = old_meta[key]
    meta["resourceVersion"] = version
    generation = int(old_meta.get("generation") or 1)
    meta["generation"] = generation + 1 if "spec" in old and new.get("spec") != old.get("spec") else generation
    if "status" in old:
        new["status"] = old["status"]
    else:
        new.pop("status", None)
    return new


def bad_micro_time(plural: str, body: Any) -> str | None:
    """The API server's complaint about a ``MicroTime`` field of ``body`` it cannot parse; None if none."""
    spec = body.get("spec") if isinstance(body, dict) else None
    for name in MICRO_TIME_FIELDS.get(plural, ()):
        value = spec.get(name) if isinstance(spec, dict) else None
        if value is not None and not (isinstance(value, str) and MICRO_TIME.fullmatch(value)):
            return (f'{plural} in version "v1" cannot be handled: spec.{name}: parsing time "{value}" as '
                    '"2006-01-02T15:04:05.000000Z07:00"')
    return None


DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""apimachinery ``validation.IsDNS1123Subdomain`` (staging/src/k8s.io/apimachinery/pkg/util/validation/
validation.go): lower-case alphanumerics, '-' and '.', starting and ending alphanumeric, at most
``DNS1123_SUBDOMAIN_MAX`` characters: the ``NameIsDNSSubdomain`` rule of Deployments, StatefulSets,
ReplicaSets, Pods, ConfigMaps, Leases, events.k8s.io Events and custom resources."""
DNS1123_SUBDOMAIN_MAX = 253
DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                         "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                         f"for validation is '{DNS1123_SUBDOMAIN.pattern}')")
PATH_SEGMENT_NAMES = {("", "events")}
"""(API group, plural) whose names only need to be a path segment (apimachinery ``path.ValidatePathSegmentName``:
not ``.`` or ``..``, no ``/`` or ``%``): core/v1 Events, which ``ValidateEventCreate``
(pkg/apis/core/validation/events.go) leaves to the generic ``rest.BeforeCreate`` for backward
compatibility; events.k8s.io/v1 Events are held to the subdomain rule."""


def name_problems(group: str, plural: str, name: str) -> list[str]:
    """Why the API server refuses ``name`` for an object of ``plural`` in ``group`` (empty: accepted)."""
    if (group, plural) in PATH_SEGMENT_NAMES:
        if name in (".", ".."):
            return [f"may not be '{name}'"]
        return [f"may not contain '{c}'" for c in "/%" if c in name]
    out = []
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        out.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not DNS1123_SUBDOMAIN.fullmatch(name):
        out.append(DNS1123_SUBDOMAIN_MSG)
    return out


def invalid(kind: str, group: str, name: str, field: str, problems: list[str]) -> aiohttp.web.Response:
    """The API server's 422 for an object that fails validation (``errors.NewInvalid``): reason ``Invalid``,
    the message ``Kind.group "name" is invalid: field: Invalid value: "name": why``, and one cause per problem."""
    causes = [{"reason": "FieldValueInvalid", "message": f'Invalid value: "{name}": {p}', "field": field}
              for p in problems]
    qualified = f"{kind}.{group}" if group else kind
    message = f'{qualified} "{name}" is invalid: ' + ", ".join(f"{field}: {c['message']}" for c in causes)
    return aiohttp.web.json_response({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
        "reason": "Invalid", "details": {"name": name, "group": group, "kind": kind, "causes": causes},
        "code": 422}, status=422)


SERVED = {"apps/v1/deployments": "Deployment", "apps/v1/statefulsets": "StatefulSet",
          "apps/v1/replicasets": "ReplicaSet", "v1/pods": "Pod", "v1/events": "Event", "v1/configmaps": "ConfigMap",
          "coordination.k8s.io/v1/leases": "Lease", "events.k8s.io/v1/events": "Event",
          "leaderworkerset.x-k8s.io/v1/leaderworkersets": "LeaderWorkerSet",
          "serving.kserve.io/v1beta1/inferenceservices": "InferenceService"}
"""``group/version/plural`` -> kind of every resource served from the start, with the discovery a
client such as ``kubectl`` needs to map a name to it (kind, singular name, namespaced)."""
VERBS_SERVED = {"create", "delete", "get", "list", "patch", "update", "watch"}

WATCH_WINDOW = 2000
"""Events the emulator keeps for watches resuming from a resourceVersion (the API server's watch cache
and etcd keep a bounded history too: etcd compacts every 5 minutes by default,
``--etcd-compaction-interval``); the size is this emulator's choice, large enough for the fleets the
tests and benchmarks put in it to rewatch after a short outage."""
WATCH_POLL_S = 0.1
"""How often an open watch with nothing to send looks whether it should end (a drop, an outage, its
timeout), wall seconds."""

HANG_POLL_S = 0.05
"""How often a hung request looks whether its hang is over, wall seconds."""


def status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    """A ``v1 Status`` failure, as the API server answers errors."""
    return aiohttp.web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": message, "reason": reason, "code": code}, status=code)


def conflict(plural: str, name: str | None) -> aiohttp.web.Response:
    """The API server's 409 for a write carrying a resourceVersion older than the object's."""
    return status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": the object has been '
                  "modified; please apply your changes to the latest version and try again")


def too_many_requests(retry_after_s: int) -> aiohttp.web.Response:
    """The API server's 429 when it sheds load (apiserver ``filters/maxinflight.go`` and API Priority and
    Fairness answer ``Retry-After: 1``): the request is not served, the header says when to come back,
    and the Status carries it as ``details.retryAfterSeconds``."""
    resp = aiohttp.web.json_response({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Too many requests, please try again later.", "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": retry_after_s}, "code": 429}, status=429)
    resp.headers["Retry-After"] = str(retry_after_s)
    return resp


VERBS = {"GET": "get", "PUT": "update", "PATCH": "patch", "POST": "create", "DELETE": "delete"}


REQUEST_LOG = 200
"""Requests kmock's log keeps (it matches each request against all of them: a long run would slow to
a crawl); assertions here read ``Emulator.writes``, which keeps every write."""


DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}
"""``podPhaseToOrdinal`` (pkg/controller/controller_utils.go): a phase missing from it ranks as Pending."""
CONTROLLER_POLL_S = 0.02
"""How often the controller step looks at the Deployments, wall seconds."""


def pod_ready(pod: dict[str, Any]) -> bool:
    """Whether ``pod`` has condition ``Ready`` True (``podutil.IsPodReady``)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pod_active(pod: dict[str, Any]) -> bool:
    """``controller.IsPodActive``: not Succeeded or Failed, not being deleted."""
    return ((pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not (pod.get("metadata") or {}).get("deletionTimestamp"))


def deletion_cost(pod: dict[str, Any]) -> int:
    """The pod's ``controller.kubernetes.io/pod-deletion-cost`` (0 when absent or not an int32, as
    ``helper.GetDeletionCostFromPodAnnotations`` reads it)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(DELETION_COST)
    try:
        cost = int(str(text).strip()) if text is not None else 0
    except ValueError:
        return 0
    return cost if -(2**31) <= cost < 2**31 else 0


def removal_order(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``pods`` in the order the ReplicaSet controller removes them on a scale-down (``getPodsToDelete``
    in pkg/controller/replicaset/replica_set.go sorts by ``ActivePodsWithRanks.Less`` in
    pkg/controller/controller_utils.go, Kubernetes 1.22 and later): unassigned (no ``spec.nodeName``)
    before assigned; Pending < Unknown < Running; not ready before ready; lower pod-deletion-cost
    first; then, simplified here, the newest ``creationTimestamp`` first. Left out: the rank of pods
    doubled up on a node, the time since the pod became ready (logarithmic buckets) and container
    restarts, which the real controller compares between the cost and the creation time; ties, which
    it leaves to the sort, go here to the name last in order."""
    def key(pod: dict[str, Any]) -> tuple[int, int, int, int, float, str]:
        meta = pod.get("metadata") or {}
        created = meta.get("creationTimestamp")
        when = datetime.datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp() if created else 0.0
        return (1 if (pod.get("spec") or {}).get("nodeName") else 0,
                PHASE_ORDER.get(str((pod.get("status") or {}).get("phase")), 0), int(pod_ready(pod)),
                deletion_cost(pod), -when, "".join(chr(0x10FFFF - ord(c)) for c in str(meta.get("name") or "")))
    return sorted(pods, key=key)


class Versions:
    """The one resourceVersion counter (``next`` gives the next; ``last`` the last given)."""

    def __init__(self) -> None:
        self.last = 0

    def __iter__(self) -> Versions:
        return self

    def __next__(self) -> int:
        self.last += 1
        return self.last


class _LoggingBus:
    """Stands in for kmock's per-resource event bus: every event put there goes to the emulator's
    watch log (``Emulator._log_event``), which ``_serve_watch`` streams from."""

    def __init__(self, emu: Emulator, resource: Any) -> None:
        self.emu = emu
        self.resource = resource

    async def put(self, *events: dict[str, Any]) -> None:
        for event in events:
            self.emu._log_event(self.resource, event)
        self.emu._wake_watches()  # never waits: a write is not held up by the watches


class _Buses(dict[Any, _LoggingBus]):
    def __init__(self, emu: Emulator) -> None:
        super().__init__()
        self.emu = emu

    def __missing__(self, resource: Any) -> _LoggingBus:
        bus = self[resource] = _LoggingBus(self.emu, resource)
        return bus


def expired(since: int, oldest: int) -> dict[str, Any]:
    """The watch event the API server sends for a watch from a resourceVersion it no longer holds
    (apiserver ``cacher.Watch`` answers with a watcher that sends ``errors.NewResourceExpired``: HTTP 410,
    reason ``Expired``, as an ``ERROR`` event after a 200, "to match the uncached watch implementation")."""
    return {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                        "message": f"too old resource version: {since} ({oldest})",
                                        "reason": "Expired", "code": 410}}


class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with resourceVersions, 409s, the scale subresource, 403s and an outage (module doc)."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.versions = Versions()
        self._buses = _Buses(self)  # type: ignore[assignment]  # events go to the watch log instead
        self.history: collections.deque[tuple[int, Any, dict[str, Any], dict[str, Any] | None]] = collections.deque()
        """The watch log: (resourceVersion, resource, event, the object before it or None), oldest first
        (module docstring)."""
        self._current: dict[tuple[Any, str | None, str | None], dict[str, Any]] = {}
        """(resource, namespace, name) -> the object as last logged or ``put``: the state before its next event."""
        self.watch_window = WATCH_WINDOW
        self.logged = 0
        """The resourceVersion of the last event logged (a list's ``metadata.resourceVersion``)."""
        self.compacted = 0
        """The newest resourceVersion no longer in the log: a watch from before it is 410 Gone."""
        self.watch_epoch = 0
        """Bumped by ``drop_watches``: an open watch of an older epoch ends."""
        self._watch_woken = asyncio.Event()
        """Set (and replaced by a fresh one) by every logged write: what an open watch with nothing to
        send waits on (``_wake_watches``). Not a Condition: its lock, which a write needed to notify, was
        left held for ever by a watch cancelled (its client gone) while it waited to take it back, and
        every write after hung (``tests/integration/kubernetes/test_emulator_watch.py``)."""
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.items_sent: collections.Counter[str] = collections.Counter()
        """Plural -> the objects lists of it sent (every page's ``items``)."""
        self.watch_selectors: collections.deque[tuple[str, str | None]] = collections.deque(maxlen=REQUEST_LOG)
        """(plural, ``labelSelector`` or None) of each watch as it opens, the last ``REQUEST_LOG``."""
        """Requests served (or refused by a fault) by (verb, plural or plural/subresource) (module docstring)."""
        self.forbidden: set[tuple[str, str, str | None]] = set()
        self.scalable: set[str] = set(SCALABLE)
        self.selector_paths: dict[str, str] = dict(SELECTOR_PATHS)
        self.down = False
        self.conflicts = False
        self.conflicts_left = 0
        """Scale writes still to be answered 409 (a transient conflict: then they pass)."""
        self.hung: set[str] = set()
        self.slow: dict[str, float] = {}
        """User-Agent -> seconds each of its requests waits before it is served (then served in full: a write
        lands even when the client has given up on it)."""
        self.throttled: dict[str, int] = {}
        """User-Agent -> the ``Retry-After`` seconds of the HTTP 429 each of its requests gets, unserved."""
        self.deployment_delay_s: float | None = None
        """Seconds after a Deployment's spec changes that the deployment-controller step writes its status
        (``sync_deployments``); None: no such step (the status is whatever clients patch)."""
        self.replicaset_pods = False
        """Whether that step also keeps each Deployment's pods at ``spec.replicas``, removing the ones the
        ReplicaSet controller would (``removal_order``) and creating ready ones."""
        self._changed: dict[tuple[str | None, str], tuple[int, float]] = {}
        self._watch_epochs: dict[Any, int] = {}
        """A watch request's id -> ``watch_epoch`` when it passed the faults (``_serve_watch`` takes it)."""
        self._page_keys = itertools.count(1)
        self.pages: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        """A paged list's continue key -> (its resourceVersion, the objects it lists): the snapshot its
        later pages are cut from (``_serve_list``)."""
        self.refused: list[tuple[str, str, str | None, int]] = []
        """Requests answered with an error status by a fault or a check: (method, plural, name, status)."""
        self.writes: list[tuple[str, str | None, str | None, str | None, Any, str]] = []
        """(method, plural or plural/scale, namespace, name, body or replicas, the client's User-Agent)."""
        self.seen: set[tuple[str, str, str, str | None, str | None]] = set()
        """Every request served, as RBAC authorizes it: (verb, API group, resource or resource/subresource,
        namespace, name); the verb as the API server derives it (a GET of a collection is ``list``, with
        ``?watch`` ``watch``)."""

    def _object(self, request: kmock.Request) -> Any:
        if request.resource is None or request.name is None:
            return None
        key = (request.resource, request.namespace, request.name)
        return self._objects[key] if key in self._objects else None  # noqa: SIM401 (ObjectsArray has no .get)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        delay = self.slow.get(request.headers.get("User-Agent", ""))
        if delay is None:
            return await self._serve(request)

        async def later() -> aiohttp.web.StreamResponse:
            await asyncio.sleep(delay)
            return await self._serve(request)

        # shielded: a client that gives up does not cancel it, so its write still lands (as on a real
        # API server, where a request past the client's deadline may well have been applied)
        return await asyncio.shield(asyncio.ensure_future(later()))

    async def _serve(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if len(self._requests) > REQUEST_LOG:  # kmock scans its whole request log on every request
            del self._requests[: len(self._requests) - REQUEST_LOG // 2]
        fault = await self._fault(request.headers.get("User-Agent", ""))
        if fault is not None:
            self.refused.append((str(getattr(request.method, "value", request.method)).upper(),
                                 str(getattr(request.resource, "plural", "")), request.name, fault.status))
            return fault
        watching = query_flag(request.params, "watch")
        if watching and request.action in (kmock.action.LIST, kmock.action.FETCH):  # kmock missed it (``query_flag``)
            # set in place (the request is frozen): kmock finds a request's reactions by its identity
            object.__setattr__(request, "action", kmock.action.WATCH)
        if watching:  # dropped by a drop_watches from now on, however late it streams
            self._watch_epochs[request.id] = self.watch_epoch
        for param in ("labelSelector", "fieldSelector"):
            text = request.params.get(param)
            if text and selector_terms(text, fields=param == "fieldSelector") is None:  # refused, never ignored
                return status(400, "BadRequest", f'unable to parse requirement: {param} "{text}"')
        res = request.resource
        method = str(getattr(request.method, "value", request.method)).upper()
        if res is not None:
            verb = VERBS.get(method, method.lower())
            if watching and verb == "get":
                verb = "watch"
            elif verb == "get" and request.name is None:
                verb = "list"
            plural = f"{res.plural}/{request.subresource}" if request.subresource else res.plural
            self.seen.add((verb, res.group or "", plural or "", request.namespace, request.name))
            self.requests[(verb, str(plural))] += 1
            if verb == "watch":
                self.watch_selectors.append((str(plural), request.params.get("labelSelector")))
            if verb == "watch" and not _version_or_empty(request.params.get("resourceVersion")):
                return status(400, "BadRequest", f'resourceVersion "{request.params.get("resourceVersion")}" '
                              "is not a resource version")
            if (verb, res.plural, request.subresource) in self.forbidden:
                sub = f"/{request.subresource}" if request.subresource else ""
                return status(403, "Forbidden", f'{res.plural}{sub} "{request.name}" is forbidden: User '
                              f'"system:serviceaccount:autoscaler:autoscaler" cannot {verb} resource '
                              f'"{res.plural}{sub}" in API group "{res.group}" in the namespace "{request.namespace}"')
            if method in ("POST", "PUT") and (wrong := self._bad_identity(request, method)) is not None:
                self.refused.append((method, str(res.plural), request.name, wrong.status))
                return wrong
            if request.subresource == "scale" and res.plural in self.scalable:
                return await self._scale(request, method)
            if method in ("POST", "PUT", "PATCH") and (bad := bad_micro_time(str(res.plural), request.data)):
                return status(400, "BadRequest", bad)
            if method == "PUT" and request.name is not None and request.subresource is None:
                return await self._replace(request)
            if method in ("POST", "PATCH") and isinstance(request.data, dict):
                refused = await self._stamp(request, method)
                if refused is not None:
                    return refused
        resp = await super()._handle(request)
        if (res is not None and method == "POST" and request.subresource is None and resp.status == 200
                and not resp.prepared):  # a create is 201 Created (apiserver handlers/create.go, v1.31)
            resp.set_status(201)
        return resp

    async def _fault(self, agent: str) -> aiohttp.web.StreamResponse | None:
        """The fault switched on for a request from ``agent``, if any (module docstring); None: serve it."""
        if agent in self.hung:
            while agent in self.hung:
                await asyncio.sleep(HANG_POLL_S)
            return status(504, "Timeout", "the request did not complete within the allowed duration")
        if self.down:
            return status(503, "ServiceUnavailable", "the API server is unavailable")
        if agent in self.throttled:
            return too_many_requests(self.throttled[agent])
        return None

    async def _stamp(self, request: kmock.Request, method: str) -> aiohttp.web.StreamResponse | None:
        """A create's or patch's server-set metadata (a generated name, uid, creationTimestamp,
        generation, resourceVersion, and a create's namespace from the request path where the body has
        none: apiserver ``registry/rest/create.go`` ``BeforeCreate`` calls
        ``EnsureObjectNamespaceMatchesRequestNamespace``, kubernetes v1.31), recorded in ``writes``; the
        422 of a generated name the API server would refuse."""
        res = request.resource
        assert res is not None and isinstance(request.data, dict)
        async with self._lock:
            meta = request.data.setdefault("metadata", {})
            if method == "POST" and not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{next(self.versions):x}"
            if method == "POST":  # server-set, whatever the client sent
                problems = name_problems(res.group or "", str(res.plural), str(meta.get("name") or ""))
                if problems:
                    self.refused.append((method, str(res.plural), meta.get("name"), 422))
                    return invalid(self._kind(res), res.group or "", str(meta.get("name") or ""),
                                   "metadata.name", problems)
                meta["uid"] = str(uuid.uuid4())
                meta["creationTimestamp"] = datetime.datetime.now(datetime.UTC).strftime(
                    "%Y-%m-%dT%H:%M:%SZ")
                meta["generation"] = 1
                if request.namespace and not meta.get("namespace"):  # a mismatch was refused (_bad_identity)
                    meta["namespace"] = request.namespace
            elif request.subresource is None and isinstance(request.data.get("spec"), dict):
                current = self._object(request)  # a patch of the spec bumps the generation
                if current is not None and not current.deleted:
                    spec = current.raw.get("spec") or {}
                    if any(spec.get(k) != v for k, v in request.data["spec"].items()):
                        meta["generation"] = int(current.raw["metadata"].get("generation") or 1) + 1
            meta["resourceVersion"] = str(next(self.versions))
            self.writes.append((method, res.plural, request.namespace, request.name, request.data,
                                request.headers.get("User-Agent", "")))
        return None

    async def run_controllers(self) -> None:
        """The controller step, every ``CONTROLLER_POLL_S`` for ever (``EmulatedCluster`` runs it as a task)."""
        while True:
            await asyncio.sleep(CONTROLLER_POLL_S)
            if self.deployment_delay_s is not None:
                async with self._lock:
                    await self.sync_deployments(asyncio.get_running_loop().time())

    async def sync_deployments(self, now: float) -> None:
        """What the deployment (and, with ``replicaset_pods``, the ReplicaSet) controller does, once
        ``deployment_delay_s`` after each change of a Deployment's ``metadata.generation`` that its
        ``status.observedGeneration`` does not show yet (``now``: the event loop's clock): the pods kept
        at ``spec.replicas`` (``_sync_pods``), then ``status`` written (``observedGeneration``,
        ``replicas``, ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``: counted from the
        pods; without pods, the readiness a client last reported, capped at the new replicas), with a new
        resourceVersion: a write carrying the version read before it is then a 409, as on a real cluster
        where the controller writes the status a moment after each scale. Called with the lock held."""
        assert self.deployment_delay_s is not None
        for (res, ns, name), obj in list(self._objects.items()):
            if res.plural != "deployments" or res.group != "apps" or obj.deleted:
                continue
            raw = obj.raw
            generation = int(raw.get("metadata", {}).get("generation") or 1)
            old = raw.get("status") or {}
            if old.get("observedGeneration") == generation:
                continue
            first = self._changed.get((ns, name))
            if first is None or first[0] != generation:
                self._changed[(ns, name)] = (generation, now)
                continue
            if now - first[1] < self.deployment_delay_s:
                continue
            wanted = int((raw.get("spec") or {}).get("replicas", 1))
            if self.replicaset_pods:
                pods = await self._sync_pods(ns, raw, wanted)
                replicas, ready = len(pods), sum(pod_ready(p) for p in pods)
            else:
                replicas, ready = wanted, min(int(old.get("readyReplicas") or 0), wanted)
            new = {"observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                   "readyReplicas": ready, "availableReplicas": ready}
            obj.patch({"status": new, "metadata": {"resourceVersion": str(next(self.versions))}})
            self.writes.append(("PATCH", "deployments/status", ns, name, new, "deployment-controller"))
            await self._buses[res].put({"type": "MODIFIED", "object": obj.raw})

    async def _sync_pods(self, ns: str | None, deployment: dict[str, Any], wanted: int) -> list[dict[str, Any]]:
        """The ReplicaSet controller for ``deployment``: its active pods (selected by
        ``spec.selector.matchLabels``) brought to ``wanted``, removing the first of ``removal_order`` at
        once (no termination grace here) or creating ready ones (Running on node ``emulated``: no
        scheduler, no kubelet); the pods left."""
        pods_res = kmock.resource("", "v1", "pods")
        labels = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        mine = [(key, o) for key, o in self._objects.items() if key[0] == pods_res and key[1] == ns
                and not o.deleted and pod_active(o.raw)
                and all(((o.raw.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in labels.items())]
        by_name = {str(key[2]): o for key, o in mine}
        if len(mine) > wanted:
            for pod in removal_order([o.raw for _, o in mine])[: len(mine) - wanted]:
                gone = by_name.pop(str(pod["metadata"]["name"]))
                raw = gone.raw
                gone.delete()
                self.writes.append(("DELETE", "pods", ns, raw["metadata"]["name"], None, "replicaset-controller"))
                await self._buses[pods_res].put({"type": "DELETED", "object": raw})
        template = (deployment.get("spec") or {}).get("template") or {}
        name = deployment["metadata"]["name"]
        while len(by_name) < wanted:
            pod_name = f"{name}-{next(self.versions):x}"
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod_name, "namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": now,
                                "labels": dict((template.get("metadata") or {}).get("labels") or labels),
                                "resourceVersion": str(next(self.versions))},
                   "spec": {**copy.deepcopy(template.get("spec") or {}), "nodeName": "emulated"},
                   "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
            self._objects[(pods_res, ns, pod_name)] = pod
            by_name[pod_name] = self._objects[(pods_res, ns, pod_name)]
            self.writes.append(("POST", "pods", ns, pod_name, pod, "replicaset-controller"))
            await self._buses[pods_res].put({"type": "ADDED", "object": pod})
        return [o.raw for o in by_name.values()]

    def _kind(self, res: Any) -> str:
        """The kind served at resource ``res`` (its plural when this emulator was not told)."""
        path = f"{res.group}/{res.version}/{res.plural}" if res.group else f"{res.version}/{res.plural}"
        return SERVED.get(path, str(res.plural))

    def _bad_identity(self, request: kmock.Request, method: str) -> aiohttp.web.Response | None:
        """The API server's refusal of a create or replace whose body names another object than the request
        (apiserver ``handlers/rest.go`` ``checkName``: HTTP 400 BadRequest), or whose name (given, not generated)
        it would not accept (HTTP 422 Invalid, ``name_problems``); None when neither."""
        res = request.resource
        body = request.data if isinstance(request.data, dict) else {}
        meta: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
        name, namespace = meta.get("name") or "", meta.get("namespace") or ""
        if method == "PUT" and request.name is not None and name != request.name:
            return status(400, "BadRequest", f"the name of the object ({name}) does not match the name on the URL "
                          f"({request.name})")
        if request.namespace and namespace and namespace != request.namespace:
            return status(400, "BadRequest", f"the namespace of the provided object ({namespace}) does not match the "
                          f"namespace sent on the request ({request.namespace})")
        if res is None or request.subresource is not None or (method == "POST" and not name):
            return None  # a generated name is checked once made (``_handle``)
        problems = name_problems(res.group or "", str(res.plural), name)
        return invalid(self._kind(res), res.group or "", name, "metadata.name", problems) if problems else None

    def _log_event(self, resource: Any, event: dict[str, Any]) -> None:
        """Log ``event`` for watches at the resourceVersion its object carries, or at a new one when
        that is not newer than the last logged (a deletion: the API server gives it a new version)."""
        obj = event.get("object") or {}
        text = (obj.get("metadata") or {}).get("resourceVersion")
        rv = int(text) if isinstance(text, str) and text.isdigit() else 0
        if event.get("type") == "DELETED" or rv <= self.logged:
            rv = next(self.versions)
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
        meta = obj.get("metadata") or {}
        key = (resource, meta.get("namespace"), meta.get("name"))
        before = self._current.pop(key, None) if event.get("type") == "DELETED" else self._current.get(key)
        if event.get("type") != "DELETED":
            self._current[key] = obj
        self.history.append((rv, resource, {"type": event.get("type"), "object": obj}, before))
        self.logged = max(self.logged, rv)
        while len(self.history) > self.watch_window:
            self.compacted = self.history.popleft()[0]

    def _wake_watches(self) -> None:
        """Wake every open watch waiting for a write (``_watch_woken``): no lock, so a cancelled watch
        cannot leave a write waiting."""
        woken, self._watch_woken = self._watch_woken, asyncio.Event()
        woken.set()

    def compact(self) -> None:
        """Drop the whole watch log now (an etcd compaction): a watch from any resourceVersion given
        so far is 410 Gone; lists and new watches without one are served as before."""
        self.compacted = self.logged
        self.history.clear()

    def drop_watches(self) -> None:
        """End every open watch now, as a dropped connection does; clients watch again."""
        self.watch_epoch += 1

    def _listed(self, request: kmock.Request) -> list[dict[str, Any]]:
        """The objects a list of ``request`` holds now (its namespace, selectors). Called with the lock held."""
        labels = selector_terms(request.params.get("labelSelector") or "") or []
        fields = selector_terms(request.params.get("fieldSelector") or "", fields=True) or []
        return [o.raw for (res, ns, _), o in self._objects.items()
                if res == request.resource and (request.namespace is None or ns == request.namespace)
                and not o.deleted and selected(o.raw, labels, fields)]

    async def _serve_list(self, request: kmock.Request) -> Any:
        """The objects of the resource, filtered by ``labelSelector`` and ``fieldSelector`` as the API
        server does (``selected``; ``_handle`` refused the selectors this emulator cannot evaluate), with
        the resourceVersion of the last event in ``metadata``: a watch from it misses nothing."""
        if request.resource not in self._get_resources():
            raise kmock.KubernetesResourceNotFoundError()
        try:
            limit = int(request.params.get("limit") or 0)
        except ValueError:
            return status(400, "BadRequest", f'limit "{request.params.get("limit")}" is not an integer')
        token = request.params.get("continue")
        async with self._lock:
            if token:  # a later page: cut from the first page's snapshot, at its resourceVersion
                key, _, at = token.partition(":")
                if key not in self.pages or not at.isdigit():
                    return status(410, "Expired", "The provided continue parameter is too old to display a "
                                  "consistent list result. You can start a new list without the continue parameter.")
                version, items = self.pages.pop(key)
                start = int(at)
            else:
                key, version, items, start = f"p{next(self._page_keys)}", str(self.logged), self._listed(request), 0
            meta: dict[str, Any] = {"resourceVersion": version}
            end = len(items) if limit <= 0 else min(len(items), start + limit)
            if end < len(items):
                self.pages[key] = (version, items)
                meta.update({"continue": f"{key}:{end}", "remainingItemCount": len(items) - end})
            self.items_sent[str(getattr(request.resource, "plural", ""))] += end - start
            return {"kind": f"{self._kind(request.resource)}List", "apiVersion": "v1", "metadata": meta,
                    "items": items[start:end]}

    async def _serve_watch(self, request: kmock.Request) -> Any:
        """A watch as the API server serves it (module docstring)."""
        # the epoch it was accepted in: a drop_watches between the request passing the faults and its
        # stream starting ends it too (else a watch accepted just before a drop would outlive it)
        epoch = self._watch_epochs.pop(request.id, self.watch_epoch)
        yield b""  # the headers, at once (an empty line: clients skip it)
        res, params = request.resource, request.params
        assert res is not None  # kmock routes only resource requests here
        labels = selector_terms(params.get("labelSelector") or "") or []
        fields = selector_terms(params.get("fieldSelector") or "", fields=True) or []
        loop = asyncio.get_running_loop()
        timeout = params.get("timeoutSeconds")
        deadline = loop.time() + float(timeout) if timeout else None
        bookmarks = query_flag(params, "allowWatchBookmarks")
        text = params.get("resourceVersion")
        async with self._lock:
            if text in (None, "", "0"):  # state now, then what follows
                since = self.logged
                first = [{"type": "ADDED", "object": o} for o in self._listed(request)]
            else:
                since, first = int(text), []
                if since < self.compacted:
                    first = [expired(since, self.compacted)]
        for event in first:
            yield event
        if first and first[0]["type"] == "ERROR":
            return

        def wanted(obj: dict[str, Any]) -> bool:
            meta = obj.get("metadata") or {}
            return ((request.namespace is None or meta.get("namespace") == request.namespace)
                    and selected(obj, labels, fields))

        while True:
            woken = self._watch_woken  # taken before the log is read: a write logged after it sets it
            pending = [(rv, e, before) for rv, r, e, before in self.history if rv > since and r == res]
            if not pending:
                left = WATCH_POLL_S if deadline is None else min(WATCH_POLL_S, deadline - loop.time())
                if left > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(left):
                            await woken.wait()
            for rv, event, before in pending:
                since = rv
                sent = as_watched(event, before, wanted)
                if sent is not None:
                    yield sent
            if self.watch_epoch != epoch or self.down:
                return
            if deadline is not None and loop.time() >= deadline:
                if bookmarks:
                    api_version = f"{res.group}/{res.version}" if res.group else res.version
                    yield {"type": "BOOKMARK", "object": {"kind": self._kind(res), "apiVersion": api_version,
                                                          "metadata": {"resourceVersion": str(max(since,
                                                                                                  self.logged))}}}
                return

    async def _replace(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """PUT of a whole object (kmock serves only PATCH): 404 if absent, 409 if stale, else the body
        replaces it (``replaced``)."""
        res = request.resource
        body = request.data if isinstance(request.data, dict) else {}
        async with self._lock:
            obj = self._object(request)
            if res is None or obj is None or obj.deleted:
                return status(404, "NotFound", f'{getattr(res, "plural", "")} "{request.name}" not found')
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent is not None and sent != obj.get("metadata", {}).get("resourceVersion"):
                return conflict(str(res.plural), str(request.name))
            obj.create(replaced(obj.raw, body, str(next(self.versions))))
            self.writes.append(("PUT", res.plural, request.namespace, request.name, body,
                                request.headers.get("User-Agent", "")))
            raw = obj.raw
            await self._buses[res].put({"type": "MODIFIED", "object": raw})
        return aiohttp.web.json_response(raw)

    async def _scale(self, request: kmock.Request, method: str) -> aiohttp.web.StreamResponse:
        res = request.resource
        async with self._lock:
            obj = self._object(request)
            if res is None or obj is None or obj.deleted:
                return status(404, "NotFound", f'{getattr(res, "plural", "")} "{request.name}" not found')
            if method in ("PUT", "PATCH"):
                if self.conflicts or self.conflicts_left > 0:
                    self.conflicts_left = max(0, self.conflicts_left - 1)
                    self.refused.append((method, f"{res.plural}/scale", request.name, 409))
                    return conflict(str(res.plural), str(request.name))
                body: Any = request.data or {}
                sent = (body.get("metadata") or {}).get("resourceVersion")
                if method == "PUT" and sent is not None and sent != obj.get("metadata", {}).get("resourceVersion"):
                    self.refused.append((method, f"{res.plural}/scale", request.name, 409))
                    return conflict(str(res.plural), str(request.name))
                replicas = (body.get("spec") or {}).get("replicas")
                if not isinstance(replicas, int) or replicas < 0:
                    return status(422, "Invalid", f"Scale.spec.replicas: Invalid value: {replicas!r}")
                meta: dict[str, Any] = {"resourceVersion": str(next(self.versions))}
                if replicas != (obj.raw.get("spec") or {}).get("replicas", 1):  # the spec changed
                    meta["generation"] = int(obj.raw.get("metadata", {}).get("generation") or 1) + 1
                obj.patch({"spec": {"replicas": replicas}, "metadata": meta})
                self.writes.append((method, f"{res.plural}/scale", request.namespace, request.name,
                                    replicas, request.headers.get("User-Agent", "")))
                await self._buses[res].put({"type": "MODIFIED", "object": obj.raw})
            raw = obj.raw
        spec = raw.get("spec", {}).get("replicas", 1)
        scale_status: dict[str, Any] = {"replicas": raw.get("status", {}).get("replicas", spec)}
        path = self.selector_paths.get(str(getattr(request.resource, "plural", "")))
        if path is not None and raw.get("status", {}).get(path):
            scale_status["selector"] = raw["status"][path]
        return aiohttp.web.json_response({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": request.name, "namespace": request.namespace,
                         "resourceVersion": raw.get("metadata", {}).get("resourceVersion")},
            "spec": {"replicas": spec},
            "status": scale_status,
        })


def as_watched(event: dict[str, Any], before: dict[str, Any] | None,
               wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """What a watch whose namespace and selectors ``wanted`` tells is sent of a logged ``event`` (None:
    nothing), given the object's state ``before`` it (None: none, a create): as the API server's watch
    cache (``cacheWatcher.convertToWatchEvent``, kubernetes/kubernetes
    ``staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go``, the same in v1.28.0 and at
    commit 04d6b4f1, so in v1.31) it filters both states: the new one only passing is ADDED, both
    MODIFIED, the old one only (an object relabelled out of the selector) DELETED, carrying the old
    state at the event's resourceVersion; a deletion passes on its last state."""
    obj = event["object"]
    if event["type"] == "DELETED":
        return event if wanted(obj if before is None else before) else None
    now, was = wanted(obj), before is not None and wanted(before)
    if now:
        kind = "MODIFIED" if was else "ADDED"
        return event if event["type"] == kind else {"type": kind, "object": obj}
    if not was:
        return None
    gone = copy.deepcopy(before)
    assert gone is not None
    gone.setdefault("metadata", {})["resourceVersion"] = (obj.get("metadata") or {}).get("resourceVersion")
    return {"type": "DELETED", "object": gone}


def query_flag(params: Any, name: str) -> bool:
    """A boolean query parameter as the API server reads it: absent, ``0`` or ``false`` (any case) is
    false, any other value (``true``, ``True``, ``1``, even empty) is true (``Convert_Slice_string_To_bool``,
    ``k8s.io/apimachinery/pkg/runtime/conversion.go``, kubernetes/kubernetes staging). The official
    ``kubernetes`` client up to 36.0.0 sends Python's ``str(True)``, ``watch=True`` (37 sends ``true``);
    kmock 0.8 takes only ``watch=true`` as a watch (``kmock/_internal/parsing.py`` ``guess_k8s``) and
    would answer such a watch with a list."""
    text = params.get(name)
    return text is not None and text != "0" and text.lower() != "false"


def _version_or_empty(text: str | None) -> bool:
    """Whether ``text`` is a resourceVersion this emulator serves a watch from (absent, empty or digits)."""
    return text is None or text == "" or text.isdigit()


class EmulatedCluster:
    """An ``Emulator`` served on 127.0.0.1 from a background thread; ``api`` is a client for it."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.emulator: Emulator | None = None
        self._server: kmock.Server | None = None
        self._port = 0
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="kube-emulator", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with Emulator() as emu:
            self._server = kmock.Server(emu)
            await self._server.__aenter__()
            for path, kind in SERVED.items():
                emu.resources[path] = kmock.ResourceInfo(namespaced=True, kind=kind, singular=kind.lower(),
                                                         verbs=VERBS_SERVED)
            self.emulator = emu
            self.url = str(self._server.url).rstrip("/")
            self._port = self._server.port
            controllers = asyncio.create_task(emu.run_controllers())
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                controllers.cancel()
                if self._server is not None:
                    await self._server.__aexit__(None, None, None)

    def close_port(self) -> None:
        """Stop listening: every connection is refused (the API server's process down, its port closed)
        until ``open_port``; what it holds is kept."""
        async def close() -> None:
            if self._server is not None:
                server, self._server = self._server, None
                await server.__aexit__(None, None, None)
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)

    def open_port(self) -> None:
        """Listen again on the same port (after ``close_port``)."""
        async def open_() -> None:
            if self._server is None:
                server = kmock.Server(self.emu, port=self._port)
                await server.__aenter__()
                self._server = server
        asyncio.run_coroutine_threadsafe(open_(), self._loop).result(timeout=10)

    def put(self, path: str, objects: list[dict[str, Any]]) -> None:
        """Store ``objects`` of the resource ``path`` (``apps/v1/deployments``, ``v1/pods``) as the server's
        own, with no request and no watch event (a fixture for large fleets: 10,000 pods in a second,
        not minutes of POSTs): each gets a uid, creationTimestamp, generation 1 and a resourceVersion
        unless it has them; a list then carries a resourceVersion past them all."""
        group, version, plural = path.split("/") if path.count("/") == 2 else ("", *path.split("/"))
        res = kmock.resource(group, version, plural)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        async def put() -> None:
            emu = self.emu
            async with emu._lock:
                for obj in objects:
                    meta = obj.setdefault("metadata", {})
                    meta.setdefault("uid", str(uuid.uuid4()))
                    meta.setdefault("creationTimestamp", now)
                    meta.setdefault("generation", 1)
                    meta.setdefault("resourceVersion", str(next(emu.versions)))
                    emu._objects[(res, meta.get("namespace"), meta["name"])] = obj
                    emu._current[(res, meta.get("namespace"), meta["name"])] = obj
                emu.logged = max(emu.logged, emu.versions.last)
        asyncio.run_coroutine_threadsafe(put(), self._loop).result(timeout=600)

    def start(self) -> EmulatedCluster:
        """Start serving; RuntimeError if it does not come up within 10 s."""
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the emulated API server did not start")
        return self

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)

    def api(self, user_agent: str | None = None) -> client.ApiClient:
        """A ``kubernetes`` client for this server (no auth, no retries), sending ``user_agent``."""
        cfg = client.Configuration(host=self.url)
        cfg.retries = 0
        api = client.ApiClient(cfg)
        if user_agent is not None:
            api.user_agent = user_agent
        return api

    @property
    def emu(self) -> Emulator:
        assert self.emulator is not None
        return self.emulator


def deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    """A minimal apps/v1 Deployment ``name`` in ``namespace`` at ``replicas``, as a test fixture."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}}}}


@contextmanager
def emulated_cluster() -> Iterator[EmulatedCluster]:
    """An ``EmulatedCluster`` for the duration of the block."""
    cluster = EmulatedCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()
