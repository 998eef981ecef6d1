"""Actuate stage: the interface to whatever runs the replicas (simulator, Kubernetes)."""

from __future__ import annotations

from typing import Protocol


class Actuator(Protocol):
    """Reads and sets replica counts of a service's variants (one Deployment per variant)."""

    def counts(self, service: str, variant: str) -> tuple[int, int, int]:
        """``(ready, starting, draining)`` replicas of the variant."""
        ...

    def scale(self, service: str, variant: str, replicas: int) -> None:
        """Set the variant's desired replica count (the Deployment's scale subresource)."""
        ...
