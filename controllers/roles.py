"""What the controllers that scale prefill/decode pools share (``Service.roles``; ``Controller.scales_roles``).

- ``pool_service``: a pool seen as a service whose variants are the pool's, so the guard's rules
  (``autoscaler.loop.guard``) and ``controllers.split`` apply to it unchanged;
- ``pool_capacities``: one replica's modelled capacity per pool variant (``models.capacity_roles``), the
  MPC's plan's, and ``role_weights``: the same with the router's fallback, the weights the loop's guard
  ranks a pool's variants by and the PID counts a pool's capacity in;
- ``enforce_ratio``: the prefill:decode replica ratio kept within ``[min_ratio, max_ratio]``
  (``Roles.ratio``), by Volcano Kthena's rule (below).

Kthena's ratio constraint (volcano-sh/kthena at 3cc0572, v1.0.0-rc.0-388: ``pkg/apis/workload/v1alpha1/
autoscalingpolicy_types.go`` ``RoleRatioConstraint`` with ``numeratorRole``, ``denominatorRole``,
``minRatio``, ``maxRatio``; enforced by ``pkg/autoscaler/algorithm/disaggregated_ratio.go``
``EnforceRoleRatio``): each role is first clamped to its replica bounds; both at zero stay so (a coupled
scale to zero); one side at zero is raised to one (within its bounds), since one live role cannot serve;
then, with ``r = numerator / denominator``: below ``minRatio`` the numerator is raised to
``ceil(minRatio x denominator)``, or, when that passes its maximum, set to its maximum and the
denominator lowered to ``floor(numerator / minRatio)``; above ``maxRatio`` the denominator is raised to
``ceil(numerator / maxRatio)``, or set to its maximum and the numerator lowered to ``floor(maxRatio x
denominator)`` (a ``maxRatio`` of 0 sets the numerator to 0); each result is clamped to its bounds
again. The repair is biased to scale up: the deficient side grows, the other shrinks only when that
cannot. Here the numerator is the prefill pool and the denominator the decode pool, each the sum of its
variants' replicas.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from autoscaler.config.fleet import ratio_reachable as ratio_reachable  # the fleet file refuses a ratio without one
from models.capacity import ReplicaSpec, RequestMix, mean_itl_rate
from models.capacity_roles import decode_capacity, pool_allowance, prefill_capacity

if TYPE_CHECKING:
    from autoscaler.config import EngineConfig, PDRatio, Service, Variant

PREFILL, DECODE = "prefill", "decode"
ROLES = (PREFILL, DECODE)


def pool_variants(svc: Service, role: str) -> list[Variant]:
    """The variants of ``svc``'s ``role`` pool (empty without roles)."""
    if svc.roles is None:
        return []
    return list(svc.roles.prefill if role == PREFILL else svc.roles.decode)


def pool_service(svc: Service, role: str) -> Service:
    """``svc`` with the variants of its ``role`` pool as its variants and no roles: what the guard and
    ``controllers.split`` read of one pool. Not validated again (a pool's variants passed the file's checks)."""
    return svc.model_copy(update={"variants": pool_variants(svc, role), "roles": None})


def pool_capacities(svc: Service, engine: EngineConfig, mix: RequestMix) -> dict[str, float]:
    """pool variant -> one replica's modelled capacity, requests/s of ``mix`` at the interactive SLO
    (``models.capacity_roles``): a prefill replica's ``prefill_capacity`` (its prompt tokens/s at the TTFT
    target, the KV transfer and the decode replica's recompute included, over the mix's remote prompt
    tokens per request), a decode replica's ``decode_capacity`` (sequences at the ITL target and KV
    residency) against the slowest prefill variant that keeps a capacity (the TTFT slack any prefill
    replica that may serve leaves; 0 where none keeps one). A pool replica keeps a capacity while its
    idle misses are within the service's allowance (``pool_allowance``: ``UNSERVABLE_SHARE`` above the
    fewest idle misses of any aggregated variant or prefill/decode pair). 0 where the SLO is out of reach,
    and for a prefill variant where no prompt is prefilled remotely (an infinite capacity). The one rule
    the MPC's plan, the PID's pools and the router's weights (``role_weights``) share. Empty without roles.
    """
    if svc.roles is None:
        return {}
    roles, slo = svc.roles, svc.slo["interactive"]
    link, threshold = roles.kv_transfer, roles.remote_threshold
    prefill = {v.name: ReplicaSpec.of(v, engine) for v in roles.prefill}
    decode = {v.name: ReplicaSpec.of(v, engine) for v in roles.decode}
    limit = pool_allowance([ReplicaSpec.of(v, engine) for v in svc.variants], list(prefill.values()),
                           list(decode.values()), mix, slo.ttft_s, slo.itl_s, link, non_cached_tokens=threshold)
    out: dict[str, float] = {}
    serving = []  # prefill variants with a capacity (infinite where no prompt is prefilled remotely)
    for name, spec in prefill.items():
        rps = prefill_capacity(spec, mix, slo.ttft_s, link, non_cached_tokens=threshold, unservable=limit).rps
        out[name] = float(rps) if math.isfinite(rps) else 0.0
        if rps > 0:
            serving.append(spec)
    for name, spec in decode.items():
        try:
            rps = min((decode_capacity(spec, mix, slo.ttft_s, slo.itl_s, link, prefill_spec=p,
                                       non_cached_tokens=threshold, unservable=limit).rps for p in serving),
                      default=0.0)
        except ValueError:  # the ITL target below the decode replica's fixed step
            rps = 0.0
        out[name] = float(rps) if math.isfinite(rps) else 0.0
    return out


def role_weights(svc: Service, engine: EngineConfig, mix: RequestMix) -> dict[str, float]:
    """pool variant -> one replica's capacity, requests/s of ``mix`` at the interactive SLO: the MPC's
    (``pool_capacities``: the service's idle-miss allowance, decode against the slowest prefill variant
    that keeps a capacity). Where a variant of a pool has none (no rate meets the SLO, or no prompt is
    prefilled remotely), the pool's variants are weighed as the simulator's router weighs them instead
    (``models.capacity.mean_itl_rate`` at the interactive ITL: a rate of the same mix), and 1.0 where even
    that has none. Empty without roles."""
    if svc.roles is None:
        return {}
    slo = svc.slo["interactive"]
    modelled = pool_capacities(svc, engine, mix)
    out: dict[str, float] = {}
    for role in ROLES:
        caps = {v.name: modelled[v.name] for v in pool_variants(svc, role)}
        if not all(0.0 < c < math.inf for c in caps.values()):
            for v in pool_variants(svc, role):
                try:
                    caps[v.name] = mean_itl_rate(ReplicaSpec.of(v, engine), mix, slo.itl_s)
                except ValueError:
                    caps[v.name] = 0.0
            if not all(0.0 < c < math.inf for c in caps.values()):
                caps = dict.fromkeys(caps, 1.0)
        out.update(caps)
    return out


def enforce_ratio(prefill: int, decode: int, ratio: PDRatio, prefill_bounds: tuple[int, int],
                  decode_bounds: tuple[int, int]) -> tuple[int, int]:
    """``(prefill, decode)`` replicas repaired into ``ratio`` by Kthena's rule (module docstring).

    Args:
        prefill, decode: the replicas each pool's own loop asks for.
        ratio: ``min_ratio <= prefill / decode <= max_ratio``.
        prefill_bounds, decode_bounds: each pool's ``(min, max)`` replicas (sums over its variants).

    Returns:
        the repaired ``(prefill, decode)``, each within its bounds.
    """
    (p_lo, p_hi), (d_lo, d_hi) = prefill_bounds, decode_bounds
    p, d = min(max(prefill, p_lo), p_hi), min(max(decode, d_lo), d_hi)
    if p == 0 and d == 0:
        return p, d
    if p == 0:
        p = min(max(1, p_lo), p_hi)
    if d == 0:
        d = min(max(1, d_lo), d_hi)
    if d > 0 and p / d < ratio.min_ratio:
        raised = math.ceil(ratio.min_ratio * d)
        if raised <= p_hi:
            p = max(raised, p_lo)
        elif ratio.min_ratio > 0:
            p = p_hi
            d = math.floor(p / ratio.min_ratio)
    elif d > 0 and p / d > ratio.max_ratio:
        if ratio.max_ratio <= 0:
            p = 0
        else:
            raised = math.ceil(p / ratio.max_ratio)
            if raised <= d_hi:
                d = max(raised, d_lo)
            else:
                d = d_hi
                p = math.floor(ratio.max_ratio * d)
    return min(max(p, p_lo), p_hi), min(max(d, d_lo), d_hi)
