"""The controller contract: what every controller is given, declares and returns.

A controller is built once with its settings (``controllers.registry`` builds any of them by spec)
and then called once per tick and service with that tick's estimate. It declares:

- ``name``: the spec it was built from (``pid``, ``hpa:target=0.4``...), used in results and metrics;
- ``tick_s``: how often it decides, seconds (the PID: the fleet file's ``controller.tick_s``; HPA's
  sync period 15 s; Dynamo's adjustment interval 180 s);
- ``window_s``: the look-back window of the rate and ``max_over_time`` signals it reads, seconds;
- ``own_guard``: True when it brings its own stabilisation and rate limits (the anchors' baselines,
  fixed fleets): the loop then only clamps its decision to the variants' bounds, so it is measured
  with its own rules; False when the loop's guard (step limits, cool-down, warm-up and idle rules)
  applies (``autoscaler.loop.guard``);
- ``forecast_horizon_s``: how far ahead it reads the load forecast (``ServiceEstimate.forecast``),
  seconds; None when it reads none. The loop runs its forecast stage for a controller that reads it,
  whatever ``controller.forecast.enabled`` says;
- ``forecast_model``: the request rate's model in that stage (``models.forecast.auto.MODELS``: ``auto``,
  the backtest selection; ``arima``, refitted every step, which ``mpc:forecast=arima`` asks for);
- ``forecast_demand``: what that stage's request-rate model is fed (``DEMANDS``): ``served``, the
  completions (``request_rate_rps``, the default); ``arrivals``, the arrival rate (``arrival_rate_rps``:
  the gateway's request counter, else completions plus the growth of the requests in the system,
  ``autoscaler.loop.estimate.ArrivalInference``), which ``mpc:arrivals=1`` asks for;
- ``scales_roles``: True when it scales a service's prefill/decode pools (``Service.roles``): the loop then
  gives it each pool's observation (``ServiceEstimate.pools``) and capacities (``pool_weights``), guards
  each pool as a service of its own and writes each changed pool variant as its own scale target; its
  ``Decision.desired`` may name pool variants. False (the default): the pools are held where they are,
  and a service of pools only is held whole (reason ``fixed``);
- ``on_guard_cut``: told what the guard (or the actuator, or whoever else sets the fleet) let
  through when it differs from what was asked, so a controller with memory (the PID's integral)
  can track the fleet instead of winding up against decisions never applied.

``decide`` returns a ``Decision``: replicas per variant and, for controllers that set them,
admission thresholds per priority class, with a named reason (``Reason``) beside the text.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autoscaler.config import Service
    from autoscaler.state import PodObservation, ServiceEstimate


class Reason(StrEnum):
    """Why a decision or a guard step is what it is (the ``reason`` label of the loop's metrics).

    In the spirit of the HPA's condition reasons (``ScaleUpLimit``, ``TooManyReplicas``...): a
    decision carries one, the guard adds its own for each cut it makes.
    """

    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    NO_CHANGE = "no_change"
    FIXED = "fixed"  # a fixed fleet (static, scheduled)
    SIGNAL_UNKNOWN = "signal_unknown"  # the controller's input is unknown: hold
    WARMING_UP = "warming_up"  # less than one signal window of data: hold
    METRICS_ERROR = "metrics_error"  # a metric query failed: hold
    COUNTS_UNKNOWN = "counts_unknown"  # a variant's replica count is unknown: hold
    IDLE_TO_MIN = "idle_to_min"  # idle for the configured ticks: toward the minimum
    SCALE_FROM_ZERO = "scale_from_zero"  # requests wait (or arrive, the queue unknown) and no replica exists
    # the guard's cuts
    TOO_MANY_REPLICAS = "too_many_replicas"  # clamped to max_replicas / quota
    TOO_FEW_REPLICAS = "too_few_replicas"  # clamped to min_replicas
    SCALE_UP_LIMIT = "scale_up_limit"  # max_step_up
    SCALE_DOWN_LIMIT = "scale_down_limit"  # max_step_down
    COOLDOWN = "cooldown"  # scale-down held within scale_down_cooldown_s of a scale-up


class FleetMismatchError(ValueError):
    """A controller that cannot run on the service it is given (no aggregated variant for one that
    calibrates or plans on them, ``POOLS_ONLY``; no prefill/decode pools for one that scales only
    those): the fleet's fault, not the spec's, so ``autoscaler compare`` makes its run a failed row
    instead of refusing the whole comparison."""


POOLS_ONLY = ("service {service} has no aggregated variant: its prefill/decode pools are scaled only by the "
              "controllers that scale roles (pid, mpc, dynamo-pd, wva-pd)")
"""The error of a controller that needs an aggregated variant to calibrate or plan on, given a service
of prefill/decode pools only (``Service.roles``)."""

DEMANDS = ("served", "arrivals")
"""What the forecast stage's request-rate model may be fed (``Controller.forecast_demand``)."""

HOLD_REASONS = frozenset({Reason.SIGNAL_UNKNOWN, Reason.WARMING_UP, Reason.METRICS_ERROR, Reason.COUNTS_UNKNOWN})


@dataclass(frozen=True)
class Gauge:
    """One number a controller exports as a metric of its own (``loop.export`` adds the ``service`` label).

    Attributes:
        name: the metric family, ``autoscaler_*``.
        help: its help text (the same for every sample of the family).
        value: the sample.
        labels: label name -> value beside ``service`` (the same names for every sample of the family).
        term: the key of ``Decision.terms`` this gauge exports, which is then not exported again as
            ``autoscaler_controller_term``; None: the gauge is not one of the terms.
    """

    name: str
    help: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()
    term: str | None = None


def setpoint_gauges(signal: str, setpoint: float, measurement: float | None) -> tuple[Gauge, ...]:
    """A setpoint controller's ``autoscaler_setpoint`` and ``autoscaler_measured`` (label ``signal``: what
    it controls), exporting its ``setpoint`` and ``measurement`` terms; no measurement while unknown."""
    labels = (("signal", signal),)
    out = [Gauge("autoscaler_setpoint", "Controller setpoint.", setpoint, labels, "setpoint")]
    if measurement is not None:
        out.append(Gauge("autoscaler_measured", "Controller measurement.", measurement, labels, "measurement"))
    return tuple(out)


@dataclass
class Decision:
    """What one controller asks for one service at one tick.

    Attributes:
        desired: variant name -> desired replica count (variants left out keep their count).
        reason: short human-readable reason (``scale up: slo_mean_ratio=0.61 vs setpoint 0.3`` ...).
        code: the named reason.
        terms: numbers worth exporting (setpoint, measurement, PID terms, target capacity).
        hold: True when the controller could not decide (missing data): the guard keeps replicas.
        admission: priority (``autoscaler.workload.types.PRIORITIES``) -> admission threshold at the
            gateway: the longest estimated queue wait a request of that priority may be admitted to,
            seconds, None for no limit (``controllers.admission``); empty when none is set.
        itl_budget: variant -> the most requests in flight the gateway should hold each of its
            replicas to (its ITL budget as the controller has learned it,
            ``controllers.admission.learned_budget``), published with the thresholds; empty when
            the controller learns none.
        plan: variant -> replicas the controller plans for its next steps (a planning controller's
            horizon, first step first); empty for a controller that plans nothing ahead.
        remove_first: variant -> names of the pods to remove first when its count goes down, in
            order (the actuator passes them on; empty: the platform chooses).
        gauges: the controller's own metrics (``Gauge``: a setpoint and its measurement, a plan's
            demand); the exporter knows no controller, it exports these by the names they carry.
        route_weights: variant -> requests/s one replica serves in the controller's plan (a planning
            controller's capacities for a service with prefill/decode pools): the split of the demand
            it planned, which the simulator's router follows (``FleetSimulator.follow_plan``); empty:
            the router keeps its own weights.
    """

    desired: dict[str, int]
    reason: str
    code: Reason = Reason.NO_CHANGE
    terms: dict[str, float] = field(default_factory=dict)
    hold: bool = False
    admission: dict[str, float | None] = field(default_factory=dict)
    itl_budget: dict[str, int] = field(default_factory=dict)
    plan: dict[str, list[int]] = field(default_factory=dict)
    remove_first: dict[str, list[str]] = field(default_factory=dict)
    gauges: tuple[Gauge, ...] = ()
    route_weights: dict[str, float] = field(default_factory=dict)


def change_reason(desired: Mapping[str, int], current: Mapping[str, int]) -> Reason:
    """``SCALE_UP`` if any variant grows, else ``SCALE_DOWN`` if any shrinks, else ``NO_CHANGE``."""
    if any(n > current.get(v, 0) for v, n in desired.items()):
        return Reason.SCALE_UP
    if any(n < current.get(v, 0) for v, n in desired.items()):
        return Reason.SCALE_DOWN
    return Reason.NO_CHANGE


def hold(current: Mapping[str, int], reason: str, code: Reason = Reason.SIGNAL_UNKNOWN) -> Decision:
    """A decision that keeps every variant at ``current`` because the controller cannot decide."""
    return Decision(dict(current), reason, code, hold=True)


class Controller(ABC):
    """A replica-count (and admission) policy for the services of a fleet (module docstring).

    Class attribute ``scales_roles``: whether it scales prefill/decode pools (module docstring).

    Args:
        name: the spec it was built from.
        tick_s: seconds between decisions (> 0).
        window_s: signal look-back window, seconds (> 0).
        own_guard: brings its own stabilisation (the loop applies only the variants' bounds).
        forecast_horizon_s: how far ahead it reads the load forecast, seconds; None: it reads none.
        forecast_model: the forecast stage's request-rate model (module docstring).
        forecast_demand: what that model is fed, one of ``DEMANDS`` (module docstring).
        forecast_smooth_s: with > 0, that model is fed the mean of the demand rates of the last this many
            seconds (``autoscaler.loop.forecast.smoothed``); 0, the default: the rate itself.

    Raises:
        ValueError: ``tick_s``, ``window_s`` or ``forecast_horizon_s`` not a finite number > 0, or
            ``forecast_demand`` not in ``DEMANDS``, or ``forecast_smooth_s`` not a finite number >= 0.
    """

    scales_roles: bool = False

    def __init__(self, name: str, tick_s: float, window_s: float, own_guard: bool = False,
                 forecast_horizon_s: float | None = None, forecast_model: str = "auto",
                 forecast_demand: str = "served", forecast_smooth_s: float = 0.0) -> None:
        if forecast_demand not in DEMANDS:
            raise ValueError(f"{name}: forecast_demand must be one of {', '.join(DEMANDS)}, got '{forecast_demand}'")
        if not 0 <= forecast_smooth_s < math.inf:
            raise ValueError(f"{name}: forecast_smooth_s must be a finite number >= 0, got {forecast_smooth_s}")
        for what, x in (("tick_s", tick_s), ("window_s", window_s), ("forecast_horizon_s", forecast_horizon_s)):
            if x is not None and not 0 < x < math.inf:
                raise ValueError(f"{name}: {what} must be a finite number > 0, got {x}")
        self.name = name
        self.tick_s = float(tick_s)
        self.window_s = float(window_s)
        self.own_guard = own_guard
        self.forecast_horizon_s = forecast_horizon_s
        self.forecast_model = forecast_model
        self.forecast_demand = forecast_demand
        self.forecast_smooth_s = float(forecast_smooth_s)

    def prepare(self, estimates: Mapping[str, ServiceEstimate]) -> None:
        """Called once per tick with every service's estimate (service name -> estimate) before any
        ``decide``: a controller that plans the services together (sharing GPU quotas) solves here and
        answers each ``decide`` from that plan. One that decides per service ignores it."""
        return None

    @property
    def plans_jointly(self) -> bool:
        """Whether this tick's ``prepare`` planned the services in one problem (shared GPU quotas or a
        budget): then each service's part assumes the others', so the loop writes none of them where one
        service's decision raised. False for a controller that decides per service."""
        return False

    @abstractmethod
    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """What to ask for ``svc`` given this tick's estimate (pure of I/O: no query, no write)."""

    def on_admission(self, enforced: bool) -> None:
        """Called once by the loop: ``enforced`` when it runs an admission policy, so thresholds a
        decision carries reach a gateway that sheds (False: none is configured, and a controller
        must not plan on requests being shed). A controller that sets no thresholds ignores it."""
        return None

    def on_guard_cut(self, service: str, intended: Mapping[str, int], applied: Mapping[str, int],
                     weights: Mapping[str, float]) -> None:
        """``applied`` (replicas per variant) is what the fleet got instead of ``intended``; ``weights``
        is one replica's capacity per variant (requests/s). A controller without memory ignores it."""
        return None


def aggregated_pods(est: ServiceEstimate) -> list[PodObservation]:
    """``est.pods`` of the service's aggregated variants (``est.variants``): a prefill/decode pool's pods
    (whose variants are ``est.pools``') left out, so a controller sizing the aggregated variants by
    their pods counts no pool pod. Every pod for a service without pools."""
    return [p for p in est.pods if p.variant in est.variants]


def silent_pods(est: ServiceEstimate) -> int:
    """Ready replicas of the aggregated variants with no per-pod series (not yet scraped, or their
    metrics missing); 0 when the source gives no per-pod series at all."""
    if not est.pods:
        return 0
    return max(0, sum(v.ready for v in est.variants.values()) - len(aggregated_pods(est)))


def silent_any(est: ServiceEstimate) -> int:
    """Ready replicas of every variant, the prefill/decode pools' included, with no per-pod series,
    counted per variant (a pod too many in one variant hides no silent one in another); 0 when the
    source gives no per-pod series at all (``silent_pods`` counts the aggregated ones only)."""
    if not est.pods:
        return 0
    ready = {n: v.ready for n, v in est.variants.items()}
    ready.update({n: v.ready for pool in est.pools.values() for n, v in pool.variants.items()})
    seen = Counter(p.variant for p in est.pods)
    return sum(max(0, r - seen[n]) for n, r in ready.items())
