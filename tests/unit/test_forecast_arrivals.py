"""The forecast fed the arrivals (``mpc:arrivals=1``, issue 28): the arrival estimate without a gateway
(``autoscaler.loop.estimate.ArrivalInference``), the forecast stage's input, and the simulator's
exposition read by the loop."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.adapters.simulator import SimActuator, SimMetricsSource
from autoscaler.config import ForecastConfig
from autoscaler.loop.estimate import ArrivalInference, inferred_arrivals
from autoscaler.loop.forecast import ForecastStage
from autoscaler.loop.runner import ControlLoop
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.state import ServiceEstimate, Signals
from autoscaler.workload.types import Request, Workload
from controllers.registry import build


def est(t: float, served: float | None, queue: float | None, running: float | None = 0.0,
        arrivals: float | None = None) -> ServiceEstimate:
    return ServiceEstimate("svc", t, Signals(request_rate_rps=served, queue_length=queue, running=running,
                                             arrival_rate_rps=arrivals), {}, {}, False, 0.0, 0.0, 0)


def test_inferred_arrivals_by_hand() -> None:
    # 60 s apart: 20 -> 50 requests held at 10 req/s completed: 10 + 30 / 60 = 10.5 req/s arrived.
    assert inferred_arrivals(10.0, 0.0, 20.0, 60.0, 50.0) == pytest.approx(10.5)
    # a drain: 300 -> 60 held while 25 req/s complete: 25 - 240 / 60 = 21 req/s arrived, not 25
    assert inferred_arrivals(25.0, 100.0, 300.0, 160.0, 60.0) == pytest.approx(21.0)
    # a fall steeper than the completions (a crash that lost what it held): 1 - 120 / 60 = -1, which
    # ArrivalInference reads as unknown (test below), not as no arrivals
    assert inferred_arrivals(1.0, 0.0, 120.0, 60.0, 0.0) == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="t1 > t0"):
        inferred_arrivals(1.0, 5.0, 0.0, 5.0, 0.0)
    with pytest.raises(ValueError, match="held0"):
        inferred_arrivals(1.0, 0.0, float("nan"), 5.0, 0.0)


def test_inference_counts_waiting_and_running_signed_over_the_lookback() -> None:
    inf = ArrivalInference(lookback_s=60.0)
    assert inf.apply(est(0.0, 10.0, 20.0, 8.0)).signals.arrival_rate_rps is None  # one sample: unknown
    # 15 s later: held 28 -> 34 (waiting 24, running 10): 10 + 6 / 15 = 10.4
    assert inf.apply(est(15.0, 10.0, 24.0, 10.0)).signals.arrival_rate_rps == pytest.approx(10.4)
    for t, q in ((30.0, 30.0), (45.0, 36.0), (60.0, 20.0)):
        got = inf.apply(est(t, 12.0, q, 10.0)).signals.arrival_rate_rps
    # at 60 s the window holds 0..60 s: held 28 -> 30 at 12 req/s: 12 + 2 / 60
    assert got == pytest.approx(12.0 + 2.0 / 60.0)
    # at 75 s the 0-s sample has left: held 34 (15 s) -> 14 (75 s), a drain: 12 - 20 / 60 = 11.667
    assert inf.apply(est(75.0, 12.0, 4.0, 10.0)).signals.arrival_rate_rps == pytest.approx(12.0 - 20.0 / 60.0)


def test_an_unknown_queue_or_running_is_an_unknown_arrival_rate_never_a_stale_one() -> None:
    inf = ArrivalInference(lookback_s=60.0)
    inf.apply(est(0.0, 10.0, 0.0))
    inf.apply(est(15.0, 10.0, 30.0))
    assert inf.apply(est(30.0, 10.0, None)).signals.arrival_rate_rps is None  # the old code: 10 + 30/15 = 12
    assert inf.apply(est(45.0, 10.0, 30.0, None)).signals.arrival_rate_rps is None
    assert inf.apply(est(60.0, None, 30.0)).signals.arrival_rate_rps is None  # completions unknown
    # known again: the growth spans the known samples of the last 60 s (15 s: 30 held, 60 s: 30, 75 s: 45)
    assert inf.apply(est(75.0, 10.0, 45.0)).signals.arrival_rate_rps == pytest.approx(10.0 + 15.0 / 60.0)


def test_inconsistent_sums_give_unknown_arrivals_not_zero() -> None:
    # held 120 -> 0 in 60 s at 1 req/s completed: -1 req/s, inconsistent (a crash lost what it held)
    inf = ArrivalInference(lookback_s=60.0)
    inf.apply(est(0.0, 1.0, 120.0))
    assert inf.apply(est(60.0, 1.0, 0.0)).signals.arrival_rate_rps is None  # the old code: 0.0


@pytest.mark.parametrize(("spec", "window"), [("pid", 300.0), ("mpc", 60.0)])
def test_the_loop_differences_the_held_requests_over_its_controller_s_window(spec: str, window: float,
                                                                            make_fleet) -> None:
    # The completions' rate is read over the controller's window (the PID's default 300 s, the MPC's
    # 60 s: controllers.mpc.DEFAULT_WINDOW_S), so the growth must span the same: a drain of 3,000 held
    # requests at 40 req/s with 10 arriving read over 300 s of completions beside a 60-s growth gives
    # (mean completions over 300 s, ~18) - 3000 / 60 < 0, i.e. no arrivals at all while 10 arrive.
    cfg = make_fleet(1)
    sim = FleetSimulator(cfg, Workload([]))
    ctrl = build(spec, cfg)
    loop = ControlLoop(cfg, SimMetricsSource(sim, ctrl.window_s), SimActuator(sim), ctrl)
    assert {i.lookback_s for i in loop.arrivals.values()} == {window}


def test_a_gateway_count_is_kept_as_it_is() -> None:
    inf = ArrivalInference()
    inf.apply(est(0.0, 10.0, 0.0))
    counted = inf.apply(est(15.0, 10.0, 60.0, arrivals=7.5))
    assert counted.signals.arrival_rate_rps == 7.5 and not counted.arrivals_inferred
    # inferred (10 + 60 / 15 = 14): marked, so a rule that must not read it low can tell (the PID's floor)
    inferred = inf.apply(est(30.0, 10.0, 120.0))
    assert inferred.signals.arrival_rate_rps == pytest.approx(10.0 + 120.0 / 30.0) and inferred.arrivals_inferred


def _fed(demand: str, arrivals: float | None) -> float | None:
    stage = ForecastStage(ForecastConfig(enabled=True, step_s=60, horizon_s=120), demand=demand)
    f = None
    for t in range(15, 600, 15):
        e = ServiceEstimate("svc", float(t), Signals(request_rate_rps=5.0, arrival_rate_rps=arrivals,
                                                     prompt_tokens_rps=500.0, generation_tokens_rps=100.0),
                            {}, {}, False, 0.0, 0.0, 0)
        f = stage.apply(e).signals.forecast
    assert f is not None
    if f.rate_rps is not None:  # the token mix is per request completed whatever the rate fed
        assert f.input_tokens == pytest.approx(100.0)
        assert f.output_tokens == pytest.approx(20.0)
    return f.rate_rps


def test_the_stage_forecasts_what_it_is_fed() -> None:
    # an overload: 8 req/s arriving, 5 completed each tick
    assert _fed("served", 8.0) == pytest.approx(5.0)
    assert _fed("arrivals", 8.0) == pytest.approx(8.0)
    assert _fed("arrivals", None) is None  # unknown arrivals are not replaced by the completions
    with pytest.raises(ValueError, match="demand must be one of served, arrivals"):
        ForecastStage(ForecastConfig(), demand="completions")


def test_the_option_reaches_the_stage_and_a_bad_value_is_refused(make_fleet) -> None:
    cfg = make_fleet(1)
    assert build("mpc", cfg).forecast_demand == "served"
    assert build("mpc:arrivals=1", cfg).forecast_demand == "arrivals"
    with pytest.raises(ValueError, match="arrivals"):
        build("mpc:arrivals=2", cfg)


def test_the_loop_feeds_the_simulated_gateway_s_arrivals_through_an_overload(make_fleet) -> None:
    # One H100 that cannot grow, sent 4,000-in / 300-out requests at 12 req/s: far past what it serves,
    # so the completions stay below the arrivals. The loop reads the simulator's exposition (its
    # gateway counter) and the forecaster must be fed the arrivals counted from the trace, 60 s back.
    rate, span = 12.0, 600.0
    wl = Workload([Request(arrival_s=i / rate, input_tokens=4000, output_tokens=300)
                   for i in range(int(rate * span))])
    cfg = make_fleet(1, controller={"forecast": {"enabled": True}})
    sim = FleetSimulator(cfg, wl)
    ctrl = build("mpc:arrivals=1", cfg)
    loop = ControlLoop(cfg, SimMetricsSource(sim, ctrl.window_s), SimActuator(sim), ctrl)
    stage = loop.forecasts["svc"]
    fed: list[tuple[float, float | None]] = []
    update = stage.forecaster.update

    def spy(t: float, r: float | None, *rest: float | None) -> None:
        fed.append((t, r))
        update(t, r, *rest)

    stage.forecaster.update = spy  # type: ignore[method-assign]
    served: dict[float, float | None] = {}
    for k in range(1, 31):
        sim.run_until(15.0 * k)
        record = loop.tick(15.0 * k)
        served[15.0 * k] = record.services["svc"].estimate.signals.request_rate_rps
    arrivals = np.array([r.arrival_s for r in wl.requests])
    assert len(fed) >= 20
    for t, r in fed:
        count = np.count_nonzero((arrivals > t - ctrl.window_s) & (arrivals <= t))
        assert r == pytest.approx(count / ctrl.window_s, rel=0.05), t
        assert served[t] is not None and served[t] < 0.8 * r  # what the completions would have fed
