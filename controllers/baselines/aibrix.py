"""AIBrix PodAutoscaler, KPA and APA strategies, with AIBrix's recommendation stabilisation.

Sources (``docs/anchors.md#aibrix``, vllm-project/aibrix at e3e10f9): defaults in
``pkg/controller/podautoscaler/context/context.go`` (``MaxScaleUpRate`` 2, ``MaxScaleDownRate`` 2,
``Up/DownFluctuationTolerance`` 0.1, ``ScaleUpCooldownWindow`` 0 s, ``ScaleDownCooldownWindow``
300 s, ``PanicThreshold`` 2.0, ``ScaleToZero`` false); windows in
``pkg/controller/podautoscaler/metrics/client.go`` (``observeWindowSeconds`` 180,
``panicWindowSeconds`` 60); controller resync 10 s (``podautoscaler_controller.go``
``DefaultResyncInterval``); algorithms in ``algorithm/kpa.go`` and ``algorithm/apa.go``;
stabilisation in ``podautoscaler_controller.go`` ``stabilizeRecommendation``.

Every resync the controller scrapes the metric of each ready pod and records the sum (KPA) or the
mean (APA) into its windows. Upstream at e3e10f9 records the mean for both
(``metrics/client.go`` ``UpdateMetrics``: ``avg := sum / len(metricValues)``), so its KPA asks for
``ceil(mean / target)`` replicas whatever N; the sum is kept here (Knative's reading, a total
against a per-pod target), a known difference (``docs/controllers.md``). With N the target's
current replicas:

- KPA (``aibrix_kpa``): stable = window average over 180 s, panic = over 60 s. Panic when
  ``stable <= 0`` or ``panic / stable > 2.0`` (decided afresh each resync). Per window, desired =
  ``ceil(value / target)``, or N when the per-pod value ``value / N`` is within +-10 % of the target;
  each clamped to ``[floor(N / 2), max(1, ceil(2 N))]``. Stable mode takes the stable count; panic
  takes the larger of the two. ``kpa.go`` holds a panic at its highest count (``maxPanicPods``), but
  the controller builds a fresh ``NewBaseScalingContext`` every reconcile
  (``podautoscaler_controller.go`` ``computeScaleDecision``), whose ``GetMaxPanicPods`` returns 0
  and ``SetMaxPanicPods`` does nothing (``context/context.go``): as run, nothing is held, and the
  controller here does the same (``aibrix_kpa`` keeps the hold for a state passed in).
- APA (``aibrix_apa``): ``u`` = per-pod mean over the 180 s window. If ``u / target > 1.1``:
  ``ceil(N u / target)`` capped at ``ceil(2 N)``; if ``< 0.9``: the same formula floored at
  ``floor(N / 2)``; otherwise N.
- Stabilisation (``aibrix_stabilize``): the recommendation is recorded with its time; scaling up
  takes the **max** of the recommendations in the scale-up window (0 s: only the current one),
  scaling down the **min** of those in the 300 s scale-down window. This is the opposite of the
  Kubernetes HPA (highest recommendation over the window on scale-down), so the 300 s window makes
  scale-down faster, not slower; it is reproduced as written (``docs/anchors.md#aibrix-stabilisation``).
- Bounds ``[max(minReplicas, 1), maxReplicas]`` (``ScaleToZero`` false).

Metric: ``vllm:kv_cache_usage_perc`` (``gpu_cache_usage_perc``, AIBrix's typical metric,
``docs/source/designs/aibrix-autoscaler.rst``). Its documented sample target 0.5 lies in the saturated
region on this fleet; the default target is one replica's KV usage at 70 % of its SLO rate
(``controllers.baselines.calibrate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from autoscaler.config.control import DEFAULT_WINDOW_S
from controllers.base import Controller, Decision, aggregated_pods, change_reason, hold, setpoint_gauges
from controllers.baselines.common import SampleWindow, count_bounds, place_count

if TYPE_CHECKING:
    from autoscaler.config import Service
    from autoscaler.state import ServiceEstimate

RESYNC_S = 10.0
OBSERVE_WINDOW_S = 180.0
PANIC_WINDOW_S = 60.0
MAX_SCALE_UP_RATE = 2.0
MAX_SCALE_DOWN_RATE = 2.0
FLUCTUATION_TOLERANCE = 0.1
SCALE_UP_COOLDOWN_S = 0.0
SCALE_DOWN_COOLDOWN_S = 300.0
PANIC_THRESHOLD = 2.0


@dataclass(frozen=True)
class AIBrixKPAState:
    """Whether the last resync was in panic, and the highest count asked for in this panic."""

    in_panic: bool = False
    max_panic_pods: int = 0


def _window_count(value: float, n: int, target: float, tolerance: float) -> int:
    if n > 0 and abs(value / n / target - 1.0) <= tolerance:
        return n
    return math.ceil(value / target)


def aibrix_kpa_target_replicas(stable: float, panic: float, current: int, target: float, in_panic: bool,
                               max_panic_pods: int = 0, tolerance: float = FLUCTUATION_TOLERANCE,
                               up_rate: float = MAX_SCALE_UP_RATE, down_rate: float = MAX_SCALE_DOWN_RATE,
                               ) -> tuple[int, int]:
    """KPA count for a given panic state (``algorithm/kpa.go`` ``computeTargetReplicas``).

    Returns the count and the new highest count of the panic (``maxPanicPods``). ``ActivationScale``
    is 1 in AIBrix's base context, so it has no effect and is not modelled.
    """
    lo = math.floor(max(0, current) / down_rate)
    hi = max(1, math.ceil(up_rate * max(0, current)))
    ds = min(max(_window_count(stable, current, target, tolerance), lo), hi)
    dp = min(max(_window_count(panic, current, target, tolerance), lo), hi)
    if not in_panic:
        return ds, max_panic_pods
    desired = max(ds, dp)
    if desired > max_panic_pods:
        max_panic_pods = desired
    return max_panic_pods, max_panic_pods


def aibrix_kpa(state: AIBrixKPAState, stable: float, panic: float, current: int, target: float,
               tolerance: float = FLUCTUATION_TOLERANCE, panic_threshold: float = PANIC_THRESHOLD,
               up_rate: float = MAX_SCALE_UP_RATE, down_rate: float = MAX_SCALE_DOWN_RATE,
               ) -> tuple[int, AIBrixKPAState]:
    """AIBrix KPA step (module docstring); ``stable``/``panic`` are window averages of the pods' sum.

    Panic is decided afresh (``kpa.go`` ``shouldEnterPanicMode``), then
    :func:`aibrix_kpa_target_replicas` counts.
    """
    in_panic = stable <= 0 or panic / stable > panic_threshold
    held = state.max_panic_pods if state.in_panic else 0
    desired, max_panic = aibrix_kpa_target_replicas(stable, panic, current, target, in_panic, held, tolerance,
                                                    up_rate, down_rate)
    if not in_panic:
        return desired, AIBrixKPAState()
    return desired, replace(state, in_panic=True, max_panic_pods=max_panic)


def aibrix_apa(per_pod: float, current: int, target: float, up_tolerance: float = FLUCTUATION_TOLERANCE,
               down_tolerance: float = FLUCTUATION_TOLERANCE, up_rate: float = MAX_SCALE_UP_RATE,
               down_rate: float = MAX_SCALE_DOWN_RATE) -> int:
    """AIBrix APA step (module docstring) for per-pod value ``per_pod`` and ``current`` replicas.

    A target <= 0 keeps ``current``, as ``algorithm/apa.go`` ``computeTargetReplicas`` does.
    """
    if target <= 0:
        return current
    ratio = per_pod / target
    if ratio > 1 + up_tolerance:
        return min(math.ceil(current * ratio), math.ceil(up_rate * current))
    if ratio < 1 - down_tolerance:
        return max(math.ceil(current * ratio), math.floor(current / down_rate))
    return current


def aibrix_stabilize(history: list[tuple[float, int]], now: float, recommendation: int, current: int,
                     up_window_s: float = SCALE_UP_COOLDOWN_S,
                     down_window_s: float = SCALE_DOWN_COOLDOWN_S) -> int:
    """Record ``recommendation`` in ``history`` (pruned in place) and return the stabilised count.

    As ``stabilizeRecommendation``: a window holds the recommendations strictly newer than
    ``now - window`` (``timestamp.After(cutoff)``), so a 0-s window holds none and the current
    recommendation is taken; the history keeps those strictly newer than the longer window.
    """
    history.append((now, recommendation))
    horizon = max(up_window_s, down_window_s)
    history[:] = [(t, r) for t, r in history if t > now - horizon]
    if recommendation > current:
        return max((r for t, r in history if t > now - up_window_s), default=recommendation)
    if recommendation < current:
        return min((r for t, r in history if t > now - down_window_s), default=recommendation)
    return recommendation


class AIBrixController(Controller):
    """An AIBrix PodAutoscaler whose target is the whole service (``controllers.baselines.common``).

    Args:
        target: target value of the per-pod metric (``vllm:kv_cache_usage_perc``, > 0).
        strategy: ``kpa`` or ``apa``.
    """


    def __init__(self, target: float, strategy: str = "kpa", *, window_s: float = DEFAULT_WINDOW_S,
                 name: str = "aibrix") -> None:
        super().__init__(name, RESYNC_S, window_s, own_guard=True)
        if strategy not in ("kpa", "apa"):
            raise ValueError(f"aibrix strategy must be kpa or apa, got '{strategy}'")
        if target <= 0:
            raise ValueError(f"aibrix target must be > 0, got {target}")
        self.strategy = strategy
        self.target = target
        self.windows: dict[str, SampleWindow] = {}
        self.states: dict[str, AIBrixKPAState] = {}
        self.history: dict[str, list[tuple[float, int]]] = {}

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant (module docstring)."""
        pods = aggregated_pods(est)  # the variants it scales: a prefill/decode pool's pods are not theirs
        if not pods:
            return hold(est.current, "aibrix: no ready pod to scrape")
        now = est.time_s
        values = [p.kv_usage for p in pods]
        window = self.windows.setdefault(svc.name, SampleWindow(OBSERVE_WINDOW_S))
        window.add(now, sum(values) if self.strategy == "kpa" else sum(values) / len(values))
        stable = window.mean(now, OBSERVE_WINDOW_S)
        panic = window.mean(now, PANIC_WINDOW_S)
        assert stable is not None and panic is not None  # the sample just added is in both windows
        current = sum(est.current.values())
        if self.strategy == "kpa":
            # a fresh state each resync, as upstream's fresh scaling context (module docstring)
            rec, self.states[svc.name] = aibrix_kpa(AIBrixKPAState(), stable, panic, current, self.target)
            mode = "panic" if self.states[svc.name].in_panic else "stable"
        else:
            rec, mode = aibrix_apa(stable, current, self.target), "apa"
        stabilized = aibrix_stabilize(self.history.setdefault(svc.name, []), now, rec, current)
        lo, hi = count_bounds(svc, 1)
        total = min(max(stabilized, lo), hi)
        desired = place_count(total, svc, est.current, est.weights)
        return Decision(desired, f"aibrix {mode}: kv {stable:.3g}/{panic:.3g}, recommendation {rec}, desired {total}",
                        change_reason(desired, est.current), terms={"setpoint": self.target, "measurement": stable},
                        gauges=setpoint_gauges("kv_usage", self.target, stable))
