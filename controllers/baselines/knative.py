"""Knative Pod Autoscaler (KPA) on request concurrency, stable and panic windows.

Sources (``docs/anchors.md#knative-kpa``): knative/serving ``config/core/configmaps/autoscaler.yaml`` for the defaults;
knative.dev/docs/serving/autoscaling/kpa-specific; the decider step follows knative/serving
``pkg/autoscaler/scaling/autoscaler.go`` ``Scale()`` (as ported in vllm-project/aibrix
``pkg/controller/podautoscaler/scaler/kpa.go``).

Constants: ``stable-window`` 60 s; ``panic-window-percentage`` 10 (panic window 6 s);
``panic-threshold-percentage`` 200; ``max-scale-up-rate`` 1000; ``max-scale-down-rate`` 2;
``tick-interval`` 2 s; ``scale-down-delay`` 0 s; ``activation-scale`` 1. Knative's default target,
``container-concurrency-target-default`` 100 x ``container-concurrency-target-percentage`` 70 = 70
in-flight requests per pod, is for a generic container; the default here is one vLLM replica's
concurrency at 70 % of its SLO rate (``controllers.baselines.calibrate``).

Every tick the autoscaler samples the revision's total concurrency (requests running or waiting on
its pods, plus those the activator/gateway holds) and averages the samples over the stable and
panic windows (``kpa_scale``), with ``ready = max(1, ready pods)``:

    dspc = ceil(stable / target), dppc = ceil(panic / target), each clamped to
    [floor(ready / max_scale_down_rate), ceil(max_scale_up_rate x ready)]
    panic starts (or is extended) when dppc / ready >= 2.0; it ends when that no longer holds and
    more than a stable window has passed since it was last extended.
    stable mode: desired = clamped dspc; panic: desired = max(clamped dspc, clamped dppc), never
    below the highest count asked for during this panic (no scale-down in panic).

A new autoscaler with more than one ready pod starts in panic at the current count (it has no
history yet); with fewer it starts in stable mode, remembering the count (``kpa_initial_state``).

Followed as of ``knative/serving`` ``knative-v1.23.0`` (``autoscaler.go`` ``newAutoscaler`` and
``Scale``; ``pkg/autoscaler/aggregation/max/timewindow.go`` for the delay window), and replayed on
its ``autoscaler_test.go`` in ``tests/unit/test_anchor_cases.py``. Also from ``Scale()``:

- ``activation-scale`` (annotation, default 1: off): when it is > 1, a count with a non-zero
  ``dspc`` (``dppc``) is raised to at least it.
- ``scale-down-delay`` (default 0 s: off): the count returned is the largest desired count recorded
  in the last ``ceil(delay / tick)`` 2-s buckets (bucket ``floor(now / 2 s)``; two counts in one
  bucket keep the larger), so a scale-down waits a whole delay at the lower count.
- ``Reachable`` (a route references the revision; a whole service here, always): an unreachable
  revision has no ``max-scale-down-rate`` floor and no delay.
- no data: ``Scale()`` returns an invalid result (no change) when the metric client has no data;
  the controller holds when the concurrency is unknown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from autoscaler.config.control import DEFAULT_WINDOW_S
from controllers.base import Controller, Decision, change_reason, hold, setpoint_gauges
from controllers.baselines.common import SampleWindow, count_bounds, place_count

if TYPE_CHECKING:
    from autoscaler.config import Service
    from autoscaler.state import ServiceEstimate

TICK_INTERVAL_S = 2.0
STABLE_WINDOW_S = 60.0
PANIC_WINDOW_PERCENTAGE = 10.0
PANIC_THRESHOLD_PERCENTAGE = 200.0
MAX_SCALE_UP_RATE = 1000.0
MAX_SCALE_DOWN_RATE = 2.0
ACTIVATION_SCALE = 1
SCALE_DOWN_DELAY_S = 0.0


@dataclass(frozen=True)
class KPAState:
    """Decider memory: when panic was last entered/extended (None = stable mode), max pods in panic,
    and the scale-down delay window's ``(2-s bucket, desired count)`` records (empty without a delay)."""

    panic_time_s: float | None = None
    max_panic_pods: int = 0
    delay: tuple[tuple[int, int], ...] = ()


def kpa_initial_state(ready: int, now: float) -> KPAState:
    """A new autoscaler's state (``newAutoscaler``): in panic since ``now`` when more than one pod is
    ready, and ``max_panic_pods`` the ready count either way."""
    return KPAState(now if ready > 1 else None, max(ready, 0))


def _delayed(state: KPAState, desired: int, now: float, delay_s: float) -> tuple[int, KPAState]:
    """Record ``desired`` in the scale-down delay window (``max.TimeWindow``, granularity the tick)
    and return the window's maximum."""
    buckets = math.ceil(delay_s / TICK_INTERVAL_S)
    index = int(now) // int(TICK_INTERVAL_S)  # int(now.Unix()) / int(granularity.Seconds())
    same = [n for i, n in state.delay if i == index]
    kept = tuple((i, n) for i, n in state.delay if i != index and index - i < buckets)
    records = (*kept, (index, max([desired, *same])))
    return max(n for _, n in records), replace(state, delay=records)


def kpa_scale(state: KPAState, stable: float, panic: float, ready: int, now: float, target: float,
              stable_window_s: float = STABLE_WINDOW_S,
              panic_threshold: float = PANIC_THRESHOLD_PERCENTAGE / 100,
              max_scale_up_rate: float = MAX_SCALE_UP_RATE,
              max_scale_down_rate: float = MAX_SCALE_DOWN_RATE, *,
              activation_scale: int = ACTIVATION_SCALE, scale_down_delay_s: float = SCALE_DOWN_DELAY_S,
              reachable: bool = True) -> tuple[int, KPAState]:
    """One decider step (module docstring; ``Scale()``); returns ``(desired pods, new state)``.

    Args:
        stable, panic: average total concurrency over the stable and panic windows.
        ready: ready pods.
        now: seconds.
        target: concurrency per pod.
        activation_scale, scale_down_delay_s, reachable: the module docstring's; upstream's defaults.
    """
    pods = max(1.0, float(ready))
    max_up = math.ceil(max_scale_up_rate * pods)
    max_down = math.floor(pods / max_scale_down_rate) if reachable else 0
    dspc = math.ceil(stable / target)
    dppc = math.ceil(panic / target)
    desired_stable = min(max(dspc, max_down), max_up)
    desired_panic = min(max(dppc, max_down), max_up)
    if activation_scale > 1:
        if dspc > 0:
            desired_stable = max(desired_stable, activation_scale)
        if dppc > 0:
            desired_panic = max(desired_panic, activation_scale)
    over = dppc / pods >= panic_threshold
    if over:
        state = replace(state, panic_time_s=now)
    elif state.panic_time_s is not None and state.panic_time_s + stable_window_s < now:
        state = replace(state, panic_time_s=None, max_panic_pods=0)
    desired = desired_stable
    if state.panic_time_s is not None:
        desired = max(desired_stable, desired_panic)
        if desired > state.max_panic_pods:
            state = replace(state, max_panic_pods=desired)
        desired = state.max_panic_pods
    if reachable and scale_down_delay_s > 0:
        desired, state = _delayed(state, desired, now, scale_down_delay_s)
    return desired, state


class KnativeKPAController(Controller):
    """The KPA for a revision that is the whole service (``controllers.baselines.common``).

    Args:
        target: concurrency per pod (> 0).
        stable_window_s: stable window; the panic window is ``panic_window_percentage`` % of it.
        activation_scale: ``autoscaling.knative.dev/activation-scale`` (>= 1; 1 is off).
        scale_down_delay_s: ``scale-down-delay`` (>= 0, whole seconds as upstream's config requires).
    """


    def __init__(self, target: float, stable_window_s: float = STABLE_WINDOW_S,
                 panic_window_percentage: float = PANIC_WINDOW_PERCENTAGE, activation_scale: int = ACTIVATION_SCALE,
                 scale_down_delay_s: float = SCALE_DOWN_DELAY_S, *, window_s: float = DEFAULT_WINDOW_S,
                 name: str = "kpa") -> None:
        super().__init__(name, TICK_INTERVAL_S, window_s, own_guard=True)
        if target <= 0:
            raise ValueError(f"kpa target must be > 0, got {target}")
        if activation_scale < 1:
            raise ValueError(f"kpa activation_scale must be >= 1, got {activation_scale}")
        if scale_down_delay_s < 0 or scale_down_delay_s != round(scale_down_delay_s):
            raise ValueError(f"kpa scale_down_delay_s must be whole seconds >= 0, got {scale_down_delay_s}")
        self.target = target
        self.activation_scale = activation_scale
        self.scale_down_delay_s = scale_down_delay_s
        self.stable_window_s = stable_window_s
        self.panic_window_s = stable_window_s * panic_window_percentage / 100
        self.windows: dict[str, SampleWindow] = {}
        self.states: dict[str, KPAState] = {}

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant (module docstring)."""
        running, queued = est.signals.running, est.signals.queue_length
        if running is None or queued is None:
            return hold(est.current, "kpa: concurrency unknown")
        now = est.time_s
        window = self.windows.setdefault(svc.name, SampleWindow(self.stable_window_s))
        window.add(now, running + queued)
        stable = window.mean(now, self.stable_window_s)
        panic = window.mean(now, self.panic_window_s)
        assert stable is not None and panic is not None  # the sample just added is in both windows
        ready = sum(v.ready for v in est.variants.values())
        if svc.name not in self.states:
            # A new autoscaler with > 1 pod starts in panic at the current scale (no history yet).
            self.states[svc.name] = kpa_initial_state(ready, now)
        desired, self.states[svc.name] = kpa_scale(self.states[svc.name], stable, panic, ready, now, self.target,
                                                   self.stable_window_s, activation_scale=self.activation_scale,
                                                   scale_down_delay_s=self.scale_down_delay_s)
        lo, hi = count_bounds(svc)
        total = min(max(desired, lo), hi)
        mode = "panic" if self.states[svc.name].panic_time_s is not None else "stable"
        placed = place_count(total, svc, est.current, est.weights)
        return Decision(placed,
                        f"kpa {mode}: concurrency {stable:.3g} ({self.stable_window_s:g} s) / {panic:.3g} "
                        f"({self.panic_window_s:g} s), desired {total}",
                        change_reason(placed, est.current), terms={"setpoint": self.target, "measurement": stable},
                        gauges=setpoint_gauges("concurrency", self.target, stable))
