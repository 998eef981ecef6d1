"""The burst floor (``mpc:floor=1``, issue 28): the capacity a fleet must hold to serve a short burst
within the TTFT target, from the short-window arrival rates the service has shown over the hold.

A burst of ``R`` requests/s lasting ``tau`` s builds a queue of ``(R - C) tau`` at capacity ``C``; it
has drained by ``tau + T`` (and so every request of the burst has its first token within the TTFT
target ``T``) only while ``C (tau + T) >= R tau``, i.e. ``C >= R tau / (tau + T)`` (``burst_floor``).
Measured (issue 28's closing note, ``mpc:busy=1`` on Azure code x20 seed 0): 98.7 % of its misses
fell in two 15-s bursts, 452 req/s after two minutes without arrivals and 197 req/s, which a 60-s
rate shows as a quarter of their height.

The controller sees only one rate a tick, over its signal window. Prometheus 2.x ``rate()`` over a
``window_s`` range of counters scraped every ``tick_s`` holds the samples of the last ``window_s -
tick_s`` s and extrapolates their increase to the range (``extrapolatedRate`` in
prometheus/promql/functions.go, v2.x; the simulator's ``autoscaler.adapters.simulator.extrapolated_rate``
does the same), so the rate at tick ``t`` is ``(N(t) - N(t - S)) / S`` with ``S = window_s -
tick_s`` and ``N`` the arrivals counter (``counted_span``). Two consecutive rates then differ by the
arrivals of the newest tick less those of the tick that left the span: ``c_t = S (A_t - A_{t-dt}) +
c_{t-S}`` (``short_rates``), which recovers each tick's own arrivals exactly from a start with none,
and is a lower bound from any start (arrivals are never negative).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_SPACING_TOLERANCE = 1e-3
"""Relative slack on the spacing of two rates read as consecutive ticks (float times from sums of ticks)."""


def counted_span(window_s: float, tick_s: float) -> float:
    """Seconds of arrivals a ``rate()`` over ``window_s`` holds when the counter is scraped every
    ``tick_s`` (module docstring): ``window_s - tick_s``, at least ``tick_s``.

    Raises:
        ValueError: ``tick_s`` not > 0 or ``window_s`` below ``tick_s``.
    """
    if not 0 < tick_s <= window_s < math.inf:
        raise ValueError(f"burst floor: need 0 < tick_s <= window_s, got tick_s={tick_s}, window_s={window_s}")
    return max(window_s - tick_s, tick_s)


def short_rate(rate_s: tuple[float, float], before: tuple[float, float] | None,
               left: tuple[float, float] | None, span_s: float, tick_s: float) -> float | None:
    """The arrival rate over the tick ending at ``rate_s[0]``, requests/s, from the rates over ``span_s``.

    Args:
        rate_s: (time s, requests/s over the last ``span_s`` s) of this tick.
        before: the same of the tick before (None: unknown).
        left: (time s, short rate) of the tick that left the span, ``span_s`` before this one (None:
            unknown, counted as 0: a lower bound, since arrivals are never negative).
        span_s: seconds of arrivals each rate counts (``counted_span``), a whole number of ticks.
        tick_s: seconds between ticks, > 0.

    Returns:
        ``(span / tick) (A_t - A_{t-tick}) + r_{t-span}`` (module docstring), kept within ``[0, (span /
        tick) A_t]`` (no tick holds fewer than none or more than all of its span's arrivals); None
        where ``before`` is unknown or not one tick earlier: a missing rate is never read as 0,
        which would make this difference a burst of ``span / tick`` times the rate.

    Raises:
        ValueError: ``tick_s`` not > 0, or ``span_s`` not a whole number (>= 1) of ticks.
    """
    k = whole_ticks(span_s, tick_s)
    t, a = rate_s
    if before is None or abs((t - before[0]) / tick_s - 1) > _SPACING_TOLERANCE:
        return None
    gone = 0.0
    if left is not None and abs((t - left[0]) / tick_s - k) <= _SPACING_TOLERANCE:
        gone = left[1]
    return min(max(k * (a - before[1]) + gone, 0.0), k * a)


def left_span(short: Sequence[tuple[float, float]], now_s: float, span_s: float,
              tick_s: float) -> tuple[float, float] | None:
    """The entry of ``short`` ((time s, short rate), oldest first) ``span_s`` before ``now_s`` (within
    ``_SPACING_TOLERANCE`` of a tick), or None: the tick that leaves the span at ``now_s``."""
    for t, r in reversed(short):
        if abs((now_s - t - span_s) / tick_s) <= _SPACING_TOLERANCE:
            return t, r
        if now_s - t > span_s + tick_s:
            return None
    return None


def whole_ticks(span_s: float, tick_s: float) -> int:
    """``span_s / tick_s`` as a whole number >= 1.

    Raises:
        ValueError: ``tick_s`` not > 0, or ``span_s`` not a whole number (>= 1) of ticks."""
    k = span_s / tick_s if tick_s > 0 else math.nan
    if not (k >= 1 - _SPACING_TOLERANCE and abs(k - round(k)) < _SPACING_TOLERANCE):
        raise ValueError(f"burst floor: span_s must be a whole number of ticks, got span_s={span_s}, "
                         f"tick_s={tick_s}")
    return round(k)


def short_rates(rates: Sequence[tuple[float, float]], span_s: float, tick_s: float) -> list[tuple[float, float]]:
    """``short_rate`` of each tick of ``rates`` ((time s, requests/s over ``span_s``), oldest first; a
    missing tick is absent) that has one: (time, requests/s over its last ``tick_s``), oldest first.
    From a history that starts without arrivals before it, each is the tick's own rate exactly; from
    one that starts amid arrivals, a lower bound (low by the arrivals of the unseen tick ``span_s``
    earlier in its chain, until a span without arrivals or the cap clears it).

    Raises:
        ValueError: as ``short_rate``.
    """
    out: list[tuple[float, float]] = []
    for j, x in enumerate(rates):
        r = short_rate(x, rates[j - 1] if j else None, left_span(out, x[0], span_s, tick_s), span_s, tick_s)
        if r is not None:
            out.append((x[0], r))
    return out


def burst_floor(short: Sequence[tuple[float, float]], now_s: float, hold_s: float, tick_s: float,
                ttft_s: float) -> float | None:
    """The capacity, requests/s, the plan must hold so that the highest short burst seen over the
    last ``hold_s`` s would be served within the TTFT target: ``R tau / (tau + T)`` with ``R`` the
    highest of ``short`` over [``now_s - hold_s``, ``now_s``], ``tau = tick_s`` and ``T = ttft_s``
    (module docstring). E.g. ``R`` 452 req/s, ``tau`` 15 s, ``T`` 2 s: 452 x 15 / 17 = 398.8 req/s.

    Args:
        short: (time s, arrival rate requests/s over the tick ending then) per tick (``short_rate``).
        now_s: this tick's time, seconds.
        hold_s: seconds of history the floor holds (>= 0; 0: this tick's alone).
        tick_s: seconds between ticks, the burst length ``tau`` (> 0).
        ttft_s: the interactive TTFT target, seconds (> 0).

    Returns:
        the floor, or None where no short rate is known within the hold (the first tick, after a
        gap): no floor, never a floor of 0 read from missing rates.

    Raises:
        ValueError: ``tick_s`` or ``ttft_s`` not > 0, ``hold_s`` < 0.
    """
    if not (0 < ttft_s < math.inf and 0 < tick_s < math.inf and 0 <= hold_s < math.inf):
        raise ValueError(f"burst floor: need tick_s > 0, ttft_s > 0 and hold_s >= 0, got {tick_s}, {ttft_s}, "
                         f"{hold_s}")
    seen = [r for t, r in short if now_s - hold_s - 1e-9 < t <= now_s + 1e-9]
    if not seen:
        return None
    return max(seen) * tick_s / (tick_s + ttft_s)


def floored_demand(demand_rps: np.ndarray, floor_rps: float, scale: float = 1.0, from_step: int = 0) -> np.ndarray:
    """The plan's demand path kept at or above ``scale`` times the burst floor (``mpc:floor=1``, and
    ``floor_x`` for ``scale``, issue 34): ``max(demand[k], scale x floor)`` per step. A scale above 1 is
    headroom for a burst above the highest seen over the hold, where each record burst outgrows the last
    (docs/controllers.md, "The burst floor scaled for the pools"). E.g. demand
    ``[100, 300, 500]``, floor 300, scale 1.5:
    ``[450, 450, 500]``. With ``from_step`` (``mpc:floor_ahead_s``) the steps before it keep their
    demand: the floor is planned only where a replica ordered now can serve it (a pool replica's cold
    start), so replicas already running are not held for it meanwhile; ``from_step`` 1 above: ``[100,
    450, 500]``.

    Raises:
        ValueError: ``scale`` below 1 or not finite, ``floor_rps`` below 0 or not finite, ``from_step`` < 0.
    """
    if not (1 <= scale < math.inf and 0 <= floor_rps < math.inf and from_step >= 0):
        raise ValueError(f"burst floor: need scale >= 1, floor_rps >= 0 and from_step >= 0, got {scale}, "
                         f"{floor_rps} and {from_step}")
    out = np.array(demand_rps, dtype=float)
    out[from_step:] = np.maximum(out[from_step:], scale * floor_rps)
    return out
