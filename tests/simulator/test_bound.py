"""The simulation-verified bound (``controllers.bound``) and its place in ``compare``."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.compare import BOUND_KEY, COST_KEY, RATIO_KEY, markdown_table, run_compare
from autoscaler.config.loading import default_config
from autoscaler.report import outcome
from autoscaler.simulate import SimulationDriver, default_admission, run_simulation
from autoscaler.workload.types import Request, Workload
from controllers.base import Controller
from controllers.bound import Outcome, search_scales
from controllers.oracle import oracle_controller
from controllers.registry import build, parse_spec
from controllers.static import steady_start_fleet, workload_mix
from models.capacity import variant_weights


def small_case() -> tuple[object, Workload]:
    """One GH200 variant; 1024/128 requests at 20 req/s for 5 minutes, then 45 req/s for 10."""
    cfg = default_config().model_copy(deep=True)
    svc = cfg.services[0]
    svc.variants = [v for v in svc.variants if v.name == "gh200"]
    v = svc.variants[0]
    v.min_replicas, v.quota, v.max_replicas = 0, None, 20
    rng = np.random.default_rng(0)
    t, reqs = 0.0, []
    while t < 900.0:
        t += rng.exponential(1 / (20.0 if t < 300.0 else 45.0))
        reqs.append(Request(arrival_s=t, input_tokens=1024, output_tokens=128))
    return cfg, Workload(reqs, source="test")


def simulator(cfg, wl):  # type: ignore[no-untyped-def]
    def run(c: Controller) -> Outcome:
        return outcome(SimulationDriver(cfg, wl, c, None, True, admission=default_admission(cfg, c.name)).run())
    return run


def test_the_search_brackets_then_bisects_a_monotone_family() -> None:
    # Attainment falls past c = 1.4 (a step): the search keeps the largest c below it to the bracket's
    # width, and never simulates more than it may.
    def try_scale(c: float) -> Outcome:
        return Outcome(1.0 if c <= 1.4 else 0.5, 10.0 / c)
    trials = search_scales(try_scale, 0.99, 10)
    assert len(trials) == 10
    best = max(t.scale for t in trials if t.feasible)
    worst_bad = min(t.scale for t in trials if not t.feasible)
    assert best <= 1.4 < worst_bad and worst_bad / best < 1.01
    # Infeasible at c = 1: it brackets downward.
    trials = search_scales(lambda c: Outcome(1.0 if c <= 0.6 else 0.9, 10.0 / c), 0.99, 10)
    assert max(t.scale for t in trials if t.feasible) == pytest.approx(0.6, rel=0.01)


@pytest.mark.slow
def test_bound_reaches_the_target_and_nothing_cheaper_in_its_family_does() -> None:
    # Brute force over the family: the oracle's schedule with every capacity scaled by c on a grid of
    # 0.5..2 (step 0.025), each simulated; the cheapest that reaches 99 % is what bound must match.
    cfg, wl = small_case()
    svc = cfg.services[0]
    sim = simulator(cfg, wl)
    b = build("bound:simulations=12", cfg, None, wl, sim)
    played = outcome(run_simulation(cfg, wl, b))
    assert played.attainment is not None and played.attainment >= 0.99
    weights = variant_weights(svc, cfg.engine, workload_mix(svc, wl))
    itl = cfg.controller.pid.setpoint * svc.slo["interactive"].itl_s
    initial = steady_start_fleet(svc, cfg.engine, wl, itl)
    seen: dict[str, Outcome] = {}
    for c in np.arange(0.5, 2.0001, 0.025):
        o = oracle_controller(cfg, svc, wl, {v: w * c for v, w in weights.items()}, initial)
        key = repr(o.schedule)
        if key not in seen:
            seen[key] = sim(o)
    feasible = [o.cost_usd for o in seen.values() if o.attainment is not None and o.attainment >= 0.99]
    assert feasible and played.cost_usd <= min(feasible) + 1e-9, (played, sorted(feasible)[:3])
    assert len(seen) > 3  # the family has several distinct schedules here, so the check means something


@pytest.mark.slow
def test_compare_ranks_every_row_over_the_bound() -> None:
    cfg, wl = small_case()
    comp = run_compare(cfg, wl, ["oracle", "bound:simulations=4", "static"], workers=1)
    rows = {r["controller"]: r for r in comp.rows}
    bound = rows["bound:simulations=4"]
    assert bound["meets_attainment_floor"]
    for r in rows.values():
        expected = r[COST_KEY] / bound[COST_KEY] if r["meets_attainment_floor"] else None
        assert r[BOUND_KEY] == (pytest.approx(expected) if expected is not None else None)
        assert RATIO_KEY in r  # the oracle-relative ratio stays
    table = markdown_table(comp.rows)
    assert f"| {rows['static'][BOUND_KEY]:.2f} |" in table
    assert "over the bound" in table


def test_bound_needs_a_trace_and_a_simulator() -> None:
    cfg, wl = small_case()
    with pytest.raises(ValueError, match="bound needs a trace"):
        build("bound", cfg)
    with pytest.raises(ValueError, match="searched by simulation"):
        build("bound", cfg, None, wl)
    assert parse_spec("bound:target=0.95:simulations=3") == ("bound", {"target": 0.95, "simulations": 3})


def test_a_bound_row_reports_its_search_and_counts_it_in_its_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """compare's bound row calls its progress's searcher with each search run (1, 2, ...) and 0 before
    its own run, and its ``wall_s`` covers the search: at least the sum of every simulation's own wall
    time (the search runs' and its own; disjoint intervals within the row's), which its own run's
    alone (all the row's wall time was before this fix) is not."""
    import autoscaler.simulate as simulate
    from autoscaler.compare import progress_rows

    cfg, wl = small_case()
    short = Workload([r for r in wl.requests if r.arrival_s < 300.0], source="test")  # 20 req/s, 5 min
    walls: list[float] = []
    real_run = simulate.SimulationDriver.run

    def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = real_run(self, *args, **kwargs)
        walls.append(out.wall_s)
        return out

    monkeypatch.setattr(simulate.SimulationDriver, "run", run)
    rows = progress_rows(["bound:simulations=2"], short)
    assert rows.searches == [2]
    calls: list[int] = []
    steps_in_search: list[float] = []
    real_reporter = rows.reporter(0)
    monkeypatch.setattr(rows, "searcher", lambda i: calls.append)
    monkeypatch.setattr(rows, "reporter", lambda i: lambda t: (steps_in_search.append(t) if calls[-1:] != [0]
                                                                else None, real_reporter(t)))
    comp = run_compare(cfg, short, ["bound:simulations=2"], workers=1, progress=rows)
    (row,) = comp.rows
    assert calls[-1] == 0 and calls[:-1] == list(range(1, len(calls)))  # runs 1..k, then its own
    # search_scales with simulations=2: c = 1, then one bracket step (c = 1 is inside the scale limits
    # [0.25, 4], so the step is taken whichever way c = 1 went): exactly 2 search runs, each simulated,
    # then the row's own run
    assert len(calls) - 1 == 2 and len(walls) == len(calls)
    assert steps_in_search  # the search runs report their simulated time (no 0 % while searching)
    assert row["wall_s"] >= sum(walls) > walls[-1]
