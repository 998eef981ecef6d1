"""Wall-clock ticking for a live loop (dry-run, the daemon): a fixed schedule that does not drift."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


def next_due(due: float, period_s: float, now: float) -> tuple[float, int]:
    """After a tick that was due at ``due``, when the next is due and how many slots of the schedule
    (``due + k * period_s``) passed while it ran and are skipped: a tick that overran is followed at
    once by one tick, not by one per missed period (a slow Prometheus must not get a burst of replayed
    ticks the moment it recovers)."""
    nxt = due + period_s
    skipped = max(0, math.floor((now - nxt) / period_s)) if now > nxt else 0
    return nxt + skipped * period_s, skipped


def run_every(period_s: float, tick: Callable[[], None], limit: int | None = None,
              sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> int:
    """Call ``tick`` now and then every ``period_s`` wall seconds, ``limit`` times (None: until interrupted).

    The schedule is fixed (``start + k * period_s``), so a slow tick shortens the next wait instead
    of pushing every later tick back; a tick that overruns is followed at once by one tick, and the
    slots it overran are skipped (``next_due``).
    Returns the number of ticks run; ``KeyboardInterrupt`` propagates to the caller.

    Raises:
        ValueError: ``period_s`` not a finite number > 0, or ``limit`` below 1.
    """
    if not 0 < period_s < float("inf"):
        raise ValueError(f"tick period must be a finite number > 0, got {period_s}")
    if limit is not None and limit < 1:
        raise ValueError(f"tick limit must be >= 1, got {limit}")
    due = clock()
    done = 0
    while limit is None or done < limit:
        tick()
        done += 1
        if limit is not None and done >= limit:
            break
        due, _ = next_due(due, period_s, clock())
        sleep(max(0.0, due - clock()))
    return done
