"""llm-d workload-variant-autoscaler (WVA), saturation mode, cost-aware across variants.

Sources (``docs/anchors.md#llm-d-wva``, llm-d/llm-d-workload-variant-autoscaler at b08b1c7):
``docs/saturation-analyzer.md``,
``docs/saturation-scaling-config.md`` (thresholds), ``docs/design/controller-behavior.md``
(``GLOBAL_OPT_INTERVAL`` 60 s), ``internal/engines/pipeline/cost_aware_optimizer.go`` (variant choice).

Every reconcile (60 s), per ready pod, ``max_over_time(...[1m])`` of KV-cache usage and of waiting
requests (``saturation_analysis``):

- a pod is saturated if ``kv >= 0.80`` or ``queue >= 5``; spare = threshold - usage, averaged over
  the non-saturated pods (none left = no spare);
- scale up if ``avg_spare_kv < 0.1`` or ``avg_spare_queue < 3``;
- scale down is safe if, with the non-saturated pods' total load spread over one pod fewer,
  ``0.80 - kv_after >= 0.1`` and ``5 - queue_after >= 3``, and at least 2 pods are non-saturated.

Per variant (``wva_targets``): while any variant of the model has pending (starting, not yet
reporting) replicas the model is "in transition" and every variant keeps its count
(``internal/saturation/analyzer.go`` ``CalculateSaturationTargets`` at b08b1c7, asserted by
``TestCalculatesaturationTargets_MetricsMismatchBlocksScaling``; its ``docs/saturation-analyzer.md``
describes a per-variant skip instead, the code blocks the whole model). Otherwise a scale-up adds one
replica to the variant with the lowest cost per unit of capacity (``$/replica-hour / requests/s``;
ties: alphabetically first) among those below their cap; a scale-down removes one replica from the
variant with the highest cost per replica (ties: alphabetically last) above its floor; only the
cheapest variant is kept at >= 1 (``cost_aware_optimizer.go``; the V1 path keeps every variant at
>= 1). No ready pod = no data = no action. Only the aggregated variants' pods are analysed (WVA scales
them): a prefill/decode pool's pods (``ServiceEstimate.pools``) are not counted.

A metric query that failed this tick (``ServiceEstimate.errors``) holds every variant at its count before
any analysis, as ``wva-pd`` does: upstream's ``CollectReplicaMetrics`` returns an error when the model's
KV-cache or queue-length query fails (``internal/collector/replica_metrics.go``), and ``optimizeV1`` then
skips the model, deciding none of its variants (``internal/engines/saturation/engine.go``; the same at
b08b1c7 and at the release v0.5.1, c760bb7). Upstream reads all of the model's pods in one query, so a
failure never leaves it a part of them; ours are read per variant, and without the hold a failed query
left the analysis the other variants' pods alone. Ours holds on any failed query, also one of a signal
WVA does not read (the estimate does not say which query fed what).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controllers.base import Controller, Decision, Reason, aggregated_pods, change_reason, hold
from controllers.split import cost_per_capacity

if TYPE_CHECKING:
    from autoscaler.config import Service
    from autoscaler.state import ServiceEstimate

RECONCILE_S = 60.0
WINDOW_S = 60.0
KV_CACHE_THRESHOLD = 0.80
QUEUE_LENGTH_THRESHOLD = 5.0
KV_SPARE_TRIGGER = 0.1
QUEUE_SPARE_TRIGGER = 3.0


@dataclass(frozen=True)
class Saturation:
    """Result of one saturation analysis."""

    scale_up: bool
    scale_down_safe: bool
    non_saturated: int
    avg_spare_kv: float | None
    avg_spare_queue: float | None


def saturation_analysis(kv: Sequence[float], queue: Sequence[float], kv_threshold: float = KV_CACHE_THRESHOLD,
                        queue_threshold: float = QUEUE_LENGTH_THRESHOLD, kv_trigger: float = KV_SPARE_TRIGGER,
                        queue_trigger: float = QUEUE_SPARE_TRIGGER) -> Saturation:
    """The module docstring's analysis over per-pod peak KV usage (fraction) and waiting requests."""
    free = [(k, q) for k, q in zip(kv, queue, strict=True) if k < kv_threshold and q < queue_threshold]
    n = len(free)
    if n == 0:
        return Saturation(True, False, 0, None, None)
    spare_kv = sum(kv_threshold - k for k, _ in free) / n
    spare_q = sum(queue_threshold - q for _, q in free) / n
    up = spare_kv < kv_trigger or spare_q < queue_trigger
    safe = False
    if n >= 2:
        kv_after = sum(k for k, _ in free) / (n - 1)
        q_after = sum(q for _, q in free) / (n - 1)
        safe = kv_threshold - kv_after >= kv_trigger and queue_threshold - q_after >= queue_trigger
    return Saturation(up, safe, n, spare_kv, spare_q)


def wva_targets(sat: Saturation, svc: Service, current: Mapping[str, int], starting: Mapping[str, int],
                weights: Mapping[str, float]) -> tuple[dict[str, int], str]:
    """Per-variant targets for one analysis (module docstring); returns ``(targets, reason)``."""
    target = {v.name: current[v.name] for v in svc.variants}
    pending = sorted(v.name for v in svc.variants if starting[v.name] > 0)
    if pending:
        return target, f"model in transition ({', '.join(pending)} not all ready), scaling blocked"
    cheapest = min(svc.variants, key=lambda v: (cost_per_capacity(v, weights[v.name]), v.name))
    if sat.scale_up:
        ok = [v for v in svc.variants if current[v.name] < v.cap]
        if not ok:
            return target, "scale-up needed, every variant is at its cap"
        v = min(ok, key=lambda v: (cost_per_capacity(v, weights[v.name]), v.name))
        target[v.name] += 1
        return target, f"saturated: +1 {v.name}"
    if sat.scale_down_safe:
        ok = [v for v in svc.variants
              if current[v.name] > max(v.min_replicas, 1 if v is cheapest else 0)]
        if ok:
            v = max(ok, key=lambda v: (v.price_per_replica_hour, v.name))
            target[v.name] -= 1
            return target, f"spare capacity: -1 {v.name}"
    return target, "within thresholds"


class WVAController(Controller):
    """The WVA saturation analyzer and cost-aware variant choice, acting directly on the replicas."""


    def __init__(self, *, name: str = "wva") -> None:
        super().__init__(name, RECONCILE_S, WINDOW_S, own_guard=True)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant (module docstring); every variant held when a metric query failed."""
        if est.errors:
            return hold(est.current, f"wva: a metric query failed ({est.errors[0]}), held", Reason.METRICS_ERROR)
        pods = aggregated_pods(est)  # the variants it scales: a prefill/decode pool's pods are not theirs
        if not pods:
            return hold(est.current, "wva: no ready pod reports metrics")
        sat = saturation_analysis([p.kv_usage_max for p in pods], [p.waiting_max for p in pods])
        starting = {name: v.starting for name, v in est.variants.items()}
        target, why = wva_targets(sat, svc, est.current, starting, est.weights)
        return Decision(target, f"wva: {why} ({sat.non_saturated}/{len(pods)} pods non-saturated)",
                        change_reason(target, est.current))
