"""Model-predictive control: every tick, plan replicas per variant over a horizon and apply the first step.

Each tick ``MPCController.decide`` builds one ``models.planning`` problem for the service and solves
it with HiGHS (``scipy.optimize.milp``; one service tuned for speed, ``PlanProblem.tuned``; with
``warm=1`` through highspy from the last tick's plan moved on, ``PlanProblem.start``), within the
fleet's ``gpu_limits``; with several services,
``prepare`` solves them all in one problem first (a quota one service fills is what another does
without) and each ``decide`` reads its part:

- demand per step (requests/s): the load forecast's ``quantile`` (the forecast stage's path, its
  90 % interval read as normal: ``mean + z(q) / z(0.95) x (upper - mean)``), or with
  ``hedge=measured`` the mean path times a hedge measured on this service's own forecast errors
  (``measured_path``), or with ``hedge=adaptive`` the band read at the z that would have covered
  ``coverage`` of the last 20 minutes' plan steps past their floor (``band_scores``,
  ``conformal_z``); never below the highest arrival rate of the last ``hold_s`` (300 s, or with
  ``hedge=measured`` ``measured_hold``'s: a forecast that lags a rise must not cancel it; a fall is
  followed once it has lasted the hold), plus today's queue spread over the steps until new
  replicas have run ``DRAIN_S``, at most doubling the demand (``backlog_rps``; with ``drain=1``, opt-in,
  from the first step a replica can serve it, ``drain_start``, not from now); while that queue drains,
  the forecast's level above the demand held is left out (``drain_excess``: the forecast is fitted on
  completions, which count the drain a second time), and for ``drain_memory_s`` after (the forecast's
  rate window and steps still hold the drain), and no ready replica is removed meanwhile (with
  ``arrivals=1``, opt-in, the forecast is fed the arrivals, which hold no drain, and nothing is left out).
  Without a forecast
  yet (the first step of history), or with ``forecast=last``, that rate for every step; with
  ``forecast=perfect`` (simulation only), the
  trace's true demand per step. The rates held are the gateway's arrivals less the retries of the
  attempts it shed (``controllers.admission.new_demand_rps``): today's retries are load to serve today,
  but a shed request sent again is one request, and retries end with the shedding; with ``floor=1``
  (opt-in) never below the burst floor (``controllers.burst_floor``: the highest one-tick arrival
  rate over the hold, times ``tick / (tick + ttft)``, the capacity that serves it within the TTFT);
- capacity per replica (requests/s at the interactive SLO, ``models.capacity``) for the mix the
  registry calibrated on (the trace's in simulation, the fleet file's ``typical_request`` live), or
  with ``mix=forecast`` that mix scaled to the forecast lengths at the predicted prefix-cache hit rate;
  with ``learn``, the profile slowed by the learned speed factor, and with ``learn=2`` the capacity
  scaled by what the variant's replicas are seen to serve (``models.learning``); with ``burst=1`` for
  the arrivals' measured burstiness (``models.arrivals``), with ``cap=1`` each step's prefill capped at
  its token budget in the ITL bound (both opt-in);
- replicas ready by each step: today's ready ones, and the starting ones when their start-up (warm
  while warm nodes are free, else cold) has run from the tick this controller saw them appear; with
  ``overdue=1`` (opt-in) a start still not ready a tick past the start-up it can be sure of is left out,
  and its variant orders nothing more meanwhile (``starts_at_risk``, ``hold_orders``: a Pending pod that
  never schedules is no capacity, long before ``kubernetes.pending_timeout_s`` gives its variant up);
  with ``pending=1`` (opt-in) the starts a pod of the variant has been unschedulable for
  ``PENDING_GRACE_S`` are at risk at once, from the observation's ``unschedulable_s``
  (``pending_at_risk``), with the same consequences;
- no ready replica is removed before the controller has seen ``hold_s`` of arrival rates (its first
  window is all it knows of the load), nor while the service recovers from a loss; with ``rise=1``
  (opt-in) no aggregated replica goes while the last ``RISE_SPAN_S`` of arrival rates rise
  (``hold_downs_while_rising``); with ``gap=1`` (opt-in) none goes for a signal window after the rates
  come back from a gap longer than the window (a Prometheus back from an outage: ``hold_downs_after_gap``);
  with ``settle_s`` > 0 (opt-in), where the plan's total falls, no variant goes below the highest count
  the plan recommended for it over the last ``settle_s`` (``settle_downs``: the HPA's scale-down
  stabilisation window), the total never above today's; ``settle_by=capacity`` compares the capacity the
  plan's fleet serves instead (``settle_capacity``), ``settle_final=1`` makes a fall let through final
  (``release_counts``), and ``settle=measured`` measures the window (``measured_settle``);
- a service that lost replicas it did not ask to remove (a crash, an eviction) is recovering for a
  cold start plus the guard's cool-down: meanwhile no plan removes a ready replica; nor a pool replica,
  ready or starting, while the service misses its SLO (``controllers.pid_rules.slo_missed``) and for
  ``SLO_MISSED_HOLD_S`` after, and a pool's step
  down is held where the plan leaves demand unserved, plans the replica back, or leaves the pool under
  1.25 x the pools' peak demand (``hold_pool_downs``: hysteresis at a replica boundary);
- costs: GPU $/hour, ``miss_weight`` times the dearest variant's $ per request served for each
  request of demand left unserved (with ``unserved=1``, opt-in, ``UNSERVED_WEIGHT`` times for a shortfall
  below the hold's highest arrival rate from the fastest start-up on: ``seen_shortfall``), and a cold
  start's GPU time per replica started;
- with ``shed=1``, admission in the same problem (issue 29): the sheddable priority's share of
  today's demand at the gateway (its arrivals and queue, ``controllers.admission.priority_demand``)
  may be shed in every step at ``shed_weight`` times the dearest variant's $ per request served
  (``models.planning.PlanService.shed_rps``), so the plan sheds where that is cheaper than a
  replica that arrives too late or would serve too little of its time, and buys replicas where it
  is not. The decision then carries the gateway's thresholds (``Decision.admission``): the
  capacity the plan serves in its first step, given to today's demand per priority from the top
  down (``controllers.admission.balance``, the ``mpc`` policy's rule on the plan's capacity);
  without gateway data, or where the loop runs no admission policy (``on_admission``: no gateway
  sheds then), the plan sheds nothing and sets none (the loop's policy, if any, does);
  otherwise they replace the loop's policy's (the loop applies a decision's own thresholds first).

Prefill/decode pools (issue 34; ``MPCController.scales_roles``): a service with ``roles`` has its prefill
and decode pools' variants (each pool's GPU generations) in the same problem as its aggregated variants,
and the plan chooses per step how much of the demand the pools serve and how much the aggregated replicas
do (``models.planning``, "Prefill/decode pools"): disaggregation where a P/D pair serves a request for
less, aggregation where not, both where whole replicas make a split cheaper, all within the same GPU
limits. A pool replica's capacity is ``models.capacity_roles``' for this tick's mix (``role_weights``:
prefill by prompt tokens/s at the TTFT target with the KV transfer, decode by sequences at the ITL target
and KV; ``controllers.roles.pool_capacities``, the rule the PID's and the router's pool weights share);
the learned speed factors and capacity posteriors correct the aggregated variants only. A pool's capacity
is counted down to what it completes while the pools' backlog keeps it busy (``pool_scale``, at least
``POOL_SCALE_FLOOR`` of the model; ``pd_scale=0`` turns it off), and a scale-up grows a pool to at most
twice the demand held plus one replica (``cap_pool_growth``). A miss costs ``miss_weight`` times the
dearest way to serve (an aggregated variant, or the dearest prefill plus the dearest decode variant). The
decision holds replicas for every variant, aggregated and pool, by name; ``terms`` carry ``pd_rps_now``,
``pd_share_now``, ``pd_rps_max`` (the pools' share of the plan's demand) and ``pool_scale_prefill`` /
``_decode``. A service's ``roles.ratio`` (Kthena's prefill:decode bounds) is a constraint of the plan
(``pd_ratio``; left out where no replica counts within the pools' bounds keep it). ``pd_util`` counts
only that share of a pool replica's modelled capacity (``DEFAULT_PD_UTIL``): the pools' headroom for
bursts, on the demand less the backlog term (``pool_util_path``: today's queue drains at the model's
rate); ``cap_pool_growth`` bounds a pool on the model's capacity all the same.

On a scale-down ``Decision.remove_first`` names the pods to remove, coldest and least loaded first
(``removal_order``); the simulator honours it.

The loop's guard still applies (step limits, cool-down, warm-up and idle rules); the plan's step
limits are the guard's, so it seldom cuts. ``Decision.plan`` holds the plan per variant;
``Decision.terms`` the demand planned for now (``demand_rps``), the solve time (``solve_ms``) and the
unserved demand over the horizon (``unserved_rps_max``; with ``unserved=1`` also its part below the rate
seen, ``unserved_seen_rps_max``).

The live loop bounds each solve by wall time (``PlanProblem.time_limit_s``, 10 s: a tick is 15 s) and,
with ``node_limit``, by branch-and-bound nodes too. A solve stopped at either limit never raises: the
plan is HiGHS's best so far or a fallback (``models.planning``), and the decision says so in its
reason and in ``terms``: ``solver_at_limit`` (1 or 0) and ``plan_fallback`` (``FALLBACK_CODES``).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from autoscaler.state import ForecastSignals, VariantObservation
from autoscaler.workload.types import PRIORITIES, SHEDDABLE
from controllers.admission import (
    ItlBudget,
    balance,
    itl_budgets,
    learned_budget,
    new_demand_rps,
    priority_demand,
    wait_budgets,
)
from controllers.base import Controller, Decision, Gauge, change_reason, hold, silent_pods
from controllers.burst_floor import burst_floor, counted_span, floored_demand, left_span, short_rate, whole_ticks
from controllers.pid_rules import BACKLOG_DRAIN_S, DOWN_DEMAND_FLOOR, slo_missed
from controllers.roles import pool_capacities, ratio_reachable
from models.arrivals import per_replica_scv
from models.capacity import (
    MOSTLY_UNSERVABLE,
    UNSERVABLE_SHARE,
    ReplicaSpec,
    RequestMix,
    allowance,
    idle_floor,
    idle_misses,
    pool_size,
    replica_capacity,
    service_mix,
    speed_factor,
    utilisation,
)
from models.learning import CapacityPosterior, LatencyCurve, latency_curve
from models.planning import (
    FALLBACKS,
    JOINT_UP_TO,
    CoordinatorBasis,
    Plan,
    PlanProblem,
    PlanService,
    PlanVariant,
    settled_flows,
    shifted,
    solve,
)

if TYPE_CHECKING:
    from autoscaler.config import SLO, FleetConfig, Service, Variant
    from autoscaler.state import PodObservation, ServiceEstimate

log = logging.getLogger("autoscaler.controllers.mpc")  # under the ``autoscaler`` logger the CLI writes out

DEFAULT_SHED_WEIGHT = 2.0
"""``shed_weight``'s default: a request shed costs two requests served on the dearest variant at
capacity, so the plan keeps or starts a replica that serves half its capacity or more over its life
(start-up included) and sheds rather than run one that would serve less. Set on the ``surge``
scenario, seeds 0-2, among 1.5, 2, 3 and 5 (docs/admission.md, "Shedding in the plan"); confirmed on
``surge-short`` and ``surge-long``.
"""

DRAIN_S = 60.0
"""Seconds over which the plan drains today's queue (the TTFT SLOs are seconds; a minute keeps the
backlog's extra replicas few)."""

DEFAULT_HOLD_S = 300.0
"""Seconds of observed arrival rates whose highest the plan never goes below: a minute's rate swings
(``docs/controllers.md#the-mpcs-constants``), and a replica removed on a dip takes a cold start
(300 s) to come back; HPA's scale-down stabilisation window is 300 s for the same reason."""

SPEED_TICKS = 20
"""Ticks of speed factors the median is taken over (5 minutes at 15 s): overloaded ticks read high, and
a median ignores them (figures: ``docs/controllers.md#the-mpcs-constants``)."""
SPEED_MIN_TICKS = 4
SPEED_MAX_UTILISATION = 0.6
"""Speed factors are read only below this utilisation (``models.capacity.utilisation``): the fluid
step-time model reads high under queueing (``docs/controllers.md#the-mpcs-constants``)."""
SPEED_LIMITS = (0.5, 3.0)
"""Speed factors believed: a GPU twice as fast as profiled, or three times as slow, is a wrong
profile to fix, not one to follow."""
SPEED_STEP = 0.02

DEFAULT_WINDOW_S = 60.0
"""Signal window, seconds: the plan reads rates, not latency quantiles, and a 300-s window (the PID's)
would show a step in load a cold start late. 60 s is four 15-s scrapes, PromQL's least for a steady ``rate``."""

FALLBACK_CODES: dict[str | None, float] = {None: 0.0, **{name: float(i + 1) for i, name in enumerate(FALLBACKS)}}
"""``Plan.fallback`` as the number ``Decision.terms["plan_fallback"]`` carries (terms are numbers): 0
for the solver's plan, 1 ``lp-rounded``, 2 ``greedy``, 3 ``hold``."""


SOLVE_TIME_LIMIT_S = 10.0
"""Wall seconds one solve may take by default (``models.planning.PlanProblem.time_limit_s``'s default): a
live tick is 15 s. ``time_limit`` raises it for simulation (``MPCController``)."""

DEFAULT_PD_UTIL = 1.0
"""Share of a prefill/decode pool replica's modelled capacity (``role_weights``) the plan counts on by
default: all of it, as before (the planner's tests size pools by the models alone). Issue 34's runs on
Azure code x20 needed 0.5 (``mpc:pd_util=0.5``) to reach the aggregated-only attainment
(``docs/controllers.md``, "Making the pools pay on long prompts"); rerun on seeds 0-2, 0.5 reached it on
all three at 0.88-0.89x the cost and left Azure conv and Mooncake within 2 % (no pool started), where
1.0 fell 1.3-2.9 points short: proposed as the default there, not made ("second follow-up")."""


def limit_note(plan: Plan) -> str:
    """A reason's note for a plan stopped at the solver's limit ("" for one solved to its gap)."""
    if not plan.stopped_at_limit:
        return ""
    return "; " + (f"solver at its limit, no plan: {plan.fallback} fallback" if plan.fallback
                   else "solver at its limit: its best plan so far")


def limit_terms(plan: Plan) -> dict[str, float]:
    """``solver_at_limit`` (1 or 0) and ``plan_fallback`` (``FALLBACK_CODES``) for ``Decision.terms``."""
    return {"solver_at_limit": float(plan.stopped_at_limit), "plan_fallback": FALLBACK_CODES[plan.fallback]}


HOLDS_S = (0.0, 60.0, 120.0, 180.0, DEFAULT_HOLD_S)
"""Holds ``measured_hold`` chooses from, seconds: the shortest whose falls seldom reverse. Never
longer than ``DEFAULT_HOLD_S``: a longer hold keeps replicas after the load has gone (the fault
suite's pending-pods scenario held one idle replica past its check with a 600-s choice)."""
HOLD_HISTORY_S = 3600.0
"""Seconds of arrival rates kept to measure the hold on: an hour of this service's own load."""
HOLD_EVERY_S = 300.0
"""How often the hold is measured again, seconds (it moves with an hour of history, not a tick)."""
HOLD_MIN_TICKS = 40
"""Ticks a hold needs judged (their floor and the cold start after them both in the history) before
its reversals are believed: 10 minutes of 15-s ticks."""
HOLD_REVERSALS = 0.1
"""Share of held falls allowed to reverse within a cold start: above it a shorter hold would remove
replicas that are wanted back before they could return."""
FALL_TOLERANCE = 0.05
"""A floor more than this share below the last tick's is a fall; a later rate within this share of
the floor before the fall is a reversal (a 60-s rate of 30 req/s has a Poisson spread of ~2 %)."""

COVERAGE = 0.9
"""The share of future rates the measured hedge covers at each step (the forecaster's interval was
read at its 0.9 quantile before: ``docs/controllers.md``)."""
MAD_TO_SIGMA = 1.4826
"""A normal's standard deviation over its median absolute deviation."""
RESIDUALS = 240
"""Forecast residuals kept per horizon step: an hour of 15-s ticks."""
MIN_RESIDUALS = 120
"""Residuals a step needs before its measured quantile replaces the forecaster's interval (half an
hour of ticks), and at least four per step ahead: a level shift makes outliers of the ``k + 1``
forecasts issued before it for step ``k``, which the median and MAD ignore only while they are a
minority (with 40, a x3 step carried the next half hour's plan at 3x the load)."""

Z95 = NormalDist().inv_cdf(0.95)
SCORE_WINDOW_S = 1200.0
"""``hedge=adaptive``: seconds of judged plan steps whose scores size the band: 20 minutes, so a
rise the band missed counts until the load has settled (tuned on Azure conv and ramp, seed 0)."""
MIN_SCORES = 200
"""``hedge=adaptive``: scores needed before they replace ``quantile``: five ticks' judged steps of
a 40-step plan."""
Z_LIMITS = (0.0, NormalDist().inv_cdf(0.99))
"""``hedge=adaptive``'s z stays within the band's mean and its 0.99 quantile."""
FORECASTS = ("auto", "arima", "last", "perfect")
STAGE_FORECASTS = ("auto", "arima")
"""``forecast`` values read from the loop's forecast stage: ``arima`` asks it for a request-rate model
refitted every step (``models.forecast.auto.MODELS``)."""
HEDGES = ("band", "measured", "adaptive")
HOLDS = ("auto", "fixed", "measured")
"""``hold``: ``auto`` measured (``measured_hold``) under ``hedge=measured``, else ``DEFAULT_HOLD_S``;
``fixed`` ``DEFAULT_HOLD_S``; ``measured`` measured under any hedge. ``hold_s`` overrides ``auto``; beside
``fixed`` or ``measured`` it is refused (one of the two would be read by nothing)."""
MIXES = ("calibrated", "forecast")
MIX_STEP = 0.05
"""Forecast token means and hit rates are rounded to 5 % (of the calibrated mean; of the hit rate)
before a capacity is computed for them, so a slowly moving forecast reuses capacities, each costly to
compute (``docs/controllers.md#the-mpcs-constants``)."""


BURST_TICKS = 20
"""Windows whose index of dispersion the burstiness is the median of (``burst``): five minutes of
15-s ticks, so one odd minute does not move the capacity."""
SCV_STEP = 1.1
"""The per-replica arrival variability is rounded to a power of this (10 % steps) before a capacity
is computed for it, so a slowly moving measurement reuses capacities (as ``MIX_STEP``)."""
SCV_LIMIT = 20.0
"""The most arrival variability a replica is planned for: beyond, the measurement is taken to be a
ramp inside the minute rather than burstiness (the forecast's and the hold's to cover)."""


MIN_LEARN_LOAD = 0.1
"""Least rate per ready replica, as a share of the prior capacity, a tick is learned from: below it
the replica is idle enough that its latencies are its profile's, not its load's."""


def steady_tick(est: ServiceEstimate, ready_since_s: float, window_s: float) -> bool:
    """Whether a variant's window shows one steady fleet: its ready count unchanged since
    ``ready_since_s`` for at least the signal window, no ready pod silent (``silent_pods``), the
    gateway not shedding (the load served is then the load offered)."""
    if est.time_s - ready_since_s < window_s or silent_pods(est):
        return False
    return not any((p.shed_rps or 0.0) > 0 for p in est.signals.by_priority.values())


def learnable(est: ServiceEstimate, obs: VariantObservation, ready_since_s: float, window_s: float,
              slo: SLO) -> tuple[float, float, float] | None:
    """``(rate, ttft ratio, tpot ratio)`` of a variant's tick that can show its capacity: the
    requests/s its ready replicas serve, and their mean TTFT and mean time per output token over the
    SLO targets; None when the tick cannot show it: no ready replica, a ready count that changed
    within the signal window (the rate mixes two fleets), a ready pod reporting nothing
    (``silent_pods``), the gateway shedding (the load served is not the load offered), a signal
    unknown, or no load."""
    if obs.ready < 1 or not steady_tick(est, ready_since_s, window_s):
        return None
    sig = obs.signals
    rate, ttft, tpot = sig.request_rate_rps, sig.ttft_mean_s, sig.tpot_mean_s
    if rate is None or ttft is None or tpot is None or not rate > 0:
        return None
    return rate, ttft / slo.ttft_s, tpot / slo.itl_s


def p95_stress(obs: VariantObservation, slo: SLO) -> float | None:
    """The worse of a variant's pods' p95 TTFT and p95 time per output token over the SLO's targets
    (``learn=3``'s gate, ``models.learning.STRESS``); None when either is unknown (no tick is read
    as unstressed for want of a signal)."""
    ttft, tpot = obs.signals.ttft_p95_s, obs.signals.tpot_p95_s
    if ttft is None or tpot is None:
        return None
    return max(ttft / slo.ttft_s, tpot / slo.itl_s)


def measured_hold(rates: list[tuple[float, float]], cold_s: float) -> float:
    """The shortest of ``HOLDS_S`` whose falls seldom reverse, seconds, measured on ``rates`` ((time s,
    arrival rate req/s), oldest first). With a hold, the plan's floor at a tick is the highest rate
    over the hold before it; the floor *falls* where it drops more than ``FALL_TOLERANCE`` below the
    last tick's (the plan may then remove replicas), and the fall *reverses* when a rate within the
    next ``cold_s`` (a replica removed then could not be back sooner) comes back to within
    ``FALL_TOLERANCE`` of the floor before the fall. The first hold with at most ``HOLD_REVERSALS`` of
    its falls reversing (none falling is none reversing) is used; ``DEFAULT_HOLD_S``, the longest,
    until it has ``HOLD_MIN_TICKS`` ticks judged, and when none is good enough."""
    t = np.array([x for x, _ in rates])
    r = np.array([y for _, y in rates])
    if len(t) < 2:
        return DEFAULT_HOLD_S
    for span in HOLDS_S:
        floor = np.array([r[(t >= x - span - 1e-9) & (t <= x)].max() for x in t])
        judged = np.nonzero((t - span - (t[1] - t[0]) >= t[0] - 1e-9) & (t + cold_s <= t[-1] + 1e-9))[0]
        if span == HOLDS_S[-1] and len(judged) < HOLD_MIN_TICKS:
            return DEFAULT_HOLD_S
        falls = reversals = 0
        for i in judged:
            if i == 0 or floor[i] >= floor[i - 1] * (1.0 - FALL_TOLERANCE):
                continue
            falls += 1
            ahead = r[(t > t[i]) & (t <= t[i] + cold_s + 1e-9)]
            reversals += bool(len(ahead) and ahead.max() >= floor[i - 1] * (1.0 - FALL_TOLERANCE))
        if len(judged) >= HOLD_MIN_TICKS and reversals <= HOLD_REVERSALS * falls:
            return span
    return HOLDS_S[-1]


def measured_path(mem: _ServiceMemory, now_s: float, dt: float, mean: np.ndarray, interval: np.ndarray,
                  actual_rps: float | None) -> np.ndarray:
    """Each step's demand from this service's own forecast errors: the mean path times ``exp`` of the
    ``COVERAGE`` quantile of ``log(actual / mean)`` at that step over the last ``RESIDUALS``
    forecasts, read robustly as ``median + z(COVERAGE) x 1.4826 MAD`` (a normal's quantile from the
    median and the median absolute deviation): a one-off level shift, a step no forecaster sees
    coming, makes outliers that an empirical quantile would carry as a hedge for an hour (on a x6
    step it planned for 4-8x the load; the hold and the current-rate floor answer a step);
    ``interval`` (the forecaster's band) at steps with fewer than ``MIN_RESIDUALS`` (and ``4 (k + 1)``
    at step ``k``). Records this
    tick's actual rate against the forecasts that predicted it and keeps this tick's mean path.
    Shapes (horizon,), requests/s."""
    h = len(mean)
    while len(mem.residuals) < h:
        mem.residuals.append(deque(maxlen=RESIDUALS))
    while mem.forecasts and mem.forecasts[0][0] < now_s - (h + 1) * dt:
        mem.forecasts.popleft()
    if actual_rps is not None and actual_rps > 0:
        for issued, path in mem.forecasts:
            k = round((now_s - issued) / dt) - 1  # the step whose end is now
            if 0 <= k < h and path[k] > 0:
                mem.residuals[k].append(math.log(actual_rps / path[k]))
    mem.forecasts.append((now_s, np.asarray(mean, dtype=float).copy()))
    out = np.array(interval, dtype=float)
    z = NormalDist().inv_cdf(COVERAGE)
    for k in range(h):
        res = np.asarray(mem.residuals[k])
        if len(res) >= max(MIN_RESIDUALS, 4 * (k + 1)) and mean[k] > 0:
            centre = float(np.median(res))
            scale = MAD_TO_SIGMA * float(np.median(np.abs(res - centre)))
            out[k] = mean[k] * math.exp(centre + z * scale)
    return out


def band_scores(plans: Iterable[tuple[float, np.ndarray, np.ndarray, float]], now_s: float, dt: float,
                actual_rps: float) -> list[float]:
    """How far up the forecaster's band each plan step whose end is now had to reach to cover
    ``actual_rps`` (the rate seen now, req/s), in units of the band's normal z: ``(actual - mean) x
    z(0.95) / (upper - mean)``. ``plans``: (issued at s, mean path, ``upper - mean`` path, both shape
    (horizon,) req/s, the floor under the path req/s), oldest first; the one issued at ``t`` is judged
    at its step ``k = round((now_s - t) / dt) - 1``. ``-inf`` where its floor (the hold, today's rate)
    already covered the rate (no z was needed); none where the band had no width (no z would do)."""
    out: list[float] = []
    for issued, mean, spread, floor in plans:
        k = round((now_s - issued) / dt) - 1
        if not 0 <= k < len(mean):
            continue
        if actual_rps <= floor:
            out.append(-math.inf)
        elif spread[k] > 0:
            out.append((actual_rps - float(mean[k])) * Z95 / float(spread[k]))
    return out


def conformal_z(scores: Iterable[float], level: float) -> float | None:
    """The band's z that would have covered ``level`` of ``scores`` (``band_scores``): split
    conformal prediction's order statistic, the ``ceil((n + 1) level)``-th smallest of ``n`` (the
    largest when that is past ``n``), within ``Z_LIMITS``; None with fewer than ``MIN_SCORES``."""
    xs = sorted(scores)
    n = len(xs)
    if n < MIN_SCORES:
        return None
    x = xs[min(math.ceil((n + 1) * level), n) - 1]
    return min(max(x, Z_LIMITS[0]), Z_LIMITS[1])


TREND_LEVEL = 0.95
"""One-sided confidence of the slope ``trend_path`` extrapolates: the rise planned on is the
slope's lower ``TREND_LEVEL`` bound, so a minute's swing (Azure conv's 60-s rate moves by a fifth)
is read as noise, a ramp (the ramp scenario's +100 req/s over 30 minutes) as a rise."""
TREND_MIN_POINTS = 8
"""Rates the slope needs (two minutes of 15-s ticks): fewer give no trend."""
_TREND_Z = NormalDist().inv_cdf(TREND_LEVEL)  # the normal quantile of TREND_LEVEL, once


def rising_slope(rates: Sequence[tuple[float, float]], span_s: float, window_s: float) -> float:
    """The arrival rate's rise, requests/s per second, that ``rates`` ((time s, rate req/s), oldest
    first) show over their last ``span_s``: the least-squares slope's lower one-sided ``TREND_LEVEL``
    bound, 0 when that is not above 0 or with fewer than ``TREND_MIN_POINTS`` rates. Consecutive rates
    over ``window_s`` windows share most of their arrivals, so the slope's standard error is taken
    over the ``span / max(window, spacing)`` independent windows the rates hold, not over the rates
    (``n_eff``), the usual correction for overlapping means (the samples' spacing from the rates)."""
    t_end = rates[-1][0] if rates else 0.0
    pts = [(t, r) for t, r in rates if t > t_end - span_s - 1e-9]
    n = len(pts)
    if n < TREND_MIN_POINTS:
        return 0.0
    t = np.array([x for x, _ in pts])
    r = np.array([y for _, y in pts])
    tc = t - t.mean()
    sxx = float(np.sum(tc * tc))
    if sxx <= 0:
        return 0.0
    b = float(np.sum(tc * (r - r.mean()))) / sxx
    resid = r - r.mean() - b * tc
    spacing = (t[-1] - t[0]) / (n - 1)
    n_eff = max(2.0, min(float(n), (t[-1] - t[0] + spacing) / max(window_s, spacing)))
    se = math.sqrt(float(np.sum(resid * resid)) / (n - 2) / sxx * n / n_eff)
    return max(0.0, b - _TREND_Z * se)


def trend_path(now_rps: float, slope: float, dt: float, horizon: int, span_s: float) -> np.ndarray:
    """Requests/s per step if today's rate keeps rising at ``slope`` (req/s per s) for ``span_s``
    (a cold start: what a replica ordered now meets) and then holds: ``now + slope x min((k + 1) dt,
    span)`` at step ``k``, shape (horizon,)."""
    ahead = np.minimum((np.arange(horizon) + 1) * dt, span_s)
    return now_rps + slope * ahead


RISE_SPAN_S = 120.0
"""``rise=1``: seconds of arrival rates the rise is read over (``rising_slope``). Two minutes: the
fewest rates ``rising_slope`` reads at 15-s ticks (``TREND_MIN_POINTS``), and short enough to see a
rise turn up from a trough, which a cold start's span (``trend``'s) still reads as a fall. Measured on
the fault suite's prefill-sinusoid (docs/controllers.md, "No scale-down on a rise"): at the ticks where
``quantile=0.8`` scaled down on the way up (750 s seed 0, 1950 s seed 1) the 120-s slope's bound was
0.017-0.018 req/s per s, the 180-s one 0.003-0.004 and the 300-s one 0."""


def hold_downs_while_rising(desired: Mapping[str, int], current: Mapping[str, int],
                            rates: Sequence[tuple[float, float]], span_s: float, window_s: float) -> dict[str, int]:
    """``rise=1``: ``desired`` with every scale-down held at ``current`` while the arrival rate rises:
    ``rising_slope(rates, span_s, window_s) > 0`` (the slope's lower one-sided ``TREND_LEVEL`` bound
    over the last ``span_s``, so noise reads as no rise). A replica removed on the way up is wanted
    back within the rise, and comes back a start-up late: on prefill-sinusoid the narrow band
    (``quantile=0.8``) removed one at the trough's turn, where the forecaster's mean (flat at the
    trough's level) and the hold (the fall's rates) both read the load low.

    Args:
        desired, current: variant -> replicas the plan asks for now, and today's.
        rates: (time s, arrival rate req/s), oldest first.
        span_s: seconds of ``rates`` read (> 0).
        window_s: the rates' window, seconds (``rising_slope``).

    Raises:
        ValueError: ``span_s`` not > 0.
    """
    if not span_s > 0:
        raise ValueError(f"hold_downs_while_rising: span_s must be > 0, got {span_s}")
    out = dict(desired)
    down = [n for n in desired if desired[n] < current.get(n, 0)]
    if down and rising_slope(rates, span_s, window_s) > 0:
        out.update({n: current.get(n, 0) for n in down})
    return out


def settle_downs(desired: Mapping[str, int], current: Mapping[str, int],
                 recommendations: Iterable[tuple[float, Mapping[str, int]]], now_s: float,
                 settle_s: float) -> dict[str, int]:
    """``settle_s``: Kubernetes HPA's scale-down stabilisation window, per variant, on a scale-down of
    the service. Where the plan's total (``desired``) is below today's total (``current``, over the
    variants of ``desired``), each variant the plan would scale down, in ``desired``'s order, keeps the
    highest count recommended for it within ``(now_s - settle_s, now_s]`` (this tick's ``desired``
    included), never more than its ``current``, and the variants together keep no more than the total's
    fall (the rule never lifts the total above today's). A scale-up, and a plan whose total does not fall
    (a swap between variants, or a rise), pass as they are: held per variant alone, a swap's fall would
    wait while its rise went through, a scale-up now and a scale-down a window later.

    The per-variant rule is ``stabilizeRecommendationWithBehaviors`` in kubernetes/kubernetes
    ``pkg/controller/podautoscaler/horizontal.go`` (Kubernetes 1.34; ``controllers.baselines.hpa``) with
    a 0-s scale-up window: the count is brought into ``[desired, max(recommendations in the window)]``.
    The recommendations are the plan's own (before this rule), as the HPA records its proposals. Unlike
    the HPA, no first recommendation is recorded at the start (the MPC's ``hold_s`` already removes
    nothing before it has seen a hold of rates).

    Args:
        desired, current: variant -> replicas the plan asks for now, and today's (ready + starting).
        recommendations: (time s, variant -> replicas the plan asked for then); a variant missing from
            one counts 0 there. Those at or before ``now_s - settle_s`` are ignored.
        now_s: this tick, seconds on the loop's clock.
        settle_s: the window, seconds (> 0).

    Raises:
        ValueError: ``settle_s`` not > 0.
    """
    if not settle_s > 0:
        raise ValueError(f"settle_downs: settle_s must be > 0, got {settle_s}")
    out = dict(desired)
    room = sum(current.get(n, 0) for n in desired) - sum(desired.values())  # the total's fall
    if room <= 0:
        return out
    recent = [r for t, r in recommendations if t > now_s - settle_s]
    for name, n in desired.items():
        cur = current.get(name, 0)
        if n < cur and room > 0:
            back = min(min(cur, max([n, *(r.get(name, 0) for r in recent)])) - n, room)
            out[name] = n + back
            room -= back
    return out


def _check_hold(name: str, hold: str, hold_s: float | None) -> None:
    """``hold`` is one of ``HOLDS``, and ``auto`` beside ``hold_s``: ``hold_s`` fixes the hold, so a ``hold`` of
    ``fixed`` or ``measured`` beside it would be read by nothing.

    Raises:
        ValueError: an unknown ``hold``, or ``fixed``/``measured`` with ``hold_s``.
    """
    if hold not in HOLDS:
        raise ValueError(f"{name}: hold must be one of {', '.join(HOLDS)}, got '{hold}'")
    if hold_s is not None and hold != "auto":
        raise ValueError(f"{name}: hold={hold} and hold_s={hold_s:g} both set the hold (hold_s fixes it, hold "
                         "chooses how it is found): give one")


SETTLE_BY = ("count", "capacity")
"""``settle_by``: what ``settle_s`` compares, the plan's replica counts (``settle_downs``, the default) or
the capacity they serve (``settle_capacity``)."""


def settle_capacity(desired: Mapping[str, int], current: Mapping[str, int], capacity: Mapping[str, float],
                    recommendations: Iterable[tuple[float, float]], now_s: float,
                    settle_s: float) -> dict[str, int]:
    """``settle_by=capacity``: ``settle_downs``'s stabilisation window on the capacity the plan serves
    (req/s: each variant's count times ``capacity``, the per-replica capacity the plan used this tick)
    instead of its replica counts. Where the plan's capacity is below today's (``current``, over the
    variants of ``desired``), the fleet keeps the highest capacity the plan recommended within
    ``(now_s - settle_s, now_s]`` (``recommendations``: (time, capacity req/s), this tick's included),
    never more than today's: replicas the plan would remove are kept, one at a time, until the kept
    capacity reaches it. Each one kept is, of the variants the plan scales down with a replica left to
    keep, the one of least capacity that closes what is left of the gap alone, else the one of most
    capacity (ties: ``desired``'s order). So a swap that keeps the count but cuts the capacity is held,
    and a fall of the count that keeps the capacity (a replica of no capacity, or a swap to fewer, larger
    replicas) passes; a plan whose capacity does not fall passes as it is. The kept capacity may pass
    the target by less than the last replica kept.

    Args:
        desired, current: variant -> replicas the plan asks for now, and today's (ready + starting).
        capacity: variant -> req/s a replica serves, as the plan counts it this tick (a variant missing
            counts 0).
        recommendations: (time s, the plan's capacity then, req/s); those at or before ``now_s -
            settle_s`` are ignored.
        now_s: this tick, seconds on the loop's clock.
        settle_s: the window, seconds (> 0).

    Raises:
        ValueError: ``settle_s`` not > 0, or a negative capacity.
    """
    if not settle_s > 0:
        raise ValueError(f"settle_capacity: settle_s must be > 0, got {settle_s}")
    if any(c < 0 for c in capacity.values()):
        raise ValueError(f"settle_capacity: a capacity is negative: {dict(capacity)}")
    out = dict(desired)

    def served(counts: Mapping[str, int]) -> float:
        return sum(counts.get(n, 0) * capacity.get(n, 0.0) for n in desired)

    today = served(current)
    tol = 1e-9 * max(today, 1.0)
    recent = [c for t, c in recommendations if t > now_s - settle_s]
    target = min(today, max([served(desired), *recent]))
    gap = target - served(desired)
    while gap > tol:
        room = [n for n in desired if out[n] < current.get(n, 0) and capacity.get(n, 0.0) > 0]
        if not room:
            break
        closing = [n for n in room if capacity[n] >= gap - tol]
        pick = (min(closing, key=lambda n: capacity[n]) if closing
                else max(room, key=lambda n: capacity[n]))  # min/max keep the first of equals
        out[pick] += 1
        gap -= capacity[pick]
    return out


def release_counts(recommendations: Iterable[tuple[float, dict[str, int]]], applied: Mapping[str, int],
                   current: Mapping[str, int]) -> None:
    """``settle_final=1``, ``settle_by=count``: a fall the rule let through is final. For each variant
    ``applied`` lowers below ``current``, no recommendation left in the window (in place) counts more
    than ``applied``'s count, so the window cannot bring back a replica once released. The HPA has this
    by construction (it scales down only to the window's highest); here it is needed because a swap
    passes below the window's highest, and the next tick's ``current`` still counts the replica that
    drains (seen on the step scenario: the drain taken back, the total up by one)."""
    for name, n in applied.items():
        if n < current.get(name, 0):
            for _, r in recommendations:
                if r.get(name, 0) > n:
                    r[name] = n


SETTLES_S = (0.0, 60.0, 120.0, 180.0, 300.0)
"""Windows ``settle=measured`` chooses from, seconds (``measured_settle``): none, up to the HPA's default
300 s (``--horizontal-pod-autoscaler-downscale-stabilization``)."""
SETTLE_SETTINGS = ("fixed", "measured")
"""``settle``: the window ``settle_s`` gives (``fixed``, the default), or ``measured_settle``'s."""


def measured_settle(totals: list[tuple[float, float]], cold_s: float) -> float:
    """``settle=measured``: the shortest of ``SETTLES_S`` whose falls seldom reverse, seconds, measured on
    ``totals`` ((time s, the plan's recommended total of replicas, before the settle window's own hold),
    oldest first), as ``measured_hold`` measures the hold on the rates. ``_settle`` records each total
    after the plan's other holds (``hold_pool_downs``, ``cap_pool_growth``, and ``cover``'s and ``rise``'s
    ``hold_downs_within_start`` and ``hold_downs_while_rising``); with ``settle_by=capacity`` the window is
    still measured on these replica counts, not on capacities. With a window, the fleet at a tick is the
    highest recommendation over ``(t - window, t]`` (the HPA's scale-down window, ``settle_downs``); it *falls*
    where it drops below the last tick's, and the fall *reverses* when a recommendation within the next
    ``cold_s`` (a replica removed then could not be back sooner) comes back to the level before the fall.
    The first window with at most ``HOLD_REVERSALS`` of its falls reversing is used, once it has
    ``HOLD_MIN_TICKS`` ticks judged (its window and the cold start after it both in ``totals``); the
    longest until then, and when none is good enough."""
    t = np.array([x for x, _ in totals])
    r = np.array([y for _, y in totals])
    if len(t) < 2:
        return SETTLES_S[-1]
    for span in SETTLES_S:
        level = np.array([r[(t > x - span - 1e-9 * (span == 0)) & (t <= x)].max() for x in t])
        judged = np.nonzero((t - span - (t[1] - t[0]) >= t[0] - 1e-9) & (t + cold_s <= t[-1] + 1e-9))[0]
        falls = reversals = 0
        for i in judged:
            if i == 0 or level[i] >= level[i - 1]:
                continue
            falls += 1
            ahead = r[(t > t[i]) & (t <= t[i] + cold_s + 1e-9)]
            reversals += bool(len(ahead) and ahead.max() >= level[i - 1])
        if len(judged) >= HOLD_MIN_TICKS and reversals <= HOLD_REVERSALS * falls:
            return span
    return SETTLES_S[-1]


def _check_settle(name: str, settle_s: float, settle_by: str, settle_final: int, settle: str) -> None:
    """The ``settle_*`` options together: ``settle_by`` in ``SETTLE_BY``, ``settle_final`` 0 or 1, ``settle``
    in ``SETTLE_SETTINGS`` and not ``measured`` beside a fixed ``settle_s``; ``settle_by`` other than
    ``count`` and ``settle_final=1`` only with a window (``settle_s`` > 0 or ``settle=measured``).

    Raises:
        ValueError: any of these broken.
    """
    if settle_by not in SETTLE_BY or settle_final not in (0, 1):
        raise ValueError(f"{name}: settle_by must be one of {', '.join(SETTLE_BY)} and settle_final 0 or 1, "
                         f"got {settle_by!r}, {settle_final}")
    if settle not in SETTLE_SETTINGS or (settle == "measured" and settle_s > 0):
        raise ValueError(f"{name}: settle must be one of {', '.join(SETTLE_SETTINGS)}, and settle_s is the "
                         f"fixed window (measured measures it): got settle={settle!r}, settle_s={settle_s}")
    if (settle_by != "count" or settle_final) and not (settle_s > 0 or settle == "measured"):
        raise ValueError(f"{name}: settle_by and settle_final shape the settle_s window: set settle_s > 0 "
                         "or settle=measured")


def _check_smooth(name: str, smooth_s: float, forecast: str, mix: str) -> None:
    """``smooth_s`` > 0 smooths what the forecast stage is fed; refused where no stage runs (``forecast``
    ``last`` or ``perfect`` without ``mix=forecast``), where it would do nothing.

    Raises:
        ValueError: ``smooth_s`` > 0 without a forecast stage.
    """
    if smooth_s > 0 and not (forecast in STAGE_FORECASTS or mix == "forecast"):
        raise ValueError(f"{name}: smooth_s smooths what the forecast stage is fed, and forecast={forecast} "
                         "runs none: drop smooth_s or use a forecast the stage makes")


def resumed_after_gap(last_s: float | None, now_s: float, window_s: float, resumed_s: float | None) -> float | None:
    """``gap=1``: when the arrival rates came back after the last gap longer than the signal window
    (seconds on the loop's clock), updated with the rate read at ``now_s``: ``now_s`` where the last
    rate read before it (``last_s``; None: none yet, the loop's start, which is no gap) is more than
    ``window_s`` older, else ``resumed_s`` unchanged.

    A rate the source could not give (Prometheus down: the loop holds on the failed queries and the
    controller reads nothing) for longer than the window leaves Prometheus with no sample inside the
    window when it is back: ``rate()`` over the window then counts the arrivals since the restart and
    divides by the whole window (``extrapolatedRate``, prometheus/promql/functions.go, v2.x; e.g. two
    samples 5 s apart ending a 60-s range: the increase over 5 s, extended by half a sample interval
    toward the range's start, over 60 s: (5 + 2.5) / 60, an eighth of the rate), while the history
    query still says a whole window is held (its subquery's steps inside the gap find the last sample
    before it, within Prometheus's 5-minute lookback). A gap no longer than the window keeps a sample
    before it in the range, and the counter's increase across the gap is counted: the rate is right.

    Raises:
        ValueError: ``window_s`` not > 0, or ``last_s`` after ``now_s``.
    """
    if not 0 < window_s < math.inf or (last_s is not None and last_s > now_s):
        raise ValueError(f"resumed_after_gap: need window_s > 0 and last_s <= now_s, got {window_s}, {last_s}, "
                         f"{now_s}")
    if last_s is not None and now_s - last_s > window_s:
        return now_s
    return resumed_s


def hold_downs_after_gap(desired: Mapping[str, int], current: Mapping[str, int], resumed_s: float | None,
                         now_s: float, window_s: float) -> dict[str, int]:
    """``gap=1``: ``desired`` with every scale-down held at ``current`` while the rates read since the
    last gap (``resumed_after_gap``: they came back at ``resumed_s``, None: no gap) span less than a
    signal window ``window_s`` (seconds): until then each is over a window that may hold only the
    samples since the source came back (a lower bound, read as the load). Prometheus came back at or
    before ``resumed_s`` (the first rate read after it), so the first window read wholly after the
    gap is at ``resumed_s + window_s`` or earlier. Measured on the fault suite's
    prometheus-outage-live (docs/controllers.md, "After a metrics gap"): the first rate read
    after the 250-s outage was 2.4 req/s under a load of 25-30, and the candidate removed two of its
    three replicas on it.

    Raises:
        ValueError: ``window_s`` not > 0.
    """
    if not 0 < window_s < math.inf:
        raise ValueError(f"hold_downs_after_gap: window_s must be > 0, got {window_s}")
    out = dict(desired)
    if resumed_s is not None and now_s - resumed_s < window_s:
        out.update({n: current.get(n, 0) for n in desired if desired[n] < current.get(n, 0)})
    return out


OVERDUE_MARGIN_S = 15.0
"""Seconds past its expected start-up a start may take before ``overdue=1`` counts it at risk
(``starts_at_risk``): one 15-s tick, the grid the loop reads a pod's readiness on (the start itself is
first seen at the tick after its order, which adds up to a tick more). In the simulator a placed pod is
ready exactly at its start-up; live, a start-up that runs past the fleet file's ``startup_warm_s`` /
``startup_cold_s`` by more than a tick is called at risk: the plan then orders on another variant until
it comes up (a replica's cost, never a cancel), so those figures should be the slow end of the
deployment's start-ups. Tuned on the fault suite's pending-pods seed 0 (15, 30 and 60 s: 80.60, 79.47
and 74.71 % interactive with ``floor=1:quantile=0.8:trend=1``; docs/controllers.md, "Pending orders
counted at risk")."""


def sure_startup(warm_s: float, cold_s: float, warm_nodes: int, occupied: int) -> float:
    """The start-up (seconds) a new start of a variant can be sure of: the warm ``warm_s`` only while its
    ``warm_nodes`` outnumber the replicas that may hold one (``occupied``: every replica the variant may
    have had live when the start was ordered), else the cold ``cold_s``. A replica starts warm when a node
    holding the weights is free (``autoscaler.simulator.fleet``), so a start counted cold may have been
    warm (called at risk late), never the other way round, as long as ``occupied`` is not too low."""
    return warm_s if occupied < warm_nodes else cold_s


def starts_at_risk(seen_s: Sequence[float], sure_s: Sequence[float], now_s: float,
                   margin_s: float = OVERDUE_MARGIN_S) -> list[bool]:
    """Which starts of one variant are at risk at ``now_s``: still not ready ``margin_s`` past the
    start-up they can be sure of. ``seen_s``: when each start was first seen (seconds, oldest first,
    ``_ServiceMemory.seen_starting``); ``sure_s``: each one's start-up (seconds, ``sure_startup``, fixed
    when it was first seen). A start at risk is capacity the plan must not count on (a pod Pending with no
    GPU of its kind free never becomes ready; ``kubernetes.pending_timeout_s`` marks its variant
    unavailable only later).

    Raises:
        ValueError: the two lengths differ, or a negative start-up or margin.
    """
    if len(seen_s) != len(sure_s) or margin_s < 0 or any(x < 0 for x in sure_s):
        raise ValueError(f"starts_at_risk: need one start-up >= 0 per start and a margin >= 0, got {len(seen_s)} "
                         f"starts, start-ups {list(sure_s)}, margin {margin_s}")
    return [now_s - t > x + margin_s for t, x in zip(seen_s, sure_s, strict=True)]


PENDING_GRACE_S = 15.0
"""Seconds a pod of a variant must have been seen unschedulable before ``pending=1`` counts its starts at
risk (``pending_at_risk``): one 15-s tick. The simulator's source counts a Pending replica's wait from
its order, so a start ordered at tick T is at risk at the first tick it is seen (T + 15); the Kubernetes
adapter counts from the first read that saw the pod unschedulable (the tick the start is first seen), so
live it is at risk one tick later (T + 30). A pod the scheduler leaves Pending that briefly (a node
freeing up) costs one replica ordered elsewhere, never a cancel. Not tuned: chosen before any run as the
shortest wait two reads can show."""

PENDING_READ_SLACK_S = 7.5
"""Half a tick: a wait within this of ``PENDING_GRACE_S`` counts as the grace. Live, the Kubernetes
adapter times a pod from the read that first saw it, and two ticks' reads can fall a little closer than
a tick apart (the reads before them take a different time), so one tick's wait may read 14.99 s; without
slack the rule would fire a tick late about half the time. The simulator's waits are whole ticks (0, 15,
30 s), which half a tick leaves as they were."""


def pending_at_risk(seen_s: Sequence[float], unschedulable_s: float | None, now_s: float,
                    grace_s: float = PENDING_GRACE_S) -> list[bool]:
    """Which starts of one variant are at risk at ``now_s`` because a pod of it cannot be placed: when its
    longest-unschedulable pod has been so ``unschedulable_s`` >= ``grace_s`` (seconds,
    ``VariantObservation.unschedulable_s``; within ``PENDING_READ_SLACK_S`` of it counts), every start first
    seen at or after ``now_s - unschedulable_s`` (``seen_s``: first-seen times, seconds, oldest first), and the
    newest start at least. That pod is the oldest Pending one, so a start seen before it appeared was placed (it
    is loading); the newer ones may be Pending too (the observation gives the longest wait, not which pods
    wait), so all are counted. A start ordered one tick before the Pending pod may be counted with it (its
    first-seen time is the Pending pod's order time): a replica ordered elsewhere, never a cancel. None
    (unknown), below the grace, or no start: none at risk; unknown is never read as 0 nor as unschedulable.

    Raises:
        ValueError: a negative grace or wait.
    """
    if grace_s < 0 or (unschedulable_s is not None and not unschedulable_s >= 0):
        raise ValueError(f"pending_at_risk: need a grace >= 0 and a wait >= 0 or None, got {grace_s} and "
                         f"{unschedulable_s}")
    if unschedulable_s is None or unschedulable_s + PENDING_READ_SLACK_S < grace_s or not seen_s:
        return [False] * len(seen_s)
    out = [t >= now_s - unschedulable_s for t in seen_s]
    out[-1] = True
    return out


@dataclass
class _ServiceMemory:
    """What the controller remembers of a service between ticks."""

    seen_starting: dict[str, list[float]] = field(default_factory=dict)  # variant -> first-seen time per start
    risk_seen: dict[str, list[float]] = field(default_factory=dict)  # overdue: variant -> first-seen time per start
    sure_starting: dict[str, list[float]] = field(default_factory=dict)  # overdue: variant -> sure_startup per start
    live: dict[str, int] = field(default_factory=dict)  # overdue: variant -> ready + starting + draining last tick
    ready_last: dict[str, int] = field(default_factory=dict)  # overdue: variant -> ready replicas at the last tick
    rates: list[tuple[float, float]] = field(default_factory=list)  # (time, arrival rate), last HOLD_HISTORY_S
    forecasts: deque[tuple[float, np.ndarray]] = field(default_factory=deque)  # (issued at, mean path)
    residuals: list[deque[float]] = field(default_factory=list)  # per step: log(actual / forecast mean)
    plans: deque[tuple[float, np.ndarray, np.ndarray, float]] = field(default_factory=deque)  # adaptive's paths
    scores: deque[tuple[float, float]] = field(default_factory=deque)  # adaptive: (judged at, band_scores')
    z: float | None = None  # hedge=adaptive: the band's z this tick (None: not started)
    hold_s: float = DEFAULT_HOLD_S  # the hold used this tick
    short: deque[tuple[float, float]] = field(default_factory=deque)  # (time, arrivals/s over its tick): ``floor``
    floor_rps: float | None = None  # this tick's burst floor (``floor``)
    resumed_s: float | None = None  # gap: when the rates came back after the last gap longer than the window
    pool: int = 1  # replicas the capacities were pooled over this tick (``corrected_weights``)
    hold_measured_s: float = -math.inf  # when the hold was last measured
    last_applied: dict[str, int] = field(default_factory=dict)
    last_time_s: float = -math.inf
    recovering_until: float = -math.inf
    first_s: float | None = None  # the first tick this controller decided for the service
    speed: dict[str, deque[float]] = field(default_factory=dict)  # variant -> recent speed factors
    last_speed: dict[str, float] = field(default_factory=dict)  # variant -> the factor used this tick
    capacity: dict[str, CapacityPosterior] = field(default_factory=dict)  # variant -> learned capacity multiple
    ready_since: dict[str, tuple[int, float]] = field(default_factory=dict)  # variant -> (ready, since when)
    learned: dict[str, bool] = field(default_factory=dict)  # variant -> whether this tick measured
    dispersion: deque[float] = field(default_factory=lambda: deque(maxlen=BURST_TICKS))  # gateway's recent indices
    dispersion_s: float = -math.inf  # when the last index was recorded
    scv: float = 1.0  # the per-replica arrival variability planned on this tick (``burst``)
    last_plan: tuple[float, dict[str, np.ndarray]] | None = None  # (when, variant -> replicas per step) solved alone
    pool_ready: tuple[tuple[tuple[str, int], ...], float] | None = None  # (pool variants' ready counts, since when)
    missed_s: float = -math.inf  # the last tick the service missed its SLO (``slo_missed``)
    drained_s: float = -math.inf  # the last tick the service was ``draining`` (``drain_excess``)
    recommended: deque[tuple[float, dict[str, int]]] = field(default_factory=deque)  # settle_s: (time, plan's)
    settle_totals: list[tuple[float, float]] = field(default_factory=list)  # settle=measured: (time, plan's total)
    settle_window_s: float = SETTLES_S[-1]  # settle=measured: the window in use
    settle_measured_s: float = -math.inf  # when it was last measured
    recommended_cap: deque[tuple[float, dict[str | None, float]]] = field(default_factory=deque)  # settle_by=capacity


@dataclass(frozen=True)
class _Inputs:
    """One service's plan inputs for a tick; ``priorities``: today's demand per priority at the
    gateway when the plan may shed (``shed``), else None."""

    service: PlanService
    recovering: bool
    priorities: dict[str, float] | None = None
    held_rps: float = 0.0  # the highest arrival rate of the hold window
    pool_scales: dict[str, float] = field(default_factory=dict)  # role -> ``pool_scale`` this tick
    modelled: dict[str, float] = field(default_factory=dict)  # pool variant -> capacity before the scale
    steady: dict[str, float] = field(default_factory=dict)  # variant -> capacity counted without a backlog


def all_variants(svc: Service) -> list[tuple[str | None, Variant]]:
    """(role, variant) of every variant the plan may scale: the aggregated ones (role None), then
    the prefill and decode pools' (``Service.roles``)."""
    return [(None, v) for v in svc.variants] + [(role, v) for role, v in svc.role_variants()]


def observed(est: ServiceEstimate, name: str) -> VariantObservation:
    """Variant ``name``'s observation: an aggregated variant's (``ServiceEstimate.variants``), else a
    pool variant's (``ServiceEstimate.pools``, as the loop gives a controller that scales roles); no
    replicas where the estimate shows neither."""
    if name in est.variants:
        return est.variants[name]
    for pool in est.pools.values():
        if name in pool.variants:
            return pool.variants[name]
    return VariantObservation(0, 0)


def every_current(est: ServiceEstimate) -> dict[str, int]:
    """variant -> ready + starting replicas, the aggregated variants' and the pools'."""
    return {**est.current, **est.pool_current}


def backlog_rps(queue: float, drain_s: float, rate_rps: float) -> float:
    """Requests/s the plan adds to each of its first ``drain_s`` seconds to drain today's ``queue``
    (requests): ``queue / drain_s``, but at most the larger of ``rate_rps`` (the demand held now) and
    ``queue / BACKLOG_DRAIN_S`` (a cold start's drain).

    ``drain_s`` is a warm start plus ``DRAIN_S`` (150 s on the shipped fleets), right for the queue of a
    busy minute; a backlog the gateway held through an outage is minutes of arrivals, and spread over
    150 s it asked for two to three times the demand (the fault suite's decode-pool-loss: 3,500 requests
    at 12 req/s planned as 29-36 req/s, past the suite's ``overshoot``). Capped, a backlog at most doubles
    the demand planned, and a backlog of more than a cold start's arrivals drains in about a cold start.
    """
    if queue <= 0 or drain_s <= 0:
        return 0.0
    return min(queue / drain_s, max(rate_rps, queue / BACKLOG_DRAIN_S))


def first_serving_step(ready: np.ndarray, startup_steps: int) -> int:
    """The first plan step (0-based) at which a variant can serve (``drain=1``): the first step of its
    ready path ``ready`` (replicas by step, shape (horizon,): today's ready ones and its starts when
    their start-up has run, ``MPCController._ready_by_step``) that holds a replica, or ``startup_steps``
    (its fastest start-up in steps: a replica ordered now) if that comes first.

    Raises:
        ValueError: ``startup_steps`` below 0.
    """
    if startup_steps < 0:
        raise ValueError(f"first_serving_step: startup_steps must be >= 0, got {startup_steps}")
    held = np.flatnonzero(np.asarray(ready, dtype=float) > 0)
    return min(startup_steps, int(held[0])) if len(held) else startup_steps


def drain_start(first: Mapping[str | None, Sequence[int]]) -> int:
    """The first plan step at which the service can serve its queue again (``drain=1``), from
    ``first``: role (None: aggregated variants, ``"prefill"``, ``"decode"``) -> ``first_serving_step``
    of each of that role's variants. A request is served by an aggregated replica, or by a prefill
    replica and a decode one together: the earliest aggregated step, or the later of the pools'
    earliest steps, whichever is sooner. 0 (today, as without ``drain=1``) for a service with no
    variant listed, or pools with one side absent and no aggregated variant."""
    aggregated = min(first.get(None, ()), default=math.inf)
    prefill, decode = first.get("prefill", ()), first.get("decode", ())
    pools = max(min(prefill), min(decode)) if len(prefill) and len(decode) else math.inf
    start = min(aggregated, pools)
    return 0 if start == math.inf else int(start)


def backlog_steps(queue: float, rate_rps: float, fastest: int, start: int, dt: float, horizon: int) -> np.ndarray:
    """Requests/s of today's ``queue`` (requests) the plan adds to each of its ``horizon`` steps of ``dt``
    seconds, shape (horizon,): ``backlog_rps(queue, n * dt, rate_rps)`` on the ``n = fastest +
    ceil(DRAIN_S / dt)`` steps from step ``start`` on (cut at the horizon), 0 elsewhere.

    ``fastest`` is the service's fastest start-up in steps; ``n`` steps run until replicas ordered now
    have served ``DRAIN_S`` (``MPCController.backlog_path``). ``start`` 0 is the plan without ``drain=1``:
    the backlog charged from now. With ``drain=1`` it is ``drain_start``: where no replica can serve
    the queue before a start-up (a pool lost whole, as in the fault suite's decode-pool-loss), the
    same drain charged from step 0 falls mostly on steps no order can reach (with 300-s cold starts,
    15-s ticks and ``DRAIN_S`` 60 s, 20 of its 24 steps), so an order now drains only the last 4 steps'
    share, and a cold order paid only once the queue was ~2,260 requests (issue 28). Moved to ``start``,
    the same rate over the same number of steps is charged where a replica ordered now serves. No
    constant is new: ``DRAIN_S`` and ``backlog_rps``'s cap are the plan's own.

    Raises:
        ValueError: ``dt`` not > 0, ``horizon`` or ``fastest`` or ``start`` below 0.
    """
    if not dt > 0 or horizon < 0 or fastest < 0 or start < 0:
        raise ValueError(f"backlog_steps: need dt > 0 and horizon, fastest, start >= 0, got dt={dt}, "
                         f"horizon={horizon}, fastest={fastest}, start={start}")
    n = fastest + max(1, math.ceil(DRAIN_S / dt))
    out = np.zeros(horizon)
    out[start:start + n] = backlog_rps(queue, n * dt, rate_rps)
    return out


def draining(queue: float | None, done_rps: float | None, held_rps: float) -> bool:
    """Whether the service drains a backlog this tick: ``queue`` (requests; None: unknown, not
    draining) > 0 and the completions ``done_rps`` (requests/s; None: unknown, not draining) above
    ``held_rps`` (the demand held: the service finishes more than anything that arrived in the hold
    window). Not draining keeps the forecast whole (``drain_excess``): the side that plans more."""
    return queue is not None and queue > 0 and done_rps is not None and done_rps > held_rps


def drain_memory_s(window_s: float, step_s: float) -> float:
    """Seconds after the last ``draining`` tick that the load forecast can still hold the drain's
    completions: the completions' rate window (``window_s``, the MPC's signal window, ``DEFAULT_WINDOW_S``)
    counts them until it has passed; the forecaster averages the ticks of a step (``step_s``,
    ``controller.forecast.step_s``) into one input, and the fit on that step stands until the next step
    closes: ``window_s + 2 step_s``, 180 s by default (60 s and 60 s). The forecast's
    mean after those steps is fitted on inputs that read no drain (a level that smooths over several
    steps keeps a share of it longer; the decode-pool-loss forecasts, below, keep none).

    Issue 34, decode-pool-loss seed 1 with ``pd_util=0.6``: the queue emptied at 2,895 s (the last
    draining tick 2,880 s); the step fitted at 2,880 s on the completions of 2,820-2,865 s (24.4-31.4 req/s
    at 12 arriving) read 27.77 req/s, and with the queue gone nothing discounted it: the plan asked for
    28.5 req/s and took the prefill pool 4 -> 5 at 2,910 s, past the suite's ``overshoot``. The step
    fitted at 2,940 s still read 14.33 (the window's last drain completions); the one at 3,000 s 11.34,
    at 11-12.5 req/s of arrivals.

    Raises:
        ValueError: a window or a step not above 0.
    """
    if not (window_s > 0 and step_s > 0):
        raise ValueError(f"drain_memory_s: window_s and step_s must be > 0 seconds, got {window_s} and {step_s}")
    return window_s + 2.0 * step_s


def drain_excess(est: ServiceEstimate, times_s: Sequence[float], mean_rps: Sequence[float], queue: float | None,
                 held_rps: float, since_drain_s: float = math.inf, memory_s: float = 0.0) -> float:
    """Requests/s by which the load forecast's level now exceeds ``held_rps`` (the demand held: the highest
    arrival rate of the hold window) while the service drains a backlog, or within ``memory_s`` after the
    last tick it did (``since_drain_s`` seconds ago; ``drain_memory_s``); 0 otherwise. ``demand`` lowers the
    forecast path by it: the backlog is counted once, by ``backlog_rps``.

    The forecast is fitted on the completions (``request_rate_rps``, ``autoscaler.loop.forecast``), and while
    a queue drains they are the arrivals plus the drain: the backlog ``backlog_rps`` adds, read a second
    time as load (issue 34, decode-pool-loss seed 1: with the gateway's held backlog released to every
    pool replica at once, the completions read 25-26 req/s at 12 req/s of arrivals, the forecast's mean
    rose 16.6 -> 20.5 -> 25.4 req/s, and with ``queue / drain_s`` on top the plan took the prefill pool
    4 -> 5 at 3,000 s, past the suite's ``overshoot``). Draining: ``draining`` (a queue, and the
    completions above ``held_rps``). Once the queue is empty the forecast still holds the drain for
    ``memory_s`` (its rate window and its steps), with no backlog left to count: the drain, read as demand
    (``drain_memory_s``). The plan removes no ready replica meanwhile (``MPCController._inputs``): with the
    demand lowered it removed one on fast-ramp (a queue of 2 requests after the ramp, completions 70-78
    req/s at 50 arriving) while the SLO was still missed. Lowering the forecast by no more than
    ``backlog_rps`` left seed 1's 4 -> 5: the drain in the completions (13 req/s) is more than the backlog
    term (5.56 req/s).

    Args:
        est: this tick's estimate (its time and ``signals.request_rate_rps``; None: not draining now).
        times_s, mean_rps: the forecast's path (``RateForecast``), seconds and requests/s.
        queue: the service's queue, requests (the gateway's held requests included); None: unknown.
        held_rps: the demand held now, requests/s.
        since_drain_s: seconds since the last tick that was ``draining`` (inf: none seen).
        memory_s: how long after it the forecast is discounted (0: only while draining).
    """
    now = draining(queue, est.signals.request_rate_rps, held_rps)
    if not len(times_s) or not (now or since_drain_s <= memory_s):
        return 0.0
    return max(0.0, float(np.interp(est.time_s, times_s, mean_rps)) - held_rps)


def idle_reserve(route: Mapping[str, float], aggregated: Iterable[str], serving: Mapping[str, float],
                 demand_rps: float, pools_rps: float) -> dict[str, float]:
    """The router's weights (variant -> requests/s per replica) with each aggregated variant's scaled by
    ``(demand - pools) / A``, ``A`` the aggregated variants' planned capacity (``route[v] x serving[v]``
    summed): the router then sends the aggregated replicas their planned share of the demand alone, and
    the spill reserve (``spill``) stays free for the arrivals a saturated prefill pool spills to them
    (``spill_idle=1``). Unchanged where ``A`` is 0 or the aggregated share is at least ``A``; a share
    of 0 leaves the aggregated replicas a weight of 0 (the router's floor applies)."""
    names = set(aggregated)
    held = sum(route.get(v, 0.0) * serving.get(v, 0.0) for v in names)
    share = max(demand_rps - pools_rps, 0.0)
    if held <= 0 or share >= held:
        return dict(route)
    return {v: w * share / held if v in names else w for v, w in route.items()}


def check_pool_settings(name: str, pd_util: float, spill: float, spill_idle: int) -> None:
    """``MPCController``'s checks of ``pd_util``, ``spill`` and ``spill_idle``, each refused alone.

    Raises:
        ValueError: one line naming ``name`` and the setting: ``pd_util`` outside (0, 1], ``spill``
            outside [0, 1), ``spill_idle`` not 0 or 1, or 1 without a spill.
    """
    if not 0 < pd_util <= 1:
        raise ValueError(f"{name}: pd_util must be in (0, 1], got {pd_util}")
    if not 0 <= spill < 1:
        raise ValueError(f"{name}: spill must be in [0, 1), got {spill}")
    if spill_idle not in (0, 1) or (spill_idle and not spill):
        raise ValueError(f"{name}: spill_idle must be 0 or 1 (1 with a spill > 0), got {spill_idle} "
                         f"with spill {spill}")


def planned_idle_reserve(route: Mapping[str, float], service: PlanService, replicas: Mapping[str, np.ndarray],
                         dt_s: float) -> dict[str, float]:
    """``idle_reserve`` for the plan's first step, its serving and pools' share from the plan's replica
    counts ``replicas`` (``models.planning.settled_flows``: serving ``min(n, ready)``, the pools
    ``min(prefill capacity, decode capacity, demand)``), not from the solver's columns, which the cost
    leaves free within a range once ``pd_spill`` is above 0. ``route`` as it is without pools."""
    serving, pools = settled_flows(service, replicas, dt_s)
    if pools is None:
        return dict(route)
    return idle_reserve(route, [v.name for v in service.variants if v.role is None],
                        {v: float(n[0]) for v, n in serving.items()},
                        float(np.asarray(service.demand_rps)[0]), float(pools[0]))


def pool_util_path(pd_util: float, demand_rps: np.ndarray, backlog: np.ndarray) -> np.ndarray:
    """Per step, the share of a pool replica's modelled capacity the plan counts on so that ``pd_util``
    applies to the demand less the backlog term alone, shape (H,) as ``demand_rps``.

    ``pd_util`` is headroom for the bursts of a steady load (``MPCController``); the backlog term
    (``backlog_rps``) is a queue already there, drained at the pools' full rate, so ``n`` replicas of
    modelled capacity ``c`` should serve ``D`` (``demand_rps``, the backlog ``B`` included) when
    ``n c >= (D - B) / pd_util + B``; that is ``n c u >= D`` with ``u = pd_util D / (D - B + pd_util B)``.
    ``u`` is ``pd_util`` where ``B`` is 0, 1 where the backlog is all the demand. Issue 34's fault suite,
    decode-pool-loss: with the backlog divided by 0.6 too, ``mpc:pd_util=0.6`` held 1/0.6 of the pools'
    replicas plus 1/0.6 of a demand's worth for the backlog. The plan splits ``D`` between the pools and
    the aggregated variants in one row; the pools' rows count ``u``, i.e. take the backlog in the same
    share as the rest of the demand.

    Raises:
        ValueError: ``pd_util`` outside (0, 1], a backlog below 0 or above the demand, or shapes that differ.
    """
    demand_rps, backlog = np.asarray(demand_rps, dtype=float), np.asarray(backlog, dtype=float)
    if not 0 < pd_util <= 1:
        raise ValueError(f"pool_util_path: pd_util must be in (0, 1], got {pd_util}")
    if demand_rps.shape != backlog.shape:
        raise ValueError(f"pool_util_path: demand {demand_rps.shape} and backlog {backlog.shape} differ in shape")
    if np.any(backlog < 0) or np.any(backlog > demand_rps + 1e-9):
        raise ValueError("pool_util_path: the backlog must be within [0, demand] at every step")
    if pd_util == 1:
        return np.ones_like(demand_rps)
    counted = demand_rps - backlog + pd_util * backlog
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counted > 0, pd_util * demand_rps / np.where(counted > 0, counted, 1.0), pd_util)


SLO_MISSED_HOLD_S = 120.0
"""No pool replica is removed for this long after the last tick the service missed its SLO
(``pid_rules.slo_missed``), as none is while it misses it: the requests that arrived while it did are
still being served, and the signal window's mean reads calm before they are. Two minutes, the window the
fault suite judges a scale-down by (``autoscaler.faults.harm``, ``down_while_missing_slo``). In
decode-pool-loss (seed 2) the MPC removed a decode replica at 3,720 s, 60 s after the mean last read
3 x the SLO, while the requests of the 120 s before it still missed. The hold keeps the starting replicas
too (the plan's ``keep`` is the pool's ready plus starting replicas meanwhile): with ``pd_util=0.6``
(seed 0) the plan cancelled a prefill replica still starting at 2,835 s, 15 s after the mean read 3.3 x
the SLO, with 5 ready and the requests of the 120 s before meeting it 56 % of the time; it asked for
two more the next tick."""


POOL_BACKLOG_S = 60.0
"""``pool_scale``: pools whose queues hold at least this many seconds of their modelled rate (the slower
pool's ready replicas) keep both busy, so their completions are what they can serve. A
minute: the plan's signal window (``DEFAULT_WINDOW_S``), over which the completions are counted."""
POOL_SCALE_FLOOR = 0.6
"""``pool_scale`` never believes a pool completes less than this share of its modelled rate. Below it,
the plan would size the pool past twice the demand by the model (the fault suite's ``overshoot``:
decode-pool-loss asks 12 req/s of pools modelled at ~6.6 req/s a replica, and the plan's horizon at
~15 req/s over 6.6 x 0.6 is 4 replicas, 5 at 0.5). Tuned on decode-pool-loss at seed 0 (0.5, 0.6, 0.7;
docs/controllers.md, "A pool that completes less than its model")."""


def pool_scale(completed_rps: float | None, ready_rps: float, queue: float | None, pair_rps: float) -> float:
    """The share of a pool's modelled capacity the plan counts on this tick, from what the pool completes
    while the pools' backlog keeps it busy (issue 34: the MPC held 3 + 3 replicas near 0 % attainment
    for 15 minutes after decode-pool-loss, its plan counting 19.7 req/s where the pools completed 8-9).

    Args:
        completed_rps: the pool's completions, requests/s over the signal window (None: unknown).
        ready_rps: the pool's ready replicas' modelled capacity, requests/s (sum of ready x capacity).
        queue: the pools' queues, requests (both pools' waiting, reads included; None: unknown). An
            aggregated replica's queue is not the pools' work.
        pair_rps: the modelled capacity of the slower pool's ready replicas, requests/s.

    Returns:
        1 unless ``queue`` holds at least ``POOL_BACKLOG_S`` x ``pair_rps`` and the pool has ready
        capacity; then ``completed_rps / ready_rps`` within ``[POOL_SCALE_FLOOR, 1]``. A pool that
        completes its model's rate or more keeps it (the learner does not raise a pool's capacity).
    """
    if completed_rps is None or queue is None or ready_rps <= 0 or pair_rps <= 0:
        return 1.0
    if queue < POOL_BACKLOG_S * pair_rps:
        return 1.0
    return min(1.0, max(POOL_SCALE_FLOOR, completed_rps / ready_rps))


POOL_GROW_CAP = 2.0
"""``cap_pool_growth``: a scale-up takes a pool to at most this many times the demand held now, plus one
replica, of modelled capacity: the fault suite's ``overshoot`` bound (twice the demand and one replica;
``autoscaler.faults.harm``), the most a user expects a recovery to ask for."""


def cap_pool_growth(desired: Mapping[str, int], current: Mapping[str, int], role_of: Mapping[str, str],
                    modelled: Mapping[str, float], held_rps: float, pd_util: float = 1.0) -> dict[str, int]:
    """``desired`` with each pool grown to at most ``POOL_GROW_CAP`` x ``held_rps`` plus one replica of its
    largest modelled capacity (never below ``current``: this rule removes nothing): the replicas added
    past that go, the variant of the largest modelled capacity first. The capacities are the model's
    (``modelled / pd_util``): the suite's bound is on what the replicas can serve, and a plan counting
    ``pd_util`` of it would otherwise grow a pool to 1 / ``pd_util`` times the bound (decode-pool-loss,
    ``pd_util=0.6``, seed 0: prefill 4 -> 5 -> 6 -> 7 and decode 4 -> 6, 32.8-46.0 req/s of modelled
    capacity at 12.5 req/s of demand, against the suite's 31.5). A ``pd_util`` below 1 / ``POOL_GROW_CAP``
    raises the multiple to 1 / ``pd_util``: the steady plan it asks for is never cut. Not applied to a service with a
    prefill:decode ``ratio`` (``decide``): a pool the plan grows to keep the ratio may be past the bound
    (2 decode replicas of 149 req/s beside 2 prefill replicas at 30 req/s), and dropping one breaks it.

    Issue 34's decode-pool-loss: the plan, counting the pools at what they complete (``pool_scale``) and
    then draining the backlog, asked 4 -> 5 of each pool at 12 req/s of arrivals (5 x 7.6 req/s modelled,
    past twice the demand and one replica).

    Args:
        desired, current: variant -> replicas (every pool variant of ``role_of`` in both).
        role_of: pool variant -> its role.
        modelled: pool variant -> one replica's capacity as the plan counts it, requests/s (times ``pd_util``,
            before ``pool_scale``).
        held_rps: the demand held now, requests/s (the highest arrival rate of the hold window).
        pd_util: the share of the model's capacity in ``modelled``, in (0, 1] (``MPCController``).
    """
    if not 0 < pd_util <= 1:
        raise ValueError(f"cap_pool_growth: pd_util must be in (0, 1], got {pd_util}")
    model = {n: c / pd_util for n, c in modelled.items()}
    out = dict(desired)
    for role in set(role_of.values()):
        names = [n for n, r in role_of.items() if r == role]
        limit = max(POOL_GROW_CAP, 1 / pd_util) * held_rps + max((model.get(n, 0.0) for n in names), default=0.0)
        limit = max(limit, sum(current.get(n, 0) * model.get(n, 0.0) for n in names))
        by_size = sorted(names, key=lambda n: -model.get(n, 0.0))
        while sum(out[n] * model.get(n, 0.0) for n in names) > limit + 1e-9:
            added = [n for n in by_size if out[n] > current.get(n, 0)]
            if not added:
                break
            out[added[0]] -= 1
    return out


def hold_pool_downs(desired: Mapping[str, int], current: Mapping[str, int], plan: Mapping[str, np.ndarray],
                    unserved: np.ndarray, pools: Mapping[str, str], capacity: Mapping[str, float],
                    pd_peak_rps: float | None) -> dict[str, int]:
    """``desired`` with each pool's scale-down held at ``current`` (every variant of the pool that would
    go down) where the plan leaves demand unserved at any step, plans one of the pool's variants back to
    today's count at a later step, or leaves the pool less than ``DOWN_DEMAND_FLOOR`` x the peak demand
    its pools serve over the horizon.

    Args:
        desired, current: variant -> replicas the plan asks for now, and today's.
        plan: variant -> the plan's replicas per step, shape (H,).
        unserved: the plan's unserved demand per step, requests/s, shape (H,).
        pools: pool variant -> its role (``prefill`` or ``decode``); the variants not in it are aggregated
            and left as planned (their runs were tuned so).
        capacity: variant -> one replica's requests/s as planned.
        pd_peak_rps: the highest demand the plan gives the pools over the horizon (``Plan.pd_rps``), None
            when unknown (no margin rule then).

    Hysteresis at a replica boundary (``DOWN_DEMAND_FLOOR``, 1.25: the PID's operating ratio at its
    setpoint, ``controllers.pid_rules``): with the demand at one pool's capacity in whole replicas (the
    fault suite's transfer-slowdown: 8.5-9.2 req/s against five prefill replicas' 9.24), the plan went
    5 -> 6 -> 5 every 3 to 6 minutes all run long, a step down falling inside the link slowdown, with
    the SLO already slipping. It kept six replicas at no miss, then removed one with the same demand
    now and planned 0.42 req/s unserved instead (a miss priced near a replica), or removed one for a
    horizon's peak 5 % under the five replicas' capacity. A pool goes down only with a quarter of room.
    """
    out = dict(desired)
    misses = bool(np.max(unserved) > 1e-6) if len(unserved) else False
    for role in sorted(set(pools.values())):
        names = [n for n, r in pools.items() if r == role and n in desired]
        after = sum(desired[n] * capacity.get(n, 0.0) for n in names)
        before = sum(current.get(n, 0) * capacity.get(n, 0.0) for n in names)
        if not names or after >= before - 1e-9:
            continue
        back = any((steps := plan.get(n)) is not None and len(steps) > 1 and desired[n] < current.get(n, 0)
                   and float(np.max(steps[1:])) >= current.get(n, 0) for n in names)
        narrow = pd_peak_rps is not None and after < DOWN_DEMAND_FLOOR * pd_peak_rps
        if misses or back or narrow:
            out.update({n: max(desired[n], current.get(n, 0)) for n in names})
    return out


def hold_downs_within_start(desired: Mapping[str, int], current: Mapping[str, int], plan: Mapping[str, np.ndarray],
                            unserved: np.ndarray, window: int) -> dict[str, int]:
    """``cover=1``: ``desired`` with every aggregated variant's scale-down held at ``current`` where, within
    the first ``window`` steps (a cold start plus one step, ``cover_window``), the plan leaves demand
    unserved or plans a variant that goes down back to today's count.

    A replica removed now cannot serve again before a start-up: a plan that is short within that
    time, or wants the replica back within it, is made smaller than the demand it sees by the
    removal. The rule is ``hold_pool_downs``' first two clauses, applied to the aggregated variants
    over a cold start. Opt-in: on issue 28's trace of ``mpc:forecast=perfect:hold_s=0`` (Azure conv,
    seed 0) the removals that cost the misses came with no shortfall planned (the capacity model
    called the smaller fleet enough), so it held none of them: 95.89 % against 95.69 %
    (docs/controllers.md, "Why perfect foresight without the hold misses").

    Args:
        desired, current: variant -> replicas the plan asks for now, and today's (aggregated variants
            only: the pools keep ``hold_pool_downs``).
        plan: variant -> the plan's replicas per step, shape (H,).
        unserved: the plan's unserved demand per step, requests/s, shape (H,).
        window: steps looked at (>= 1).

    Raises:
        ValueError: ``window`` < 1.
    """
    if window < 1:
        raise ValueError(f"hold_downs_within_start: window must be >= 1 step, got {window}")
    out = dict(desired)
    down = [n for n in desired if desired[n] < current.get(n, 0)]
    if not down:
        return out
    short = bool(np.max(unserved[:window]) > 1e-6) if len(unserved) else False
    back = any((steps := plan.get(n)) is not None and len(steps) > 1
               and float(np.max(steps[1:window])) >= current.get(n, 0) for n in down)
    if short or back:
        out.update({n: current.get(n, 0) for n in down})
    return out


def cover_window(variants: Sequence[Variant], dt_s: float) -> int:
    """Steps of ``dt_s`` seconds ``hold_downs_within_start`` looks at: the slowest cold start among
    ``variants`` in whole steps, plus one (the step in which a replica ordered after it is ready).

    Raises:
        ValueError: no variants, or ``dt_s`` <= 0.
    """
    if not variants or dt_s <= 0:
        raise ValueError(f"cover_window: need variants and dt_s > 0, got {len(variants)} and {dt_s}")
    return math.ceil(max(v.startup_cold_s for v in variants) / dt_s) + 1


def plan_variant(v: Variant, dt_s: float, capacity_rps: np.ndarray, current: int, ready: np.ndarray,
                 keep: int = 0, role: str | None = None) -> PlanVariant:
    """``v`` as the planner sees it with steps of ``dt_s`` seconds: start-ups in whole steps, the warm
    nodes today's ``current`` replicas leave free, and a replica started costing its cold start's GPU
    time ($); ``capacity_rps`` and ``ready`` per step (``models.planning.PlanVariant``).

    A variant above its cap today (its pods cannot be placed, ``autoscaler.loop.runner.available``, or
    its bound was lowered) is planned from its cap: the guard brings it down to it at once, Pending
    and starting pods included, whereas the planner removes only ready replicas, so it would find no
    plan at all for today's count (1 ready and 1 Pending under a cap of 0 did: issue 28's run of the
    fault suite). ``role``: None for an aggregated variant, else its pool (``PlanVariant.role``)."""
    if current > v.cap:
        current, ready = v.cap, np.minimum(np.asarray(ready, dtype=float), v.cap)
    return PlanVariant(
        name=v.name, gpu=v.gpu, gpus_per_replica=v.gpus_per_replica, price_per_hour=v.price_per_replica_hour,
        capacity_rps=capacity_rps, current=current, ready=ready, min_replicas=v.min_replicas, max_replicas=v.cap,
        warm_steps=math.ceil(v.startup_warm_s / dt_s), cold_steps=math.ceil(v.startup_cold_s / dt_s),
        warm_free=max(0, v.warm_nodes - current), keep=keep,
        start_cost=v.price_per_replica_hour * v.startup_cold_s / 3600.0, role=role,
    )


def hold_orders(v: PlanVariant) -> PlanVariant:
    """``v`` ordering nothing more (``overdue=1``, a variant with a start at risk): its bound lowered to
    today's replicas (never below its minimum), so the plan orders on another variant what the start at
    risk was to serve. Its starts are not cancelled (the planner removes only ready replicas): they may
    still come up, and ``kubernetes.pending_timeout_s`` decides when a Pending variant is given up."""
    return replace(v, max_replicas=max(v.min_replicas, min(v.max_replicas, v.current)))


def miss_cost(variants: list[PlanVariant], miss_weight: float) -> float | None:
    """$ per request left unserved: ``miss_weight`` x the dearest way to serve a request at the first
    step's capacities, $ per request: an aggregated variant's, or a prefill variant's plus a decode
    variant's (the dearest of each pool: a request of the pools' share takes both); None when
    nothing can serve within the SLO."""
    def per_request(role: str | None) -> list[float]:
        return [v.price_per_hour / 3600.0 / v.capacity_rps[0] for v in variants
                if v.role == role and v.capacity_rps[0] > 0]
    ways = per_request(None)
    prefill, decode = per_request("prefill"), per_request("decode")
    if prefill and decode:
        ways.append(max(prefill) + max(decode))
    return miss_weight * max(ways) if ways else None


UNSERVED_WEIGHT = 100.0
"""``unserved=1``: $ per request of a shortfall below the rate already seen, in ``miss_weight``'s unit
(the dearest way to serve a request), priced on the steps an order can still serve (``seen_shortfall``).
100 = 1 / (1 - 0.99), the attainment target's (``controllers.bound.DEFAULT_TARGET``) one miss in a
hundred: a shortfall on a rate already seen does not miss its own requests alone (the queue it builds
delays every request after it), so a request of it is priced as the hundred requests among which the
target allows one miss. Chosen before any run, not tuned (issue 28; docs/controllers.md, "Unserved
demand already seen")."""


def seen_shortfall(demand_rps: np.ndarray, held_rps: float, first_step: int) -> np.ndarray:
    """``unserved=1``: requests/s of each step's shortfall the plan may leave at the plain miss cost,
    shape (H,) like ``demand_rps`` (requests/s a step): the demand above ``held_rps`` (the hold's
    highest arrival rate, requests/s: demand already seen, so real) from step ``first_step`` on (0-based;
    the fastest start-up in steps, the first step an order placed now serves), and all of the demand
    before it (no order serves there, so pricing it buys nothing). Any shortfall beyond it is demand
    seen real that an order can still serve, priced at ``UNSERVED_WEIGHT``: without it the plan kept N
    replicas while the horizon's peak stood ~1 req/s above what N serve (issue 28: ``quantile=0.8`` on
    the fault suite's wrong-profile ordered its second GH200 135 s after ``mpc``).

    The plan takes it as ``models.planning.PlanService.shed_rps`` (the cheaper tier of a step's shortfall,
    at ``shed_cost``), the rest of a shortfall at ``miss_cost``: a convex two-price cost, so the solve
    leaves the cheap tier unserved first.

    Raises:
        ValueError: ``held_rps`` negative or not finite, or ``first_step`` negative.
    """
    if not 0 <= held_rps < math.inf or first_step < 0:
        raise ValueError(f"seen_shortfall: need held_rps >= 0 and first_step >= 0, got {held_rps} and {first_step}")
    demand = np.asarray(demand_rps, dtype=float)
    out = np.maximum(demand - held_rps, 0.0)
    out[:first_step] = demand[:first_step]
    return out


def pd_ratio(svc: Service) -> tuple[float, float] | None:
    """``(min_ratio, max_ratio)`` of ``svc``'s ``roles.ratio`` for the plan (``PlanService.pd_ratio``), or
    None without one, or when no whole replica counts within the pools' bounds keep it
    (``controllers.roles.ratio_reachable``: the plan would have none; Kthena's rule then clamps to the
    bounds, and the plan ignores the ratio)."""
    if svc.roles is None or svc.roles.ratio is None:
        return None
    r = svc.roles.ratio

    def bounds(vs: list[Variant]) -> tuple[int, int]:
        return sum(v.min_replicas for v in vs), sum(v.cap for v in vs)

    if not ratio_reachable(r, bounds(svc.roles.prefill), bounds(svc.roles.decode)):
        return None
    return r.min_ratio, r.max_ratio


def removal_order(est: ServiceEstimate, desired: Mapping[str, int]) -> dict[str, list[str]]:
    """variant -> its ready pods, coldest first (lowest prefix-cache hit rate over the pod's life, unknown
    counted cold), the least loaded (running + waiting) first among equals; for the variants that
    shrink. Removing them keeps the warm caches, whose hits are prefill the fleet does not redo."""
    out: dict[str, list[str]] = {}
    for v, n in desired.items():
        if v not in est.variants or n >= est.variants[v].current:
            continue
        pods = [p for p in est.pods if p.variant == v and p.name]

        def key(p: PodObservation) -> tuple[float, float]:
            q, h = p.prefix_queries_total, p.prefix_hits_total
            return (h / q if q and h is not None else 0.0, p.running + p.waiting)
        out[v] = [p.name for p in sorted(pods, key=key)]
    return out


def _check_floor_scale(name: str, floor: int, floor_x: float, floor_ahead_s: float) -> None:
    """``floor_x`` >= 1 and ``floor_ahead_s`` >= 0, each away from its default only with ``floor=1``."""
    if not 1 <= floor_x < math.inf or (floor_x != 1 and not floor):
        raise ValueError(f"{name}: floor_x must be >= 1, and above 1 only with floor=1, got floor_x={floor_x} "
                         f"with floor={floor}")
    if not 0 <= floor_ahead_s < math.inf or (floor_ahead_s and not floor):
        raise ValueError(f"{name}: floor_ahead_s must be >= 0, and above 0 only with floor=1, got "
                         f"floor_ahead_s={floor_ahead_s} with floor={floor}")


def _check_floor(name: str, cfg: FleetConfig, window_s: float) -> None:
    """``floor=1``'s needs (``controllers.burst_floor``): a signal window of whole ticks past one tick,
    and the arrivals counter scraped once a tick, so two consecutive rates differ by one tick's arrivals
    in and one tick's out.

    Raises:
        ValueError: one line naming ``name``: the window, or ``simulator.scrape_interval_s`` other than
            ``controller.tick_s``.
    """
    tick = cfg.controller.tick_s
    whole_ticks(counted_span(max(window_s, tick), tick), tick)
    if cfg.simulator.scrape_interval_s != tick:
        raise ValueError(f"{name}: floor=1 reads each tick's arrivals from a counter scraped once a tick: "
                         f"needs simulator.scrape_interval_s ({cfg.simulator.scrape_interval_s:g} s) equal "
                         f"to controller.tick_s ({tick:g} s)")


def pool_router(cfg: FleetConfig) -> tuple[str, str]:
    """(the gateway's router, the fleet-file key it was read from): ``controller.forecast.router``
    where set, else ``simulator.router``."""
    named = cfg.controller.forecast.router
    return (named, "controller.forecast.router") if named else (cfg.simulator.router, "simulator.router")


def pools_queues(cfg: FleetConfig) -> bool:
    """Whether the gateway's replicas share their queues as the pooled capacity model takes them
    (``models.capacity.replica_capacity(..., replicas=n)``: a router that sends each request to the
    replica with the fewest outstanding): ``controller.forecast.router``, else ``simulator.router``, is
    ``least_outstanding`` (``pool_router``). Under ``prefix_affinity`` a session stays on its replica, so
    a replica's queue is its own (issue 28: ``pool=8`` on the fault suite's cascade planned each H100 at
    1.45 req/s where alone it is 1.17, and removed replicas while the SLO was missed)."""
    return pool_router(cfg)[0] == "least_outstanding"


def pool_off_note(cfg: FleetConfig, pool: int) -> str | None:
    """The words an operator reads where ``pool=N`` (N > 1) was asked for and the router shares no queue
    (``pools_queues``): the pool asked for, the router and the key it was read from; None where the
    pool applies or none was asked for."""
    if pool <= 1 or pools_queues(cfg):
        return None
    router, where = pool_router(cfg)
    return f"pool={pool} not applied: router {router} ({where}) shares no queue, every replica planned alone"


def _check_unserved(name: str, unserved: int, shed: int, miss_weight: float) -> None:
    """``unserved=1`` takes the plan's cheaper price tier (``PlanService.shed_rps``), which ``shed=1`` takes
    for shedding, and prices above the miss cost.

    Raises:
        ValueError: one line naming ``name``: ``unserved=1`` with ``shed=1`` or ``miss_weight`` >=
            ``UNSERVED_WEIGHT``.
    """
    if unserved and (shed or miss_weight >= UNSERVED_WEIGHT):
        raise ValueError(f"{name}: unserved=1 prices a shortfall below the rate seen on the plan's cheaper "
                         f"price tier, which shed=1 takes for shedding, and above the miss cost: needs shed=0 "
                         f"and miss_weight < {UNSERVED_WEIGHT:g}, got shed={shed}, miss_weight={miss_weight:g}")


class MPCController(Controller):
    """Receding-horizon replica planning (module docstring).

    It scales prefill/decode pools (``scales_roles``): a service's pools are planned in the same
    problem as its aggregated variants (module docstring, "Prefill/decode pools").

    Args:
        cfg: the fleet (tick, window, guard limits).
        weights: service -> variant -> capacity of one replica, requests/s.
        horizon: steps of ``tick_s`` planned (>= 1).
        quantile: forecast quantile planned on, in (0, 1): the forecaster's interval read there.
        miss_weight: cost of a request left unserved, in units of the dearest variant's cost per request.
        forecast: ``auto`` (the forecast stage's path), ``arima`` (the same, its request rate from an
            ARIMA refitted every step: opt-in, docs/forecasting.md, "A model that follows a swing"),
            ``last`` (today's rate for every step) or ``perfect`` (``future_rps``, the trace's true
            demand: a yardstick for the forecaster).
        hold_s: the plan never goes below the highest arrival rate seen over this many seconds (>= 0);
            None (default): ``DEFAULT_HOLD_S``, or with ``hedge=measured`` measured on the service's
            own rates (``measured_hold``); ``hold`` says which when ``hold_s`` is None.
        learn: what each variant's capacity is corrected by from its own telemetry (needs ``mixes``):
            0 nothing; 1 its speed (``speed_factor``); 2 its speed and its capacity posterior
            (``models.learning``: opt-in, it cost more than it saved on the shipped traces,
            ``docs/controllers.md#capacity-learned-online``); 3 as 2, each correction's sign gated by
            the variant's p95 SLO ratio (``p95_stress``, ``models.learning.STRESS``: down only where
            the tail is near the SLO, up only where it is not; opt-in).
        mixes: service -> the request mix ``weights`` were computed for (None: the service gets none).
        window_s: signal window, seconds (at least the tick).
        mix: ``calibrated`` (capacity for the mix the registry calibrated on) or ``forecast`` (that
            mix scaled to the forecast stage's mean prompt and output lengths, at the cache-warmth
            stage's predicted fleet prefix-cache hit rate, which counts starting replicas cold).
        future_rps: with ``forecast=perfect``, service -> true demand per tick from t = 0, requests/s.
        node_limit: most branch-and-bound nodes per solve (>= 0; None: none), beside the time limit
            (``models.planning.PlanProblem``).
        time_limit: wall seconds per solve (> 0; default ``PlanProblem.time_limit_s``, 10 s: a live tick is
            15 s). Raised in simulation with ``node_limit`` so that work alone stops the solves, the
            oracle's way: on a loaded machine the 10 s stopped solves before 100 nodes, and two runs of
            one seed differed by 4 % in cost (docs/benchmarks.md, issue 34's seventh follow-up).
            Opt-in, and for simulation only: a live loop's solve must end within its tick.
        pool: the most replicas a capacity is pooled over (``corrected_weights``); 1 (default) plans
            every replica as if it served alone. Opt-in (``pool=32`` measured): with it the plan runs
            replicas at the model's true capacity, and on a rising load it fell behind
            (docs/controllers.md#capacity-of-a-replica-modelscapacitypy). Pooled only behind a router
            that places by outstanding requests (``controller.forecast.router``, else ``simulator.router``:
            ``least_outstanding``); under ``prefix_affinity`` a session keeps its replica, the queues are
            not shared, and every replica is planned alone (``pools_queues``).
        hedge: ``band`` (the forecaster's interval at ``quantile``, a ``DEFAULT_HOLD_S`` hold) or
            ``measured`` (the forecast mean times the ``COVERAGE`` quantile of this service's own
            forecast errors at each step, ``measured_path``, the band until enough are known; and
            the hold ``measured_hold`` chooses, unless ``hold_s`` is given), or ``adaptive`` (the
            forecaster's interval read at the z its own recent misses call for, ``conformal_z`` of
            ``band_scores``: z(``quantile``) until ``MIN_SCORES`` steps are judged; the
            ``DEFAULT_HOLD_S`` hold unless ``hold_s`` is given).
        hold: ``HOLDS``: ``auto`` (default: measured with ``hedge=measured``, else ``DEFAULT_HOLD_S``),
            ``fixed`` or ``measured`` (``measured_hold`` under any hedge; opt-in); ``hold_s`` overrides
            ``auto``, and is refused beside ``fixed`` or ``measured`` (``ValueError``).
        coverage: with ``hedge=adaptive``, the share of judged plan steps the band is sized to cover
            (``COVERAGE``), in (0, 1).
        trend: 1 plans never below today's rate rising at the slope the last cold start's rates show
            (``rising_slope``: its lower ``TREND_LEVEL`` bound, 0 unless significant) for a cold start
            (``trend_path``): a rise the forecaster's mean does not follow (it kept a flat path up the
            ramp scenario) is ordered for without the band's width; 0 (default): not (opt-in,
            docs/controllers.md, "Where the MPC's cost over the bound goes").
        cover: 1 holds every aggregated scale-down while the plan is short, or wants the replica
            back, within a cold start (``hold_downs_within_start``); 0 (default) applies the plan's.
        rise: 1 holds every aggregated scale-down while the arrival rate rises over the last
            ``RISE_SPAN_S`` (``hold_downs_while_rising``); 0 (default) applies the plan's (opt-in,
            issue 28; docs/controllers.md, "No scale-down on a rise").
        shed: 1 plans shedding the sheddable priority in the same problem and sets the thresholds
            (module docstring); 0 (default) leaves admission to the loop's policy.
        shed_weight: with ``shed``, $ per request shed in units of the dearest variant's $ per
            request served (> 1: a replica that serves its time is cheaper than shedding; below
            ``miss_weight``: sheddable requests are shed before interactive ones are missed).
        pd_util: share of a prefill/decode pool replica's modelled capacity the plan counts on, in (0, 1]
            (``DEFAULT_PD_UTIL``): a prefill replica's modelled rate is near all it can do, where an
            aggregated replica's (ITL-bound) leaves room for a burst, so the pools' headroom is planned
            (``docs/controllers.md``, "Making the pools pay on long prompts"); the backlog term is
            planned at the full capacity (``pool_util_path``).
        spill: the share ``r`` in [0, 1) of the pools' planned requests/s that the aggregated variants hold
            in reserve beside their own share (``models.planning.PlanService.pd_spill``: the demand row
            counts the pools' share at ``1 - r``), for the arrivals the gateway's saturation filter
            spills to them while every prefill replica is saturated in a sub-minute burst
            (``simulator.pd_saturation_filter``; docs/controllers.md, "An aggregated spill reserve"); 0
            (default): none. Acts only on a service with pools and aggregated variants. Not capped by the
            aggregated variants' ``max_replicas``: past them the plan grows the pools instead, each of
            their request/s counting ``1 - r`` (``spill=0.6`` on issue 34's fleet: all 40 H100s, then
            prefill replicas, more cost for less attainment).
        spill_idle: 1 (with ``spill``) hands the router the aggregated variants' weights scaled to their
            planned share of the demand (``idle_reserve``), so the reserve is not routed to while the pools
            take their share; 0 (default): their capacities, as without a reserve.
        pd_scale: 1 (default) counts a pool's capacity down to what it completes while the service's
            backlog keeps it busy (``pool_scale``); 0 counts the model's alone.
        burst: 1 plans each replica's capacity, and the learner's latency curve, for the arrivals'
            measured burstiness (``arrival_scv``: the median of the gateway's last ``BURST_TICKS``
            indices of dispersion of 1-s counts, ``Signals.arrival_dispersion``, split over the ready
            replicas by ``models.arrivals.per_replica_scv``, at least 1: ``_scv``); 0 (default): Poisson.
            Unknown (a source without the gateway's squares counter): Poisson.
        cap: 1 counts that an engine step prefills at most its token budget in the ITL bound
            (``models.capacity.ReplicaSpec.prefill_cap``); 0 (default): not
            (``docs/controllers.md#capacity-learned-online`` measures both).
        busy: 1 takes the prefill riding in a decode, in the ITL bound, as an M/G/1 busy period's work
            (``models.capacity.ReplicaSpec.busy_period``); 0 (default): over a fixed window
            (docs/benchmarks.md, "Capacity model", measures both).
        backlog: 1 plans on the busy-period form (as ``busy=1``, which it implies) with its prefill queue
            as a backlog serves it: queued prompts share a step's overhead, and the prompts a prefill
            busy period admitted weigh on its steps and the KV (``models.capacity.ReplicaSpec.backlog``);
            0 (default): not (docs/benchmarks.md, "The out-of-band cases, fourth pass").
        marginal: 1 plans on the default form with its TTFT bound over the prompts' marginal
            (``models.capacity.ReplicaSpec.prompt_marginal``: the prefill service's law and each
            request's slack from 0.5 %-wide prompt strata, not the mix's stratified points); 0
            (default): not (docs/benchmarks.md, "The out-of-band cases, sixth pass": 2.7 % dearer on
            the Mooncake scenario, seed 0, for the same attainment).
        floor: 1 never plans below the burst floor (``controllers.burst_floor``): the highest one-tick
            arrival rate over the hold (read back from the window's rates, ``short_rate``) times
            ``tick / (tick + ttft)``, the capacity that serves such a burst within the TTFT target; a
            floor on the capacity held, apart from each replica's capacity. 0 (default): not (opt-in,
            issue 28; docs/controllers.md, "The burst floor").
        floor_x: with ``floor``, the floor times this (>= 1; default 1, the floor as measured): headroom
            for a burst above the highest seen over the hold (``controllers.burst_floor.floored_demand``;
            issue 34, docs/controllers.md, "The burst floor scaled for the pools").
        floor_ahead_s: with ``floor``, the floor planned only from the first step this many seconds
            ahead (>= 0; default 0, every step): where a replica ordered now can serve it (a pool's
            300-s cold start), so the replicas running are not held for it before (``floored_demand``).
        overdue: 1 counts a start still not ready ``OVERDUE_MARGIN_S`` past the start-up it can be sure of
            as capacity at risk (``starts_at_risk``): left out of its variant's ready path, and the variant
            ordering nothing more while it has one (``hold_orders``), so the plan orders on another variant;
            the start is not cancelled. 0 (default): not (opt-in: on plain ``mpc`` it cost 6-15 % more on
            the fault suite's pending-pods for 0-0.1 point; docs/controllers.md, "Pending orders counted at
            risk").
        gap: 1 holds every scale-down (pools too) for a signal window after the arrival rates come back
            from a gap longer than the window (``resumed_after_gap``, ``hold_downs_after_gap``): a
            Prometheus back from an outage holds no sample before the restart in the window, and its
            rates read low until a whole window has passed. 0 (default): not (opt-in, issue 28;
            docs/controllers.md, "After a metrics gap").
        pending: 1 counts the starts of a variant whose pod has been unschedulable for ``PENDING_GRACE_S``
            (``VariantObservation.unschedulable_s``; nothing on None) as capacity at risk at once
            (``pending_at_risk``), with ``overdue=1``'s consequences (left out of the ready path,
            ``hold_orders``); with ``overdue=1`` too, a start is at risk by either rule. 0 (default): not
            (opt-in; docs/controllers.md, "Starts whose pods cannot be placed").
        unserved: 1 prices a shortfall below the hold's highest arrival rate (demand already seen), on the
            steps from the fastest start-up on (where an order serves), at ``UNSERVED_WEIGHT`` instead of
            ``miss_weight`` (``seen_shortfall``); the band's demand above that rate, and every step before,
            stay at the miss cost. It takes the plan's cheaper price tier (``PlanService.shed_rps``), so
            not with ``shed=1``, and needs ``miss_weight`` below ``UNSERVED_WEIGHT``. 0 (default): not
            (opt-in, issue 28; docs/controllers.md, "Unserved demand already seen").
        drain: 1 charges today's queue from the first plan step at which a replica can serve it
            (``drain_start``: a ready or starting replica's, or a start-up ordered now; for pools, both a
            prefill and a decode one) instead of from now (``backlog_steps``): a pool lost whole drains
            nothing before its start-up, and a drain charged from now falls on steps no order can
            reach. 0 (default): from now (opt-in, issue 28; docs/controllers.md, "The backlog drained
            where an order can serve it").
        arrivals: 1 feeds the forecast stage's request-rate model the arrival rate (``arrival_rate_rps``:
            the gateway's request counter, else completions plus the growth of the requests in the system,
            ``autoscaler.loop.estimate.ArrivalInference``; unknown where neither is known) instead of the
            completions, and leaves ``drain_excess`` out (the arrivals hold no drain to discount); no ready
            replica is removed while the service drains a backlog (``draining``) or within
            ``drain_memory_s`` after (without it, fast-ramp seed 0 removed one while the SLO was missed). 0
            (default): the completions (opt-in, issue 28; docs/controllers.md, "The forecast fed the
            arrivals").
        smooth_s: with > 0, the forecast stage's request-rate model is fed the mean of the demand rates
            of the last ``smooth_s`` seconds (``autoscaler.loop.forecast.smoothed``), not the signal
            window's rate; the held rates and today's rate are unchanged. 0 (default): the rate itself
            (opt-in, issue 28; docs/forecasting.md, "Azure code: a forecast that swings to 0"); an unknown
            rate is fed unknown. Refused where no forecast stage runs (``forecast`` ``last`` or ``perfect``
            without ``mix=forecast``): it would do nothing.
        warm: 1 solves a service planned alone through highspy (when installed; else as 0) from its
            last plan moved on by the ticks since (``models.planning.PlanProblem.start``); 0
            (default) through scipy without a start: measured, the start did not shorten the solve
            (``docs/controllers.md#solving-fast``).
        int_blocks: K >= 1 keeps only the first K blocks of a service planned alone integer, the later
            ones relaxed and rounded afterwards (``models.planning.PlanProblem.integer_blocks``; its
            first block, the step applied, is always whole); 0 (default) solves every block whole
            (the tuned exact search). Opt-in: ``docs/controllers.md#solving-fast`` measures its time
            and what it costs.
        int_up: 1 (with ``int_blocks``) prices the relaxed blocks as if their replica counts were
            rounded up (``models.planning.PlanProblem.tail_up``: the LP relaxation's later counts
            rounded up and fixed, the first K blocks searched whole against them), so a fraction
            ordered later no longer undercuts a whole replica ordered now; 0 (default) off. Opt-in:
            ``docs/controllers.md`` "Relaxed blocks priced rounded up" measures it.
        joint_blocks: K >= 1 keeps only the first K blocks integer in the plan of several services
            solved together under shared GPU limits (``prepare``: jointly near the LP relaxation, or
            decomposed by service above ``models.planning.JOINT_UP_TO`` service-steps), the later
            ones relaxed and rounded per service; 0 (default) every block whole. A lone service's
            plan is ``int_blocks``' alone. Opt-in: ``docs/controllers.md#solving-fast`` ("Relaxed
            blocks under shared quotas") measures its time and cost at 50 services.
        joint_warm: 1 solves a decomposed plan's coordinator LP (the joint LP relaxation the shared
            limits are shared on) from the last tick's final basis
            (``models.planning.PlanProblem.warm_coordinator``); 0 (default) cold. Opt-in: the LP's
            optimum is the same, but another optimal vertex may share the limits otherwise, so the
            plan can differ (``docs/controllers.md#solving-fast``, "The coordinator from the last
            tick's basis"). It acts only where the joint problem is decomposed (above
            ``JOINT_UP_TO`` service-steps); a smaller one is solved whole, as with 0, and leaves no
            basis (the next decomposed tick's coordinator starts cold).
        settle_s: > 0 holds each variant's scale-down, where the plan's total falls, at the highest count
            the plan recommended for it within the last ``settle_s`` seconds, never above today's count nor
            the total above today's (``settle_downs``: the HPA's scale-down stabilisation window, whose
            default is 300 s); a scale-up, or a swap between variants, is not delayed. 0
            (default): off (opt-in, issue 28; docs/controllers.md, "Scale-down stabilisation").
        settle_by: what ``settle_s`` compares: ``count`` (default), each variant's replicas
            (``settle_downs``); ``capacity``, the req/s the plan's fleet serves by this tick's capacity
            model, per group of variants (``settle_capacity``). Opt-in; needs ``settle_s`` > 0 or ``settle=measured``.
        settle_final: 1 makes a fall the window let through final: the window's older recommendations
            are capped at what was kept (``release_counts``), so a swap's released replica is not taken
            back while it drains. 0 (default): as before. Needs ``settle_s`` > 0 or ``settle=measured``.
        settle: ``fixed`` (default): the window is ``settle_s``; ``measured``: the shortest of ``SETTLES_S``
            whose falls seldom reversed within a cold start on this service's last hour of the plan's
            recommendations (``measured_settle``, measured every ``HOLD_EVERY_S``), with ``settle_s`` 0.
        name: the spec it was built from.

    Raises:
        ValueError: an argument out of range (``settle_s`` negative included), an unknown ``forecast``,
            ``hedge`` or ``hold``, or ``perfect`` without
            ``future_rps``, a negative ``node_limit``, ``int_blocks`` or ``joint_blocks``, ``int_up`` other
            than 0 or 1, or 1 without ``int_blocks``, ``warm`` or ``joint_warm`` other than 0 or 1, ``unserved=1``
            with ``shed=1`` or ``miss_weight`` >= ``UNSERVED_WEIGHT``, ``hold`` ``fixed`` or ``measured`` with
            ``hold_s``.
    """

    scales_roles = True
    """It plans and returns the replicas of a service's prefill and decode pools beside its aggregated
    variants (the loop reads this before handing it a service with ``roles``)."""

    def __init__(self, cfg: FleetConfig, weights: Mapping[str, Mapping[str, float]], horizon: int = 40,
                 quantile: float = 0.9, miss_weight: float = 10.0, forecast: str = "auto",
                 hold_s: float | None = None, learn: int = 1, hedge: str = "band",
                 mixes: Mapping[str, RequestMix | None] | None = None,
                 window_s: float = DEFAULT_WINDOW_S, mix: str = "calibrated",
                 future_rps: Mapping[str, np.ndarray] | None = None, node_limit: int | None = None,
                 time_limit: float = SOLVE_TIME_LIMIT_S, pool: int = 1, warm: int = 0, int_blocks: int = 0,
                 int_up: int = 0, joint_blocks: int = 0, joint_warm: int = 0,
                 shed: int = 0,
                 shed_weight: float = DEFAULT_SHED_WEIGHT,
                 pd_util: float = DEFAULT_PD_UTIL, spill: float = 0.0, spill_idle: int = 0, pd_scale: int = 1,
                 burst: int = 0,
                 cap: int = 0, busy: int = 0,
                 backlog: int = 0, marginal: int = 0,
                 coverage: float = COVERAGE, cover: int = 0, hold: str = "auto", trend: int = 0,
                 floor: int = 0, floor_x: float = 1.0, floor_ahead_s: float = 0.0,
                 rise: int = 0, overdue: int = 0, gap: int = 0, pending: int = 0,
                 unserved: int = 0, drain: int = 0, arrivals: int = 0, settle_s: float = 0.0,
                 settle_by: str = "count", settle_final: int = 0, settle: str = "fixed",
                 smooth_s: float = 0.0, name: str = "mpc") -> None:
        if (horizon < 1 or not 0 < quantile < 1 or not 0 < miss_weight < math.inf
                or (hold_s is not None and not 0 <= hold_s < math.inf) or not 0 <= settle_s < math.inf):
            raise ValueError(f"{name}: need horizon >= 1, quantile in (0, 1), miss_weight > 0, hold_s >= 0 and "
                             f"settle_s >= 0, got {horizon}, {quantile}, {miss_weight}, {hold_s}, {settle_s}")
        _check_settle(name, settle_s, settle_by, settle_final, settle)
        if node_limit is not None and node_limit < 0:
            raise ValueError(f"{name}: node_limit must be >= 0, got {node_limit}")
        if not 0 < time_limit < math.inf:
            raise ValueError(f"{name}: time_limit must be > 0 seconds, got {time_limit}")
        if pool < 1:
            raise ValueError(f"{name}: pool must be >= 1, got {pool}")
        if not 0 < coverage < 1:
            raise ValueError(f"{name}: coverage must be in (0, 1), got {coverage}")
        check_pool_settings(name, pd_util, spill, spill_idle)
        if int_blocks < 0:
            raise ValueError(f"{name}: int_blocks must be >= 0, got {int_blocks}")
        if joint_blocks < 0:
            raise ValueError(f"{name}: joint_blocks must be >= 0, got {joint_blocks}")
        if int_up not in (0, 1) or (int_up and (not int_blocks or warm)):  # warm's solve would skip tail_up's
            raise ValueError(f"{name}: int_up must be 0 or 1, and 1 needs int_blocks >= 1 (it prices the relaxed "
                             f"blocks) and warm=0 (the warm solve skips that search), got int_up={int_up} with "
                             f"int_blocks={int_blocks}, warm={warm}")
        for option, x in (("warm", warm), ("joint_warm", joint_warm), ("pd_scale", pd_scale), ("cover", cover),
                          ("trend", trend), ("floor", floor), ("rise", rise),
                          ("overdue", overdue), ("gap", gap), ("pending", pending), ("unserved", unserved),
                          ("drain", drain), ("arrivals", arrivals)):
            if x not in (0, 1):
                raise ValueError(f"{name}: {option} must be 0 or 1, got {x}")
        if burst not in (0, 1) or cap not in (0, 1):
            raise ValueError(f"{name}: burst and cap must be 0 or 1, got {burst} and {cap}")
        if shed not in (0, 1) or (shed and not 1.0 < shed_weight < miss_weight):
            raise ValueError(f"{name}: need shed 0 or 1 and 1 < shed_weight < miss_weight ({miss_weight:g}), "
                             f"got {shed} and {shed_weight}")
        _check_unserved(name, unserved, shed, miss_weight)
        if forecast not in FORECASTS:
            raise ValueError(f"{name}: forecast must be one of {', '.join(FORECASTS)}, got '{forecast}'")
        if hedge not in HEDGES:
            raise ValueError(f"{name}: hedge must be one of {', '.join(HEDGES)}, got '{hedge}'")
        _check_hold(name, hold, hold_s)
        if mix not in MIXES:
            raise ValueError(f"{name}: mix must be one of {', '.join(MIXES)}, got '{mix}'")
        if forecast == "perfect" and future_rps is None:
            raise ValueError(f"{name}: forecast=perfect needs a trace (simulate, compare): it reads the true demand")
        _check_smooth(name, smooth_s, forecast, mix)
        c = cfg.controller
        if floor:
            _check_floor(name, cfg, window_s)
        _check_floor_scale(name, floor, floor_x, floor_ahead_s)
        super().__init__(name, c.tick_s, max(window_s, c.tick_s),
                         forecast_horizon_s=(horizon * c.tick_s if forecast in STAGE_FORECASTS or mix == "forecast"
                                             else None),
                         forecast_model="arima" if forecast == "arima" else "auto",
                         forecast_demand="arrivals" if arrivals else "served", forecast_smooth_s=smooth_s)
        self.guard = c.guard
        self.weights = {s: dict(w) for s, w in weights.items()}
        self.horizon = horizon
        self.quantile = quantile
        self.hedge = hedge
        self.coverage = coverage
        self.z = NormalDist().inv_cdf(quantile) / Z95
        self.miss_weight = miss_weight
        self.hold_s = hold_s
        self.hold = hold
        self.learn = bool(learn) and mixes is not None
        self.learn_capacity = self.learn and learn >= 2
        self.gated = self.learn and learn >= 3
        self.mixes = dict(mixes or {})
        self.engine = cfg.planning_engine()
        self._capacity_cache: dict[tuple[object, ...], float] = {}
        self._role_cache: dict[tuple[object, ...], dict[str, float]] = {}
        self._allowance_cache: dict[tuple[object, ...], float | None] = {}
        self._pool_cache: dict[tuple[object, ...], float] = {}
        self._kept_cache: dict[tuple[object, ...], float] = {}
        self._curve_cache: dict[tuple[object, ...], LatencyCurve | None] = {}
        self._budget_cache: dict[tuple[object, ...], dict[str, ItlBudget]] = {}
        self.forecast = forecast
        self.mix = mix
        self.services = list(cfg.services)
        self.gpu_limits = cfg.gpu_limits
        self._joint: dict[str, tuple[float, _Inputs | Decision, Plan | None]] = {}
        self._joint_tick = False  # whether this tick's prepare planned the services together
        self.future_rps = {k: np.asarray(v, dtype=float) for k, v in (future_rps or {}).items()}
        self.memory: dict[str, _ServiceMemory] = {}
        self.node_limit = node_limit
        self.time_limit = time_limit
        self.pool = pool if pools_queues(cfg) else 1
        self.pool_off = pool_off_note(cfg, pool)  # warned once per service (decide), and in every reason
        self._pool_warned: set[str] = set()
        self.warm = bool(warm)
        self.int_blocks = int_blocks or None
        self.int_up = bool(int_up)
        self.joint_blocks = joint_blocks or None
        self.joint_warm = bool(joint_warm)
        self._coordinator_basis: CoordinatorBasis | None = None  # joint_warm: the last joint plan's
        self.burst = bool(burst)
        self.cap = bool(cap)
        self.backlog = bool(backlog)
        self.busy = bool(busy) or self.backlog
        self.marginal = bool(marginal)
        self.cover = bool(cover)
        self.trend = bool(trend)
        self.floor = bool(floor)
        self.floor_x = floor_x
        self.floor_from = math.ceil(floor_ahead_s / c.tick_s - 1e-9)  # the first plan step floored
        self.rise = bool(rise)
        self.overdue = bool(overdue)
        self.gap = bool(gap)
        self.pending = bool(pending)
        self.unserved = bool(unserved)
        self.drain = bool(drain)
        self.arrivals = bool(arrivals)
        self.settle_s = settle_s
        self.settle_by = settle_by
        self.settle_final = bool(settle_final)
        self.settle = settle
        self.shed = bool(shed)
        self.shed_enforced = True  # the loop says otherwise when it runs no admission policy (on_admission)
        self.shed_weight = shed_weight
        self.pd_util = pd_util
        self.spill = spill
        self.spill_idle = bool(spill_idle)
        self.pd_scale = bool(pd_scale)
        self.drain_memory_s = drain_memory_s(self.window_s, c.forecast.step_s)
        self.admission_cfg = c.admission_settings

    # ------------------------------------------------------------------ demand
    def demand(self, est: ServiceEstimate, svc: Service, now_rps: float,
               trend_rps: np.ndarray | None = None, backlog_start: int = 0) -> np.ndarray:
        """Requests/s to serve in each of the ``horizon`` steps (module docstring), shape (horizon,);
        with ``trend_rps`` (``trend=1``: ``trend_path``, shape (horizon,)) never below it either."""
        dt, h = self.tick_s, self.horizon
        mid = est.time_s + (np.arange(h) + 0.5) * dt
        path = np.full(h, now_rps)
        f = est.rate_forecast if self.forecast in STAGE_FORECASTS else None
        future = self.future_rps.get(svc.name)
        if self.forecast == "perfect" and future is not None and len(future):
            first = round(est.time_s / dt) + 1  # the steps after this tick
            path = future[np.minimum(first + np.arange(h), len(future) - 1)]
        elif f is not None:
            mean, upper = np.asarray(f.mean_rps), np.asarray(f.upper_rps)
            spread = np.where(np.isfinite(upper), upper - mean, 0.0)
            q = np.maximum(mean + self.z * spread, 0.0)
            path = np.interp(mid, f.times_s, q)
            if self.hedge == "adaptive":
                mem = self.memory.setdefault(svc.name, _ServiceMemory())
                m_k, s_k = np.interp(mid, f.times_s, mean), np.interp(mid, f.times_s, spread)
                z = self._adapt(mem, est.time_s, est.signals.arrival_rate_rps)
                path = np.maximum(m_k + z / Z95 * s_k, 0.0)
                mem.plans.append((est.time_s, m_k, s_k, now_rps))
            if self.hedge == "measured":
                mem = self.memory.setdefault(svc.name, _ServiceMemory())
                path = measured_path(mem, est.time_s, dt, np.interp(mid, f.times_s, mean), path,
                                     est.signals.arrival_rate_rps)
        if f is not None:  # the drain the completions' forecast holds is the queue's, added below
            path = path - self.drain_excess(est, svc, now_rps)
        if trend_rps is not None:
            path = np.maximum(path, trend_rps)
        path = np.maximum(path, now_rps)
        return path + self.backlog_path(est, svc, now_rps, backlog_start)

    def backlog_path(self, est: ServiceEstimate, svc: Service, now_rps: float, start: int = 0) -> np.ndarray:
        """Requests/s of today's queue that ``demand`` adds to each step, shape (horizon,): ``backlog_rps``
        over the steps until new replicas (the fastest start-up) have served ``DRAIN_S``, from step
        ``start`` on (0; ``drain=1``: ``drain_start``), 0 elsewhere (``backlog_steps``). An unknown queue
        adds nothing here, and ``decide`` then removes no replica (missing data is not a queue of 0)."""
        queue = est.signals.queue_length
        if queue is None:
            return np.zeros(self.horizon)
        return backlog_steps(queue, now_rps, self.fastest_steps(svc, est), start, self.tick_s, self.horizon)

    def _startup_steps(self, v: Variant, est: ServiceEstimate) -> int:
        """``v``'s fastest start-up in plan steps: warm while one of its warm nodes is free (its
        ``warm_nodes`` above its replicas today, ready and starting: ``plan_variant``'s ``warm_free``;
        the simulator starts a replica warm where a node holding the weights is free), else cold."""
        warm = v.warm_nodes > every_current(est).get(v.name, 0)
        return math.ceil((v.startup_warm_s if warm else v.startup_cold_s) / self.tick_s)

    def fastest_steps(self, svc: Service, est: ServiceEstimate) -> int:
        """Steps of ``tick_s`` until a replica ordered now is ready: the fastest start-up of ``svc``'s
        variants (``_startup_steps``: warm where a warm node is free, else cold), rounded up."""
        return min(self._startup_steps(v, est) for _, v in all_variants(svc))

    def drain_excess(self, est: ServiceEstimate, svc: Service, held_rps: float) -> float:
        """``drain_excess`` of this tick's forecast (0 without one, or with ``forecast`` last or perfect),
        within ``drain_memory_s`` of the last tick ``_inputs`` found the service ``draining``; 0 with
        ``arrivals=1`` (a forecast fed the arrivals holds no drain)."""
        f = est.rate_forecast if self.forecast in STAGE_FORECASTS else None
        if f is None or self.arrivals:
            return 0.0
        mem = self.memory.get(svc.name)
        since = math.inf if mem is None else est.time_s - mem.drained_s
        return drain_excess(est, f.times_s, f.mean_rps, est.signals.queue_length, held_rps, since,
                            self.drain_memory_s)

    def _adapt(self, mem: _ServiceMemory, now_s: float, actual_rps: float | None) -> float:
        """``hedge=adaptive``: this tick's z, the ``COVERAGE`` conformal quantile (``conformal_z``) of
        the last ``SCORE_WINDOW_S`` of ``band_scores`` (this tick's judged against ``actual_rps``),
        or z(``quantile``) until ``MIN_SCORES`` are known."""
        dt, h = self.tick_s, self.horizon
        while mem.plans and mem.plans[0][0] < now_s - (h + 1) * dt:
            mem.plans.popleft()
        while mem.scores and mem.scores[0][0] <= now_s - SCORE_WINDOW_S:
            mem.scores.popleft()
        if actual_rps is not None:
            mem.scores.extend((now_s, x) for x in band_scores(mem.plans, now_s, dt, actual_rps))
        z = conformal_z((x for _, x in mem.scores), self.coverage)
        mem.z = NormalDist().inv_cdf(self.quantile) if z is None else z
        return mem.z

    # ------------------------------------------------------------------ fleet state
    def _ready_by_step(self, est: ServiceEstimate, v: Variant, mem: _ServiceMemory) -> tuple[np.ndarray, int]:
        """Replicas of ``v`` ready by each step from today's replicas alone (none for a variant the
        estimate does not show), shape (horizon,), and how many of its starts are at risk (0 without
        ``overdue=1`` or ``pending=1``; ``_starts_at_risk``): the oldest ones ``overdue=1`` calls at risk
        and the newest ones ``pending=1`` does are left out."""
        obs = observed(est, v.name)
        seen = mem.seen_starting.setdefault(v.name, [])
        while len(seen) > obs.starting:  # the oldest starts became ready (or were removed)
            seen.pop(0)
        while len(seen) < obs.starting:
            seen.append(est.time_s)
        old, new = self._starts_at_risk(est, v, obs, mem) if self.overdue or self.pending else (0, 0)
        warm_left = v.warm_nodes
        ready = np.full(self.horizon, float(obs.ready))
        for i, first_seen in enumerate(seen):
            startup = v.startup_warm_s if warm_left > 0 else v.startup_cold_s
            warm_left -= 1
            if i < old or i >= len(seen) - new:
                continue
            left = max(0.0, first_seen + startup - est.time_s)
            ready[min(self.horizon, math.ceil(left / self.tick_s)):] += 1
        return ready, min(len(seen), old + new)

    def _starts_at_risk(self, est: ServiceEstimate, v: Variant, obs: VariantObservation,
                        mem: _ServiceMemory) -> tuple[int, int]:
        """How many of ``v``'s oldest starts ``overdue=1`` calls at risk (``starts_at_risk``; 0 without it)
        and how many of its newest ``pending=1`` does (``pending_at_risk`` on the observation's
        ``unschedulable_s``; 0 without it), on a bookkeeping of
        its own: the oldest starts are dropped as replicas turn ready and as the count of starts falls, and
        each new one gets its sure start-up when first seen (``sure_startup``), the replicas that may hold a
        warm node counted as the most of the last tick's live ones and today's ready, draining and older
        starting ones (a replica removed since the order may still have held one then), plus the starts
        before it first seen at the same tick. The ready path's own list goes by the count alone, so a tick
        where some starts became ready and as many were ordered leaves it the old first-seen times (Azure
        code seed 0 had 3 A100 starts seen at 315 s still listed at 645 s): read by this rule, they were at
        risk 30 s after their order. Kept apart, the ready path is the plain one until a start is at risk."""
        seen = mem.risk_seen.setdefault(v.name, [])
        sure = mem.sure_starting.setdefault(v.name, [])
        turned = max(0, obs.ready - mem.ready_last.get(v.name, obs.ready))
        mem.ready_last[v.name] = obs.ready
        for _ in range(max(min(len(seen), turned), len(seen) - obs.starting)):
            seen.pop(0)
            sure.pop(0)
        before, new = mem.live.get(v.name, 0), 0
        while len(seen) < obs.starting:
            occupied = max(before + new, obs.ready + obs.draining + len(seen))
            sure.append(sure_startup(v.startup_warm_s, v.startup_cold_s, v.warm_nodes, occupied))
            seen.append(est.time_s)
            new += 1
        mem.live[v.name] = obs.ready + obs.starting + obs.draining
        old = sum(starts_at_risk(seen, sure, est.time_s, OVERDUE_MARGIN_S)) if self.overdue else 0
        # seen is oldest first, so pending_at_risk's flags are the newest starts
        newest = sum(pending_at_risk(seen, obs.unschedulable_s, est.time_s)) if self.pending else 0
        return old, newest

    def _recovering(self, est: ServiceEstimate, svc: Service, mem: _ServiceMemory) -> bool:
        """True while the service recovers from a loss: fewer replicas than were applied last tick."""
        follows = est.time_s - mem.last_time_s <= 1.5 * self.tick_s  # the loop's own rules did not act between
        now = every_current(est)
        if follows and any(v in now and now[v] < n for v, n in mem.last_applied.items()):
            cold_s = max(v.startup_cold_s for _, v in all_variants(svc))
            mem.recovering_until = est.time_s + cold_s + self.guard.scale_down_cooldown_s
        return est.time_s < mem.recovering_until

    # ------------------------------------------------------------------ capacity, learned online
    def speed(self, est: ServiceEstimate, svc: Service, mem: _ServiceMemory) -> dict[str, float]:
        """variant -> how many times slower than its profile it runs: the median of the last
        ``SPEED_TICKS`` speed factors (``models.capacity.speed_factor``) from its pods' mean ITL at
        their rate per ready replica; 1 until ``SPEED_MIN_TICKS`` are known, or without ``learn``."""
        mix = self.mixes.get(svc.name)
        out = {}
        for v in svc.variants:
            seen = mem.speed.setdefault(v.name, deque(maxlen=SPEED_TICKS))
            obs = est.variants[v.name]
            rate, itl = obs.signals.request_rate_rps, obs.signals.tpot_mean_s
            spec = ReplicaSpec.of(v, self.engine)
            queue = obs.signals.queue_length  # unknown: a queue may be building, not a steady tick
            steady = self._steady(est, v.name, mem) and queue is not None and not queue > obs.ready
            if (self.learn and mix is not None and obs.ready > 0 and rate and itl and steady
                    and utilisation(spec, mix, rate / obs.ready) <= SPEED_MAX_UTILISATION):
                seen.append(speed_factor(spec, mix, rate / obs.ready, itl))
            alpha = float(np.median(seen)) if len(seen) >= SPEED_MIN_TICKS else 1.0
            out[v.name] = min(max(alpha, SPEED_LIMITS[0]), SPEED_LIMITS[1])
        return out

    def _steady(self, est: ServiceEstimate, variant: str, mem: _ServiceMemory) -> bool:
        """``steady_tick`` for ``variant``, and the service not recovering from a loss; records when
        its ready count changed."""
        obs = est.variants[variant]
        held = mem.ready_since.get(variant)
        if held is None or held[0] != obs.ready:
            mem.ready_since[variant] = held = (obs.ready, est.time_s)
        return est.time_s >= mem.recovering_until and steady_tick(est, held[1], self.window_s)

    def _scv(self, est: ServiceEstimate, svc: Service) -> float:
        """The arrival variability one replica of ``svc`` is planned for this tick (``burst``), rounded
        to a power of ``SCV_STEP``, in [1, ``SCV_LIMIT``]; 1 without ``burst`` or a measurement. The index is
        split over the fewest ready replicas of a group serving the stream (the aggregated variants, each
        prefill/decode pool) that has any: one per-replica variability per service, the most bursty. Records
        the tick's index of dispersion (``Signals.arrival_dispersion``) in the service's memory."""
        if not self.burst:
            return 1.0
        mem = self.memory.setdefault(svc.name, _ServiceMemory())
        idc = est.signals.arrival_dispersion
        if idc is not None and math.isfinite(idc) and est.time_s > mem.dispersion_s:
            mem.dispersion.append(idc)
            mem.dispersion_s = est.time_s
        if not mem.dispersion:
            return 1.0
        # the stream splits over each group of replicas that serves it (the aggregated variants, each
        # prefill/decode pool: every request passes both pools): the fewest ready of a group that has any
        # is the most bursty share a replica sees (a pool-only service read 0 aggregated replicas as one)
        groups = [sum(est.variants[v.name].ready for v in svc.variants if v.name in est.variants)]
        groups += [sum(o.ready for o in pool.variants.values()) for pool in est.pools.values()]
        ready = min((n for n in groups if n > 0), default=1)
        scv = per_replica_scv(float(np.median(mem.dispersion)), ready)
        scv = min(max(scv, 1.0), SCV_LIMIT)
        return round(SCV_STEP ** round(math.log(scv) / math.log(SCV_STEP)), 4)

    def _mix(self, est: ServiceEstimate, svc: Service) -> tuple[RequestMix | None, tuple[float, ...]]:
        """The mix capacity is computed for this tick, and its key: (input scale, output scale, hit rate),
        each rounded to ``MIX_STEP``, and the arrivals' variability (``_scv``); (1, 1, calibrated hit
        rate) for ``mix=calibrated`` or while the forecasts are unknown."""
        mix, key = self._lengths(est, svc)
        scv = self._scv(est, svc)
        self.memory.setdefault(svc.name, _ServiceMemory()).scv = scv
        if mix is None or scv == 1.0:
            return mix, (*key, 1.0)
        return replace(mix, arrival_scv=scv), (*key, scv)

    def _lengths(self, est: ServiceEstimate, svc: Service) -> tuple[RequestMix | None, tuple[float, float, float]]:
        """``_mix`` without the arrivals' variability."""
        mix = self.mixes.get(svc.name)
        if mix is None or self.mix != "forecast":
            return mix, (1.0, 1.0, mix.prefix_hit_rate if mix else 0.0)
        sig = est.signals

        def rounded(x: float | None, base: float) -> float:
            return 1.0 if x is None or not x > 0 else max(MIX_STEP, round(x / base / MIX_STEP) * MIX_STEP)
        forecast = sig.forecast or ForecastSignals()
        s_in = rounded(forecast.input_tokens, mix.mean_input)
        s_out = rounded(forecast.output_tokens, mix.mean_output)
        hit = sig.prefix_hit_rate_forecast
        hit = mix.prefix_hit_rate if hit is None else min(round(hit / MIX_STEP) * MIX_STEP, 0.95)
        key = (round(s_in, 4), round(s_out, 4), round(hit, 4))
        if key == (1.0, 1.0, mix.prefix_hit_rate):
            return mix, key
        return mix.scaled(s_in, s_out).with_prefix_hit_rate(hit), key

    def corrected_weights(self, est: ServiceEstimate, svc: Service, mem: _ServiceMemory,
                          least_rps: float = 0.0) -> dict[str, float]:
        """variant -> one replica's capacity (requests/s) for this tick's mix (``mix``) with its profile
        slowed by its learned speed factor (rounded to 2 %, so a slowly moving estimate reuses the
        capacity computed before), in a pool of as many replicas as the least demand of the horizon,
        ``least_rps``, needs (``_pool_gains``: replicas behind one router share their queues); the
        estimate's capacities when the model gives every variant 0 (a plan on no capacity would order
        nothing: a silent scale-down)."""
        if not svc.variants:  # prefill/decode pools only: their capacities are ``role_weights``'
            mem.pool, mem.last_speed = 1, {}
            return {}
        base = self.weights.get(svc.name, est.weights)
        mix, mix_key = self._mix(est, svc)
        speeds = self.speed(est, svc, mem)
        mem.last_speed = speeds
        calibrated = self.mixes.get(svc.name)
        alphas = {v.name: round(round(speeds[v.name] / SPEED_STEP) * SPEED_STEP, 4) for v in svc.variants}
        limit = None if mix is None else self._allowance(svc, alphas, mix, mix_key)
        out = {}
        for v in svc.variants:
            alpha = alphas[v.name]
            key = (svc.name, v.name, alpha, *mix_key)
            if mix is None or limit is None or (alpha == 1.0 and mix is calibrated and not self.cap
                                                           and not self.busy and not self.marginal):
                out[v.name] = float(base.get(v.name, 0.0))
            else:
                out[v.name] = self._model_capacity(svc, v, alpha, mix, key, self._kept_limit(svc, v, alpha, mix,
                                                                                            mix_key, limit))
            if mix is not None and self.learn_capacity:
                out[v.name] *= self._learn_capacity(
                    est, svc, v, mem, mix, alpha, key, out[v.name],
                    UNSERVABLE_SHARE if limit is None else self._kept_limit(svc, v, alpha, mix, mix_key, limit))
        if not any(out.values()):  # no variant serves this mix: plan with the last capacities, not none
            return {v.name: float(base.get(v.name, 0.0)) for v in svc.variants}
        if mix is None or limit is None or self.pool == 1:
            mem.pool = 1
            return out
        gains, mem.pool = self._pool_gains(svc, alphas, mix, mix_key, limit, out, least_rps)
        return {name: w * gains[name] for name, w in out.items()}

    def _pool_gains(self, svc: Service, alphas: Mapping[str, float], mix: RequestMix,
                    mix_key: tuple[float, ...], limit: float, single: Mapping[str, float],
                    least_rps: float) -> tuple[dict[str, float], int]:
        """(variant -> how many times one replica's capacity a replica carries in a pool of ``n``
        (``models.capacity.replica_capacity(..., replicas=n)`` over ``replicas=1``), ``n``): ``n`` is
        the fewest replicas of the fastest variant whose pooled capacity serves ``least_rps`` (at most
        ``self.pool``; a pool's capacity grows with its size, so bisection finds it). A plan that
        orders slower variants has a larger pool, so the gain is never more than its replicas get."""
        def gain(v: Variant, n: int) -> float:
            return self._pool_gain(svc, v, alphas[v.name], mix, mix_key,
                                   self._kept_limit(svc, v, alphas[v.name], mix, mix_key, limit), n)

        def serves(n: int) -> bool:
            return n * max(single[v.name] * gain(v, n) for v in svc.variants) >= least_rps
        n = pool_size(serves, single, least_rps, self.pool)
        return {v.name: gain(v, n) for v in svc.variants}, n

    def _pool_gain(self, svc: Service, v: Variant, alpha: float, mix: RequestMix,
                   mix_key: tuple[float, ...], limit: float, n: int) -> float:
        """Capacity of a replica of ``v`` in a pool of ``n`` over alone (>= 1; 1 where it has none), cached
        (under ``limit`` too: ``_model_capacity``)."""
        key = (svc.name, v.name, alpha, *mix_key, n, limit)
        if key not in self._pool_cache:
            slo = svc.slo["interactive"]
            spec = self._slowed(v, alpha)
            try:
                alone = replica_capacity(spec, mix, slo.ttft_s, slo.itl_s, unservable=limit).rps
                pooled = replica_capacity(spec, mix, slo.ttft_s, slo.itl_s, unservable=limit, replicas=n).rps
            except ValueError:
                alone = pooled = 0.0
            self._pool_cache[key] = max(1.0, pooled / alone) if alone > 0 else 1.0
        return self._pool_cache[key]

    def _kept_limit(self, svc: Service, v: Variant, alpha: float, mix: RequestMix, mix_key: tuple[float, ...],
                    limit: float) -> float:
        """The idle misses ``v`` slowed by its learned speed factor ``alpha`` may show and keep a capacity:
        the service's allowance at the learned speeds, ``limit`` (``_allowance``), raised to ``v``'s own
        idle misses where its profile keeps a capacity at every variant's profiled speed (its idle misses
        within ``_allowance`` at speed 1 for all) and its own stay within ``MOSTLY_UNSERVABLE``; cached.

        A speed factor scales a capacity; it does not take a variant's away. The allowance is a verdict
        on whether a GPU can serve the mix at all (a tail of prompts it cannot prefill within the TTFT
        target); judged on the learned speeds, a 2 % step of a noisy estimate flipped it. Issue 28,
        servegen-day seed 0 with ``mpc:pool=8:burst=1`` (``docs/controllers.md``, "Why `C2` drains the
        H100s"): the H100's speed factor read 1.04 -> 1.06, its capacity went 0.58 req/s -> 0, the plan
        drained every H100 at 7-8 req/s, and with none ready no speed was read again to bring it back.
        """
        key = (svc.name, v.name, alpha, *mix_key, limit)
        if key not in self._kept_cache:
            slo = svc.slo["interactive"]
            profiled = self._allowance(svc, {u.name: 1.0 for u in svc.variants}, mix, mix_key)
            own = idle_floor(self._slowed(v, alpha), mix, slo.ttft_s, slo.itl_s)  # busy=1's union too
            kept = (own > limit and profiled is not None and own <= MOSTLY_UNSERVABLE
                    and idle_misses(self._slowed(v, 1.0), mix, slo.ttft_s, slo.itl_s) <= profiled)
            self._kept_cache[key] = own if kept else limit
        return self._kept_cache[key]

    def _allowance(self, svc: Service, alphas: Mapping[str, float], mix: RequestMix,
                   mix_key: tuple[float, ...]) -> float | None:
        """``models.capacity.allowance`` over ``svc``'s variants slowed by ``alphas`` for ``mix``, cached;
        None when the ITL target is out of every variant's reach."""
        key = (svc.name, tuple(sorted(alphas.items())), *mix_key)
        if key not in self._allowance_cache:
            slo = svc.slo["interactive"]
            specs = [self._slowed(v, alphas[v.name]) for v in svc.variants]
            try:
                self._allowance_cache[key] = allowance(specs, mix, slo.ttft_s, slo.itl_s)
            except ValueError:  # no operating point for the mix at all
                self._allowance_cache[key] = None
        return self._allowance_cache[key]

    def _model_capacity(self, svc: Service, v: Variant, alpha: float, mix: RequestMix,
                        key: tuple[object, ...], unservable: float) -> float:
        """The model's capacity of one replica of ``v`` slowed by ``alpha`` for ``mix`` (requests/s; 0
        when the ITL target is out of its reach), given the service's ``unservable`` allowance
        (``_allowance``), cached under ``key`` and ``unservable``: the allowance moves with the other
        variants' speed factors, and a capacity cached under another one is not this one's (issue 28:
        servegen-day's H100 at 1.06, 8.0 % idle misses, was planned at 0 under an allowance of 8.2 %;
        a 0 is right below 8.0 %, as under a GH200 at 1.00, 7.7 %). Keyed so alone, ``C2`` drained more
        (``_kept_limit`` takes the verdict from the profiles; ``docs/controllers.md``)."""
        cached = (*key, unservable)
        if cached not in self._capacity_cache:
            slo = svc.slo["interactive"]
            try:
                cap = replica_capacity(self._slowed(v, alpha), mix, slo.ttft_s, slo.itl_s,
                                       unservable=unservable).rps
            except ValueError:  # so slow the ITL target is out of reach
                cap = 0.0
            self._capacity_cache[cached] = cap
        return self._capacity_cache[cached]

    def _slowed(self, v: Variant, alpha: float) -> ReplicaSpec:
        """One replica of ``v`` with its profile ``alpha`` times slower."""
        spec = ReplicaSpec.of(v, self.engine)
        return replace(spec, profile=spec.profile.slowed(alpha), prefill_cap=self.cap, busy_period=self.busy,
                       backlog=self.backlog, prompt_marginal=self.marginal)

    def _learn_capacity(self, est: ServiceEstimate, svc: Service, v: Variant, mem: _ServiceMemory, mix: RequestMix,
                        alpha: float, key: tuple[object, ...], prior_rps: float,
                        unservable: float) -> float:
        """Update ``v``'s capacity posterior (``models.learning``) from this tick when it can show
        capacity (``learnable``), and return the multiple of ``prior_rps`` the plan uses; ``unservable``
        is the service's allowance (``_model_capacity``)."""
        post = mem.capacity.setdefault(v.name, CapacityPosterior())
        obs = est.variants[v.name]
        mem.learned[v.name] = False
        since = mem.ready_since[v.name][1]
        recovering = est.time_s < mem.recovering_until
        measured = None if recovering else learnable(est, obs, since, self.window_s, svc.slo["interactive"])
        if measured is not None and prior_rps > 0:
            rate, ttft_ratio, tpot_ratio = measured
            at = (*key, unservable)  # the capacity the curve is relative to moves with it (``_model_capacity``)
            if at not in self._curve_cache:  # the model's own curve, its loads relative to its capacity
                slo = svc.slo["interactive"]
                model_rps = self._model_capacity(svc, v, alpha, mix, key, unservable)
                self._curve_cache[at] = (latency_curve(self._slowed(v, alpha), mix, slo.ttft_s, slo.itl_s, model_rps)
                                         if model_rps > 0 else None)
            curve = self._curve_cache[at]
            stress = p95_stress(obs, svc.slo["interactive"]) if self.gated else None
            if (curve is not None and (rate / obs.ready) / prior_rps >= MIN_LEARN_LOAD
                    and (stress is not None or not self.gated)):
                mem.learned[v.name] = post.observe((rate / obs.ready) / prior_rps, ttft_ratio, tpot_ratio, curve,
                                                   stress)
        return post.planned()

    # ------------------------------------------------------------------ prefill/decode pools
    def role_weights(self, est: ServiceEstimate, svc: Service) -> dict[str, float]:
        """variant -> one replica's capacity of its pool, requests/s of this tick's mix (``_mix``; the
        fleet file's ``typical_request`` for a service given none) at the interactive SLO
        (``models.capacity_roles``), times ``pd_util``: a prefill replica's ``prefill_capacity`` (its prompt
        tokens/s at the TTFT target, the KV transfer and the decode replica's recompute included, over the
        mix's remote prompt tokens per request), a decode replica's ``decode_capacity`` (sequences at the
        ITL target and KV residency) against the slowest prefill variant that keeps a capacity (the TTFT
        slack any prefill replica the plan may order leaves; 0 where none keeps one). A pool replica keeps
        a capacity while its idle misses are within the service's allowance (``pool_allowance``: the
        aggregated variants' rule, ``UNSERVABLE_SHARE`` above the fewest idle misses of any aggregated
        variant or prefill/decode pair). 0 where the SLO is out of reach; cached per mix. The profiles
        are not slowed by learned speed factors, nor scaled by capacity posteriors: those are learned on
        the aggregated variants' telemetry only (``learn``).
        """
        if svc.roles is None:
            return {}
        mix, mix_key = self._mix(est, svc)
        if svc.name not in self.mixes:
            mix, mix_key = service_mix(svc), (1.0, 1.0, service_mix(svc).prefix_hit_rate, 1.0)
        key = (svc.name, *mix_key)
        if key not in self._role_cache:
            self._role_cache[key] = self._role_capacities(svc, mix)
        return {name: cap * self.pd_util for name, cap in self._role_cache[key].items()}

    def _role_capacities(self, svc: Service, mix: RequestMix | None) -> dict[str, float]:
        """pool variant -> one replica's modelled capacity for ``mix`` (``controllers.roles.pool_capacities``,
        before ``pd_util``); 0 for every one without a mix."""
        if mix is None:
            return {v.name: 0.0 for _, v in svc.role_variants()}
        return pool_capacities(svc, self.engine, mix)

    def _pool_scales(self, est: ServiceEstimate, svc: Service, mem: _ServiceMemory,
                     weights: Mapping[str, float]) -> dict[str, float]:
        """role -> ``pool_scale`` of that pool this tick (1 for both while any pool's ready replicas changed
        within the signal window: its completions then count a part-window, or replicas that are gone;
        1 with ``pd_scale`` 0); empty for a service without pools."""
        if svc.roles is None:
            return {}
        out = {role: 1.0 for role in ("prefill", "decode")}
        if not self.pd_scale:
            return out
        ready = {role: {v.name: observed(est, v.name).ready for r, v in svc.role_variants() if r == role}
                 for role in out}
        key = tuple(sorted((n, k) for pool in ready.values() for n, k in pool.items()))
        if mem.pool_ready is None or mem.pool_ready[0] != key:
            mem.pool_ready = (key, est.time_s)
        if est.time_s - mem.pool_ready[1] < self.window_s:
            return out
        rates = {role: sum(n * float(weights.get(name, 0.0)) for name, n in pool.items())
                 for role, pool in ready.items()}
        pair = min(rates.values())
        queues = [None if est.pools.get(role) is None else est.pools[role].signals.queue_length for role in out]
        queue = None if any(q is None for q in queues) else sum(q for q in queues if q is not None)
        for role in out:
            pool = est.pools.get(role)
            done = None if pool is None else pool.signals.success_rps
            out[role] = pool_scale(done, rates[role], queue, pair)
        return out

    # ------------------------------------------------------------------ decide
    def _inputs(self, est: ServiceEstimate, svc: Service) -> _Inputs | Decision:
        """This tick's plan inputs for ``svc`` (updating its memory once), or a hold."""
        current = every_current(est)
        now_rps = est.signals.arrival_rate_rps
        if now_rps is None:
            now_rps = est.signals.request_rate_rps
        if now_rps is None:
            return hold(current, "hold: request rate unknown")
        # the completions hold no shed attempt (none of them finished), nor do arrivals inferred from them
        # and the held requests (``arrivals_inferred``): only counted arrivals lose the retries
        counted = est.signals.arrival_rate_rps is not None and not est.arrivals_inferred
        new_rps = new_demand_rps(est, now_rps, self.admission_cfg.client_retries) if counted else now_rps
        mem = self.memory.setdefault(svc.name, _ServiceMemory())
        recovering = self._recovering(est, svc, mem)
        mem.first_s = est.time_s if mem.first_s is None else mem.first_s
        if self.gap:  # before the rates are trimmed: a gap longer than their history is one too
            last_s = mem.rates[-1][0] if mem.rates else None
            mem.resumed_s = resumed_after_gap(last_s, est.time_s, self.window_s, mem.resumed_s)
        mem.rates = [(t, r) for t, r in mem.rates if t > est.time_s - HOLD_HISTORY_S] + [(est.time_s, new_rps)]
        if self.hold_s is None and (self.hold == "measured" or (self.hold == "auto" and self.hedge == "measured")):
            if est.time_s - mem.hold_measured_s >= HOLD_EVERY_S:
                cold = max(v.startup_cold_s for _, v in all_variants(svc))
                mem.hold_s, mem.hold_measured_s = measured_hold(mem.rates, cold), est.time_s
        else:
            mem.hold_s = DEFAULT_HOLD_S if self.hold_s is None else self.hold_s
        learning = est.time_s - mem.first_s < mem.hold_s  # too little rate history to scale down on
        dt = self.tick_s
        held = max(r for t, r in mem.rates if t > est.time_s - mem.hold_s - 1e-9)
        rise = None
        if self.trend:  # a rise the forecaster's mean does not follow, measured on the rates held
            cold = max(v.startup_cold_s for _, v in all_variants(svc))
            slope = rising_slope(mem.rates, cold, self.window_s)
            rise = trend_path(new_rps, slope, dt, self.horizon, cold) if slope > 0 else None
        if draining(est.signals.queue_length, est.signals.request_rate_rps, max(held, now_rps)):
            mem.drained_s = est.time_s  # the forecast holds this drain for drain_memory_s (drain_excess)
        readies = {v.name: self._ready_by_step(est, v, mem) for _, v in all_variants(svc)}  # pure of the demand
        drain_from = 0
        if self.drain:  # the queue charged from the first step a replica can serve it (drain_start)
            first: dict[str | None, list[int]] = {}
            for role, v in all_variants(svc):
                first.setdefault(role, []).append(first_serving_step(readies[v.name][0], self._startup_steps(v, est)))
            drain_from = drain_start(first)
        demand = self.demand(est, svc, max(held, now_rps), rise, drain_from)  # today's retries are its load, never held
        if self.floor:
            mem.floor_rps = self._burst_floor(est, svc, mem)
            if mem.floor_rps is not None:  # a floor on the capacity held, apart from each replica's
                demand = floored_demand(demand, mem.floor_rps, self.floor_x, self.floor_from)
        # pd_util is headroom for the steady demand, not for the queue's drain: the backlog counted once
        lift = 1.0 if self.pd_util == 1 else pool_util_path(  # at 1 every share is 1: no backlog read again
            self.pd_util, demand, self.backlog_path(est, svc, max(held, now_rps), drain_from)) / self.pd_util
        if self.arrivals:  # no drain to discount, but a backlog still drains: no removal during it (fast-ramp)
            discounting = est.time_s - mem.drained_s <= self.drain_memory_s
        else:
            discounting = self.drain_excess(est, svc, max(held, now_rps)) > 0  # a demand lowered for it removes nothing
        weights = {**self.corrected_weights(est, svc, mem, float(demand.min())), **self.role_weights(est, svc)}
        scales = self._pool_scales(est, svc, mem, weights)
        modelled = {v.name: float(weights.get(v.name, 0.0)) for _, v in svc.role_variants()}
        weights.update({v.name: modelled[v.name] * scales[role] for role, v in svc.role_variants()})
        variants = []
        missing = slo_missed(est.signals.slo_mean_ratio)
        if missing:
            mem.missed_s = est.time_s
        missed_lately = est.time_s - mem.missed_s < SLO_MISSED_HOLD_S
        for role, v in all_variants(svc):
            obs = observed(est, v.name)
            w = float(weights.get(v.name, 0.0))
            held_pool = role is not None and missed_lately  # none removed or cancelled while the SLO is missed
            keep = obs.current if held_pool else obs.ready if recovering or learning or discounting else 0
            ready, at_risk = readies[v.name]
            pv = plan_variant(v, dt, np.full(self.horizon, w), obs.current, ready, keep=keep, role=role)
            variants.append(hold_orders(pv) if at_risk else pv)
        miss = miss_cost(variants, self.miss_weight)  # priced at the steady capacities
        steady = {v.name: float(v.capacity_rps[0]) for v in variants}
        variants = [v if v.role is None else replace(v, capacity_rps=v.capacity_rps * lift) for v in variants]
        if miss is None:
            return hold(current, "hold: no variant can serve within the SLO")
        priorities = priority_demand(est) if self.shed and self.shed_enforced else None
        shed_rps, shed_cost = None, 0.0
        total = sum(priorities.values()) if priorities is not None else 0.0
        if priorities is not None and total > 0:
            shed_rps = demand * (priorities[PRIORITIES[SHEDDABLE]] / total)
            shed_cost = miss * self.shed_weight / self.miss_weight
        if self.unserved:  # a shortfall below the rate seen, where an order serves, priced above the miss
            shed_rps, shed_cost = seen_shortfall(demand, held, self.fastest_steps(svc, est)), miss
            miss = miss * UNSERVED_WEIGHT / self.miss_weight
        plan_svc = PlanService(svc.name, variants, demand, miss, self.guard.max_step_up, self.guard.max_step_down,
                               shed_rps=shed_rps, shed_cost=shed_cost, pd_ratio=pd_ratio(svc),
                               pd_spill=self.spill if svc.roles is not None and svc.variants else 0.0)
        return _Inputs(plan_svc, recovering, priorities, held, scales, modelled, steady)

    def _burst_floor(self, est: ServiceEstimate, svc: Service, mem: _ServiceMemory) -> float | None:
        """Record this tick's short rate (``controllers.burst_floor.short_rate``, from the last two rates
        held and the tick that left the span) and return the burst floor over the hold
        (``burst_floor``, at the interactive TTFT target); None while no short rate is known."""
        dt = self.tick_s
        span = counted_span(self.window_s, dt)
        before = mem.rates[-2] if len(mem.rates) >= 2 else None
        r = short_rate(mem.rates[-1], before, left_span(mem.short, est.time_s, span, dt), span, dt)
        if r is not None:
            mem.short.append((est.time_s, r))
        keep = est.time_s - max(mem.hold_s, span) - dt
        while mem.short and mem.short[0][0] < keep:
            mem.short.popleft()
        return burst_floor(mem.short, est.time_s, mem.hold_s, dt, svc.slo["interactive"].ttft_s)

    def _problem(self, services: list[PlanService],
                 start: Mapping[str, Mapping[str, np.ndarray]] | None = None) -> PlanProblem:
        """One problem for ``services`` within the fleet's shared GPU limits. One service is searched
        exactly (``tuned``; with ``warm``, through highspy from ``start``): searched only near its LP
        relaxation, the plan's first steps moved enough to cost the ramp scenario 2.3 points of
        attainment (99.49 % against 97.22 %, at 1.04x the GPU-hours). Several are searched near the
        LP relaxation, and service by service within shares of the limits above ``JOINT_UP_TO``
        service-steps (``docs/controllers.md#solving-fast``). ``int_blocks`` relaxes a lone
        service's later blocks, ``joint_blocks`` those of several."""
        return PlanProblem(services, self.tick_s, self.horizon, gpu_quota=dict(self.gpu_limits.quota),
                           gpu_budget=self.gpu_limits.budget, node_limit=self.node_limit,
                           time_limit_s=self.time_limit, neighbourhood=0 if len(services) > 1 else None,
                           decompose=len(services) * self.horizon > JOINT_UP_TO, tuned=len(services) == 1,
                           solver="highspy" if self.warm else "scipy", start=start if self.warm else None,
                           integer_blocks=self.int_blocks if len(services) == 1 else self.joint_blocks,
                           tail_up=self.int_up, warm_coordinator=self.joint_warm and len(services) > 1,
                           coordinator_basis=self._coordinator_basis if self.joint_warm and len(services) > 1
                           else None)

    def _start(self, mem: _ServiceMemory, svc: PlanService, now_s: float) -> dict[str, dict[str, np.ndarray]] | None:
        """The service's last plan solved alone, moved on by the ticks since (``models.planning.shifted``),
        as the next solve's start; None without one, when its variants differ, or when it is a
        horizon or more old."""
        if mem.last_plan is None:
            return None
        when, replicas = mem.last_plan
        steps = round((now_s - when) / self.tick_s)
        if not 0 <= steps < self.horizon or set(replicas) != {v.name for v in svc.variants}:
            return None
        return shifted({svc.name: replicas}, steps, self.horizon)

    def prepare(self, estimates: Mapping[str, ServiceEstimate]) -> None:
        """With more than one service under shared GPU limits, plan them all in one problem (the
        quotas and budget bind them together); each ``decide`` then reads its part. Without limits
        the services are independent and each ``decide`` solves its own, smaller problem."""
        self._joint = {}
        self._joint_tick = False
        limits = self.gpu_limits
        if len(estimates) < 2 or not (limits.quota or limits.budget is not None):
            return
        inputs: dict[str, _Inputs | Decision] = {}
        for svc in self.services:
            if svc.name in estimates:
                inputs[svc.name] = self._inputs(estimates[svc.name], svc)
        planned = {name: x for name, x in inputs.items() if isinstance(x, _Inputs)}
        plan = solve(self._problem([x.service for x in planned.values()])) if planned else None
        if self.joint_warm:  # the last joint plan's basis, or none where it has none (no stale basis kept)
            self._coordinator_basis = plan.coordinator_basis if plan is not None else None
        self._joint_tick = True
        for name, x in inputs.items():
            self._joint[name] = (estimates[name].time_s, x, plan)

    @property
    def plans_jointly(self) -> bool:
        """Whether this tick's ``prepare`` made a joint plan (its parts are read by ``decide``; the
        base class's contract)."""
        return self._joint_tick


    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Plan the horizon and ask for its first step (module docstring); with several services,
        the part of this tick's joint plan (``prepare``) that is ``svc``'s."""
        joint = self._joint.pop(svc.name, None)
        if joint is not None and joint[0] == est.time_s:
            _, inputs, plan = joint
        else:
            inputs, plan = self._inputs(est, svc), None
        if self.pool_off is not None and svc.name not in self._pool_warned:
            self._pool_warned.add(svc.name)
            log.warning("%s: %s", svc.name, self.pool_off)
        if isinstance(inputs, Decision):  # a hold: the pool note with its reason, as in every other one
            return inputs if self.pool_off is None else replace(inputs, reason=f"{inputs.reason}; {self.pool_off}")
        mem = self.memory[svc.name]
        if plan is None:
            plan = solve(self._problem([inputs.service], self._start(mem, inputs.service, est.time_s)))
            if self.warm:
                mem.last_plan = (est.time_s, {v: np.asarray(n).copy() for v, n in plan.replicas[svc.name].items()})
        current = every_current(est)
        dt = self.tick_s
        demand = inputs.service.demand_rps
        steps = plan.replicas[svc.name]
        desired = {name: int(n[0]) for name, n in steps.items()}
        unserved = plan.unserved_rps[svc.name]
        seen_unserved = None
        if self.unserved:  # the plan's cheap tier (seen_shortfall) is demand it leaves unserved too
            seen_unserved, unserved = unserved, unserved + plan.shed_rps[svc.name]
        pools_rps = plan.pd_rps.get(svc.name)
        desired = hold_pool_downs(desired, current, steps, unserved,
                                  {v.name: role for role, v in svc.role_variants()},
                                  inputs.steady, None if pools_rps is None else float(np.max(pools_rps)))
        if svc.roles is not None and svc.roles.ratio is None:  # a ratio's replicas are the plan's to keep
            desired = cap_pool_growth(desired, current, {v.name: role for role, v in svc.role_variants()},
                                      inputs.modelled, inputs.held_rps, self.pd_util)
        if self.cover and svc.variants:
            aggregated = {v.name for v in svc.variants}
            kept = hold_downs_within_start({n: k for n, k in desired.items() if n in aggregated}, current,
                                           {n: k for n, k in steps.items() if n in aggregated},
                                           unserved, cover_window(svc.variants, dt))
            desired.update(kept)
        if self.rise and svc.variants:
            aggregated = {v.name for v in svc.variants}
            desired.update(hold_downs_while_rising({n: k for n, k in desired.items() if n in aggregated}, current,
                                                   mem.rates, RISE_SPAN_S, self.window_s))
        settled, desired, window = self._settle(desired, current, inputs.steady, svc, mem, est.time_s)
        gap_held = False
        if self.gap:  # pools too: a window of partial rates misreads every pool's demand as well
            kept = hold_downs_after_gap(desired, current, mem.resumed_s, est.time_s, self.window_s)
            gap_held, desired = kept != desired, kept
        silent = silent_pods(est)
        queue_unknown = est.signals.queue_length is None
        # a ready pod that reports nothing may be serving anything, and an unknown queue (which the plan
        # counted as no backlog: backlog_path) may be any: none goes meanwhile
        if silent or queue_unknown:
            desired = {name: max(n, current.get(name, 0)) for name, n in desired.items()}
        mem.last_applied, mem.last_time_s = dict(desired), est.time_s
        terms = {"demand_rps": float(demand[0]), "solve_ms": plan.solve_ms,
                 "unserved_rps_max": float(unserved.max()), "recovering": float(inputs.recovering),
                 "hold_s": mem.hold_s, "pool": float(mem.pool),
                 **limit_terms(plan), **{f"speed_{v}": x for v, x in mem.last_speed.items()},
                 **{f"capacity_scale_{v}": p.planned() for v, p in mem.capacity.items()},
                 **{f"capacity_sigma_{v}": p.sigma for v, p in mem.capacity.items()},
                 **{f"capacity_learned_{v}": float(x) for v, x in mem.learned.items()},
                 **({"arrival_scv": mem.scv} if self.burst else {}),
                 **({"burst_floor_rps": mem.floor_rps} if self.floor and mem.floor_rps is not None else {}),
                 **({"unserved_seen_rps_max": float(seen_unserved.max())} if seen_unserved is not None else {}),
                 **{f"pool_scale_{role}": x for role, x in inputs.pool_scales.items()}}
        if mem.z is not None:
            terms["hedge_z"] = mem.z
        if self.settle == "measured":
            terms["settle_s"] = window
        pools = plan.pd_rps.get(svc.name)
        if pools is not None:  # the demand the prefill/decode pools serve (the rest: aggregated)
            terms["pd_rps_now"] = float(pools[0])
            terms["pd_share_now"] = float(pools[0] / demand[0]) if demand[0] > 0 else 0.0
            terms["pd_rps_max"] = float(pools.max())
        admission: dict[str, float | None] = {}
        shed = plan.shed_rps.get(svc.name)
        if inputs.priorities is not None and shed is not None:
            served = sum(float(v.capacity_rps[0]) * float(plan.serving[svc.name][v.name][0])
                         for v in inputs.service.variants if v.role is None)
            served += float(plan.pd_rps[svc.name][0]) if svc.name in plan.pd_rps else 0.0
            admission = balance(inputs.priorities, served, wait_budgets(svc, self.admission_cfg),
                                self.admission_cfg.shed_tolerance)
            terms["shed_rps_now"] = float(shed[0])
            terms["shed_rps_max"] = float(shed.max())
        code = change_reason(desired, current)
        why = (f"mpc: plan for {demand[0]:.1f} req/s now, up to {demand.max():.1f} within "
               f"{self.horizon * dt:g} s" + ("; recovering from a loss" if inputs.recovering else "")
               + (f"; no scale-down while {silent} ready pod(s) report nothing" if silent else "")
               + ("; no scale-down while the queue is unknown" if queue_unknown else "")
               + (f"; no scale-down within {self.window_s:g} s of the rates' return after a gap" if gap_held
                  else "")
               + (f"; scale-down held at the plan's highest{' capacity' if self.settle_by == 'capacity' else ''} "
                  f"of the last {window:g} s" if settled else "")
               + (f"; sheds {shed[0]:.1f} req/s now, up to {shed.max():.1f}"
                  if inputs.priorities is not None and shed is not None and shed.max() > 0 else "")
               + (f"; prefill/decode pools serve {pools[0]:.1f} req/s now" if pools is not None else "")
               + (f"; {self.pool_off}" if self.pool_off is not None else "")
               + limit_note(plan))
        budget = self.itl_budget(est, svc, mem)
        gauges = (Gauge("autoscaler_mpc_demand_rps", "Demand the plan serves now, requests/s.", terms["demand_rps"]),
                  Gauge("autoscaler_mpc_solve_seconds", "Wall time of the last plan's solve.", plan.solve_ms / 1000.0),
                  *(Gauge("autoscaler_itl_budget_requests", "Requests in flight per replica at the ITL target, "
                          "as learned (controllers.admission.learned_budget).", float(n), (("variant", v),))
                    for v, n in budget.items()))
        # with pools, the capacities the plan splits the demand by (aggregated variants against the pools)
        route = dict(inputs.steady) if svc.roles is not None else {}
        if self.spill_idle and route and pools is not None:  # the reserve left free for spills (idle_reserve)
            # from the plan's counts (settled_flows), not its serving and pool columns: with a reserve the
            # cost leaves those free within a range, and the weights would follow the solver's pick
            route = planned_idle_reserve(route, inputs.service, steps, dt)
        return Decision(desired, why, code, terms, plan={name: [int(x) for x in n] for name, n in steps.items()},
                        remove_first=removal_order(est, desired), gauges=gauges, admission=admission,
                        itl_budget=budget, route_weights=route)

    def _settle(self, desired: dict[str, int], current: Mapping[str, int], steady: Mapping[str, float],
                svc: Service, mem: _ServiceMemory, now_s: float) -> tuple[bool, dict[str, int], float]:
        """The HPA's scale-down stabilisation over the plan's own recommendations (``settle_s``, or
        ``settle=measured``'s window; ``settle_by``, ``settle_final``): (whether it held a fall, the counts
        kept, the window in seconds). Off, the plan's counts as they are."""
        window = self.settle_s
        if self.settle == "measured":  # the window from this service's own recommendations (measured_settle)
            mem.settle_totals = [(t, x) for t, x in mem.settle_totals if t > now_s - HOLD_HISTORY_S]
            mem.settle_totals.append((now_s, float(sum(desired.values()))))
            if now_s - mem.settle_measured_s >= HOLD_EVERY_S:
                cold = max(v.startup_cold_s for _, v in all_variants(svc))
                mem.settle_window_s = measured_settle(mem.settle_totals, cold)
                mem.settle_measured_s = now_s
            window = mem.settle_window_s
        if not (self.settle_s > 0 or self.settle == "measured"):
            return False, desired, window
        kept_s = SETTLES_S[-1] if self.settle == "measured" else self.settle_s  # recommendations kept, s
        mem.recommended.append((now_s, dict(desired)))
        while mem.recommended and mem.recommended[0][0] <= now_s - kept_s:
            mem.recommended.popleft()
        if self.settle_by == "capacity":
            kept = self._settle_capacity(desired, current, steady, svc, mem, now_s, window, kept_s)
        elif window > 0:
            kept = settle_downs(desired, current, mem.recommended, now_s, window)
            if self.settle_final:
                release_counts(mem.recommended, kept, current)
        else:
            kept = desired
        return kept != desired, kept, window

    def _settle_capacity(self, desired: dict[str, int], current: Mapping[str, int], steady: Mapping[str, float],
                         svc: Service, mem: _ServiceMemory, now_s: float, window: float,
                         kept_s: float) -> dict[str, int]:
        """``settle_by=capacity``: ``settle_capacity`` on each group of variants whose capacities add up
        (the aggregated variants, and each pool's role apart: a prefill and a decode replica serve the
        same requests), recording this tick's plan capacity per group; with ``settle_final``, a fall let
        through caps the group's window at the capacity kept (``release_counts``'s rule)."""
        roles = {v.name: role for role, v in all_variants(svc)}
        groups: dict[str | None, list[str]] = {}
        for name in desired:
            groups.setdefault(roles.get(name), []).append(name)

        def served(counts: Mapping[str, int], names: list[str]) -> float:
            return sum(counts.get(n, 0) * steady.get(n, 0.0) for n in names)

        mem.recommended_cap.append((now_s, {g: served(desired, names) for g, names in groups.items()}))
        while mem.recommended_cap and mem.recommended_cap[0][0] <= now_s - kept_s:
            mem.recommended_cap.popleft()
        out = dict(desired)
        if not window > 0:
            return out
        for g, names in groups.items():
            part = settle_capacity({n: desired[n] for n in names}, current, steady,
                                   [(t, c.get(g, 0.0)) for t, c in mem.recommended_cap], now_s, window)
            out.update(part)
            kept = served(part, names)
            if self.settle_final and kept < served(current, names):
                for _, c in mem.recommended_cap:
                    c[g] = min(c.get(g, 0.0), kept)
        return out

    def itl_budget(self, est: ServiceEstimate, svc: Service, mem: _ServiceMemory) -> dict[str, int]:
        """variant -> its ITL budget as learned (``controllers.admission.learned_budget``), requests in
        flight per replica: the model's on this tick's mix (``_mix``: the lengths the service is seen
        to send, as the plan's capacity) with the profile slowed by this tick's speed factor, times
        the capacity multiple the plan uses (``CapacityPosterior.planned``: a learned gain counts at
        the low end of its band, as for the plan); servable variants only. Empty without ``learn``,
        or where no variant serves the mix within the SLO."""
        if not self.learn or not svc.variants:
            return {}
        mix, mix_key = self._mix(est, svc)
        alphas = tuple(sorted((v.name, round(round(mem.last_speed.get(v.name, 1.0) / SPEED_STEP) * SPEED_STEP, 4))
                              for v in svc.variants))
        key = (svc.name, alphas, *mix_key)
        if key not in self._budget_cache:
            try:
                self._budget_cache[key] = itl_budgets(svc, self.engine, dict(alphas), mix)
            except ValueError:  # no variant serves the mix: no budget to learn
                self._budget_cache[key] = {}
        out = {}
        for name, b in self._budget_cache[key].items():
            post = mem.capacity.get(name)
            if b.servable:
                out[name] = learned_budget(b, 1.0 if post is None else post.planned(), self.engine.max_num_seqs)
        return out

    def on_admission(self, enforced: bool) -> None:
        """With ``shed``, plan shedding only where the loop runs an admission policy: without one no
        gateway sheds, and a plan that counted on it would leave the sheddable demand short."""
        self.shed_enforced = enforced

    def on_guard_cut(self, service: str, intended: Mapping[str, int], applied: Mapping[str, int],
                     weights: Mapping[str, float]) -> None:
        """Remember what the fleet got, so a guard's cut is not read as a loss on the next tick."""
        self.memory.setdefault(service, _ServiceMemory()).last_applied = dict(applied)
