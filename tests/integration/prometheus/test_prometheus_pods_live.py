"""The per-pod aggregation's client-side reading (``autoscaler.adapters.prometheus_pods``) against a real
Prometheus v2.42 on constant vectors: the quantile of hand-made buckets, as ``histogram_quantile``
computes it (no scrape: each bucket is ``label_replace(vector(count), "le", bound, "", "")``)."""

from __future__ import annotations

import json
import math
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from autoscaler.adapters.prometheus_pods import bucket_quantile
from autoscaler.faults.promserver import PromServer


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    server = PromServer(tmp_path_factory.mktemp("pods-live") / "prom")
    with server:
        yield server


def instant(prom: PromServer, promql: str) -> tuple[int, Any]:
    """(HTTP status, ``data.result`` or Prometheus's error) of ``promql`` at a fixed time."""
    q = urllib.parse.urlencode({"query": promql, "time": "1000"})
    try:
        with urllib.request.urlopen(f"{prom.url}/api/v1/query?{q}", timeout=10) as r:
            return r.status, json.loads(r.read())["data"]["result"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()).get("error")


def _number(x: float) -> str:
    return "NaN" if math.isnan(x) else ("+Inf" if x == math.inf else ("-Inf" if x == -math.inf else repr(x)))


def prometheus_quantile(prom: PromServer, q: float, buckets: list[tuple[str, float]]) -> float:
    parts = " or ".join(f'label_replace(vector({_number(c)}), "le", "{le}", "", "")' for le, c in buckets)
    status, result = instant(prom, f"histogram_quantile({q!r}, {parts})")
    assert status == 200 and len(result) == 1, result
    return float(result[0]["value"][1])


@pytest.mark.parametrize(("q", "buckets"), [
    (0.5, [("0.1", 2.0), ("0.5", 6.0), ("1", 10.0), ("+Inf", 10.0)]),
    (0.0, [("0.1", 0.0), ("0.25", 5.0), ("+Inf", 10.0)]),  # rank 0 in an empty first bucket: 0 / 0
    (0.0, [("-1", 0.0), ("0.1", 0.0), ("+Inf", 3.0)]),
    (0.1, [("0.05", 1.0), ("1", math.nan), ("+Inf", 1.0)]),  # a NaN count: Go's binary search
    (0.5, [("-1", 1.0), ("0", 0.0), ("0.25", 5.0), ("0.5", math.nan), ("1", 8.0), ("2.5", math.nan), ("+Inf", 3.0)]),
    (0.0, [("-1", math.nan), ("0", 2.0), ("0.1", 8.0), ("0.5", -1.0), ("1", 2.0), ("5", -1.0), ("+Inf", 3.0)]),
    (0.5, [("-1", 8.0), ("0.5", math.nan), ("2.5", 1.0), ("+Inf", 1.0)]),
    (0.9, [("0.1", -2.0), ("0.5", -1.0), ("+Inf", 4.0)]),  # negative counts
    (0.5, [("0.1", 3.0), ("0.5", 1.0), ("1", 2.0), ("+Inf", 4.0)]),  # not monotonic
    (0.5, [("0.1", 1.0), ("1", 2.0)]),  # no +Inf bucket
    (0.99, [("0.1", 1.0), ("+Inf", math.inf)]),
])
def test_bucket_quantile_is_prometheus_histogram_quantile(prom: PromServer, q: float,
                                                          buckets: list[tuple[str, float]]) -> None:
    want = prometheus_quantile(prom, q, buckets)
    got = bucket_quantile(q, [(float(le), c) for le, c in buckets])
    assert got == want or (math.isnan(got) and math.isnan(want)), (got, want)


def test_bucket_quantile_is_prometheus_histogram_quantile_on_random_buckets(prom: PromServer) -> None:
    """NaN, negative and decreasing counts among ordinary ones, drawn with a fixed seed."""
    rng = random.Random(57)
    for _ in range(60):
        finite = rng.sample(["-1", "0", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5"], rng.randint(1, 6))
        bounds = [*sorted(finite, key=float), "+Inf"]
        counts = [rng.choice([0.0, 1.0, 2.0, 3.0, 5.0, 8.0, math.nan, -1.0]) for _ in bounds]
        q = rng.choice([0.0, 0.1, 0.5, 0.9, 0.99, 1.0])
        want = prometheus_quantile(prom, q, list(zip(bounds, counts, strict=True)))
        got = bucket_quantile(q, [(float(b), c) for b, c in zip(bounds, counts, strict=True)])
        assert got == pytest.approx(want, rel=1e-12, nan_ok=True), (q, bounds, counts)
