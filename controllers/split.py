"""Split a service's desired capacity across its variants (GPU generations).

Rule (incremental, so warm replicas are kept): to add capacity, add replicas to the variant with
the lowest cost per unit of capacity ($/replica-hour / requests/s) that is below its cap (max
replicas and quota), until the target is reached; to remove capacity, remove replicas from the
variant with the highest cost per unit of capacity that is above its minimum, as long as the
remaining capacity still meets the target. Variants with equal cost-efficiency are taken in file order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.config import Variant


def cost_per_capacity(v: Variant, weight_rps: float) -> float:
    """$/hour per request/s of capacity of one replica of ``v``."""
    return v.price_per_replica_hour / weight_rps


def split_capacity(
    target_rps: float,
    variants: Sequence[Variant],
    current: Mapping[str, int],
    weights: Mapping[str, float],
) -> dict[str, int]:
    """Replicas per variant whose capacity covers ``target_rps`` (requests/s), changing few replicas.

    Args:
        target_rps: desired total capacity.
        variants: the service's variants (bounds, prices).
        current: variant -> replicas now (ready + starting).
        weights: variant -> capacity of one replica, requests/s.

    Returns:
        variant -> desired replicas, each within ``[min_replicas, cap]``.
    """
    desired = {v.name: min(max(current.get(v.name, 0), v.min_replicas), v.cap) for v in variants}
    cap = sum(desired[v.name] * weights[v.name] for v in variants)
    cheapest_first = sorted(variants, key=lambda v: cost_per_capacity(v, weights[v.name]))
    if cap < target_rps:
        for v in cheapest_first:
            while desired[v.name] < v.cap and cap < target_rps:
                desired[v.name] += 1
                cap += weights[v.name]
    else:
        for v in reversed(cheapest_first):
            w = weights[v.name]
            while desired[v.name] > v.min_replicas and cap - w >= target_rps:
                desired[v.name] -= 1
                cap -= w
    return desired


def capacity_of(replicas: Mapping[str, int], weights: Mapping[str, float]) -> float:
    """Total capacity (requests/s) of a replica assignment."""
    return sum(n * weights[name] for name, n in replicas.items())
