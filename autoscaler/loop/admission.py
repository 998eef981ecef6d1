"""The admission sink outside the simulator: a versioned JSON document of the thresholds, served by
the loop at ``GET /v1/admission`` (``autoscaler.loop.export.serve``).

Schema (``apiVersion`` ``autoscaler/v1``, ``kind`` ``AdmissionThresholds``; docs/admission.md)::

    {"apiVersion": "autoscaler/v1", "kind": "AdmissionThresholds", "generation": 12884901895,
     "leader": "autoscaler-7d9f-x2", "unit": "seconds of estimated queue wait",
     "priorities": ["sheddable", "standard", "critical"],
     "services": {"<service>": {"thresholds": {"critical": null, "standard": 1.0, "sheddable": 0.0},
                                "itl_budget": {"h100": 21, "a100": 9},
                                "updated_unix_s": 1764600000.0}}}

``null`` is no limit. ``itl_budget`` (only where the controller learns one, ``Decision.itl_budget``)
is each variant's requests in flight per replica at the ITL target, for the gateway's concurrency
detector (``maxConcurrency``; docs/admission.md, "The ITL budget, learned").

``generation`` is ``term * 2**32 + n``: ``term`` the leader's (the Lease's
``leaseTransitions`` when it took it, ``adapters.lease``), ``n`` the publications accepted in that
term; so it increases with every publication and across leaders (a new leader's first document is
newer than anything its predecessor served), and a consumer can tell a new document from the one it
holds. ``leader`` is the identity of the daemon that wrote it (null outside ``autoscaler run``).
A set with an unknown priority or a value that is not a finite
number >= 0 (``check_thresholds``) is refused (``invalid``) and the document keeps the last good one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from autoscaler.loop.actuate import APPLIED, ActuationResult, ActuationStatus, AdmissionSink
from autoscaler.workload.types import PRIORITIES

API_VERSION = "autoscaler/v1"
KIND = "AdmissionThresholds"
PATH = "/v1/admission"
TERM_BITS = 32
"""A generation is ``term << TERM_BITS`` plus the publications of the term (module docstring): 2**32
publications, one per service per tick, outlast any leadership."""
MAX_THRESHOLD_S = 1e9
"""The largest threshold accepted, seconds (about 32 years): any longer wait is no limit, and an
integer past it may not even convert to a float."""


def check_thresholds(thresholds: Mapping[str, Any]) -> str | None:
    """Why ``thresholds`` (priority name -> seconds, None for no limit) cannot be applied, or None:
    an unknown priority, or a value that is not a finite number >= 0 (NaN, negative, infinite, text)."""
    for name, x in thresholds.items():
        if name not in PRIORITIES:
            return f"unknown priority '{name}' (known: {', '.join(PRIORITIES)})"
        if x is None:
            continue
        if isinstance(x, bool) or not isinstance(x, int | float) or not 0 <= x < MAX_THRESHOLD_S:
            shown = x if not isinstance(x, int) or x < MAX_THRESHOLD_S else f"an integer of {len(str(x))} digits"
            return f"threshold of '{name}' must be a finite number of seconds >= 0 (below 1e9) or null, got {shown!r}"
    return None


def check_itl_budget(itl_budget: Mapping[str, Any]) -> str | None:
    """Why ``itl_budget`` (variant name -> requests in flight per replica) cannot be published, or
    None: a name that is not text, or a value that is not a whole number in ``[1, 2**31)``."""
    for name, n in itl_budget.items():
        if not isinstance(name, str) or not name:
            return f"ITL budget: variant name must be text, got {name!r}"
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n < 2 ** 31:
            return f"ITL budget of '{name}' must be a whole number of requests >= 1, got {n!r}"
    return None


class AdmissionDocument:
    """The latest good thresholds per service, as the document of the module docstring (thread-safe).

    ``publish`` is an ``AdmissionSink``: the loop's writes land here and a server reads ``json()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._services: dict[str, dict[str, Any]] = {}
        self.generation = 0
        self.leader: str | None = None

    def begin(self, leader: str, term: int) -> None:
        """Start ``leader``'s term ``term`` (>= 0): an empty document whose generations start at
        ``term * 2**32`` (module docstring)."""
        if term < 0:
            raise ValueError(f"term must be >= 0, got {term}")
        with self._lock:
            self._services = {}
            self.generation = term << TERM_BITS
            self.leader = leader

    def publish(self, service: str, thresholds: Mapping[str, float | None],
                itl_budget: Mapping[str, int] | None = None) -> ActuationResult:
        """Store ``thresholds`` for ``service`` (priorities left out keep theirs) and ``itl_budget``
        (variants left out keep theirs), or refuse both."""
        why = check_thresholds(thresholds) or check_itl_budget(itl_budget or {})
        if why is not None:
            return ActuationResult(ActuationStatus.INVALID, f"{service}: {why}")
        with self._lock:
            entry = self._services.setdefault(service, {"thresholds": {}})
            entry["thresholds"].update({p: None if x is None else float(x) for p, x in thresholds.items()})
            if itl_budget:
                entry.setdefault("itl_budget", {}).update(itl_budget)
            entry["updated_unix_s"] = time.time()
            self.generation += 1
        return APPLIED

    def document(self) -> dict[str, Any]:
        """The document (module docstring)."""
        with self._lock:
            services = {k: {"thresholds": dict(v["thresholds"]),
                            **({"itl_budget": dict(v["itl_budget"])} if "itl_budget" in v else {}),
                            "updated_unix_s": v["updated_unix_s"]}
                        for k, v in self._services.items()}
            return {"apiVersion": API_VERSION, "kind": KIND, "generation": self.generation, "leader": self.leader,
                    "unit": "seconds of estimated queue wait", "priorities": list(PRIORITIES), "services": services}

    def json(self) -> bytes:
        """The document as UTF-8 JSON."""
        return (json.dumps(self.document(), indent=2) + "\n").encode()


def parse_document(text: str | bytes) -> dict[str, dict[str, float | None]]:
    """service -> priority -> threshold (seconds, None for no limit) from a document, as a gateway reads it.

    Raises:
        ValueError: not JSON, another apiVersion or kind, or a malformed threshold (``check_thresholds``).
    """
    services = _services(text)
    out: dict[str, dict[str, float | None]] = {}
    for service, entry in services.items():
        thresholds = entry.get("thresholds") if isinstance(entry, dict) else None
        if not isinstance(thresholds, dict):
            raise ValueError(f"admission document: services.{service}.thresholds is not a mapping")
        why = check_thresholds(thresholds)
        if why is not None:
            raise ValueError(f"admission document: services.{service}: {why}")
        out[service] = {p: None if x is None else float(x) for p, x in thresholds.items()}
    return out


def parse_itl_budgets(text: str | bytes) -> dict[str, dict[str, int]]:
    """service -> variant -> ITL budget (requests in flight per replica) from a document, for the
    services that carry one (``itl_budget``, module docstring).

    Raises:
        ValueError: as ``parse_document``, or a malformed budget (``check_itl_budget``).
    """
    parse_document(text)
    out: dict[str, dict[str, int]] = {}
    for service, entry in _services(text).items():
        budget = entry.get("itl_budget")
        if budget is None:
            continue
        why = "not a mapping" if not isinstance(budget, dict) else check_itl_budget(budget)
        if why is not None:
            raise ValueError(f"admission document: services.{service}.itl_budget: {why}")
        out[service] = dict(budget)
    return out


def _services(text: str | bytes) -> dict[str, Any]:
    """The ``services`` mapping of a document whose JSON, apiVersion and kind are right.

    Raises:
        ValueError: not JSON, another apiVersion or kind, or ``services`` not a mapping.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"admission document: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (UnicodeDecodeError, RecursionError) as exc:  # not text, or nested past the parser's depth
        raise ValueError(f"admission document: not JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise ValueError(f"admission document: expected apiVersion {API_VERSION} and kind {KIND}")
    services = doc.get("services") or {}
    if not isinstance(services, dict):
        raise ValueError("admission document: services is not a mapping")
    return services


class TeeSink:
    """Publishes to several sinks in order (the simulator's gateway, or the daemon's ConfigMap, then the
    served document), stopping at the first that fails: a later sink never holds thresholds an
    earlier one refused or could not write, so the ConfigMap and the endpoint never disagree
    silently. The result is that failure, else applied."""

    def __init__(self, *sinks: AdmissionSink) -> None:
        self.sinks = sinks

    def publish(self, service: str, thresholds: Mapping[str, float | None],
                itl_budget: Mapping[str, int] | None = None) -> ActuationResult:
        """Publish to each sink in turn until one fails."""
        for sink in self.sinks:
            res = sink.publish(service, thresholds, itl_budget)
            if not res.ok:
                return res
        return APPLIED
