"""Fleet-file section ``controller``: loop period, signal window, PID gains, guard rules, forecast stages."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, StrictBool, model_validator

from autoscaler.config.base import MAX_INT, Strict

DEFAULT_TICK_S = 15.0  # seconds between ticks: HPA's sync period and Prometheus's usual scrape interval
DEFAULT_WINDOW_S = 300.0  # signal look-back window, seconds (controllers.pid: why 300 s)

SetpointSignal = Literal[
    "slo_mean_ratio", "ttft_mean_ratio", "tpot_mean_ratio", "ttft_p95_ratio", "tpot_p95_ratio", "slo_p95_ratio",
    "kv_usage", "queue_per_replica",
]


class PIDConfig(Strict):
    """PID gains and shaping (see ``controllers.pid``).

    The error is ``measured/setpoint - 1`` on the chosen signal, so gains are in replicas per unit of
    relative error (``kp``) and per unit of relative error-second (``ki``), scaled by the current
    replica count when ``scale_with_replicas`` is on.
    """

    setpoint_signal: SetpointSignal = "slo_mean_ratio"
    setpoint: float = Field(default=0.3, gt=0)
    kp: float = Field(default=0.2, ge=0)
    ki: float = Field(default=0.005, ge=0)
    kd: float = Field(default=0.0, ge=0)
    derivative_filter_s: float = Field(default=30.0, gt=0)
    deadband: float = Field(default=0.25, ge=0, lt=1)
    down_gain: float = Field(default=0.5, gt=0)
    error_clip: float = Field(default=3.0, gt=0)
    scale_with_replicas: StrictBool = True

    @model_validator(mode="after")
    def _band(self) -> PIDConfig:
        # The error is clipped to [-1, error_clip]; a band that wide would zero every error on that side.
        if self.deadband >= self.error_clip:
            raise ValueError(f"deadband ({self.deadband}) must be below error_clip ({self.error_clip}): "
                             "no error would ever leave the band")
        if self.setpoint_signal == "kv_usage" and self.setpoint >= 1:
            raise ValueError(f"setpoint ({self.setpoint}) must be below 1 for kv_usage, a fraction of the KV cache")
        return self


class GuardConfig(Strict):
    """Safety rules applied to every decision.

    Attributes:
        max_step_up: most replicas added per service per tick.
        max_step_down: most replicas removed per service per tick.
        scale_down_cooldown_s: no scale-down for this long after any scale-up.
        idle_ticks_to_min: consecutive idle ticks before an idle service scales toward its minimum.
        drain_timeout_s: a scale-down first takes the pods it removes out of routing and removes
            each once it holds nothing, or after this long, seconds (``autoscaler.loop.drain``;
            0: remove at once). Kubernetes kills a removed pod after its 30-s default grace period,
            cutting long generations (volcano-sh/kthena#1589); 300 s covers a 2,000-token answer at
            a 0.1-s ITL with room.
    """

    max_step_up: int = Field(default=8, ge=1)
    max_step_down: int = Field(default=2, ge=1)
    scale_down_cooldown_s: float = Field(default=180.0, ge=0)
    idle_ticks_to_min: int = Field(default=8, ge=1)
    drain_timeout_s: float = Field(default=300.0, ge=0)


class ForecastConfig(Strict):
    """The loop's forecast stages (``autoscaler.loop.forecast`` for load, ``autoscaler.loop.warmth`` for
    the prefix-cache hit rate; off by default: no controller uses them yet).

    Attributes:
        enabled: forecast request rate, token mix and prefix-cache hit rate every tick.
        horizon_s: how far ahead, seconds (about a cold replica start).
        step_s: forecast step, seconds; ticks within a step are averaged.
        router: how the gateway places requests, for the cache-warmth model and for whether the MPC's
            and the oracle's ``pool=N`` pool a replica's capacity (``controllers.mpc.pools_queues``):
            ``least_outstanding`` (placement ignores the cache; the replicas share their queues) or
            ``prefix_affinity`` (a gateway that scores prefix-cache hits, such as llm-d's
            prefix-cache-scorer: every replica planned alone); None = ``simulator.router``.
        detect_shifts: the load forecaster's level-shift rule (``models.forecast.auto``); on by
            default since a young segment keeps the last value unless a trend beats it by more than
            chance (docs/forecasting.md: the MPC's attainment and cost on the shipped scenarios).
    """

    enabled: StrictBool = False
    horizon_s: float = Field(default=300.0, gt=0)
    step_s: float = Field(default=60.0, gt=0, le=3600.0)
    router: Literal["least_outstanding", "prefix_affinity"] | None = None
    detect_shifts: StrictBool = True


AdmissionMode = Literal["none", "pid", "mpc"]
ADMISSION_MODES: tuple[str, ...] = get_args(AdmissionMode)


class AdmissionConfig(Strict):
    """Settings of the admission policies (``controllers.admission``).

    Attributes:
        wait_fraction: a priority's wait budget is this fraction of its class's TTFT objective
            (critical and standard: ``interactive``; sheddable: ``batch``), seconds: a request that
            waits longer at the gateway is unlikely to meet its TTFT once prefilled.
        kp, ki: the PID's gains on the relative wait error (``wait / budget - 1``), in budgets per unit
            error and per unit error-second.
        max_budgets: the largest threshold the PID sets, in wait budgets (its integral's anti-windup
            bound): past a few budgets a wait misses the TTFT anyway, and a wider range would take
            the PID minutes to come back down from.
        shed_tolerance: the MPC leaves a priority unlimited while it sheds less than this fraction of
            its demand, and sheds it whole above ``1 - shed_tolerance``.
        client_retries: the retries a client sends after a shed attempt: the OpenAI Python client's
            default ``max_retries``, 2 (0 for clients that never retry). The MPC counts
            ``r / (r + 1)`` of the attempts shed as retries when it sizes replicas
            (``controllers.admission.new_demand_rps``): a request shed and sent again is one request.
        gateway_max_concurrency: the most requests in flight the deployed gateway lets each replica
            hold, when it is a fixed number: llm-d-router's ``concurrency-detector`` ``maxConcurrency``
            (v0.10.0; its default is 100, below the ITL budget of an H100 or a GH200 on most mixes).
            The capacity the planning controllers, the oracle, the bound and the loop's weights size
            replicas with is then computed with at most this many requests per replica
            (``FleetConfig.planning_engine``): requests past it wait at the gateway, not on the GPU.
            None (default): no fixed cap, or one that follows the published ITL budget; in
            simulation a numeric ``simulator.gateway.max_concurrency`` under ``saturation:
            concurrency`` (``requests`` or ``hybrid`` mode) is taken as the deployed gateway's.
    """

    wait_fraction: float = Field(default=0.5, gt=0, le=10)
    kp: float = Field(default=0.5, ge=0)
    ki: float = Field(default=0.02, ge=0)
    max_budgets: float = Field(default=4.0, gt=0)
    shed_tolerance: float = Field(default=0.02, ge=0, lt=0.5)
    client_retries: int = Field(default=2, ge=0, le=100)
    gateway_max_concurrency: int | None = Field(default=None, ge=1, le=MAX_INT)


class ControllerConfig(Strict):
    """Control-loop settings.

    Attributes:
        tick_s: seconds between loop ticks.
        window_s: look-back window of rate/quantile signals (PromQL ``rate(...[window])``), seconds.
        pid: PID settings.
        guard: safety rules.
        forecast: the forecast stage.
        admission: the admission policy (``none``, ``pid`` or ``mpc``) for controllers other than
            the anchors' (``simulate`` and ``compare`` take ``--admission`` to override it).
        admission_settings: the policies' settings.
        capacity_mix: the request mix the loop's per-replica capacities are sized for: ``observed``
            (default) learns it from the served requests' token counters once a window holds enough
            of them (``autoscaler.loop.mix``); ``typical`` keeps each service's ``typical_request``.
    """

    tick_s: float = Field(default=DEFAULT_TICK_S, ge=1.0)
    window_s: float = Field(default=DEFAULT_WINDOW_S, gt=0, le=86400.0)
    pid: PIDConfig = PIDConfig()
    guard: GuardConfig = GuardConfig()
    forecast: ForecastConfig = ForecastConfig()
    admission: AdmissionMode = "none"
    admission_settings: AdmissionConfig = AdmissionConfig()
    capacity_mix: Literal["observed", "typical"] = "observed"

    @model_validator(mode="after")
    def _window(self) -> ControllerConfig:
        if self.window_s < self.tick_s:
            raise ValueError(f"window_s ({self.window_s}) is shorter than tick_s ({self.tick_s})")
        return self

