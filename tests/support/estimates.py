"""The MPC unit tests' service estimate: one service's tick as the loop hands it to a controller, built
from replica counts (``tests/unit/test_mpc_*.py``, ``test_burst_floor.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.config import Service
from autoscaler.state import PoolObservation, ServiceEstimate, Signals, VariantObservation


def service_estimate(svc: Service, weights: Mapping[str, float], t: float, rate: float,
                     ready: Mapping[str, int], starting: Mapping[str, int] | None = None,
                     capacity: float | None = None,
                     unschedulable: Mapping[str, float | None] | None = None,
                     queue: float = 0.0) -> ServiceEstimate:
    """``svc`` at ``t`` (s) with ``rate`` req/s arriving and ``queue`` requests queued (0: empty); ``ready``
    and ``starting`` replicas per variant (0 where absent), every variant of ``svc`` in its order, a
    prefill/decode pool's variants in its pool (``ServiceEstimate.pools``, as the loop gives a controller
    that scales roles; none without ``svc.roles``); ``weights`` (req/s a replica) as the estimate's
    weights; ``capacity`` (req/s, both the estimate's capacity figures) by default the weights times each
    aggregated variant's replicas (ready and starting); ``unschedulable``: a variant's
    ``unschedulable_s`` (s), left at its default elsewhere."""
    starting = starting or {}
    variants = {v.name: VariantObservation(ready.get(v.name, 0), starting.get(v.name, 0)) for v in svc.variants}
    for name, wait in (unschedulable or {}).items():
        variants[name].unschedulable_s = wait
    if capacity is None:
        capacity = sum(weights[n] * o.current for n, o in variants.items())
    pools = {role: PoolObservation(role, Signals(), {v.name: VariantObservation(ready.get(v.name, 0),
                                                                                starting.get(v.name, 0))
                                                     for r, v in svc.role_variants() if r == role})
             for role in ("prefill", "decode")} if svc.roles is not None else {}
    return ServiceEstimate(svc.name, t, Signals.of({"arrival_rate_rps": rate, "queue_length": queue}), variants,
                           dict(weights), False, capacity, capacity, sum(starting.values()), pools=pools)
