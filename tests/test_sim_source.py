"""Tests of the simulator-backed metrics source (autoscaler.adapters.simulator.SimMetricsSource)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autoscaler.adapters.simulator import SimMetricsSource
from autoscaler.simulator.metrics import ReplicaMetrics


def test_young_pod_rate_is_over_its_serving_time_only() -> None:
    # A pod created at t=0 that became ready at t=100 and completed 30 requests by t=130: with a 60 s
    # window its rate is 30 / (130 - 100) = 1 req/s (counters start at zero when the server starts),
    # not 30 / 60 (the window) nor 30 / 130 (including provisioning).
    metrics = ReplicaMetrics()
    for _ in range(30):
        metrics.e2e.observe(1.0)
    pod = SimpleNamespace(rid=7, created_s=0.0, ready_s=100.0, metrics=metrics)
    source = SimMetricsSource(sim=None, window_s=60.0)  # type: ignore[arg-type]
    new, old, dt = source._window_delta(pod, 130.0)  # type: ignore[arg-type]
    assert dt == pytest.approx(30.0)
    assert (new["e2e_count"] - old.get("e2e_count", 0.0)) / dt == pytest.approx(1.0)


def test_window_means_are_sum_over_count_across_pods() -> None:
    # Pod A (window 60 s): 3 TTFTs of 0.2 s and 1 of 1.0 s; pod B: 2 of 0.5 s. PromQL's
    # sum(rate(_sum)) / sum(rate(_count)) with equal windows: (0.6 + 1.0 + 1.0) / 6 = 0.4333 s.
    # TPOT: A has 2 requests at 0.02 s, B one at 0.05 s -> (0.04 + 0.05) / 3 = 0.03 s.
    a, b = ReplicaMetrics(), ReplicaMetrics()
    for x in (0.2, 0.2, 0.2, 1.0):
        a.ttft.observe(x)
    for x in (0.5, 0.5):
        b.ttft.observe(x)
    a.tpot.observe(0.02, 2)
    b.tpot.observe(0.05)
    source = SimMetricsSource(sim=None, window_s=60.0)  # type: ignore[arg-type]
    pods = []
    for rid, m in ((1, a), (2, b)):
        pod = SimpleNamespace(rid=rid, created_s=0.0, ready_s=0.0, metrics=m, state="ready")
        pods.append((pod, *source._window_delta(pod, 60.0)))  # type: ignore[arg-type]
    sig = source._signals(pods)  # type: ignore[arg-type]
    assert sig["ttft_mean_s"] == pytest.approx(2.6 / 6)
    assert sig["tpot_mean_s"] == pytest.approx(0.03)


def test_window_mean_is_unknown_without_observations() -> None:
    pod = SimpleNamespace(rid=3, created_s=0.0, ready_s=0.0, metrics=ReplicaMetrics(), state="ready")
    source = SimMetricsSource(sim=None, window_s=60.0)  # type: ignore[arg-type]
    sig = source._signals([(pod, *source._window_delta(pod, 60.0))])  # type: ignore[arg-type]
    assert sig["ttft_mean_s"] is None and sig["tpot_mean_s"] is None
