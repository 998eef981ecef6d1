"""Wall-clock ticking for a live loop (dry-run, the daemon): a fixed schedule that does not drift."""

from __future__ import annotations

import time
from collections.abc import Callable


def run_every(period_s: float, tick: Callable[[], None], limit: int | None = None,
              sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> int:
    """Call ``tick`` now and then every ``period_s`` wall seconds, ``limit`` times (None: until interrupted).

    The schedule is fixed (``start + k * period_s``), so a slow tick shortens the next wait instead
    of pushing every later tick back; a tick that overruns a whole period is followed at once.
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
        due += period_s
        sleep(max(0.0, due - clock()))
    return done
