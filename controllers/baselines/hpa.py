"""Kubernetes Horizontal Pod Autoscaler (autoscaling/v2) on a per-pod vLLM metric.

Sources: kubernetes/website ``content/en/docs/tasks/run-application/horizontal-pod-autoscale.md``
(``docs/anchors.md#kubernetes-hpa``) for the rules and defaults; kubernetes/kubernetes
``pkg/controller/podautoscaler/replica_calculator.go`` (``calcPlainMetricReplicas``,
``GetExternalPerPodMetricReplicas``) and ``horizontal.go`` (``stabilizeRecommendationWithBehaviors``,
``calculateScaleUpLimitWithScalingRules``) for the order of the steps.

Each sync (``SYNC_PERIOD_S`` = 15 s, ``--horizontal-pod-autoscaler-sync-period``):

1. Proposal (``hpa_pod_metric_replicas``), Pods metric with an AverageValue target: usage ratio
   ``r = mean(metric over ready pods) / target``. Within ``TOLERANCE`` = 0.1 of 1 (``|r - 1| <= 0.1``,
   ``--horizontal-pod-autoscaler-tolerance``): keep the current count; else ``ceil(r x ready pods)``.
   On a scale-up with not-ready (starting) pods, those count as using 0: ``r' = sum / (target x
   (ready + not ready))``; keep the current count if ``r'`` is within tolerance or on the other side
   of 1, else ``ceil(r' x (ready + not ready))``, never below the current count. No ready pod
   reporting = no proposal (the HPA skips the sync).
2. Stabilisation (``HPABehavior``): the result is the current count brought into
   ``[min(recommendations in the scale-up window), max(recommendations in the scale-down window)]``,
   the current proposal included; default windows 0 s up, ``DOWNSCALE_STABILIZATION_S`` = 300 s down
   (``--horizontal-pod-autoscaler-downscale-stabilization``): scale-down follows the highest
   recommendation of the last 5 minutes. A new HPA records the current count as its first
   recommendation (``recordInitialRecommendation``), so it does not scale down in its first 5 minutes.
3. Rate limits, default ``behavior``: scale-up to at most ``max(ceil(2 x start), start + 4)`` where
   ``start`` is the count at the beginning of the 15 s period (Percent 100 and Pods 4 per 15 s,
   ``selectPolicy: Max``); scale-down Percent 100 per 15 s (no limit beyond ``minReplicas``).
4. Bounds ``[minReplicas, maxReplicas]``; ``minReplicas >= 1`` (scale to zero needs the alpha
   ``HPAScaleToZero`` gate); a target at 0 replicas is not scaled ("scaling is disabled").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autoscaler.config.control import DEFAULT_WINDOW_S
from controllers.base import Controller, Decision, change_reason, hold, setpoint_gauges
from controllers.baselines.common import count_bounds, place_count

if TYPE_CHECKING:
    from autoscaler.config import Service
    from autoscaler.state import ServiceEstimate

SYNC_PERIOD_S = 15.0
TOLERANCE = 0.1
DOWNSCALE_STABILIZATION_S = 300.0
UPSCALE_STABILIZATION_S = 0.0
SCALE_UP_PERCENT = 100.0
SCALE_UP_PODS = 4
SCALE_UP_PERIOD_S = 15.0
SCALE_DOWN_PERCENT = 100.0
SCALE_DOWN_PERIOD_S = 15.0
MIN_REPLICAS_FLOOR = 1

# Queue target: the GIE/WVA saturation queue depth (``docs/anchors.md#gie-endpoint-picker``); the KV-usage
# target defaults to one replica's KV usage at 70 % of its SLO rate (``controllers.baselines.calibrate``).
DEFAULT_QUEUE_TARGET = 5.0
POD_METRICS = {"kv_usage": "vllm:kv_cache_usage_perc", "queue": "vllm:num_requests_waiting"}


def _within(ratio: float, tolerance: float) -> bool:
    return abs(ratio - 1.0) <= tolerance


def hpa_pod_metric_replicas(values: Sequence[float], unready: int, target: float, current: int,
                            tolerance: float = TOLERANCE) -> int | None:
    """Step 1 of the module docstring: the HPA's proposal for a Pods metric, AverageValue ``target``.

    Args:
        values: the metric of each ready pod.
        unready: pods that exist but are not ready (starting).
        target: target average value per pod (> 0).
        current: the scale target's replicas now.

    Returns:
        the proposed replica count, or None when no ready pod reports (no proposal).
    """
    if not values:
        return None
    ratio = sum(values) / len(values) / target
    if unready == 0 or ratio <= 1.0:
        return current if _within(ratio, tolerance) else math.ceil(ratio * len(values))
    pods = len(values) + unready
    new_ratio = sum(values) / (target * pods)
    if _within(new_ratio, tolerance) or new_ratio < 1.0:
        return current
    return max(math.ceil(new_ratio * pods), current)


def hpa_external_replicas(total: float, target_per_pod: float, status_replicas: int,
                          tolerance: float = TOLERANCE) -> int:
    """The HPA's proposal for an External metric with an AverageValue target (KEDA's triggers).

    ``ceil(total / target_per_pod)`` unless ``total / (target_per_pod x status_replicas)`` is within
    ``tolerance`` of 1; ``status_replicas`` counts every pod, ready or not (no not-ready handling).
    """
    if status_replicas > 0 and _within(total / (target_per_pod * status_replicas), tolerance):
        return status_replicas
    return math.ceil(total / target_per_pod)


class HPABehavior:
    """Steps 2-4 of the module docstring, with the recommendation and scale-event history they need."""

    def __init__(self, down_window_s: float = DOWNSCALE_STABILIZATION_S,
                 up_window_s: float = UPSCALE_STABILIZATION_S) -> None:
        self.down_window_s = down_window_s
        self.up_window_s = up_window_s
        self.recommendations: list[tuple[float, int]] = []
        self.events: list[tuple[float, int]] = []

    def _changed_in(self, now: float, period_s: float, sign: int) -> int:
        return sum(abs(d) for t, d in self.events if t + period_s > now and d * sign > 0)

    def normalize(self, now: float, proposal: int, current: int, lo: int, hi: int) -> int:
        """Stabilise, rate-limit and bound ``proposal``; records it and the resulting scale event."""
        if not self.recommendations:
            self.recommendations.append((now, current))
        up_rec = down_rec = proposal
        for t, rec in self.recommendations:
            if t > now - self.up_window_s:
                up_rec = min(up_rec, rec)
            if t > now - self.down_window_s:
                down_rec = max(down_rec, rec)
        self.recommendations = [(t, r) for t, r in self.recommendations
                                if t > now - max(self.up_window_s, self.down_window_s)]
        self.recommendations.append((now, proposal))
        desired = min(max(current, up_rec), down_rec)
        if desired > current:
            start = (current - self._changed_in(now, SCALE_UP_PERIOD_S, +1)
                     + self._changed_in(now, SCALE_UP_PERIOD_S, -1))
            limit = max(math.ceil(start * (1 + SCALE_UP_PERCENT / 100)), start + SCALE_UP_PODS, current)
            desired = min(desired, limit, hi)
        elif desired < current:
            start = (current - self._changed_in(now, SCALE_DOWN_PERIOD_S, +1)
                     + self._changed_in(now, SCALE_DOWN_PERIOD_S, -1))
            limit = min(math.floor(start * (1 - SCALE_DOWN_PERCENT / 100)), current)
            desired = max(desired, limit, lo)
        else:
            desired = min(max(desired, lo), hi)
        self.events = [(t, d) for t, d in self.events if t > now - max(SCALE_UP_PERIOD_S, SCALE_DOWN_PERIOD_S)]
        if desired != current:
            self.events.append((now, desired - current))
        return desired


class HPAController(Controller):
    """One HPA whose scale target is the whole service (``controllers.baselines.common``).

    Args:
        target: AverageValue target per pod (> 0).
        metric: ``kv_usage`` (``vllm:kv_cache_usage_perc`` per pod) or ``queue``
            (``vllm:num_requests_waiting`` per pod).
        tolerance: the global tolerance.
        downscale_window_s: scale-down stabilisation window, seconds.
    """


    def __init__(self, target: float, metric: str = "kv_usage", tolerance: float = TOLERANCE,
                 downscale_window_s: float = DOWNSCALE_STABILIZATION_S, *, window_s: float = DEFAULT_WINDOW_S,
                 name: str = "hpa") -> None:
        super().__init__(name, SYNC_PERIOD_S, window_s, own_guard=True)
        if metric not in POD_METRICS:
            raise ValueError(f"hpa metric must be one of {', '.join(POD_METRICS)}, got '{metric}'")
        if target <= 0:
            raise ValueError(f"hpa target must be > 0, got {target}")
        self.metric = metric
        self.target = target
        self.tolerance = tolerance
        self.behaviors: dict[str, HPABehavior] = {}
        self.downscale_window_s = downscale_window_s

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant (module docstring)."""
        current = sum(est.current.values())
        lo, hi = count_bounds(svc, MIN_REPLICAS_FLOOR)
        if current == 0:
            return hold(est.current, "hpa: scaling disabled, target has 0 replicas")
        if current > hi or current < lo:
            total = min(max(current, lo), hi)
            desired = place_count(total, svc, est.current, est.weights)
            return Decision(desired, f"hpa: to bounds {total}", change_reason(desired, est.current))
        values = [p.kv_usage if self.metric == "kv_usage" else p.waiting for p in est.pods]
        proposal = hpa_pod_metric_replicas(values, est.starting, self.target, current, self.tolerance)
        if proposal is None:
            return hold(est.current, f"hpa: no ready pod reports {POD_METRICS[self.metric]}")
        beh = self.behaviors.setdefault(svc.name, HPABehavior(self.downscale_window_s))
        total = beh.normalize(est.time_s, proposal, current, lo, hi)
        measured = sum(values) / len(values)
        desired = place_count(total, svc, est.current, est.weights)
        return Decision(
            desired,
            f"hpa: {self.metric} {measured:.3g} vs {self.target:.3g}, proposal {proposal}, desired {total}",
            change_reason(desired, est.current),
            terms={"setpoint": self.target, "measurement": measured},
            gauges=setpoint_gauges(self.metric, self.target, measured),
        )
