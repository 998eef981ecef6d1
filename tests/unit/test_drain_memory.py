"""The MPC's load forecast after a backlog has drained (issue 34, decode-pool-loss seed 1 with
``mpc:pd_util=0.6``): ``controllers.mpc.draining``, ``drain_memory_s`` and ``drain_excess`` by hand, and the
recorded ticks where the forecast, fitted on the drain's completions, took the prefill pool 4 -> 5 once the
queue was empty (the suite's one ``overshoot`` left after the eighth follow-up)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autoscaler.faults.scenario import scenario_fleet, scenario_workload
from autoscaler.faults.suite import load_suite
from autoscaler.state import PoolObservation, RateForecast, ServiceEstimate, Signals, VariantObservation
from controllers.mpc import MPCController, drain_excess, drain_memory_s, draining
from controllers.registry import build

NAN = float("nan")


def test_draining_by_hand() -> None:
    assert draining(3.0, 17.76, 12.6)          # a queue, completions above the demand held
    assert not draining(0.0, 17.76, 12.6)      # no queue: nothing left to drain
    assert not draining(3.0, 12.0, 12.6)       # completions at or under the arrivals: no drain in them
    assert not draining(3.0, 12.6, 12.6)
    assert not draining(3.0, None, 12.6)       # completions unknown: never read as a drain


def test_drain_memory_by_hand() -> None:
    assert drain_memory_s(60.0, 60.0) == 180.0   # the MPC's 60-s window + two 60-s forecast steps
    assert drain_memory_s(300.0, 60.0) == 420.0
    assert drain_memory_s(60.0, 15.0) == 90.0
    for window, step in ((0.0, 60.0), (60.0, 0.0), (-1.0, 60.0)):
        with pytest.raises(ValueError, match="window_s and step_s"):
            drain_memory_s(window, step)


def _est(t: float, queue: float, done: float | None) -> ServiceEstimate:
    return ServiceEstimate("svc", t, Signals(request_rate_rps=done, queue_length=queue), {}, {}, False, 0.0, 0.0, 0)


@pytest.mark.parametrize(("queue", "done", "level", "since", "memory", "expected"), [
    (3.0, 17.76, 27.765, math.inf, 0.0, 27.765 - 12.6),   # draining now: as before, the level over the held
    (0.0, 13.38, 27.765, math.inf, 180.0, 0.0),           # no queue, no drain seen: the forecast kept (as before)
    (0.0, 13.38, 27.765, 30.0, 0.0, 0.0),                 # memory 0: only while draining (the old rule)
    (0.0, 13.38, 27.765, 30.0, 180.0, 27.765 - 13.18),    # 30 s after the last drain: still the drain's
    (0.0, 13.38, 27.765, 180.0, 180.0, 27.765 - 13.18),   # at the memory's edge: still discounted
    (0.0, 13.38, 27.765, 180.5, 180.0, 0.0),              # past it: the forecast is the demand's again
    (0.0, 13.38, 12.0, 30.0, 180.0, 0.0),                 # a forecast under the demand held: nothing taken
])
def test_drain_excess_by_hand(queue: float, done: float, level: float, since: float, memory: float,
                              expected: float) -> None:
    # The demand held: 12.6 req/s while draining (2,880 s of the recorded run below), 13.18 after (2,910 s).
    held = 12.6 if queue > 0 else 13.18
    got = drain_excess(_est(2910.0, queue, done), (2940.0, 3000.0), (level, level), queue, held, since, memory)
    assert got == pytest.approx(expected)


# decode-pool-loss seed 1 (benchmarks/faults/decode-pool-loss.yaml with simulator.pd_saturation_filter on, as
# docs/faults.md runs it), the MPC's estimates at 2,880-2,925 s: the gateway's queue, the completions
# (request_rate_rps, what the forecast is fitted on), the arrivals, and the forecast's mean, fitted at 2,880 s
# on the step of 2,820-2,865 s (completions 24.39, 30.67, 31.42, 24.58: mean 27.765 req/s); both pools 4 ready.
RECORDED = [  # (time, queue, completions, arrivals)
    (2880.0, 3.0, 17.755555555555553, 11.822222222222221),
    (2895.0, 0.0, 13.377777777777778, 12.333333333333334),
    (2910.0, 0.0, 13.377777777777776, 13.177777777777777),
]
FORECAST = RateForecast(tuple(2940.0 + 60.0 * k for k in range(11)), (27.765277777777776,) * 11, (NAN,) * 11)


def _recorded_mpc() -> tuple[MPCController, object]:
    sc = load_suite(Path(__file__).resolve().parents[2] / "benchmarks" / "faults", ["decode-pool-loss"])[0]
    sc = sc.model_copy(update={"seed": 1, "fleet": {**sc.fleet, "simulator": {"pd_saturation_filter": True}}})
    cfg = scenario_fleet(sc)
    mpc = build("mpc:pd_util=0.6", cfg, None, scenario_workload(sc, Path("../shared/data")))
    assert isinstance(mpc, MPCController)
    return mpc, cfg.service(None)


def test_the_recorded_ticks_after_the_drain_plan_the_arrivals_not_the_drain() -> None:
    # The old rule (drain_excess only while a queue exists) discounted the forecast at 2,880 s (queue 3) and
    # not at 2,895 s (queue 0): the plan asked for the forecast's 27.77 req/s and at 2,910 s took the prefill
    # pool 4 -> 5 (5 x 6.57 = 32.85 req/s of the model's capacity against the suite's 2 x 12.60 + 6.57 = 31.77).
    # 30 s after the last draining tick, within drain_memory_s (60 + 2 x 60 = 180 s), the forecast is
    # discounted to the demand held (the highest arrival rate of the three ticks: 13.18 req/s, the forecast
    # given no interval), and 13.18 / (0.6 x the model's capacity) keeps 4 of each pool.
    mpc, svc = _recorded_mpc()
    assert mpc.drain_memory_s == 180.0
    out = []
    for t, queue, done, arrivals in RECORDED:
        pools = {role: PoolObservation(role, Signals(success_rps=done, queue_length=0.0),
                                       {v.name: VariantObservation(4, 0) for r, v in svc.role_variants() if r == role})
                 for role in ("prefill", "decode")}
        est = ServiceEstimate(svc.name, t, Signals(arrival_rate_rps=arrivals, request_rate_rps=done, success_rps=done,
                                                   queue_length=queue), {}, {}, False, 0.0, 0.0, 0,
                              pools=pools, rate_forecast=FORECAST)
        d = mpc.decide(est, svc)
        out.append((d.terms["demand_rps"], d.desired["h100-prefill"], d.desired["h100-decode"]))
    # 2,880 s: draining (queue 3, completions 17.76 over the 11.82 held): the held rate plus the backlog term
    # of 3 requests (3 / its drain of at least 150 s, <= 0.02 req/s); 2,895 and 2,910 s: no queue, no backlog
    # term, the held rate alone (the old rule: 27.77 on both, and 5 prefill replicas at 2,910 s).
    assert 11.822 < out[0][0] <= 11.822222222222221 + 3.0 / 150.0
    assert out[1][0] == pytest.approx(12.333333333333334, rel=1e-9)
    assert out[2][0] == pytest.approx(13.177777777777777, rel=1e-9)
    assert [o[1:] for o in out] == [(4, 4)] * 3
