"""Polling a watch cache until a condition holds, for the tests against the emulated API server."""

from __future__ import annotations

import time
from collections.abc import Callable

from autoscaler.adapters.workloads.base import CacheStale

WAIT_S = 30.0
"""How long a condition may take before the test fails, wall seconds: a bound on a failure, not a timing."""


def wait_for(what: str, cond: Callable[[], bool], wait_s: float = WAIT_S) -> None:
    """Poll ``cond`` until it holds (a read raising ``CacheStale`` counts as not yet); AssertionError
    naming ``what`` after ``wait_s``."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            if cond():
                return
        except CacheStale:
            pass
        time.sleep(0.02)
    raise AssertionError(f"never: {what}")
