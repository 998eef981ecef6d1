"""The PID's rules (``controllers.pid_rules``), one table each; every expected value is worked out
by hand in its row's comment (requests/s unless said)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from controllers.pid_rules import (
    Load,
    against_error,
    demand_cap,
    demand_floor,
    drain_time_s,
    floor_unknown,
    overload_factor,
    overload_target,
    reanchor,
    record_queue,
    record_ready,
    served_capacity,
)

BASE = Load(capacity_rps=10.0, ready_capacity_rps=10.0, out_max=40.0, served_rps=None, arrivals_rps=None,
            shedding=False, history=(), running=None, queue=None, settling=False, warm_start_s=90.0)
GROWING = ((0.0, 0.0), (60.0, 120.0))  # 120 requests more in 60 s: +2 req/s


def load(**kw: Any) -> Load:
    return replace(BASE, **kw)


@pytest.mark.parametrize(("u", "error", "clip", "kw", "expected"), [
    (12.0, 1.0, 3.0, {"history": GROWING, "served_rps": 8.0}, 12.0),  # below the clip, no shedding: u
    (11.0, 3.0, 3.0, {"history": GROWING, "served_rps": 8.0}, 12.5),  # (8 + 2) / 8 = 1.25 x ready 10
    (11.0, 3.0, 3.0, {"history": GROWING, "served_rps": 1.0}, 30.0),  # (1 + 2) / 1 = 3 (under 1 + 3) x 10
    (11.0, 1.0, 1.0, {"history": GROWING, "served_rps": 1.0}, 20.0),  # 3 capped at 1 + clip = 2, x 10
    (11.0, 3.0, 3.0, {"history": GROWING, "served_rps": 1.0, "out_max": 15.0}, 15.0),  # 30 cut to out_max
    (11.0, 3.0, 3.0, {}, 11.0),  # no queue history, no completions: factor unknown, u
    (11.0, 0.5, 3.0, {"shedding": True, "arrivals_rps": 20.0, "served_rps": 8.0}, 25.0),  # 20 / 8 = 2.5 x 10
    (11.0, 0.0, 3.0, {"shedding": True, "arrivals_rps": 20.0, "served_rps": 8.0}, 11.0),  # error 0: u
    (40.0, 3.0, 3.0, {"history": GROWING, "served_rps": 8.0}, 40.0),  # already above 12.5: u
    # shedding: the window was served by 6 of capacity (4 of the 10 ready now just arrived): 20 / 8 x 6
    (11.0, 0.5, 3.0, {"shedding": True, "arrivals_rps": 20.0, "served_rps": 8.0, "served_capacity_rps": 6.0}, 15.0),
    # the queue's factor stays on the ready capacity: (8 + 2) / 8 x 10 = 12.5 over the shedding 20 / 8 x 4 = 10
    (11.0, 3.0, 3.0, {"history": GROWING, "served_rps": 8.0, "shedding": True, "arrivals_rps": 20.0,
                      "served_capacity_rps": 4.0}, 12.5),
])
def test_overload_target(u: float, error: float, clip: float, kw: dict[str, Any], expected: float) -> None:
    assert overload_target(u, error, clip, load(**kw)) == pytest.approx(expected)


def test_the_capacity_that_served_the_window_is_the_mean_of_its_ready_samples() -> None:
    w = {"a": 2.0, "b": 5.0}
    h = record_ready((), 0.0, 300.0, {"a": 3})
    h = record_ready(h, 150.0, 300.0, {"a": 3, "b": 1})
    h = record_ready(h, 300.0, 300.0, {"a": 3, "b": 4})  # the sample at 0 s is a window old: dropped
    assert [t for t, _ in h] == [150.0, 300.0]
    assert served_capacity(h, w) == pytest.approx(((3 * 2 + 5) + (3 * 2 + 4 * 5)) / 2)  # (11 + 26) / 2
    assert served_capacity(h, {"a": 2.0}) == pytest.approx(6.0)  # a variant without a weight counts 0
    assert served_capacity((), w) is None


@pytest.mark.parametrize(("u", "kw", "expected"), [
    (8.0, {"settling": True, "arrivals_rps": 6.0}, 8.0),  # not a scale-up (8 <= capacity 10): u
    (20.0, {"settling": True, "arrivals_rps": 6.0}, 10.0),  # 1.5 x 6 = 9, never below capacity 10
    (20.0, {"arrivals_rps": 10.0}, 15.0),  # queue not growing: 1.5 x 10
    (20.0, {"arrivals_rps": 10.0, "history": ((0.0, 0.0), (60.0, 5.0)), "running": 10.0}, 20.0),  # +5 > 1 + 1: grows
    (20.0, {"settling": True, "arrivals_rps": 10.0, "history": ((0.0, 0.0), (60.0, 5.0)), "running": 10.0},
     15.0),  # growing, but settling: capped
    (20.0, {"settling": True, "arrivals_rps": 10.0, "shedding": True}, 20.0),  # shedding: overload_target's case
    (20.0, {"settling": True}, 20.0),  # no arrivals, no completions: demand 0, u
    (20.0, {"settling": True, "served_rps": 8.0, "history": GROWING}, 15.0),  # 8 x (8 + 2) / 8 = 10; 1.5 x 10
])
def test_demand_cap(u: float, kw: dict[str, Any], expected: float) -> None:
    assert demand_cap(u, load(**kw)) == pytest.approx(expected)


@pytest.mark.parametrize(("u", "arrivals", "low", "expected"), [
    (4.0, 6.0, False, 7.5),  # 1.25 x 6
    (4.0, 10.0, False, 10.0),  # 1.25 x 10 = 12.5, but never above the capacity 10
    (4.0, None, False, 10.0),  # arrivals unknown: the floor is unknown, no scale-down (the capacity 10)
    (4.0, 6.0, True, 10.0),  # arrivals that may read low (a silent pod, no gateway counter): the same
    (4.0, 0.0, False, 4.0),  # no arrivals, known: u
    (12.0, 6.0, False, 12.0),  # not a scale-down: u
    (12.0, None, False, 12.0),  # not a scale-down, arrivals unknown: u (the floor holds only scale-downs)
])
def test_demand_floor(u: float, arrivals: float | None, low: bool, expected: float) -> None:
    assert demand_floor(u, load(arrivals_rps=arrivals, arrivals_low=low)) == pytest.approx(expected)
    assert floor_unknown(u, load(arrivals_rps=arrivals, arrivals_low=low)) == (u < 10.0 and (arrivals is None or low))


DISAGREES = "the output disagrees with the error's sign"


@pytest.mark.parametrize(("change", "error", "kw", "expected"), [
    (2.0, 0.5, {"running": 3.0, "queue": 1.0}, None),  # up with a positive error: goes ahead
    (2.0, 0.0, {}, DISAGREES),  # up inside the deadband
    (2.0, -0.5, {}, DISAGREES),  # up below the setpoint
    (-2.0, 0.5, {}, DISAGREES),  # down above the setpoint
    (-2.0, -0.5, {}, None),  # down below the setpoint: goes ahead
    (0.0, 1.0, {}, None),  # no change: nothing to hold
    (2.0, 1.0, {"running": 0.0, "queue": 0.0}, "nothing is running or waiting"),
    # 20 -> 10 waiting in 60 s: 1/6 per s, the last 10 drain in 60 s <= a 90 s warm start
    (2.0, 1.0, {"history": ((0.0, 20.0), (60.0, 10.0))}, "the queue drains in 60 s, before a new replica could start"),
    (2.0, 1.0, {"history": ((0.0, 20.0), (60.0, 10.0)), "warm_start_s": 30.0}, None),  # 60 s > 30 s
])
def test_against_error(change: float, error: float, kw: dict[str, Any], expected: str | None) -> None:
    assert against_error(change, error, load(**kw)) == expected


@pytest.mark.parametrize(("integral", "error", "held", "expected"), [
    (12.0, 0.0, False, 10.0),  # deadband: the capacity
    (12.0, 0.0, True, 10.0),  # deadband wins over a hold
    (12.0, 0.5, True, 7.0),  # held: 10 - P 3 - D 1 = 6, at least out_min 7
    (12.0, -0.5, True, 7.0),
    (12.0, 0.5, False, 12.0),  # neither: the integral as the law left it
])
def test_reanchor(integral: float, error: float, held: bool, expected: float) -> None:
    assert reanchor(integral, error, held, capacity_rps=10.0, p=3.0, d=1.0, out_min=7.0, out_max=40.0) == expected


def test_reanchor_within_the_upper_limit() -> None:
    # held with P = -30: 10 + 30 = 40 > out_max 35
    assert reanchor(12.0, -0.5, True, capacity_rps=10.0, p=-30.0, d=0.0, out_min=0.0, out_max=35.0) == 35.0


@pytest.mark.parametrize(("now", "queue", "expected"), [
    (70.0, 3.0, ((30.0, 2.0), (70.0, 3.0))),  # (0, 1) is older than 70 - 60 = 10 s
    (100.0, 3.0, ((100.0, 3.0),)),  # both older than 40 s
    (70.0, None, ((0.0, 1.0), (30.0, 2.0))),  # unknown queue: unchanged
])
def test_record_queue(now: float, queue: float | None, expected: tuple[tuple[float, float], ...]) -> None:
    assert record_queue(((0.0, 1.0), (30.0, 2.0)), now, queue) == expected


@pytest.mark.parametrize(("history", "served", "cap", "expected"), [
    (GROWING, 8.0, 10.0, 1.25),  # (8 + 2) / 8
    (((0.0, 10.0), (60.0, 4.0)), 8.0, 10.0, 1.0),  # a shrinking queue adds nothing
    (GROWING, 0.0, 10.0, None),  # no completions: unknown
    (((0.0, 0.0),), 8.0, 10.0, None),  # one sample: unknown
])
def test_overload_factor(history: tuple[tuple[float, float], ...], served: float, cap: float,
                         expected: float | None) -> None:
    assert overload_factor(history, served, cap) == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(("history", "expected"), [
    (((0.0, 20.0), (60.0, 10.0)), 60.0),  # 10 left at 1/6 per s
    (((0.0, 10.0), (60.0, 10.0)), None),  # not declining
    (((0.0, 10.0), (60.0, 0.0)), None),  # already empty
])
def test_drain_time(history: tuple[tuple[float, float], ...], expected: float | None) -> None:
    assert drain_time_s(history) == (None if expected is None else pytest.approx(expected))
