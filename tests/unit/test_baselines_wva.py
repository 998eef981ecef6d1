"""llm-d WVA saturation baseline (controllers.baselines.wva), against docs/saturation-analyzer.md and
docs/saturation-scaling-config.md of llm-d/llm-d-workload-variant-autoscaler (``docs/anchors.md#llm-d-wva``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.config.loading import parse_config
from autoscaler.state import PodObservation, PoolObservation, ServiceEstimate, Signals, VariantObservation
from controllers.base import Reason, aggregated_pods, silent_pods
from controllers.baselines.wva import Saturation, WVAController, saturation_analysis, wva_targets

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def test_spare_capacity_averages_over_non_saturated_pods() -> None:
    # (0.80-0.5 + 0.80-0.75)/2 = 0.175 >= 0.1 and queue spare 5 >= 3: no scale-up;
    # removing one: 1.25 KV on 1 pod -> spare -0.45 < 0.1: not safe
    s = saturation_analysis([0.5, 0.75], [0.0, 0.0])
    assert (s.scale_up, s.scale_down_safe, s.non_saturated) == (False, False, 2)
    assert s.avg_spare_kv == pytest.approx(0.175)
    # (0.05 + 0.08)/2 = 0.065 < 0.1 -> scale up
    assert saturation_analysis([0.75, 0.72], [0.0, 0.0]).scale_up
    # queue spare (2 + 3)/2 = 2.5 < 3 -> scale up
    assert saturation_analysis([0.1, 0.1], [3.0, 2.0]).scale_up


def test_saturated_pods_are_left_out_and_all_saturated_scales_up() -> None:
    # kv 0.85 >= 0.8 and queue 5 >= 5 are saturated; the one left has spare 0.5 and 5 -> no action
    s = saturation_analysis([0.85, 0.3, 0.1], [0.0, 0.0, 5.0])
    assert (s.non_saturated, s.scale_up, s.scale_down_safe) == (1, False, False)
    assert saturation_analysis([0.9, 0.8], [0.0, 0.0]) == Saturation(True, False, 0, None, None)


def test_scale_down_safety_simulation() -> None:
    # 0.3 KV on 2 pods = 0.15 -> spare 0.65; queue 0 -> spare 5: safe
    assert saturation_analysis([0.1, 0.1, 0.1], [0.0, 0.0, 0.0]).scale_down_safe
    # queue 3 on 2 pods = 1.5 -> spare 3.5 >= 3: safe; queue 6 on 2 = 3 -> spare 2 < 3: not safe
    assert saturation_analysis([0.1, 0.1, 0.1], [1.0, 1.0, 1.0]).scale_down_safe
    assert not saturation_analysis([0.1, 0.1, 0.1], [2.0, 2.0, 2.0]).scale_down_safe


def fleet_service():
    def v(name: str, price: float, profile: str, **kw) -> dict:
        return {"name": name, "gpu": profile.split("/")[1].upper(), "price_per_gpu_hour": price, "max_replicas": 10,
                "kv_cache_tokens": 400000,
                "profile": profile, **kw}
    doc = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [
        v("big", 3.0, "llama-3-8b/h100-sxm"), v("cheap", 1.5, "llama-3-8b/gh200", max_replicas=2),
        v("old", 1.8, "llama-3-8b/a100-80gb")]}]}
    return parse_config(doc).services[0]


# $/h per req/s with these weights: big 3.0/10 = 0.30, cheap 1.5/10 = 0.15, old 1.8/4 = 0.45
WEIGHTS = {"big": 10.0, "cheap": 10.0, "old": 4.0}
UP = Saturation(True, False, 0, None, None)
DOWN = Saturation(False, True, 3, 0.5, 5.0)


def test_scale_up_goes_to_lowest_cost_per_capacity_and_pending_blocks_the_model() -> None:
    svc = fleet_service()
    cur = {"big": 1, "cheap": 1, "old": 1}
    none = {"big": 0, "cheap": 0, "old": 0}
    assert wva_targets(UP, svc, cur, none, WEIGHTS)[0] == {"big": 1, "cheap": 2, "old": 1}
    # cheap has a pending replica: the model is in transition, nothing moves (analyzer.go at b08b1c7)
    assert wva_targets(UP, svc, cur, {**none, "cheap": 1}, WEIGHTS)[0] == cur
    assert wva_targets(DOWN, svc, {**cur, "big": 2}, {**none, "old": 1}, WEIGHTS)[0] == {**cur, "big": 2}
    # cheap at its cap (2): big
    assert wva_targets(UP, svc, {**cur, "cheap": 2}, none, WEIGHTS)[0] == {"big": 2, "cheap": 2, "old": 1}


def test_scale_down_leaves_the_most_expensive_replica_and_keeps_the_cheapest_at_one() -> None:
    svc = fleet_service()
    none = {"big": 0, "cheap": 0, "old": 0}
    # highest $/replica-hour is big (3.0)
    assert wva_targets(DOWN, svc, {"big": 2, "cheap": 1, "old": 1}, none, WEIGHTS)[0] == {"big": 1, "cheap": 1,
                                                                                          "old": 1}
    # big and old may go to 0; cheap (lowest cost per capacity) stays at 1
    assert wva_targets(DOWN, svc, {"big": 0, "cheap": 1, "old": 1}, none, WEIGHTS)[0] == {"big": 0, "cheap": 1,
                                                                                          "old": 0}
    assert wva_targets(DOWN, svc, {"big": 0, "cheap": 1, "old": 0}, none, WEIGHTS)[0] == {"big": 0, "cheap": 1,
                                                                                          "old": 0}


def test_controller_reads_window_peaks(make_fleet) -> None:
    svc = make_fleet(replicas=2, min_replicas=0, max_replicas=10).services[0]
    pods = [PodObservation("h100", 0.1, 0.0, 0.0, 0.78, 0.0), PodObservation("h100", 0.1, 0.0, 0.0, 0.75, 0.0)]
    est = ServiceEstimate(service="svc", time_s=60.0, signals=Signals(), variants={"h100": VariantObservation(2, 0)},
                          weights={"h100": 10.0}, idle=False, capacity_rps=0.0, ready_capacity_rps=0.0, starting=0,
                          pods=pods)
    # latest KV 0.1 looks idle, but the 1 m peaks give spare (0.02 + 0.05)/2 = 0.035 < 0.1: scale up
    assert WVAController().decide(est, svc).desired == {"h100": 3}


def test_a_prefill_decode_pools_pods_are_not_counted_as_the_aggregated_variants() -> None:
    # An aggregated variant "agg" with 2 ready pods, both saturated (1 m KV peaks 0.85, 0.90 >= 0.80),
    # beside a decode pool "dec" of 3 idle pods (KV 0.1). WVA scales the aggregated variant: its 2 pods
    # are all it analyses, none non-saturated -> scale up, +1 agg. Were the pool's 3 idle pods counted,
    # the spare KV would be 0.7 and, spread over 2 pods, (0.8 - 0.15) >= 0.1: a scale-down under overload.
    def variant(name: str) -> dict[str, object]:
        return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 10,
                "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}

    svc = parse_config({"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg")],
                                      "roles": {"prefill": [variant("pre")], "decode": [variant("dec")]}}]},
                       "<pd>").services[0]
    pods = [PodObservation("agg", 0.85, 0.0, 8.0, 0.85, 0.0), PodObservation("agg", 0.9, 0.0, 8.0, 0.9, 0.0),
            *[PodObservation("dec", 0.1, 0.0, 1.0, 0.1, 0.0) for _ in range(3)]]
    est = ServiceEstimate(service="svc", time_s=60.0, signals=Signals(), variants={"agg": VariantObservation(2, 0)},
                          weights={"agg": 10.0}, idle=False, capacity_rps=0.0, ready_capacity_rps=0.0, starting=0,
                          pods=pods, pools={"decode": PoolObservation("decode", Signals(),
                                                                      {"dec": VariantObservation(3, 0)})})
    assert saturation_analysis([0.85, 0.9], [0.0, 0.0]).scale_up
    assert aggregated_pods(est) == pods[:2]
    d = WVAController().decide(est, svc)
    assert d.desired == {"agg": 3}
    assert "0/2 pods non-saturated" in d.reason
    # a ready aggregated pod not reporting is still seen as silent beside the pool's pods
    assert silent_pods(replace(est, pods=pods[1:])) == 1


def idle_big_estimate() -> ServiceEstimate:
    # big 3 ready pods, each with a 1 m KV peak of 0.1 and no queue; cheap 1 and old 2 ready, whose pods did not
    # report (their query failed, below). On big's pods alone: 3 non-saturated, KV 0.3 over 2 pods = 0.15, spare
    # 0.65 >= 0.1, queue spare 5 >= 3: scale-down safe, -1 from the dearest replica above its floor, big ($3.00/h).
    pods = [PodObservation("big", 0.1, 0.0, 1.0, 0.1, 0.0) for _ in range(3)]
    return ServiceEstimate(service="svc", time_s=60.0, signals=Signals(),
                           variants={"big": VariantObservation(3, 0), "cheap": VariantObservation(1, 0),
                                     "old": VariantObservation(2, 0)},
                           weights=WEIGHTS, idle=False, capacity_rps=0.0, ready_capacity_rps=0.0, starting=0, pods=pods)


def test_a_failed_metric_query_holds_every_variant() -> None:
    # llm-d WVA (b08b1c7 and v0.5.1): CollectReplicaMetrics errs when the model's KV or queue query fails and
    # optimizeV1 skips the model (internal/engines/saturation/engine.go). Here cheap's and old's pods query failed:
    # the partial data (big's 3 idle pods, idle_big_estimate) would scale big down 3 -> 2; the model is held.
    svc = fleet_service()
    assert WVAController().decide(idle_big_estimate(), svc).desired == {"big": 2, "cheap": 1, "old": 2}
    est = idle_big_estimate()
    est.errors += ["cheap pods: connection refused", "old pods: connection refused"]
    d = WVAController().decide(est, svc)
    assert d.hold and d.code is Reason.METRICS_ERROR
    assert d.desired == {"big": 3, "cheap": 1, "old": 2}
    assert d.reason == "wva: a metric query failed (cheap pods: connection refused), held"


def test_a_failed_query_with_saturated_pods_holds_too_and_every_query_failed_is_a_metrics_error() -> None:
    # big's 3 pods saturated (KV peak 0.9 >= 0.8): on them alone, scale up, +1 cheap (lowest $/h per req/s:
    # 1.5/10 = 0.15 against big 0.30 and old 0.45). With a query failed upstream decides nothing: held.
    svc = fleet_service()
    est = replace(idle_big_estimate(), pods=[PodObservation("big", 0.9, 0.0, 8.0, 0.9, 0.0) for _ in range(3)])
    assert WVAController().decide(est, svc).desired == {"big": 3, "cheap": 2, "old": 2}
    failed = replace(est, errors=["old replicas: timed out"])
    assert WVAController().decide(failed, svc).desired == {"big": 3, "cheap": 1, "old": 2}
    # Prometheus down: every query failed, no pod at all. Held as a failed query, not as an idle or silent fleet.
    down = replace(est, pods=[], errors=["svc pods: connection refused"])
    d = WVAController().decide(down, svc)
    assert (d.hold, d.code, d.desired) == (True, Reason.METRICS_ERROR, {"big": 3, "cheap": 1, "old": 2})
