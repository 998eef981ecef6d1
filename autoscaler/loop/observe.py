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
