"""The MPC on prefill/decode pools (``controllers.mpc``, issue 34): it plans a pools-only service, and
chooses between aggregated variants and a P/D pair from the per-role capacities."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import yaml

from autoscaler.config.fleet import FleetConfig, Service
from autoscaler.config.loading import parse_config
from autoscaler.state import PoolObservation, ServiceEstimate, Signals, VariantObservation
from controllers.mpc import MPCController
from models.capacity import UNSERVABLE_SHARE, ReplicaSpec, RequestMix, variant_weights
from models.capacity_roles import decode_capacity, pool_allowance, prefill_capacity, prefill_idle_misses

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet-pd.yaml"
AGGREGATED = {"name": "h100", "gpu": "H100-SXM", "price_per_gpu_hour": 2.99, "min_replicas": 0, "max_replicas": 16,
              "initial_replicas": 0, "kv_cache_tokens": 400000, "profile": "llama-3-8b/h100-sxm"}


def fleet(aggregated: bool) -> FleetConfig:
    """examples/fleet-pd.yaml (a prefill and a decode pool of H100s); with ``aggregated``, an aggregated
    H100 variant beside the pools and every variant free to go to 0 replicas."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    if aggregated:
        doc["services"][0]["variants"] = [AGGREGATED]
        for pool in ("prefill", "decode"):
            for v in doc["services"][0]["roles"][pool]:
                v["min_replicas"] = v["initial_replicas"] = 0
    return parse_config(doc, str(EXAMPLE), EXAMPLE.parent)


def estimate(svc: Service, t: float, rate: float, ready: dict[str, int]) -> ServiceEstimate:
    """As the loop gives a controller that scales roles: the aggregated variants in ``variants``, each
    pool's in ``pools``."""
    variants = {v.name: VariantObservation(ready.get(v.name, 0), 0) for v in svc.variants}
    pools = {role: PoolObservation(role, Signals(), {v.name: VariantObservation(ready.get(v.name, 0), 0)
                                                     for r, v in svc.role_variants() if r == role})
             for role in ("prefill", "decode")}
    return ServiceEstimate(svc.name, t, Signals.of({"arrival_rate_rps": rate, "queue_length": 0.0}), variants, {},
                           False, 0.0, 0.0, 0, pools=pools)


def capacities(cfg: FleetConfig, mix: RequestMix) -> dict[str, float]:
    """One replica's requests/s per variant at the interactive SLO, straight from the capacity models."""
    svc, engine = cfg.services[0], cfg.planning_engine()
    slo, roles = svc.slo["interactive"], svc.roles
    assert roles is not None
    pre = ReplicaSpec.of(roles.prefill[0], engine)
    out = {roles.prefill[0].name: prefill_capacity(pre, mix, slo.ttft_s, roles.kv_transfer,
                                                   non_cached_tokens=roles.non_cached_tokens).rps,
           roles.decode[0].name: decode_capacity(ReplicaSpec.of(roles.decode[0], engine), mix, slo.ttft_s, slo.itl_s,
                                                 roles.kv_transfer, prefill_spec=pre,
                                                 non_cached_tokens=roles.non_cached_tokens).rps}
    return {**out, **variant_weights(svc, engine, mix)}  # the aggregated ones as the registry gives them


def cheapest_fleet(svc: Service, caps: dict[str, float], rate: float, held: dict[str, int]) -> dict[str, int]:
    """The cheapest whole fleet serving ``rate`` for ever, by enumeration, each variant at least its
    ``min_replicas`` and the replicas ``held`` (ready ones the MPC keeps until it has seen its hold of
    rates): aggregated replicas serve their capacity each, the pools the smaller of the two pools'
    capacities. Asserts it is the only fleet at its cost (a tie would leave the plan free to pick)."""
    every = [*svc.variants, *(v for _, v in svc.role_variants())]
    names = [v.name for v in every]
    price = {v.name: v.price_per_replica_hour for v in every}
    role = {v.name: r for r, v in svc.role_variants()}
    best, best_counts, ties = math.inf, {}, 0
    for counts in itertools.product(*(range(max(v.min_replicas, held.get(v.name, 0)), 13) for v in every)):
        served = {None: 0.0, "prefill": 0.0, "decode": 0.0}
        for name, n in zip(names, counts, strict=True):
            served[role.get(name)] += caps[name] * n
        cost = sum(price[name] * n for name, n in zip(names, counts, strict=True))
        if served[None] + min(served["prefill"], served["decode"]) < rate - 1e-9 or cost > best + 1e-9:
            continue
        if cost > best - 1e-9:
            ties += 1
        else:
            best, best_counts, ties = cost, dict(zip(names, counts, strict=True)), 1
    assert ties == 1, f"{ties} fleets cost ${best:.2f}/h"
    return best_counts


def decide(cfg: FleetConfig, mix: RequestMix, rate: float, ready: dict[str, int]) -> tuple[dict[str, int], dict]:
    svc = cfg.services[0]
    weights = {svc.name: variant_weights(svc, cfg.planning_engine(), mix)}  # as controllers.registry's
    mpc = MPCController(cfg, weights, forecast="last", mixes={svc.name: mix}, learn=0)
    d = mpc.decide(estimate(svc, 600.0, rate, ready), svc)
    return d.desired, d.terms


def test_the_mpc_declares_it_scales_roles() -> None:
    assert MPCController.scales_roles is True


def test_a_pools_only_service_is_planned_from_each_role_s_capacity() -> None:
    # examples/fleet-pd.yaml: 1 prefill and 2 decode replicas ready, 80 req/s of 1000-token prompts
    # and 200-token outputs. The models give a prefill replica ~36.7 req/s and a decode replica ~32.4,
    # so the plan orders now what serves 80 for ever: 3 of each (the enumeration's cheapest fleet),
    # within the guard's 8 orders a step; everything it serves goes through the pools.
    cfg = fleet(aggregated=False)
    mix = RequestMix.from_means(1000, 200, 0.0)
    caps = capacities(cfg, mix)
    assert caps == pytest.approx({"h100-prefill": 36.65, "h100-decode": 32.39}, rel=0.01)
    ready = {"h100-prefill": 1, "h100-decode": 2}
    desired, terms = decide(cfg, mix, 80.0, ready)
    assert desired == cheapest_fleet(cfg.services[0], caps, 80.0, ready) == {"h100-prefill": 3, "h100-decode": 3}
    assert terms["pd_share_now"] == pytest.approx(36.65 / 80.0, rel=0.01)  # 1 ready prefill replica now


@pytest.mark.parametrize(("tokens", "rate", "chosen"), [((2048, 28), 30.0, "pools"), ((4000, 200), 18.0, "aggregated")])
def test_the_mpc_disaggregates_where_the_pair_serves_a_request_for_less(tokens: tuple[int, int], rate: float,
                                                                        chosen: str) -> None:
    # An aggregated H100 variant beside the pools, every replica at $2.99/h, nothing running. Long
    # prompts with short outputs (2048 / 28): an aggregated replica's steps carry long prefill chunks
    # and it serves ~6.7 req/s, a prefill replica ~16.6 and a decode replica ~149: the pair costs
    # $2.99 x (1/16.6 + 1/149) = $0.20/h per request/s against $0.45 aggregated. 4000 / 200: an
    # aggregated replica serves ~4.8 req/s, a prefill replica ~7.3 and a decode replica ~11.5: the
    # pair $0.67/h per request/s against $0.62. The plan's first step for a steady rate (orders
    # ready after one cold start) is the enumeration's cheapest fleet, all pools or all aggregated:
    # 2 prefill + 1 decode for 30 req/s (aggregated: 5), 4 aggregated for 18 (pools: 3 + 2).
    cfg = fleet(aggregated=True)
    mix = RequestMix.from_means(*tokens, 0.0)
    caps = capacities(cfg, mix)
    want = cheapest_fleet(cfg.services[0], caps, rate, {})
    pools = want["h100-prefill"] + want["h100-decode"]
    assert (pools > 0 and want["h100"] == 0) if chosen == "pools" else (pools == 0 and want["h100"] > 0)
    desired, terms = decide(cfg, mix, rate, {})
    assert desired == want
    assert terms["pd_rps_max"] == (pytest.approx(rate) if chosen == "pools" else pytest.approx(0.0, abs=1e-9))


@pytest.mark.parametrize(("rate", "replicas"), [(110.0, 4), (140.0, 5)])
def test_the_mpc_serves_short_prompts_aggregated_where_the_pair_costs_more(rate: float, replicas: int) -> None:
    # Issue 34's "aggregation on a short one against brute force": 256-token prompts, 256-token outputs
    # (a chat turn), the fleet of the test above. The models give an aggregated replica ~28.4 req/s, a
    # prefill replica ~150.7 and a decode replica ~34.5: the pair costs $2.99 x (1/150.7 + 1/34.5) =
    # $0.1064/h per request/s against $2.99 / 28.4 = $0.1054 aggregated, and a pool pair needs a whole
    # prefill replica besides. 110 req/s: 4 aggregated (ceil(110 / 28.4); 113.4 req/s) against 1 + 4
    # pool replicas alone; 140: 5 (141.8) against 1 + 5. The enumeration's cheapest fleet is all
    # aggregated and the MPC's first step is it, nothing through the pools. (On this H100-only fleet a
    # prompt longer than its output goes the other way: at 256 / 128 the pair costs $0.060 against
    # $0.071, so "short prompts aggregated" holds here where the output is at least the prompt.)
    cfg = fleet(aggregated=True)
    mix = RequestMix.from_means(256, 256, 0.0)
    caps = capacities(cfg, mix)
    assert caps == pytest.approx({"h100-prefill": 150.7, "h100-decode": 34.54, "h100": 28.36}, rel=0.01)
    # the case's premise, not implied by the 1 % tolerance above (the two sides differ by 0.9 %): it fails
    # should the models make the pair the cheaper per request/s, where this case would test nothing
    assert 1 / caps["h100-prefill"] + 1 / caps["h100-decode"] > 1 / caps["h100"]  # the pair dearer per request/s
    want = cheapest_fleet(cfg.services[0], caps, rate, {})
    assert want == {"h100": replicas, "h100-prefill": 0, "h100-decode": 0}
    assert replicas == math.ceil(rate / caps["h100"])
    desired, terms = decide(cfg, mix, rate, {})
    assert desired == want
    assert terms["pd_rps_max"] == pytest.approx(0.0, abs=1e-9)


def test_a_decode_pool_is_sized_against_the_prefill_variants_that_keep_a_capacity() -> None:
    # examples/fleet-mixed-pd.yaml, 15 % of 24,000-token prompts: an idle A100 prefill replica takes
    # 2.16 s to prefill one (models.capacity_roles.prefill_service_s), past the 2-s TTFT target, so
    # it misses those 15 %; every H100 pair and the aggregated H100 miss none (< 1e-6). The service's
    # allowance is then 5 %: the A100 prefill variant gets no capacity, and neither does a decode
    # replica sized against it (its seqs bound misses the same 15 % idle), which the MPC took the
    # decode pool's capacity from (the slowest prefill variant) and so planned no pool at all. A prefill
    # variant with no capacity is never planned: the decode pool is sized against the H100 prefill.
    cfg = parse_config(yaml.safe_load((EXAMPLE.parent / "fleet-mixed-pd.yaml").read_text()),
                       str(EXAMPLE.parent / "fleet-mixed-pd.yaml"), EXAMPLE.parent)
    svc, engine = cfg.services[0], cfg.planning_engine()
    roles, slo = svc.roles, svc.slo["interactive"]
    assert roles is not None
    mix = RequestMix.from_requests([2000] * 85 + [24000] * 15, [200] * 100)
    h100_p, a100_p = (ReplicaSpec.of(v, engine) for v in roles.prefill)
    h100_d = ReplicaSpec.of(roles.decode[0], engine)
    link = roles.kv_transfer
    assert prefill_idle_misses(a100_p, mix, slo.ttft_s, link) == pytest.approx(0.15, abs=1e-4)
    limit = pool_allowance([ReplicaSpec.of(v, engine) for v in svc.variants], [h100_p, a100_p],
                           [ReplicaSpec.of(v, engine) for v in roles.decode], mix, slo.ttft_s, slo.itl_s, link)
    assert limit == pytest.approx(UNSERVABLE_SHARE, abs=1e-5)
    against_a100 = decode_capacity(h100_d, mix, slo.ttft_s, slo.itl_s, link, prefill_spec=a100_p, unservable=limit)
    assert against_a100.rps == 0
    weights = {svc.name: variant_weights(svc, engine, mix)}
    mpc = MPCController(cfg, weights, forecast="last", mixes={svc.name: mix}, learn=0)
    got = mpc.role_weights(estimate(svc, 600.0, 10.0, {}), svc)
    assert got["a100-prefill"] == 0
    assert got["h100-prefill"] == pytest.approx(prefill_capacity(h100_p, mix, slo.ttft_s, link, unservable=limit).rps)
    assert got["h100-prefill"] > 0
    assert got["h100-decode"] == pytest.approx(
        decode_capacity(h100_d, mix, slo.ttft_s, slo.itl_s, link, prefill_spec=h100_p, unservable=limit).rps)
    assert got["h100-decode"] > 0
    half = MPCController(cfg, weights, forecast="last", mixes={svc.name: mix}, learn=0, pd_util=0.5)
    assert half.role_weights(estimate(svc, 600.0, 10.0, {}), svc) == pytest.approx({k: v / 2 for k, v in got.items()})


@pytest.mark.parametrize(("aggregated", "ready", "k"), [
    # pools only, 4 prefill and 6 decode ready: the fewer, 4, share the index 9: 1 + 8 / 4 = 3 -> 1.1^12 (3.138)
    (False, {"h100-prefill": 4, "h100-decode": 6}, 12),
    # an aggregated variant beside them with none ready: the pools' 4 still split it (3 -> 1.1^12)
    (True, {"h100": 0, "h100-prefill": 4, "h100-decode": 6}, 12),
    # 2 aggregated ready: the fewest, 2: 1 + 8 / 2 = 5 -> 1.1^17 (5.054; log 5 / log 1.1 = 16.9)
    (True, {"h100": 2, "h100-prefill": 4, "h100-decode": 6}, 17),
])
def test_burst_splits_the_index_over_the_pools_ready_replicas_too(aggregated: bool, ready: dict[str, int],
                                                                   k: int) -> None:
    # Before, only the aggregated variants' ready replicas were counted: a pool-only service (0 of them) was
    # planned as if one replica took every burst, 1 + 8 / 1 = 9 (1.1^23), its pools' capacities cut for it.
    cfg = fleet(aggregated)
    svc = cfg.services[0]
    mix = RequestMix.from_means(1000, 200, 0.0)
    mpc = MPCController(cfg, {svc.name: variant_weights(svc, cfg.planning_engine(), mix)}, forecast="last",
                        mixes={svc.name: mix}, learn=0, burst=1)
    est = estimate(svc, 600.0, 80.0, ready)
    est = ServiceEstimate(est.service, est.time_s, Signals.of({"arrival_rate_rps": 80.0, "queue_length": 0.0,
                                                               "arrival_dispersion": 9.0}),
                          est.variants, {}, False, 0.0, 0.0, 0, pools=est.pools)
    mpc.role_weights(est, svc)
    assert mpc.memory[svc.name].scv == pytest.approx(1.1 ** k, rel=1e-4)


def test_the_mpc_gives_the_router_its_plans_rate_per_replica_of_each_variant() -> None:
    # The 2048 / 28 mix above on the aggregated H100 and the pools, with pd_util 0.5: the plan counts an
    # aggregated replica at its model's rate and a pool replica at half of its model's, and hands the
    # router those rates (Decision.route_weights) for it to split the demand as the plan did.
    cfg = fleet(aggregated=True)
    mix = RequestMix.from_means(2048, 28, 0.0)
    caps = capacities(cfg, mix)
    svc = cfg.services[0]
    weights = {svc.name: variant_weights(svc, cfg.planning_engine(), mix)}
    mpc = MPCController(cfg, weights, forecast="last", mixes={svc.name: mix}, learn=0, pd_util=0.5)
    d = mpc.decide(estimate(svc, 600.0, 30.0, {}), svc)
    assert d.route_weights == pytest.approx({"h100": caps["h100"], "h100-prefill": 0.5 * caps["h100-prefill"],
                                             "h100-decode": 0.5 * caps["h100-decode"]})
