"""What the loop's stages pass one another each tick: a source's observation of a service, and the
estimate that controllers read.

Every signal is ``float | None``: None means *unknown* (query failed, no data), never zero.

Signal names (per service; per variant the same names restricted to that variant's pods):
``request_rate_rps``, ``prompt_tokens_rps``, ``generation_tokens_rps`` (tokens/s, counted as they are
computed: a prompt at its prefill), ``request_prompt_tokens_rps``, ``request_generation_tokens_rps``
(tokens/s of the requests that finished, ``rate()`` of ``vllm:request_prompt_tokens_sum`` and
``vllm:request_generation_tokens_sum``: the same requests ``request_rate_rps`` counts, so their ratio
to it is a mean length per request even while prefills run far ahead of completions),
``ttft_p50_s``, ``ttft_p95_s``, ``itl_p50_s``, ``itl_p95_s`` (seconds, ``histogram_quantile``
over the window), ``tpot_p95_s`` (p95 of per-request mean time per output token, seconds),
``ttft_mean_s`` and ``tpot_mean_s`` (means over the window, ``rate(_sum) / rate(_count)`` of the
same histograms: exact, where a quantile is interpolated inside a bucket),
``kv_usage`` (mean fraction over pods), ``queue_length`` and ``running``
(requests, summed over pods), ``prefix_hit_rate`` (hits/queries over the window),
``success_rps`` and ``abort_rps`` (requests/s), ``preemptions_rps``; ``arrival_rate_rps``
(requests/s arriving at the gateway, service-wide only: completions fall when the fleet saturates,
arrivals do not).

Per-pod gauges (``ServiceObservation.pods``, ready pods only) serve the baselines that scale on
per-pod metrics (``controllers.baselines``): the latest sample of ``vllm:kv_cache_usage_perc``,
``vllm:num_requests_waiting`` and ``vllm:num_requests_running``, and
``max_over_time(...[window])`` of the first two over the source's window; and, for the cache-warmth
model (``autoscaler.loop.warmth``), the pod's name and the latest values of its prefix-cache counters
``vllm:prefix_cache_hits_total`` and ``vllm:prefix_cache_queries_total`` (tokens; None where the
server exports none, e.g. SGLang).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

SIGNALS = (
    "request_rate_rps",
    "prompt_tokens_rps",
    "generation_tokens_rps",
    "request_prompt_tokens_rps",
    "request_generation_tokens_rps",
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "itl_p95_s",
    "tpot_p95_s",
    "ttft_mean_s",
    "tpot_mean_s",
    "kv_usage",
    "queue_length",
    "running",
    "prefix_hit_rate",
    "success_rps",
    "abort_rps",
    "preemptions_rps",
    "arrival_rate_rps",
)
"""The observed signals, in the order sources report them (the fields of ``Signals`` that sources fill)."""

DERIVED = (
    "ttft_p95_ratio",
    "tpot_p95_ratio",
    "slo_p95_ratio",
    "ttft_mean_ratio",
    "tpot_mean_ratio",
    "slo_mean_ratio",
    "queue_per_replica",
)
"""The signals the estimate stage derives (``autoscaler.loop.estimate``), in the order it derives them."""

PRIORITY_NAMES = {
    "arrival_rate_rps": "arrival_rate_rps.{p}",
    "wait_s": "gateway_wait_s.{p}",
    "shed_rps": "gateway_shed_rps.{p}",
    "queue": "gateway_queue.{p}",
    "dispatched_rps": "gateway_dispatched_rps.{p}",
}
"""``PrioritySignals`` field -> the name it is exported under, ``{p}`` the priority."""

FORECAST_NAMES = {
    "rate_rps": "forecast_rate_rps",
    "rate_lower_rps": "forecast_rate_lower_rps",
    "rate_upper_rps": "forecast_rate_upper_rps",
    "input_tokens": "forecast_input_tokens",
    "output_tokens": "forecast_output_tokens",
}
"""``ForecastSignals`` field -> the name it is exported under."""

WARMTH_NAME = "forecast_prefix_hit_rate"
"""The name ``Signals.prefix_hit_rate_forecast`` is exported under."""

DISPERSION_NAME = "arrival_dispersion"
"""The name ``Signals.arrival_dispersion`` is exported under (only where a source measures it)."""


@dataclass(frozen=True)
class PrioritySignals:
    """One priority's signals at the gateway, as an endpoint picker's flow control exports them
    (``autoscaler.promql``: ``GATEWAY_REQUESTS``, ``GATEWAY_QUEUE_DURATION``, ``GATEWAY_QUEUE_SIZE``; the
    simulator's gateway exports the same); None = unknown (no flow control: only the arrivals).

    Attributes:
        arrival_rate_rps: requests/s of this priority arriving at the gateway.
        wait_s: mean wait of the requests dispatched over the window, seconds.
        shed_rps: requests/s shed (HTTP 429) by the gateway.
        queue: requests of this priority held at the gateway now.
        dispatched_rps: requests/s of this priority the gateway dispatched to the pool.
    """

    arrival_rate_rps: float | None = None
    wait_s: float | None = None
    shed_rps: float | None = None
    queue: float | None = None
    dispatched_rps: float | None = None

    @property
    def queue_wait_s(self) -> float | None:
        """The wait of a request joining the queue now at the current dispatch rate (Little's law:
        ``queue / dispatched_rps``), seconds: 0 with nothing queued, inf when nothing is dispatched;
        None when either is unknown."""
        if self.queue is None or self.dispatched_rps is None:
            return None
        if self.queue <= 0:
            return 0.0
        return self.queue / self.dispatched_rps if self.dispatched_rps > 0 else math.inf


NO_PRIORITY = PrioritySignals()


@dataclass(frozen=True)
class ForecastSignals:
    """The load forecast stage's point forecasts (``autoscaler.loop.forecast``); None = unknown.

    Attributes:
        rate_rps, rate_lower_rps, rate_upper_rps: request rate over the horizon and its central
            90 % interval, requests/s.
        input_tokens, output_tokens: mean prompt and generation length over the horizon, tokens.
    """

    rate_rps: float | None = None
    rate_lower_rps: float | None = None
    rate_upper_rps: float | None = None
    input_tokens: float | None = None
    output_tokens: float | None = None


@dataclass(frozen=True)
class Signals:
    """One scope's signals (a service, or one variant's pods) at one tick; None = unknown, never zero.

    The observed fields (``SIGNALS``, module docstring) are what sources fill; the ``DERIVED`` ones
    the estimate stage computes (None in an observation); ``by_priority`` the gateway's signals per
    priority (empty where the source has none); ``forecast`` the load forecast stage's output and
    ``prefix_hit_rate_forecast`` the cache-warmth stage's (``forecast``/``warmth_known`` False while
    those stages do not run: their names are then absent from ``flat()``). ``arrival_dispersion``:
    the index of dispersion of the gateway's 1-s arrival counts over the window (service-wide,
    dimensionless, 1 for Poisson: ``models.arrivals``), from a source whose gateway exports the
    squares counter (the simulator's); absent from ``flat()`` while unknown.
    """

    request_rate_rps: float | None = None
    prompt_tokens_rps: float | None = None
    generation_tokens_rps: float | None = None
    request_prompt_tokens_rps: float | None = None
    request_generation_tokens_rps: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    tpot_p95_s: float | None = None
    ttft_mean_s: float | None = None
    tpot_mean_s: float | None = None
    kv_usage: float | None = None
    queue_length: float | None = None
    running: float | None = None
    prefix_hit_rate: float | None = None
    success_rps: float | None = None
    abort_rps: float | None = None
    preemptions_rps: float | None = None
    arrival_rate_rps: float | None = None
    ttft_p95_ratio: float | None = None
    tpot_p95_ratio: float | None = None
    slo_p95_ratio: float | None = None
    ttft_mean_ratio: float | None = None
    tpot_mean_ratio: float | None = None
    slo_mean_ratio: float | None = None
    queue_per_replica: float | None = None
    by_priority: Mapping[str, PrioritySignals] = field(default_factory=dict)
    forecast: ForecastSignals | None = None
    prefix_hit_rate_forecast: float | None = None
    warmth_known: bool = False
    arrival_dispersion: float | None = None

    def priority(self, p: str) -> PrioritySignals:
        """Priority ``p``'s gateway signals (all unknown where the source reports none)."""
        return self.by_priority.get(p, NO_PRIORITY)

    def value(self, name: str) -> float | None:
        """The signal exported as ``name`` (``flat()``'s keys: a name a fleet file or a query set gives,
        e.g. ``controller.pid.setpoint_signal``); None when unknown or absent."""
        if name in _TOP:  # a field of its own, in ``flat()`` under its name always (the PID reads one a tick)
            return getattr(self, name)
        return self.flat().get(name)

    def flat(self, derived: bool = True) -> dict[str, float | None]:
        """name -> value of every signal this scope has, in a fixed order: ``SIGNALS``, ``DERIVED``
        (unless ``derived`` is False), each priority's gateway signals, the forecast's, the warmth's."""
        out: dict[str, float | None] = {k: getattr(self, k) for k in SIGNALS}
        if derived:
            out.update((k, getattr(self, k)) for k in DERIVED)
        for p, ps in self.by_priority.items():
            out.update((name.format(p=p), getattr(ps, f)) for f, name in PRIORITY_NAMES.items())
        if self.forecast is not None:
            out.update((name, getattr(self.forecast, f)) for f, name in FORECAST_NAMES.items())
        if self.warmth_known:
            out[WARMTH_NAME] = self.prefix_hit_rate_forecast
        if self.arrival_dispersion is not None:
            out[DISPERSION_NAME] = self.arrival_dispersion
        return out

    @classmethod
    def of(cls, values: Mapping[str, float | None]) -> Signals:
        """Signals from name -> value (``flat()``'s names, so ``Signals.of(s.flat()) == s``); raises
        ``KeyError`` naming an unknown name."""
        top: dict[str, float | None] = {}
        prio: dict[str, dict[str, float | None]] = {}
        forecast: dict[str, float | None] = {}
        warmth: dict[str, float | bool | None] = {}
        by_name = {name.split(".")[0]: f for f, name in PRIORITY_NAMES.items()}
        forecast_fields = {name: f for f, name in FORECAST_NAMES.items()}
        for name, x in values.items():
            if name in _TOP:
                top[name] = x
            elif name in forecast_fields:
                forecast[forecast_fields[name]] = x
            elif name == WARMTH_NAME:
                warmth = {"prefix_hit_rate_forecast": x, "warmth_known": True}
            elif name == DISPERSION_NAME:
                top["arrival_dispersion"] = x
            elif "." in name and name.split(".", 1)[0] in by_name:
                base, p = name.split(".", 1)
                prio.setdefault(p, {})[by_name[base]] = x
            else:
                raise KeyError(f"unknown signal {name!r}")
        return cls(**top, by_priority={p: PrioritySignals(**v) for p, v in prio.items()},  # type: ignore[arg-type]
                   forecast=ForecastSignals(**forecast) if forecast else None, **warmth)  # type: ignore[arg-type]


_TOP = frozenset((*SIGNALS, *DERIVED))


@dataclass
class VariantObservation:
    """Replica counts (from the actuator's view of the Deployment) and signals of one variant.

    ``counts_known`` False: the source could not tell the counts (every query that gives them
    failed, nothing known before); ``ready``/``starting`` are then 0 placeholders that must not be
    read as a count, and the loop holds the service.

    ``unavailable`` True: the variant's new pods cannot be placed (Pending past
    ``kubernetes.pending_timeout_s``, no GPU of its kind free); the loop then caps it at its ready
    replicas, so the controllers give its demand to the other variants, until the mark lifts.

    ``unschedulable_s``: seconds the longest-unschedulable pod of the variant has been so (Pending,
    ``PodScheduled`` False with reason ``Unschedulable``: no node can take it), 0.0 when none is; None
    when the source cannot tell (a metrics source alone, the pods not read, a variant already marked
    ``unavailable`` whose pods the Kubernetes adapter does not read again). The simulator's source counts
    from the pod's creation; the Kubernetes adapter on the daemon's own clock from when it first saw the
    pod unschedulable (``autoscaler.adapters.workloads.base``), so live it is the lower of the two. None is
    never read as 0: a controller that uses it (``mpc:pending=1``) does nothing on None.
    """

    ready: int
    starting: int
    draining: int = 0
    signals: Signals = field(default_factory=Signals)
    counts_known: bool = True
    unavailable: bool = False
    unschedulable_s: float | None = None

    @property
    def current(self) -> int:
        """Replicas counted by the Deployment: ready + starting."""
        return self.ready + self.starting


@dataclass
class PodObservation:
    """Gauges of one ready pod (vLLM metric names in the module docstring).

    Attributes:
        variant: the pod's variant.
        kv_usage: latest ``vllm:kv_cache_usage_perc`` (fraction 0..1).
        waiting, running: latest ``vllm:num_requests_waiting`` / ``..._running`` (requests).
        kv_usage_max: ``max_over_time(vllm:kv_cache_usage_perc[window])``.
        waiting_max: ``max_over_time(vllm:num_requests_waiting[window])``.
        name: pod name ("" when the source has none).
        prefix_hits_total: latest ``vllm:prefix_cache_hits_total`` (tokens, a counter), None = unknown.
        prefix_queries_total: latest ``vllm:prefix_cache_queries_total`` (tokens), None = unknown.
        ready_s: when the pod became ready (seconds, the loop's clock), None when the source cannot tell.
    """

    variant: str
    kv_usage: float
    waiting: float
    running: float
    kv_usage_max: float
    waiting_max: float
    name: str = ""
    prefix_hits_total: float | None = None
    prefix_queries_total: float | None = None
    ready_s: float | None = None


@dataclass
class PoolObservation:
    """One prefill or decode pool of a service (``Service.roles``), as a source reports it.

    Attributes:
        role: ``prefill`` or ``decode``.
        signals: the signals (module docstring) over the pool's pods: a Prometheus source selects
            them by the pod label ``llm_d_ai_role`` (the simulator's source by the replica's role).
        variants: the pool's variants' replica counts and signals, by variant name.
    """

    role: str
    signals: Signals
    variants: dict[str, VariantObservation]

    @property
    def current(self) -> dict[str, int]:
        """variant -> ready + starting replicas."""
        return {name: v.current for name, v in self.variants.items()}


@dataclass
class ServiceObservation:
    """One tick's observation of a service.

    Attributes:
        service: service name.
        time_s: observation time, seconds.
        signals: service-wide signals (see module docstring); None = unknown.
        variants: per-variant counts and signals.
        errors: one line per failed query (empty when everything worked).
        pods: per-pod gauges of the ready pods (empty when the source has none).
        history_s: how far back the source holds the service's samples, seconds (None: it cannot
            tell); the loop decides nothing on less than one signal window.
        failed_optional: one line per failed query the loop does not need to decide (the gateway's,
            the pods' prefix-cache counters, the query-set detection): what it read is unknown, the
            loop does not hold for it. Lines of both lists read ``WHAT: CAUSE``.
        pools: role -> its prefill or decode pool (``PoolObservation``); empty for a service without
            roles, or from a source that does not observe them.
    """

    service: str
    time_s: float
    signals: Signals
    variants: dict[str, VariantObservation]
    errors: list[str] = field(default_factory=list)
    pods: list[PodObservation] = field(default_factory=list)
    history_s: float | None = None
    failed_optional: list[str] = field(default_factory=list)
    pools: dict[str, PoolObservation] = field(default_factory=dict)


@dataclass(frozen=True)
class RateForecast:
    """A request-rate forecast path, one point per forecast step.

    Attributes:
        times_s: end time of each step, seconds (the loop's clock), ascending.
        mean_rps: forecast mean, requests/s.
        upper_rps: 95th percentile (upper end of the central 90 % interval), requests/s; NaN while
            the interval is unknown.
    """

    times_s: tuple[float, ...]
    mean_rps: tuple[float, ...]
    upper_rps: tuple[float, ...]


@dataclass
class ServiceEstimate:
    """Inputs to a controller for one service at one tick.

    Attributes:
        signals: observed plus derived signals; None = unknown.
        idle: True when the counters show no traffic (no request finished, and none counted arriving or
            shed at the gateway) and nothing in flight; False when any does; None when unknown
            (``autoscaler.loop.estimate``).
        weights: variant -> capacity of one replica, requests/s.
        capacity_rps: capacity of ready + starting replicas, requests/s.
        ready_capacity_rps: capacity of ready replicas only, requests/s.
        starting: replicas still provisioning, all variants.
        pods: per-pod gauges of the ready pods, as observed (for per-pod baselines).
        warnings: values rejected as absurd (see the module docstring).
        history_s: how far back the source holds samples, seconds (None: unknown).
        rate_forecast: the forecast stage's request-rate path over the controller's horizon, None
            when no forecast stage runs or it has no data yet.
        pools: role -> the service's prefill or decode pool as observed (``PoolObservation``, its
            signals sanitized as the service's); empty without roles.
        pool_weights: pool variant -> one replica's capacity, requests/s of the service's mix
            (``models.capacity_roles``; the loop's ``pool_weights``); empty without roles.
        arrivals_inferred: ``signals.arrival_rate_rps`` was inferred from the completions and the held
            requests (``autoscaler.loop.estimate.ArrivalInference``: no gateway counter), not counted.
    """

    service: str
    time_s: float
    signals: Signals
    variants: dict[str, VariantObservation]
    weights: dict[str, float]
    idle: bool | None
    capacity_rps: float
    ready_capacity_rps: float
    starting: int
    errors: list[str] = field(default_factory=list)
    pods: list[PodObservation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    history_s: float | None = None
    rate_forecast: RateForecast | None = None
    pools: dict[str, PoolObservation] = field(default_factory=dict)
    pool_weights: dict[str, float] = field(default_factory=dict)
    arrivals_inferred: bool = False

    @property
    def current(self) -> dict[str, int]:
        """variant -> ready + starting replicas."""
        return {name: v.current for name, v in self.variants.items()}

    @property
    def pool_current(self) -> dict[str, int]:
        """pool variant -> ready + starting replicas, every pool's (empty without roles)."""
        return {name: n for pool in self.pools.values() for name, n in pool.current.items()}
