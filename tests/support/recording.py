"""Test doubles shared by the loop's tests: an actuator that records its writes and applies each."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.loop.actuate import APPLIED, ActuationResult


class RecordingActuator:
    """Applies every write and keeps it as ``(service, variant, replicas)`` in ``writes``, in order."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, int]] = []

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        self.writes.append((service, variant, replicas))
        return APPLIED
