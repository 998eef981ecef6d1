"""``controllers.roles.role_weights`` (the PID's, the router's and the fault suite's pool weights) sizes
each pool replica by the MPC's rule (``pool_capacities``): the service's idle-miss allowance
(``pool_allowance``) and the decode pool against the slowest prefill variant that keeps a capacity.
Each expected weight is the capacity model called with those arguments spelled out; each case is one
the old rule (a plain 5 % allowance, decode against the first prefill variant) weighed otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.fleet import FleetConfig
from autoscaler.config.loading import parse_config
from controllers.roles import pool_capacities, role_weights
from models.capacity import UNSERVABLE_SHARE, ReplicaSpec, RequestMix, mean_itl_rate
from models.capacity_roles import decode_capacity, pair_idle_misses, prefill_capacity, prefill_service_s

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str, edit: Any = None) -> FleetConfig:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    if edit is not None:
        edit(doc["services"][0])
    return parse_config(doc, str(EXAMPLES / name), EXAMPLES)


def test_a_tail_no_pair_serves_idle_takes_no_pool_capacity_away() -> None:
    # examples/fleet-pd.yaml with a 1.2-s TTFT target; 10 % of the prompts are 32,000 tokens, which an
    # idle H100 prefill replica takes 1.29 s to prefill (prefill_service_s): past the target before any
    # read, so the only pair misses 10 % idle and the service's allowance is 10 + 5 = 15 %. The old 5 %
    # gave the prefill replica no capacity (the router's mean_itl_rate fallback was used instead).
    def tighter(svc: dict[str, Any]) -> None:
        svc["slo"]["interactive"]["ttft_s"] = 1.2
    cfg = load("fleet-pd.yaml", tighter)
    svc, engine = cfg.services[0], cfg.planning_engine()
    roles, slo = svc.roles, svc.slo["interactive"]
    assert roles is not None and slo.ttft_s == 1.2
    link = roles.kv_transfer
    pre, dec = ReplicaSpec.of(roles.prefill[0], engine), ReplicaSpec.of(roles.decode[0], engine)
    mix = RequestMix.from_requests([2000] * 90 + [32000] * 10, [200] * 100)
    assert prefill_service_s(pre, RequestMix.from_requests([32000], [200]))[0] > slo.ttft_s
    assert pair_idle_misses(pre, dec, mix, slo.ttft_s, slo.itl_s, link) == pytest.approx(0.10, abs=1e-4)
    limit = 0.10 + UNSERVABLE_SHARE
    assert prefill_capacity(pre, mix, slo.ttft_s, link).rps == 0  # the old 5 %: no capacity
    want_p = prefill_capacity(pre, mix, slo.ttft_s, link, unservable=limit).rps
    want_d = decode_capacity(dec, mix, slo.ttft_s, slo.itl_s, link, prefill_spec=pre, unservable=limit).rps
    assert want_p > 0 and want_d > 0
    got = role_weights(svc, engine, mix)
    assert got["h100-prefill"] == pytest.approx(want_p, rel=1e-3)
    assert got["h100-decode"] == pytest.approx(want_d, rel=1e-3)
    assert got["h100-prefill"] != pytest.approx(mean_itl_rate(pre, mix, slo.itl_s), rel=1e-2)


def test_the_decode_pool_is_weighed_against_a_prefill_variant_that_keeps_a_capacity() -> None:
    # examples/fleet-mixed-pd.yaml with its A100 prefill variant listed first; 15 % of 24,000-token
    # prompts, which an idle A100 prefill replica takes 2.16 s to prefill (past the 2-s target): it misses
    # those 15 % idle and keeps no capacity, the H100 pairs miss none (allowance 5 %). The old rule read
    # the decode replicas against the first prefill variant (the A100: their seqs bound misses the same
    # 15 %, so no capacity, and the pool fell back to mean_itl_rate); the rule reads them against the
    # H100 prefill, the only one that keeps a capacity. The prefill pool, with a variant of none, is
    # weighed by the router's fallback as before.
    def a100_first(svc: dict[str, Any]) -> None:
        svc["roles"]["prefill"].reverse()
    cfg = load("fleet-mixed-pd.yaml", a100_first)
    svc, engine = cfg.services[0], cfg.planning_engine()
    roles, slo = svc.roles, svc.slo["interactive"]
    assert roles is not None and [v.name for v in roles.prefill] == ["a100-prefill", "h100-prefill"]
    link = roles.kv_transfer
    a100_p, h100_p = (ReplicaSpec.of(v, engine) for v in roles.prefill)
    decoders = {v.name: ReplicaSpec.of(v, engine) for v in roles.decode}
    mix = RequestMix.from_requests([2000] * 85 + [24000] * 15, [200] * 100)
    assert prefill_capacity(a100_p, mix, slo.ttft_s, link).rps == 0
    assert prefill_capacity(h100_p, mix, slo.ttft_s, link).rps > 0
    got = role_weights(svc, engine, mix)
    for name, spec in decoders.items():
        assert decode_capacity(spec, mix, slo.ttft_s, slo.itl_s, link, prefill_spec=a100_p).rps == 0  # the old rule
        want = decode_capacity(spec, mix, slo.ttft_s, slo.itl_s, link, prefill_spec=h100_p).rps
        assert want > 0
        assert got[name] == pytest.approx(want, rel=1e-3)
    for v in roles.prefill:
        assert got[v.name] == pytest.approx(mean_itl_rate(ReplicaSpec.of(v, engine), mix, slo.itl_s))


def test_the_mpc_and_the_router_share_one_capacity_where_every_pool_variant_keeps_one() -> None:
    cfg = load("fleet-mixed-pd.yaml")
    svc, engine = cfg.services[0], cfg.planning_engine()
    mix = RequestMix.from_requests([2000] * 100, [200] * 100)
    modelled = pool_capacities(svc, engine, mix)
    assert all(c > 0 for c in modelled.values())
    assert role_weights(svc, engine, mix) == modelled


def test_under_dynamos_rule_the_pools_are_sized_on_its_length_limit() -> None:
    # examples/fleet-pd.yaml with roles.router: dynamo (max_local_prefill_length 1000): Dynamo prefills
    # remotely only an uncached prompt longer than 1000 tokens, so on a mix of 800-token prompts no prompt
    # reaches the prefill pool (its capacity is infinite, reported 0) and the decode replica computes every
    # prompt itself. The capacities must be those of llm-d's rule at the threshold 1001 (uncached >= 1001 is
    # uncached > 1000), not of the 16-token default the file's non_cached_tokens would otherwise keep.
    def dynamo(svc: dict[str, Any]) -> None:
        svc["roles"].pop("non_cached_tokens", None)
        svc["roles"]["router"] = "dynamo"

    def llmd_1001(svc: dict[str, Any]) -> None:
        svc["roles"]["non_cached_tokens"] = 1001

    def llmd_16(svc: dict[str, Any]) -> None:
        svc["roles"]["non_cached_tokens"] = 16

    engine = load("fleet-pd.yaml").planning_engine()
    short = RequestMix.from_requests([800] * 100, [200] * 100)
    long = RequestMix.from_requests([800] * 50 + [3000] * 50, [200] * 100)
    dyn, at_1001, at_16 = (load("fleet-pd.yaml", e).services[0] for e in (dynamo, llmd_1001, llmd_16))
    assert dyn.roles is not None and dyn.roles.remote_threshold == 1001
    for mix in (short, long):
        assert pool_capacities(dyn, engine, mix) == pool_capacities(at_1001, engine, mix)
    assert pool_capacities(dyn, engine, short)["h100-prefill"] == 0.0  # no prompt is prefilled remotely
    assert pool_capacities(at_16, engine, short)["h100-prefill"] > 0.0
    assert pool_capacities(dyn, engine, long) != pool_capacities(at_16, engine, long)
