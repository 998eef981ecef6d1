"""Capacities per step of a pool sized by each step's demand (``models.capacity.pool_size``,
``pooled_weights``) and the oracle planned on them (``oracle:pool=N``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from autoscaler.config.loading import default_config
from controllers import oracle as oracle_module
from controllers.oracle import OracleController
from controllers.registry import build
from models.capacity import (
    ReplicaSpec,
    RequestMix,
    allowance,
    pool_size,
    pooled_weights,
    replica_capacity,
    variant_weights,
)
from tests.unit.test_oracle import step_workload

CFG = default_config()
SVC = CFG.services[0]
ENGINE = CFG.planning_engine()
MIX = RequestMix.from_means(8000, 300)  # long prompts: a pool gains most (docs/controllers.md)


def test_pool_size_is_the_fewest_replicas_that_serve_by_brute_force() -> None:
    # A pool of n carries n * (1 + 0.1 (n - 1)) req/s from a 1-req/s replica alone (a made-up gain
    # that grows with n). Demand 7.5: n = 5 carries 7.0, n = 6 carries 9.0 -> 6. Within min(most,
    # ceil(7.5 / 1) = 8); most = 4 caps it at 4; demand 0.5 needs 1.
    def serves(demand: float) -> Callable[[int], bool]:
        return lambda n: n * (1 + 0.1 * (n - 1)) >= demand
    for demand, most in ((7.5, 64), (7.5, 4), (0.5, 64), (30.0, 64), (9.0, 64)):
        brute = next((n for n in range(1, min(most, math.ceil(demand)) + 1) if serves(demand)(n)),
                     min(most, math.ceil(demand)))
        assert pool_size(serves(demand), {"x": 1.0, "y": 0.4}, demand, most) == brute
    assert pool_size(lambda n: True, {"x": 0.0}, 10.0, 64) == 1  # no capacity: alone


def test_pooled_weights_are_the_pooled_model_at_each_steps_pool() -> None:
    single = variant_weights(SVC, ENGINE, MIX)
    slo = SVC.slo["interactive"]
    specs = {v.name: ReplicaSpec.of(v, ENGINE) for v in SVC.variants}
    limit = allowance(list(specs.values()), MIX, slo.ttft_s, slo.itl_s)
    demand = np.array([0.0, 0.5 * max(single.values()), 6.0, 6.0, 20.0])
    got = pooled_weights(SVC, ENGINE, MIX, demand, most=8)

    def carries(name: str, n: int) -> float:
        return replica_capacity(specs[name], MIX, slo.ttft_s, slo.itl_s, unservable=limit, replicas=n).rps
    for k, d in enumerate(demand):
        # the pool, found by scanning n upwards: the first whose fastest variant's pool carries d
        top = min(8, max(1, math.ceil(d / max(single.values()))))
        n = next((m for m in range(1, top + 1) if m * max(carries(v, m) for v in specs) >= d), top)
        for name in specs:
            expect = max(single[name], carries(name, n)) if single[name] > 0 else 0.0
            assert got[name][k] == pytest.approx(expect, rel=1e-9), (name, d, n)
    assert all(got[name][0] == single[name] for name in specs)  # no demand: alone
    assert any(got[name][-1] > 1.05 * single[name] for name in specs)  # a pool of 8 gains on long prompts
    alone = pooled_weights(SVC, ENGINE, MIX, demand, most=1)
    assert all(np.array_equal(alone[name], np.full(len(demand), single[name])) for name in specs)
    with pytest.raises(ValueError, match="most must be >= 1"):
        pooled_weights(SVC, ENGINE, MIX, demand, most=0)


def test_a_pooled_oracle_plans_no_more_replicas_than_the_oracle() -> None:
    wl = step_workload()
    plain, pooled = build("oracle", CFG, None, wl), build("oracle:pool=16", CFG, None, wl)
    assert isinstance(plain, OracleController) and isinstance(pooled, OracleController)
    # each step's capacities are at least the plain oracle's, so its cheapest plan costs no more
    assert pooled.plan_cost <= plain.plan_cost + 1e-6


def test_a_pooled_oracle_plans_every_replica_alone_behind_prefix_affinity(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # behind prefix-affinity routing no queue is shared (controllers.mpc.pools_queues): oracle:pool=16
    # never asks for the pooled capacities and plans what the plain oracle plans
    wl = step_workload()
    affinity = CFG.model_copy(update={"simulator": CFG.simulator.model_copy(update={"router": "prefix_affinity"})})
    plain = build("oracle", affinity, None, wl)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("pooled behind prefix affinity")
    monkeypatch.setattr(oracle_module, "pooled_weights", refuse)
    with caplog.at_level("WARNING", logger="autoscaler"):
        unpooled = build("oracle:pool=16", affinity, None, wl)
    # and says so, once for its one service, naming the router and the key it was read from
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1 and f"{CFG.services[0].name}: pool=16 not applied: router prefix_affinity " \
        "(simulator.router)" in said[0]
    assert isinstance(plain, OracleController) and isinstance(unpooled, OracleController)
    assert unpooled.plan_cost == pytest.approx(plain.plan_cost, rel=1e-12)
    with pytest.raises(AssertionError, match="pooled behind prefix affinity"):  # and it would have, behind the other
        build("oracle:pool=16", CFG, None, wl)
