"""The P/D router following a controller's plan (``FleetSimulator.follow_plan``, ``ServiceSim.pd_weights``):
each split worked out by hand in the comments. Every replica runs ``llama-3-8b/h100-sxm``, so the
router's own weights (ITL rates) are equal for all of them."""

from __future__ import annotations

from typing import Any

from autoscaler.config.loading import parse_config
from autoscaler.simulator.fleet import NO_PLAN_RPS, FleetSimulator
from autoscaler.workload.types import Request, Workload

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, replicas: int = 1) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 0,
            "max_replicas": replicas, "initial_replicas": replicas, "kv_cache_tokens": 400_000,
            "profile": "llama-3-8b/h100-sxm"}


def mixed(prefill: int = 1) -> FleetSimulator:
    """An aggregated replica ``agg``, ``prefill`` prefill replicas ``p`` and a decode replica ``d``, all
    ready; eight 4,000-token prompts (remote: >= 2,048) within 8 ms, 200 tokens out, all still in flight
    when the last arrives."""
    doc = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg")],
                         "roles": {"prefill": [variant("p", prefill)], "decode": [variant("d")],
                                   "non_cached_tokens": 2048}}]}
    wl = Workload([Request(arrival_s=i * 0.001, input_tokens=4000, output_tokens=200) for i in range(8)])
    return FleetSimulator(parse_config(doc, "<mixed>"), wl)


def served_by(sim: FleetSimulator) -> list[str]:
    sim.run_until(600.0)
    return [sr.replica.variant for sr in sim.requests]


def test_without_a_plan_the_router_splits_evenly_between_equal_replicas() -> None:
    # Equal weights, least outstanding (a decode replica's remote prefills counted), ties to the
    # aggregated replica (listed first): agg, d, agg, d, ...
    assert served_by(mixed()) == ["agg", "d"] * 4


def test_the_router_splits_the_demand_as_the_plan_did() -> None:
    # The plan: agg 2 req/s, p 6, d 12. The pools' pair serves min(6, 12) = 6, so d weighs 12 x 6/12 = 6
    # against agg's 2: score (outstanding + 1) / weight. d 1/6, d 2/6, then d 3/6 ties agg 1/2 -> agg;
    # d 3/6, 4/6, 5/6 < agg 2/2; then d 6/6 ties agg 2/2 -> agg; d 6/6 < agg 3/2. Six to d, two to agg:
    # the plan's 6 : 2.
    sim = mixed()
    sim.follow_plan("svc", {"agg": 2.0, "p": 6.0, "d": 12.0})
    assert served_by(sim) == ["d", "d", "agg", "d", "d", "d", "agg", "d"]


def test_a_prefill_pool_planned_past_the_decode_pool_leaves_the_decode_replica_its_own_rate() -> None:
    # Two prefill replicas at 6 each: the pair serves min(12, 12) = 12, so d weighs 12 against agg's 12:
    # the even split, agg first on every tie.
    sim = mixed(prefill=2)
    sim.follow_plan("svc", {"agg": 12.0, "p": 6.0, "d": 12.0})
    assert served_by(sim) == ["agg", "d"] * 4


def test_a_variant_the_plan_gives_no_rate_gets_a_request_only_when_the_rest_are_far_busier() -> None:
    # The aggregated variant at 0 in the plan weighs NO_PLAN_RPS: its score (0 + 1) / 1e-3 = 1000 beats
    # d's only past 999 x 6 outstanding there; all eight go to the pools.
    sim = mixed()
    sim.follow_plan("svc", {"agg": 0.0, "p": 6.0, "d": 12.0})
    assert sim.services["svc"].pd_weights()["agg"] == NO_PLAN_RPS
    assert served_by(sim) == ["d"] * 8


def test_a_service_without_pools_ignores_a_plan() -> None:
    doc = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg", 2)]}]}
    wl = Workload([Request(arrival_s=0.0, input_tokens=10, output_tokens=1)])
    sim = FleetSimulator(parse_config(doc, "<agg>"), wl)
    sim.follow_plan("svc", {"agg": 5.0})
    assert sim.services["svc"].plan_weights == {}
