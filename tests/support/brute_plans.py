"""Brute force for the planner's tests: every replica sequence of one variant, to enumerate plans by."""

from __future__ import annotations

import itertools

import numpy as np

from models.planning import PlanVariant


def sequences(v: PlanVariant, dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every replica sequence of ``v`` (each step its own block; the tests give no warm nodes): the
    counts ordered per step (m, h), their cost (m,) and the requests/s their replicas serve per step
    (m, h). An increase is ordered cold, a decrease removes a ready replica (none ready: the sequence
    is left out); a step serves the replicas ready by then."""
    h = len(v.ready)
    seqs, costs, served = [], [], []
    for seq in itertools.product(range(v.min_replicas, v.max_replicas + 1), repeat=h):
        steps = np.diff([v.current, *seq])
        orders, removed = np.cumsum(np.maximum(steps, 0)), np.cumsum(np.maximum(-steps, 0))
        ready = np.array([v.ready[k] + (orders[k - v.cold_steps] if k >= v.cold_steps else 0) - removed[k]
                          for k in range(h)])
        if ready.min() < 0:
            continue
        seqs.append(seq)
        costs.append(v.price_per_hour * dt / 3600 * sum(seq) + v.start_cost * orders[-1])
        served.append(v.capacity_rps * np.minimum(seq, ready))
    return np.array(seqs), np.array(costs), np.array(served)
