"""The oracle on prefill/decode pools (``controllers.oracle``, issue 34): on a fleet with an aggregated
variant and pools, its offline plan orders pool replicas where the pools serve the demand for less,
and aggregated replicas where they do not, as a brute force over whole fleets says."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.config import FleetConfig
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.workload.types import Request, Workload
from controllers.bound import BoundController
from controllers.oracle import OracleController
from controllers.registry import build
from controllers.roles import pool_capacities
from controllers.static import workload_mix
from models.capacity import variant_weights
from tests.unit.test_mpc_roles import cheapest_fleet, fleet

HOUR_S = 3600.0
COLD_S = 300.0  # examples/fleet-pd.yaml's and the aggregated variant's ``startup_cold_s`` (the default)


def steady(tokens: tuple[int, int], rate: float) -> Workload:
    """An hour of ``rate`` requests/s, evenly spaced, every one ``tokens`` (prompt, output)."""
    n = round(rate * HOUR_S)
    return Workload(
        [Request(arrival_s=i / rate, input_tokens=tokens[0], output_tokens=tokens[1]) for i in range(n)], source="test"
    )


def test_the_oracle_declares_it_scales_roles_and_the_bound_does_not() -> None:
    cfg = fleet(aggregated=True)
    wl = steady((4096, 32), 30.0)
    assert build("oracle:roles=1", cfg, None, wl).scales_roles is True
    assert build("oracle", cfg, None, wl).scales_roles is False  # opt-in: by default the loop holds the pools
    assert BoundController.scales_roles is False  # its candidates plan the aggregated variants alone


@pytest.mark.parametrize(
    ("tokens", "rate", "pd_util", "chosen"),
    [((4096, 32), 30.0, 1.0, "pools"), ((4000, 200), 20.0, 1.0, "aggregated"), ((4096, 32), 30.0, 0.5, "aggregated")],
)
def test_the_oracle_plans_the_pools_where_brute_force_says_they_are_cheaper(
    tokens: tuple[int, int], rate: float, pd_util: float, chosen: str
) -> None:
    # tests/unit/test_mpc_roles.py's fleet: an aggregated H100 variant beside a prefill and a decode
    # pool of H100s, every replica $2.99/h, every variant free to go to 0. The trace's mix gives
    # (capacity models, at the interactive SLO): 4096 / 32 tokens, an aggregated replica ~5.3 req/s, a
    # prefill replica ~7.6 and a decode replica ~78: the pair $0.43/h per request/s against $0.57
    # aggregated, so 30 req/s is cheapest on 4 prefill + 1 decode (5 replicas; aggregated needs 6).
    # 4000 / 200: aggregated ~5.4, prefill ~7.8, decode ~12.2: the pair $0.63 against $0.55, so 20 req/s
    # is cheapest on 4 aggregated (21.8 req/s; a pair beside 2 aggregated serves 18.7). With
    # ``pd_util=0.5`` a pool replica counts half its capacity: the 4096 / 32 pair then costs $0.87 and
    # 6 aggregated replicas are cheapest. The oracle's demand is the most arrivals in a 60-s window
    # over 60 s (rate + 1/60). From the first cold start to the trace's end the plan holds the
    # enumeration's cheapest fleet for that demand; a pool replica is ordered only where it is in it.
    cfg = fleet(aggregated=True)
    svc = cfg.services[0]
    wl = steady(tokens, rate)
    mix = workload_mix(svc, wl)
    assert mix is not None
    caps = {
        **variant_weights(svc, cfg.planning_engine(), mix),
        **{n: c * pd_util for n, c in pool_capacities(svc, cfg.planning_engine(), mix).items()},
    }
    want = cheapest_fleet(svc, caps, rate + 1 / 60, {})
    pools = want["h100-prefill"] + want["h100-decode"]
    assert (pools > 0 and want["h100"] == 0) if chosen == "pools" else (pools == 0 and want["h100"] > 0)
    oracle = build("oracle:roles=1" if pd_util == 1 else f"oracle:roles=1:pd_util={pd_util}", cfg, None, wl)
    assert isinstance(oracle, OracleController)
    at_cold = [r[svc.name] for t, r in oracle.schedule if t <= COLD_S][-1]  # in force from the first cold start
    held = [at_cold, *(r[svc.name] for t, r in oracle.schedule if COLD_S < t < HOUR_S - COLD_S)]
    assert all({n: r.get(n, 0) for n in want} == want for r in held), (want, oracle.schedule)
    ordered = max(s[svc.name].get("h100-prefill", 0) + s[svc.name].get("h100-decode", 0) for _, s in oracle.schedule)
    assert (ordered > 0) == (chosen == "pools")


def test_the_simulated_loop_applies_the_oracles_pool_schedule() -> None:
    # The 4096 / 32 case above, simulated: the plan orders 4 prefill + 1 decode replicas at 0 s and
    # removes the 6 aggregated replicas of the steady start (``steady_start_fleet``) at 300 s, when the
    # pools are ready. By hand: 6 x 300 s = 0.5 aggregated GPU-hours; the pools held from 0 s to the end,
    # so 4 prefill GPU-hours to every decode one. The loop writes the pools only for a controller that
    # declares ``scales_roles``: before, it planned and ran none.
    cfg = fleet(aggregated=True)
    svc = cfg.services[0]
    wl = steady((4096, 32), 30.0)
    oracle = build("oracle:roles=1", cfg, None, wl)
    assert isinstance(oracle, OracleController)
    assert oracle.schedule[0][1][svc.name] == {"h100": 6, "h100-prefill": 4, "h100-decode": 1}
    assert [(t, r[svc.name]) for t, r in oracle.schedule[1:2]] == [
        (COLD_S, {"h100": 0, "h100-prefill": 4, "h100-decode": 1})
    ]
    hours = summarize(run_simulation(cfg, wl, oracle))["gpu_hours"]
    assert hours["h100"] == pytest.approx(6 * COLD_S / 3600.0, rel=1e-2)
    assert hours["h100-decode"] > 0.9
    assert hours["h100-prefill"] == pytest.approx(4 * hours["h100-decode"], rel=1e-6)


def test_by_default_the_oracle_plans_no_pool() -> None:
    # The 4096 / 32 case, where the pools are cheaper by brute force: without ``roles=1`` the oracle plans
    # the aggregated variant alone (its schedule names no pool variant) and the loop holds the pools, so
    # its row, the reference ``compare`` divides by, is the aggregated fleet's as before the option.
    cfg = fleet(aggregated=True)
    wl = steady((4096, 32), 30.0)
    oracle = build("oracle", cfg, None, wl)
    assert isinstance(oracle, OracleController)
    assert all(set(r[cfg.services[0].name]) == {"h100"} for _, r in oracle.schedule)


def mixed_fleet() -> FleetConfig:
    """``fleet(aggregated=True)`` with the aggregated H100 variant held at 1 or more replicas and the pools
    ready at t = 0 (4 prefill, 1 decode replicas): a fleet on which the oracle's plan keeps aggregated
    replicas beside the pools, so the router has to split the demand between the two."""
    cfg = fleet(aggregated=True)
    svc = cfg.services[0]
    assert svc.roles is not None
    roles = svc.roles.model_copy(update={
        "prefill": [svc.roles.prefill[0].model_copy(update={"initial_replicas": 4})],
        "decode": [svc.roles.decode[0].model_copy(update={"initial_replicas": 1})]})
    svc = svc.model_copy(update={"variants": [svc.variants[0].model_copy(update={"min_replicas": 1})], "roles": roles})
    return cfg.model_copy(update={"services": [svc]})


def test_with_route_the_router_splits_the_demand_as_the_oracles_plan() -> None:
    # 15 minutes of 30 req/s, 4096 / 32 tokens, on mixed_fleet. The plan (capacities as in the brute-force
    # test above: aggregated ~5.3 req/s a replica, prefill ~7.6, decode ~78) holds, from 60 s, 3 aggregated
    # replicas (3 x 5.29 = 15.9 req/s) beside 2 prefill + 1 decode replicas (2 x 7.56 = 15.1 req/s).
    # By default (``route`` on with ``roles=1``) the oracle hands the router those capacities: a decode
    # replica then weighs 78.1 x min(1, 15.1 / 78.1) = 15.1, an aggregated one 5.29, so the three
    # aggregated replicas take about half the demand, 13.9 req/s from 300 s to 900 s, within the 15.9
    # planned. Without them (``route=0``) the router weighs the decode replica by an aggregated H100's rate
    # (``FleetSimulator._weights``: the same profile), as it weighs each aggregated replica, and the three
    # take 18.6 req/s, past their planned 15.9 (issue 34: on Azure code x20 the aggregated GH200s so served
    # 25 % of the demand at 44 % attainment).
    cfg = mixed_fleet()
    svc = cfg.services[0]
    rate = 30.0
    wl = Workload([Request(arrival_s=i / rate, input_tokens=4096, output_tokens=32) for i in range(int(rate * 900))],
                  source="test")
    served = {}
    for spec in ("oracle:roles=1:route=0", "oracle:roles=1"):
        oracle = build(spec, cfg, None, wl)
        assert isinstance(oracle, OracleController)
        assert [r[svc.name] for t, r in oracle.schedule if t == 60.0] == [{"h100": 3, "h100-prefill": 2,
                                                                          "h100-decode": 1}]
        run = run_simulation(cfg, wl, oracle)
        late = [sr for sr in run.sim.final if sr.req.arrival_s >= 300.0]
        served[spec] = sum(sr.replica is not None and sr.replica.variant == "h100" for sr in late) / 600.0  # req/s
    routed = build("oracle:roles=1", cfg, None, wl)
    assert isinstance(routed, OracleController)
    weights = routed.route_weights(svc.name, 400.0)
    assert weights == pytest.approx({"h100": 5.29, "h100-prefill": 7.56, "h100-decode": 78.1}, rel=2e-3)
    planned = 3 * weights["h100"]
    assert served["oracle:roles=1"] <= planned
    assert served["oracle:roles=1:route=0"] > planned  # the router's own weights: past the plan
    plain = build("oracle:roles=1:route=0", cfg, None, wl)
    assert isinstance(plain, OracleController)
    assert plain.route_weights(svc.name, 400.0) == {}


def test_route_weights_are_the_plans_step_holding_the_time() -> None:
    # By hand: 60-s steps of capacities 1, 2, 3 req/s; 59.9 s is in step 0, 60 s in step 1, and past the
    # last step the last holds. No ``route`` (the default), or a service it does not hold: none.
    route = {"svc": {"a": np.array([1.0, 2.0, 3.0]), "b": np.array([10.0, 20.0, 30.0])}}
    oracle = OracleController([(0.0, {"svc": {"a": 1}})], {"svc": {"a": 1}}, 15.0, 300.0, 0.0, 0.0,
                              route=route, route_dt_s=60.0)
    assert oracle.route_weights("svc", 59.9) == {"a": 1.0, "b": 10.0}
    assert oracle.route_weights("svc", 60.0) == {"a": 2.0, "b": 20.0}
    assert oracle.route_weights("svc", 1e6) == {"a": 3.0, "b": 30.0}
    assert oracle.route_weights("other", 0.0) == {}
    plain = OracleController([(0.0, {"svc": {"a": 1}})], {"svc": {"a": 1}}, 15.0, 300.0, 0.0, 0.0)
    assert plain.route_weights("svc", 0.0) == {}


def test_peak_s_sizes_the_plan_for_bursts_shorter_than_a_minute() -> None:
    # Half an hour of bursts: 600 requests (4096 / 32 tokens) evenly over the first 10 s of each minute,
    # none in the other 50 s. Any 60-s window holds 600 of them (10 req/s), any 10-s window at most 600 (60
    # req/s). An aggregated H100 replica serves 5.29 req/s of this mix (the capacity model, as above), so
    # by hand the plan holds ceil(10 / 5.29) = 2 replicas by default and ceil(60 / 5.29) = 12 with
    # ``peak_s=10``, from the first cold start (300 s) to the last 5 minutes.
    cfg = fleet(aggregated=True)
    svc = cfg.services[0]
    wl = Workload([Request(arrival_s=60.0 * m + i / 60.0, input_tokens=4096, output_tokens=32)
                   for m in range(30) for i in range(600)], source="test")
    mix = workload_mix(svc, wl)
    assert mix is not None
    assert variant_weights(svc, cfg.planning_engine(), mix)["h100"] == pytest.approx(5.29, rel=2e-3)
    for spec, want in (("oracle", 2), ("oracle:peak_s=10", 12)):
        oracle = build(spec, cfg, None, wl)
        assert isinstance(oracle, OracleController)
        held = [r[svc.name]["h100"] for t, r in oracle.schedule if COLD_S <= t < 1800.0 - COLD_S]
        at_cold = [r[svc.name]["h100"] for t, r in oracle.schedule if t <= COLD_S][-1]
        assert {at_cold, *held} == {want}, (spec, oracle.schedule)
    with pytest.raises(ValueError, match="peak_s"):
        build("oracle:peak_s=0", cfg, None, wl)


def test_route_without_its_steps_length_is_refused() -> None:
    # ``route_dt_s`` defaults to 0: a route given without it would divide by zero at the first decision
    route = {"svc": {"a": np.array([1.0])}}
    with pytest.raises(ValueError, match="route_dt_s"):
        OracleController([(0.0, {"svc": {"a": 1}})], {"svc": {"a": 1}}, 15.0, 300.0, 0.0, 0.0, route=route)
