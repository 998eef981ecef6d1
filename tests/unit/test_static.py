"""Tests for controllers.static: the peak and opening rates that size the static and starting fleets,
and the scheduled (cron-style) fleet."""

from __future__ import annotations

import pytest

from autoscaler.simulate import run_simulation
from autoscaler.workload.types import Request, Workload
from controllers.static import ScheduledController, opening_rate_rps, peak_rate_rps


def arrivals(times: list[float], tokens: int = 100) -> list[Request]:
    return [Request(arrival_s=t, input_tokens=tokens, output_tokens=10) for t in times]


def test_peak_rate_is_the_busiest_60_s_window() -> None:
    # 10 requests spread over 0..54 s, then 30 within 100..129 s: the busiest minute holds 30.
    times = [i * 6.0 for i in range(10)] + [100.0 + i for i in range(30)]
    assert peak_rate_rps(Workload(arrivals(times))) == pytest.approx(30 / 60)


def test_opening_rate_is_the_peak_minute_of_the_first_5_minutes_of_served_requests() -> None:
    # In the first 300 s: 20 requests in 10..29 s; after it, 120 within 400..459 s (ignored);
    # 25 too-long requests at 200..224 s are rejected by max_model_len and do not count.
    served = arrivals([10.0 + i for i in range(20)] + [400.0 + i * 0.5 for i in range(120)])
    rejected = arrivals([200.0 + i for i in range(25)], tokens=50_000)
    wl = Workload(sorted(served + rejected, key=lambda r: r.arrival_s))
    assert opening_rate_rps(wl, max_model_len=32_768) == pytest.approx(20 / 60)
    assert opening_rate_rps(wl) == pytest.approx(25 / 60)  # no limit: the rejected burst is the peak
    assert peak_rate_rps(wl, max_model_len=32_768) == pytest.approx(120 / 60)


def test_opening_rate_of_an_empty_workload_is_zero() -> None:
    assert opening_rate_rps(Workload([])) == 0.0


def test_scheduled_controller_holds_each_window_fleet(make_fleet) -> None:
    cfg = make_fleet(1, min_replicas=1, max_replicas=3)
    wl = Workload(arrivals([float(t) for t in range(0, 200, 5)]))
    ctrl = ScheduledController([(0.0, {"svc": {"h100": 1}}), (60.0, {"svc": {"h100": 3}})], 15.0, 300.0)
    run = run_simulation(cfg, wl, ctrl)
    applied = [(rec.time_s, rec.services["svc"].applied["h100"]) for rec in run.ticks]
    assert run.controller == "scheduled"
    assert all(n == 1 for t, n in applied if t < 60) and all(n == 3 for t, n in applied if t >= 60)
    assert any(t < 60 for t, _ in applied) and any(t >= 60 for t, _ in applied)


@pytest.mark.parametrize("schedule", [[], [(10.0, {})], [(0.0, {}), (100.0, {}), (50.0, {})]])
def test_scheduled_controller_rejects_bad_schedules(schedule) -> None:
    with pytest.raises(ValueError, match="schedule must start at 0 s"):
        ScheduledController(schedule, 15.0, 300.0)
