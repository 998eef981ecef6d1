"""The burst floor (``mpc:floor=1``, ``controllers.burst_floor``): each tick's own arrival rate read
back from the 60-s rates, and the capacity ``R tau / (tau + T)`` a burst needs; figures by hand."""

from __future__ import annotations

import numpy as np
import pytest
from support.estimates import service_estimate

from autoscaler.adapters.simulator import extrapolated_rate
from autoscaler.config.loading import default_config
from autoscaler.state import ServiceEstimate
from controllers.burst_floor import burst_floor, counted_span, short_rate, short_rates
from controllers.mpc import MPCController
from controllers.registry import parse_spec

TICK = 15.0


def rates_of(counts: list[float], span_ticks: int = 3) -> list[tuple[float, float]]:
    """(time, arrivals/s over the last ``span_ticks`` ticks) at each tick's end, from each tick's
    arrivals (none before the first): the ground truth the tests read back."""
    out = []
    for i in range(len(counts)):
        window = counts[max(0, i - span_ticks + 1):i + 1]
        out.append(((i + 1) * TICK, sum(window) / (span_ticks * TICK)))
    return out


def test_the_floor_is_the_burst_over_tau_plus_ttft() -> None:
    # issue 28's closing note: 452 req/s for 15 s against a 2-s TTFT needs 452 x 15 / 17 = 398.82 req/s
    assert burst_floor([(870.0, 452.0)], 870.0, 300.0, 15.0, 2.0) == pytest.approx(398.8235, abs=1e-4)
    # the highest over the hold counts; one older than the hold does not
    short = [(500.0, 600.0), (870.0, 197.0), (900.0, 452.0), (915.0, 0.0)]
    assert burst_floor(short, 915.0, 300.0, 15.0, 2.0) == pytest.approx(398.8235, abs=1e-4)
    assert burst_floor(short, 1200.0, 300.0, 15.0, 2.0) == pytest.approx(452.0 * 15 / 17)  # 900 = 1200 - 300: held
    assert burst_floor(short, 1201.0, 300.0, 15.0, 2.0) == pytest.approx(0.0)  # only the 0 at 915 is left
    # 197 req/s for 15 s at a 1-s TTFT: 197 x 15 / 16 = 184.69
    assert burst_floor([(10.0, 197.0)], 10.0, 0.0, 15.0, 1.0) == pytest.approx(184.6875)


def test_the_rate_of_each_tick_is_read_back_exactly_from_a_quiet_start() -> None:
    # per-tick arrivals, two quiet minutes, then 452 req/s for one tick, then a ragged tail
    counts = [30.0, 0.0, 45.0] + [0.0] * 8 + [452.0 * TICK, 90.0, 0.0, 3000.0, 15.0, 0.0, 0.0]
    got = short_rates(rates_of(counts), 45.0, TICK)
    # the first tick has no tick before it: no short rate; every later one is exact
    assert [t for t, _ in got] == [TICK * (i + 1) for i in range(1, len(counts))]
    assert [r for _, r in got] == pytest.approx([c / TICK for c in counts[1:]])
    # the window's rate showed that tick at a third of its height (45 s of arrivals)
    assert dict(rates_of(counts))[12 * TICK] == pytest.approx(452.0 / 3)


def test_the_simulators_rate_counts_the_window_less_a_scrape() -> None:
    # the gateway's counter scraped every 15 s, read as the simulator's source reads it (samples after
    # now - 60, Prometheus 2.x extrapolation); it counts 45 s of arrivals, and the ticks come back exactly
    counts = [0.0, 20.0, 0.0, 0.0, 452.0 * TICK, 0.0, 75.0, 1500.0, 0.0, 0.0]
    quiet = 4  # scraped for a minute before the first tick, with no arrivals: each window is whole
    n = 1e6 + np.concatenate([[0.0] * (quiet + 1), np.cumsum(counts)])  # a long-running counter: no
    times = TICK * (np.arange(len(n)) - quiet)  # extrapolation to 0; scrapes at -60, -45, ..., 150 s
    rates = []
    for i in range(quiet + 1, len(n)):
        keep = times[: i + 1] > times[i] - 60.0
        a = extrapolated_rate(times[: i + 1][keep], n[: i + 1][keep], times[i] - 60.0, times[i])
        assert a is not None
        rates.append((float(times[i]), float(a)))
    assert counted_span(60.0, TICK) == 45.0
    assert rates[4] == (75.0, pytest.approx(452.0 / 3))  # the burst's tick: 6,780 arrivals over 45 s
    got = short_rates(rates, counted_span(60.0, TICK), TICK)
    assert [r for _, r in got] == pytest.approx([c / TICK for c in counts[1:]])
    # read as 60 s of arrivals (4 x the difference: 4 x (6,780 - the 20 that left) / 45) the burst
    # would come back at 600.9 req/s, not 452
    assert 4 * (rates[4][1] - rates[3][1]) == pytest.approx(4 * (6780.0 - 20.0) / 45.0)


def test_a_missing_rate_is_never_read_as_zero() -> None:
    # 40 req/s at 30 s after a missing tick at 15 s: read as 0 the difference would be a burst of
    # 3 x 40 = 120 req/s and a floor of 105.9; it gives no short rate, and no floor at all
    rates = [(0.0, 40.0), (30.0, 40.0)]
    assert short_rate(rates[1], None, None, 45.0, TICK) is None
    assert short_rates(rates, 45.0, TICK) == []
    assert burst_floor(short_rates(rates, 45.0, TICK), 30.0, 300.0, TICK, 2.0) is None
    # the next tick, one after a known rate, has one: 3 x (40 - 40) + the unknown tick that left, as 0
    assert short_rates([*rates, (45.0, 40.0)], 45.0, TICK) == [(45.0, 0.0)]


def test_from_a_start_amid_arrivals_each_rate_is_a_lower_bound_kept_in_range() -> None:
    rng = np.random.default_rng(3)
    counts = list(rng.integers(0, 3000, size=40).astype(float))
    truth = rates_of(counts)
    got = dict(short_rates(truth[5:], 45.0, TICK))  # the first five ticks unseen
    for i in range(6, len(counts)):
        t = (i + 1) * TICK
        assert 0.0 <= got[t] <= counts[i] / TICK + 1e-9  # never above the tick's own rate
        assert got[t] <= 3 * truth[i][1] + 1e-9  # nor above all of the window's arrivals
    # a fall bigger than the tick that left would go below 0: kept at 0
    assert short_rate((30.0, 0.0), (15.0, 100.0), (-15.0, 10.0), 45.0, TICK) == 0.0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number of ticks"):
        short_rates([(0.0, 1.0)], 50.0, TICK)
    with pytest.raises(ValueError, match="tick_s <= window_s"):
        counted_span(10.0, TICK)
    with pytest.raises(ValueError, match="ttft_s > 0"):
        burst_floor([], 0.0, 300.0, TICK, 0.0)


CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}


def estimate(t: float, rate: float) -> ServiceEstimate:
    return service_estimate(SVC, WEIGHTS, t, rate, {SVC.variants[0].name: 2}, capacity=20.0)


def test_the_mpc_plans_the_floor_over_the_hold_and_not_without_floor() -> None:
    assert CFG.controller.tick_s == TICK
    ttft = SVC.slo["interactive"].ttft_s
    # quiet, then one tick of 452 req/s: the 60-s rate (45 s counted) shows 150.67 for three ticks
    counts = [0.0] * 4 + [452.0 * TICK] + [0.0] * 30
    on = MPCController(CFG, {SVC.name: WEIGHTS}, floor=1)
    off = MPCController(CFG, {SVC.name: WEIGHTS})
    seen = []
    for t, rate in rates_of(counts):
        a, b = on.decide(estimate(t, rate), SVC), off.decide(estimate(t, rate), SVC)
        seen.append((t, a.terms["demand_rps"], b.terms["demand_rps"], a.terms.get("burst_floor_rps")))
    floor = 452.0 * TICK / (TICK + ttft)
    by_t = {t: x for t, *x in seen}
    assert by_t[15.0][2] is None  # the first tick: no short rate, no floor
    assert by_t[30.0][2] == pytest.approx(0.0)  # known quiet: a floor of 0
    assert by_t[75.0][0] == pytest.approx(floor) and by_t[75.0][1] == pytest.approx(452.0 / 3)
    # held for the 300-s hold after the burst's tick (75 s), gone after
    assert by_t[375.0][0] == pytest.approx(floor)
    # then the hold of the 60-s rate (its last 150.67 at 105 s) is what is planned, with floor=1 or not
    assert by_t[390.0][2] == pytest.approx(0.0) and by_t[390.0][0] == pytest.approx(by_t[390.0][1])
    assert by_t[390.0][1] == pytest.approx(452.0 / 3) and by_t[420.0][0] == pytest.approx(0.0)


def test_floor_is_0_or_1_and_needs_a_window_of_whole_ticks_and_a_scrape_a_tick() -> None:
    with pytest.raises(ValueError, match="floor must be 0 or 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, floor=2)
    with pytest.raises(ValueError, match="whole number of ticks"):
        MPCController(CFG, {SVC.name: WEIGHTS}, floor=1, window_s=50.0)
    # a counter scraped every 30 s on 15-s ticks: a rate's change is no tick's arrivals
    slow = CFG.model_copy(update={"simulator": CFG.simulator.model_copy(update={"scrape_interval_s": 30.0})})
    with pytest.raises(ValueError, match=r"scrape_interval_s \(30 s\) equal to controller.tick_s \(15 s\)"):
        MPCController(slow, {SVC.name: WEIGHTS}, floor=1)
    MPCController(slow, {SVC.name: WEIGHTS})  # without the floor nothing reads it
    assert parse_spec("mpc:busy=1:floor=1") == ("mpc", {"busy": 1, "floor": 1})


def test_the_floor_scaled_by_floor_x_is_planned_by_hand() -> None:
    # by hand: 340 req/s for one 15-s tick at a 2-s TTFT target is a floor of 340 x 15 / 17 = 300
    # req/s; times 1.5, 450: steps below 450 are raised to it, a step above (500) is kept
    from controllers.burst_floor import floored_demand
    floor = burst_floor([(15.0, 340.0)], 15.0, 300.0, TICK, 2.0)
    assert floor is not None and floor == pytest.approx(300.0)
    got = floored_demand(np.array([100.0, 300.0, 500.0]), floor, 1.5)
    assert got.tolist() == pytest.approx([450.0, 450.0, 500.0])
    assert floored_demand(np.array([100.0, 300.0, 500.0]), floor).tolist() == pytest.approx([300.0, 300.0, 500.0])
    # from the second step only (floor_ahead_s): the first step keeps its 100
    got = floored_demand(np.array([100.0, 300.0, 500.0]), floor, 1.5, 1)
    assert got.tolist() == pytest.approx([100.0, 450.0, 500.0])
    with pytest.raises(ValueError, match="scale >= 1"):
        floored_demand(np.array([1.0]), 1.0, 0.5)
    with pytest.raises(ValueError, match="from_step >= 0"):
        floored_demand(np.array([1.0]), 1.0, 1.0, -1)


def test_the_mpc_plans_the_floor_times_floor_x_and_refuses_it_without_floor() -> None:
    ttft = SVC.slo["interactive"].ttft_s
    counts = [0.0] * 4 + [452.0 * TICK] + [0.0] * 10
    ctl = MPCController(CFG, {SVC.name: WEIGHTS}, floor=1, floor_x=1.3)
    by_t = {}
    for t, rate in rates_of(counts):
        d = ctl.decide(estimate(t, rate), SVC)
        by_t[t] = (d.terms["demand_rps"], d.terms.get("burst_floor_rps"))
    floor = 452.0 * TICK / (TICK + ttft)  # 398.8 req/s, recorded as measured; planned 1.3x: 518.5
    assert by_t[75.0][1] == pytest.approx(floor) and by_t[75.0][0] == pytest.approx(1.3 * floor)
    with pytest.raises(ValueError, match="floor_x must be >= 1, and above 1 only with floor=1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, floor_x=1.3)
    with pytest.raises(ValueError, match="floor_x must be >= 1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, floor=1, floor_x=0.9)
    assert parse_spec("mpc:floor=1:floor_x=1.3") == ("mpc", {"floor": 1, "floor_x": 1.3})
    # floor_ahead_s=30 on 15-s ticks: the plan's first two steps keep the 60-s rate (452 / 3), the rest the floor
    ahead = MPCController(CFG, {SVC.name: WEIGHTS}, floor=1, floor_ahead_s=30.0)
    assert ahead.floor_from == 2
    with pytest.raises(ValueError, match="floor_ahead_s must be >= 0, and above 0 only with floor=1"):
        MPCController(CFG, {SVC.name: WEIGHTS}, floor_ahead_s=30.0)
