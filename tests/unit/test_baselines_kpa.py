"""Knative KPA baseline (controllers.baselines.knative): panic entry and exit, no scale-down in panic,
rate limits and windows, from knative/serving config/core/configmaps/autoscaler.yaml
(``docs/anchors.md#knative-kpa``)."""

from __future__ import annotations

import pytest

from autoscaler.state import ServiceEstimate, Signals, VariantObservation
from controllers.baselines.knative import KnativeKPAController, KPAState, kpa_scale


def test_enters_panic_at_twice_the_target_and_never_scales_down_in_panic() -> None:
    s = KPAState()
    # 2 ready, target 10: panic window 40 -> dppc 4, 4/2 = 2.0 >= 200 % -> panic; desired max(2, 4) = 4
    n, s = kpa_scale(s, stable=20.0, panic=40.0, ready=2, now=100.0, target=10.0)
    assert (n, s) == (4, KPAState(100.0, 4))
    # load gone: stable 10 -> dspc 1 clamped to floor(4/2) = 2; still in panic (not 60 s yet) -> hold 4
    n, s = kpa_scale(s, stable=10.0, panic=5.0, ready=4, now=130.0, target=10.0)
    assert (n, s.panic_time_s) == (4, 100.0)
    # exactly 60 s after the last over-threshold tick: panic_time + 60 < now is false -> still 4
    n, s = kpa_scale(s, stable=10.0, panic=5.0, ready=4, now=160.0, target=10.0)
    assert n == 4
    # 62 s after: leave panic, back to the stable count (clamped to floor(4/2) = 2)
    n, s = kpa_scale(s, stable=10.0, panic=5.0, ready=4, now=162.0, target=10.0)
    assert (n, s) == (2, KPAState())


def test_panic_is_extended_while_over_threshold_and_raises_its_floor() -> None:
    s = KPAState(100.0, 4)
    # still over (dppc 8 / 4 ready = 2): panic_time moves to 150, max panic pods to 8
    n, s = kpa_scale(s, stable=20.0, panic=80.0, ready=4, now=150.0, target=10.0)
    assert (n, s) == (8, KPAState(150.0, 8))


def test_scale_rates() -> None:
    # down: at most to floor(ready / 2); up: at most ceil(1000 * ready)
    assert kpa_scale(KPAState(), stable=0.0, panic=0.0, ready=9, now=0.0, target=10.0)[0] == 4
    assert kpa_scale(KPAState(), stable=0.0, panic=0.0, ready=0, now=0.0, target=10.0)[0] == 0
    n, _ = kpa_scale(KPAState(), stable=500.0, panic=500.0, ready=1, now=0.0, target=10.0,
                     max_scale_up_rate=3.0)
    assert n == 3


def estimate(t: float, ready: int, running: float) -> ServiceEstimate:
    return ServiceEstimate(service="svc", time_s=t, signals=Signals.of({"running": running, "queue_length": 0.0}),
                           variants={"h100": VariantObservation(ready, 0)}, weights={"h100": 10.0}, idle=False,
                           capacity_rps=0.0, ready_capacity_rps=0.0, starting=0)


def test_controller_windows_and_start_in_panic(make_fleet) -> None:
    svc = make_fleet(replicas=3, min_replicas=0, max_replicas=50).services[0]
    kpa = KnativeKPAController(target=10.0)
    # a new autoscaler with 3 ready pods starts in panic at 3: low load does not scale it down
    assert kpa.decide(estimate(2.0, 3, 5.0), svc).desired == {"h100": 3}
    # samples every 2 s; at t=8 the 6 s panic window (2, 8] holds t=4, 6, 8 = 5, 5, 65 -> mean 25,
    # dppc 3 < 2*3; the 60 s stable window holds 5, 5, 5, 65 -> 20 -> dspc 2; panic keeps 3
    for t in (4.0, 6.0):
        kpa.decide(estimate(t, 3, 5.0), svc)
    assert kpa.decide(estimate(8.0, 3, 65.0), svc).desired == {"h100": 3}
    # t=10: panic (4, 10] = 5, 65, 65 -> 45 -> dppc 5; stable 29 -> 3; desired 5; 5/3 < 2 so no extension
    assert kpa.decide(estimate(10.0, 3, 65.0), svc).desired == {"h100": 5}
    # the start panic began at t=2: it ends at the first tick after t=62 (no extension since)
    for t in range(12, 63, 2):
        assert kpa.decide(estimate(float(t), 3, 0.0), svc).desired == {"h100": 5}, t
    # t=64: stable mode; the stable window (4, 64] holds 30 samples (t=6..64) summing 5+65+65 = 135:
    # mean 4.5 -> dspc 1, within [floor(3/2), 3000]
    assert kpa.decide(estimate(64.0, 3, 0.0), svc).desired == {"h100": 1}


def test_controller_passes_the_scale_down_delay_and_activation_scale(make_fleet) -> None:
    svc = make_fleet(replicas=4, min_replicas=0, max_replicas=50).services[0]
    delayed, plain = KnativeKPAController(target=10.0, scale_down_delay_s=120.0), KnativeKPAController(target=10.0)
    # 4 ready pods: both start in panic at t=2 (concurrency 40 -> 4) and hold 4 while the panic lasts
    for t in range(2, 63, 2):
        est = estimate(float(t), 4, 40.0 if t == 2 else 0.0)
        assert delayed.decide(est, svc).desired == plain.decide(est, svc).desired == {"h100": 4}, t
    # t=64: panic over; the stable window (4, 64] is all zeros -> 0, floored at 4 / 2 = 2 ...
    assert plain.decide(estimate(64.0, 4, 0.0), svc).desired == {"h100": 2}
    # ... but the delay window (60 buckets of 2 s) still holds the 4 recorded up to t=62 (bucket 31)
    for t in range(64, 181, 2):
        assert delayed.decide(estimate(float(t), 4, 0.0), svc).desired == {"h100": 4}, t
    # t=182 is bucket 91: 91 - 31 = 60 buckets, the 4 has left the window
    assert delayed.decide(estimate(182.0, 4, 0.0), svc).desired == {"h100": 2}
    # activation scale 3, 1 ready pod: 5 in flight (dspc 1, no panic at 1 / 1) asks for 3
    kpa = KnativeKPAController(target=10.0, activation_scale=3)
    assert kpa.decide(estimate(2.0, 1, 5.0), svc).desired == {"h100": 3}


@pytest.mark.parametrize("kwargs", [dict(activation_scale=0), dict(scale_down_delay_s=-1.0),
                                    dict(scale_down_delay_s=1.5)])
def test_controller_rejects_what_knative_rejects(kwargs: dict[str, float]) -> None:
    # activation-scale >= 1; scale-down-delay >= 0 in whole seconds (pkg/autoscaler/config/config.go)
    with pytest.raises(ValueError, match="kpa"):
        KnativeKPAController(target=10.0, **kwargs)  # type: ignore[arg-type]
