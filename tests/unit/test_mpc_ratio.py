"""The MPC's prefill/decode settings (issue 34): it keeps a service's prefill:decode ratio (``roles.ratio``,
Kthena's rule) in its plan, and counts ``pd_util`` of a pool replica's modelled capacity."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import yaml

from autoscaler.config import PDRatio
from autoscaler.config.fleet import FleetConfig, Service
from autoscaler.config.loading import parse_config
from autoscaler.state import PoolObservation, ServiceEstimate, Signals, VariantObservation
from controllers.mpc import MPCController, pd_ratio, pool_util_path
from controllers.roles import ratio_reachable
from models.capacity import ReplicaSpec, RequestMix, variant_weights
from models.capacity_roles import decode_capacity, prefill_capacity

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet-pd.yaml"


def fleet(ratio: dict[str, float] | None) -> FleetConfig:
    """examples/fleet-pd.yaml (one H100 prefill and one H100 decode variant), both pools free to go to 0."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    roles = doc["services"][0]["roles"]
    for pool in ("prefill", "decode"):
        for v in roles[pool]:
            v["min_replicas"] = v["initial_replicas"] = 0
    if ratio is not None:
        roles["ratio"] = ratio
    return parse_config(doc, str(EXAMPLE), EXAMPLE.parent)


def estimate(svc: Service, rate: float, queue: float = 0.0) -> ServiceEstimate:
    """Both pools empty at 600 s, ``rate`` req/s arriving and ``queue`` requests waiting."""
    pools = {role: PoolObservation(role, Signals(), {v.name: VariantObservation(0, 0)
                                                     for r, v in svc.role_variants() if r == role})
             for role in ("prefill", "decode")}
    return ServiceEstimate(svc.name, 600.0, Signals.of({"arrival_rate_rps": rate, "queue_length": queue}), {}, {},
                           False, 0.0, 0.0, 0, pools=pools)


def decide(cfg: FleetConfig, mix: RequestMix, rate: float, pd_util: float = 1.0,
           queue: float = 0.0, miss_weight: float = 10.0) -> dict[str, int]:
    svc = cfg.services[0]
    est = estimate(svc, rate, queue)
    weights = {svc.name: variant_weights(svc, cfg.planning_engine(), mix)}
    mpc = MPCController(cfg, weights, forecast="last", mixes={svc.name: mix}, learn=0, pd_util=pd_util,
                        miss_weight=miss_weight)
    return mpc.decide(est, svc).desired


def capacities(cfg: FleetConfig, mix: RequestMix) -> tuple[float, float]:
    """One prefill and one decode replica's requests/s of ``mix``, straight from the capacity models."""
    svc, engine = cfg.services[0], cfg.planning_engine()
    slo, roles = svc.slo["interactive"], svc.roles
    assert roles is not None
    pre = ReplicaSpec.of(roles.prefill[0], engine)
    cp = prefill_capacity(pre, mix, slo.ttft_s, roles.kv_transfer, non_cached_tokens=roles.non_cached_tokens).rps
    cd = decode_capacity(ReplicaSpec.of(roles.decode[0], engine), mix, slo.ttft_s, slo.itl_s, roles.kv_transfer,
                         prefill_spec=pre, non_cached_tokens=roles.non_cached_tokens).rps
    return cp, cd


def cheapest_pair(cp: float, cd: float, rate: float, ratio: tuple[float, float] | None) -> tuple[int, int]:
    """Fewest (both cost $2.99/h) prefill and decode replicas, by enumeration, that serve ``rate`` for ever
    (``min(p cp, d cd) >= rate``) within the ratio; asserts no tie."""
    found = []
    for p, d in itertools.product(range(13), repeat=2):
        if min(p * cp, d * cd) < rate - 1e-9:
            continue
        if ratio is not None and not ratio[0] * d <= p <= ratio[1] * d:
            continue
        found.append((p + d, p, d))
    found.sort()
    assert found[0][0] < found[1][0]
    return found[0][1], found[0][2]


@pytest.mark.parametrize("ratio", [None, {"min_ratio": 0.25, "max_ratio": 1.0}])
def test_the_plan_keeps_the_ratio(ratio: dict[str, float] | None) -> None:
    # 30 req/s of 2048-token prompts and 28-token outputs: a prefill replica serves ~16.6 req/s, a decode
    # replica ~149 (test_mpc_roles), so the cheapest pair is 2 + 1 (ratio 2); with max_ratio 1 it is 2 + 2.
    cfg = fleet(ratio)
    mix = RequestMix.from_means(2048, 28, 0.0)
    cp, cd = capacities(cfg, mix)
    want = cheapest_pair(cp, cd, 30.0, None if ratio is None else (ratio["min_ratio"], ratio["max_ratio"]))
    assert want == ((2, 1) if ratio is None else (2, 2))
    assert decide(cfg, mix, 30.0) == {"h100-prefill": want[0], "h100-decode": want[1]}


def test_a_ratio_no_replica_counts_can_keep_is_left_out_of_the_plan() -> None:
    # min_ratio 3 with the decode pool at least 2 needs 6 prefill replicas; a prefill pool of at most 5
    # cannot: the plan is made without the ratio (else it would have no plan at all).
    r = PDRatio(min_ratio=3.0, max_ratio=4.0)
    assert not ratio_reachable(r, (0, 5), (2, 16))
    assert ratio_reachable(r, (0, 6), (2, 16))
    assert ratio_reachable(r, (0, 5), (0, 16))  # both pools at zero keep it
    cfg = fleet({"min_ratio": 3.0, "max_ratio": 4.0})
    svc = cfg.services[0]
    assert pd_ratio(svc) == (3.0, 4.0)
    assert svc.roles is not None
    svc.roles.decode[0].min_replicas = 2
    svc.roles.prefill[0].max_replicas = 5
    assert pd_ratio(svc) is None


@pytest.mark.parametrize(("pd_util", "want"), [(1.0, (2, 1)), (0.5, (4, 1)), (0.4, (5, 1))])
def test_pd_util_plans_the_pools_at_that_share_of_their_capacity(pd_util: float, want: tuple[int, int]) -> None:
    # As above without a ratio: at 0.5 a prefill replica counts ~8.3 req/s and a decode replica ~74.5,
    # so 30 req/s takes 4 + 1; at 0.4, ~6.6 and ~59.6: 5 + 1 (the enumeration at the scaled capacities).
    cfg = fleet(None)
    mix = RequestMix.from_means(2048, 28, 0.0)
    cp, cd = capacities(cfg, mix)
    assert cheapest_pair(cp * pd_util, cd * pd_util, 30.0, None) == want
    assert decide(cfg, mix, 30.0, pd_util) == {"h100-prefill": want[0], "h100-decode": want[1]}


def test_pd_util_out_of_range_is_refused() -> None:
    cfg = fleet(None)
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="pd_util must be in"):
            MPCController(cfg, {}, pd_util=bad)


@pytest.mark.parametrize(("backlog", "expected"), [
    (6.0, 0.5 * 12 / (6 + 0.5 * 6)),   # (12 - 6) / 0.5 + 6 = 18 of capacity c for 12: u = 12 / 18 = 2/3
    (0.0, 0.5),                        # no backlog: pd_util
    (12.0, 1.0),                       # all backlog: the full capacity
    (3.0, 0.5 * 12 / (9 + 1.5)),       # 9 / 0.5 + 3 = 21: u = 12 / 21 = 4/7
])
def test_pool_util_path_counts_pd_util_on_the_demand_less_its_backlog(backlog: float, expected: float) -> None:
    u = pool_util_path(0.5, np.array([12.0]), np.array([backlog]))
    assert u[0] == pytest.approx(expected)
    assert 12.0 / u[0] == pytest.approx((12.0 - backlog) / 0.5 + backlog)  # replicas' worth of capacity needed


def test_pool_util_path_is_pd_util_without_demand_and_one_at_full_use() -> None:
    assert pool_util_path(0.6, np.zeros(3), np.zeros(3)).tolist() == pytest.approx([0.6] * 3)
    assert pool_util_path(1.0, np.array([5.0, 7.0]), np.array([5.0, 0.0])).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="within"):
        pool_util_path(0.6, np.array([5.0]), np.array([6.0]))
    with pytest.raises(ValueError, match="pd_util"):
        pool_util_path(0.0, np.array([5.0]), np.array([1.0]))


def test_pd_util_leaves_the_backlog_term_undivided() -> None:
    # 30 req/s of the 2048/28 mix with 5400 requests queued: the first 360 s of the plan (a 300-s cold start,
    # no warm node being free, plus DRAIN_S 60) add 5400 / 360 = 15 req/s (under the cap max(30, 5400 / 300)),
    # 24 steps of 15 s. At pd_util 0.5 the
    # pools need 30 / 0.5 + 15 = 75 req/s of modelled capacity, ceil(75 / ~16.6) = 5 prefill replicas and
    # one decode (~149); with the backlog divided too, (30 + 15) / 0.5 = 90 would take 6. The backlog lasts a
    # minute past the cold start, so a miss is priced at 100 (not 10) x a request's cost, above a replica's
    # start and six minutes' run ($0.25 + $0.30 against 234 requests x 100 x $5.6e-5 = $1.31).
    cfg = fleet(None)
    mix = RequestMix.from_means(2048, 28, 0.0)
    cp, cd = capacities(cfg, mix)
    svc = cfg.services[0]
    mpc = MPCController(cfg, {svc.name: variant_weights(svc, cfg.planning_engine(), mix)}, forecast="last",
                        mixes={svc.name: mix}, learn=0, pd_util=0.5)
    path = mpc.backlog_path(estimate(svc, 30.0, 5400.0), svc, 30.0)
    assert path[:24].tolist() == pytest.approx([15.0] * 24)
    assert not path[24:].any()
    new = cheapest_pair(cp, cd, 30.0 / 0.5 + 15.0, None)
    old = cheapest_pair(cp * 0.5, cd * 0.5, 30.0 + 15.0, None)
    assert (new, old) == ((5, 1), (6, 1))
    for pd_util, want in ((0.5, new), (1.0, cheapest_pair(cp, cd, 45.0, None))):  # 1: 45 / ~16.6 -> 3 + 1
        mpc = MPCController(cfg, {svc.name: variant_weights(svc, cfg.planning_engine(), mix)}, forecast="last",
                            mixes={svc.name: mix}, learn=0, pd_util=pd_util, miss_weight=100.0)
        plan = mpc.decide(estimate(svc, 30.0, 5400.0), svc).plan
        assert (max(plan["h100-prefill"][:24]), max(plan["h100-decode"][:24])) == want, pd_util
    # the plan's first step is then held to the growth bound (cap_pool_growth): 2 x 30 + 16.6 = 76.6 req/s
    # of the model's capacity, 4 prefill replicas (5 would be 83)
    assert decide(cfg, mix, 30.0, 0.5, queue=5400.0, miss_weight=100.0) == {"h100-prefill": 4, "h100-decode": 1}
