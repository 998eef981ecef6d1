"""The MPC controller (``controllers.mpc``): what it plans from an estimate, and a whole simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.config.loading import default_config
from autoscaler.report import request_outcomes, summarize, timeline_rows
from autoscaler.simulate import run_simulation
from autoscaler.state import ServiceEstimate, VariantObservation
from autoscaler.workload.types import Request, Workload
from controllers.mpc import MPCController
from controllers.registry import build, parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}  # every replica serves 10 req/s


def estimate(t: float, rate: float | None, ready: dict[str, int], starting: dict[str, int] | None = None,
             queue: float = 0.0) -> ServiceEstimate:
    starting = starting or {}
    variants = {v.name: VariantObservation(ready.get(v.name, 0), starting.get(v.name, 0)) for v in SVC.variants}
    signals: dict[str, float | None] = {"arrival_rate_rps": rate, "queue_length": queue}
    cap = sum(10.0 * o.current for o in variants.values())
    return ServiceEstimate(SVC.name, t, signals, variants, dict(WEIGHTS), False, cap, cap,
                           sum(starting.values()))


def controller(**kw: object) -> MPCController:
    return MPCController(CFG, {SVC.name: WEIGHTS}, forecast="last", **kw)  # type: ignore[arg-type]


def cheapest_cost(rate: float) -> float:
    """$/hour of the cheapest whole fleet with capacity >= rate (brute force over the variants' bounds)."""
    best = math.inf
    h, a, g = SVC.variants
    for nh in range(h.min_replicas, 12):
        for na in range(a.min_replicas, 12):
            for ng in range(g.min_replicas, g.cap + 1):
                if 10.0 * (nh + na + ng) >= rate:
                    best = min(best, nh * h.price_per_replica_hour + na * a.price_per_replica_hour
                               + ng * g.price_per_replica_hour)
    return best


def test_steady_demand_gets_the_cheapest_fleet_that_serves_it() -> None:
    # 55 req/s for ever, the fleet already at the brute-force optimum: the plan keeps it.
    ready = {"h100": 0, "a100": 2, "gh200": 4}  # 60 req/s: 4 GH200 at $1.49 then A100 at $1.79
    d = controller().decide(estimate(600.0, 55.0, ready), SVC)
    cost = sum(n * v.price_per_replica_hour for v in SVC.variants for n in [d.desired[v.name]])
    assert cost == pytest.approx(cheapest_cost(55.0))
    assert d.desired == ready and not d.hold


def test_rise_orders_replicas_now_for_later() -> None:
    # 30 req/s served by 3 GH200; the rate is 70 now: it orders what 70 req/s needs at once, the
    # cheapest way (the fourth GH200, then A100s at $1.79 before H100s at $2.99).
    d = controller().decide(estimate(600.0, 70.0, {"gh200": 3}), SVC)
    assert d.desired == {"h100": 0, "a100": 3, "gh200": 4}
    assert d.plan["a100"][0] == 3 and len(d.plan["a100"]) == 40


def test_backlog_adds_capacity() -> None:
    plain = controller().decide(estimate(600.0, 40.0, {"gh200": 4}), SVC)
    backlog = controller().decide(estimate(600.0, 40.0, {"gh200": 4}, queue=3000.0), SVC)
    assert sum(backlog.desired.values()) > sum(plain.desired.values())


def test_unknown_rate_holds() -> None:
    d = controller().decide(estimate(600.0, None, {"gh200": 2}), SVC)
    assert d.hold and d.desired == {"h100": 0, "a100": 0, "gh200": 2}


def test_no_ready_replica_is_removed_while_recovering_from_a_loss() -> None:
    # Tick 1: 6 A100s asked for at 55 req/s. Tick 2: one crashed (5 ready) and the rate fell to 10:
    # recovering, the plan keeps the 5 ready ones. Without the loss the same estimate scales down.
    mpc = controller()
    first = mpc.decide(estimate(600.0, 55.0, {"a100": 6}), SVC)
    assert first.desired["a100"] == 6
    after_loss = mpc.decide(estimate(615.0, 10.0, {"a100": 5}), SVC)
    assert after_loss.desired["a100"] >= 5 and after_loss.terms["recovering"] == 1.0
    fresh = controller().decide(estimate(615.0, 10.0, {"a100": 5}), SVC)
    assert fresh.desired["a100"] < 5 and fresh.terms["recovering"] == 0.0


def test_starting_replicas_count_once_ready() -> None:
    # 40 req/s; 4 GH200 are starting (seen now, warm: 90 s): the plan orders nothing more.
    d = controller().decide(estimate(600.0, 40.0, {}, starting={"gh200": 4}), SVC)
    assert d.desired == {"h100": 0, "a100": 0, "gh200": 4}


@pytest.mark.parametrize(("spec", "needle"), [
    ("mpc:horizon=0", "horizon"), ("mpc:quantile=1", "quantile"), ("mpc:miss_weight=0", "miss_weight"),
    ("mpc:forecast=crystal", "forecast"), ("mpc:bogus=1", "bogus"),
])
def test_bad_spec_is_a_value_error(spec: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        build(spec, CFG)


def test_spec_sets_the_plan() -> None:
    assert parse_spec("mpc:horizon=20:quantile=0.8") == ("mpc", {"horizon": 20, "quantile": 0.8})
    c = build("mpc:horizon=20", CFG)
    assert isinstance(c, MPCController) and c.horizon == 20 and c.forecast_horizon_s == 20 * CFG.controller.tick_s
    assert build("mpc:forecast=last", CFG).forecast_horizon_s is None


def test_simulated_step_is_served_after_one_startup() -> None:
    # 10 req/s for 10 min, then 40 req/s for 20 min (Poisson, the default fleet's typical request).
    # After the step the MPC orders within a tick of seeing it; from one cold start later (300 s)
    # on, interactive requests meet the SLO as with a fleet sized for the peak.
    rng = np.random.default_rng(0)
    t, reqs = 0.0, []
    while t < 1800.0:
        t += rng.exponential(1 / (10.0 if t < 600.0 else 40.0))
        reqs.append(Request(arrival_s=t, input_tokens=1024, output_tokens=128))
    run = run_simulation(CFG, Workload(reqs, source="test"), "mpc")
    outcomes = request_outcomes(run)
    arrival = np.array([sr.req.arrival_s for sr in run.sim.requests])
    late = arrival > 600.0 + 300.0 + 2 * CFG.controller.tick_s  # the step, a cold start, two ticks
    assert late.sum() > 20_000 and outcomes["ok"][late].mean() >= 0.99
    summary = summarize(run)
    solve = summary["solve_ms"]
    assert 0 < solve["p50"] <= solve["p99"] <= solve["max"]
    rows = [r for r in timeline_rows(run) if r.get("plan_gh200")]
    assert rows and all(len(r["plan_gh200"].split("/")) == 3 for r in rows)
    assert all(r["desired_gh200"] == int(r["plan_gh200"].split("/")[0]) or "guard" in r["reason"]
               or "held" in r["reason"] or "limit" in r["reason"] for r in rows)
