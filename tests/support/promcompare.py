"""Helpers for the tests comparing two ways of reading Prometheus: a query runner that counts what it
sends, and a field-by-field comparison of observations."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
import requests

from autoscaler.adapters.prometheus import LiveRunner
from autoscaler.state import ServiceObservation


class Counting:
    """A ``QueryRunner`` counting what it sends; ``fail`` names queries it fails (a connection error)."""

    def __init__(self, inner: LiveRunner, fail: str | None = None) -> None:
        self.inner = inner
        self.fail = fail
        self.sent: list[str] = []
        self._lock = threading.Lock()

    def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
        with self._lock:
            self.sent.append(promql)
        if self.fail is not None and self.fail in promql:
            raise requests.ConnectionError("[Errno 111] Connection refused")
        return self.inner.query(promql, at)


REL = 1e-12
"""How far a value read from the per-pod aggregation (``prometheus.aggregate``) may be from the scope's own
query's: the same series added in another order (``adapters.prometheus_pods``), a few ulps."""


def same(a: Any, b: Any, where: str, exact: bool) -> None:
    """``a == b``, floats within ``REL`` unless ``exact``, dataclasses and mappings field by field."""
    if is_dataclass(a) and is_dataclass(b):
        for f in fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}", exact)
    elif isinstance(a, Mapping) and isinstance(b, Mapping):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}[{k}]", exact)
    elif isinstance(a, float) and isinstance(b, float) and not exact:
        assert a == pytest.approx(b, rel=REL) or (math.isnan(a) and math.isnan(b)), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_same(batched: dict[str, ServiceObservation], apart: dict[str, ServiceObservation],
                exact: bool = False) -> None:
    """Field by field, each variant's too: equal (both read the same instant), floats within ``REL``
    unless ``exact`` (``batched`` read without the per-pod aggregation)."""
    assert batched.keys() == apart.keys()
    for name in apart:
        same(batched[name], apart[name], name, exact)
