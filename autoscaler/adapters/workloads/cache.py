"""Workloads and their pods read from a watch cache instead of a GET per variant per tick
(``kubernetes.watch``, issue 35).

One ``Informer`` per resource the connectors read in the namespace (Deployments, StatefulSets, pods):
a thread LISTs the resource once, then WATCHes from the list's resourceVersion with the official
client's ``kubernetes.watch.Watch`` (``resource_version``, ``timeout_seconds``,
``allow_watch_bookmarks``), applying ADDED / MODIFIED / DELETED to a map of name -> object (the JSON
as served; BOOKMARKs move the resourceVersion only). When a watch ends at its ``timeout_seconds`` it
is opened again from the last resourceVersion; a watch answered 410 Gone (the resourceVersion is
older than the server keeps: an ``ERROR`` event holding a 410 Status, or an HTTP 410) lists again;
any other failure (a dropped connection, a refused one, a 5xx) watches again from the last
resourceVersion after a backoff of ``BACKOFF_S`` doubling up to ``BACKOFF_MAX_S``, back to the first
after a watch delivers an event. A watch that ends less than ``SHORT_WATCH_S`` after it was sent
having delivered no event (a proxy or server that closes watches at once, a request answered as a
list) is such a failure too, not a watch that ended at its timeout: without it the informer would
re-watch in a tight loop. This is what client-go's reflector does (``tools/cache/reflector.go``,
kubernetes v1.31: ``ListAndWatch``, relist on ``IsExpired`` / ``IsGone``, backoff 800 ms to 30 s;
``handleAnyWatch``, "very short watch"), except that after a failure client-go lists again and this
informer watches again from its resourceVersion (a 410 then lists). The
conventions are Kubernetes API concepts, "Efficient detection of changes"
(kubernetes.io/docs/reference/using-api/api-concepts/): a list's resourceVersion is where a watch
resumes, a 410 means list again, resourceVersions are opaque (compared for equality only, here too).

Freshness (what keeps the loop safe): a read raises ``CacheStale`` (one of ``TRANSPORT_ERRORS``, so
every caller treats it as a read that failed: the variant's counts unknown, the loop holds, never
zero replicas) while the informer has not listed yet, or while its watch has been down for more
than ``stale_s``. "Down" runs from the moment a watch ended other than at its own timeout, or
from the end of any watch until the next one's headers arrive (a request that hangs before
answering is down), to the next watch that connects or list that succeeds. A watch that stays
connected but goes silent cannot be told from a quiet resource: its read deadline
(``timeout_s + WATCH_READ_GRACE_S``) bounds that, so data is at most that plus ``stale_s`` old.

Scope (issue 35, "memory per daemon"): an informer may keep only part of its resource (``Scope``:
objects by name, or objects carrying every label of one of a set of selectors); events and listed
objects outside it are not stored, so a daemon holds the objects of the services it may lead, not
the namespace's. Narrowing drops what falls outside at once. Widening cannot be served from the watch
(it delivered nothing of the new part while it was outside), so it needs a list (``fill``, as an
informer does on restart): until one that began after the widening has replaced the map, a read of
the new part (a name, or a selection no filled selector covers) raises ``CacheStale``, never
answers "absent" or "no pods". A list replaces the map under the lock and bumps a generation: the
watch in progress is closed (its socket shut for reading, ``cut``) and any event it still delivers is ignored,
and the next watch resumes from the list's resourceVersion, so nothing older than the list is
applied over it. A scope that keeps nothing (a daemon that leads no shard: no names, no selectors)
is neither listed nor watched: the thread waits until a ``fill`` has listed a wider scope and watches
from that list, so a follower is sent none of the namespace's objects or events.

Selectors sent to the server (issue 35, a takeover's list): a scope by selectors is listed with
``labelSelector`` (``label_queries``): one set-based ``app in (a,b,...)`` when the selectors differ in
one key's value, else one list per selector (up to ``MAX_SELECTOR_LISTS``), else the namespace as
before; each list holds exactly the objects the scope keeps, so the server sends the shard's pods, not
the namespace's (the client still checks ``Scope.keeps``). With several lists the watch resumes from
the first one's resourceVersion (the oldest), so it may replay events older than a later list's
objects; events of one object come in order, so the map converges to the newest. The watch carries the
selector when there is one (the server then sends only its events, and an object relabelled out of it
as DELETED, one relabelled into it as ADDED: the API server's watch cache does that,
``cacheWatcher.convertToWatchEvent``, kubernetes v1.31 ``staging/src/k8s.io/apiserver/pkg/storage/cacher/
cache_watcher.go``, and so does the emulated API server, ``faults.kubeapi.as_watched``); with several it
watches the namespace and keeps the scope's part (a MODIFIED of an object it no longer keeps drops it).

Writes: after a write the connector tells the informer what it wrote (``wrote``: the write's
resourceVersion from its response and the fields it set). Reads of that object show the write until
the watch delivers the event of that same resourceVersion (events of one object arrive in order, so
anything before it is older than the write), the object is deleted, or a list that began after the
write replaces the map: the next tick never acts on the state before the write.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from autoscaler.adapters.workloads.base import CacheStale, describe

log = logging.getLogger(__name__)

BACKOFF_S = 0.8
"""First wait before watching again after a failure, doubled per failure (client-go reflector's
``NewExponentialBackoffManager(800ms, 30s, ...)``, kubernetes v1.31 ``tools/cache/reflector.go``)."""
BACKOFF_MAX_S = 30.0
"""Longest wait between tries (the same)."""
CONNECT_TIMEOUT_S = 10.0
"""Connect deadline of a watch request, seconds (its read deadline is ``timeout_s + WATCH_READ_GRACE_S``)."""
LIST_PAGE = 500
"""Objects per page of a list (``limit``, then ``continue``: Kubernetes API concepts, "Retrieving large
results sets in chunks"; 500 is client-go's pager's ``defaultPageSize``, kubernetes v1.31
``tools/pager/pager.go``): a list holds one page's text and parse at a time, not the namespace's, so a
daemon keeping a tenth of 10,500 pods never holds the other nine tenths, even while it lists."""
MAX_SELECTOR_LISTS = 16
"""Most lists one list of a scope may take as one per workload selector (``label_queries``); past it
the namespace is listed whole. Chosen, not measured: each list is one more round trip, and 16 is
a handful of ticks' worth of the daemon's other API calls."""
MAX_SELECTOR_CHARS = 4000
"""Longest ``labelSelector`` one list sends; a longer set is cut into several ``in`` selectors. So the
request line stays under 8 KiB, nginx's default ``large_client_header_buffers`` (4 8k), which a proxy
before the API server may have; the API server's own bound (Go net/http ``DefaultMaxHeaderBytes``,
1 MiB) is far above."""
SHORT_WATCH_S = 1.0
"""A watch that ends sooner than this after it was sent, having delivered no event (an object's ADDED,
MODIFIED or DELETED, or a BOOKMARK; client-go counts every event it can read metadata from), failed:
client-go v1.31 (kubernetes/client-go v0.31.0 ``tools/cache/reflector.go``, ``handleAnyWatch``) returns
"very short watch: ...: Unexpected watch close - watch lasted less than a second and no items
received" when ``watchDuration < 1*time.Second && eventCount == 0``, timed by the reflector's clock from
just before the request is sent, and the reflector backs off before its next try."""
WATCH_READ_GRACE_S = 5.0
"""How long past its ``timeoutSeconds`` a watch may stay silent before the client gives it up."""


def cut(resp: Any) -> None:
    """Make a streaming response's blocked and later reads end now, from another thread: shut its
    connection's socket for reading, what urllib3's ``HTTPResponse.shutdown`` does (``shutdown(SHUT_RD)``;
    added in urllib3 2.3.0, absent at the floor 2.0.2). Nothing once the response has released its
    connection to the pool (``connection`` None): that socket may serve another request by then."""
    conn = getattr(resp, "connection", None)
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):  # closed already: its reads have ended anyway
            sock.shutdown(socket.SHUT_RD)


def merged(obj: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with ``patch``'s fields set, dicts merged key by key (a copy)."""
    out = copy.deepcopy(obj)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """``metadata.labels`` of an object as served, as strings ({} when none)."""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


Selector = frozenset[tuple[str, str]]
"""An equality selector (``matchLabels``) as its (label, value) pairs."""


@dataclass(frozen=True)
class Scope:
    """What an informer keeps (module docstring): the objects named in ``names`` (None: any name) and
    carrying every pair of at least one of ``selectors`` (None: any labels). ``Scope()`` keeps all."""

    names: frozenset[str] | None = None
    selectors: frozenset[Selector] | None = None
    _by_pair: dict[tuple[str, str], list[Selector]] = field(default_factory=dict, init=False, compare=False,
                                                            repr=False)
    """Each selector under its least pair: an object is checked against the selectors of its own labels."""

    def __post_init__(self) -> None:
        for sel in self.selectors or ():
            self._by_pair.setdefault(min(sel) if sel else ("", ""), []).append(sel)

    def keeps(self, name: str, obj: Mapping[str, Any] | None) -> bool:
        """Whether ``obj`` (named ``name``) is inside."""
        if self.names is not None and name not in self.names:
            return False
        if self.selectors is None:
            return True
        pairs = set(labels_of(obj).items())
        if frozenset() in self.selectors:  # an empty selector selects every object
            return True
        return any(sel <= pairs for pair in pairs for sel in self._by_pair.get(pair, ()))

    def has_name(self, name: str) -> bool:
        """Whether every object named ``name`` is inside."""
        return self.selectors is None and (self.names is None or name in self.names)

    def has_selection(self, labels: Mapping[str, str]) -> bool:
        """Whether every object carrying all of ``labels`` is inside (some selector is part of them)."""
        if self.names is not None:
            return False
        if self.selectors is None:
            return True
        pairs = frozenset((str(k), str(v)) for k, v in labels.items())
        return pairs in self.selectors or any(sel <= pairs for sel in self.selectors)

    def keeps_nothing(self) -> bool:
        """Whether no object can be inside (no name, or no selector: ``Scope(selectors=frozenset())``)."""
        return self.names == frozenset() or self.selectors == frozenset()

    def within(self, other: Scope) -> bool:
        """Whether everything inside this scope is inside ``other`` (by its names and selectors as given)."""
        def part(mine: frozenset[Any] | None, theirs: frozenset[Any] | None) -> bool:
            return theirs is None or (mine is not None and mine <= theirs)
        return part(self.names, other.names) and part(self.selectors, other.selectors)

    def meet(self, other: Scope) -> Scope:
        """The part inside both (names and selectors intersected as sets: what a read may rely on)."""
        def part(a: frozenset[Any] | None, b: frozenset[Any] | None) -> frozenset[Any] | None:
            return b if a is None else a if b is None else a & b
        return Scope(part(self.names, other.names), part(self.selectors, other.selectors))


def _metadata(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``metadata`` of a watch event's object as served, None when it has none (then the event is
    neither applied nor counted, as client-go's ``meta.Accessor`` failing skips it)."""
    obj = event.get("raw_object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else None


def _equality(sel: Selector) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(sel))


def label_queries(scope: Scope, most: int = MAX_SELECTOR_LISTS,
                  max_chars: int = MAX_SELECTOR_CHARS) -> list[str] | None:
    """The ``labelSelector``s whose lists together hold exactly the objects ``scope``'s selectors keep,
    so the API server sends those and not the namespace's (Kubernetes docs, "Labels and Selectors",
    kubernetes.io/docs/concepts/overview/working-with-objects/labels/, v1.31: ``,`` is AND, ``in`` a
    set of values): one set-based ``k in (v1,v2,...),a=x,...`` when every selector has the same keys
    and they differ in one key only (its values; cut into several where one would be longer than
    ``max_chars``), else one equality selector per selector when there
    are at most ``most``; None (list the namespace) past that, for a scope by names, one that keeps
    everything, or none (an empty scope lists nothing it would keep, but the list also gives the watch
    its resourceVersion).
    """
    sels = scope.selectors
    if scope.names is not None or not sels or frozenset() in sels:
        return None
    if len(sels) == 1:
        return [_equality(next(iter(sels)))]
    keys = {frozenset(k for k, _ in sel) for sel in sels}
    if len(keys) == 1:
        maps = [dict(sel) for sel in sels]
        varying = [k for k in next(iter(keys)) if len({m[k] for m in maps}) > 1]
        values = sorted({m[varying[0]] for m in maps}) if len(varying) == 1 else []
        if values and all(values):  # an empty value has no place in a set (``k in (,a)``)
            rest = ",".join(f"{k}={v}" for k, v in sorted(maps[0].items()) if k != varying[0])

            def query(vals: list[str]) -> str:
                return f"{varying[0]} in ({','.join(vals)})" + (f",{rest}" if rest else "")
            out: list[str] = []
            cut: list[str] = []
            for v in values:
                if cut and len(query([*cut, v])) > max_chars:
                    out.append(query(cut))
                    cut = []
                cut.append(v)
            out.append(query(cut))
            if len(out) <= most:
                return out
    if len(sels) <= most:
        return sorted(_equality(sel) for sel in sels)
    return None


class Informer:
    """A watch cache of one resource in one namespace (module docstring).

    Args:
        list_fn: the client's ``list_namespaced_<resource>`` (``AppsV1Api.list_namespaced_deployment``).
        namespace: where.
        what: the resource as messages name it (``deployments llm``).
        stale_s: how long a watch may stay down before reads raise ``CacheStale``, seconds.
        timeout_s: each watch's ``timeoutSeconds`` (the server ends it then; it is opened again).
        clock: monotonic seconds.
        backoff_s, backoff_max_s: the first and the longest wait between failed tries.
        page: objects per page of a list (``LIST_PAGE``).
    """

    def __init__(self, list_fn: Callable[..., Any], namespace: str, what: str, stale_s: float, timeout_s: int,
                 clock: Callable[[], float] = time.monotonic, backoff_s: float = BACKOFF_S,
                 backoff_max_s: float = BACKOFF_MAX_S, page: int = LIST_PAGE) -> None:
        self.page = page
        self.max_lists = MAX_SELECTOR_LISTS
        """Most lists by workload selector a list may take (``label_queries``)."""
        self.list_fn = list_fn
        self.namespace = namespace
        self.what = what
        self.stale_s = stale_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.objects: dict[str, dict[str, Any]] = {}
        self.overlay: dict[str, tuple[str, Mapping[str, Any], float]] = {}
        """name -> (resourceVersion of our write, the fields it set, when) until the watch shows it."""
        self._by_label: dict[tuple[str, str], set[str]] = {}
        """(label, value) -> the names of the objects carrying it: ``select`` reads the objects of its
        labels, not every object (a scan of 10,500 pods for each of 1,500 variants was the tick's
        largest CPU cost at 100 services, issue 35; client-go's ``Indexer`` does the same)."""
        self._seq: dict[str, int] = {}
        """name -> its place in ``objects`` (insertion order), so a selection keeps the scan's order."""
        self._next = 0
        self.resource_version: str | None = None
        self.synced = False
        self.down_since: float | None = None
        """When the watch went down (``clock``), None while it is connected."""
        self.lists = 0
        """LISTs that succeeded (the first, one per 410, one per ``fill``; a scope that keeps nothing sends
        none and counts none)."""
        self.watches = 0
        """Watch requests that connected."""
        self.expired = 0
        """Watches answered 410 Gone."""
        self.scope = Scope()
        """What is kept (module docstring)."""
        self.filled = Scope()
        """What the cache holds in full: what the last list covered (the scope when it began, met with
        the scope when it ended), less what a narrowing dropped since. A read is answered when both
        this and ``scope`` cover it."""
        self.generation = 0
        """Lists so far: a watch begun before the last list applies nothing more."""
        self._stream_gen = -1
        """The generation the thread's watch in progress began at."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._resp: Any = None
        """The response of the watch in progress once its headers came (``_connected``), None between
        watches: what ``fill`` and ``stop`` cut. Kept here, not read from the client's ``Watch``, which
        holds it (``Watch._resp``) only from kubernetes 36.0.0 on."""
        self._thread: threading.Thread | None = None
        self._listed_once = threading.Event()
        self._wake = threading.Event()
        """Set by ``fill`` and ``stop``: the thread, idle while the scope keeps nothing, goes on."""

    # ------------------------------------------------------------------ reads
    def _fresh(self) -> None:
        if not self.synced:
            raise CacheStale(f"watch cache of {self.what}: not listed yet")
        down = self.down_since
        if down is not None and self.clock() - down > self.stale_s:
            raise CacheStale(f"watch cache of {self.what}: watch down for {self.clock() - down:.0f} s "
                             f"(kubernetes.watch_stale_s {self.stale_s:g})")

    def _view(self, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        over = self.overlay.get(name)
        if over is None:
            return obj
        rv, patch, _ = over
        return merged(obj, {**patch, "metadata": {"resourceVersion": rv}})

    def get(self, name: str) -> dict[str, Any] | None:
        """The object ``name`` as last seen (with our write laid over it), None when absent.

        Raises:
            CacheStale: not listed yet, or the watch down for longer than ``stale_s``.
        """
        with self._lock:
            self._fresh()
            if not (self.scope.has_name(name) and self.filled.has_name(name)):
                raise CacheStale(f"watch cache of {self.what}: {name} is {self._outside(self.scope.has_name(name))}")
            obj = self.objects.get(name)
            return None if obj is None else self._view(name, obj)

    def select(self, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The objects carrying every label of ``labels``.

        Raises:
            CacheStale: as ``get``.
        """
        with self._lock:
            self._fresh()
            if not (self.scope.has_selection(labels) and self.filled.has_selection(labels)):
                what = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
                raise CacheStale(f"watch cache of {self.what}: the selection {what} is "
                                 f"{self._outside(self.scope.has_selection(labels))}")
            if not labels:
                return [self._view(name, obj) for name, obj in self.objects.items()]
            sets = sorted((self._by_label.get((k, v), set()) for k, v in labels.items()), key=len)
            names = set(sets[0]).intersection(*sets[1:])
            return [self._view(name, self.objects[name]) for name in sorted(names, key=self._seq.__getitem__)]

    @staticmethod
    def _outside(kept: bool) -> str:
        return "not listed since it was added to the cache's scope" if kept else "outside the cache's scope"

    def _index(self, name: str, obj: Mapping[str, Any] | None, add: bool) -> None:
        """Add ``name`` under (or remove it from) each of ``obj``'s labels (under the lock)."""
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        for k, v in labels.items():
            key = (str(k), str(v))
            if add:
                self._by_label.setdefault(key, set()).add(name)
            else:
                names = self._by_label.get(key)
                if names is not None:
                    names.discard(name)
                    if not names:
                        del self._by_label[key]

    def _put(self, name: str, obj: dict[str, Any]) -> None:
        """``objects[name] = obj`` with the label index and the order kept (under the lock)."""
        old = self.objects.get(name)
        if old is not None:
            self._index(name, old, add=False)
        else:
            self._seq[name] = self._next
            self._next += 1
        self.objects[name] = obj
        self._index(name, obj, add=True)

    def _drop(self, name: str) -> None:
        """Remove ``name`` from ``objects``, the index and the order (under the lock)."""
        old = self.objects.pop(name, None)
        if old is not None:
            self._index(name, old, add=False)
            self._seq.pop(name, None)

    def wrote(self, name: str, resource_version: str | None, patch: Mapping[str, Any]) -> None:
        """Our write of ``patch`` to ``name`` was answered with ``resource_version`` (module docstring)."""
        if resource_version is None:
            return
        with self._lock:
            self.overlay[name] = (resource_version, patch, self.clock())

    # ------------------------------------------------------------------ scope
    def rescope(self, scope: Scope) -> bool:
        """Keep ``scope`` from now on: objects outside it are dropped at once; whether it reaches past
        what the last list covered (then reads of that part raise ``CacheStale`` until ``fill``)."""
        with self._lock:
            self.scope = scope
            for name in [n for n, o in self.objects.items() if not scope.keeps(n, o)]:
                self._drop(name)
                self.overlay.pop(name, None)
            self.filled = self.filled.meet(scope)  # what was dropped must be listed again to be read
            return not scope.within(self.filled)

    def fill(self) -> None:
        """List now, in the caller's thread, and have the watch resume from that list (module docstring).

        Raises:
            ApiException, urllib3.exceptions.HTTPError, OSError, ValueError: the list failed (the map,
                and what reads may rely on, are as before).
        """
        self._list()
        self._wake.set()
        with self._lock:
            resp = self._resp if self._stream_gen != self.generation else None
        if resp is not None:
            cut(resp)

    def match_labels(self) -> set[Selector]:
        """The ``spec.selector.matchLabels`` of the objects held (workloads' pod selectors; empty ones left out)."""
        with self._lock:
            specs = [o.get("spec") for o in self.objects.values()]
        out: set[Selector] = set()
        for spec in specs:
            labels = ((spec if isinstance(spec, dict) else {}).get("selector") or {}).get("matchLabels")
            if isinstance(labels, dict) and labels:
                out.add(frozenset((str(k), str(v)) for k, v in labels.items()))
        return out

    # ------------------------------------------------------------------ the thread
    def start(self) -> Informer:
        """List and watch in a daemon thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch {self.what}", daemon=True)
            self._thread.start()
        return self

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the first list; whether it came."""
        return self._listed_once.wait(timeout_s)

    def stop(self) -> None:
        """End the thread (the watch in progress is closed)."""
        self._stop.set()
        self._wake.set()
        w, resp = self._watch, self._resp
        if w is not None:
            w.stop()
        if resp is not None:
            cut(resp)

    def _went_down(self) -> None:
        with self._lock:
            if self.down_since is None:
                self.down_since = self.clock()

    def _list(self) -> None:
        """List in pages of ``page`` (module docstring), keeping what the scope keeps, and replace the map."""
        began = self.clock()
        with self._lock:
            asked = self.scope
        kept: dict[str, dict[str, Any]] = {}
        first: str | None = None
        found = label_queries(asked, self.max_lists)
        queries: list[str | None] = [] if asked.keeps_nothing() else [None] if found is None else list(found)
        for query in queries:
            token: str | None = None
            version: str | None = None
            while True:
                more: dict[str, Any] = {"_continue": token} if token else {}
                if query is not None:
                    more["label_selector"] = query
                resp = self.list_fn(self.namespace, _preload_content=False, limit=self.page, **more)
                try:
                    doc = json.loads(resp.data)
                finally:
                    resp.release_conn()
                meta = doc.get("metadata") or {}
                version = str(meta.get("resourceVersion") or "") or None
                for o in doc.get("items") or []:
                    name = str(o["metadata"]["name"])
                    if asked.keeps(name, o):
                        kept[name] = o
                token = meta.get("continue") or None
                del doc, resp  # a page's text and parse: only the objects kept stay
                if token is None:
                    break
            if first is None:
                first = version  # the oldest of the lists: the watch replays what came after it
        version = first
        with self._lock:
            self.objects, self._by_label, self._seq = {}, {}, {}
            for name, o in kept.items():
                if self.scope is asked or self.scope.keeps(name, o):  # narrowed meanwhile
                    self._put(name, o)
            self.filled = asked.meet(self.scope)
            self.generation += 1
            self.overlay = {k: v for k, v in self.overlay.items() if v[2] > began}  # the list holds older writes
            self.resource_version = version
            self.synced = True
            self.down_since = None
            self.lists += 1 if queries else 0
        self._listed_once.set()

    def _connected(self, *args: Any, **kwargs: Any) -> Any:
        """``list_fn`` for ``Watch.stream``: the watch is up once its headers say 2xx."""
        resp = self.list_fn(*args, **kwargs)
        if 200 <= int(getattr(resp, "status", 0) or 0) < 300:
            with self._lock:
                if self._stream_gen != self.generation:  # a list came meanwhile: resume from it instead
                    cut(resp)
                    return resp
                self._resp = resp
                self.down_since = None
                self.watches += 1
        return resp

    def _apply(self, event: dict[str, Any], since: int | None = None) -> bool:
        """Apply one event of a watch begun at generation ``since``; False (nothing applied) once a list
        has come since then (None: apply)."""
        kind = event.get("type")
        obj = event.get("raw_object")
        meta = _metadata(event)
        if meta is None:
            return True
        rv = meta.get("resourceVersion")
        with self._lock:
            if since is not None and since != self.generation:
                return False
            if rv is not None:
                self.resource_version = str(rv)
            if kind == "BOOKMARK":
                return True
            name = str(meta.get("name"))
            assert isinstance(obj, dict)
            if kind == "DELETED" or not self.scope.keeps(name, obj):  # outside: not stored (or relabelled out)
                self._drop(name)
                self.overlay.pop(name, None)
                return True
            self._put(name, obj)
            over = self.overlay.get(name)
            if over is not None and over[0] == rv:  # the watch has caught up with our write
                del self.overlay[name]
        return True

    def _superseded(self) -> bool:
        """Whether a list came since the watch in progress began (``fill`` closed it)."""
        with self._lock:
            return self._stream_gen != self.generation

    def _run(self) -> None:
        """The thread: list, then watch again and again (module docstring), until ``stop``."""
        delay = self.backoff_s
        relist = True
        while not self._stop.is_set():
            try:
                if relist:
                    self._list()
                    relist = False
                with self._lock:
                    idle, unversioned = self.scope.keeps_nothing(), self.resource_version is None
                if idle:  # nothing to watch: wait for a fill (or look again after a watch's length)
                    self._wake.wait(self.timeout_s)
                    self._wake.clear()
                    continue
                if unversioned:  # widened since the empty list, and no fill listed it: list here
                    relist = True
                    continue
                self._went_down()  # until the next watch's headers arrive
                w = watch.Watch(return_type="object")
                with self._lock:
                    self._watch, self._stream_gen, since = w, self.generation, self.resource_version
                    gen = self.generation
                    queries = label_queries(self.scope, self.max_lists)
                # one selector: the server sends only its events; several: the namespace's, kept by scope
                only = {"label_selector": queries[0]} if queries is not None and len(queries) == 1 else {}
                events = 0
                sent = self.clock()  # before the request, as client-go: a proxy may hold headers back
                try:
                    for event in w.stream(self._connected, self.namespace, resource_version=since, **only,
                                          timeout_seconds=self.timeout_s, allow_watch_bookmarks=True,
                                          _request_timeout=(CONNECT_TIMEOUT_S,
                                                            self.timeout_s + WATCH_READ_GRACE_S)):
                        if not self._apply(event, gen):
                            break  # a list came (``fill``): watch again from its resourceVersion
                        if _metadata(event) is not None:  # an event client-go counts (BOOKMARKs too)
                            events += 1
                            delay = self.backoff_s
                        if self._stop.is_set():
                            break
                finally:
                    with self._lock:
                        self._resp = None  # its connection goes back to the pool: never cut it after
                lasted = self.clock() - sent
                # a watch that delivered an event, or ran a second (or its whole timeoutSeconds, were that
                # shorter), ended normally: watch again at once. A short one stopped by us or by a list's
                # ``cut`` is no failure either: the checks below see to it.
                if events or lasted >= min(SHORT_WATCH_S, self.timeout_s):
                    continue
                why = (f"very short watch: closed {lasted:.3g} s after it was sent with no event "
                       f"(under {SHORT_WATCH_S:g} s: a server or proxy ending watches at once?)")
            except ApiException as exc:
                if exc.status == 410:  # too old a resourceVersion: list again, at once
                    self.expired += 1
                    relist = True
                    log.info("watch cache of %s: %s; listing again", self.what, describe(exc))
                    continue
                why = describe(exc)
            except (urllib3.exceptions.HTTPError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                why = describe(exc)
            if self._stop.is_set():
                break
            if self._superseded():  # ``fill`` closed the watch: not a failure, watch again from its list
                continue  # (a short watch too: the list's socket shutdown ended it)
            self._went_down()
            log.warning("watch cache of %s: %s; trying again in %.1f s", self.what, why, delay)
            self._stop.wait(delay)
            delay = min(2 * delay, self.backoff_max_s)


CACHED = {"deployments", "statefulsets"}
"""Plurals of the workloads read from the cache (apps/v1, ``apps.DeploymentConnector`` and
``StatefulSetConnector``); their pods are read from a cache of the namespace's pods. Other kinds
(LeaderWorkerSet, InferenceService, custom resources) are read with a GET per tick as before."""


class WorkloadCache:
    """The informers of one namespace: one per plural of ``plurals`` that is in ``CACHED``, and the pods.

    Args:
        api: a client (``adapters.kubernetes.connect``).
        namespace: the workloads' namespace.
        plurals: the plurals of the workloads the connectors read.
        stale_s, timeout_s, clock, backoff_s, backoff_max_s: as ``Informer``'s.
    """

    def __init__(self, api: Any, namespace: str, plurals: set[str], stale_s: float, timeout_s: int,
                 clock: Callable[[], float] = time.monotonic, backoff_s: float = BACKOFF_S,
                 backoff_max_s: float = BACKOFF_MAX_S) -> None:
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        fns = {"deployments": apps.list_namespaced_deployment, "statefulsets": apps.list_namespaced_stateful_set,
               "pods": core.list_namespaced_pod}
        wanted = (set(plurals) & CACHED) | ({"pods"} if set(plurals) & CACHED else set())
        self.informers = {p: Informer(fns[p], namespace, f"{p} {namespace}", stale_s, timeout_s, clock, backoff_s,
                                      backoff_max_s) for p in sorted(wanted)}

    def informer(self, plural: str) -> Informer | None:
        """The informer of ``plural``, None when it is not cached."""
        return self.informers.get(plural)

    def cover(self, workloads: Mapping[str, set[str]]) -> None:
        """Keep only ``workloads`` (plural -> names; a cached plural absent keeps none of its kind) and
        the pods their selectors (``spec.selector.matchLabels``) select: objects outside are dropped
        now, and a part not held yet is listed now (``Informer.fill``), the workloads before the pods,
        whose scope is read from them. A workload not in the cache (not created yet, or not listed)
        adds no selector: its pods' reads raise ``CacheStale`` until a later call lists them. Called
        with the same workloads, it lists nothing.

        Raises:
            ApiException, urllib3.exceptions.HTTPError, OSError, ValueError: a list failed (its part
                stays unread: reads of it raise ``CacheStale``); the informers listed before it keep
                their new scope.
        """
        selectors: set[Selector] = set()
        for plural, inf in self.informers.items():
            if plural == "pods":
                continue
            if inf.rescope(Scope(names=frozenset(workloads.get(plural, ())))):
                inf.fill()
            selectors |= inf.match_labels()
        pods = self.informers.get("pods")
        if pods is not None and pods.rescope(Scope(selectors=frozenset(selectors))):
            pods.fill()

    def held(self) -> int:
        """Objects held, every informer's together."""
        return sum(len(inf.objects) for inf in self.informers.values())

    def start(self) -> WorkloadCache:
        """Start every informer's thread."""
        for inf in self.informers.values():
            inf.start()
        return self

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` in all for every informer's first list; whether all came."""
        end = time.monotonic() + timeout_s
        return all(inf.wait_synced(max(0.0, end - time.monotonic())) for inf in self.informers.values())

    def stop(self) -> None:
        """Stop every informer."""
        for inf in self.informers.values():
            inf.stop()
