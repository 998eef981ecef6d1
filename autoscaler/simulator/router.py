"""Request routers in front of a service's replicas."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.simulator.engine import Replica
from autoscaler.workload.types import Request


def least_outstanding(replicas: Sequence[Replica], weights: dict[str, float]) -> Replica:
    """The replica with the fewest outstanding requests per unit of capacity.

    ``weights`` maps variant name to relative capacity (requests/s a replica sustains), so an H100
    replica takes proportionally more than an A100 one. Ties go to the earlier replica. A decode
    replica's outstanding requests include those prefilled remotely for it (``Replica.inbound``): in
    llm-d's P/D sequence the request is at the decode pod's sidecar from the moment it is routed.
    """
    # ``Replica.outstanding`` spelled out: this runs for every request over every replica
    best = replicas[0]
    best_score = (len(best.waiting) + len(best.prefilling) + best.n_dec + best.inbound + 1) / weights[best.variant]
    for r in replicas[1:]:
        score = (len(r.waiting) + len(r.prefilling) + r.n_dec + r.inbound + 1) / weights[r.variant]
        if score < best_score:
            best, best_score = r, score
    return best


def prefix_affinity(
    replicas: Sequence[Replica], weights: dict[str, float], req: Request, max_imbalance: float = 2.0
) -> Replica:
    """The replica whose prefix cache holds the longest leading run of ``req.hash_ids``.

    Falls back to ``least_outstanding`` when the request has no hashes, nothing matches, or the
    best-matching replica's load exceeds ``max_imbalance`` times the least-loaded one's (so a hot
    prefix cannot pile everything on one replica).
    """
    fallback = least_outstanding(replicas, weights)
    if not req.hash_ids:
        return fallback
    best, best_hit = fallback, 0
    for r in replicas:
        hit = r.cache.match_blocks(req.hash_ids)
        if hit > best_hit:
            best, best_hit = r, hit
    if best_hit == 0:
        return fallback
    load_best = (best.outstanding + best.inbound + 1) / weights[best.variant]
    load_min = (fallback.outstanding + fallback.inbound + 1) / weights[fallback.variant]
    return best if load_best <= max_imbalance * load_min else fallback
