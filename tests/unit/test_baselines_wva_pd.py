"""llm-d's WVA with its role-aware grouping (controllers.baselines.wva_pd): each role's pods analysed apart.

Expected counts are worked by hand from the V1 analyzer's rule (llm-d/llm-d-autoscaling
``internal/saturationv1/analyzer.go`` at 763b1bd; the role grouping of ``internal/engines/saturation/engine.go``
at 28d84c9, pull request #1036) with its default thresholds (KV 0.80, queue 5, spare triggers 0.10 and 3).
The ``source_*`` cases are the repository's own (``analyzer_test.go`` at 763b1bd), named after its tests.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config.loading import parse_config
from autoscaler.state import PodObservation, PoolObservation, ServiceEstimate, Signals, VariantObservation
from controllers.base import FleetMismatchError
from controllers.baselines.wva import saturation_analysis
from controllers.baselines.wva_pd import WVAPDController, v1_targets
from controllers.registry import build

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, price: float = 2.99, *, lo: int = 0, hi: int = 40) -> dict[str, Any]:
    return {
        "name": name,
        "gpu": "H100-SXM",
        "price_per_gpu_hour": price,
        "min_replicas": lo,
        "max_replicas": hi,
        "initial_replicas": 1,
        "kv_cache_tokens": 400_000,
        "profile": "llama-3-8b/h100-sxm",
    }


def pd_service(*, aggregated: bool = False, decode_hi: int = 40) -> Any:
    """Prefill pool h100-p ($2.99) and a100-p ($1.79); decode pool h100-d and a100-d; optionally an aggregated
    variant agg."""
    roles = {
        "prefill": [variant("h100-p"), variant("a100-p", 1.79)],
        "decode": [variant("h100-d", hi=decode_hi), variant("a100-d", 1.79)],
    }
    doc = {
        "services": [
            {
                "name": "svc",
                "model": "m",
                "slo": SLO,
                "variants": [variant("agg")] if aggregated else [],
                "roles": roles,
            }
        ]
    }
    return parse_config(doc, "<pd>")


def pod(v: str, kv: float, q: float = 0.0) -> PodObservation:
    return PodObservation(v, kv, q, 0.0, kv, q)


def estimate(
    counts: dict[str, tuple[int, int]], pods: list[PodObservation], aggregated: dict[str, tuple[int, int]] | None = None
) -> ServiceEstimate:
    """counts: pool variant -> (ready, starting); the pools' variants split by their names' suffix."""
    pools = {
        role: PoolObservation(
            role, Signals(), {n: VariantObservation(*c) for n, c in counts.items() if n.endswith(suffix)}
        )
        for role, suffix in (("prefill", "-p"), ("decode", "-d"))
    }
    variants = {n: VariantObservation(*c) for n, c in (aggregated or {}).items()}
    return ServiceEstimate("svc", 600.0, Signals(), variants, {}, False, 0.0, 0.0, 0, pods=pods, pools=pools)


# -- the analysis: the repository's own cases (TestAnalyzeModelSaturation_ScaleUp / _ScaleDownSafety / _AllSaturated)


@pytest.mark.parametrize(
    ("kv", "queue", "up"),
    [
        ([0.75, 0.76], [2, 2], True),  # avg spare KV 0.045 < 0.1
        ([0.50, 0.50], [3, 3], True),  # avg spare queue 2 < 3
        ([0.50, 0.50], [1, 1], False),  # spare KV 0.30, spare queue 4
        ([0.85, 0.50, 0.90], [2, 6, 7], True),  # all saturated
    ],
)
def test_source_scale_up_cases(kv: list[float], queue: list[float], up: bool) -> None:
    assert saturation_analysis(kv, queue).scale_up is up


@pytest.mark.parametrize(
    ("kv", "queue", "safe"),
    [
        ([0.20, 0.30, 0.25], [1, 1, 1], True),  # 0.75 KV over 2 pods: spare 0.425; queue 3 / 2: spare 3.5
        ([0.70, 0.75], [2, 2], False),  # 1.45 KV on one pod
        ([0.50], [2], False),  # one non-saturated pod
    ],
)
def test_source_scale_down_safety_cases(kv: list[float], queue: list[float], safe: bool) -> None:
    assert saturation_analysis(kv, queue).scale_down_safe is safe


# -- the targets: the repository's own cases (TestCalculatesaturationTargets_*), costs 20 / 5 / 15 a replica


def cost_variants() -> list[Any]:
    doc = {
        "services": [
            {
                "name": "svc",
                "model": "m",
                "slo": SLO,
                "variants": [variant("v1-expensive", 20.0), variant("v2-cheap", 5.0), variant("v3-medium", 15.0)],
            }
        ]
    }
    return list(parse_config(doc, "<v>").services[0].variants)


def test_source_scale_up_cheapest() -> None:
    vs = cost_variants()
    sat = saturation_analysis([0.75, 0.76], [2, 2])
    target, _ = v1_targets(
        sat,
        vs,
        dict.fromkeys(("v1-expensive", "v2-cheap", "v3-medium"), 2),
        dict.fromkeys(("v1-expensive", "v2-cheap", "v3-medium"), 0),
        {"v1-expensive", "v2-cheap", "v3-medium"},
    )
    assert target == {"v1-expensive": 2, "v2-cheap": 3, "v3-medium": 2}


def test_source_scale_down_most_expensive() -> None:
    vs = cost_variants()
    sat = saturation_analysis([0.20, 0.30, 0.25], [1, 1, 1])
    names = ("v1-expensive", "v2-cheap", "v3-medium")
    target, _ = v1_targets(sat, vs, dict.fromkeys(names, 2), dict.fromkeys(names, 0), set(names))
    assert target == {"v1-expensive": 1, "v2-cheap": 2, "v3-medium": 2}


def test_source_pending_replicas_block_scaling() -> None:
    vs = cost_variants()[:2]
    sat = saturation_analysis([0.75, 0.76], [2, 2])
    target, why = v1_targets(
        sat, vs, {"v1-expensive": 3, "v2-cheap": 2}, {"v1-expensive": 1, "v2-cheap": 0}, {"v1-expensive", "v2-cheap"}
    )
    assert target == {"v1-expensive": 3, "v2-cheap": 2}
    assert "in transition" in why


def test_the_cheapest_variant_at_its_cap_takes_the_scale_up_and_the_clamp_cancels_it() -> None:
    # CalculateSaturationTargets picks the cheapest analysed variant without looking at its maximum and clamps
    # afterwards: v2-cheap (cost 5) at its cap of 2 gets 3, clamped to 2; v1-expensive does not grow instead.
    doc = {
        "services": [
            {
                "name": "svc",
                "model": "m",
                "slo": SLO,
                "variants": [variant("v1-expensive", 20.0), variant("v2-cheap", 5.0, hi=2)],
            }
        ]
    }
    vs = list(parse_config(doc, "<v>").services[0].variants)
    up = saturation_analysis([0.85, 0.85], [0, 0])
    target, why = v1_targets(
        up, vs, {"v1-expensive": 1, "v2-cheap": 2}, {"v1-expensive": 0, "v2-cheap": 0}, {"v1-expensive", "v2-cheap"}
    )
    assert target == {"v1-expensive": 1, "v2-cheap": 2}
    assert why == "saturated: +1 v2-cheap, clamped to 2 (v2-cheap's bounds): no change"


def test_a_variant_at_one_replica_is_not_scaled_down_and_a_silent_one_not_chosen() -> None:
    vs = cost_variants()
    safe = saturation_analysis([0.20, 0.30, 0.25], [1, 1, 1])
    # v1-expensive is at 1: the most expensive above 1 is v3-medium
    names = ("v1-expensive", "v2-cheap", "v3-medium")
    target, _ = v1_targets(
        safe, vs, {"v1-expensive": 1, "v2-cheap": 2, "v3-medium": 2}, dict.fromkeys(names, 0), set(names)
    )
    assert target == {"v1-expensive": 1, "v2-cheap": 2, "v3-medium": 1}
    # the cheapest variant has no reporting pod: the cheapest of those that do (v3-medium) grows
    up = saturation_analysis([0.85], [0])
    target, _ = v1_targets(
        up,
        vs,
        {"v1-expensive": 1, "v2-cheap": 0, "v3-medium": 1},
        dict.fromkeys(names, 0),
        {"v1-expensive", "v3-medium"},
    )
    assert target == {"v1-expensive": 1, "v3-medium": 2}


# -- the controller: each role's pods apart


def test_prefill_kv_is_not_averaged_into_decode() -> None:
    # Prefill: h100-p's 2 pods at KV 0.75 (spare 0.05 each, mean 0.05 < 0.10): scale up, +1 to the cheapest
    # prefill variant with pods (h100-p; a100-p has none). Decode: h100-d's 2 pods at KV 0.10, queue 0
    # (spare 0.70, 5): not up; one pod fewer carries 0.20 KV (spare 0.60 >= 0.10) and 0 queue: safe, -1 h100-d.
    # Averaged over the 4 pods (issue #1031's report) the spare KV would be (0.05 x 2 + 0.70 x 2) / 4 = 0.375:
    # no scale-up anywhere.
    assert not saturation_analysis([0.75, 0.75, 0.10, 0.10], [0, 0, 0, 0]).scale_up
    cfg = pd_service()
    est = estimate(
        {"h100-p": (2, 0), "a100-p": (0, 0), "h100-d": (2, 0), "a100-d": (0, 0)},
        [pod("h100-p", 0.75), pod("h100-p", 0.75), pod("h100-d", 0.10), pod("h100-d", 0.10)],
    )
    d = WVAPDController().decide(est, cfg.services[0])
    assert d.desired == {"h100-p": 3, "h100-d": 1}
    assert not d.hold


def test_a_pool_in_transition_does_not_block_the_other() -> None:
    # Prefill has a replica starting: held at 3 (2 ready + 1). Decode, saturated (both pods at KV 0.9), grows
    # by one on its cheapest variant with pods: a100-d ($1.79 < $2.99), 1 -> 2.
    cfg = pd_service()
    est = estimate(
        {"h100-p": (2, 1), "a100-p": (0, 0), "h100-d": (1, 0), "a100-d": (1, 0)},
        [pod("h100-p", 0.9), pod("h100-p", 0.9), pod("h100-d", 0.9), pod("a100-d", 0.9)],
    )
    d = WVAPDController().decide(est, cfg.services[0])
    assert d.desired == {"h100-p": 3, "h100-d": 1, "a100-d": 2}


def test_aggregated_variants_form_their_own_group_and_max_replicas_clamps() -> None:
    # agg's 2 pods at queue 4 (spare 1 < 3): +1 agg. Prefill: no pod reports: held (not in desired). Decode
    # saturated at its cap of 1 on h100-d: 2 clamped to 1.
    cfg = pd_service(aggregated=True, decode_hi=1)
    est = estimate(
        {"h100-p": (1, 0), "a100-p": (0, 0), "h100-d": (1, 0), "a100-d": (0, 0)},
        [pod("agg", 0.1, 4), pod("agg", 0.1, 4), pod("h100-d", 0.95)],
        aggregated={"agg": (2, 0)},
    )
    d = WVAPDController().decide(est, cfg.services[0])
    assert d.desired == {"agg": 3, "h100-d": 1}
    assert "prefill: no ready pod reports metrics, held" in d.reason


def test_no_pod_anywhere_holds() -> None:
    cfg = pd_service()
    est = estimate({"h100-p": (1, 0), "a100-p": (0, 0), "h100-d": (1, 0), "a100-d": (0, 0)}, [])
    d = WVAPDController().decide(est, cfg.services[0])
    assert d.hold and d.desired == {"h100-p": 1, "a100-p": 0, "h100-d": 1, "a100-d": 0}


def test_wva_pd_needs_pools_and_reconciles_every_minute() -> None:
    cfg = parse_config({"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("a")]}]}, "<a>")
    with pytest.raises(FleetMismatchError, match="wva-pd scales prefill/decode pools: service svc has none"):
        build("wva-pd", cfg)
    ctl = build("wva-pd", pd_service())
    assert (ctl.tick_s, ctl.window_s, ctl.own_guard, ctl.scales_roles) == (60.0, 60.0, True, True)


def test_equal_costs_scale_up_the_first_name_and_down_the_last() -> None:
    # Ties at $2.99 a GPU-hour: the scale-up goes to the alphabetically first (a100-p < h100-p), the scale-down
    # to the alphabetically last (h100-p), as CalculateSaturationTargets sorts by cost then name.
    cfg = pd_service()
    prefill = [v for v in cfg.services[0].roles.prefill]
    same = [v.model_copy(update={"price_per_gpu_hour": 2.99}) for v in prefill]
    both = {"h100-p", "a100-p"}
    up = saturation_analysis([0.85, 0.85], [0, 0])
    target, why = v1_targets(up, same, {"h100-p": 2, "a100-p": 2}, {"h100-p": 0, "a100-p": 0}, both)
    assert (target, why) == ({"h100-p": 2, "a100-p": 3}, "saturated: +1 a100-p")
    down = saturation_analysis([0.10, 0.10, 0.10], [0, 0, 0])
    target, why = v1_targets(down, same, {"h100-p": 2, "a100-p": 2}, {"h100-p": 0, "a100-p": 0}, both)
    assert (target, why) == ({"h100-p": 1, "a100-p": 2}, "spare capacity: -1 h100-p")


def test_a_starting_variant_without_pods_does_not_block_its_group() -> None:
    # a100-p has a replica starting and none ready, so no pod of it is analysed: upstream's transition check runs
    # over the analysed variants only. h100-p's 2 pods at KV 0.9 are saturated: +1 h100-p, 2 -> 3.
    cfg = pd_service()
    est = estimate(
        {"h100-p": (2, 0), "a100-p": (0, 1), "h100-d": (1, 0), "a100-d": (0, 0)},
        [pod("h100-p", 0.9), pod("h100-p", 0.9)],
    )
    d = WVAPDController().decide(est, cfg.services[0])
    assert d.desired == {"h100-p": 3}  # a100-p is not decided: it keeps its count
    assert not d.hold


def test_a_failed_metric_query_holds_every_group() -> None:
    # optimizeV1 skips the model when its data preparation errs: with h100-d's query failed and a100-d's three
    # pods idle, the partial data would otherwise scale decode down (3 -> 2).
    cfg = pd_service()
    est = estimate(
        {"h100-p": (1, 0), "a100-p": (0, 0), "h100-d": (2, 0), "a100-d": (3, 0)},
        [pod("h100-p", 0.9), pod("a100-d", 0.0), pod("a100-d", 0.0), pod("a100-d", 0.0)],
    )
    est.errors.append("h100-d: pods query failed")
    d = WVAPDController().decide(est, cfg.services[0])
    assert d.hold and d.desired == {"h100-p": 1, "a100-p": 0, "h100-d": 2, "a100-d": 3}
    assert "a metric query failed (h100-d: pods query failed)" in d.reason
