"""The MPC's prefill/decode settings (issue 34): it keeps a service's prefill:decode ratio (``roles.ratio``,
Kthena's rule) in its plan, and counts ``pd_util`` of a pool replica's modelled capacity."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from autoscaler.config import PDRatio
from autoscaler.config.fleet import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.state import PoolObservation, ServiceEstimate, Signals, VariantObservation
from controllers.mpc import MPCController, pd_ratio
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


def decide(cfg: FleetConfig, mix: RequestMix, rate: float, pd_util: float = 1.0) -> dict[str, int]:
    svc = cfg.services[0]
    pools = {role: PoolObservation(role, Signals(), {v.name: VariantObservation(0, 0)
                                                     for r, v in svc.role_variants() if r == role})
             for role in ("prefill", "decode")}
    est = ServiceEstimate(svc.name, 600.0, Signals.of({"arrival_rate_rps": rate, "queue_length": 0.0}), {}, {},
                          False, 0.0, 0.0, 0, pools=pools)
    weights = {svc.name: variant_weights(svc, cfg.planning_engine(), mix)}
    mpc = MPCController(cfg, weights, forecast="last", mixes={svc.name: mix}, learn=0, pd_util=pd_util)
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
