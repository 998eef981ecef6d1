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


def burst(saturation_filter: bool, n: int) -> FleetSimulator:
    """``agg``, one prefill replica ``p`` and a decode replica ``d``, all ready; ``n`` 4,000-token prompts
    (remote) all at t = 0; the gateway's per-pod rule saturated past 2 waiting
    (``queue_depth_threshold``); a plan that sends everything to the pools (agg 0, p 6, d 12)."""
    doc = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg")],
                         "roles": {"prefill": [variant("p")], "decode": [variant("d")],
                                   "non_cached_tokens": 2048}}],
           "simulator": {"pd_saturation_filter": saturation_filter, "gateway": {"queue_depth_threshold": 2}}}
    wl = Workload([Request(arrival_s=0.0, input_tokens=4000, output_tokens=200) for _ in range(n)])
    sim = FleetSimulator(parse_config(doc, "<burst>"), wl)
    sim.follow_plan("svc", {"agg": 0.0, "p": 6.0, "d": 12.0})
    return sim


def test_without_the_saturation_filter_a_burst_follows_the_plan_into_a_saturated_prefill_pool() -> None:
    # The default (off): agg weighs NO_PLAN_RPS, so all ten go to the pools, p queueing 9.
    assert served_by(burst(False, 10)) == ["d"] * 10


def test_the_saturation_filter_sends_a_fresh_arrival_to_the_pool_until_it_saturates_then_to_agg() -> None:
    # p starts the first prompt at once (waiting 0); the next three wait there: waiting 1, 2, 3. Before
    # the 5th, p holds 3 waiting > 2: saturated, the only prefill replica, so d is dropped and the 5th
    # goes to agg (idle: it starts it, waiting 0). agg then queues the 6th-8th (waiting 1, 2, 3) and is
    # saturated itself before the 9th; with every candidate saturated the filter keeps the aggregated
    # ones (not d, whose prefill would queue at p): the 9th and 10th go to agg too.
    assert served_by(burst(True, 10)) == ["d"] * 4 + ["agg"] * 6


def test_the_saturation_filter_leaves_an_unsaturated_pool_its_planned_share() -> None:
    # Four arrivals: p holds 2 waiting before the 4th (not > 2), so the filter drops nothing and
    # the routing is the plan's, as with it off.
    assert served_by(burst(True, 4)) == served_by(burst(False, 4)) == ["d"] * 4
