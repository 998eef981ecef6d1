"""Observe stage: the interface every metrics source implements (Prometheus, the simulator).

What a source reports (signal names, units, per-variant and per-pod observations) is defined in
``autoscaler.state``: every signal is ``float | None``, None meaning *unknown*, never zero.
"""

from __future__ import annotations

from typing import Protocol

from autoscaler.state import ServiceObservation


class MetricsSource(Protocol):
    """Anything that can report signals for the services of a fleet."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        """Signals for every service at time ``now`` (seconds), keyed by service name."""
        ...


class PendingMarks:
    """Which variants are marked unavailable because their pods cannot be placed: a variant whose
    pods have been unschedulable for ``timeout_s`` is marked for ``retry_s`` (then it may be scaled
    up again, and is marked again if its pods still cannot be placed). Times in seconds on the
    caller's clock; ``kubernetes.pending_timeout_s`` / ``pending_retry_s`` of the fleet file."""

    def __init__(self, timeout_s: float, retry_s: float) -> None:
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.marked_until: dict[tuple[str, str], float] = {}

    def marked(self, key: tuple[str, str], now: float) -> bool:
        """Whether ``key`` (service, variant) is marked at ``now``."""
        return now < self.marked_until.get(key, float("-inf"))

    def mark_if_stuck(self, key: tuple[str, str], stuck_s: float | None, now: float) -> bool:
        """Mark ``key`` when its longest-unschedulable pod has been so ``stuck_s`` >= the timeout
        (None: unknown, never marks); returns whether it is marked now."""
        if self.marked(key, now):
            return True
        if stuck_s is not None and stuck_s >= self.timeout_s:
            self.marked_until[key] = now + self.retry_s
            return True
        return False
