"""Dynamo throughput planner baseline (controllers.baselines.dynamo, .predictors); ai-dynamo/dynamo planner
throughput_scaling.py, defaults.py and load/predictors.py (``docs/anchors.md#dynamo-planner``)."""

from __future__ import annotations

import math

import pytest

from autoscaler.config import EngineConfig
from autoscaler.state import ServiceEstimate, Signals, VariantObservation
from controllers.baselines.dynamo import DynamoPlanner, planner_replicas
from controllers.baselines.predictors import ConstantPredictor, KalmanPredictor
from models.capacity import ReplicaSpec, RequestMix, replica_capacity


# ------------------------------------------------------------------------------------ predictors
def test_constant_predictor_skips_leading_zeros_and_reads_nan_as_zero() -> None:
    p = ConstantPredictor()
    p.add(0.0)
    assert p.predict() is None
    for v in (5.0, 7.0):
        p.add(v)
    assert p.predict() == 7.0
    p.add(float("nan"))
    assert p.predict() == 0.0


def test_kalman_local_linear_trend_by_hand() -> None:
    p = KalmanPredictor(min_points=2)
    p.add(10.0)
    assert p.predict() == 10.0  # one point: the last value
    p.add(12.0)
    # x0 = [10, 0], P0 = 1000 I. Predict: P = F P F' + Q = [[2001, 1000], [1000, 1000.1]];
    # S = 2001 + 10 = 2011; K = [2001, 1000] / 2011; innovation 12 - 10 = 2.
    level = 10 + 2 * 2001 / 2011
    trend = 2 * 1000 / 2011
    assert p.predict() == pytest.approx(level + trend, rel=1e-12)
    # before min_points values the forecast is the last value
    q = KalmanPredictor()
    for v in (10.0, 12.0, 14.0, 16.0):
        q.add(v)
    assert q.predict() == 16.0


def test_kalman_follows_a_constant_series_exactly() -> None:
    p = KalmanPredictor()
    for _ in range(8):
        p.add(100.0)
    assert p.predict() == pytest.approx(100.0, abs=1e-9)


# ------------------------------------------------------------------------------------ planner
def estimate(t: float, current: int, rate: float | None, prompt: float, gen: float, hit: float | None,
             arrivals: float | None = -1.0) -> ServiceEstimate:
    """Signals of one interval; ``arrivals`` defaults to the completion rate (a fleet keeping up)."""
    sig = {"request_rate_rps": rate, "prompt_tokens_rps": prompt, "generation_tokens_rps": gen,
           "prefix_hit_rate": hit, "arrival_rate_rps": rate if arrivals == -1.0 else arrivals}
    return ServiceEstimate(service="svc", time_s=t, signals=Signals.of(sig),
                           variants={"h100": VariantObservation(current, 0)},
                           weights={"h100": 10.0}, idle=False, capacity_rps=0.0, ready_capacity_rps=0.0, starting=0)


def test_planner_sizes_for_demand_at_its_targets(make_fleet) -> None:
    svc = make_fleet(replicas=1, min_replicas=0, max_replicas=40).services[0]
    planner = DynamoPlanner(EngineConfig(), predictor="constant")
    # 50 req/s of 1,000-in / 100-out, 20 % cached: demand 50 req/s over per-replica rate at ttft 0.5, itl 0.05
    d = planner.decide(estimate(180.0, 1, 50.0, 50000.0, 5000.0, 0.2), svc)
    spec = ReplicaSpec.of(svc.variants[0], EngineConfig())
    per_replica = replica_capacity(spec, RequestMix.from_means(1000, 100, 0.2), 0.5, 0.05).rps
    assert d.desired == {"h100": math.ceil(50.0 / per_replica)}


def test_planner_sizes_for_arrivals_when_completions_stall(make_fleet) -> None:
    # Saturated: 40 req/s arrive, 8 complete. The planner counts arrivals at its frontend, so it sizes
    # for 40, with the lengths of the requests that did complete.
    svc = make_fleet(replicas=1, min_replicas=0, max_replicas=40).services[0]
    planner = DynamoPlanner(EngineConfig(), predictor="constant")
    d = planner.decide(estimate(180.0, 2, 8.0, 8000.0, 800.0, None, arrivals=40.0), svc)
    spec = ReplicaSpec.of(svc.variants[0], EngineConfig())
    per_replica = replica_capacity(spec, RequestMix.from_means(1000, 100), 0.5, 0.05).rps
    assert d.desired == {"h100": math.ceil(40.0 / per_replica)}
    # the next interval nothing completes: the last ISL and OSL stand
    d = planner.decide(estimate(360.0, 2, 0.0, 0.0, 0.0, None, arrivals=40.0), svc)
    assert not d.hold and d.desired == {"h100": math.ceil(40.0 / per_replica)}


def test_planner_skips_on_missing_or_zero_traffic_and_keeps_min_endpoint(make_fleet) -> None:
    svc = make_fleet(replicas=1, min_replicas=0, max_replicas=40).services[0]
    planner = DynamoPlanner(EngineConfig())
    assert planner.decide(estimate(180.0, 3, 0.0, 0.0, 0.0, None), svc).hold  # 0/0: NaN, skipped
    assert planner.decide(estimate(360.0, 3, None, 10.0, 1.0, None), svc).hold
    # a tiny demand still keeps one endpoint
    assert planner_replicas(0.0, svc, {"h100": 3}, {"h100": 10.0}) == {"h100": 1}
    with pytest.raises(ValueError, match="predictor"):
        DynamoPlanner(EngineConfig(), predictor="prophet")
