"""What every controller returns, and the interface the loop's decide stage calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from autoscaler.config import ControllerConfig, Service
    from autoscaler.state import ServiceEstimate


@dataclass
class Decision:
    """Desired replicas per variant of one service, with the reason and the controller's terms.

    Attributes:
        desired: variant name -> desired replica count.
        reason: short human-readable reason (``scale up: ttft_p95 1.8x setpoint`` ...).
        terms: numbers worth exporting (setpoint, measurement, PID terms, target capacity).
        hold: True when the controller could not decide (missing data): the guard keeps replicas.
    """

    desired: dict[str, int]
    reason: str
    terms: dict[str, float] = field(default_factory=dict)
    hold: bool = False


class Controller(Protocol):
    """A replica-count policy for one or more services."""

    name: str

    def decide(self, est: ServiceEstimate, svc: Service, cfg: ControllerConfig) -> Decision:
        """Desired replicas per variant of ``svc`` given this tick's estimate."""
        ...
