"""Fleet-file section ``simulator``: the embedded simulator's router, clients, gateway and injected faults."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from autoscaler.config.base import MAX_INT, Strict


class Crash(Strict):
    """One injected replica crash."""

    time_s: float = Field(ge=0)
    service: str | None = None
    variant: str


class Unschedulable(Strict):
    """A window in which no new pod of ``variant`` can be placed (no free GPU of its kind): a replica
    asked for then stays Pending until ``end_s`` and only then starts (its start-up delay counts from
    there); ``end_s`` None: for the rest of the run."""

    variant: str
    service: str | None = None
    start_s: float = Field(default=0.0, ge=0)
    end_s: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _order(self) -> Unschedulable:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s ({self.end_s:g}) must be after start_s ({self.start_s:g})")
        return self


class LinkSlowdown(Strict):
    """A window in which a service's KV-transfer link (``Roles.kv_transfer``) is slower: a prompt's KV
    read that starts inside ``[start_s, end_s)`` moves at ``bandwidth_gbps / bandwidth_factor`` and
    waits ``latency_s + extra_latency_s`` (a congested or degraded RDMA fabric, a NIC fallen back to
    TCP). A read keeps the time it was given when it started. Overlapping windows compose: their
    factors multiply, their extra latencies add. ``end_s`` None: for the rest of the run."""

    service: str | None = None
    start_s: float = Field(default=0.0, ge=0)
    end_s: float | None = Field(default=None, ge=0)
    bandwidth_factor: float = Field(default=1.0, ge=1, le=1000)
    extra_latency_s: float = Field(default=0.0, ge=0, le=60)

    @model_validator(mode="after")
    def _window(self) -> LinkSlowdown:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s ({self.end_s:g}) must be after start_s ({self.start_s:g})")
        if self.bandwidth_factor == 1.0 and self.extra_latency_s == 0.0:
            raise ValueError("a link slowdown needs bandwidth_factor > 1 or extra_latency_s > 0")
        return self

    def active(self, t: float) -> bool:
        """Whether ``t`` (seconds) is inside the window."""
        return self.start_s <= t and (self.end_s is None or t < self.end_s)


class ClientConfig(Strict):
    """How the simulated clients retry: by default not at all (each trace request is one attempt);
    the backoff defaults are the OpenAI Python client's (a 0.5-s first delay doubling to at most 8 s,
    each delay shortened by up to a quarter at random), and so is ``max_retries: 2``, which the
    surge scenario sets.

    A request whose attempt was shed (HTTP 429), timed out (``client_timeout_s``) or failed on a
    crashed replica is sent again after ``min(backoff_base_s x 2^k, backoff_cap_s) x (1 - jitter x u)``
    (k = retries so far, u uniform in [0, 1)), up to ``max_retries`` times; every attempt is counted
    and the request ends with its last attempt.

    ``streaming`` clients ask for a stream of tokens (``stream=True``). The OpenAI client's timeout is
    httpx's, which bounds each read, not the whole response: a streaming attempt times out only while
    no token has come (its first token cancels ``client_timeout_s``; a gap between tokens never
    approaches it), while a non-streaming one (the default) receives nothing until its last token, so
    ``client_timeout_s`` bounds its whole generation.
    """

    max_retries: int = Field(default=0, ge=0, le=20)
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_cap_s: float = Field(default=8.0, gt=0)
    jitter: float = Field(default=0.25, ge=0, le=1)
    streaming: StrictBool = False


class GatewayConfig(Strict):
    """The simulated gateway's flow control, in force while an admission policy runs (``--admission
    pid|mpc``); without one, requests go straight to the router, as through a plain proxy.

    The gateway holds a queue per priority and dispatches, highest priority first (within a priority,
    requests of workflows already in progress first, then first come first served). When it may
    dispatch depends on ``saturation``, both rules the endpoint picker's utilization detector with its
    defaults (``queue_depth_threshold`` 5 waiting requests, ``kv_cache_threshold`` 0.8 KV usage):

    - ``pool`` (default; GIE v1.5+ and llm-d-router v0.10.0, ``utilization-detector``): the pool's
      saturation is the mean over its ready replicas of ``max(waiting / queue_depth_threshold,
      kv usage / kv_cache_threshold)``; while it is >= 1 every band is held, below it the router picks
      among all ready replicas;
    - ``pod`` (GIE v1.0-v1.3): dispatch while any replica is not saturated (at most
      ``queue_depth_threshold`` waiting and KV usage at most ``kv_cache_threshold``), to one of those;
      a pool mostly full still takes work through its one free replica.

    - ``concurrency`` (llm-d-router v0.9.0+, ``concurrency-detector`` in its ``requests`` mode): a
      replica's load is its requests in flight (dispatched and not yet finished, waiting or running);
      the pool's saturation is their sum over the ready replicas' ``max_concurrency`` summed; the
      router picks among the replicas below ``max_concurrency x (1 + headroom)`` (the detector's
      filter). ``max_concurrency`` ``auto`` holds each replica to the requests in flight at its ITL
      bound's rate (``models.capacity.itl_concurrency``, the service's ``typical_request`` mix,
      interactive SLO; at most ``max_num_seqs``: ``controllers.admission.concurrency_budget``),
      each variant its own: the EPP's detector takes one number for every
      endpoint, so on a real pool this needs a pool per GPU generation (docs/admission.md);
      ``auto-min`` the fewest over the variants for all, which one pool can express.
    - ``concurrency`` with ``concurrency_mode: tokens`` or ``hybrid`` (llm-d-router v0.10.0, commit
      71f4f09, ``pkg/epp/framework/plugins/flowcontrol/saturationdetector/concurrency/{config,detector}.go``,
      the counts from ``.../requestcontrol/dataproducer/inflightload/producer.go``): a replica's load is
      also its tokens in flight, what the EPP's ``inflight-load-producer`` charged the requests it
      dispatched there. A request's charge is its prompt as the EPP counts it,
      ``ceil(input_tokens x prompt_bytes_per_token / 4)`` (the EPP's default ``estimate``
      token-producer packs 4 prompt bytes per token; the default 4 bytes per engine token charges
      the true count, as a ``vllm`` token-producer does; the simulator has no text, so the ratio is a
      setting, not measured), less the blocks the chosen replica's prefix cache already holds under
      ``router: prefix_affinity`` (the producer's approximate-prefix discount; the simulator reads the
      replica's own cache, an exact index); with ``output_estimate`` (the producer's
      ``addEstimatedOutputTokens``) plus ``min(round(prompt x output_ratio), max_estimated_output_tokens)``
      (no client ``max_tokens`` cap: the traces carry none). Without the output estimate, a streaming
      client's charge is released at its first token (the producer's ``StartOfStream``), a
      non-streaming one's at its last (the one response body); with it, at the last token; a request
      that fails, times out or is aborted is released then. ``tokens``: saturation = tokens in flight
      over ``max_token_concurrency`` summed over the ready replicas, a replica a candidate while its
      tokens are below ``max_token_concurrency x (1 + headroom)`` (truncated, as the plugin's int64);
      ``hybrid``: saturation = the mean over the replicas of ``max(requests / max_concurrency, tokens /
      max_token_concurrency)``, a candidate while below both limits. A replica under its limit takes
      a request whatever its charge (the plugin tests the load before adding to it), so one may go
      past its limit by one request. ``max_token_concurrency`` ``auto`` holds each replica to the
      tokens in flight at its ITL bound's rate (or the lower one at which ``max_num_seqs`` requests
      are in flight) under that same charge and release (``controllers.admission.token_budget``);
      ``auto-min`` the fewest for all. The checks are the
      plugins' (``maxTokenConcurrency`` > 0, ``outputRatio`` and ``maxEstimatedOutputTokens`` >= 0;
      their defaults 1,000,000 tokens, 1.5, none); a mode other than ``requests`` needs
      ``saturation: concurrency``. Measured against the ``requests`` mode on surge-long and
      surge-short: docs/admission.md, "The detector's ``tokens`` and ``hybrid`` modes".

    Each priority band is dispatched only while the saturation is below its ceiling
    (``usage_limit``): ``static`` (the EPP's default) 1.0 for every band; ``priority_holdback``
    (llm-d-router v0.10.0 ``priority-holdback-policy``, ``linear`` shape, ``rank`` domain) from
    ``max_ceiling`` for the highest priority down to ``min_ceiling`` for the lowest, in equal steps,
    so the lowest priorities are held first as the pool fills. A band at or above its ceiling holds
    that band and every lower one (the EPP's head-of-line blocking).

    A request that has waited ``max_wait_s`` is dispatched before any other
    priority (so the lowest is never starved past it) when its band is below its ceiling. A request
    above its priority's admission threshold is deferred when it continues a workflow in progress
    (kept, shed if still queued ``defer_s`` later) and shed (HTTP 429) otherwise.

    ``admitter: probabilistic`` adds llm-d-router v0.10.0's ``probabilistic-admitter`` (off by
    default, as in the EPP; ``pkg/epp/framework/plugins/requestcontrol/admitter/probabilisticadmitter``):
    each request flow control dispatches whose ``InferenceObjective`` priority is negative is
    rejected (HTTP 500, counted shed) with probability ``min(sat^admitter_power x admitter_k, 1)``,
    ``sat`` the mean over the ready replicas of ``max(waiting / admitter_queue_depth_threshold, kv
    usage / admitter_kv_cache_threshold)``: the plugin's own saturation, whatever ``saturation`` says.
    The defaults and checks are the plugin's (5, 0.8, 5, 300; each > 0), so every such request is
    rejected from ``sat`` ~0.32 on. Which priorities are negative: a class whose threshold is 0
    (``adapters.gateway_api``: its rank minus 3), and ``sheddable`` always with
    ``sheddable_objective: negative`` (its objective published with a negative priority, by hand:
    the adapter publishes the rank, 0, while the threshold is not 0); ``rank`` (default) is the adapter's.

    ``continuation_objective`` is the objective a request continuing a workflow in progress (one of
    its workflow's requests already went on to a replica when it is sent) is sent under, as its client
    picks it with the ``x-llm-d-inference-objective`` header (llm-d-router v0.10.0
    ``pkg/epp/metadata/consts.go``, ``ObjectiveKey``): ``same`` (default) its class's, as for a new
    request, so the admitter rejects it as readily; ``protected`` one of priority >= 0 (e.g. its class's
    rank), which the admitter always passes (``Admit`` returns before reading any metric). Flow
    control orders it as before, within its class ahead of the new requests. Only the admitter reads
    it: with ``admitter: none`` both are the same run.

    ``budget_refresh_s`` (default None: never) makes the concurrency detector follow the ITL budget
    the controller publishes (``Decision.itl_budget``, the MPC's with ``learn``): the latest published
    budget replaces each variant's ``max_concurrency`` (``auto-min``: the fewest published, for all)
    at most once every ``budget_refresh_s`` seconds, the filter moving with it. The EPP reads
    ``maxConcurrency`` from its configuration once, at its start (llm-d-router v0.10.0 concurrency
    detector), so a real pool follows only as an operator or a sync job re-rolling the EPP with the
    admission document's budget would, which is what this models; it needs ``saturation:
    concurrency``, ``concurrency_mode: requests`` and ``max_concurrency`` ``auto`` or ``auto-min``
    (the budget starts there).
    """

    saturation: Literal["pool", "pod", "concurrency"] = "pool"
    queue_depth_threshold: int = Field(default=5, ge=0)
    kv_cache_threshold: float = Field(default=0.8, gt=0, le=1)
    max_concurrency: int | Literal["auto", "auto-min"] = "auto"
    concurrency_mode: Literal["requests", "tokens", "hybrid"] = "requests"
    max_token_concurrency: int | Literal["auto", "auto-min"] = "auto"
    output_estimate: StrictBool = False
    output_ratio: float = Field(default=1.5, ge=0)
    max_estimated_output_tokens: int | None = Field(default=None, ge=0)
    prompt_bytes_per_token: float = Field(default=4.0, gt=0)
    headroom: float = Field(default=0.0, ge=0)
    usage_limit: Literal["static", "priority_holdback"] = "static"
    min_ceiling: float = Field(default=0.8, ge=0, lt=1)
    max_ceiling: float = Field(default=1.0, gt=0, le=1)
    max_wait_s: float = Field(default=120.0, gt=0)
    defer_s: float = Field(default=30.0, gt=0)
    admitter: Literal["none", "probabilistic"] = "none"
    admitter_queue_depth_threshold: int = Field(default=5, gt=0)
    admitter_kv_cache_threshold: float = Field(default=0.8, gt=0)
    admitter_power: float = Field(default=5.0, gt=0)
    admitter_k: float = Field(default=300.0, gt=0)
    sheddable_objective: Literal["rank", "negative"] = "rank"
    continuation_objective: Literal["same", "protected"] = "same"
    budget_refresh_s: float | None = Field(default=None, gt=0)

    @field_validator("max_concurrency", "max_token_concurrency", mode="before")
    @classmethod
    def _budget(cls, value: object) -> object:
        # one message for the union (pydantic's names its int branch 'constrained-int')
        if value in ("auto", "auto-min") or (type(value) is int and 0 < value <= MAX_INT):
            return value
        raise ValueError(f"a positive integer, auto or auto-min is expected, got {value!r}")

    @model_validator(mode="after")
    def _ceilings_ordered(self) -> GatewayConfig:
        if self.concurrency_mode != "requests" and self.saturation != "concurrency":
            raise ValueError(f"concurrency_mode {self.concurrency_mode} is the concurrency detector's: it needs "
                             f"saturation concurrency, not {self.saturation}")
        if self.budget_refresh_s is not None and (self.saturation != "concurrency"
                                                  or self.concurrency_mode != "requests"
                                                  or self.max_concurrency not in ("auto", "auto-min")):
            raise ValueError("budget_refresh_s follows the learned ITL budget of the concurrency detector: it needs "
                             "saturation concurrency, concurrency_mode requests and max_concurrency auto or auto-min")
        if self.usage_limit == "priority_holdback" and self.saturation == "pod":
            raise ValueError("usage_limit priority_holdback needs a pool saturation (pool or concurrency), not pod")
        if self.usage_limit == "priority_holdback" and self.min_ceiling >= self.max_ceiling:
            # the plugin's own check (llm-d-router v0.10.0 usagelimits/priorityholdback/config.go)
            raise ValueError(f"min_ceiling {self.min_ceiling:g} must be below max_ceiling {self.max_ceiling:g}")
        return self

    def ceilings(self, levels: int) -> list[float]:
        """The usage ceiling of each of ``levels`` priority levels, lowest first (class docstring)."""
        if self.usage_limit == "static" or levels == 1:
            return [1.0] * levels
        lo, hi = self.min_ceiling, self.max_ceiling
        return [lo + i * (hi - lo) / (levels - 1) for i in range(levels)]


class SimulatorConfig(Strict):
    """Embedded fleet simulator settings.

    Attributes:
        router: ``least_outstanding`` (default) or ``prefix_affinity``.
        client_timeout_s: an attempt still unfinished this long after it was sent fails: its client
            gave up (and retries, ``clients``), wherever it was (waiting at the gateway, queued on a
            replica, or running, which vLLM then aborts); a streaming client's attempt only while it
            has no token yet (``ClientConfig``). Default 600 s, the 10-minute read timeout of common
            LLM clients.
        scrape_interval_s: how often the simulated Prometheus samples every pod (seconds; a
            controller ticking faster is sampled at its own tick, as its anchor reads the pods).
        slowdown: variant name -> how many times longer its replicas' steps are than its profile says
            (a fault: GPUs slower than measured; the controllers still read the profile), in (0, 10];
        crashes: replica crashes to inject, as ``{time_s, variant}``; the oldest ready replica of
            that variant crashes.
        unschedulable: windows in which a variant's new pods stay Pending (``Unschedulable``).
        link_slowdowns: windows in which a service's prefill->decode KV link is slower
            (``LinkSlowdown``); the service needs ``roles``.
        termination_grace_s: Kubernetes' ``terminationGracePeriodSeconds`` (its default is 30 s): a
            replica removed by a scale-down still holding requests this long after is killed, and
            those requests fail (their clients retry). None (default): a removed replica finishes
            everything it holds first, as with a grace period longer than any generation.
        clients: how clients retry (``ClientConfig``).
        gateway: the gateway's flow control under an admission policy (``GatewayConfig``).
        pd_saturation_filter: opt-in, for a service with prefill/decode pools (default False: the
            router follows the plan's split whatever the pools' load). True: a fresh arrival's
            decode-or-aggregated pick passes a saturation filter first: a decode replica counts as
            saturated while every ready prefill replica is (its request would queue at the prefill
            pool), then the candidates saturated by ``GatewayConfig``'s per-pod rule are dropped; with
            none left, all (``FleetSimulator._route_pd``). So a burst past the prefill pool's saturation
            goes to the aggregated replicas (issue 34, docs/controllers.md).
        prefill_priority: opt-in, for a service with prefill/decode pools (default False: a prefill
            replica admits its waiting requests first come, first served, as vLLM's default
            ``--scheduling-policy fcfs``). True: a prefill replica admits its waiting requests highest
            ``Request.priority`` first, in arrival order within a priority, as vLLM's
            ``--scheduling-policy priority`` orders its waiting queue (``disagg.PrefillReplica``), so in a
            burst the sheddable (batch) requests wait behind the interactive ones (issue 34,
            docs/simulator.md, "Prefill queue in priority order").
    """

    router: Literal["least_outstanding", "prefix_affinity"] = "least_outstanding"
    client_timeout_s: float = Field(default=600.0, gt=0)
    scrape_interval_s: float = Field(default=15.0, gt=0, le=300.0)
    crashes: list[Crash] = Field(default_factory=list)
    unschedulable: list[Unschedulable] = Field(default_factory=list)
    link_slowdowns: list[LinkSlowdown] = Field(default_factory=list)
    termination_grace_s: float | None = Field(default=None, gt=0)
    slowdown: dict[str, Annotated[float, Field(gt=0, le=10)]] = Field(default_factory=dict)
    clients: ClientConfig = ClientConfig()
    gateway: GatewayConfig = GatewayConfig()
    pd_saturation_filter: StrictBool = False
    prefill_priority: StrictBool = False
