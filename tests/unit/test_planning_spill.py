"""The aggregated spill reserve (``models.planning.PlanService.pd_spill``, ``mpc:spill=R``, issue 34): the
demand row counts the pools' share at ``1 - R``, so the aggregated variants hold ``R`` times the pools'
requests/s beside their own share. Checked by hand and against brute force."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from support.brute_plans import pools_brute_force as brute_force

from autoscaler.config.loading import load_config
from autoscaler.state import PoolObservation, ServiceEstimate, Signals, VariantObservation
from controllers.mpc import MPCController, _Inputs, idle_reserve, planned_idle_reserve
from controllers.registry import build
from models.planning import PlanProblem, PlanService, PlanVariant, greedy_counts, solve

MIXED = Path(__file__).resolve().parents[2] / "examples" / "fleet-mixed-pd.yaml"


def variant(name: str, h: int, *, role: str | None = None, price: float = 1.0, cap: float = 10.0, current: int = 0,
            hi: int = 3, warm: int = 1, cold: int = 2, start: float = 0.0) -> PlanVariant:
    return PlanVariant(name, name, 1, price, np.full(h, cap), current, np.full(h, float(current)), 0, hi,
                       warm, cold, 0, 0, start, 0.0, role=role)


def steady(spill: float) -> tuple[PlanService, PlanProblem]:
    """30 req/s for 2 steps of 60 s, every replica ready at once: an aggregated replica serves 10 req/s
    for $360/h ($6 a step), a prefill replica 15 and a decode replica 100 for $180/h ($3 a step)."""
    h = 2
    variants = [variant("agg", h, price=360.0, cap=10.0, hi=10, warm=0, cold=0),
                variant("pre", h, role="prefill", price=180.0, cap=15.0, hi=10, warm=0, cold=0),
                variant("dec", h, role="decode", price=180.0, cap=100.0, hi=10, warm=0, cold=0)]
    svc = PlanService("s", variants, np.full(h, 30.0), miss_cost=10.0, pd_spill=spill)
    return svc, PlanProblem([svc], 60.0, h, blocks=[0, 1], mip_rel_gap=1e-9)


@pytest.mark.parametrize("tuned", [False, True])
@pytest.mark.parametrize(("spill", "want", "per_step"), [
    # no reserve: the pools serve all 30 on 2 prefill (30) + 1 decode (100) = $9 a step; 3 aggregated cost $18
    (0.0, {"agg": 0, "pre": 2, "dec": 1}, 9.0),
    # R 0.2: the pools' 30 leave 30 - 0.8 x 30 = 6 req/s to hold aggregated: 1 replica, $6 + $9 = $15 a step;
    # against 1 + 1 pools (x 15: 30 - 12 = 18 aggregated, 2 replicas, $18) and 3 aggregated ($18)
    (0.2, {"agg": 1, "pre": 2, "dec": 1}, 15.0),
    # R 0.5: x 30 needs 30 - 15 = 15 aggregated (2, $12 + $9 = $21), x 15 needs 22.5 (3, $18 + $6 = $24): 3
    # aggregated alone ($18) is cheapest
    (0.5, {"agg": 3, "pre": 0, "dec": 0}, 18.0),
])
def test_the_reserve_by_hand(spill: float, want: dict[str, int], per_step: float, tuned: bool) -> None:
    _, problem = steady(spill)
    plan = solve(dataclasses.replace(problem, tuned=tuned))
    assert {v: int(n[0]) for v, n in plan.replicas["s"].items()} == want
    assert plan.cost == pytest.approx(2 * per_step, rel=1e-9)
    assert float(plan.unserved_rps["s"].max()) == pytest.approx(0.0, abs=1e-9)



@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("tuned", [False, True])
def test_the_reserve_is_the_brute_force_optimum(seed: int, tuned: bool) -> None:
    # One aggregated, one prefill and one decode variant, 3 steps with start-ups and replicas held today,
    # a reserve in (0.05, 0.6): the MILP (its strengthening rows, with the pools' share at 1 - R) costs the
    # cheapest plan the enumeration finds. The tuned search's hull: test_the_reserve_with_the_hull.
    rng = np.random.default_rng(300 + seed)
    h, dt = 3, 60.0
    variants = [
        variant("agg", h, price=float(rng.uniform(2, 6)), cap=float(rng.uniform(4, 14)),
                current=int(rng.integers(0, 3)), hi=4, cold=2, start=0.01),
        variant("pre", h, role="prefill", price=float(rng.uniform(1, 4)), cap=float(rng.uniform(8, 30)),
                current=int(rng.integers(0, 2)), warm=1, cold=1, start=0.01),
        variant("dec", h, role="decode", price=float(rng.uniform(1, 4)), cap=float(rng.uniform(6, 20)),
                current=int(rng.integers(0, 3)), warm=0, cold=1),
    ]
    svc = PlanService("s", variants, rng.uniform(2, 40, h), miss_cost=0.002, pd_spill=float(rng.uniform(0.05, 0.6)))
    plan = solve(PlanProblem([svc], dt, h, blocks=list(range(h)), mip_rel_gap=1e-9, tuned=tuned))
    assert plan.cost == pytest.approx(brute_force(svc, dt), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_the_reserve_with_the_hull_is_the_brute_force_optimum(seed: int) -> None:
    # Two aggregated variants of different capacities beside a prefill and a decode one, 2 steps: the tuned
    # search with the demand rows' convex hull (PlanProblem.hull: a step with two capacities gets the hull's
    # facets in place of the MIR rows) costs the cheapest plan the enumeration finds, the pools at 1 - R.
    rng = np.random.default_rng(400 + seed)
    h, dt = 2, 60.0
    variants = [
        variant("a1", h, price=float(rng.uniform(2, 6)), cap=float(rng.uniform(4, 9)),
                current=int(rng.integers(0, 3)), hi=3, cold=1, start=0.01),
        variant("a2", h, price=float(rng.uniform(3, 9)), cap=float(rng.uniform(10, 16)),
                current=int(rng.integers(0, 2)), hi=3, warm=0, cold=1),
        variant("pre", h, role="prefill", price=float(rng.uniform(1, 4)), cap=float(rng.uniform(8, 30)),
                current=int(rng.integers(0, 2)), hi=3, warm=1, cold=1, start=0.01),
        variant("dec", h, role="decode", price=float(rng.uniform(1, 4)), cap=float(rng.uniform(6, 20)),
                current=int(rng.integers(0, 3)), hi=3, warm=0, cold=1),
    ]
    svc = PlanService("s", variants, rng.uniform(2, 40, h), miss_cost=0.002, pd_spill=float(rng.uniform(0.05, 0.6)))
    plan = solve(PlanProblem([svc], dt, h, blocks=list(range(h)), mip_rel_gap=1e-9, tuned=True, hull=True))
    assert plan.cost == pytest.approx(brute_force(svc, dt), rel=1e-6, abs=1e-9)


def test_a_reserve_out_of_range_is_refused() -> None:
    svc, problem = steady(0.0)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="pd_spill must be in"):
            solve(dataclasses.replace(problem, services=[dataclasses.replace(svc, pd_spill=bad)]))
    cfg = load_config(str(MIXED))
    with pytest.raises(ValueError, match="spill must be in"):
        MPCController(cfg, {}, spill=1.0)


def test_the_mpc_hands_its_reserve_to_a_mixed_service_only() -> None:
    # examples/fleet-mixed-pd.yaml has aggregated variants beside its pools: mpc:spill=0.3 plans with
    # pd_spill 0.3; the default spec with none. A pools-only service (examples/fleet-pd.yaml) gets 0: with
    # no aggregated variant there is nothing to hold the reserve.
    for path, spec, want in ((MIXED, "mpc:spill=0.3", 0.3), (MIXED, "mpc", 0.0),
                             (MIXED.with_name("fleet-pd.yaml"), "mpc:spill=0.3", 0.0)):
        cfg = load_config(str(path))
        svc = cfg.services[0]
        mpc = build(spec, cfg, None, None)
        assert isinstance(mpc, MPCController)
        pools = {role: PoolObservation(role, Signals(), {v.name: VariantObservation(0, 0)
                                                         for r, v in svc.role_variants() if r == role})
                 for role in ("prefill", "decode")}
        est = ServiceEstimate(svc.name, 600.0, Signals.of({"arrival_rate_rps": 20.0, "queue_length": 0.0}),
                              {v.name: VariantObservation(0, 0) for v in svc.variants}, {}, False, 0.0, 0.0, 0,
                              pools=pools)
        inputs = mpc._inputs(est, svc)
        assert isinstance(inputs, _Inputs)
        assert inputs.service.pd_spill == want


def test_idle_reserve_routes_the_aggregated_replicas_their_planned_share() -> None:
    # 10 H100s at 6 req/s and 5 GH200s at 8 hold 60 + 40 = 100 req/s; of 200 req/s the pools take 150, so
    # the aggregated share is 50: half their capacity, and each weight is halved; the decode weight stays.
    route = {"h100": 6.0, "gh200": 8.0, "h100-decode": 50.0}
    serving = {"h100": 10.0, "gh200": 5.0, "h100-decode": 2.0}
    assert idle_reserve(route, ["h100", "gh200"], serving, 200.0, 150.0) == {"h100": 3.0, "gh200": 4.0,
                                                                               "h100-decode": 50.0}
    # a share at or above the capacity held, or no aggregated replica serving: the weights as they were
    assert idle_reserve(route, ["h100", "gh200"], serving, 200.0, 90.0) == route
    assert idle_reserve(route, ["h100", "gh200"], {"h100-decode": 2.0}, 200.0, 150.0) == route
    cfg = load_config(str(MIXED))
    with pytest.raises(ValueError, match="spill_idle must be 0 or 1"):
        MPCController(cfg, {}, spill_idle=1)  # without a reserve there is nothing to leave idle


@pytest.mark.parametrize("tuned", [False, True])
def test_the_idle_reserve_follows_the_plan_counts_not_the_solver_columns(tuned: bool) -> None:
    # steady(0.2) with 2 aggregated replicas at least (2 today, as are 1 prefill and 1 decode) and the pools
    # at $150/h ($2.50 a step): 2 aggregated + 1 prefill + 1 decode ($17 a step) is the cheapest (3 aggregated
    # $18, 2 + 2 + 1 $19.50, 2 aggregated alone leave 10 req/s missed). The pools carry min(15, 100, 30) = 15
    # req/s, the aggregated share 30 - 15 = 15 of the 2 x 10 = 20 they hold: weight 10 x 15 / 20 = 7.5. With
    # the reserve the cost leaves the solver's pools' column free in [12.5, 15] (its 0.8 x plus 20 aggregated
    # cover 30), and weights read from the columns followed the solver's pick (8.75 at x 12.5).
    svc, problem = steady(0.2)
    agg, pre, dec = svc.variants
    svc = dataclasses.replace(svc, variants=[
        dataclasses.replace(agg, min_replicas=2, current=2, ready=np.full(2, 2.0)),
        *(dataclasses.replace(v, price_per_hour=150.0, current=1, ready=np.full(2, 1.0)) for v in (pre, dec))])
    plan = solve(dataclasses.replace(problem, services=[svc], tuned=tuned))
    assert {v: int(n[0]) for v, n in plan.replicas["s"].items()} == {"agg": 2, "pre": 1, "dec": 1}
    route = {"agg": 10.0, "pre": 15.0, "dec": 100.0}
    assert planned_idle_reserve(route, svc, plan.replicas["s"], 60.0) == pytest.approx(
        {"agg": 7.5, "pre": 15.0, "dec": 100.0}, rel=1e-12)


def test_each_bad_spill_setting_is_named_alone() -> None:
    # the registry refuses spill=1 itself ([0, 1): at R = 1 the pools count nothing in the demand row), and
    # the constructor's checks each name the one setting that failed
    cfg = load_config(str(MIXED))
    for spec, want in (("mpc:spill=1", "mpc spill must be in [0, 1), got 1"),
                       ("mpc:spill=1.5", "mpc spill must be in [0, 1), got 1.5")):
        with pytest.raises(ValueError) as err:
            build(spec, cfg, None, None)
        assert str(err.value) == want
    for kwargs, want in (({"spill": 1.0}, "mpc: spill must be in [0, 1), got 1.0"),
                         ({"pd_util": 0.0}, "mpc: pd_util must be in (0, 1], got 0.0"),
                         ({"spill_idle": 1},
                          "mpc: spill_idle must be 0 or 1 (1 with a spill > 0), got 1 with spill 0.0")):
        with pytest.raises(ValueError) as err:
            MPCController(cfg, {}, **kwargs)
        assert str(err.value) == want


@pytest.mark.parametrize(("spill", "want"), [
    # $ per request/s-hour: aggregated 360 / 10 = 36, prefill 180 / 15 + decode 180 / 100 = 13.8.
    # R 0: the pools (13.8 < 36) cover all 30: 2 prefill + 1 decode, no aggregated replica.
    (0.0, {"agg": 0, "pre": 2, "dec": 1}),
    # R 0.2: 13.8 / 0.8 = 17.25 < 36, the pools still; their share 30 counts 24, so the aggregated variants
    # hold 0.2 x 30 = 6 req/s: 1 replica (the MILP's own plan, test_the_reserve_by_hand)
    (0.2, {"agg": 1, "pre": 2, "dec": 1}),
    # R 0.7: 13.8 / 0.3 = 46 > 36: the pools' route costs more per request/s than 3 aggregated replicas
    (0.7, {"agg": 3, "pre": 0, "dec": 0}),
])
def test_the_greedy_fallback_holds_the_reserve(spill: float, want: dict[str, int]) -> None:
    svc, problem = steady(spill)
    counts = greedy_counts(problem)
    got = {v.name: int(counts[0, j][0]) for j, v in enumerate(svc.variants)}
    assert got == want
    # the demand row: 10 per aggregated replica plus (1 - R) x the pools' min(15 p, 100 d, 30) covers 30
    assert 10.0 * got["agg"] + (1 - spill) * min(15.0 * got["pre"], 100.0 * got["dec"], 30.0) >= 30.0 - 1e-9
