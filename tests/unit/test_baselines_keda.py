"""KEDA Prometheus-scaler baseline (controllers.baselines.keda): activation, cooldown and fallback
as kedacore/keda-docs scaledobject-spec.md and scaling-deployments.md state them (``docs/anchors.md#keda``)."""

from __future__ import annotations

from autoscaler.state import ServiceEstimate, Signals, VariantObservation
from controllers.baselines.keda import KedaController, KedaState, keda_activation


def estimate(t: float, current: int, queue: float | None, running: float | None = 0.0) -> ServiceEstimate:
    return ServiceEstimate(service="svc", time_s=t, signals=Signals.of({"queue_length": queue, "running": running}),
                           variants={"h100": VariantObservation(current, 0)}, weights={"h100": 10.0}, idle=False,
                           capacity_rps=0.0, ready_capacity_rps=0.0, starting=0)


def test_activation_threshold_overrides_scaling(make_fleet) -> None:
    # docs/anchors.md#keda: threshold 10, activation 50, metric 40 gives 0 replicas (minReplicaCount 0).
    svc = make_fleet(replicas=2, min_replicas=0, max_replicas=20).services[0]
    keda = KedaController(threshold=10.0, metric="queue", activation_threshold=50.0)
    assert keda.decide(estimate(0.0, 2, 40.0), svc).desired == {"h100": 0}


def test_activation_wakes_a_target_at_zero_only_above_the_threshold() -> None:
    state = KedaState()
    assert keda_activation(50.0, 0, state, 0.0, activation_threshold=50.0) == 0  # not strictly greater
    assert keda_activation(50.5, 0, state, 30.0, activation_threshold=50.0) == 1
    assert state.last_active_s == 30.0
    assert keda_activation(60.0, 3, state, 60.0, activation_threshold=50.0) is None  # active: the HPA decides
    # a failed query is not read as 0: no sleep even long after the last activity
    assert keda_activation(None, 3, state, 1000.0) is None


def test_cooldown_period_before_scaling_to_zero() -> None:
    state = KedaState(last_active_s=0.0)
    # inactive polls every 30 s: to zero once more than 300 s have passed since the last activity
    for t in range(30, 301, 30):
        assert keda_activation(0.0, 2, state, float(t)) is None, t
    assert keda_activation(0.0, 2, state, 330.0) == 0


def test_external_metric_proposal_and_minimum_one_when_min_count_is_positive(make_fleet) -> None:
    svc = make_fleet(replicas=2, min_replicas=1, max_replicas=20).services[0]
    keda = KedaController(threshold=10.0, metric="concurrency")
    # concurrency 45 + 5 = 50 over 2 pods of 10 -> ratio 2.5 -> ceil(50/10) = 5, but KEDA's HPA has no
    # behavior: the legacy limit max(2 * 2, 4) = 4
    assert keda.decide(estimate(0.0, 2, 5.0, running=45.0), svc).desired == {"h100": 4}
    # from 4: limit max(8, 4) = 8, the proposal 5 passes
    assert keda.decide(estimate(15.0, 4, 5.0, running=45.0), svc).desired == {"h100": 5}
    # 0 in flight: proposal 0, held by the highest recommendation of [now - 300, now] (5 at t=15)
    assert keda.decide(estimate(30.0, 5, 0.0, running=0.0), svc).desired == {"h100": 5}
    assert keda.decide(estimate(315.0, 5, 0.0, running=0.0), svc).desired == {"h100": 5}
    # t=330: only 0s are left in [30, 330]; the HPA minimum of 1
    assert keda.decide(estimate(330.0, 5, 0.0, running=0.0), svc).desired == {"h100": 1}


def test_fallback_after_consecutive_failures(make_fleet) -> None:
    svc = make_fleet(replicas=2, min_replicas=1, max_replicas=20).services[0]
    keda = KedaController(threshold=10.0, metric="queue", fallback_failures=3, fallback_replicas=6)
    for t in (0.0, 15.0, 30.0):  # failures 1..3 are not > failureThreshold 3: the HPA skips the sync
        assert keda.decide(estimate(t, 2, None), svc).hold
    # fourth failure: the scaler reports 10 * 6 -> ceil(60/10) = 6; the legacy limit from 2 is max(4, 4) = 4
    assert keda.decide(estimate(45.0, 2, None), svc).desired == {"h100": 4}
    # fifth: from 4 the limit is 8, so 6
    assert keda.decide(estimate(60.0, 4, None), svc).desired == {"h100": 6}
    # a success resets the count: queue 60 over 6 pods is ratio 1.0 -> keep 6
    d = keda.decide(estimate(75.0, 6, 60.0), svc)
    assert d.desired == {"h100": 6} and keda.states["svc"].failures == 0
