"""The oracle (``controllers.oracle``): an offline plan on the true demand, simulated."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.compare import RATIO_KEY, run_compare
from autoscaler.config.loading import default_config
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.state import ServiceEstimate, Signals
from autoscaler.workload.types import Request, Workload
from controllers.oracle import OracleController, true_demand
from controllers.registry import build

CFG = default_config()
SVC = CFG.services[0]


def step_workload(seed: int = 0) -> Workload:
    """Poisson arrivals: 10 req/s for 10 min, 40 req/s for 10 min, 10 req/s for 10 min."""
    rng = np.random.default_rng(seed)
    t, reqs = 0.0, []
    while t < 1800.0:
        t += rng.exponential(1 / (40.0 if 600.0 <= t < 1200.0 else 10.0))
        reqs.append(Request(arrival_s=t, input_tokens=1024, output_tokens=128))
    return Workload(reqs, source="test")


def test_true_demand_is_the_peak_window_overlapping_each_block() -> None:
    # Arrivals at 1, 2, 59, 61 and 200 s; 15-s steps, 60-s blocks. Block [0, 60): the window from 1 s
    # holds 1, 2, 59 (3). Block [60, 120): a window from 2 s ([2, 62)) overlaps it and holds 2, 59, 61
    # (3). Block [120, 180): windows overlapping it start after 60 s: at most 61 (1). Block [180, 240): 200 (1).
    wl = Workload([Request(arrival_s=t, input_tokens=10, output_tokens=5) for t in (1.0, 2.0, 59.0, 61.0, 200.0)],
                  source="test")
    d = true_demand(SVC, wl, 15.0, 16, 4)
    assert d == pytest.approx([3 / 60] * 8 + [1 / 60] * 8)


def test_oracle_schedule_is_served_as_planned_and_orders_ahead() -> None:
    wl = step_workload()
    oracle = build("oracle", CFG, None, wl)
    assert isinstance(oracle, OracleController)
    # It orders for the rise before it happens: more replicas are asked for before t = 600 s than at t = 0.
    before = [sum(r[SVC.name].values()) for t, r in oracle.schedule if 0 < t < 600.0]
    assert before and max(before) > sum(oracle.replicas[SVC.name].values())
    run = run_simulation(CFG, wl, oracle)
    summary = summarize(run)
    # The plan leaves no demand unserved after its first start-up, and each replica is sized at the
    # capacity model's 99 % point: the simulation must reach it.
    assert summary["slo_attainment"]["interactive"] >= 0.99
    static = summarize(run_simulation(CFG, wl, "static"))
    assert summary["cost_usd"]["total"] < static["cost_usd"]["total"]


def test_oracle_needs_a_trace() -> None:
    with pytest.raises(ValueError, match="oracle needs a trace"):
        build("oracle", CFG)


def test_compare_ranks_against_the_oracle() -> None:
    comp = run_compare(CFG, step_workload(), ["static", "oracle"], workers=1)
    rows = {r["controller"]: r for r in comp.rows}
    assert rows["oracle"][RATIO_KEY] == pytest.approx(1.0)
    expected = rows["static"]["cost_per_successful_request_usd"] / rows["oracle"]["cost_per_successful_request_usd"]
    assert rows["static"][RATIO_KEY] == pytest.approx(expected)
    assert rows["static"][RATIO_KEY] > 1.0


def test_oracle_bounded_by_nodes_is_reproducible_and_says_when_it_fell_back() -> None:
    # The offline solve is bounded by work, not seconds: the same trace and node limit give the same
    # schedule on any machine. node_limit=0 stops HiGHS before its root: the oracle still plans (the
    # rounded LP relaxation) and its decisions say so.
    from controllers.oracle import OFFLINE_NODE_LIMIT

    wl = step_workload()
    first, second = build("oracle:node_limit=0", CFG, None, wl), build("oracle:node_limit=0", CFG, None, wl)
    assert isinstance(first, OracleController) and isinstance(second, OracleController)
    assert first.schedule == second.schedule and first.plan_cost == second.plan_cost
    assert first.plan is not None and first.plan.stopped_at_limit and first.plan.fallback == "lp-rounded"
    est = ServiceEstimate(SVC.name, 0.0, Signals.of({}), {}, {}, False, 0.0, 0.0, 0)
    d = first.decide(est, SVC)
    assert "lp-rounded fallback" in d.reason and d.terms["plan_fallback"] == 1.0
    default = build("oracle", CFG, None, wl)
    assert isinstance(default, OracleController) and default.plan is not None
    assert default.plan.nodes is not None and default.plan.nodes <= OFFLINE_NODE_LIMIT
    assert not default.plan.stopped_at_limit and default.decide(est, SVC).terms["solver_at_limit"] == 0.0
    # the fallback's schedule costs no less than the solved one (the solver's plan is the cheapest)
    assert first.plan_cost >= default.plan_cost - 1e-6
