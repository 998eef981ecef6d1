"""Pieces the baselines share: a service-wide replica count placed on variants, and sample windows.

The single-Deployment autoscalers (HPA, KEDA, Knative KPA, AIBrix) compute one replica count for
their scale target and have no notion of GPU generations. To run them on a heterogeneous fleet they
treat the service as that target: every ready pod of every variant is one of its pods, and the count
is placed on variants with ``place_count`` (additions on the lowest cost per unit of capacity,
removals on the highest, as ``controllers.split`` does for capacity). That gives them our GPU-mix
placement, so the comparison measures their scaling rules, not a worse mix.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from autoscaler.config import Service
from controllers.split import cost_per_capacity


def count_bounds(svc: Service, floor: int = 0) -> tuple[int, int]:
    """``(min, max)`` replicas of the whole service: sums of the variants' bounds, min at least ``floor``."""
    hi = sum(v.cap for v in svc.variants)
    return min(max(sum(v.min_replicas for v in svc.variants), floor), hi), hi


def place_count(total: int, svc: Service, current: Mapping[str, int], weights: Mapping[str, float]) -> dict[str, int]:
    """Replicas per variant summing to ``total`` (as near as the bounds allow), changing few replicas.

    Args:
        total: desired replicas of the whole service.
        svc: the service (variant bounds and prices).
        current: variant -> replicas now (ready + starting).
        weights: variant -> capacity of one replica, requests/s (ranks variants by $ per capacity).

    Returns:
        variant -> replicas, each within ``[min_replicas, cap]``: replicas are added to the variant with
        the lowest $/hour per request/s of capacity that has room, removed from the highest above its
        minimum (ties in file order).
    """
    desired = {v.name: min(max(current.get(v.name, 0), v.min_replicas), v.cap) for v in svc.variants}
    order = sorted(svc.variants, key=lambda v: cost_per_capacity(v, weights[v.name]))
    n = sum(desired.values())
    for v in order:
        while n < total and desired[v.name] < v.cap:
            desired[v.name] += 1
            n += 1
    for v in reversed(order):
        while n > total and desired[v.name] > v.min_replicas:
            desired[v.name] -= 1
            n -= 1
    return desired


class SampleWindow:
    """Timestamped samples of one value, kept for ``horizon_s`` seconds.

    ``mean(now, w)`` averages the samples in ``(now - w, now]``, as Knative's and AIBrix's windowed
    averages do over the buckets that hold data. None when the window holds no sample.
    """

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float) -> None:
        """Record ``value`` at time ``t`` (seconds, non-decreasing)."""
        self._samples.append((t, value))
        while self._samples[0][0] <= t - self.horizon_s:
            self._samples.popleft()

    def mean(self, now: float, window_s: float) -> float | None:
        """Average of the samples in ``(now - window_s, now]``."""
        vals = [v for t, v in self._samples if now - window_s < t <= now]
        return sum(vals) / len(vals) if vals else None
