"""The simulator-backed metrics source (autoscaler.adapters.simulator): it must show the controller what a
Prometheus scraping the pods would, so its ``rate()`` is checked against a real Prometheus on the same
samples, and its signals against hand calculations on pods scraped at known times."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support.promserver import backfill

from autoscaler.adapters.simulator import SimMetricsSource, extrapolated_rate
from autoscaler.faults.promserver import PromServer
from autoscaler.simulator.fleet import VariantCounts
from autoscaler.simulator.metrics import ReplicaMetrics

# (name, [(time s, counter value)]) : full coverage, a late start with a non-zero first sample (a new pod
# scraped for the first time), sparse samples, and a series that ends early (a pod that went away).
SERIES = {
    "full": [(t, float(t)) for t in range(15, 301, 15)],
    "late": [(t, 20.0 + (t - 105)) for t in range(105, 301, 15)],
    "sparse": [(40, 100.0), (160, 160.0), (280, 400.0)],
    "ends": [(t, 2.0 * t) for t in range(15, 181, 15)],
}


def test_extrapolated_rate_by_hand() -> None:
    # full: 285 over 285 s, 15 s to each edge at most (the zero point is 15 s before the first sample):
    # extrapolated to 300 s, 300 / 300 = 1/s.
    t, v = (np.array(x) for x in zip(*SERIES["full"], strict=True))
    assert extrapolated_rate(t, v, 0.0, 300.0) == pytest.approx(1.0)
    # late: 195 over 195 s; 105 s to the window start is more than 1.1 sample intervals, so half an
    # interval (7.5 s) is added there and nothing at the end: 195 x 202.5 / 195 / 300 = 0.675/s,
    # not the 215 / 300 the pod served since t = 85.
    t, v = (np.array(x) for x in zip(*SERIES["late"], strict=True))
    assert extrapolated_rate(t, v, 0.0, 300.0) == pytest.approx(202.5 / 300)
    assert extrapolated_rate(np.array([10.0]), np.array([5.0]), 0.0, 300.0) is None  # one sample: no rate


def test_extrapolated_rate_equals_a_real_prometheus(tmp_path: Path) -> None:
    base = 1_700_000_000  # fixed unix time, far in the past: backfilled, then queried at base + 300
    lines = ["# HELP c test counter", "# TYPE c counter"]
    for name, samples in SERIES.items():
        lines += [f'c_total{{s="{name}"}} {v} {base + t}' for t, v in samples]
    (tmp_path / "in.om").write_text("\n".join([*lines, "# EOF", ""]))
    backfill(tmp_path / "in.om", tmp_path / "tsdb")
    prom = PromServer(tmp_path / "prom", tsdb=tmp_path / "tsdb").start()
    try:
        got = {r["metric"]["s"]: float(r["value"][1])
               for r in prom.query("rate(c_total[300s])", at=base + 300)}
    finally:
        prom.stop()
    for name, samples in SERIES.items():
        inside = [(t, v) for t, v in samples if t >= 0]
        t, v = (np.array(x, dtype=float) for x in zip(*inside, strict=True))
        assert extrapolated_rate(t, v, 0.0, 300.0) == pytest.approx(got[name], rel=1e-9), name


class _Pod(SimpleNamespace):
    def refresh_gauges(self) -> None:
        """The stub's gauges are set by the test."""


def _stub(pods: list[_Pod]) -> SimpleNamespace:
    svc = SimpleNamespace(replicas=pods, arrivals=0, arrivals_by_priority=[0, 0, 0], flow=None, gateway=deque(),
                          pd=None, variants={"h100": None}, arrival_bins=lambda now: (0, 0, 0),
                          counts=lambda v: VariantCounts(ready=len(pods)))
    return SimpleNamespace(services={"svc": svc})


def test_signals_are_promql_over_the_scraped_samples() -> None:
    # Two pods scraped every 15 s over a 60-s window. Pod A: 3 TTFTs of 0.2 s and 1 of 1.0 s before
    # t=15, then nothing; pod B (scraped from t=15 only): 2 of 0.5 s between t=15 and t=30. The means
    # are sum(rate(_sum)) / sum(rate(_count)): only increases inside each pod's samples count, so A's
    # observations before its first sample at t=15 and B's flat series give no rate.
    a = _Pod(rid=1, variant="h100", state="ready", ready_s=0.0, metrics=ReplicaMetrics())
    b = _Pod(rid=2, variant="h100", state="ready", ready_s=10.0, metrics=ReplicaMetrics())
    src = SimMetricsSource(_stub([a]), window_s=60.0)  # type: ignore[arg-type]
    for x in (0.2, 0.2, 0.2, 1.0):
        a.metrics.ttft.observe(x)
    src.scrape(15.0)
    src.sim.services["svc"].replicas.append(b)
    src.scrape(15.0)  # once per instant: B waits for the next scrape
    src.scrape(30.0)
    for x in (0.5, 0.5):
        b.metrics.ttft.observe(x)
    a.metrics.tpot.observe(0.02, 2)
    b.metrics.tpot.observe(0.05)
    a.metrics.kv_usage, b.metrics.kv_usage = 0.2, 0.6
    sig = src.observe(45.0)["svc"].signals
    # B: 2 TTFTs (sum 1.0) between its samples at 30 and 45, A: none after t=15. Each pod's rate is
    # extrapolated by the same factor on _sum and _count, so the mean is 1.0 / 2 exactly.
    assert sig.ttft_mean_s == pytest.approx(0.5)
    assert sig.tpot_mean_s == pytest.approx((0.04 + 0.05) / 3)
    assert sig.kv_usage == pytest.approx(0.4)  # gauges at their latest sample, averaged
    # a pod scraped once has gauges but no rate; a service with no pod scraped has no signal
    src2 = SimMetricsSource(_stub([_Pod(rid=3, variant="h100", state="ready", ready_s=0.0,
                                        metrics=ReplicaMetrics())]), window_s=60.0)  # type: ignore[arg-type]
    sig2 = src2.observe(15.0)["svc"].signals
    assert sig2.request_rate_rps is None and sig2.ttft_mean_s is None and sig2.running == 0.0


def test_history_is_the_span_of_the_services_samples() -> None:
    pod = _Pod(rid=1, variant="h100", state="ready", ready_s=0.0, metrics=ReplicaMetrics())
    src = SimMetricsSource(_stub([pod]), window_s=300.0)  # type: ignore[arg-type]
    assert src.observe(15.0)["svc"].history_s == 0.0
    src.scrape(30.0)
    assert src.observe(60.0)["svc"].history_s == 45.0
