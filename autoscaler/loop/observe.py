"""Observe stage: what a metrics source reports each tick, and the interface sources implement.

Every signal is ``float | None``: None means *unknown* (query failed, no data), never zero.

Signal names (per service; per variant the same names restricted to that variant's pods):
``request_rate_rps``, ``prompt_tokens_rps``, ``generation_tokens_rps`` (tokens/s),
``ttft_p50_s``, ``ttft_p95_s``, ``itl_p50_s``, ``itl_p95_s`` (seconds, ``histogram_quantile``
over the window), ``tpot_p95_s`` (p95 of per-request mean time per output token, seconds),
``kv_usage`` (mean fraction over pods), ``queue_length`` and ``running``
(requests, summed over pods), ``prefix_hit_rate`` (hits/queries over the window),
``success_rps`` and ``abort_rps`` (requests/s), ``preemptions_rps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

SIGNALS = (
    "request_rate_rps",
    "prompt_tokens_rps",
    "generation_tokens_rps",
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "itl_p95_s",
    "tpot_p95_s",
    "kv_usage",
    "queue_length",
    "running",
    "prefix_hit_rate",
    "success_rps",
    "abort_rps",
    "preemptions_rps",
)


@dataclass
class VariantObservation:
    """Replica counts (from the actuator's view of the Deployment) and signals of one variant."""

    ready: int
    starting: int
    draining: int = 0
    signals: dict[str, float | None] = field(default_factory=dict)

    @property
    def current(self) -> int:
        """Replicas counted by the Deployment: ready + starting."""
        return self.ready + self.starting


@dataclass
class ServiceObservation:
    """One tick's observation of a service.

    Attributes:
        service: service name.
        time_s: observation time, seconds.
        signals: service-wide signals (see module docstring); None = unknown.
        variants: per-variant counts and signals.
        errors: one line per failed query (empty when everything worked).
    """

    service: str
    time_s: float
    signals: dict[str, float | None]
    variants: dict[str, VariantObservation]
    errors: list[str] = field(default_factory=list)


class MetricsSource(Protocol):
    """Anything that can report signals for the services of a fleet."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        """Signals for every service at time ``now`` (seconds), keyed by service name."""
        ...
