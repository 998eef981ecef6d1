"""AIBrix PodAutoscaler baseline (controllers.baselines.aibrix): KPA and APA steps and AIBrix's
stabilisation, with the constants of vllm-project/aibrix pkg/controller/podautoscaler/context/context.go
(``docs/anchors.md#aibrix-kpa-and-apa``)."""

from __future__ import annotations

from autoscaler.state import PodObservation, ServiceEstimate, Signals, VariantObservation
from controllers.baselines.aibrix import AIBrixController, AIBrixKPAState, aibrix_apa, aibrix_kpa, aibrix_stabilize


def test_kpa_stable_mode_desired_count_and_tolerance() -> None:
    # sum 1.0 over 4 pods = 0.25/pod vs 0.5 (outside +-10 %) -> ceil(1.0/0.5) = 2, within [floor(4/2), 8]
    assert aibrix_kpa(AIBrixKPAState(), 1.0, 1.0, 4, 0.5)[0] == 2
    # 2.1 / 4 = 0.525 per pod, 5 % above target: within tolerance -> keep 4
    assert aibrix_kpa(AIBrixKPAState(), 2.1, 2.1, 4, 0.5)[0] == 4
    # 8.0 -> ceil(16) capped at ceil(2 * 4) = 8; 0.2 -> 1 floored at floor(4/2) = 2
    assert aibrix_kpa(AIBrixKPAState(), 8.0, 8.0, 4, 0.5)[0] == 8
    assert aibrix_kpa(AIBrixKPAState(), 0.2, 0.2, 4, 0.5)[0] == 2


def test_kpa_panic_entry_hold_and_exit() -> None:
    # panic/stable = 2.5 > 2.0: panic; stable count 2 (1.0/2 pods = 0.5, on target), panic count
    # ceil(2.5/0.5) = 5 capped at ceil(2*2) = 4 -> 4
    n, s = aibrix_kpa(AIBrixKPAState(), 1.0, 2.5, 2, 0.5)
    assert (n, s) == (4, AIBrixKPAState(True, 4))
    # panic 4.0: stable count 1.0/0.5 = 2 (0.25/pod), panic ceil(8) = 8 (cap ceil(2*4) = 8) -> 8
    n, s = aibrix_kpa(s, 1.0, 4.0, 4, 0.5)
    assert (n, s) == (8, AIBrixKPAState(True, 8))
    # still in panic (2.2 > 2.0): stable 2 floored at floor(8/2) = 4, panic ceil(4.4) = 5; held at 8
    n, s = aibrix_kpa(s, 1.0, 2.2, 8, 0.5)
    assert (n, s) == (8, AIBrixKPAState(True, 8))
    # ratio back under 2: stable mode, 1.0/8 per pod -> ceil(2) floored at floor(8/2) = 4
    n, s = aibrix_kpa(s, 1.0, 1.2, 8, 0.5)
    assert (n, s) == (4, AIBrixKPAState())
    # a zero stable value is panic too; counts 0 floored at floor(3/2) = 1
    n, s = aibrix_kpa(AIBrixKPAState(), 0.0, 0.0, 3, 0.5)
    assert (n, s.in_panic) == (1, True)


def test_apa_rule() -> None:
    # 0.9/0.5 = 1.8 > 1.1 -> ceil(4*1.8) = ceil(7.2) = 8 (cap ceil(2*4) = 8)
    assert aibrix_apa(0.9, 4, 0.5) == 8
    # 2.0/0.5 = 4 -> 16 capped at 8
    assert aibrix_apa(2.0, 4, 0.5) == 8
    # 0.1/0.5 = 0.2 < 0.9 -> ceil(0.8) = 1 floored at floor(4/2) = 2
    assert aibrix_apa(0.1, 4, 0.5) == 2
    # 0.3/0.5 = 0.6 -> ceil(2.4) = 3
    assert aibrix_apa(0.3, 4, 0.5) == 3
    # 0.54/0.5 = 1.08: within -> 4
    assert aibrix_apa(0.54, 4, 0.5) == 4


def test_stabilization_takes_the_min_over_the_scale_down_window() -> None:
    history: list[tuple[float, int]] = []
    assert aibrix_stabilize(history, 0.0, 3, 6) == 3
    # 100 s later the recommendation is 5 (< 6 current): AIBrix takes the MIN over the last 300 s, 3,
    # where the Kubernetes HPA would take the max, 5
    assert aibrix_stabilize(history, 100.0, 5, 6) == 3
    # scale-up: max over a 0 s window = the current recommendation only
    assert aibrix_stabilize(history, 110.0, 9, 6) == 9
    # t=301: the t=0 entry has left the window; min over {5 (t=100), 9, 4} = 4
    assert aibrix_stabilize(history, 301.0, 4, 9) == 4


def test_controller_sums_pods_and_windows(make_fleet) -> None:
    svc = make_fleet(replicas=4, min_replicas=1, max_replicas=20).services[0]
    ab = AIBrixController(target=0.5)

    def est(t: float, kv: list[float]) -> ServiceEstimate:
        pods = [PodObservation("h100", k, 0.0, 0.0, k, 0.0) for k in kv]
        return ServiceEstimate(service="svc", time_s=t, signals=Signals(),
                               variants={"h100": VariantObservation(len(kv), 0)},
                               weights={"h100": 10.0}, idle=False, capacity_rps=0.0, ready_capacity_rps=0.0,
                               starting=0, pods=pods)

    # sum 4 x 0.5 = 2.0 = 4 pods on target -> 4
    assert ab.decide(est(10.0, [0.5] * 4), svc).desired == {"h100": 4}
    # t=20: sum 4 x 1.0 = 4.0; stable (180 s) mean 3.0, panic (60 s) mean 3.0, not panic;
    # 3.0/4 = 0.75 per pod -> ceil(3.0/0.5) = 6 (cap 8)
    assert ab.decide(est(20.0, [1.0] * 4), svc).desired == {"h100": 6}


def test_stabilization_window_excludes_its_edge() -> None:
    # podautoscaler_controller.go stabilizeRecommendation (e3e10f9) keeps rec.timestamp.After(now - window):
    # a recommendation exactly 300 s old is out; at a 10 s resync that is every 30th one
    history: list[tuple[float, int]] = []
    assert aibrix_stabilize(history, 0.0, 3, 6) == 3
    assert aibrix_stabilize(history, 300.0, 5, 6) == 5
    assert history == [(300.0, 5)]


def test_controller_starts_each_resync_from_a_fresh_kpa_state(make_fleet, monkeypatch) -> None:
    # podautoscaler_controller.go computeScaleDecision (e3e10f9) builds NewBaseScalingContext every
    # reconcile; its GetMaxPanicPods is 0 and InPanicMode starts false, so no panic count carries over
    import controllers.baselines.aibrix as mod

    seen: list[AIBrixKPAState] = []

    def spy(state: AIBrixKPAState, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(state)
        return 9, AIBrixKPAState(True, 9)  # a panic at 9, which a held state would carry

    monkeypatch.setattr(mod, "aibrix_kpa", spy)
    svc = make_fleet(replicas=2, min_replicas=1, max_replicas=20).services[0]
    ab = AIBrixController(target=0.5)
    for t in (10.0, 20.0):
        pods = [PodObservation("h100", 0.5, 0.0, 0.0, 0.5, 0.0)] * 2
        ab.decide(ServiceEstimate(service="svc", time_s=t, signals=Signals(),
                                  variants={"h100": VariantObservation(2, 0)}, weights={"h100": 10.0}, idle=False,
                                  capacity_rps=0.0, ready_capacity_rps=0.0, starting=0, pods=pods), svc)
    assert seen == [AIBrixKPAState(), AIBrixKPAState()]
