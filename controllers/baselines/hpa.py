"""Kubernetes Horizontal Pod Autoscaler (autoscaling/v2) on a per-pod vLLM metric.

Sources: kubernetes/website ``content/en/docs/tasks/run-application/horizontal-pod-autoscale.md``
(``docs/anchors.md#kubernetes-hpa``) for the rules and defaults; kubernetes/kubernetes
``pkg/controller/podautoscaler/replica_calculator.go`` (``calcPlainMetricReplicas``, ``groupPods``,
``GetExternalPerPodMetricReplicas``, ``Tolerances``) and ``horizontal.go`` (``normalizeDesiredReplicas``,
``stabilizeRecommendation``, ``convertDesiredReplicasWithRules``, ``stabilizeRecommendationWithBehaviors``,
``convertDesiredReplicasWithBehaviorRate``, ``calculateScaleUpLimitWithScalingRules``,
``calculateScaleDownLimitWithBehaviors``), as of Kubernetes 1.34 (per-direction tolerances,
KEP-4951: alpha in 1.33, beta in 1.34). The cases checked against upstream's own tests are in
``tests/unit/test_anchor_cases.py``.

Each sync (``SYNC_PERIOD_S`` = 15 s, ``--horizontal-pod-autoscaler-sync-period``):

1. Proposal (``hpa_pod_metric_replicas``), Pods metric with an AverageValue target, ``current`` the
   target's ``spec.replicas``. Pods are grouped as ``groupPods`` does for a non-CPU metric: *unready*
   = Pending (here: every starting replica), *missing* = running but no metric sample (here: a ready
   replica that no scrape has reported yet, or a silent one), *ready* = reporting (readiness does
   not matter for a non-CPU metric). Usage ratio ``r = mean(ready pods' metric) / target``. Without
   missing pods, and without unready ones unless ``r > 1``: ``current`` if ``r`` is within the
   tolerance (``1 - down <= r <= 1 + up``, both ``TOLERANCE`` = 0.1,
   ``--horizontal-pod-autoscaler-tolerance``), else ``ceil(r x ready)``. Otherwise the missing pods
   count as the target on a scale-down (``r < 1``) and as 0 on a scale-up (``r > 1``), the unready
   ones as 0 on a scale-up; with that ratio ``r'`` over the ``n`` pods counted: ``current`` if ``r'``
   is within tolerance or on the other side of 1 than ``r``, or if ``ceil(r' x n)`` would move the
   other way; else ``ceil(r' x n)``. No ready pod reporting = no proposal (the HPA skips the sync).
2. Normalisation. Without ``behavior`` (``behavior="none"``, the default: an HPA manifest without the
   field, and every HPA KEDA generates unless ``advanced.horizontalPodAutoscalerConfig.behavior`` is
   set) the legacy path ``normalizeDesiredReplicas``: the proposal is raised to the highest
   recommendation of ``[now - 300 s, now]`` (``stabilizeRecommendation``; it may lift a proposal above
   the current count), then bounded by ``minReplicas`` and ``min(maxReplicas, max(2 x current, 4))``
   (``scaleUpLimitFactor`` 2, ``scaleUpLimitMinimum`` 4). With ``behavior`` (``behavior="default"``,
   or ``scale_up``/``scale_down`` rules): the current count is brought into ``[min(recommendations in
   the scale-up window), max(recommendations in the scale-down window)]`` (windows ``(now - w, now]``,
   the proposal included; default 0 s up, ``DOWNSCALE_STABILIZATION_S`` = 300 s down,
   ``--horizontal-pod-autoscaler-downscale-stabilization``), then rate-limited by the direction's
   policies (``Pods`` n or ``Percent`` p per ``periodSeconds``, counted from the replicas at the
   period's start; ``selectPolicy`` ``Max`` the largest change, ``Min`` the smallest, ``Disabled``
   none; default up: Percent 100 and Pods 4 per 15 s, ``Max``; down: Percent 100 per 15 s) and
   bounded. Per-direction ``tolerance`` (KEP-4951) lives in ``behavior`` and replaces the global one
   for its direction. Either way a new HPA records the current count as its first recommendation
   (``recordInitialRecommendation``), so it does not scale down in its first 5 minutes.
3. Bounds ``[minReplicas, maxReplicas]``; ``minReplicas >= 1`` (scale to zero needs the alpha
   ``HPAScaleToZero`` gate); a target at 0 replicas is not scaled ("scaling is disabled"); a target
   outside the bounds is set to the nearest bound without reading metrics.

Not modelled: several metrics (the largest proposal wins), CPU/memory Resource metrics and their
readiness and initialisation-period rules (``--horizontal-pod-autoscaler-cpu-initialization-period``,
``initial-readiness-delay``), a starting pod that is Running but not yet reporting (the HPA counts it
as *missing*, so as the target on a scale-down; here every starting pod is Pending), pods being
deleted (ignored by the HPA; here a draining replica is not a pod of the target), failed scale
writes (the HPA then records no scale event).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autoscaler.config.control import DEFAULT_WINDOW_S
from controllers.base import Controller, Decision, aggregated_pods, change_reason, hold, setpoint_gauges
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
SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4
MIN_REPLICAS_FLOOR = 1
BEHAVIORS = ("none", "default")
SELECT_POLICIES = ("Max", "Min", "Disabled")
POLICY_TYPES = ("Pods", "Percent")

# Queue target: the GIE/WVA saturation queue depth (``docs/anchors.md#gie-endpoint-picker``); the KV-usage
# target defaults to one replica's KV usage at 70 % of its SLO rate (``controllers.baselines.calibrate``).
DEFAULT_QUEUE_TARGET = 5.0
POD_METRICS = {"kv_usage": "vllm:kv_cache_usage_perc", "queue": "vllm:num_requests_waiting"}


@dataclass(frozen=True)
class ScalingPolicy:
    """One ``HPAScalingPolicy``: ``kind`` ``Pods`` (``value`` pods) or ``Percent`` (``value`` %) per ``period_s``."""

    kind: str
    value: float
    period_s: float

    def __post_init__(self) -> None:
        if self.kind not in POLICY_TYPES:
            raise ValueError(f"hpa policy type must be one of {', '.join(POLICY_TYPES)}, got '{self.kind}'")
        if self.value <= 0 or self.period_s <= 0:
            raise ValueError(f"hpa policy value and period must be > 0, got {self.value}, {self.period_s}")


@dataclass(frozen=True)
class ScalingRules:
    """One direction's ``HPAScalingRules``.

    Attributes:
        policies: the policies (at least one unless ``select_policy`` is ``Disabled``).
        select_policy: ``Max`` (the largest change allowed), ``Min`` (the smallest) or ``Disabled``.
        stabilization_window_s: None = the default (0 s up; the controller's 300 s down).
        tolerance: KEP-4951's per-direction tolerance; None = the global one.
    """

    policies: tuple[ScalingPolicy, ...]
    select_policy: str = "Max"
    stabilization_window_s: float | None = None
    tolerance: float | None = None

    def __post_init__(self) -> None:
        if self.select_policy not in SELECT_POLICIES:
            raise ValueError(f"hpa selectPolicy must be one of {', '.join(SELECT_POLICIES)}, "
                             f"got '{self.select_policy}'")


DEFAULT_SCALE_UP = ScalingRules((ScalingPolicy("Pods", SCALE_UP_PODS, SCALE_UP_PERIOD_S),
                                 ScalingPolicy("Percent", SCALE_UP_PERCENT, SCALE_UP_PERIOD_S)),
                                stabilization_window_s=UPSCALE_STABILIZATION_S)
"""``GenerateHPAScaleUpRules``' defaults: 4 pods or 100 % per 15 s, ``Max``, no stabilisation."""
DEFAULT_SCALE_DOWN = ScalingRules((ScalingPolicy("Percent", SCALE_DOWN_PERCENT, SCALE_DOWN_PERIOD_S),))
"""``GenerateHPAScaleDownRules``' defaults: 100 % per 15 s, ``Max``, the controller's 300 s window."""


def _within(ratio: float, down: float, up: float) -> bool:
    """``Tolerances.isWithin``: ``1 - down <= ratio <= 1 + up``."""
    return 1.0 - down <= ratio <= 1.0 + up


def hpa_pod_metric_replicas(values: Sequence[float], unready: int, target: float, current: int,
                            tolerance: float = TOLERANCE, missing: int = 0, *, up_tolerance: float | None = None,
                            down_tolerance: float | None = None) -> int | None:
    """Step 1 of the module docstring (``calcPlainMetricReplicas``): the proposal for a Pods metric.

    Args:
        values: the metric of each pod that reports it.
        unready: Pending pods (starting replicas).
        target: target average value per pod (> 0).
        current: the scale target's replicas now (``spec.replicas``).
        tolerance: the global tolerance, both directions.
        missing: running pods without a metric sample.
        up_tolerance, down_tolerance: per-direction tolerances (KEP-4951); None = ``tolerance``.

    Returns:
        the proposed replica count, or None when no pod reports (no proposal).
    """
    if not values:
        return None
    up = tolerance if up_tolerance is None else up_tolerance
    down = tolerance if down_tolerance is None else down_tolerance
    ratio = sum(values) / len(values) / target
    rebalance_unready = unready > 0 and ratio > 1.0
    if not rebalance_unready and missing == 0:
        return current if _within(ratio, down, up) else math.ceil(ratio * len(values))
    total, n = sum(values), len(values)
    if missing > 0 and ratio != 1.0:
        total += missing * (target if ratio < 1.0 else 0.0)
        n += missing
    if rebalance_unready:
        n += unready
    new_ratio = total / n / target
    if _within(new_ratio, down, up) or (ratio < 1.0 < new_ratio) or (new_ratio < 1.0 < ratio):
        return current
    proposal = math.ceil(new_ratio * n)
    if (new_ratio < 1.0 and proposal > current) or (new_ratio > 1.0 and proposal < current):
        return current
    return proposal


def hpa_external_replicas(total: float, target_per_pod: float, status_replicas: int,
                          tolerance: float = TOLERANCE, *, up_tolerance: float | None = None,
                          down_tolerance: float | None = None) -> int:
    """The HPA's proposal for an External metric with an AverageValue target (``GetExternalPerPodMetricReplicas``).

    ``ceil(total / target_per_pod)`` unless ``total / (target_per_pod x status_replicas)`` is within
    the tolerance; ``status_replicas`` counts every pod, ready or not (no not-ready handling).
    """
    up = tolerance if up_tolerance is None else up_tolerance
    down = tolerance if down_tolerance is None else down_tolerance
    if status_replicas > 0 and _within(total / (target_per_pod * status_replicas), down, up):
        return status_replicas
    return math.ceil(total / target_per_pod)


class HPABehavior:
    """Step 2 of the module docstring, with the recommendation and scale-event history it needs.

    Args:
        down_window_s: the controller's downscale stabilisation
            (``--horizontal-pod-autoscaler-downscale-stabilization``), used when no scale-down rule sets its own.
        up_window_s: the scale-up window when ``scale_up`` does not set one.
        legacy: True for an HPA without ``behavior`` (``normalizeDesiredReplicas``).
        scale_up, scale_down: the ``behavior`` rules (defaults: ``DEFAULT_SCALE_UP``, ``DEFAULT_SCALE_DOWN``).
    """

    def __init__(self, down_window_s: float = DOWNSCALE_STABILIZATION_S,
                 up_window_s: float = UPSCALE_STABILIZATION_S, *, legacy: bool = False,
                 scale_up: ScalingRules | None = None, scale_down: ScalingRules | None = None) -> None:
        self.legacy = legacy
        self.scale_up = scale_up or DEFAULT_SCALE_UP
        self.scale_down = scale_down or DEFAULT_SCALE_DOWN
        self.up_window_s = (up_window_s if scale_up is None or scale_up.stabilization_window_s is None
                            else scale_up.stabilization_window_s)
        self.down_window_s = (down_window_s if self.scale_down.stabilization_window_s is None
                              else self.scale_down.stabilization_window_s)
        self.recommendations: list[tuple[float, int]] = []
        self.events: list[tuple[float, int]] = []

    def _changed_in(self, now: float, period_s: float, sign: int) -> int:
        return sum(abs(d) for t, d in self.events if t > now - period_s and d * sign > 0)

    def _limit(self, now: float, current: int, rules: ScalingRules, up: bool) -> int:
        """``calculateScaleUpLimitWithScalingRules`` / ``calculateScaleDownLimitWithBehaviors``."""
        if rules.select_policy == "Disabled" or not rules.policies:
            return current
        proposals = []
        for p in rules.policies:
            start = current - self._changed_in(now, p.period_s, +1) + self._changed_in(now, p.period_s, -1)
            if p.kind == "Pods":
                proposals.append(int(start + p.value) if up else int(start - p.value))
            elif up:  # rounded up, so a small percentage still adds a pod
                proposals.append(math.ceil(start * (1 + p.value / 100)))
            else:  # int32(float64): truncated
                proposals.append(math.trunc(start * (1 - p.value / 100)))
        largest_change = (rules.select_policy == "Max") == up
        return max(proposals) if largest_change else min(proposals)

    def _record(self, now: float, proposal: int, horizon_s: float) -> None:
        self.recommendations = [(t, r) for t, r in self.recommendations if t >= now - horizon_s]
        self.recommendations.append((now, proposal))

    def normalize(self, now: float, proposal: int, current: int, lo: int, hi: int) -> int:
        """Stabilise, rate-limit and bound ``proposal``; records it and the resulting scale event."""
        if not self.recommendations:  # recordInitialRecommendation
            self.recommendations.append((now, current))
        if self.legacy:
            stabilized = max([proposal, *(r for t, r in self.recommendations if t >= now - self.down_window_s)])
            self._record(now, proposal, self.down_window_s)
            allowed = min(hi, max(math.floor(SCALE_UP_LIMIT_FACTOR * current), SCALE_UP_LIMIT_MINIMUM))
            return lo if stabilized < lo else min(stabilized, allowed)
        up_rec = min([proposal, *(r for t, r in self.recommendations if t > now - self.up_window_s)])
        down_rec = max([proposal, *(r for t, r in self.recommendations if t > now - self.down_window_s)])
        self._record(now, proposal, max(self.up_window_s, self.down_window_s))
        desired = min(max(current, up_rec), down_rec)
        if desired > current:
            desired = min(desired, max(self._limit(now, current, self.scale_up, True), current), hi)
        elif desired < current:
            desired = max(desired, min(self._limit(now, current, self.scale_down, False), current), lo)
        longest = max([p.period_s for p in (*self.scale_up.policies, *self.scale_down.policies)], default=0.0)
        self.events = [(t, d) for t, d in self.events if t > now - longest]
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
        behavior: ``none`` (no ``behavior`` field: the legacy path, the default) or ``default`` (the
            field set, its default rules).
        upscale_window_s: ``behavior.scaleUp.stabilizationWindowSeconds`` (needs ``behavior=default``).
        up_tolerance, down_tolerance: ``behavior.scaleUp/scaleDown.tolerance`` (KEP-4951; need
            ``behavior=default``); None = ``tolerance``.
        scale_up, scale_down: full ``behavior`` rules (Python only; imply ``behavior=default``);
            their windows and tolerances override the three settings above.
    """


    def __init__(self, target: float, metric: str = "kv_usage", tolerance: float = TOLERANCE,
                 downscale_window_s: float = DOWNSCALE_STABILIZATION_S, behavior: str = "none",
                 upscale_window_s: float | None = None, up_tolerance: float | None = None,
                 down_tolerance: float | None = None, *, scale_up: ScalingRules | None = None,
                 scale_down: ScalingRules | None = None, window_s: float = DEFAULT_WINDOW_S,
                 name: str = "hpa") -> None:
        super().__init__(name, SYNC_PERIOD_S, window_s, own_guard=True)
        if metric not in POD_METRICS:
            raise ValueError(f"hpa metric must be one of {', '.join(POD_METRICS)}, got '{metric}'")
        if target <= 0:
            raise ValueError(f"hpa target must be > 0, got {target}")
        if behavior not in BEHAVIORS:
            raise ValueError(f"hpa behavior must be one of {', '.join(BEHAVIORS)}, got '{behavior}'")
        legacy = behavior == "none" and scale_up is None and scale_down is None
        if legacy and (upscale_window_s is not None or up_tolerance is not None or down_tolerance is not None):
            raise ValueError("hpa upscale_window_s, up_tolerance and down_tolerance are behavior fields: "
                             "set behavior=default")
        self.metric = metric
        self.target = target
        self.tolerance = tolerance
        self.legacy = legacy
        up = scale_up or DEFAULT_SCALE_UP
        down = scale_down or DEFAULT_SCALE_DOWN
        self.up_tolerance = up.tolerance if up.tolerance is not None else up_tolerance
        self.down_tolerance = down.tolerance if down.tolerance is not None else down_tolerance
        self.upscale_window_s = UPSCALE_STABILIZATION_S if upscale_window_s is None else upscale_window_s
        self.scale_up, self.scale_down = scale_up, scale_down
        self.behaviors: dict[str, HPABehavior] = {}
        self.downscale_window_s = downscale_window_s

    def _behavior(self) -> HPABehavior:
        return HPABehavior(self.downscale_window_s, self.upscale_window_s, legacy=self.legacy,
                           scale_up=self.scale_up, scale_down=self.scale_down)

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
        values = [p.kv_usage if self.metric == "kv_usage" else p.waiting for p in aggregated_pods(est)]
        missing = max(sum(v.ready for v in est.variants.values()) - len(values), 0)
        proposal = hpa_pod_metric_replicas(values, est.starting, self.target, current, self.tolerance, missing,
                                           up_tolerance=self.up_tolerance, down_tolerance=self.down_tolerance)
        if proposal is None:
            return hold(est.current, f"hpa: no ready pod reports {POD_METRICS[self.metric]}")
        beh = self.behaviors.setdefault(svc.name, self._behavior())
        total = beh.normalize(est.time_s, proposal, current, lo, hi)
        measured = sum(values) / len(values)
        desired = place_count(total, svc, est.current, est.weights)
        gaps = f", {missing} without metrics" if missing else ""
        return Decision(
            desired,
            f"hpa: {self.metric} {measured:.3g} vs {self.target:.3g}{gaps}, proposal {proposal}, desired {total}",
            change_reason(desired, est.current),
            terms={"setpoint": self.target, "measurement": measured},
            gauges=setpoint_gauges(self.metric, self.target, measured),
        )
