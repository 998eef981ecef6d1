"""The endpoint picker (EPP) of llm-d's router and the Gateway API Inference Extension (GIE) as a
consumer of the admission thresholds.

The EPP reads its ``EndpointPickerConfig`` (flow control, its saturation detector, priority bands)
once, at startup, but watches its ``InferenceObjective`` resources: each names a serving objective
that clients select per request (header ``x-llm-d-inference-objective``; ``x-gateway-inference-
objective``, the old name, is an alias) and carries an integer ``priority``. While the pool is
saturated the EPP rejects requests of a *negative* priority (HTTP 429) when its flow control is off,
and dispatches bands highest priority first when it is on (llm-d-router v0.10.0,
``pkg/epp/requestcontrol/admission.go``, ``pkg/epp/metadata/consts.go``).

Where the resources live moved: GIE v1.6.0 ships no EPP, and llm-d-router serves InferenceObjective
as ``llm-d.ai/v1alpha2`` (and EndpointPickerConfig as ``llm-d.ai/v1alpha1``); an EPP that sees both
groups prefers the new one. ``objectives`` writes the current group (``DEFAULT_API_GROUP``), GIE's
``inference.networking.x-k8s.io`` on request, both with the same spec (the CRDs agree on
``priority`` and ``poolRef``).

So the thresholds reach the EPP as the priorities of one objective per (service, priority), named
``<service>-<priority>``:

- no limit (``null``) or a positive wait budget: the priority's rank, ``critical`` 2, ``standard`` 1,
  ``sheddable`` 0 (never shed by the EPP; a positive budget is a wait the EPP's queue and the
  client's deadline bound, which the EPP cannot set per objective);
- 0 (admit nothing that would wait): the rank minus 3 (``critical`` -1, ``standard`` -2,
  ``sheddable`` -3): shed while the pool is saturated, lowest first, and below every open band.

This is coarser than the simulator's gateway, which compares each request's estimated wait with the
threshold; docs/admission.md says what is lost. ``objectives`` is pure; ``read_document`` fetches.

With ``continuations``, each (service, priority) also gets ``<service>-<priority>-continuing``, the
objective a client or agent framework names for a task's follow-up calls (the simulator's
``continuation_objective: protected``): the priority's rank whatever its threshold, so never negative.
llm-d-router v0.10.0's probabilistic admitter passes every request of priority >= 0 before it reads a
metric (``probabilisticadmitter/plugin.go``, ``ProbabilisticAdmitter.Admit``), its flow control evicts
only priorities < 0 (``eviction/filtering/sheddable.go``) and the EPP rejects only those when flow
control is off, so none of these sheds a workflow midway (the queue's TTL still bounds a wait). Why
the rank and not a band of their own: integer priorities leave no room between two adjacent ranks, so
a standard or sheddable continuation one above its class would be level with the next class's new
requests, which the simulator always serves first. So continuations are ranked with their class's new
requests, never below, and above every lower class's objectives. What differs from the simulator:
within the shared band the EPP serves in arrival order (a band's default policies, global-strict
fairness over FCFS queues, ``flowcontrol/registry/config.go``) where the simulator serves the class's
continuations first; and a class being shed (rank minus 3) has its new requests queued under every
continuation, lower classes' included, while its continuations keep the open band (the simulated
gateway sheds any such new request that would wait, so it never orders them). An objective name the
EPP does not know gets priority 0 (``requestcontrol/director.go``, ``getInferenceObjective``): apply
the continuation objectives before clients name them, or critical and standard follow-ups fall to
sheddable's rank.
"""

from __future__ import annotations

import http.client
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autoscaler.config.kubernetes import DNS_LABEL, DNS_SUBDOMAIN
from autoscaler.errors import UnreachableError
from autoscaler.files import read_regular
from autoscaler.loop.admission import PATH, parse_document, parse_itl_budgets
from autoscaler.urls import redact
from autoscaler.workload.types import PRIORITIES

API_VERSIONS = {"llm-d.ai": "llm-d.ai/v1alpha2",
                "inference.networking.x-k8s.io": "inference.networking.x-k8s.io/v1alpha2"}
"""API group -> the ``apiVersion`` of its InferenceObjective: llm-d-router v0.10.0
(``config/crd/bases/llm-d.ai_inferenceobjectives.yaml``) and GIE v1.0-v1.5."""
DEFAULT_API_GROUP = "llm-d.ai"
KIND = "InferenceObjective"
POOL_GROUP = "inference.networking.k8s.io"
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
MAX_BYTES = 16 * 2**20
"""The largest admission document read, bytes."""
_HOST_PORT = re.compile(r"[\w.-]+:\d+")
THRESHOLD_ANNOTATION = "autoscaler/admission-threshold-seconds"
"""Each objective's annotation: the threshold behind its priority (``none`` for no limit), for people."""
SHED_OFFSET = len(PRIORITIES)
"""How far a priority whose threshold is 0 drops: below every rank, so shed bands stay under open ones."""


def objective_priority(priority: str, threshold: float | None) -> int:
    """The ``InferenceObjective`` priority for ``priority`` under ``threshold`` (module docstring).

    Raises:
        ValueError: an unknown priority.
    """
    if priority not in PRIORITIES:
        raise ValueError(f"unknown priority '{priority}' (known: {', '.join(PRIORITIES)})")
    rank = PRIORITIES.index(priority)
    return rank - SHED_OFFSET if threshold == 0 else rank


def objectives(thresholds: Mapping[str, Mapping[str, float | None]], pool: str | None = None,
               namespace: str | None = None, api_group: str = DEFAULT_API_GROUP,
               continuations: bool = False) -> list[dict[str, Any]]:
    """One ``InferenceObjective`` manifest per (service, priority) of ``thresholds``
    (service -> priority -> seconds or None, as ``parse_document`` returns), on the InferencePool
    ``pool`` (default: the service's name), in ``namespace`` when given, of ``api_group``
    (``API_VERSIONS``); priorities a service does not list have no limit. With ``continuations``,
    each followed by its continuation objective (module docstring), labelled
    ``autoscaler/continuation: "true"``.

    Raises:
        ValueError: a service name that cannot name a Kubernetes object (DNS-1123 subdomain, at most
            253 characters with the priority appended) or be a label value (at most 63 characters), or
            an invalid ``pool``, ``namespace`` or ``api_group``.
    """
    if api_group not in API_VERSIONS:
        raise ValueError(f"--api-group '{api_group}' is not one an EPP serves InferenceObjective in "
                         f"(known: {', '.join(API_VERSIONS)})")
    if namespace is not None and (len(namespace) > 63 or not DNS_LABEL.fullmatch(namespace)):
        raise ValueError(f"--namespace '{namespace}' is not a valid namespace (lower-case letters, digits, '-')")
    if pool is not None and (len(pool) > 253 or not DNS_SUBDOMAIN.fullmatch(pool)):
        raise ValueError(f"--pool '{pool}' is not a valid InferencePool name (lower-case letters, digits, '-', '.')")
    out = []
    for service in sorted(thresholds):
        if len(service) > 63 or not _LABEL_VALUE.fullmatch(service):
            raise ValueError(f"service '{service}' cannot be a Kubernetes label value (at most 63 letters, digits, "
                             "'-', '_', '.')")
        for p in reversed(PRIORITIES):
            threshold = thresholds[service].get(p)
            out.append(_objective(service, p, threshold, pool, namespace, api_group, continuing=False))
            if continuations:
                out.append(_objective(service, p, None, pool, namespace, api_group, continuing=True))
    return out


def _objective(service: str, p: str, threshold: float | None, pool: str | None, namespace: str | None,
               api_group: str, continuing: bool) -> dict[str, Any]:
    """The manifest of service ``service``'s objective for priority ``p`` (``objectives``): its
    continuation objective when ``continuing`` (never shed: ``threshold`` None).

    Raises:
        ValueError: a name Kubernetes would refuse.
    """
    name = f"{service}-{p}" + ("-continuing" if continuing else "")
    if len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        raise ValueError(f"service '{service}': '{name}' is not a valid Kubernetes object name "
                         "(lower-case letters, digits, '-' and '.')")
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "autoscaler", "autoscaler/service": service,
                      "autoscaler/priority": p}
    if continuing:
        meta["labels"]["autoscaler/continuation"] = "true"
    # + 0.0: a threshold of -0.0 (a valid document may hold it: -0.0 >= 0) is written 0, not -0
    meta["annotations"] = {THRESHOLD_ANNOTATION: "none" if threshold is None else f"{threshold + 0.0:g}"}
    return {"apiVersion": API_VERSIONS[api_group], "kind": KIND, "metadata": meta,
            "spec": {"priority": objective_priority(p, threshold),
                     "poolRef": {"group": POOL_GROUP, "kind": "InferencePool", "name": pool or service}}}


def read_document(source: str, timeout_s: float = 10.0) -> dict[str, dict[str, float | None]]:
    """The thresholds of the admission document at ``source``: an ``http(s)://`` URL (the loop's
    address, ``/v1/admission`` added when the URL has no path) or a file; at most ``MAX_BYTES``,
    read within ``timeout_s`` in all.

    Raises:
        UnreachableError: the URL's server did not answer, not within ``timeout_s``, or with an HTTP error
            (404: not the loop's address).
        ValueError: a file not found, too large, credentials in the URL, a malformed URL, or not a
            valid document.

        Either message names the source (credentials masked) as ``admission document at <source>: <why>``.
    """
    body, where = _read(source, timeout_s)
    try:
        return parse_document(body)
    except ValueError as exc:
        raise ValueError(f"admission document at {where}: {str(exc).removeprefix('admission document: ')}") from None


def read_itl_budgets(source: str, timeout_s: float = 10.0) -> dict[str, dict[str, int]]:
    """service -> variant -> ITL budget from the admission document at ``source`` (as
    ``read_document``; ``autoscaler.loop.admission.parse_itl_budgets``).

    Raises:
        ValueError: as ``read_document``, or a malformed budget.
    """
    body, where = _read(source, timeout_s)
    try:
        return parse_itl_budgets(body)
    except ValueError as exc:
        raise ValueError(f"admission document at {where}: {str(exc).removeprefix('admission document: ')}") from None


def _read(source: str, timeout_s: float) -> tuple[bytes, str]:
    """The body of the admission document at ``source`` and the source as shown (``read_document``)."""
    if "://" in source:
        body, where = _fetch(source, timeout_s)
    else:
        where = source
        try:
            body = read_regular(Path(source), MAX_BYTES)
        except OSError as exc:
            hint = " (a URL starts with http://)" if _HOST_PORT.fullmatch(source) else ""
            raise ValueError(f"admission document at {source}: {exc.strerror or exc}{hint}") from None
        except ValueError as exc:
            raise ValueError(f"admission document at {source}: {exc}") from None
    if len(body) > MAX_BYTES:
        raise ValueError(f"admission document at {where}: larger than {MAX_BYTES // 2**20} MiB")
    return body, where


def _fetch(source: str, timeout_s: float) -> tuple[bytes, str]:
    """The body at the URL ``source`` and the URL as shown (``read_document``)."""
    shown = redact(source)
    try:
        parts = urllib.parse.urlsplit(source)
        parts.port  # noqa: B018 (raises on a malformed port)
    except ValueError:
        raise ValueError(f"admission document at {shown}: malformed URL") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"admission document at {shown}: the URL must be http:// or https:// with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"admission document at {shown}: credentials in the URL are not supported")
    url = source if parts.path not in ("", "/") else urllib.parse.urlunsplit(parts._replace(path=PATH))
    where = redact(url)
    # The whole exchange in a thread bounded by the deadline: urllib's timeout bounds each socket read,
    # so a server dripping its status line and headers a byte at a time would hold it for ever.
    outcome: list[tuple[bytes, str] | BaseException] = []

    def fetch() -> None:
        try:
            outcome.append(_fetch_bounded(url, where, timeout_s))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)
    worker = threading.Thread(target=fetch, name="admission-document", daemon=True)
    worker.start()
    worker.join(timeout_s + 1.0)
    if not outcome:
        raise UnreachableError(f"admission document at {where}: not answered within {timeout_s:g} s")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _fetch_bounded(url: str, where: str, timeout_s: float) -> tuple[bytes, str]:
    """``_fetch``'s exchange: the body at ``url`` within ``timeout_s`` of reading it, and ``where``."""
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_BYTES:
                if time.monotonic() > deadline:
                    raise UnreachableError(f"admission document at {where}: not read within {timeout_s:g} s")
                chunk = r.read1(65536)  # what has arrived: a drip cannot hold a whole read
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks), where
    except urllib.error.HTTPError as exc:
        raise UnreachableError(f"admission document at {where}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        raise UnreachableError(f"admission document at {where}: unreachable ({reason})") from None


DETECTOR = "concurrency-detector"
HOLDBACK = "priority-holdback-policy"
PRODUCER = "inflight-load-producer"
REQUEST_TTL = "120s"
"""The flow-control queue's TTL: the simulated gateway's ``max_wait_s`` (120 s)."""


def epp_config(max_concurrency: int, min_ceiling: float | None = None, max_ceiling: float = 1.0,
               mode: str = "requests", max_token_concurrency: int | None = None,
               producer: dict[str, Any] | None = None) -> dict[str, Any]:
    """An llm-d-router v0.10.0 ``EndpointPickerConfig`` whose flow control holds every replica to
    ``max_concurrency`` requests in flight (``concurrency-detector``, ``requests`` mode: the pool's
    saturation is the requests in flight over ``max_concurrency`` per endpoint, and the scheduler
    skips an endpoint at it), with one band per priority an objective can take (``objectives``),
    and, with ``min_ceiling``, the ``priority-holdback-policy`` (``linear``, ``rank``) holding the
    lowest bands first as the pool fills; the scorers as ``examples/gateway/epp-config.yaml``.

    ``mode`` ``tokens`` or ``hybrid`` (the detector's other modes, ``concurrency/config.go``) holds
    each to ``max_token_concurrency`` tokens in flight instead or as well (``hybrid`` writes both
    limits; ``tokens`` only the token one); ``producer``, the ``inflight-load-producer``'s parameters
    (``addEstimatedOutputTokens``...), declares that plugin (else the EPP creates it with its defaults).

    Raises:
        ValueError: ``max_concurrency`` < 1, a ``mode`` the detector does not know, ``tokens`` or
            ``hybrid`` without a ``max_token_concurrency`` >= 1, or ceilings outside
            ``0 <= min_ceiling < max_ceiling <= 1`` (the plugin's checks, llm-d-router v0.10.0
            ``usagelimits/priorityholdback/config.go``).
    """
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if mode not in ("requests", "tokens", "hybrid"):
        raise ValueError(f"the concurrency detector's mode is requests, tokens or hybrid, got {mode!r}")
    if mode != "requests" and (max_token_concurrency is None or max_token_concurrency < 1):
        raise ValueError(f"mode {mode} needs a max_token_concurrency >= 1, got {max_token_concurrency}")
    if min_ceiling is not None and not (0.0 <= min_ceiling < max_ceiling <= 1.0):
        raise ValueError(f"--min-ceiling {min_ceiling:g} must be in [0, {max_ceiling:g}): the priority-holdback "
                         "policy's minCeiling is below its maxCeiling")
    detector: dict[str, Any] = {"concurrencyMode": mode}
    if mode != "tokens":
        detector["maxConcurrency"] = max_concurrency
    if mode != "requests":
        detector["maxTokenConcurrency"] = max_token_concurrency
    detector["headroom"] = 0.0
    plugins: list[dict[str, Any]] = [
        {"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"}, {"type": "prefix-cache-scorer"},
        {"type": "max-score-picker"},
        {"type": DETECTOR, "parameters": detector},
    ]
    if producer is not None:
        plugins.append({"type": PRODUCER, "parameters": producer})
    flow: dict[str, Any] = {"saturationDetector": {"pluginRef": DETECTOR}}
    if min_ceiling is not None:
        plugins.append({"type": HOLDBACK, "parameters": {"shape": "linear", "domain": "rank",
                                                         "minCeiling": min_ceiling, "maxCeiling": max_ceiling}})
        flow["usageLimitPolicyPluginRef"] = HOLDBACK
    ranks = sorted({objective_priority(p, t) for p in PRIORITIES for t in (None, 0.0)}, reverse=True)
    flow["defaultRequestTTL"] = REQUEST_TTL
    flow["priorityBands"] = [{"priority": r} for r in ranks]
    return {"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig", "featureGates": ["flowControl"],
            "plugins": plugins,
            "schedulingProfiles": [{"name": "default", "plugins": [
                {"pluginRef": DETECTOR},  # the detector is also the scheduler's filter
                {"pluginRef": "queue-scorer", "weight": 2}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                {"pluginRef": "prefix-cache-scorer", "weight": 3}, {"pluginRef": "max-score-picker"}]}],
            "flowControl": flow}
