"""llm-d's workload-variant-autoscaler (WVA) with its role-aware grouping: its V1 (percentage) saturation
analyzer run on each role of a model apart, the prefill pool, the decode pool and the aggregated variants
(``controllers.baselines.wva`` is the aggregated-only WVA, read at an earlier commit).

Sources (llm-d/llm-d-autoscaling, the WVA repository's current name; the role grouping is pull request
#1036, merged 2026-04-21, which closes the report in issue #1031 that the model-wide analysis averaged the
prefill pods' KV usage with the decode pods'): ``internal/engines/saturation/engine.go`` (read at 28d84c9:
``optimizeV1``, ``analyzeRoleGroups``, ``getRoleFromScaleTarget``), ``internal/saturationv1/analyzer.go`` (at
763b1bd: ``AnalyzeModelSaturation``, ``isScaleDownSafe``, ``CalculateSaturationTargets``) and
``internal/config/saturation_scaling.go`` (at 7862523: V1 is the analyzer when ``analyzerName`` is unset;
the defaults ``kvCacheThreshold`` 0.80, ``queueLengthThreshold`` 5, ``kvSpareTrigger`` 0.10,
``queueSpareTrigger`` 3, the constants of ``controllers.baselines.wva``). Which tagged release first carries
#1036 was not pinned; the V2 path's per-role capacity aggregation is listed for v0.8.0 (epic #1493).

Every reconcile (60 s, ``max_over_time[1m]`` of each ready pod's KV usage and waiting requests):

1. The variants are grouped by role as the scale target's pod label ``llm-d.ai/role`` says: ``prefill``,
   ``decode``, anything else or none ``both``. Here: the prefill pool's variants, the decode pool's
   (``Service.roles``), and the aggregated variants (``both``). Each group's pods are its variants' pods
   only: no pod of one role enters another's analysis.
2. Per group, ``controllers.baselines.wva.saturation_analysis`` over its pods (the same rule: saturated
   at ``kv >= 0.80`` or ``waiting >= 5``; scale up when the non-saturated pods' mean spare KV is below 0.10
   or their mean spare queue below 3, or none is non-saturated; scale-down safe when their load over one
   pod fewer keeps both spares at the triggers, with at least 2 of them). A group with no pod reporting is
   held (the engine's safety net).
3. Per group, ``v1_targets``: only the group's variants with a reporting pod are analysed (a variant at 0
   replicas is never chosen). While any of them has a replica starting, the group is in transition and
   keeps its counts (in the role grouping this blocks the group, no longer the model). Else a scale-up
   adds one replica to the analysed variant of the lowest cost per replica (ties: alphabetically first),
   a scale-down removes one from the analysed variant of the highest cost per replica (ties:
   alphabetically last) among those above 1 replica; each target is then clamped to the variant's
   ``[min_replicas, max_replicas]``. The cost is ``price_per_replica_hour`` (the VariantAutoscaling's
   variant cost, per replica).

A metric query that failed (``ServiceEstimate.errors``) holds every group: ``optimizeV1`` skips the model
when its data preparation returns an error.

Not modelled: the transition check's ``desired != current`` half (upstream holds a group until its
replicas reach the last desired count; ours decides afresh each reconcile, which differs only while a
scale write fails or lags), the released V1's reading of a pod's missing KV or queue value as 0 (a pod
without series is not in ``est.pods``: ours leaves it out of the analysis), the model-wide scale-to-zero
enforcement (V1 never lowers a variant below 1 itself), the GPU limiter (off by default) and the V2
token-based analyzer (``analyzerName: saturation``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from controllers.base import Controller, Decision, Reason, change_reason, hold
from controllers.baselines.wva import RECONCILE_S, WINDOW_S, Saturation, saturation_analysis
from controllers.roles import DECODE, PREFILL, pool_variants

if TYPE_CHECKING:
    from autoscaler.config import Service, Variant
    from autoscaler.state import PodObservation, ServiceEstimate

BOTH = "both"
"""The role of a variant without the ``llm-d.ai/role`` label of ``prefill`` or ``decode`` (an aggregated one)."""
ROLE_GROUPS = (BOTH, DECODE, PREFILL)
"""The role groups, in the engine's order (``sortedRoleKeys``: alphabetical)."""


def role_variants(svc: Service, role: str) -> list[Variant]:
    """The variants of ``svc`` in role group ``role`` (``ROLE_GROUPS``): its aggregated variants for ``both``."""
    return list(svc.variants) if role == BOTH else pool_variants(svc, role)


def role_pods(pods: Sequence[PodObservation], variants: Sequence[Variant]) -> list[PodObservation]:
    """The pods of ``variants`` only (step 1: a role group's pods)."""
    names = {v.name for v in variants}
    return [p for p in pods if p.variant in names]


def v1_targets(
    sat: Saturation,
    variants: Sequence[Variant],
    current: Mapping[str, int],
    starting: Mapping[str, int],
    reporting: set[str],
) -> tuple[dict[str, int], str]:
    """Step 3 for one role group: ``(variant -> target, reason)`` for the analysed variants.

    Args:
        sat: the group's saturation analysis.
        variants: the group's variants.
        current, starting: variant -> replicas (ready + starting) and replicas starting.
        reporting: names of the variants with at least one pod in the analysis.

    Returns:
        targets for the variants in ``reporting`` only (the others are not decided), and why.
    """
    analysed = [v for v in variants if v.name in reporting]
    target = {v.name: current[v.name] for v in analysed}
    pending = sorted(v.name for v in analysed if starting[v.name] > 0)
    if pending:
        return target, f"in transition ({', '.join(pending)} pending), scaling blocked"
    why = "within thresholds"
    if sat.scale_up and analysed:
        v = min(analysed, key=lambda v: (v.price_per_replica_hour, v.name))
        target[v.name] += 1
        why = f"saturated: +1 {v.name}"
    elif sat.scale_down_safe:
        above = [v for v in analysed if target[v.name] > 1]
        if above:
            v = max(above, key=lambda v: (v.price_per_replica_hour, v.name))
            target[v.name] -= 1
            why = f"spare capacity: -1 {v.name}"
    for v in analysed:
        clamped = min(max(target[v.name], v.min_replicas), v.cap)
        if clamped != target[v.name]:
            why += f", clamped to {clamped} ({v.name}'s bounds): no change" if clamped == current[v.name] else ""
        target[v.name] = clamped
    return target, why


class WVAPDController(Controller):
    """The WVA V1 saturation analyzer per role group (module docstring), acting directly on the replicas."""

    scales_roles = True

    def __init__(self, *, name: str = "wva-pd") -> None:
        super().__init__(name, RECONCILE_S, WINDOW_S, own_guard=True)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant of each role group that has a reporting pod (module docstring)."""
        current = {**est.current, **est.pool_current}
        if est.errors:
            return hold(current, f"wva-pd: a metric query failed ({est.errors[0]}), held", Reason.METRICS_ERROR)
        starting = {name: v.starting for name, v in est.variants.items()}
        for pool in est.pools.values():
            starting.update({name: v.starting for name, v in pool.variants.items()})
        desired: dict[str, int] = {}
        notes = []
        for role in ROLE_GROUPS:
            variants = [v for v in role_variants(svc, role) if v.name in current]
            if not variants:
                continue
            pods = role_pods(est.pods, variants)
            if not pods:
                notes.append(f"{role}: no ready pod reports metrics, held")
                continue
            sat = saturation_analysis([p.kv_usage_max for p in pods], [p.waiting_max for p in pods])
            target, why = v1_targets(sat, variants, current, starting, {p.variant for p in pods})
            desired.update(target)
            notes.append(f"{role}: {why} ({sat.non_saturated}/{len(pods)} pods non-saturated)")
        if not desired:
            return hold(current, "wva-pd: " + ("; ".join(notes) or "no variant observed"))
        return Decision(desired, "wva-pd: " + "; ".join(notes), change_reason(desired, current))
