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
- ``labelSelector`` and ``fieldSelector`` on lists, equality terms (``=``, ``==``, ``!=``) honoured on
  labels and on any dotted field (``involvedObject.uid``: how ``kubectl describe`` finds an object's
  Events), anything else refused with HTTP 400, never ignored;
- replace as the API server does it: the body replaces the object whole (a field the client dropped
  is gone), the server's metadata kept, ``generation`` bumped when the spec changed, the status kept;
- a Lease's ``acquireTime`` and ``renewTime`` parsed as ``metav1.MicroTime`` (RFC3339 with exactly six
  fraction digits): anything else is HTTP 400 BadRequest, as the API server refuses it;
- RBAC refusals: a request whose ``(verb, plural, subresource)`` is in ``forbidden`` is answered
  HTTP 403 Forbidden with the API server's message;
- a bounded request log (``REQUEST_LOG``), so an emulator serving a daemon for minutes keeps pace;
- a way down: ``down`` set makes every request fail with HTTP 503 (the server itself stays up,
  so a test can bring it back); ``conflicts`` set answers every write of a scale subresource
  HTTP 409, as when another writer always gets there first;
- a hang: a request whose User-Agent is in ``hung`` is held unanswered while it stays there, then
  answered HTTP 504 Timeout unprocessed (the real API server ends a request at its
  ``--request-timeout``, 60 s by default, with 504), so a client without a deadline waits for ever
  and a client with one gives up.

``EmulatedCluster`` runs it in a thread with its own event loop and gives a configured client.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import re
import threading
import uuid
from collections.abc import Iterator
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


Term = tuple[str, bool, str]
"""One selector requirement: (key, equal, value): ``key=value`` or ``key==value`` (True), ``key!=value``."""
_TERM = re.compile(r"\s*([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([^,=!]*?)\s*")


def selector_terms(text: str) -> list[Term] | None:
    """A ``labelSelector``'s or ``fieldSelector``'s requirements (``app=x``, ``involvedObject.uid=y``);
    None when it uses what this emulator does not evaluate (set-based ``in``, ``notin``, existence)."""
    out = []
    for part in text.split(",") if text else ():
        m = _TERM.fullmatch(part)
        if m is None:
            return None
        out.append((m[1], m[2] != "!=", m[3]))
    return out


def _field(obj: dict[str, Any], path: str) -> str:
    x: Any = obj
    for key in path.split("."):
        x = x.get(key) if isinstance(x, dict) else None
    return "" if x is None else str(x)


def selected(obj: dict[str, Any], labels: list[Term], fields: list[Term]) -> bool:
    """Whether ``obj`` meets every label and field requirement (a field absent reads as empty)."""
    have = (obj.get("metadata") or {}).get("labels") or {}
    return (all((have.get(k) == v) == eq for k, eq, v in labels)
            and all((_field(obj, k) == v) == eq for k, eq, v in fields))


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


SERVED = {"apps/v1/deployments": "Deployment", "apps/v1/statefulsets": "StatefulSet",
          "apps/v1/replicasets": "ReplicaSet", "v1/pods": "Pod", "v1/events": "Event", "v1/configmaps": "ConfigMap",
          "coordination.k8s.io/v1/leases": "Lease", "events.k8s.io/v1/events": "Event",
          "leaderworkerset.x-k8s.io/v1/leaderworkersets": "LeaderWorkerSet",
          "serving.kserve.io/v1beta1/inferenceservices": "InferenceService"}
"""``group/version/plural`` -> kind of every resource served from the start, with the discovery a
client such as ``kubectl`` needs to map a name to it (kind, singular name, namespaced)."""
VERBS_SERVED = {"create", "delete", "get", "list", "patch", "update", "watch"}

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


VERBS = {"GET": "get", "PUT": "update", "PATCH": "patch", "POST": "create", "DELETE": "delete"}


REQUEST_LOG = 200
"""Requests kmock's log keeps (it matches each request against all of them: a long run would slow to
a crawl); assertions here read ``Emulator.writes``, which keeps every write."""


class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with resourceVersions, 409s, the scale subresource, 403s and an outage (module doc)."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.versions = itertools.count(1)
        self.forbidden: set[tuple[str, str, str | None]] = set()
        self.scalable: set[str] = set(SCALABLE)
        self.selector_paths: dict[str, str] = dict(SELECTOR_PATHS)
        self.down = False
        self.conflicts = False
        self.hung: set[str] = set()
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
        if len(self._requests) > REQUEST_LOG:  # kmock scans its whole request log on every request
            del self._requests[: len(self._requests) - REQUEST_LOG // 2]
        agent = request.headers.get("User-Agent", "")
        if agent in self.hung:
            while agent in self.hung:
                await asyncio.sleep(HANG_POLL_S)
            return status(504, "Timeout", "the request did not complete within the allowed duration")
        if self.down:
            return status(503, "ServiceUnavailable", "the API server is unavailable")
        for param in ("labelSelector", "fieldSelector"):
            text = request.params.get(param)
            if text and selector_terms(text) is None:  # refused, never ignored
                return status(400, "BadRequest", f'unable to parse requirement: {param} "{text}" (this emulator '
                              "serves equality selectors only)")
        res = request.resource
        method = str(getattr(request.method, "value", request.method)).upper()
        if res is not None:
            verb = VERBS.get(method, method.lower())
            if "watch" in request.params and verb == "get":
                verb = "watch"
            elif verb == "get" and request.name is None:
                verb = "list"
            plural = f"{res.plural}/{request.subresource}" if request.subresource else res.plural
            self.seen.add((verb, res.group or "", plural or "", request.namespace, request.name))
            if (verb, res.plural, request.subresource) in self.forbidden:
                sub = f"/{request.subresource}" if request.subresource else ""
                return status(403, "Forbidden", f'{res.plural}{sub} "{request.name}" is forbidden: User '
                              f'"system:serviceaccount:autoscaler:autoscaler" cannot {verb} resource '
                              f'"{res.plural}{sub}" in API group "{res.group}" in the namespace "{request.namespace}"')
            if request.subresource == "scale" and res.plural in self.scalable:
                return await self._scale(request, method)
            if method in ("POST", "PUT", "PATCH") and (bad := bad_micro_time(str(res.plural), request.data)):
                return status(400, "BadRequest", bad)
            if method == "PUT" and request.name is not None and request.subresource is None:
                return await self._replace(request)
            if method in ("POST", "PATCH") and isinstance(request.data, dict):
                async with self._lock:
                    meta = request.data.setdefault("metadata", {})
                    if method == "POST" and not meta.get("name") and meta.get("generateName"):
                        meta["name"] = f"{meta['generateName']}{next(self.versions):x}"
                    if method == "POST":  # server-set, whatever the client sent
                        meta["uid"] = str(uuid.uuid4())
                        meta["creationTimestamp"] = datetime.datetime.now(datetime.UTC).strftime(
                            "%Y-%m-%dT%H:%M:%SZ")
                        meta["generation"] = 1
                    meta["resourceVersion"] = str(next(self.versions))
                    self.writes.append((method, res.plural, request.namespace, request.name, request.data,
                                        request.headers.get("User-Agent", "")))
        return await super()._handle(request)

    async def _serve_list(self, request: kmock.Request) -> Any:
        """kmock's list, filtered by ``labelSelector`` and ``fieldSelector`` as the API server does
        (``selected``; ``_handle`` refused the selectors this emulator cannot evaluate)."""
        listed: Any = await super()._serve_list(request)
        labels = selector_terms(request.params.get("labelSelector") or "") or []
        fields = selector_terms(request.params.get("fieldSelector") or "") or []
        listed["items"] = [o for o in listed["items"] if selected(o, labels, fields)]
        return listed

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
                if self.conflicts:
                    return conflict(str(res.plural), str(request.name))
                body: Any = request.data or {}
                sent = (body.get("metadata") or {}).get("resourceVersion")
                if method == "PUT" and sent is not None and sent != obj.get("metadata", {}).get("resourceVersion"):
                    return conflict(str(res.plural), str(request.name))
                replicas = (body.get("spec") or {}).get("replicas")
                if not isinstance(replicas, int) or replicas < 0:
                    return status(422, "Invalid", f"Scale.spec.replicas: Invalid value: {replicas!r}")
                obj.patch({"spec": {"replicas": replicas}, "metadata": {"resourceVersion": str(next(self.versions))}})
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


class EmulatedCluster:
    """An ``Emulator`` served on 127.0.0.1 from a background thread; ``api`` is a client for it."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.emulator: Emulator | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="kube-emulator", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with Emulator() as emu, kmock.Server(emu) as srv:
            for path, kind in SERVED.items():
                emu.resources[path] = kmock.ResourceInfo(namespaced=True, kind=kind, singular=kind.lower(),
                                                         verbs=VERBS_SERVED)
            self.emulator = emu
            self.url = str(srv.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

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
