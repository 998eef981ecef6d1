"""The pace a live row's simulated fleet kept (``autoscaler.faults.live``).

The live harness runs the fleet at ``target`` simulated seconds per wall second (20x) in a thread
beside the daemons and a Prometheus; on a loaded machine it falls behind. A source converting
Prometheus's rates at the fixed target reads ``f`` x every true rate at a pace ``f`` (kept /
target): the harness's source converts at ``PaceMeter.speed_over`` instead. The wall-clock Lease
(60 s / 20 = 3 wall s, renewed 1 wall s before it lapses), the daemons' ticks and their clocks
(wall x target) still run against a fleet that lags: such a row's attainment tracks the machine's
load as much as the controller (docs/faults.md, "The pace a live row kept").

``PaceMeter`` samples (simulated s, wall s) pairs as the fleet steps, with an injected wall clock;
``pace_figures`` reads them:

- ``kept``: (last simulated s - first) / (last wall s - first) / ``target`` over the row;
- ``lowest``: the lowest such fraction over any stretch of at least ``window_s`` simulated seconds
  (from each sample to the first at least ``window_s`` later; the whole row when it is shorter);
- ``starved``: ``lowest`` < ``STARVED_FRACTION``.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

STARVED_FRACTION = 0.5
"""A row whose lowest windowed pace fell below this fraction of the target is *starved*. At 0.5 a
60-s simulated minute took at least 6 wall seconds where 3 were due: the harness lost 3 wall
seconds, a whole Lease (60 s / 20x), within 6, so the Lease's 1-wall-second renewal margin and the
daemons' 0.75-s ticks may have been overrun, and the daemons' clocks (wall x 20) ran at least
twice as fast as the fleet's. Chosen before any run; the last stop's starved rows
kept 0.14-0.64 of 20x over the whole run (note 60)."""

PACE_WINDOW_S = 60.0
"""Simulated seconds of the stretch ``lowest`` is taken over: a Lease's duration (60 s, 3 wall s at
20x), the span over which a fleet that lags can let a Lease lapse against the daemons' wall clocks."""


def pace_figures(samples: Sequence[tuple[float, float]], target: float,
                 window_s: float = PACE_WINDOW_S) -> dict[str, Any] | None:
    """The pace kept over ``samples`` (``(simulated s, wall s)`` pairs in time order) at ``target``
    simulated seconds per wall second: ``{target_x, kept, lowest, window_s, starved}`` (``kept`` and
    ``lowest`` as fractions of ``target``; module docstring). None when nothing can be measured
    (fewer than two samples, or no wall time or no simulated time between the first and the last):
    never a pace of 0.

    Raises:
        ValueError: ``target`` or ``window_s`` not a finite number > 0, or samples whose simulated or
            wall times go backwards.
    """
    if not 0 < target < float("inf") or not 0 < window_s < float("inf"):
        raise ValueError(f"pace: target and window must be finite numbers > 0, got {target:g}, {window_s:g}")
    for (s0, w0), (s1, w1) in pairwise(samples):
        if s1 < s0 or w1 < w0:
            raise ValueError(f"pace: samples go backwards ({s0:g} s at {w0:g} -> {s1:g} s at {w1:g})")
    if len(samples) < 2:
        return None
    sim = samples[-1][0] - samples[0][0]
    wall = samples[-1][1] - samples[0][1]
    if not (sim > 0 and wall > 0):
        return None
    kept = sim / wall / target
    lowest = kept
    j = 0
    for i, (s0, w0) in enumerate(samples):
        j = max(j, i + 1)
        while j < len(samples) and samples[j][0] - s0 < window_s:
            j += 1
        if j == len(samples):
            break
        s1, w1 = samples[j]
        if w1 > w0:
            lowest = min(lowest, (s1 - s0) / (w1 - w0) / target)
    return {"target_x": target, "kept": kept, "lowest": lowest, "window_s": window_s,
            "starved": lowest < STARVED_FRACTION}


class PaceMeter:
    """Samples of the simulated clock against a wall clock (module docstring).

    Args:
        target: the simulated seconds per wall second the fleet is run at.
        clock: wall seconds (``time.monotonic`` by default; a fake one in tests).
    """

    def __init__(self, target: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.target = target
        self.clock = clock
        self.samples: list[tuple[float, float]] = []

    def mark(self, sim_s: float) -> None:
        """Record that the fleet's clock reads ``sim_s`` now."""
        self.samples.append((sim_s, self.clock()))

    def speed_over(self, wall_s: float) -> float | None:
        """The fleet's simulated seconds per wall second over the last ``wall_s`` wall seconds (to now
        on ``clock``), for the daemon's rate source (``PrometheusSource(measured_speed=...)``): the
        simulated time of the newest sample minus that of the last sample at or before ``now -
        wall_s`` (the fleet's clock holds between its steps, as what it serves does; before the first
        sample it had not started and holds at that sample's), over ``wall_s``: a window reaching back
        before the fleet started is measured too, so a rate over a partly filled window is divided by
        the simulated time it holds. 0.0 when the clock did not move over the window (the source then
        reads its rates as unknown); None when nothing can be measured (no sample yet, or the first
        one is still in the future: the source converts at the target). Safe while another thread
        marks samples."""
        samples = self.samples[:len(self.samples)]
        if not samples or not wall_s > 0:
            return None
        now = self.clock()
        if samples[0][1] > now:
            return None
        walls = [w for _, w in samples]
        i = max(bisect_right(walls, now - wall_s) - 1, 0)
        return max(samples[-1][0] - samples[i][0], 0.0) / wall_s

    def figures(self, window_s: float = PACE_WINDOW_S) -> dict[str, Any] | None:
        """``pace_figures`` of the samples so far."""
        return pace_figures(self.samples, self.target, window_s)
