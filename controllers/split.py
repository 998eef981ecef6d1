"""Split a service's desired capacity across its variants (GPU generations), at the lowest cost.

Rule (incremental, so warm replicas are kept): to add capacity, add the replicas whose price per hour
is lowest among the additions that reach the target; to remove capacity, remove the replicas whose
price is highest among the removals that keep the target. Both are small integer programs (a covering
and a packing knapsack over replica counts) solved exactly with ``scipy.optimize.milp`` (HiGHS), so
an expensive replica is never kept while a cheaper one goes when dropping the expensive one would
also meet the target; among equal costs the fewest replicas change, then file order decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from autoscaler.config import Variant

# Tie-breaks, as fractions of the smallest replica price: per replica changed, then per file position.
_PER_CHANGE = 1e-6
_PER_POSITION = 1e-9


def cost_per_capacity(v: Variant, weight_rps: float) -> float:
    """$/hour per request/s of capacity of one replica of ``v`` (infinite when it has none: a replica
    that cannot meet the SLO for this mix at any load)."""
    return v.price_per_replica_hour / weight_rps if weight_rps > 0 else float("inf")


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
        variant -> desired replicas, each within ``[min_replicas, cap]``; every variant at its cap when
        even that falls short of the target.
    """
    start = {v.name: min(max(current.get(v.name, 0), v.min_replicas), v.cap) for v in variants}
    cap = capacity_of(start, weights)
    if cap < target_rps:
        room = [v.cap - start[v.name] for v in variants]
        if cap + sum(r * weights[v.name] for r, v in zip(room, variants, strict=True)) <= target_rps:
            return {v.name: v.cap for v in variants}
        add = _knapsack(variants, weights, room, target_rps - cap, cover=True)
        return {v.name: start[v.name] + n for v, n in zip(variants, add, strict=True)}
    spare = [start[v.name] - v.min_replicas for v in variants]
    remove = _knapsack(variants, weights, spare, cap - target_rps, cover=False)
    return {v.name: start[v.name] - n for v, n in zip(variants, remove, strict=True)}


def _knapsack(variants: Sequence[Variant], weights: Mapping[str, float], upper: Sequence[int], amount: float,
              cover: bool) -> list[int]:
    """Replica counts ``n_v`` in ``[0, upper_v]``: with ``cover``, the cheapest whose capacity is at least
    ``amount``; without, the dearest whose capacity is at most ``amount`` (module docstring)."""
    if not any(upper) or (not cover and amount <= 0):
        return [0] * len(variants)
    prices = np.array([v.price_per_replica_hour for v in variants], dtype=float)
    unit = max(float(prices[prices > 0].min()) if np.any(prices > 0) else 1.0, 1e-12)
    ties = unit * (_PER_CHANGE + _PER_POSITION * np.arange(len(variants)))
    c = prices + ties if cover else -prices + ties
    w = np.array([weights[v.name] for v in variants], dtype=float)
    bound = LinearConstraint(w[np.newaxis, :], lb=amount, ub=np.inf) if cover else \
        LinearConstraint(w[np.newaxis, :], lb=-np.inf, ub=amount * (1 + 1e-12))
    res = milp(c=c, constraints=bound, integrality=np.ones(len(variants)),
               bounds=Bounds(np.zeros(len(variants)), np.array(upper, dtype=float)))
    if res.x is None:
        raise RuntimeError(f"split: HiGHS found no solution ({res.message})")
    return [round(float(x)) for x in res.x]


def capacity_of(replicas: Mapping[str, int], weights: Mapping[str, float]) -> float:
    """Total capacity (requests/s) of a replica assignment."""
    return sum(n * weights[name] for name, n in replicas.items())
