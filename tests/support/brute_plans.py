"""Brute force for the planner's tests: every replica sequence of one variant, to enumerate plans by."""

from __future__ import annotations

import itertools

import numpy as np

from models.planning import PlanService, PlanVariant


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


def pools_brute_force(svc: PlanService, dt: float) -> float:
    """Cheapest cost over every combination of the variants' replica sequences (``sequences``), no
    step limits: the pools serve the smaller of their two capacities (at most the demand), counted at
    ``1 - pd_spill`` in the demand (the aggregated spill reserve; all of it at 0), the aggregated replicas
    the rest, and what is left is missed."""
    h = len(svc.demand_rps)
    cost = np.zeros(1)
    served = {role: np.zeros((1, h)) for role in (None, "prefill", "decode")}
    for v in svc.variants:  # the grid of every combination so far, flattened
        _, c, s = sequences(v, dt)
        m = len(c)
        cost = (cost[:, None] + c[None, :]).ravel()
        for role in served:
            grown = served[role][:, None, :] + (s[None, :, :] if role == v.role else 0.0)
            served[role] = np.broadcast_to(grown, (len(cost) // m, m, h)).reshape(-1, h)
    pools = np.minimum(np.minimum(served["prefill"], served["decode"]), svc.demand_rps)
    left = np.maximum(svc.demand_rps - served[None] - (1.0 - svc.pd_spill) * pools, 0.0)
    return float(np.min(cost + dt * svc.miss_cost * left.sum(axis=1)))
