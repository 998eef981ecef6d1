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
