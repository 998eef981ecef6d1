"""A live Prometheus as the loop's ``MetricsSource`` (prometheus-api-client), with per-pod validity checks.

Which names to read: ``prometheus.query_set``, or with ``auto`` (the default) each service's set as
detected from its pods' series (``promql.MARKERS``, one query per service until found, again when a
tick finds none of its pods valid), logged when chosen.

Each ``observe`` runs two rounds of instant queries (concurrently, ``max_concurrency`` at a time):

1. per variant (its selector is the service matchers AND the variant's pod matchers): the age of
   each pod's newest ``running`` sample (``time() - timestamp(...)``), its running, waiting and KV
   gauges, ``max_over_time`` of KV usage and waiting over the window, its prefix-cache counters
   (optional: a failed query is a warning, the counters unknown), and the Deployment's replicas
   from kube-state-metrics (``autoscaler.promql``);
2. every signal of the query set for the service and for each variant, restricted to the *valid*
   pods with ``<pod_label>=~"a|b"``. A pod is valid when its newest sample is at most
   ``staleness_s`` old and its gauges are sane (finite, >= 0, KV usage <= 1); an invalid pod is
   left out with a warning, so one pod with missing or broken metrics never blocks the others.

A failed query (connection refused, timeout, HTTP error, malformed answer) becomes one line in
``ServiceObservation.errors`` and its signal is None: unknown, never zero. A NaN answer (a quantile
or a ratio over zero traffic, 0/0) is None without an error: the request counters tell idleness.

Replica counts: ``kube_deployment_spec_replicas`` is ready + starting and
``kube_deployment_status_replicas_ready`` the ready part. Without kube-state-metrics the fresh pods
are counted as ready and nothing as starting: pods that are still loading weights export no
metrics, so starting replicas cannot be seen from Prometheus alone. Every answer that came back
is used even when another query failed (kube-state-metrics still counts the replicas when the vLLM
queries fail); when the needed ones failed, the last known counts are reported, and with none the
counts are unknown (``VariantObservation.counts_known`` False: the loop holds), never zero.

Time: ``speed`` > 1 reads a source that runs that many times faster than real time (the simulator
served with ``autoscaler simulate --serve-metrics --speed``): windows shrink by ``speed`` (a
300-s window of the source's clock is 300/``speed`` wall seconds), and per-second rates, measured
per wall second, are divided by it, so signals stay in the source's own seconds. A source that can
fall behind its nominal ``speed`` (the fault suite's simulated fleet on a loaded machine) can hand a
``measured_speed``: the source's seconds per wall second over the last wall window, asked once an
observation; the rates of that observation are divided by it instead (the windows keep their wall
length), by ``speed`` where it answers None (not measurable), and are unknown where it answers 0
(the source's clock stood still over the window: no rate per its second, never a rate of 0).
The gateway's per-priority signals are read over ``GATEWAY_WINDOW_S`` of the source's clock, or the
window if shorter, each turned into wall seconds the same way (60/``speed``: 3 wall s at 20x).

A whole ``observe`` is bounded, not only each query: with ``deadline_s``, a query not answered
that many (wall) seconds after the observation began is failed ("timed out: no answer within the
observation's deadline") and the rest of the tick goes on without it, so a Prometheus that accepts
connections and never answers costs one deadline per tick (the loop holds on unknown signals),
not one ``timeout_s`` per round of queries per ``max_concurrency``. The queries left running are
abandoned; each still ends at its own ``timeout_s``.

Prefill/decode pools (``Service.roles``): each pool variant is read as a variant is (its inventory, its
Deployment's replicas, its signals over its valid pods), its default pod matchers adding the role's
label matcher, by default llm-d's ``llm_d_ai_role="prefill"`` or ``"decode"`` (``promql.ROLE_LABEL``;
``prometheus.role_labels`` picks another convention, ``promql.ROLE_LABELLINGS``: Dynamo's
``dynamo_component="prefill"`` or ``"backend"``, say); each pool's signals are read
over its variants' valid pods with the role's matcher (the same query templates), and reported
as ``ServiceObservation.pools``. The service-wide pod signals are read over the valid pods that finish
the users' requests, the aggregated and decode pods: the prefill pool's pods are left out of the pod
names and the query adds ``llm_d_ai_role!="prefill"`` (an aggregated pod, with no role label, matches;
Dynamo's: ``dynamo_component!="prefill"``, an aggregated worker's component being ``backend``),
so a remotely prefilled request, which its prefill pod also serves and counts as a one-token request
(vLLM's ``NixlConnector``; ``autoscaler.adapters.simulator``), counts once in the request rate, the
completions, the token rates and the latencies, as the simulator's source reads them. The gauges
(``promql.GAUGE_SIGNALS``: running, waiting, KV usage) are read over every valid pod, since a request is
in flight on one pod at a time. A service without pools sends its queries unchanged.
``ServiceObservation.pods`` keeps every valid pod.

Service-wide, two more queries: the gateway's ``arrival_rate_rps`` (``autoscaler.promql``; optional,
a failure is a warning) and how far back the service's samples go (``history_s``: ``time()`` minus
the oldest sample of its pods' ``running`` gauge in the window, a subquery at the window / 30), so
the loop decides nothing before Prometheus holds a whole window.

Batching (``prometheus.batch``, on by default; a source of one service is never batched, so it
sends the queries above unchanged): a tick over N services sends one query per *key* (the
detection query, each per-pod inventory query, each signal, each gateway query, the history), not
one per service and variant. Every scope's query (a service's or a variant's, over its valid pods)
becomes a branch ``label_replace(<query>, "__autoscaler_scope", "<i>", "", "")`` of one ``or``
(``union``), and the answer is split back by that label (``split``), the label removed. Each branch
is evaluated as the query alone would be, so the observations are the per-scope ones: the same
values, unknowns, warnings and errors (tests/integration/prometheus/test_batched_queries.py
compares the two paths on one real Prometheus). With ``prometheus.aggregate`` (the default) the
pod-scoped signals are read instead from one per-pod aggregation per term of their templates, each
scope summed here from its pods' groups (``adapters.prometheus_pods``; ``_Batch.submit_pods``), so
Prometheus evaluates one selector per term rather than one per scope; a template or matcher that
cannot be read so is sent as a branch, as before. What batching cannot keep apart, it sends apart:
a batched query Prometheus refuses as a whole (HTTP 400 ``bad_data``, 422 ``execution``, e.g. one
service's series making a ``/`` many-to-many; 413/414/431 from a proxy: ``REJECTED``) is sent again
branch by branch, so one service's bad series leaves the others' signals known. A transport failure
(connection, timeout, 5xx) or the deadline fails every branch of the query, as it would every
query sent apart at that moment. The queries per tick are O(keys), ~36, whatever N (docs/benchmarks.md).
A union still has Prometheus evaluate one selector per branch (O(N) work on the server): the
per-pod aggregation above takes the pod-scoped signals off it; the per-pod inventory and the
gateway queries remain unions.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, InvalidStateError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from autoscaler import urls
from autoscaler.adapters.prometheus_pods import (
    Decomposed,
    Group,
    Matcher,
    Term,
    decompose,
    parse_matchers,
    pods_query,
    scope_value,
)
from autoscaler.config import PrometheusConfig, Service, Variant
from autoscaler.errors import AutoscalerError
from autoscaler.promql import (
    AUTO,
    GATEWAY_TOTALS,
    GATEWAY_WINDOW_S,
    GAUGE_SIGNALS,
    KSM_READY_REPLICAS,
    KSM_SPEC_REPLICAS,
    PRIORITY_QUERIES,
    RATE_SIGNALS,
    SERVICE_SIGNALS,
    QuerySet,
    detect,
    detection_query,
    duration,
    exact_alternation,
    matchers,
    priority_name,
    query_set,
    quote,
    render,
)
from autoscaler.state import (
    PRIORITY_NAMES,
    SIGNALS,
    PodObservation,
    PoolObservation,
    ServiceObservation,
    Signals,
    VariantObservation,
)
from autoscaler.urls import redact
from autoscaler.workload.types import PRIORITIES

log = logging.getLogger(__name__)


def _all_variants(svc: Service) -> list[Variant]:
    """``svc``'s aggregated variants, then its pools' (prefill first)."""
    return svc.variants + [v for _, v in svc.role_variants()]


def service_selector(prom: PrometheusConfig, svc: Service) -> str:
    """Matchers that select ``svc``'s series: its ``prometheus.selectors`` entry, else ``model_name="<model>"``."""
    sel = prom.selectors.get(svc.name)
    return sel.service if sel is not None and sel.service is not None else f"model_name={quote(svc.model)}"


class PrometheusError(AutoscalerError):
    """Prometheus cannot be used at all (unreachable, unreadable credentials); one-line message."""


class QueryRunner(Protocol):
    """Evaluates an instant PromQL query."""

    def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
        """The ``data.result`` instant vector at unix time ``at`` (None: the server's now).

        Raises whatever the transport raises (``requests`` errors, ``PrometheusApiClientException``).
        """
        ...


POST_ABOVE = 4096
"""Queries longer than this (characters) go in a POST form body, not the URL: a batched query over a
hundred services runs to hundreds of kB, and proxies in front of Prometheus refuse long request
lines (nginx's default ``large_client_header_buffers`` is 8 kB). Prometheus v2.42
``web/api/v1/api.go`` reads ``/api/v1/query`` and ``/api/v1/query_range`` parameters from either."""


def post(client: PrometheusConnect, path: str, form: dict[str, str]) -> list[dict[str, Any]]:
    """``data.result`` of a POST of ``form`` to ``path`` (``/api/v1/query``...) with ``client``'s session,
    auth and timeout.

    Raises:
        PrometheusApiClientException: a non-200 answer (the message as ``custom_query``'s, so
            ``describe`` and ``rejected`` read it alike); ``requests`` errors of the transport.
    """
    # prometheus-api-client 0.7 puts the query in the URL even with method POST: its session is reused.
    response = client._session.post(f"{client.url}{path}", data=form, headers=client.headers, auth=client.auth,
                                    timeout=client._timeout)
    if response.status_code != 200:
        raise PrometheusApiClientException(f"HTTP Status Code {response.status_code} ({response.content!r})")
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


class LiveRunner:
    """Instant queries against a ``PrometheusConnect`` client (GET; POST above ``POST_ABOVE``)."""

    def __init__(self, client: PrometheusConnect) -> None:
        self.client = client

    def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
        """See ``QueryRunner.query``."""
        params = None if at is None else {"time": f"{at:.3f}"}
        if len(promql) > POST_ABOVE:
            return post(self.client, "/api/v1/query", {"query": promql, **(params or {})})
        return self.client.custom_query(promql, params=params)


def _secret(path: object, what: str) -> str:
    try:
        with open(str(path)) as f:
            return f.read().strip()
    except OSError as exc:
        raise PrometheusError(f"cannot read prometheus.{what} {path}: {exc.strerror}") from None


def check_url(url: str) -> None:
    """Raise ``PrometheusError`` unless ``url`` is an ``http(s)://HOST[:PORT][/path]`` base URL."""
    try:
        urls.check_url(url)
    except ValueError as exc:
        raise PrometheusError(str(exc)) from None


def connect(prom: PrometheusConfig, url: str) -> PrometheusConnect:
    """A client for ``url`` with the section's auth, TLS and timeout; no HTTP retries (the next
    tick is the retry, and a retry storm would stretch a tick during an outage).

    Raises:
        PrometheusError: a malformed URL, or a credential or CA file cannot be read.
    """
    check_url(url)
    session = requests.Session()
    if prom.ca_file is not None:
        if not prom.ca_file.is_file():
            raise PrometheusError(f"prometheus.ca_file {prom.ca_file}: no such file")
        session.verify = str(prom.ca_file)
    else:
        session.verify = prom.tls_verify
    if not prom.tls_verify:
        import urllib3

        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    headers = None
    if prom.bearer_token_file is not None:
        headers = {"Authorization": f"Bearer {_secret(prom.bearer_token_file, 'bearer_token_file')}"}
    auth = None
    if prom.basic_auth is not None:
        auth = (prom.basic_auth.username, _secret(prom.basic_auth.password_file, "basic_auth.password_file"))
    return PrometheusConnect(url=url.rstrip("/"), headers=headers, auth=auth, session=session,
                             timeout=prom.timeout_s, retry=Retry(total=0))


def describe(exc: BaseException) -> str:
    """One line saying why a query failed (URL credentials masked)."""
    return redact(_describe(exc))


def _describe(exc: BaseException) -> str:
    # Without retries, urllib3 wraps a read timeout in MaxRetryError, which requests raises as ConnectionError.
    if isinstance(exc, requests.Timeout) or "timed out" in str(exc):
        return "timed out"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS error: certificate verification failed or handshake refused"
    if isinstance(exc, requests.ConnectionError):
        m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
        return f"connection failed: {m.group(1).strip()}" if m else "connection failed"
    if isinstance(exc, PrometheusApiClientException):
        m = re.search(r"HTTP Status Code (\d+)", str(exc))
        err = re.search(r'"error":"((?:[^"\\]|\\.)*)"', str(exc))
        code = f"HTTP {m.group(1)}" if m else "HTTP error"
        return f"{code}: {err.group(1)}" if err else code
    if isinstance(exc, (ValueError, KeyError, TypeError, IndexError)):
        return f"malformed response ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"


def check_reachable(client: PrometheusConnect) -> None:
    """Raise ``PrometheusError`` when ``client`` cannot evaluate a trivial query."""
    try:
        client.custom_query("vector(1)")
    except Exception as exc:
        raise PrometheusError(f"cannot query Prometheus at {redact(client.url)}: {describe(exc)}") from None


# Per-pod queries whose failure leaves their fields unknown instead of holding the loop.
OPTIONAL_POD_QUERIES = ("prefix_hits", "prefix_queries")
HISTORY = "history"  # the service-wide query of how far back its samples go
PRIORITY = "priority."  # prefix of the per-priority gateway queries' keys (``PRIORITY_QUERIES``)
TOTAL = "gateway."  # prefix of the service-wide gateway totals' keys (``GATEWAY_TOTALS``)
_FAILED = "failed"
_COUNTED = frozenset({"arrival_rate_rps", "dispatched_rps", "waited", "shed_rps", "queue"})
"""Per-priority gateway signals whose series appear with their first event: one priority absent where
others answer has had none (0); a mean wait has no value without a dispatch."""
DEFAULT_SET = query_set("vllm-0.11")
"""What ``auto`` reads a service with before any of its pods' series tell its server."""
HISTORY_STEPS = 30  # resolution of that subquery: the window over 30
POD_KEY = "pods."  # prefix of the per-pod inventory queries' batch keys


@dataclass
class _Outcome:
    """A query's result, or why it failed."""

    result: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    rejected: bool = False  # Prometheus refused the query itself (``REJECTED``), not the transport


@dataclass
class _Pod:
    name: str
    age_s: float
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    kv: list[float] = field(default_factory=list)
    kv_max: float | None = None
    waiting_max: float | None = None
    prefix_hits: float | None = None
    prefix_queries: float | None = None


@dataclass
class _Plan:
    """One service between the two rounds of queries."""

    svc: Service
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # the optional queries that failed (also in warnings)
    valid: dict[str, list[_Pod]] = field(default_factory=dict)
    counts: dict[str, tuple[int, int] | None] = field(default_factory=dict)
    jobs: dict[str, dict[str, Future[_Outcome]]] = field(default_factory=dict)
    service_jobs: dict[str, Future[_Outcome]] = field(default_factory=dict)
    pods_known: bool = False  # every pod query answered (so no valid pod means none serves)


SCOPE_LABEL = "__autoscaler_scope"
"""Label a batched query sets on each branch's series (``label_replace``), naming the branch. A
``__`` name: Prometheus drops such labels from scraped series (Prometheus v2.42 docs, "Configuration":
labels starting with ``__`` are for internal use), so no series carries one to collide with."""

REJECTED = frozenset({400, 413, 414, 422, 431})
"""HTTP statuses of a query refused as a whole rather than failed on the way: Prometheus v2.42
``web/api/v1/api.go`` answers ``bad_data`` 400 and ``execution`` 422 (e.g. a many-to-many match in one
branch); a server or proxy refusing a long request answers 413, 414 or 431. A batched query so
refused is sent again branch by branch, so one scope's error stays its own."""


def rejected(exc: BaseException) -> bool:
    """Whether ``exc`` is Prometheus (or a proxy) refusing the query itself (``REJECTED``)."""
    if not isinstance(exc, PrometheusApiClientException):
        return False
    m = re.search(r"HTTP Status Code (\d+)", str(exc))
    return m is not None and int(m.group(1)) in REJECTED


def _settle(futures: list[Future[_Outcome]], outcome: _Outcome) -> None:
    """Give every one of ``futures`` ``outcome``; one given up already (past the deadline) is left."""
    for fut in futures:
        with contextlib.suppress(InvalidStateError):
            fut.set_result(outcome)


def split(result: list[dict[str, Any]], n: int) -> list[list[dict[str, Any]]]:
    """A batched answer -> the ``n`` branches' answers, each sample without ``SCOPE_LABEL`` (as the
    branch alone answers), in the answer's order.

    Raises:
        KeyError, ValueError, IndexError, TypeError: a sample without a branch's tag (malformed).
    """
    parts: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    for sample in result:
        metric = sample["metric"]
        i = int(metric[SCOPE_LABEL])
        if not 0 <= i < n:
            raise IndexError(f"branch {i} of {n}")
        parts[i].append({**sample, "metric": {k: v for k, v in metric.items() if k != SCOPE_LABEL}})
    return parts


def union(queries: Sequence[str]) -> str:
    """One PromQL expression answering every one of ``queries``, branch ``i``'s series tagged
    ``SCOPE_LABEL="i"``: ``(label_replace(q0, ...) or label_replace(q1, ...)) or (...)``. ``or`` keeps
    every series of its left side and those of the right whose labels (less ``__name__``) differ, so
    the tags keep every branch's series, and each branch is evaluated as it would be alone. The
    ``or``s nest as a balanced tree: Prometheus v2.42 answered 300 branches in 0.18 s so and in 0.27 s
    as one left-deep chain (one idle 2-core machine; 0.95 s for the 300 queries one after another)."""
    tagged = [f'label_replace({q}, "{SCOPE_LABEL}", "{i}", "", "")' for i, q in enumerate(queries)]

    def tree(lo: int, hi: int) -> str:
        if hi - lo == 1:
            return tagged[lo]
        mid = (lo + hi) // 2
        return f"({tree(lo, mid)}) or ({tree(mid, hi)})"

    return tree(0, len(tagged))


class _Batch:
    """One observation's queries gathered by key and sent as one query per key (``union``).

    ``submit`` returns a future at once; ``flush`` sends what was gathered (one pool task per key).
    A key with one distinct query sends it unchanged; identical queries are sent once. A batched
    query refused as a whole (``REJECTED``) is sent again as its branches, each its own query; any
    other failure (connection, timeout, 5xx, a malformed answer) is every branch's, as it would have
    been for queries sent apart at the same moment.
    """

    def __init__(self, source: PrometheusSource, pool: ThreadPoolExecutor, at: float | None) -> None:
        self.source = source
        self.pool = pool
        self.at = at
        self.pending: dict[str, dict[str, list[Future[_Outcome]]]] = {}  # key -> query -> futures
        self.scoped: list[_Scoped] = []  # read from the per-pod aggregation (``prometheus_pods``)

    def submit(self, key: str, promql: str) -> Future[_Outcome]:
        fut: Future[_Outcome] = Future()
        self.pending.setdefault(key, {}).setdefault(promql, []).append(fut)
        return fut

    def submit_pods(self, key: str, template: str, rest: str, names: list[str], query: str) -> Future[_Outcome] | None:
        """A future of the scope's answer to ``template`` over the pods ``names`` that the matchers ``rest``
        select, read from the per-pod aggregation at ``flush``; None where the template's shape or a
        matcher cannot be read so (``prometheus_pods``): the caller sends ``query`` instead. ``query``
        is the scope's own query, sent (batched) should Prometheus refuse the aggregation."""
        decomposed, parsed = decompose(template), parse_matchers(rest)
        if decomposed is None or parsed is None or not names:
            return None
        fut: Future[_Outcome] = Future()
        self.scoped.append(_Scoped(key, decomposed, parsed, tuple(names), query, fut))
        return fut

    def flush(self) -> None:
        for branches in self.pending.values():
            self.pool.submit(self._send, list(branches.items()))
        self.pending = {}
        if self.scoped:
            self._flush_pods(self.scoped)
            self.scoped = []

    def _flush_pods(self, scoped: list[_Scoped]) -> None:
        """One query per (term, ``sum``/``count``) of every scope's template, over the union of their pods,
        by the pod and every label a scope's matchers name (``prometheus_pods.pods_query``); then one task
        that waits for them (queued after them: it never holds a worker they need) and settles the scopes."""
        pl = self.source.prom.pod_label
        by_labels = sorted({pl} | {m.name for s in scoped for m in s.rest})
        names: dict[Term, set[str]] = {}
        for s in scoped:
            for term in s.decomposed.terms():
                names.setdefault(term, set()).update(s.names)
        queries: dict[tuple[Term, str], str] = {}
        for term, pods in names.items():
            by = [*by_labels, "le"] if term.kind == "quantile" and "le" not in by_labels else by_labels
            queries[(term, "sum")] = pods_query(term, "sum", pl, pods, by, self.source.window_s)
            if term.kind == "avg":
                queries[(term, "count")] = pods_query(term, "count", pl, pods, by, self.source.window_s)
        sent = {q: self.pool.submit(self.source._run, q, self.at) for q in set(queries.values())}
        self.pool.submit(self._settle_pods, scoped, {k: sent[q] for k, q in queries.items()})

    def _settle_pods(self, scoped: list[_Scoped], sent: dict[tuple[Term, str], Future[_Outcome]]) -> None:
        pl = self.source.prom.pod_label
        answers: dict[tuple[Term, str], dict[str, list[Group]]] = {}
        failed: dict[tuple[Term, str], _Outcome] = {}
        for k, fut in sent.items():
            try:
                out = fut.result()
            except CancelledError:  # the observation ended (its deadline): nothing waits on it
                out = _Outcome(error="not sent: the observation ended")
            if out.error is None:
                try:
                    by_pod: dict[str, list[Group]] = {}
                    for sample in out.result:
                        labels = sample["metric"]
                        by_pod.setdefault(labels.get(pl, ""), []).append((labels, _value(sample)))
                    answers[k] = by_pod
                    continue
                except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                    out = _Outcome(error=describe(exc))
            failed[k] = out
        again: dict[str, list[tuple[str, list[Future[_Outcome]]]]] = {}
        for s in scoped:
            bad = [failed[(t, kind)] for t in s.decomposed.terms() for kind in ("sum", "count") if (t, kind) in failed]
            if any(b.rejected for b in bad):  # refused as a whole: the scopes' own queries, batched as before
                again.setdefault(s.key, []).append((s.query, [s.future]))
            elif bad:
                _settle([s.future], bad[0])
            else:
                try:
                    x = scope_value(s.decomposed, answers, s.rest, s.names, pl)
                except Exception as exc:  # raised in a pool task, it reached no one: every scope
                    # after this one waited for the observation's deadline and read as "timed out"
                    _settle([s.future], _Outcome(error=f"per-pod aggregation: {describe(exc)}"))
                    continue
                _settle([s.future], _Outcome([] if x is None else [{"metric": {}, "value": [self.at, repr(x)]}]))
        for branches in again.values():
            self._send(branches)

    def _send(self, branches: list[tuple[str, list[Future[_Outcome]]]]) -> None:
        if len(branches) == 1:
            _settle(branches[0][1], self.source._run(branches[0][0], self.at))
            return
        out = self.source._run(union([q for q, _ in branches]), self.at)
        if out.rejected:  # one branch's error must stay its own: each branch alone
            for branch in branches:
                try:
                    self.pool.submit(self._send, [branch])
                except RuntimeError:  # the observation ended (its deadline): nothing waits on it
                    _settle(branch[1], _Outcome(error="not sent: the observation ended"))
            return
        if out.error is not None:
            parts: list[_Outcome] = [out] * len(branches)
        else:
            try:
                parts = [_Outcome(r) for r in split(out.result, len(branches))]
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                parts = [_Outcome(error=describe(exc))] * len(branches)
        for (_, futures), part in zip(branches, parts, strict=True):
            _settle(futures, part)


@dataclass
class _Scoped:
    """One scope's signal read from the per-pod aggregation (``_Batch.submit_pods``)."""

    key: str
    decomposed: Decomposed
    rest: tuple[Matcher, ...]
    names: tuple[str, ...]
    query: str  # the scope's own query: sent should Prometheus refuse the aggregation
    future: Future[_Outcome]


def _value(sample: dict[str, Any]) -> float:
    return float(sample["value"][1])


def _count(sample: dict[str, Any]) -> int:
    x = _value(sample)
    if not 0 <= x < math.inf:
        raise ValueError(f"replica count {x}")
    return round(x)


class RangeRunner:
    """Answers instant queries at grid times from cached range queries (``autoscaler.backtest``):
    each distinct query is fetched once, from the first grid time that needs it to ``end``.

    Args:
        client: the Prometheus client.
        end: last grid time, unix seconds (integer).
        step: grid step, seconds (integer >= 1).
    """

    def __init__(self, client: PrometheusConnect, end: int, step: int) -> None:
        self.client = client
        self.end = end
        self.step = step
        self.queries = 0
        self._cache: dict[str, tuple[int, list[tuple[dict[str, str], dict[int, str]]]]] = {}
        self._lock = threading.Lock()

    def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
        """The instant vector of ``promql`` at grid time ``at``."""
        if at is None:
            raise ValueError("a backtest query needs a time")
        t = round(at)
        with self._lock:
            cached = self._cache.get(promql)
        if cached is None or t < cached[0]:
            if len(promql) > POST_ABOVE:
                result = post(self.client, "/api/v1/query_range",
                              {"query": promql, "start": str(t), "end": str(self.end), "step": str(self.step)})
            else:
                result = self.client.custom_query_range(
                    promql, datetime.fromtimestamp(t, UTC), datetime.fromtimestamp(self.end, UTC), str(self.step))
            series = [(s["metric"], {round(float(ts)): v for ts, v in s["values"]}) for s in result]
            cached = (t, series)
            with self._lock:
                self._cache[promql] = cached
                self.queries += 1
        return [{"metric": m, "value": [t, values[t]]} for m, values in cached[1] if t in values]



MIN_WINDOW_S = 0.001
"""Shortest wall window a query can hold, seconds: PromQL durations here are whole milliseconds."""

MAX_WINDOW_S = 366 * 86400.0
"""Longest wall window accepted, seconds (a year): a sped-down source whose window outgrows any
retention reads nothing, and Go's duration (int64 nanoseconds) ends at ~292 years."""


def check_speed(speed: float, window_s: float, flag: str = "--speed") -> None:
    """Raise ValueError unless ``speed`` is finite and > 0 and turns the loop's ``window_s`` (seconds
    of the source's clock) into a wall window of ``MIN_WINDOW_S``..``MAX_WINDOW_S``."""
    if not 0 < speed < math.inf:  # also rejects NaN
        raise ValueError(f"{flag} must be a finite number > 0, got {speed:g}")
    wall = window_s / speed
    if not MIN_WINDOW_S <= wall <= MAX_WINDOW_S:
        raise ValueError(f"{flag} {speed:g} makes the {window_s:g}-s signal window {wall:.3g} wall seconds; "
                         f"it must be {MIN_WINDOW_S * 1000:g} ms to {MAX_WINDOW_S / 86400:g} days "
                         f"(--speed between {window_s / MAX_WINDOW_S:.3g} and {window_s / MIN_WINDOW_S:.3g})")


class PrometheusSource:
    """Signals of every service of ``services`` read from Prometheus (see the module docstring).

    Args:
        prom: the fleet file's ``prometheus`` section: the query set, selectors and staleness bound.
        services: the services to observe (their selectors and variants).
        runner: evaluates instant queries (``LiveRunner``, or ``RangeRunner`` for history).
        window_s: signal look-back window, s of the loop (the controller's ``window_s``).
        speed: how many times faster than real time the source runs (1 for a real cluster).
        clock: maps the loop's time (seconds) to the unix time to evaluate at; None = the server's now.
        measured_speed: given the wall window (s), the source's seconds per wall second over the last
            that many wall seconds, 0 when its clock stood still (the rates are then unknown), or None
            when it cannot say (the rates divided by ``speed``); None (the default, a real cluster):
            the rates are divided by ``speed`` (module docstring, "Time").
        deadline_s: bound on one whole ``observe``, wall seconds (module docstring); None: each
            query bounded by its own timeout only (a backtest, which has no tick to keep).

    Attributes:
        warnings: service -> this tick's warnings (optional queries that failed, pods ignored, no
            fresh pods); the failed queries are logged by the loop, one line per cause
            (``ServiceObservation.failed_optional``), the others here.
    """

    def __init__(self, prom: PrometheusConfig, services: Sequence[Service], runner: QueryRunner, *, window_s: float,
                 speed: float = 1.0, clock: Callable[[float], float] | None = None,
                 deadline_s: float | None = None,
                 measured_speed: Callable[[float], float | None] | None = None) -> None:
        check_speed(speed, window_s, "speed")
        if deadline_s is not None and not 0 < deadline_s < math.inf:
            raise ValueError(f"deadline_s must be finite and > 0, got {deadline_s}")
        if prom.query_set == "recorded" and speed != 1:
            raise ValueError("prometheus.query_set recorded reads rates recorded over real time: speed must be 1")
        self.services = list(services)
        self.prom = prom
        self.runner = runner
        self.speed = speed
        self.measured_speed = measured_speed
        self.rate_speed: float | None = speed
        """What this observation's rates are divided by: ``measured_speed``'s answer, else ``speed``;
        None where it answered 0 (the source's clock stood still over the window): the rates per second
        of that clock are unknown, never 0 (``_per_second``)."""
        self.clock = clock
        self.fixed = None if prom.query_set == AUTO else query_set(prom.query_set)
        self._flow_seen: set[str] = set()  # services whose gateway has shown flow-control series
        self.detected: dict[str, QuerySet] = {}
        """Service -> the query set detected from its pods' series (``auto``), until a tick finds none of
        its pods valid (an upgrade may have changed the names): then detected again."""
        self.window_s = window_s / speed  # wall seconds: every query's look-back (the source's ``window_s``)
        self.deadline_s = deadline_s
        self._deadline = math.inf  # monotonic time the observation in progress ends
        self._undetected: dict[str, str] = {}  # service -> why this tick's query-set detection failed
        self.warnings: dict[str, list[str]] = {}
        self._counts: dict[tuple[str, str], tuple[int, int]] = {}
        self._batch: _Batch | None = None  # this observation's batched queries (``prometheus.batch``)

    # ------------------------------------------------------------------ selectors
    def service_selector(self, svc: Service) -> str:
        """Matchers ANDed into every query of ``svc`` (``service_selector``)."""
        return service_selector(self.prom, svc)

    def variant_selectors(self, svc: Service, v: Variant) -> tuple[str, str]:
        """``(pod matchers, Deployment matchers)`` of a variant (a pool's too); defaults in
        ``config.VariantSelectors``, with the role's matcher (``prometheus.role_labels``, e.g.
        ``llm_d_ai_role="<role>"``) added to a pool variant's default pods."""
        sel = self.prom.selectors.get(svc.name)
        vs = sel.variants.get(v.name) if sel is not None else None
        deployment = f"{svc.name}-{v.name}"
        ns = f"namespace={quote(self.prom.namespace)}"
        pods = f"{ns},{self.prom.pod_label}=~{quote(exact_alternation([deployment]) + '-.*')}"
        # another variant's Deployment named this one's plus "-..." (h100 and h100-prefill) has pod names
        # this pattern also matches: leave them out by name, as no label tells an aggregated pod from a
        # decode one under every convention (Dynamo's "backend")
        others = [*svc.variants, *(p for _, p in svc.role_variants())]
        longer = [d for d in (f"{svc.name}-{o.name}" for o in others) if d.startswith(deployment + "-")]
        if longer:
            pods += f",{self.prom.pod_label}!~{quote('(' + exact_alternation(longer) + ')-.*')}"
        role = {p.name: r for r, p in svc.role_variants()}.get(v.name)
        if role is not None:  # a pool's pods carry the role label (``prometheus.role_labels``)
            pods += f",{self.prom.roles.is_(role)}"
        dep = f"{ns},deployment={quote(deployment)}"
        if vs is not None:
            pods = vs.pods if vs.pods is not None else pods
            dep = vs.deployment if vs.deployment is not None else dep
        return pods, dep

    def query_set(self, svc: Service) -> QuerySet:
        """The query set ``svc`` is read with: the configured one, else the one detected for it, else
        (nothing detected yet: no pod reports) the newest vLLM's, which reads the gateway and
        kube-state-metrics as every set does."""
        return self.fixed or self.detected.get(svc.name) or DEFAULT_SET

    def queries(self, svc: Service) -> dict[str, str]:
        """Signal -> PromQL template for ``svc``: its query set with the configured overrides."""
        return {**self.query_set(svc).signals, **self.prom.queries}

    def _detect(self, pool: ThreadPoolExecutor, at: float | None) -> None:
        """With ``auto``, find the query set of each service not yet detected, from the marker series
        (``promql.MARKERS``) its pods export; logs the choice. A failed detection leaves the service
        undetected (read as ``DEFAULT_SET`` this tick) and is tried again next tick."""
        if self.fixed is not None:
            return
        jobs = {svc.name: self._submit(pool, "detect", detection_query(self.service_selector(svc)), at)
                for svc in self.services if svc.name not in self.detected}
        self._flush()
        for name, fut in jobs.items():
            res = self._result(fut)
            if res.error is not None:  # logged with the tick's other failures (ControlLoop)
                self._undetected[name] = (f"{name} query-set detection (reading {DEFAULT_SET.name} names this "
                                          f"tick): {res.error}")
                continue
            found = {str(r.get("metric", {}).get("__name__")) for r in res.result if isinstance(r, dict)}
            qs = detect(found)
            if qs is not None:
                self.detected[name] = qs
                log.info("%s: query set %s, detected from the series its pods export (%s)", name, qs.name,
                         ", ".join(sorted(found)))

    # ------------------------------------------------------------------ queries
    def _run(self, promql: str, at: float | None) -> _Outcome:
        if time.monotonic() >= self._deadline:  # queued behind slow queries: not started at all
            return _Outcome(error=f"timed out: no answer within the observation's deadline ({self.deadline_s:g} s)")
        try:
            result = self.runner.query(promql, at)
            if not isinstance(result, list):
                raise TypeError("not an instant vector")
            return _Outcome(result)
        except Exception as exc:
            return _Outcome(error=describe(exc), rejected=rejected(exc))

    def _submit(self, pool: ThreadPoolExecutor, key: str, promql: str, at: float | None) -> Future[_Outcome]:
        """Run ``promql`` now, or with batching gather it under ``key`` until ``_Batch.flush``."""
        if self._batch is not None:
            return self._batch.submit(key, promql)
        return pool.submit(self._run, promql, at)

    def _result(self, fut: Future[_Outcome]) -> _Outcome:
        """``fut``'s outcome, or a failure once the observation's deadline has passed."""
        try:
            return fut.result(timeout=None if self._deadline == math.inf
                              else max(0.0, self._deadline - time.monotonic()))
        except FutureTimeout:
            fut.cancel()
            return _Outcome(error=f"timed out: no answer within the observation's deadline ({self.deadline_s:g} s)")

    def _inventory_queries(self, svc: Service, v: Variant) -> dict[str, str]:
        pods_sel, dep_sel = self.variant_selectors(svc, v)
        sel = "{" + matchers(self.service_selector(svc), pods_sel) + "}"
        pl, w, q = self.prom.pod_label, duration(self.window_s), self.query_set(svc)
        out = {
            "age": f"min by ({pl}) (time() - timestamp({q.running}{sel}))",
            "running": f"{q.running}{sel}",
            "waiting": f"{q.waiting}{sel}",
            "kv": f"{q.kv_usage}{sel}",
            "kv_max": f"max by ({pl}) (max_over_time({q.kv_usage}{sel}[{w}]))",
            "waiting_max": f"sum by ({pl}) (max_over_time({q.waiting}{sel}[{w}]))",
        }
        if q.prefix_hits and q.prefix_queries:
            out["prefix_hits"] = f"sum by ({pl}) ({q.prefix_hits}{sel})"
            out["prefix_queries"] = f"sum by ({pl}) ({q.prefix_queries}{sel})"
        if dep_sel.strip():
            out["spec"] = f"max({KSM_SPEC_REPLICAS}{{{dep_sel}}})"
            out["ready"] = f"max({KSM_READY_REPLICAS}{{{dep_sel}}})"
        return out

    def _pods(self, res: dict[str, _Outcome], warn: list[str], scope: str, qs: QuerySet
              ) -> tuple[list[_Pod], list[_Pod]]:
        """(fresh pods, of which valid) from a variant's inventory results, read with ``qs``."""
        pl = self.prom.pod_label
        pods: dict[str, _Pod] = {}
        for s in res["age"].result:
            name = s["metric"].get(pl)
            if name is not None:
                pods[name] = _Pod(name, _value(s))
        for key in ("running", "waiting", "kv"):
            for s in res[key].result:
                pod = pods.get(s["metric"].get(pl, ""))
                if pod is not None:
                    getattr(pod, key).append(_value(s))
        for key in ("kv_max", "waiting_max", *OPTIONAL_POD_QUERIES):
            for s in res[key].result if key in res else ():
                pod = pods.get(s["metric"].get(pl, ""))
                if pod is not None:
                    setattr(pod, key, _value(s))
        for pod in pods.values():
            for key in OPTIONAL_POD_QUERIES:
                x = getattr(pod, key)
                if x is not None and not 0 <= x < math.inf:
                    warn.append(f"{scope}: pod {pod.name}: {key} counter {x:g} ignored (not finite and >= 0)")
                    setattr(pod, key, None)
        fresh, valid = [], []
        for pod in sorted(pods.values(), key=lambda p: p.name):
            if pod.age_s > self.prom.staleness_s:
                warn.append(f"{scope}: pod {pod.name} ignored: newest sample {pod.age_s:.0f} s old "
                            f"(staleness bound {self.prom.staleness_s:g} s)")
                continue
            fresh.append(pod)
            bad = [(qs.running, x, math.inf) for x in pod.running if not 0 <= x < math.inf]
            bad += [(qs.waiting, x, math.inf) for x in pod.waiting if not 0 <= x < math.inf]
            bad += [(qs.kv_usage, x, 1.0) for x in pod.kv if not 0 <= x <= 1]
            if bad:
                metric, x, hi = bad[0]
                warn.append(f"{scope}: pod {pod.name} ignored: {metric}={x:g} outside [0, {hi:g}]")
                continue
            valid.append(pod)
        return fresh, valid

    def _fresh_count(self, age: _Outcome) -> int:
        """Pods whose newest sample is within the staleness bound, from the ``age`` query's answer."""
        pl = self.prom.pod_label
        return len({s["metric"].get(pl) for s in age.result
                    if s["metric"].get(pl) is not None and not _value(s) > self.prom.staleness_s})

    def _counts_of(self, key: tuple[str, str], res: dict[str, _Outcome]) -> tuple[int, int] | None:
        """(ready, starting) from kube-state-metrics, else fresh pods; None when unknown.

        Every answer that came back is used, whichever other query failed: ``spec`` gives the
        total, ``ready`` (else the fresh pods, else the last known split) the ready part. When the
        answers that are needed failed, the last known counts; None when there are none (unknown,
        never zero).
        """
        spec, ready, age = res.get("spec"), res.get("ready"), res["age"]
        last = self._counts.get(key)
        counts: tuple[int, int] | None = None
        if spec is not None and spec.error is None and spec.result:
            total = _count(spec.result[0])
            if ready is not None and ready.error is None and ready.result:
                n_ready = _count(ready.result[0])
            elif age.error is None:
                n_ready = self._fresh_count(age)
            else:
                n_ready = total if last is None else last[0]
            n_ready = min(max(n_ready, 0), total)
            counts = (n_ready, total - n_ready)
        elif spec is None and age.error is None:
            # No kube-state-metrics selector (counted by pods): the fresh pods, all ready.
            counts = (self._fresh_count(age), 0)
        elif spec is not None and spec.error is None and age.error is None and age.result:
            # kube-state-metrics has no series for the Deployment, but pods report: count them, all ready.
            counts = (self._fresh_count(age), 0)
        # Neither a Deployment series nor a pod: nothing says how many replicas there are (unknown, not 0).
        if counts is None:
            return last
        self._counts[key] = counts
        return counts

    def _signals(self, pool: ThreadPoolExecutor, svc: Service, rest: str, names: list[str], at: float | None,
                 gauges: tuple[str, list[str]] | None = None) -> dict[str, Future[_Outcome]]:
        """``svc``'s pod-scoped signal queries over the pods ``names`` that the matchers ``rest`` select;
        the gauges (``GAUGE_SIGNALS``) over ``gauges`` = (matchers, pods) instead, when given. With
        ``prometheus.aggregate`` (and batching), each is read from the tick's per-pod aggregation
        where its template and matchers allow (``prometheus_pods``), else sent as its own query."""
        out = {}
        sels: dict[bool, str] = {}  # the matchers of the pods, built once per pod set (not once per signal)
        for name, t in self.queries(svc).items():
            if name in SERVICE_SIGNALS:
                continue
            gauge = gauges is not None and name in GAUGE_SIGNALS
            r, pods = gauges if gauges is not None and gauge else (rest, names)
            if gauge not in sels:
                sels[gauge] = matchers(r, f"{self.prom.pod_label}=~{quote(exact_alternation(pods))}")
            query = render(t, sels[gauge], self.window_s)
            fut = (self._batch.submit_pods(name, t, r, pods, query) if self._batch is not None and self.prom.aggregate
                   else None)
            out[name] = fut if fut is not None else self._submit(pool, name, query, at)
        return out

    def _service_queries(self, svc: Service) -> dict[str, str]:
        """The service-wide queries: the gateway's signals and how far back the service's samples go."""
        base = self.service_selector(svc)
        out = {name: render(t, base, self.window_s) for name, t in self.queries(svc).items()
               if name in SERVICE_SIGNALS}
        # wall seconds both: the window (the loop's / speed) and the gateway's minute of the source's clock
        gateway_window = min(self.window_s, max(GATEWAY_WINDOW_S / self.speed, MIN_WINDOW_S))
        out.update({PRIORITY + k: render(t, base, gateway_window) for k, t in PRIORITY_QUERIES.items()})
        out.update({TOTAL + k: render(t, base, self.window_s) for k, t in GATEWAY_TOTALS.items()})
        step = duration(max(self.window_s / HISTORY_STEPS, 0.001))
        out[HISTORY] = (f"time() - min(min_over_time(timestamp({self.query_set(svc).running}{{{base}}})"
                        f"[{duration(self.window_s)}:{step}]))")
        return out

    def _collect(self, futures: dict[str, Future[_Outcome]], errors: list[str], scope: str
                 ) -> dict[str, float | None]:
        out: dict[str, float | None] = dict.fromkeys(SIGNALS)
        for name, fut in futures.items():
            res = self._result(fut)
            if res.error is not None:
                errors.append(f"{scope} {name}: {res.error}")
                continue
            if len(res.result) > 1:
                errors.append(f"{scope} {name}: query returned {len(res.result)} series; aggregate it to one")
                continue
            if not res.result:
                continue
            try:
                x = _value(res.result[0])
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                errors.append(f"{scope} {name}: {describe(exc)}")
                continue
            if math.isnan(x):
                continue
            y = self._per_second(x) if name in RATE_SIGNALS else x  # per second of the source's clock
            if y is not None:
                out[name] = y
        return out

    # ------------------------------------------------------------------ observe
    def observe(self, now: float) -> dict[str, ServiceObservation]:
        """Signals of every service at loop time ``now`` (seconds); see the module docstring."""
        at = None if self.clock is None else self.clock(now)
        measured = None if self.measured_speed is None else self.measured_speed(self.window_s)
        self.rate_speed = (None if measured == 0.0  # the source's clock stood still: no rate per its second
                           else measured if measured is not None and 0 < measured < math.inf else self.speed)
        self._deadline = math.inf if self.deadline_s is None else time.monotonic() + self.deadline_s
        self._undetected = {}
        pool = ThreadPoolExecutor(max_workers=self.prom.max_concurrency, thread_name_prefix="prometheus")
        self._batch = _Batch(self, pool, at) if self.prom.batch and len(self.services) > 1 else None
        try:
            self._detect(pool, at)
            inventory = {
                (svc.name, v.name): {k: self._submit(pool, POD_KEY + k, q, at)
                                     for k, q in self._inventory_queries(svc, v).items()}
                for svc in self.services for v in _all_variants(svc)
            }
            self._flush()
            plans = [self._plan(svc, inventory, pool, at) for svc in self.services]
            self._flush()
            return {plan.svc.name: self._finish(plan, now) for plan in plans}
        finally:  # past the deadline, queries still in flight are abandoned (each ends at its timeout_s)
            pool.shutdown(wait=self._deadline == math.inf, cancel_futures=True)
            self._batch = None

    def _flush(self) -> None:
        """Send the batched queries gathered so far (nothing without batching)."""
        if self._batch is not None:
            self._batch.flush()

    def _plan(self, svc: Service, inventory: dict[tuple[str, str], dict[str, Future[_Outcome]]],
              pool: ThreadPoolExecutor, at: float | None) -> _Plan:
        """Round 1 results of ``svc`` -> valid pods and counts; submits round 2 (signal queries)."""
        plan = _Plan(svc)
        known = True
        for v in _all_variants(svc):
            scope = f"{svc.name}/{v.name}"
            res = {k: self._result(f) for k, f in inventory[(svc.name, v.name)].items()}
            for k in OPTIONAL_POD_QUERIES:  # only the cache-warmth model reads them: a failure is a warning
                if k in res and res[k].error is not None:
                    plan.failed.append(f"{scope} pods ({k}): {res.pop(k).error}")
            failed = [f"{scope} pods ({k}): {r.error}" for k, r in res.items() if r.error is not None]
            plan.errors += failed
            known = known and not failed
            plan.valid[v.name] = []
            try:
                if not failed:
                    plan.valid[v.name] = self._pods(res, plan.warnings, scope, self.query_set(svc))[1]
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                plan.errors.append(f"{scope} pods: {describe(exc)}")
                known, plan.valid[v.name] = False, []
            try:
                plan.counts[v.name] = self._counts_of((svc.name, v.name), res)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                plan.errors.append(f"{scope} replicas: {describe(exc)}")
                known = False
                plan.counts[v.name] = self._counts.get((svc.name, v.name))
            counts = plan.counts[v.name]
            if not failed and not res["age"].result and not ("spec" in res and res["spec"].result):
                pods_sel, dep_sel = self.variant_selectors(svc, v)
                pods_sel = matchers(self.service_selector(svc), pods_sel)
                plan.warnings.append(f"{scope}: no series match the selectors (pods: {pods_sel}; "
                                     f"deployment: {dep_sel or '-'})")
            elif not failed and counts is not None and counts[0] > 0 and not plan.valid[v.name]:
                plan.warnings.append(f"{scope}: {counts[0]} ready replica(s) but no pod with "
                                     "fresh, sane metrics")
        plan.pods_known = known
        if known and not any(plan.valid.values()):  # no pod reads as the set says: look again next tick
            self.detected.pop(svc.name, None)
        base = self.service_selector(svc)
        plan.service_jobs = {k: self._submit(pool, k, q, at) for k, q in self._service_queries(svc).items()}
        # service-wide: rates and latencies over the pods that finish requests, gauges over every pod
        # (module docstring); the same query without roles
        prefill = {v.name for r, v in svc.role_variants() if r == "prefill"}
        every = [p.name for pods in plan.valid.values() for p in pods]
        finishing = [p.name for v, pods in plan.valid.items() if v not in prefill for p in pods]
        if known and every and svc.roles is None:
            plan.jobs[svc.name] = self._signals(pool, svc, base, every, at)
        elif known and every:
            plan.jobs[svc.name] = self._signals(pool, svc, matchers(base, self.prom.roles.not_prefill()),
                                                finishing or every, at, (base, every))
        for v in _all_variants(svc):
            names = [p.name for p in plan.valid[v.name]]
            if names:
                plan.jobs[f"{svc.name}/{v.name}"] = self._signals(
                    pool, svc, matchers(base, self.variant_selectors(svc, v)[0]), names, at)
        for role in ("prefill", "decode") if svc.roles is not None else ():
            names = [p.name for r, v in svc.role_variants() if r == role for p in plan.valid[v.name]]
            if known and names:
                role_sel = matchers(base, self.prom.roles.is_(role))
                plan.jobs[f"{svc.name}/{role}"] = self._signals(pool, svc, role_sel, names, at)
        return plan

    def _finish(self, plan: _Plan, now: float) -> ServiceObservation:
        """Round 2 results -> the service's observation (unknown signals None)."""
        name = plan.svc.name
        values = self._collect(plan.jobs[name], plan.errors, name) if name in plan.jobs else dict.fromkeys(SIGNALS)
        variants = {}
        for v in _all_variants(plan.svc):
            scope = f"{name}/{v.name}"
            vsig = self._collect(plan.jobs[scope], plan.errors, scope) if scope in plan.jobs else dict.fromkeys(SIGNALS)
            counts = plan.counts[v.name]
            if counts is None:  # unknown: the loop holds (``counts_known``), the 0s are never read
                variants[v.name] = VariantObservation(0, 0, 0, Signals.of(vsig), counts_known=False)
            else:
                variants[v.name] = VariantObservation(counts[0], counts[1], 0, Signals.of(vsig))
        pools = {}
        for role in ("prefill", "decode") if plan.svc.roles is not None else ():
            scope = f"{name}/{role}"
            rsig = self._collect(plan.jobs[scope], plan.errors, scope) if scope in plan.jobs else dict.fromkeys(SIGNALS)
            pools[role] = PoolObservation(role, Signals.of(rsig), {v.name: variants.pop(v.name)
                                                                   for r, v in plan.svc.role_variants() if r == role})
        # Per-pod gauges for the baselines: only pods that reported all three.
        pods = [self._pod_observation(v, p) for v, ps in plan.valid.items() for p in ps
                if p.kv and p.waiting and p.running]
        history = self._service_signals(plan, values)
        for line in plan.warnings:  # the failed queries are not: the loop logs them, one line per cause
            log.warning(line)
        self.warnings[name] = plan.failed + plan.warnings
        failed = plan.failed + ([self._undetected[name]] if name in self._undetected else [])
        return ServiceObservation(name, now, Signals.of(values), variants, plan.errors, pods=pods, history_s=history,
                                  failed_optional=failed, pools=pools)

    def _service_signals(self, plan: _Plan, values: dict[str, float | None]) -> float | None:
        """Fill the service-wide signals into ``values`` (name -> value); return the history held, loop seconds.

        The gateway is optional (not every fleet has one): a failed query is a warning and the signal
        unknown, as the pods' prefix-cache counters are. The history query failing is an error.
        """
        name = plan.svc.name
        found: dict[str, float | None] = {}
        answers: dict[str, list[dict[str, Any]] | str] = {}
        for key, fut in plan.service_jobs.items():
            res = self._result(fut)
            if res.error is not None:
                if key == HISTORY:
                    plan.errors.append(f"{name} history: {res.error}")
                else:
                    plan.failed.append(f"{name} {key}: {res.error}")
                    answers[key] = _FAILED
                continue
            if key.startswith((PRIORITY, TOTAL)):
                answers[key] = res.result
                continue
            try:
                x = _value(res.result[0]) if len(res.result) == 1 else None
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                plan.warnings.append(f"{name} {key}: {describe(exc)}")
                continue
            found[key] = None if x is None or math.isnan(x) else x
        for key in SERVICE_SIGNALS:
            x = found.get(key)
            values[key] = self._per_second(x) if key in RATE_SIGNALS and x is not None else x
        self._gateway(plan, answers, values)
        span = found.get(HISTORY)
        return None if span is None else span * self.speed

    def _by_priority(self, key: str, answer: list[dict[str, Any]] | str, plan: _Plan
                     ) -> tuple[dict[str, float | None], dict[str, float | None]] | None:
        """One per-priority gateway query's answer -> (priority -> value per second of the source's
        clock, priority -> value as Prometheus answers it, per wall second for a rate); None when it
        failed or has no series. The labels that name one priority are added up; labels naming none are
        left out; a value that is not a finite number >= 0 makes its priority unknown (a warning), never
        0; a priority absent where others answer has had no event. Where the rates' speed is unknown
        (``rate_speed`` None) every rate of the first is unknown; the second still gives the ratio of
        two (a mean wait), in which the speed cancels."""
        if isinstance(answer, str):
            return None
        got: dict[str, float] = {}
        bad: set[str] = set()
        for sample in answer:
            p = priority_name(str(sample.get("metric", {}).get("priority", "")), PRIORITIES)
            if p is None:
                continue
            try:
                x = _value(sample)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                plan.warnings.append(f"{plan.svc.name} gateway {key}: {describe(exc)}")
                bad.add(p)
                continue
            if not 0 <= x < math.inf:  # NaN included
                plan.warnings.append(f"{plan.svc.name} gateway {key} of priority {p}: {x:g} is not a count")
                bad.add(p)
                continue
            got[p] = got.get(p, 0.0) + x
        if not got and not bad:
            return None
        raw = {p: None if p in bad else got.get(p, 0.0 if key in _COUNTED else None)
               for p in PRIORITIES}
        scale = self.rate_speed if key.endswith("_rps") or key == "waited" else 1.0
        if scale is None:  # a rate per a second that did not pass: unknown
            return {p: None for p in PRIORITIES}, raw
        return {p: None if x is None else x / scale for p, x in raw.items()}, raw

    @staticmethod
    def _total(answer: list[dict[str, Any]] | str | None) -> float | str | None:
        """A service-wide gateway total as Prometheus answers it, per wall second: ``_FAILED`` (the query
        failed, or its value is not a finite number >= 0), or None (no series). Not converted to the
        source's clock: only the ratio of two is read (the mean wait, ``waited / dispatched``, seconds
        of the source's clock, as the histogram records them), in which the rates' speed cancels, so it
        is known even where the speed is not (``rate_speed`` None)."""
        if answer is None or isinstance(answer, str):
            return _FAILED if answer == _FAILED else None
        try:
            x = _value(answer[0]) if len(answer) == 1 else None
        except (KeyError, IndexError, TypeError, ValueError):
            return _FAILED
        if x is None:
            return None
        return x if 0 <= x < math.inf else _FAILED

    def _per_second(self, x: float) -> float | None:
        """``x``, a rate per wall second, per second of the source's clock; None where that is unknown
        (``rate_speed``)."""
        return None if self.rate_speed is None else x / self.rate_speed

    def _gateway(self, plan: _Plan, answers: dict[str, list[dict[str, Any]] | str], values: dict[str, float | None]
                 ) -> None:
        """The gateway's per-priority signals into ``values``; under flow control the user's TTFT includes
        the gateway's wait and its queue is the service's: add the mean wait of the requests dispatched
        over the window to ``ttft_mean_s`` (vLLM's starts at the engine) and the gateway's queue to
        ``queue_length``, as the simulator's source does. A service whose gateway has shown flow control
        and whose queue or wait query fails now has those two unknown, not the pods' alone."""
        name = plan.svc.name
        both = {k: self._by_priority(k, answers.get(PRIORITY + k, _FAILED), plan) for k in PRIORITY_QUERIES}
        per = {k: None if x is None else x[0] for k, x in both.items()}
        for key in ("arrival_rate_rps", "dispatched_rps", "shed_rps", "queue"):
            for p, x in (per[key] or {}).items():
                values[PRIORITY_NAMES[key].format(p=p)] = x
        # a mean wait is a ratio of two rates: read as answered, so known where their speed is not
        answered = {k: {} if x is None else x[1] for k, x in both.items()}
        waited, dispatched = answered["waited"], answered["dispatched_rps"]
        for p in PRIORITIES:
            w, n = waited.get(p), dispatched.get(p)
            values[PRIORITY_NAMES["wait_s"].format(p=p)] = w / n if w is not None and n else None
        if per["queue"] is not None or per["dispatched_rps"] is not None:
            self._flow_seen.add(name)
        flow = name in self._flow_seen
        queues = per["queue"]
        if queues is not None and all(q is not None for q in queues.values()):
            pods = values.get("queue_length")
            if pods is None and plan.pods_known and not any(plan.valid.values()):
                pods = 0.0  # no pod serves: only the gateway holds requests (scale from zero)
            values["queue_length"] = None if pods is None else pods + sum(q or 0.0 for q in queues.values())
        elif flow:
            plan.warnings.append(f"{name}: the gateway's queue is unknown this tick, so the service's queue is too")
            values["queue_length"] = None
        total_w, total_n = (self._total(answers.get(TOTAL + k)) for k in ("waited", "dispatched"))
        if isinstance(total_w, float) and isinstance(total_n, float):
            if total_n > 0 and values.get("ttft_mean_s") is not None:
                values["ttft_mean_s"] = (values["ttft_mean_s"] or 0.0) + total_w / total_n
        elif flow and (total_w == _FAILED or total_n == _FAILED):
            plan.warnings.append(f"{name}: the gateway's wait is unknown this tick, so the users' TTFT is too")
            values["ttft_mean_s"] = None

    @staticmethod
    def _pod_observation(variant: str, p: _Pod) -> PodObservation:
        kv = sum(p.kv) / len(p.kv)
        waiting = sum(p.waiting)
        return PodObservation(variant=variant, kv_usage=kv, waiting=waiting, running=sum(p.running),
                              kv_usage_max=kv if p.kv_max is None else p.kv_max,
                              waiting_max=waiting if p.waiting_max is None else p.waiting_max,
                              name=p.name, prefix_hits_total=p.prefix_hits, prefix_queries_total=p.prefix_queries)
