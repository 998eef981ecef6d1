"""What the loop's stages pass one another each tick: a source's observation of a service, and the
estimate that controllers read.

Every signal is ``float | None``: None means *unknown* (query failed, no data), never zero.

Signal names (per service; per variant the same names restricted to that variant's pods):
``request_rate_rps``, ``prompt_tokens_rps``, ``generation_tokens_rps`` (tokens/s),
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

from dataclasses import dataclass, field

SIGNALS = (
    "request_rate_rps",
    "prompt_tokens_rps",
    "generation_tokens_rps",
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


@dataclass
class VariantObservation:
    """Replica counts (from the actuator's view of the Deployment) and signals of one variant.

    ``counts_known`` False: the source could not tell the counts (every query that gives them
    failed, nothing known before); ``ready``/``starting`` are then 0 placeholders that must not be
    read as a count, and the loop holds the service.

    ``unavailable`` True: the variant's new pods cannot be placed (Pending past
    ``kubernetes.pending_timeout_s``, no GPU of its kind free); the loop then caps it at its ready
    replicas, so the controllers give its demand to the other variants, until the mark lifts.
    """

    ready: int
    starting: int
    draining: int = 0
    signals: dict[str, float | None] = field(default_factory=dict)
    counts_known: bool = True
    unavailable: bool = False

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
    """

    service: str
    time_s: float
    signals: dict[str, float | None]
    variants: dict[str, VariantObservation]
    errors: list[str] = field(default_factory=list)
    pods: list[PodObservation] = field(default_factory=list)
    history_s: float | None = None


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
        idle: True when the counters show no traffic and nothing in flight; None when unknown.
        weights: variant -> capacity of one replica, requests/s.
        capacity_rps: capacity of ready + starting replicas, requests/s.
        ready_capacity_rps: capacity of ready replicas only, requests/s.
        starting: replicas still provisioning, all variants.
        pods: per-pod gauges of the ready pods, as observed (for per-pod baselines).
        warnings: values rejected as absurd (see the module docstring).
        history_s: how far back the source holds samples, seconds (None: unknown).
        rate_forecast: the forecast stage's request-rate path over the controller's horizon, None
            when no forecast stage runs or it has no data yet.
    """

    service: str
    time_s: float
    signals: dict[str, float | None]
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

    @property
    def current(self) -> dict[str, int]:
        """variant -> ready + starting replicas."""
        return {name: v.current for name, v in self.variants.items()}
