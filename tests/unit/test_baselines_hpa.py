"""Kubernetes HPA baseline (controllers.baselines.hpa): hand-made metric sequences against the
rules of kubernetes/website horizontal-pod-autoscale.md (``docs/anchors.md#kubernetes-hpa``)."""

from __future__ import annotations

import pytest

from autoscaler.state import PodObservation, ServiceEstimate, Signals, VariantObservation
from controllers.baselines.hpa import HPABehavior, HPAController, hpa_external_replicas, hpa_pod_metric_replicas


def estimate(t: float, kv: list[float], starting: int = 0) -> ServiceEstimate:
    """One variant ``h100``: a ready pod per KV value, plus ``starting`` pods."""
    pods = [PodObservation("h100", k, 0.0, 0.0, k, 0.0) for k in kv]
    return ServiceEstimate(service="svc", time_s=t, signals=Signals.of({}),
                           variants={"h100": VariantObservation(len(kv), starting)}, weights={"h100": 10.0},
                           idle=False, capacity_rps=0.0, ready_capacity_rps=0.0, starting=starting, pods=pods)


# ------------------------------------------------------------------------------------ proposal
def test_proposal_is_ceil_of_ratio_times_ready_pods() -> None:
    # mean 0.9 / target 0.5 = 1.8 -> ceil(1.8 * 3) = ceil(5.4) = 6
    assert hpa_pod_metric_replicas([0.9, 0.9, 0.9], 0, 0.5, 3) == 6
    # mean 0.1 / 0.5 = 0.2 -> ceil(0.2 * 4) = 1
    assert hpa_pod_metric_replicas([0.1] * 4, 0, 0.5, 4) == 1


def test_ratio_within_tolerance_keeps_current() -> None:
    # 0.52 / 0.5 = 1.04 and 0.48 / 0.5 = 0.96 are within 0.1 of 1
    assert hpa_pod_metric_replicas([0.52] * 4, 0, 0.5, 4) == 4
    assert hpa_pod_metric_replicas([0.48] * 4, 0, 0.5, 4) == 4
    # 0.56 / 0.5 = 1.12 is not: ceil(1.12 * 4) = ceil(4.48) = 5
    assert hpa_pod_metric_replicas([0.56] * 4, 0, 0.5, 4) == 5


def test_not_ready_pods_count_as_zero_on_scale_up() -> None:
    # ready ratio 0.42/0.2 = 2.1 would give ceil(2.1*2) = 5; with the 2 starting pods at 0 the ratio is
    # 0.84 / (0.2*4) = 1.05, within tolerance -> keep 4
    assert hpa_pod_metric_replicas([0.42, 0.42], 2, 0.2, 4) == 4
    # 1.5+1.5 over (0.5*3 pods) = 2.0 -> ceil(2.0 * 3) = 6
    assert hpa_pod_metric_replicas([1.5, 1.5], 1, 0.5, 3) == 6
    # zero-filled ratio 0.6/(0.5*4) = 0.3 < 1 flips direction -> keep current
    assert hpa_pod_metric_replicas([0.6], 3, 0.5, 4) == 4


def test_scale_down_ignores_not_ready_pods_and_no_pods_is_no_proposal() -> None:
    # ratio 0.2 <= 1: ready pods only, ceil(0.2 * 2) = 1
    assert hpa_pod_metric_replicas([0.1, 0.1], 2, 0.5, 4) == 1
    assert hpa_pod_metric_replicas([], 3, 0.5, 3) is None


def test_external_average_value() -> None:
    # 40 / (10 * 4) = 1.0 -> keep 4; 70 -> ceil(70/10) = 7; 0 -> 0
    assert hpa_external_replicas(40.0, 10.0, 4) == 4
    assert hpa_external_replicas(70.0, 10.0, 4) == 7
    assert hpa_external_replicas(0.0, 10.0, 4) == 0


# ------------------------------------------------------------------------------------ behaviour
def test_downscale_stabilization_holds_the_highest_recommendation_for_300_s() -> None:
    beh = HPABehavior()
    assert beh.normalize(0.0, 10, 10, 1, 20) == 10
    # proposals of 4 every 15 s: the recommendation 10 made at t=0 stays in (now-300, now] until t=300
    for t in range(15, 300, 15):
        assert beh.normalize(float(t), 4, 10, 1, 20) == 10, t
    # at t=300 the window (0, 300] no longer holds t=0: highest is 4; scale-down is not rate limited
    assert beh.normalize(300.0, 4, 10, 1, 20) == 4


def test_new_hpa_does_not_scale_down_in_its_first_window() -> None:
    beh = HPABehavior()
    # first sync proposes 2 with 6 running: the initial recommendation (6 at t=0) holds it
    assert beh.normalize(0.0, 2, 6, 1, 20) == 6
    assert beh.normalize(285.0, 2, 6, 1, 20) == 6
    assert beh.normalize(300.0, 2, 6, 1, 20) == 2


def test_scale_up_limit_is_max_of_double_and_plus_four_per_period() -> None:
    # from 3: max(ceil(3*2), 3+4) = 7; from 10: max(20, 14) = 20
    assert HPABehavior().normalize(0.0, 50, 3, 1, 100) == 7
    assert HPABehavior().normalize(0.0, 50, 10, 1, 100) == 20
    # bounded by maxReplicas
    assert HPABehavior().normalize(0.0, 50, 10, 1, 12) == 12


def test_scale_up_limit_counts_from_the_period_start() -> None:
    beh = HPABehavior()
    assert beh.normalize(0.0, 50, 3, 1, 100) == 7  # event +4 at t=0
    # 10 s later the period started at 3 replicas: limit max(6, 7) = 7, already there
    assert beh.normalize(10.0, 50, 7, 1, 100) == 7
    # at t=15 the t=0 event has left the 15 s period: from 7, max(14, 11) = 14
    assert beh.normalize(15.0, 50, 7, 1, 100) == 14


# ------------------------------------------------------------------------------------ controller
def test_controller_replays_a_kv_sequence(make_fleet) -> None:
    svc = make_fleet(replicas=2, min_replicas=1, max_replicas=20).services[0]
    hpa = HPAController(target=0.2, behavior="default")
    # t=0: 2 pods at 0.4 -> ratio 2.0 -> ceil(2*2) = 4 (limit max(4, 6) allows it)
    assert hpa.decide(estimate(0.0, [0.4, 0.4]), svc).desired == {"h100": 4}
    # t=15: 2 ready at 0.42 and 2 starting: zero-filled ratio 1.05 -> hold 4
    assert hpa.decide(estimate(15.0, [0.42, 0.42], starting=2), svc).desired == {"h100": 4}
    # t=30..: 4 ready at 0.05 -> ratio 0.25 -> proposal 1, held at 4 by the 300 s window
    assert hpa.decide(estimate(30.0, [0.05] * 4), svc).desired == {"h100": 4}
    assert hpa.decide(estimate(285.0, [0.05] * 4), svc).desired == {"h100": 4}
    # t=300: recommendations after t=0 are 4 (t=15) and 1s -> still 4; t=315: only 1s are left
    assert hpa.decide(estimate(300.0, [0.05] * 4), svc).desired == {"h100": 4}
    assert hpa.decide(estimate(315.0, [0.05] * 4), svc).desired == {"h100": 1}


def test_controller_without_behavior_replays_the_same_sequence_on_the_legacy_path(make_fleet) -> None:
    svc = make_fleet(replicas=2, min_replicas=1, max_replicas=20).services[0]
    hpa = HPAController(target=0.2)  # no behavior field: normalizeDesiredReplicas
    # t=0: proposal 4; limit max(2 * 2, 4) = 4
    assert hpa.decide(estimate(0.0, [0.4, 0.4]), svc).desired == {"h100": 4}
    assert hpa.decide(estimate(15.0, [0.42, 0.42], starting=2), svc).desired == {"h100": 4}
    assert hpa.decide(estimate(30.0, [0.05] * 4), svc).desired == {"h100": 4}
    # the legacy window [now - 300, now] still holds t=15's 4 at t=315; at t=330 only 1s are left
    assert hpa.decide(estimate(315.0, [0.05] * 4), svc).desired == {"h100": 4}
    assert hpa.decide(estimate(330.0, [0.05] * 4), svc).desired == {"h100": 1}


def test_ready_pods_without_a_sample_are_missing_pods(make_fleet) -> None:
    svc = make_fleet(replicas=4, min_replicas=1, max_replicas=20).services[0]
    hpa = HPAController(target=0.5)
    est = estimate(0.0, [0.1, 0.1])
    est.variants["h100"] = VariantObservation(4, 0)  # 4 ready, 2 of them not scraped yet
    # ratio 0.2 < 1: the 2 missing pods count as the target: (0.1 + 0.1 + 0.5 + 0.5) / 4 / 0.5 = 0.6,
    # ceil(0.6 * 4) = 3 (without them: ceil(0.2 * 2) = 1); the initial recommendation (4) holds it
    d = hpa.decide(est, svc)
    assert d.desired == {"h100": 4} and "proposal 3" in d.reason


def test_controller_holds_without_ready_pods_and_rejects_bad_settings(make_fleet) -> None:
    svc = make_fleet(replicas=2, min_replicas=1, max_replicas=20).services[0]
    d = HPAController(target=0.2).decide(estimate(0.0, [], starting=2), svc)
    assert d.hold
    with pytest.raises(ValueError, match="metric"):
        HPAController(target=1.0, metric="cpu")
    with pytest.raises(ValueError, match="target"):
        HPAController(target=0.0)
