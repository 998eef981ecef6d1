"""The oracle on prefill/decode pools (``oracle:roles=1``, ``controllers.oracle``, issue 34) on the two paths
``tests/unit/test_oracle_roles.py`` leaves out: the service's prefill:decode ratio (Kthena's bounds,
``roles.ratio``, the constraint ``controllers.mpc.pd_ratio`` gives the plan, as it gives the MPC's) and
pools that start above 0 replicas (``initial_replicas``: ready at t = 0 in the simulator, so the plan may
serve with them from its first step, pays them from t = 0 and no start-up for them).

Every case is worked by hand: the fleet held once the pools are up is the cheapest whole fleet an
enumeration finds (``cheapest_within``), and the plan's cost is the schedule's replica-seconds at each
variant's price plus each order's cold start (``plan_variant``'s ``start_cost``). All plans serve the
whole demand at every step (a request missed costs ten times the dearest way to serve it)."""

from __future__ import annotations

import itertools
import math

import pytest
import yaml

from autoscaler.config.fleet import FleetConfig, Service
from autoscaler.config.loading import parse_config
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from controllers.oracle import OracleController
from controllers.registry import build
from controllers.roles import pool_capacities
from controllers.static import workload_mix
from models.capacity import variant_weights
from tests.unit.test_mpc_roles import AGGREGATED, EXAMPLE, estimate
from tests.unit.test_oracle_roles import COLD_S, steady

PRICE = 2.99
"""$/h of a pool replica (examples/fleet-pd.yaml's H100s, one GPU each) and of the aggregated one by default."""
TICK_S = 15.0  # the loop's default tick (``autoscaler.config.control.DEFAULT_TICK_S``): the oracle's step here
LONG_PROMPT, LONG_RATE = (4096, 32), 30.0
"""Capacity models: an aggregated replica ~5.29 req/s, a prefill one ~7.56, a decode one ~78.1 (tests below
assert the orderings they use)."""
LONG_OUTPUT, OUTPUT_RATE = (4000, 200), 20.0
"""An aggregated replica ~5.44 req/s, a prefill one ~7.78, a decode one ~12.2."""


def fleet(agg_price: float = PRICE, initial: tuple[int, int] = (0, 0), ratio: tuple[float, float] | None = None,
          step_down: int | None = None) -> FleetConfig:
    """examples/fleet-pd.yaml's pools beside an aggregated H100 variant at ``agg_price`` $/h (as
    ``tests/unit/test_mpc_roles.fleet``), every variant free to go to 0, the pools starting at
    ``initial`` (prefill, decode) replicas, ``ratio`` as ``roles.ratio`` (min, max) and, with
    ``step_down``, the guard's ``max_step_down`` raised to it (by default 2 a tick)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    svc = doc["services"][0]
    svc["variants"] = [{**AGGREGATED, "price_per_gpu_hour": agg_price}]
    for pool, n in zip(("prefill", "decode"), initial, strict=True):
        for v in svc["roles"][pool]:
            v["min_replicas"], v["initial_replicas"] = 0, n
    if ratio is not None:
        svc["roles"]["ratio"] = {"min_ratio": ratio[0], "max_ratio": ratio[1]}
    if step_down is not None:
        doc.setdefault("controller", {})["guard"] = {"max_step_down": step_down}
    return parse_config(doc, str(EXAMPLE), EXAMPLE.parent)


def capacities(cfg: FleetConfig, tokens: tuple[int, int], rate: float) -> dict[str, float]:
    """One replica's requests/s per variant for the steady trace's mix (aggregated and pools)."""
    svc = cfg.services[0]
    mix = workload_mix(svc, steady(tokens, rate))
    assert mix is not None
    return {**variant_weights(svc, cfg.planning_engine(), mix), **pool_capacities(svc, cfg.planning_engine(), mix)}


def cheapest_within(svc: Service, caps: dict[str, float], rate: float,
                    ratio: tuple[float, float] | None) -> dict[str, int]:
    """The cheapest whole fleet (aggregated, prefill, decode replicas, 0-12 each) serving ``rate``, by
    enumeration: aggregated replicas serve their capacity each, the pools the smaller of their two
    capacities; with ``ratio`` only fleets with ``min x D <= P <= max x D``. Asserts it is the only one at
    its cost (a tie would leave the plan free to pick)."""
    agg, (pre, dec) = svc.variants[0], (v for _, v in svc.role_variants())
    best, found, ties = math.inf, {}, 0
    for a, p, d in itertools.product(range(13), repeat=3):
        if ratio is not None and not ratio[0] * d - 1e-9 <= p <= ratio[1] * d + 1e-9:
            continue
        if a * caps[agg.name] + min(p * caps[pre.name], d * caps[dec.name]) < rate - 1e-9:
            continue
        cost = a * agg.price_per_replica_hour + (p + d) * pre.price_per_replica_hour
        if cost < best - 1e-9:
            best, found, ties = cost, {agg.name: a, pre.name: p, dec.name: d}, 1
        elif cost < best + 1e-9:
            ties += 1
    assert ties == 1, f"{ties} fleets cost ${best:.2f}/h"
    return found


def horizon_s(rate: float) -> float:
    """The oracle's horizon for ``steady(_, rate)``, s: from 0 to a tick past the last arrival, in whole
    ticks (``oracle_controller``: 3615 s for these hour-long traces)."""
    last = (round(rate * 3600.0) - 1) / rate
    return math.ceil((last + TICK_S) / TICK_S) * TICK_S


def schedule(oracle: OracleController, svc: Service) -> list[tuple[float, dict[str, int]]]:
    return [(t, r[svc.name]) for t, r in oracle.schedule]


def demand(rate: float) -> float:
    """The oracle's demand for the steady trace, at most: the most arrivals in a 60-s window over 60 s is
    rate x 60 or, where the arrival times' rounding puts one more inside a window (30 req/s: 1,801), one
    more (rate + 1/60, as ``tests/unit/test_oracle_roles.py``); at 20 req/s it is exactly 1,200. The plans
    checked here are the same for either value (each capacity is far from a replica's boundary)."""
    return rate + 1 / 60


# ----------------------------------------------------------------------------- the ratio


@pytest.mark.parametrize(
    ("tokens", "rate", "ratio", "unbound", "bound"),
    [
        # max_ratio 2 (P <= 2 D): 4 prefill need 2 decode replicas where the capacities alone want 1
        (LONG_PROMPT, LONG_RATE, (0.0, 2.0), (4, 1), (4, 2)),
        # min_ratio 2 (P >= 2 D): 2 decode replicas need 4 prefill where the capacities alone want 3
        (LONG_OUTPUT, OUTPUT_RATE, (2.0, 4.0), (3, 2), (4, 2)),
    ],
)
def test_the_oracle_keeps_the_ratio_at_the_cost_worked_by_hand(
    tokens: tuple[int, int], rate: float, ratio: tuple[float, float], unbound: tuple[int, int],
    bound: tuple[int, int]
) -> None:
    # The aggregated replica at twice the pools' price, so the pools serve the hour with or without the
    # ratio; the pools start at 0 and the aggregated variant at the steady start, 6 (LONG_PROMPT) or 5
    # (LONG_OUTPUT) replicas. The enumeration's fleet without the ratio breaks it, with it it takes one
    # more pool replica; the oracle orders that fleet at t = 0 (ready at the cold start, 300 s) and
    # holds the fewest aggregated replicas that serve the demand alone until then (6 of 6 for
    # LONG_PROMPT: 5 serve 26.4 < 30.02; 4 of 5 for LONG_OUTPUT: 21.8 >= 20.02 > 16.3), then none.
    # Cost by hand: each pool replica priced from t = 0 to the horizon (3615 s) plus its cold start
    # (300 s of its price), the aggregated ones for 300 s at $5.98/h. Every block keeps the ratio.
    cfg = fleet(agg_price=2 * PRICE, ratio=ratio)
    svc = cfg.services[0]
    agg, pre, dec = svc.variants[0].name, *(v.name for _, v in svc.role_variants())
    caps = capacities(cfg, tokens, rate)
    want = cheapest_within(svc, caps, demand(rate), ratio)
    assert (want[pre], want[dec], want[agg]) == (*bound, 0)
    assert tuple(cheapest_within(svc, caps, demand(rate), None)[n] for n in (pre, dec)) == unbound
    held = math.ceil(demand(rate) / caps[agg])  # aggregated replicas until the pools are ready

    oracle = build("oracle:roles=1", cfg, None, steady(tokens, rate))
    assert isinstance(oracle, OracleController)
    assert oracle.replicas[svc.name][agg] >= held  # the steady start holds enough to remove down to it
    assert schedule(oracle, svc) == [(0.0, {agg: held, pre: bound[0], dec: bound[1]}),
                                     (COLD_S, {agg: 0, pre: bound[0], dec: bound[1]})]
    pools = sum(bound)
    by_hand = (pools * PRICE * (horizon_s(rate) + COLD_S) + held * 2 * PRICE * COLD_S) / 3600.0
    assert oracle.plan_cost == pytest.approx(by_hand, rel=1e-9)
    for _, r in oracle.schedule:
        p, d = r[svc.name][pre], r[svc.name][dec]
        assert ratio[0] * d <= p <= ratio[1] * d


def test_a_ratio_that_costs_more_than_it_saves_leaves_the_oracle_aggregated() -> None:
    # Every replica at $2.99/h, LONG_PROMPT at 45 req/s (demand 45.02): without a ratio the pools serve it on
    # 6 prefill + 1 decode (7 replicas) against 9 aggregated, and the oracle orders them. With max_ratio 3
    # the enumeration's cheapest fleet is 6 + 2 (8 replicas, one fewer than 9 aggregated), but for an
    # hour that one replica-hour saves $2.99 less than it costs to get there: the 8 cold starts (8 x
    # 300 s) and the 9 aggregated replicas held until the pools are up (9 x 300 s; the first block then
    # removes 8, the guard's 2 a tick, so 1 more for 60 s): by hand $28.31 against $27.02 for the 9
    # aggregated replicas of the steady start held all hour. So the oracle plans no pool. A plan that
    # ignored the ratio orders 6 + 1 (the case without it, checked here too).
    rate = 45.0
    base = fleet()
    svc = base.services[0]
    agg, pre, dec = svc.variants[0].name, *(v.name for _, v in svc.role_variants())
    caps = capacities(base, LONG_PROMPT, rate)
    assert cheapest_within(svc, caps, demand(rate), None) == {agg: 0, pre: 6, dec: 1}
    assert cheapest_within(svc, caps, demand(rate), (0.0, 3.0)) == {agg: 0, pre: 6, dec: 2}
    assert math.ceil(demand(rate) / caps[agg]) == 9
    hour = horizon_s(rate)
    pools = (8 * (hour + COLD_S) + 9 * COLD_S + 1 * 60.0) * PRICE / 3600.0
    aggregated = 9 * hour * PRICE / 3600.0
    assert aggregated < pools

    free = build("oracle:roles=1", base, None, steady(LONG_PROMPT, rate))
    assert isinstance(free, OracleController)
    assert schedule(free, svc)[-1][1] == {agg: 0, pre: 6, dec: 1}
    cfg = fleet(ratio=(0.0, 3.0))
    oracle = build("oracle:roles=1", cfg, None, steady(LONG_PROMPT, rate))
    assert isinstance(oracle, OracleController)
    assert oracle.replicas[svc.name][agg] == 9
    assert schedule(oracle, svc) == [(0.0, {agg: 9, pre: 0, dec: 0})]
    assert oracle.plan_cost == pytest.approx(aggregated, rel=1e-9)


# ------------------------------------------------------------------ pools that start above 0


def test_pools_that_start_ready_serve_from_t0_and_the_aggregated_replicas_go() -> None:
    # LONG_PROMPT at 30 req/s, the pools starting at 4 prefill + 1 decode (serving min(30.2, 78.1) >= 30.02,
    # the enumeration's cheapest fleet with the aggregated replica at twice their price) beside the steady
    # start's 6 aggregated replicas, the guard free to remove them all at once. The initial pool replicas are
    # ready at t = 0 (the simulator starts them so), so the plan holds them from its first step, orders
    # nothing and removes every aggregated replica at t = 0: by hand 5 x $2.99/h x 3615 s, no cold start
    # (a plan that took them for orders would pay 5 x 300 s more; one that took them for not ready would
    # hold 6 aggregated replicas 300 s and order).
    cfg = fleet(agg_price=2 * PRICE, initial=(4, 1), step_down=20)
    svc = cfg.services[0]
    agg, pre, dec = svc.variants[0].name, *(v.name for _, v in svc.role_variants())
    caps = capacities(cfg, LONG_PROMPT, LONG_RATE)
    assert cheapest_within(svc, caps, demand(LONG_RATE), None) == {agg: 0, pre: 4, dec: 1}
    oracle = build("oracle:roles=1", cfg, None, steady(LONG_PROMPT, LONG_RATE))
    assert isinstance(oracle, OracleController)
    assert oracle.replicas[svc.name] == {agg: 6}
    assert schedule(oracle, svc) == [(0.0, {agg: 0, pre: 4, dec: 1})]
    assert oracle.plan_cost == pytest.approx(5 * PRICE * horizon_s(LONG_RATE) / 3600.0, rel=1e-9)


def test_pools_that_start_where_the_aggregated_variant_is_cheaper_are_removed_at_t0() -> None:
    # LONG_OUTPUT at 20 req/s, every replica $2.99/h, the pools starting at 3 prefill + 2 decode beside the
    # steady start's 5 aggregated replicas: the enumeration's cheapest fleet is 4 aggregated (21.8 >= 20.02;
    # 3 prefill + 2 decode serve 23.4 on 5 replicas), all of them ready at t = 0, so the plan removes the
    # pools and one aggregated replica at once: by hand 4 x $2.99/h x 3615 s.
    cfg = fleet(initial=(3, 2), step_down=20)
    svc = cfg.services[0]
    agg, pre, dec = svc.variants[0].name, *(v.name for _, v in svc.role_variants())
    caps = capacities(cfg, LONG_OUTPUT, OUTPUT_RATE)
    assert cheapest_within(svc, caps, demand(OUTPUT_RATE), None) == {agg: 4, pre: 0, dec: 0}
    oracle = build("oracle:roles=1", cfg, None, steady(LONG_OUTPUT, OUTPUT_RATE))
    assert isinstance(oracle, OracleController)
    assert oracle.replicas[svc.name] == {agg: 5}
    assert schedule(oracle, svc) == [(0.0, {agg: 4, pre: 0, dec: 0})]
    assert oracle.plan_cost == pytest.approx(4 * PRICE * horizon_s(OUTPUT_RATE) / 3600.0, rel=1e-9)


def test_too_few_ready_pool_replicas_serve_beside_fewer_aggregated_ones_until_the_orders_are_up() -> None:
    # LONG_PROMPT at 30 req/s, every replica $2.99/h, the pools starting at 2 prefill + 1 decode (15.1
    # req/s) beside 6 aggregated: the enumeration's fleet is 4 + 1 pool replicas. The plan orders 2 prefill
    # at t = 0 and, until they are ready at 300 s, holds the 3 aggregated replicas that serve the rest
    # (15.9 >= 30.02 - 15.1 > 10.6), then none: by hand 5 pool replicas for 3615 s, 2 cold starts of 300 s
    # and 3 aggregated replicas for 300 s. Holding 3 aggregated replicas beside the 2 + 1 all hour instead
    # costs 6 replica-hours where this costs 5 and 0.42.
    cfg = fleet(initial=(2, 1), step_down=20)
    svc = cfg.services[0]
    agg, pre, dec = svc.variants[0].name, *(v.name for _, v in svc.role_variants())
    caps = capacities(cfg, LONG_PROMPT, LONG_RATE)
    assert cheapest_within(svc, caps, demand(LONG_RATE), None) == {agg: 0, pre: 4, dec: 1}
    ready = min(2 * caps[pre], caps[dec])
    assert math.ceil((demand(LONG_RATE) - ready) / caps[agg]) == 3
    oracle = build("oracle:roles=1", cfg, None, steady(LONG_PROMPT, LONG_RATE))
    assert isinstance(oracle, OracleController)
    assert schedule(oracle, svc) == [(0.0, {agg: 3, pre: 4, dec: 1}), (COLD_S, {agg: 0, pre: 4, dec: 1})]
    by_hand = (5 * horizon_s(LONG_RATE) + 2 * COLD_S + 3 * COLD_S) * PRICE / 3600.0
    assert oracle.plan_cost == pytest.approx(by_hand, rel=1e-9)


def test_a_fleet_that_starts_outside_the_ratio_is_brought_within_it_at_t0_and_simulated() -> None:
    # Both paths: the pools start at 4 prefill + 1 decode, outside max_ratio 2 (P <= 2 D), the aggregated
    # replica at twice their price (the first ratio case's fleet). The ready 4 + 1 serve the demand from
    # t = 0, so the plan orders 1 decode replica at t = 0 (the enumeration's 4 + 2 within the ratio;
    # removing 2 prefill instead would need 3 aggregated replicas beside 2 + 1) and removes all 6
    # aggregated replicas at once. By hand: 6 pool replicas for 3615 s and one cold start. Simulated, the
    # loop applies it at its first tick, 15 s (one tick) in: the 6 aggregated replicas are gone then (6 x
    # 15 s, and the few tenths of a second their last requests take), the prefill pool holds its 4
    # replicas from t = 0 to the end, and the decode pool its 1 and, from that tick on, the 1 ordered.
    cfg = fleet(agg_price=2 * PRICE, initial=(4, 1), ratio=(0.0, 2.0), step_down=20)
    svc = cfg.services[0]
    agg, pre, dec = svc.variants[0].name, *(v.name for _, v in svc.role_variants())
    caps = capacities(cfg, LONG_PROMPT, LONG_RATE)
    assert cheapest_within(svc, caps, demand(LONG_RATE), (0.0, 2.0)) == {agg: 0, pre: 4, dec: 2}
    wl = steady(LONG_PROMPT, LONG_RATE)
    oracle = build("oracle:roles=1", cfg, None, wl)
    assert isinstance(oracle, OracleController)
    assert schedule(oracle, svc) == [(0.0, {agg: 0, pre: 4, dec: 2})]
    assert oracle.plan_cost == pytest.approx((6 * horizon_s(LONG_RATE) + COLD_S) * PRICE / 3600.0, rel=1e-9)
    hours = summarize(run_simulation(cfg, wl, oracle))["gpu_hours"]
    assert hours[agg] == pytest.approx(6 * TICK_S / 3600.0, rel=2e-2)
    end_h = hours[pre] / 4  # the run's length, h: one prefill replica's hours
    assert hours[dec] == pytest.approx(end_h + (end_h - TICK_S / 3600.0), rel=1e-6)


# ------------------------------------------------------------------ the split handed to the router


@pytest.mark.parametrize("pd_util", [1.0, 0.5])
def test_the_oracle_hands_the_router_the_capacities_its_plan_split_the_demand_by(pd_util: float) -> None:
    # The plan chooses how much of the demand the pools serve beside the aggregated replicas; as the MPC
    # does (``Decision.route_weights``: its capacities per replica), the oracle hands the simulator's router
    # each variant's requests/s per replica in its plan, so that the router splits the demand as the
    # plan did (``FleetSimulator.follow_plan``): an aggregated replica its capacity for the trace's mix,
    # a pool replica its role's capacity times ``pd_util``. Without them the router weighs a decode
    # replica as an aggregated one of its GPU. By default (``oracle``, roles 0) it hands none.
    cfg = fleet(initial=(2, 1), step_down=20)
    svc = cfg.services[0]
    agg, pre, dec = svc.variants[0].name, *(v.name for _, v in svc.role_variants())
    caps = capacities(cfg, LONG_PROMPT, LONG_RATE)
    wl = steady(LONG_PROMPT, LONG_RATE)
    spec = "oracle:roles=1" if pd_util == 1 else f"oracle:roles=1:pd_util={pd_util}"
    oracle = build(spec, cfg, None, wl)
    est = estimate(svc, 60.0, LONG_RATE, {agg: 6, pre: 2, dec: 1})
    got = oracle.decide(est, svc).route_weights
    assert got == pytest.approx({agg: caps[agg], pre: caps[pre] * pd_util, dec: caps[dec] * pd_util}, rel=1e-12)
    assert build("oracle", cfg, None, wl).decide(est, svc).route_weights == {}
