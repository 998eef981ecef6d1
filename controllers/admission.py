"""Admission policies: each tick, the gateway's threshold per priority (``Decision.admission``).

A threshold is the longest estimated queue wait, seconds, a request of that priority may be admitted
to at the gateway; None is no limit (``autoscaler.simulator.gateway`` says how the wait is estimated
and what happens above it). Each priority has a *wait budget*: ``wait_fraction`` of its class's TTFT
objective (``critical`` and ``standard`` are interactive, ``sheddable`` batch), the wait past which a
request is unlikely to meet its TTFT once prefilled. Both policies run beside any scaling controller
(the anchors' included) and read only the estimate's gateway signals (``autoscaler.adapters.simulator``):

- ``pid``: per priority, a PI law on its queue wait (the larger of the mean wait of its requests
  dispatched over the last minute and the wait its queue implies at the rate it is dispatched,
  ``PrioritySignals.queue_wait_s``: an EPP exports both, not its oldest request's wait) against its
  budget: with
  ``e = wait / budget - 1`` clipped to [-1, 3], ``threshold = budget x (1 - kp e - ki integral(e))``
  within ``[0, max_budgets x budget]``; the integral stops where the threshold would leave that range
  (anti-windup). A wait that is unknown (no gateway data) holds the threshold.
- ``mpc``: the plan's balance for the coming tick, served highest priority first: the capacity of
  the ready replicas at the interactive SLO (``ServiceEstimate.ready_capacity_rps``) goes to each
  priority's demand (its arrival rate over the last minute, retries included, plus its queue over
  ``DRAIN_S``) from the top down; a priority short of less than ``shed_tolerance`` of its demand is
  left unlimited, one short of more than ``1 - shed_tolerance`` gets 0 (nothing that would wait),
  and one in between its wait budget (what can be served in time is, the rest is shed). Shedding a
  request costs more the higher its priority, so the cheapest shed is always the lowest priority's;
  a request continuing a workflow in progress is dearer than a new one of its priority, which the
  gateway honours by deferring it instead of shedding it and dispatching it first.

Beside the thresholds, ``concurrency_budget`` gives each replica's ITL budget: the requests in flight
it carries at its ITL bound, which the gateway's concurrency detector holds it to (docs/admission.md,
"The ITL budget"). From the fleet file alone it is configured once; ``learned_budget`` corrects it by
what a planning controller learned of each variant (its profile's speed and its capacity multiple,
``models.learning``), which the controller publishes with its thresholds (``Decision.itl_budget``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from autoscaler.workload.types import BATCH, INTERACTIVE, PRIORITIES
from models.capacity import (
    Memo,
    ReplicaSpec,
    RequestMix,
    concurrency_at,
    mix_key,
    rate_at_concurrency,
    replica_capacity,
    service_mix,
    tokens_in_flight_at,
)

if TYPE_CHECKING:
    from autoscaler.config import AdmissionConfig, EngineConfig, GatewayConfig, Service
    from autoscaler.state import ServiceEstimate

PRIORITY_CLASS = {"sheddable": BATCH, "standard": INTERACTIVE, "critical": INTERACTIVE}
"""The SLO class of each priority's requests (``autoscaler.workload.classes``: batch units are sheddable)."""

DRAIN_S = 60.0
"""Seconds over which the ``mpc`` policy counts a priority's queue as demand (the MPC's ``DRAIN_S``)."""

ERROR_CLIP = (-1.0, 3.0)


def wait_budgets(svc: Service, cfg: AdmissionConfig) -> dict[str, float]:
    """priority -> its wait budget, seconds: ``wait_fraction`` x its class's TTFT objective."""
    return {p: cfg.wait_fraction * svc.slo[PRIORITY_CLASS[p]].ttft_s for p in PRIORITIES}


class AdmissionPolicy(ABC):
    """Sets a service's admission thresholds each tick from its estimate (pure of I/O).

    Args:
        cfg: the fleet file's ``controller.admission_settings``.
    """

    name = ""

    def __init__(self, cfg: AdmissionConfig) -> None:
        self.cfg = cfg
        self.last: dict[str, dict[str, float | None]] = {}

    @abstractmethod
    def thresholds(self, est: ServiceEstimate, svc: Service) -> dict[str, float | None]:
        """priority -> threshold, seconds (None: no limit), for ``svc`` this tick."""


class PIDAdmission(AdmissionPolicy):
    """The ``pid`` policy (module docstring)."""

    name = "pid"

    def __init__(self, cfg: AdmissionConfig) -> None:
        super().__init__(cfg)
        self.integral: dict[tuple[str, str], float] = {}
        self.last_time: dict[str, float] = {}

    def thresholds(self, est: ServiceEstimate, svc: Service) -> dict[str, float | None]:
        """One PI step per priority on its gateway wait (module docstring)."""
        cfg = self.cfg
        dt = est.time_s - self.last_time.get(svc.name, est.time_s)
        self.last_time[svc.name] = est.time_s
        last = self.last.setdefault(svc.name, {})
        out: dict[str, float | None] = {}
        for p, budget in wait_budgets(svc, cfg).items():
            gateway = est.signals.priority(p)
            queued = gateway.queue_wait_s
            if queued is None:  # no gateway data: hold what is in force
                out[p] = last.get(p)
                continue
            wait = max(queued, gateway.wait_s or 0.0)
            e = min(max(wait / budget - 1.0, ERROR_CLIP[0]), ERROR_CLIP[1])
            key = (svc.name, p)
            integral = self.integral.get(key, 0.0) + e * dt
            if cfg.ki > 0:  # anti-windup: the integral alone keeps the threshold within [0, max]
                integral = min(max(integral, (1.0 - cfg.max_budgets) / cfg.ki), 1.0 / cfg.ki)
            self.integral[key] = integral
            u = cfg.kp * e + cfg.ki * integral
            out[p] = min(max(budget * (1.0 - u), 0.0), cfg.max_budgets * budget)
        self.last[svc.name] = out
        return out


class PlanAdmission(AdmissionPolicy):
    """The ``mpc`` policy (module docstring)."""

    name = "mpc"

    def thresholds(self, est: ServiceEstimate, svc: Service) -> dict[str, float | None]:
        """The capacity-vs-demand balance of the coming tick, highest priority first (module docstring)."""
        demand = priority_demand(est)
        if demand is None:  # no gateway data: hold what is in force
            return dict(self.last.get(svc.name, {}))
        out = balance(demand, est.ready_capacity_rps, wait_budgets(svc, self.cfg), self.cfg.shed_tolerance)
        self.last[svc.name] = out
        return out


def priority_demand(est: ServiceEstimate) -> dict[str, float] | None:
    """priority -> its demand, requests/s: its arrival rate at the gateway over the window (retries
    included) plus its queue there over ``DRAIN_S``; None when the gateway reports no arrivals for
    some priority, or a rate or queue that is not a finite number >= 0 (unknown, never read as 0). A
    queue is 0 only without flow control (no dispatch rate either: an EPP without it exports only
    the arrivals and holds nothing); under flow control a queue that is missing is unknown."""
    sig = est.signals
    demand: dict[str, float] = {}
    for p in PRIORITIES:
        ps = sig.priority(p)
        rate, queue = ps.arrival_rate_rps, ps.queue
        if queue is None and ps.dispatched_rps is None:
            queue = 0.0
        if rate is None or queue is None or not (0 <= rate < math.inf and 0 <= queue < math.inf):
            return None
        demand[p] = rate + queue / DRAIN_S
    return demand


def new_demand_rps(est: ServiceEstimate, arrival_rps: float, client_retries: int) -> float:
    """Requests/s of new demand in ``arrival_rps`` (the gateway's arrivals over the controller's window,
    retries included): ``arrival_rps x (1 - r / (r + 1) x shed / attempts)``, with ``shed`` the attempts
    the gateway shed and ``attempts`` the attempts it received, all priorities, both over the gateway's
    per-priority window (``autoscaler.promql.GATEWAY_WINDOW_S``, 60 s, or the controller's window if
    shorter), and ``r`` = ``client_retries``. The shed share is taken over the window both are counted
    over, so a controller window longer than the gateway's (the PID's 300 s; ``mpc:window=300``) does
    not take a 60-s shed rate off a 300-s arrival rate (before: 300-s arrivals of 20 req/s, 60-s shed
    of 15 of 40 attempts, read 20 - 10 = 10 req/s new, where the window's share gives 15). With both
    windows the same (the MPC's 60 s) it is ``arrival_rps - r / (r + 1) x shed``.

    A client that sends a shed request again up to ``r`` times sends at most ``r + 1`` attempts, ``r``
    of them retries, so at least ``r / (r + 1)`` of the attempts shed come back as arrivals (all of
    them when a retry is admitted): subtracting that share keeps the estimate at or above the new
    requests, never below. Counted whole, a surge that is shed arrives again and again, and the
    replicas sized on it (and held on it for the MPC's hold) serve a demand that is not there.
    ``arrival_rps`` unchanged when any priority's shed or attempt rate is unknown or not finite (no
    gateway data: never read as 0), when no attempt was counted over the gateway's window (shed ones
    arrived before it: the share is unknown), or ``r`` is 0. A share above 1 (deferred attempts shed at
    their deadline after arriving before the window) counts as 1.
    """
    if client_retries <= 0:
        return arrival_rps
    shed = [est.signals.priority(p).shed_rps for p in PRIORITIES]
    attempts = [est.signals.priority(p).arrival_rate_rps for p in PRIORITIES]
    if any(x is None or not 0 <= x < math.inf for x in (*shed, *attempts)):
        return arrival_rps
    total = float(sum(s for s in shed if s is not None))
    counted = float(sum(a for a in attempts if a is not None))
    if total == 0 or counted <= 0:
        return arrival_rps
    share = min(total / counted, 1.0)
    return max(arrival_rps * (1.0 - client_retries / (client_retries + 1) * share), 0.0)


def balance(demand: Mapping[str, float], capacity_rps: float, budgets: Mapping[str, float],
            tol: float) -> dict[str, float | None]:
    """priority -> threshold, seconds (None: no limit), with ``capacity_rps`` (requests/s) served to
    each priority's ``demand`` (requests/s) from the top down: a priority short of at most ``tol`` of
    its demand is unlimited, one short of at least ``1 - tol`` gets 0, one in between its wait
    budget (``budgets``, seconds; module docstring, ``mpc``)."""
    left = capacity_rps
    out: dict[str, float | None] = {}
    for p in reversed(PRIORITIES):
        served = min(demand[p], max(left, 0.0))
        left -= served
        short = 1.0 - served / demand[p] if demand[p] > 0 else 0.0
        out[p] = None if short <= tol else (0.0 if short >= 1.0 - tol else budgets[p])
    return out


@dataclass(frozen=True)
class ItlBudget:
    """One variant's ITL budget (``itl_budgets``).

    Attributes:
        itl_rps: the rate at which one replica reaches its ITL bound (``CapacityBounds.itl_rps``), req/s.
        in_flight: requests in flight on it at that rate (``models.capacity.concurrency_at``).
        budget: ``in_flight`` whole, at least 1 and at most ``max_num_seqs`` (more would wait in the
            engine's queue, where priorities are not seen).
        servable: the variant serves the typical request within the SLO at all (capacity above 0).
    """

    itl_rps: float
    in_flight: float
    budget: int
    servable: bool


_BUDGETS = Memo(4096)
"""``itl_budgets``' memo: a pure function of the variants' specs (slowed), the interactive SLO and the
mix, ~50-70 ms a service (two bisections per variant); the MPC asks it per service and speed factor,
so a daemon taking over N services on the same variants computed the same budgets N times (issue 35)."""


def itl_budgets(svc: Service, engine: EngineConfig, slowdown: Mapping[str, float] | None = None,
                mix: RequestMix | None = None) -> dict[str, ItlBudget]:
    """variant -> its ITL budget on ``mix`` (default: the service's ``typical_request``) and the
    interactive SLO, each variant's profile ``slowdown[variant]`` times slower where given (a learned
    speed factor, > 0).

    Raises:
        ValueError: no variant serves the mix within the interactive SLO
            (``models.capacity.replica_capacity``: 0 req/s), or as that function.
    """
    what = (f"its typical_request ({svc.typical_request.input_tokens:g} / {svc.typical_request.output_tokens:g} "
            "tokens)" if mix is None else f"the mix (means {mix.mean_input:.0f} / {mix.mean_output:.0f} tokens)")
    mix, slo = service_mix(svc) if mix is None else mix, svc.slo[INTERACTIVE]
    specs = {}
    for v in svc.variants:
        spec = ReplicaSpec.of(v, engine)
        alpha = (slowdown or {}).get(v.name, 1.0)
        if alpha != 1.0:
            spec = replace(spec, profile=spec.profile.slowed(alpha))
        specs[v.name] = spec
    key = (tuple(specs.items()), slo.ttft_s, slo.itl_s, mix_key(mix))
    kept = _BUDGETS.get(key)
    if isinstance(kept, dict):
        out: dict[str, ItlBudget] = dict(kept)
    else:
        out = {}
        for name, spec in specs.items():
            bounds = replica_capacity(spec, mix, slo.ttft_s, slo.itl_s)
            in_flight = concurrency_at(spec, mix, bounds.itl_rps)
            out[name] = ItlBudget(bounds.itl_rps, in_flight,
                                  max(1, min(engine.max_num_seqs, math.floor(in_flight))), bounds.rps > 0)
        _BUDGETS.put(key, dict(out))
    if not any(b.servable for b in out.values()):
        raise ValueError(f"service {svc.name}: no variant serves {what} within the interactive SLO "
                         "(capacity 0 req/s): no ITL budget")
    return out


def learned_budget(budget: ItlBudget, kappa: float, max_num_seqs: int) -> int:
    """The ITL budget of a replica that serves ``kappa`` (> 0) times the model's capacity at the same
    latencies (``models.learning``: it behaves as the model's replica at ``rate / kappa``), requests:
    by Little's law its requests in flight at its ITL bound are ``kappa`` times the model's
    (``ItlBudget.in_flight``), whole, at least 1 and at most ``max_num_seqs`` (as ``itl_budgets``).

    Raises:
        ValueError: ``kappa`` not a finite number > 0.
    """
    if not (math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"capacity multiple must be a finite number > 0, got {kappa!r}")
    return max(1, min(max_num_seqs, math.floor(budget.in_flight * kappa + 1e-9)))


def pool_budget(budgets: Mapping[str, ItlBudget]) -> int:
    """One budget for every replica of a pool (the EPP's detector takes one number): the fewest of
    the servable variants' (``itl_budgets`` guarantees one)."""
    return min(b.budget for b in budgets.values() if b.servable)


def concurrency_budget(svc: Service, engine: EngineConfig, setting: int | str) -> dict[str, int]:
    """variant -> most requests in flight per replica (``GatewayConfig.max_concurrency``): a number
    for every variant; ``auto`` each variant's own ITL budget (``itl_budgets``); ``auto-min`` the
    pool's (``pool_budget``) for all.

    Raises:
        ValueError: with ``auto`` or ``auto-min``, as ``itl_budgets``.
    """
    if isinstance(setting, int):
        return {v.name: setting for v in svc.variants}
    budgets = itl_budgets(svc, engine)
    if setting == "auto":
        return {name: b.budget for name, b in budgets.items()}
    return dict.fromkeys(budgets, pool_budget(budgets))


def token_charge(prompt: np.ndarray, cached: np.ndarray, g: GatewayConfig) -> np.ndarray:
    """Tokens the EPP's in-flight counter charges requests of ``prompt`` tokens of which ``cached`` are
    in the chosen replica's prefix cache (``GatewayConfig``, ``concurrency_mode``): llm-d-router
    v0.10.0 ``inflight-load-producer`` (``producer.go`` ``estimateRequestTokens``; ``token_estimator.go``
    ``EstimateOutput``, its 1.5 default ratio is ``output_ratio``'s), the prompt as its token-producer
    counts it (``ceil(prompt x prompt_bytes_per_token / 4)``: ``tokenizer/estimate.go`` packs 4 bytes
    per token), less the cached part, plus the output estimate on the whole prompt; tokens (whole)."""
    est = np.ceil(np.asarray(prompt, dtype=float) * g.prompt_bytes_per_token / 4.0 - 1e-9)
    charge = np.maximum(est - np.asarray(cached, dtype=float), 0.0)
    if g.output_estimate:
        out = np.floor(est * g.output_ratio + 0.5)  # Go's math.Round: half away from zero
        if g.max_estimated_output_tokens is not None:
            out = np.minimum(out, g.max_estimated_output_tokens)
        charge = charge + out
    return charge


def releases_at_first_token(g: GatewayConfig, streaming: bool) -> bool:
    """The EPP releases a request's tokens at its first token: without the output estimate, on a
    streaming response (its first body chunk); else at its last (``producer.go`` ``ResponseBody``)."""
    return streaming and not g.output_estimate


def token_budget(svc: Service, engine: EngineConfig, g: GatewayConfig, streaming: bool,
                 discount_prefix: bool) -> dict[str, int]:
    """variant -> most tokens in flight per replica (``GatewayConfig.max_token_concurrency``): a number
    for every variant; ``auto`` each variant's tokens in flight at its ITL bound's rate
    (``ItlBudget.itl_rps``), or the lower rate at which ``max_num_seqs`` requests are in flight (as
    the request budget's cap), on the service's ``typical_request`` mix, charged and released as the
    EPP's counter does (``token_charge``, ``releases_at_first_token``; ``discount_prefix``: the mix's
    prefix hits are not charged, as under ``router: prefix_affinity``) by Little's law
    (``models.capacity.tokens_in_flight_at``), whole, at least 1; ``auto-min`` the fewest of the
    servable variants' for all.

    Raises:
        ValueError: with ``auto`` or ``auto-min``, as ``itl_budgets``.
    """
    setting = g.max_token_concurrency
    if isinstance(setting, int):
        return {v.name: setting for v in svc.variants}
    budgets = itl_budgets(svc, engine)
    mix: RequestMix = service_mix(svc)
    cached = mix.input_tokens - mix.uncached if discount_prefix else np.zeros_like(mix.input_tokens)
    charge = token_charge(mix.input_tokens, cached, g)
    first = releases_at_first_token(g, streaming)
    out = {}
    for v in svc.variants:
        spec, b = ReplicaSpec.of(v, engine), budgets[v.name]
        # past max_num_seqs in flight the rest would wait in vLLM's queue, as for the request budget
        rate = rate_at_concurrency(spec, mix, engine.max_num_seqs, b.itl_rps)
        out[v.name] = max(1, math.floor(tokens_in_flight_at(spec, mix, rate, charge, first)))
    if setting == "auto":
        return out
    return dict.fromkeys(out, min(out[name] for name, b in budgets.items() if b.servable))


POLICIES = {"pid": PIDAdmission, "mpc": PlanAdmission}


def build_admission(mode: str, cfg: AdmissionConfig) -> AdmissionPolicy | None:
    """The policy named ``mode`` (``none``, ``pid``, ``mpc``); None for ``none``.

    Raises:
        ValueError: an unknown mode.
    """
    if mode == "none":
        return None
    if mode not in POLICIES:
        raise ValueError(f"unknown admission policy '{mode}' (known: none, {', '.join(POLICIES)})")
    return POLICIES[mode](cfg)

