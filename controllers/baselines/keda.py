"""KEDA ScaledObject with a Prometheus trigger: activation by the KEDA operator, scaling by its HPA.

Sources (``docs/anchors.md#keda``): keda.sh ``docs/*/scalers/prometheus``; kedacore/keda-docs
``content/docs/2.15/reference/scaledobject-spec.md`` and ``.../concepts/scaling-deployments.md``;
kedacore/keda v2.20.2 ``pkg/fallback/fallback.go`` (``GetMetricsWithFallback``, ``doFallback``),
``pkg/scaling/executor/scale_scaledobjects.go`` (``RequestScale``), ``controllers/keda/hpa.go``
(``newHPAForScaledObject``) and ``apis/keda/v1alpha1/scaledobject_types.go`` (``CheckFallbackValid``).
The cases checked against KEDA's own tests are in ``tests/unit/test_anchor_cases.py``.

- Query with ``threshold`` (AverageValue per pod) and ``activationThreshold`` (default 0).
  ``concurrency`` (default): ``sum(vllm:num_requests_running + vllm:num_requests_waiting)``, the
  loop's ``running + queue_length``, threshold one replica's concurrency at 70 % of its SLO rate
  (``controllers.baselines.calibrate``). ``queue``: ``sum(vllm:num_requests_waiting)``, the loop's
  ``queue_length``, threshold 10, the queue-depth ScaledObject in ai-dynamo/dynamo
  ``docs/.../kubernetes/autoscaling.md`` ("Scale up when queue > 10 requests"). In the simulator
  both also count the requests the gateway holds while no pod is ready.
- The generated HPA syncs every 15 s (``controllers.baselines.hpa``) on an External metric:
  ``ceil(value / threshold)`` unless ``value / (threshold x pods)`` is within the 0.1 tolerance
  (``hpa_external_replicas``; every pod counts, ready or not). KEDA sets the HPA's ``behavior`` only
  from ``advanced.horizontalPodAutoscalerConfig.behavior``; without it the HPA takes its legacy path
  (``HPABehavior(legacy=True)``: the highest recommendation of the last 300 s, scale-up to at most
  ``max(2 x current, 4)`` per sync). The HPA's minimum is ``max(minReplicaCount, 1)``.
- Activation (0 <-> 1), checked every ``pollingInterval`` = 30 s and only when
  ``minReplicaCount`` = 0: active iff value > ``activationThreshold``; a target at 0 replicas goes to
  1 when active; an inactive target goes to 0 once more than ``cooldownPeriod`` = 300 s have passed
  since it was last active, or at once if it never was (``initialCooldownPeriod`` 0)
  (``keda_activation``). A failed query is neither active nor idle, except with a fallback of 0
  replicas, where the operator treats it as idle (``RequestScale``).
- ``fallback {failureThreshold, replicas, behavior}`` (off by default): once a trigger has failed
  more than ``failureThreshold`` (>= 0) consecutive times, the scaler reports ``threshold x n`` so the
  HPA asks for ``n`` replicas: ``n`` = ``replicas`` (``static``, the default), the current count
  (``currentReplicas``), the larger (``currentReplicasIfHigher``) or the smaller
  (``currentReplicasIfLower``) of the two. Fallback is valid only for an AverageValue trigger that is
  not cpu/memory (our Prometheus trigger is one). A failed query below that count makes the HPA skip
  the sync.
- ``ignoreNullValues`` (default true) reads an empty result as 0; in the loop an empty result is
  already 0 and only a failed query is unknown.

Not modelled: ``advanced.horizontalPodAutoscalerConfig.behavior`` (policies, windows, tolerances of
the generated HPA), ``scalingModifiers`` and the ``scalingModifiers`` fallback behaviour, a ``Value``
metric type, ``idleReplicaCount``, ``initialCooldownPeriod`` other than 0, pause annotations,
several triggers, the metrics-server cache (``useCachedMetrics``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from autoscaler.config.control import DEFAULT_WINDOW_S
from controllers.base import Controller, Decision, change_reason, hold, setpoint_gauges
from controllers.baselines.common import count_bounds, place_count
from controllers.baselines.hpa import SYNC_PERIOD_S, TOLERANCE, HPABehavior, hpa_external_replicas

if TYPE_CHECKING:
    from autoscaler.config import Service
    from autoscaler.state import ServiceEstimate

POLLING_INTERVAL_S = 30.0
COOLDOWN_PERIOD_S = 300.0
ACTIVATION_THRESHOLD = 0.0
DEFAULT_QUEUE_THRESHOLD = 10.0
METRICS = {"concurrency": ("running", "queue_length"), "queue": ("queue_length",)}
FALLBACK_BEHAVIORS = ("static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower")


@dataclass
class KedaState:
    """Per-service memory: last poll, last time the trigger was active, consecutive failures."""

    last_poll_s: float | None = None
    last_active_s: float | None = None
    failures: int = 0


def keda_activation(value: float | None, current: int, state: KedaState, now: float,
                    activation_threshold: float = ACTIVATION_THRESHOLD,
                    cooldown_s: float = COOLDOWN_PERIOD_S, *, error_is_idle: bool = False) -> int | None:
    """The operator's activation phase for ``minReplicaCount`` = 0, at a poll.

    Returns 1 to wake a target at 0, 0 to put an idle target to sleep, None when the HPA decides
    (and on a failed query, which is neither active nor idle unless ``error_is_idle``: a fallback of
    0 replicas). Updates ``state.last_active_s``.
    """
    if value is None and not error_is_idle:
        return None
    if value is not None and value > activation_threshold:
        state.last_active_s = now
        return 1 if current == 0 else None
    if current == 0:
        return 0
    if state.last_active_s is None or now - state.last_active_s > cooldown_s:
        return 0
    return None


def keda_fallback_replicas(behavior: str, replicas: int, current: int) -> int:
    """``doFallback``'s replica count: ``replicas`` (``static``), ``current`` (``currentReplicas``), or the
    larger (``currentReplicasIfHigher``) or smaller (``currentReplicasIfLower``) of the two."""
    if behavior == "currentReplicas":
        return current
    if behavior == "currentReplicasIfHigher":
        return max(current, replicas)
    if behavior == "currentReplicasIfLower":
        return min(current, replicas)
    return replicas


def keda_fallback_active(failures: int, failure_threshold: int | None) -> bool:
    """``GetMetricsWithFallback``: the fallback applies once the consecutive failures exceed the threshold."""
    return failure_threshold is not None and failures > failure_threshold


class KedaController(Controller):
    """A ScaledObject whose target is the whole service (``controllers.baselines.common``).

    Args:
        threshold: AverageValue target of the query per pod (> 0).
        metric: ``concurrency`` or ``queue`` (module docstring).
        activation_threshold: activation threshold.
        fallback_failures, fallback_replicas: the fallback block's ``failureThreshold`` and ``replicas``
            (both >= 0, both or neither).
        fallback_behavior: the fallback block's ``behavior`` (``static``, the default, ...).
    """


    def __init__(self, threshold: float, metric: str = "concurrency",
                 activation_threshold: float = ACTIVATION_THRESHOLD, fallback_failures: int | None = None,
                 fallback_replicas: int | None = None, fallback_behavior: str = "static", *,
                 window_s: float = DEFAULT_WINDOW_S, name: str = "keda") -> None:
        super().__init__(name, SYNC_PERIOD_S, window_s, own_guard=True)
        if metric not in METRICS:
            raise ValueError(f"keda metric must be one of {', '.join(METRICS)}, got '{metric}'")
        if threshold <= 0:
            raise ValueError(f"keda threshold must be > 0, got {threshold}")
        if (fallback_failures is None) != (fallback_replicas is None):
            raise ValueError("keda fallback needs both fallback_failures and fallback_replicas")
        if (fallback_failures is not None and fallback_failures < 0) or \
                (fallback_replicas is not None and fallback_replicas < 0):
            raise ValueError(f"keda fallback_failures={fallback_failures} & fallback_replicas={fallback_replicas} "
                             "must both be >= 0")
        if fallback_behavior not in FALLBACK_BEHAVIORS:
            raise ValueError(f"keda fallback_behavior must be one of {', '.join(FALLBACK_BEHAVIORS)}, "
                             f"got '{fallback_behavior}'")
        self.threshold = threshold
        self.activation_threshold = activation_threshold
        self.metric = metric
        self.fallback_failures = None if fallback_failures is None else int(fallback_failures)
        self.fallback_replicas = None if fallback_replicas is None else int(fallback_replicas)
        self.fallback_behavior = fallback_behavior
        self.states: dict[str, KedaState] = {}
        self.behaviors: dict[str, HPABehavior] = {}

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant (module docstring)."""
        now = est.time_s
        state = self.states.setdefault(svc.name, KedaState())
        parts = [est.signals.value(s) for s in METRICS[self.metric]]
        value = None if None in parts else sum(parts)  # type: ignore[arg-type]
        state.failures = state.failures + 1 if value is None else 0
        current = sum(est.current.values())
        min_count, hi = count_bounds(svc)
        lo = max(min_count, 1)
        if min_count == 0 and (state.last_poll_s is None or now - state.last_poll_s >= POLLING_INTERVAL_S):
            forced = keda_activation(value, current, state, now, self.activation_threshold,
                                     error_is_idle=self.fallback_replicas == 0)
            state.last_poll_s = now
            if forced is not None:
                desired = place_count(forced, svc, est.current, est.weights)
                return Decision(desired, f"keda: activation -> {forced}", change_reason(desired, est.current))
        if current == 0:
            return hold(est.current, "keda: inactive at 0 replicas")
        if value is None and keda_fallback_active(state.failures, self.fallback_failures):
            assert self.fallback_replicas is not None
            n = keda_fallback_replicas(self.fallback_behavior, self.fallback_replicas, current)
            proposal = hpa_external_replicas(self.threshold * n, self.threshold, current, TOLERANCE)
            why = f"fallback ({self.fallback_behavior}, {n}) after {state.failures} failures"
        elif value is None:
            return hold(est.current, f"keda: {self.metric} unknown ({state.failures} failures)")
        else:
            proposal = hpa_external_replicas(value, self.threshold, current, TOLERANCE)
            why = f"{self.metric} {value:.3g} vs {self.threshold:.3g}/pod"
        beh = self.behaviors.setdefault(svc.name, HPABehavior(legacy=True))
        total = beh.normalize(now, proposal, current, lo, hi)
        terms = {"setpoint": self.threshold} | ({} if value is None else {"measurement": value})
        desired = place_count(total, svc, est.current, est.weights)
        return Decision(desired, f"keda: {why}, proposal {proposal}, desired {total}",
                        change_reason(desired, est.current), terms=terms,
                        gauges=setpoint_gauges(self.metric, self.threshold, value))
