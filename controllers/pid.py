"""PID controller on replica capacity, with anti-windup, filtered derivative on measurement and a deadband.

The pure step function ``pid_step`` maps (config, state, measurement) to (output, new state, terms).
The output is the service's desired capacity in requests/s (replicas weighted by per-replica
capacity, ``models.capacity``), which ``controllers.split`` turns into replicas per variant.

Error (reverse acting, relative): ``e = measurement/setpoint - 1``, clipped to ``[-1, error_clip]``,
and zeroed inside ``+-deadband``. Negative errors (over-provisioned) are scaled by ``down_gain``
so capacity is removed more gently than it is added.

    P = kp * s * e                   s = ready capacity when scale_with_replicas, else 1
    I += ki * s * e * dt             (integral held at the output limits and while capacity is starting)
    D = kd * s * d(measurement)/dt / setpoint, low-pass filtered with time constant derivative_filter_s
        (derivative on measurement, not on error, so a setpoint change causes no derivative kick)
    u = clamp(I + P + D, out_min, out_max)

Anti-windup: the integral is clamped to the output limits and not integrated when the output is
saturated in the error's direction (conditional integration), except toward the minimum: there it
is integrated as far as puts the output at the minimum (held where it was, it left the output just
above the minimum capacity for good, one replica more than the minimum after the load fell).
Replicas still starting are capacity that has been asked for but cannot act yet (dead time of
90-300 s); integrating a positive error during that time would ask for it again, so positive errors
are not integrated while ``hold_integral`` is set. The integral starts at the current capacity (bumpless start).

``PIDController`` runs rules around ``pid_step``, each a pure function of ``controllers.pid_rules``
(replicas are whole and take minutes to start; docs/controllers.md gives the fault-suite runs that
found each):

* Overload: with the error at ``error_clip`` the latency no longer says how much capacity is
  missing, the queue does: size for completions plus the queue's growth, at most ``1 + error_clip``
  times the ready capacity (KPA's panic mode sizes from observed demand in the same situation).
* Shedding: while the gateway sheds, the latency sits near the admission policy's wait budgets and
  hides the shed demand; with a positive error, size for the gateway's arrivals over completions.
* Demand cap: a scale-up asks for at most ``STARTING_DEMAND_CAP`` x the demand while capacity is
  settling (replicas starting, just ready, or not yet reporting: new pods emit nothing until their
  first scrape, aibrix#2670) or the queue is not growing; a growing queue lifts it, so a capacity
  model wrong about a GPU cannot hold the fleet below its need.
* Demand floor: a scale-down leaves at least ``DOWN_DEMAND_FLOOR`` x the window's mean arrivals, so
  noise around a steady mean cannot take the fleet below it.
* Never against the error: no scale-up at or below the setpoint, with nothing running or waiting
  (the window then describes traffic that has stopped) or with a backlog that drains before a warm
  start; no scale-down above the setpoint.
* Re-anchor: inside the deadband the integral is the fleet (a P-term move would otherwise come back
  as the opposite one once the error returns to the band); after a hold against the error it is
  set so the output is the fleet (bumpless).

Prefill/decode pools (``Service.roles``; ``scales_roles``): one loop per pool, each ``pid_step`` and the
rules above on the pool's own capacity (``ServiceEstimate.pool_weights``: requests/s of the service's mix
per replica, ``controllers.roles.role_weights``), with its own state, its signals read over the pool's
pods (``ServiceEstimate.pools``):

* prefill: ``ttft_mean_s`` of the prefill pods over the interactive TTFT SLO (a prefill pod's TTFT is its
  queue and its prefill, the part of the user's TTFT the prefill pool decides);
* decode: the largest of ``tpot_mean_s`` of the decode pods over the interactive ITL SLO, their
  ``ttft_mean_s`` over the TTFT SLO (a decode pod's TTFT runs from the hand-over: its wait for a slot and
  for KV, the read and the first step, the share of the user's TTFT the decode pool decides) and
  ``setpoint x kv_usage / DECODE_KV_SETPOINT`` (their mean KV usage, scaled so that it reaches the
  setpoint at ``DECODE_KV_SETPOINT``); those known when some are not;
* the rules read the pool's queue, running requests, completions and starting replicas, and the
  gateway's arrivals (the capacities are rates of the whole mix, so the arrivals are the demand of both);
* two rules for pools only (``controllers.pid_rules``): ``backlog_cap`` sizes a scale-up for the arrivals
  plus the service's backlog drained over a cold start, not for the backlog as steady demand (a pool's
  completions fall when the other pool stalls, and the released backlog then reads as a four-fold
  overload); ``slo_hold`` removes no pool replica while the service's ``slo_mean_ratio`` is at or above 1
  (a pool's own signal can be calm while the service misses its SLO);
* then the ratio guard (``controllers.roles.enforce_ratio``, Kthena's rule) keeps prefill / decode
  replicas within ``roles.ratio`` when the fleet file sets it, a pool's new total placed on its
  variants by ``controllers.baselines.common.place_count``.

A service with both aggregated variants and pools runs the aggregated loop above beside the two.

Defaults (``autoscaler.config.PIDConfig``, ``ControllerConfig``): setpoint 0.3 on ``slo_mean_ratio``
(the larger of mean TTFT / TTFT SLO and mean TPOT / ITL SLO, interactive class), deadband 0.25,
window 300 s, kp 0.2, ki 0.005/s, down_gain 0.5, error_clip 3.

The defaults come from grids run with ``benchmarks/tune_pid.py`` on Azure conv x20, Mooncake x6 and
the embedded day, each checked against static peak provisioning; ``docs/controllers.md`` records
those runs and why window means replaced the p95 signals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from autoscaler.config import PIDConfig
from autoscaler.workload.types import INTERACTIVE, PRIORITIES
from controllers.base import (
    Controller,
    Decision,
    Gauge,
    Reason,
    change_reason,
    hold,
    setpoint_gauges,
    silent_any,
    silent_pods,
)
from controllers.baselines.common import place_count
from controllers.baselines.wva import KV_CACHE_THRESHOLD
from controllers.pid_rules import (
    OVERLOAD_LOOKBACK_S,
    History,
    Load,
    ReadyHistory,
    against_error,
    backlog_cap,
    demand_cap,
    demand_floor,
    floor_unknown,
    overload_target,
    reanchor,
    record_queue,
    record_ready,
    served_capacity,
    slo_hold,
)
from controllers.roles import DECODE, PREFILL, ROLES, enforce_ratio, pool_service, pool_variants
from controllers.split import capacity_of, split_capacity

if TYPE_CHECKING:
    from autoscaler.config import PDRatio, Service
    from autoscaler.state import PoolObservation, ServiceEstimate

DECODE_KV_SETPOINT = KV_CACHE_THRESHOLD / 1.25
"""Mean KV usage of the decode pods the decode loop holds at its setpoint, fraction: llm-d WVA's saturation
threshold (``kvCacheThreshold`` 0.80, ``controllers.baselines.wva``) over 1.25, so that with the default
0.25 deadband the decode pool grows once its pods pass WVA's saturation (0.8) and shrinks below 0.48."""


@dataclass(frozen=True)
class PIDState:
    """Controller memory between ticks.

    Attributes:
        integral: integral term in output units (requests/s of capacity), None before the first step.
        prev_measurement: last raw measurement, None before the first step.
        derivative: filtered derivative of the measurement divided by the setpoint, 1/s.
        queue_history: ``(time s, queue length)`` samples over ``OVERLOAD_LOOKBACK_S``.
        ready_history: ``(time s, ready replicas per variant)`` samples over the signal window.
        weights: the per-replica capacities (variant, requests/s) the integral was counted in.
    """

    integral: float | None = None
    prev_measurement: float | None = None
    derivative: float = 0.0
    queue_history: tuple[tuple[float, float], ...] = ()
    ready_history: ReadyHistory = ()
    weights: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class PIDTerms:
    """The parts of one step's output, for export and explanation."""

    error: float
    p: float
    i: float
    d: float
    output: float
    saturated: bool


FLOOR_UNKNOWN = "arrivals unknown or reading low: no scale-down below the demand floor"
"""The words a PID decision adds where ``demand_floor`` held a scale-down (``floor_unknown``)."""


def arrivals_low(est: ServiceEstimate) -> bool:
    """Whether ``est``'s arrival rate may read low: inferred (``ServiceEstimate.arrivals_inferred``, no
    gateway counter) while a ready replica, a prefill/decode pool's included, reports nothing
    (``silent_any``): its completions and held requests are missing from the sums
    (``autoscaler.loop.estimate.ArrivalInference``). A gateway's counter counts every arrival whatever
    the pods report."""
    return est.arrivals_inferred and silent_any(est) > 0


def pid_step(
    cfg: PIDConfig,
    state: PIDState,
    measurement: float,
    dt: float,
    current: float,
    out_min: float,
    out_max: float,
    hold_integral: bool = False,
    scale: float | None = None,
) -> tuple[float, PIDState, PIDTerms]:
    """One PID update.

    Args:
        cfg: gains and shaping.
        state: memory from the previous step.
        measurement: the controlled signal, in the setpoint's units (e.g. p95 TTFT / TTFT SLO).
        dt: seconds since the previous step (> 0).
        current: current capacity, ready + starting (output units); initialises the integral.
        scale: gain scale (output units per unit error), e.g. the *ready* capacity: scaling by
            capacity that is still starting would feed back on itself and run away.
        out_min, out_max: output limits (output units), ``out_min <= out_max``.
        hold_integral: do not integrate a positive error (capacity already on its way).

    Returns:
        ``(output, new_state, terms)``; output in ``[out_min, out_max]``.

    Raises:
        ValueError: ``dt <= 0`` or ``out_min > out_max``.
    """
    if dt <= 0:
        raise ValueError(f"dt must be > 0, got {dt}")
    if out_min > out_max:
        raise ValueError(f"out_min {out_min} > out_max {out_max}")
    y = measurement / cfg.setpoint
    e = min(max(y - 1.0, -1.0), cfg.error_clip)
    if abs(e) < cfg.deadband:
        e = 0.0
    gain = cfg.down_gain if e < 0 else 1.0
    s = max(current if scale is None else scale, 1e-9) if cfg.scale_with_replicas else 1.0
    integral = current if state.integral is None else state.integral
    integral = min(max(integral, out_min), out_max)

    p = cfg.kp * s * e * gain
    if state.prev_measurement is None:
        derivative = 0.0
    else:
        raw = (measurement - state.prev_measurement) / dt / cfg.setpoint
        alpha = dt / (cfg.derivative_filter_s + dt)
        derivative = state.derivative + alpha * (raw - state.derivative)
    d = cfg.kd * s * derivative

    candidate = integral + cfg.ki * s * e * gain * dt
    unclamped = candidate + p + d
    pushes_up = e > 0
    saturated = (unclamped > out_max and pushes_up) or (unclamped < out_min and e < 0)
    if not saturated and not (hold_integral and pushes_up):
        integral = min(max(candidate, out_min), out_max)
    elif saturated and e < 0:  # integrate only as far as puts the output at its lower limit
        integral = min(integral, max(out_min - p - d, out_min))
    output = min(max(integral + p + d, out_min), out_max)
    new_state = replace(state, integral=integral, prev_measurement=measurement, derivative=derivative)
    return output, new_state, PIDTerms(error=e, p=p, i=integral, d=d, output=output, saturated=saturated)


def track(state: PIDState, guard_cut: float, applied: float) -> PIDState:
    """Back-calculation anti-windup against the guard.

    ``guard_cut`` is the applied minus the intended capacity (output units) after the guard limited a
    decision (max step, cool-down, quota); ``applied`` is the capacity the guard let through. Adding
    the cut moves the integral toward what the fleet can actually do, so it does not wind up while
    the guard holds it back. The integral is moved toward ``applied`` and never past it: the cut
    also contains the proportional term, and carrying that into the integral would ratchet it. A
    scale-down held by the cool-down with ``P < 0`` would otherwise leave ``I = applied - P``, above
    the fleet, and the next tick with the error back in the deadband (``P = 0``) would scale up.
    """
    if state.integral is None or guard_cut == 0:
        return state
    lo, hi = sorted((state.integral, applied))
    return replace(state, integral=min(max(state.integral + guard_cut, lo), hi))


def rescale(state: PIDState, current: Mapping[str, int], weights: Mapping[str, float]) -> PIDState:
    """``state`` with its integral counted in ``weights`` (variant -> requests/s per replica).

    The loop re-derives the capacities when the served mix changes (``autoscaler.loop.mix``); the
    integral, in requests/s of capacity, is scaled by how the ``current`` fleet's capacity changed,
    so it stands for the same replicas: left as it was, 8k-token prompts that cut a replica's
    capacity five-fold would read the integral as five times the fleet.
    """
    key = tuple(sorted(weights.items()))
    if state.integral is not None and state.weights and state.weights != key:
        before = capacity_of(current, dict(state.weights))
        if before > 0:
            state = replace(state, integral=state.integral * capacity_of(current, weights) / before)
    return replace(state, weights=key)


class PIDController(Controller):
    """The PID policy for every service of a fleet (state kept per service).

    ``decide`` holds (no change) when the setpoint signal is unknown; otherwise it runs ``pid_step``
    on the service's capacity and splits the result across variants with ``controllers.split``.

    Args:
        settings: gains and shaping (the fleet file's ``controller.pid``).
        tick_s: seconds between decisions, the PID's time step (``controller.tick_s``).
        window_s: signal window, seconds (``controller.window_s``).
    """

    scales_roles = True

    def __init__(self, settings: PIDConfig, tick_s: float, window_s: float, name: str = "pid") -> None:
        super().__init__(name, tick_s, window_s)
        self.settings = settings
        self.states: dict[str, PIDState] = {}
        self.pool_states: dict[tuple[str, str], PIDState] = {}

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant (and per pool variant, with roles): see the module docstring."""
        if svc.roles is None or not est.pools:
            return self._decide_aggregated(est, svc)
        pools = self._decide_pools(est, svc)
        if not svc.variants:
            return pools
        agg = self._decide_aggregated(est, svc)
        desired = {**agg.desired, **pools.desired}
        current = {**est.current, **est.pool_current}
        return Decision(desired, f"{agg.reason}; {pools.reason}", change_reason(desired, current),
                        terms={**agg.terms, **pools.terms}, gauges=agg.gauges + pools.gauges)

    def _decide_aggregated(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant: ``pid_step`` on the service's capacity, then the rules of
        ``controllers.pid_rules`` in their order (see the module docstrings)."""
        pid = self.settings
        y = est.signals.value(pid.setpoint_signal)
        current = est.current
        if y is None:
            return hold(current, f"hold: {pid.setpoint_signal} unknown")
        w = est.weights
        out_min = sum(v.min_replicas * w[v.name] for v in svc.variants)
        out_max = sum(v.cap * w[v.name] for v in svc.variants)
        state = rescale(self.states.get(svc.name, PIDState()), est.current, w)
        u, state, terms = pid_step(
            pid, state, y, self.tick_s, est.capacity_rps, out_min, out_max,
            hold_integral=est.starting > 0, scale=est.ready_capacity_rps,
        )
        ready = record_ready(state.ready_history, est.time_s, self.window_s,
                             {name: v.ready for name, v in est.variants.items()})
        load = replace(self._load(est, svc, out_max,
                                  record_queue(state.queue_history, est.time_s, est.signals.queue_length)),
                       served_capacity_rps=served_capacity(ready, w))
        state = replace(state, queue_history=load.history, ready_history=ready)
        capped = demand_cap(overload_target(u, terms.error, pid.error_clip, load), load)
        target = demand_floor(capped, load)
        desired = split_capacity(target, svc.variants, current, w)
        change = capacity_of(desired, w) - est.capacity_rps
        held = against_error(change, terms.error, load)
        if held is not None:
            desired, change = dict(current), 0.0
        state = replace(state, integral=reanchor(state.integral, terms.error, held is not None, est.capacity_rps,
                                                 terms.p, terms.d, out_min, out_max))
        self.states[svc.name] = state
        verb = "scale up" if change > 0 else "scale down" if change < 0 else "no change"
        reason = f"{verb}: {pid.setpoint_signal}={y:.3g} vs setpoint {pid.setpoint:.3g}"
        if held is not None:
            reason += f" ({held})"
        elif change == 0 and floor_unknown(capped, load):
            reason += f" ({FLOOR_UNKNOWN})"
        if change == 0 and terms.error > 0 and est.starting > 0:
            reason += f" (waiting for {est.starting} starting replica(s), which cover the target)"
        return Decision(
            desired,
            reason,
            change_reason(desired, current) if change else Reason.NO_CHANGE,
            terms={
                "setpoint": pid.setpoint,
                "measurement": y,
                "error": terms.error,
                "p": terms.p,
                "i": terms.i,
                "d": terms.d,
                "target_capacity_rps": target,
            },
            gauges=setpoint_gauges(pid.setpoint_signal, pid.setpoint, y),
        )

    def pool_measurement(self, role: str, pool: PoolObservation, svc: Service) -> float | None:
        """The signal a pool's loop holds at the setpoint (module docstring), None when unknown."""
        sig, slo = pool.signals, svc.slo[INTERACTIVE]
        if role == PREFILL:
            return None if sig.ttft_mean_s is None else sig.ttft_mean_s / slo.ttft_s
        itl = None if sig.tpot_mean_s is None else sig.tpot_mean_s / slo.itl_s
        wait = None if sig.ttft_mean_s is None else sig.ttft_mean_s / slo.ttft_s
        kv = None if sig.kv_usage is None else self.settings.setpoint * sig.kv_usage / DECODE_KV_SETPOINT
        known = [x for x in (itl, wait, kv) if x is not None]
        return max(known) if known else None

    def _decide_pools(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Each pool's loop (module docstring), then the ratio guard; pool variant -> replicas."""
        pid = self.settings
        desired: dict[str, int] = {}
        reasons: list[str] = []
        terms: dict[str, float] = {}
        gauges: list[Gauge] = []
        for role in ROLES:
            pool = est.pools[role]
            y = self.pool_measurement(role, pool, svc)
            signal = "prefill_ttft_mean_ratio" if role == PREFILL else "decode_slo_kv_ratio"
            if y is None:
                desired.update(pool.current)
                reasons.append(f"{role}: hold: {signal} unknown")
                continue
            want, why, t = self._pool_step(est, svc, role, pool, y)
            desired.update(want)
            reasons.append(f"{role}: {why}: {signal}={y:.3g} vs setpoint {pid.setpoint:.3g}")
            terms.update({f"{role}_{k}": x for k, x in t.items()})
            labels = (("signal", signal),)
            gauges += [Gauge("autoscaler_setpoint", "Controller setpoint.", pid.setpoint, labels),
                       Gauge("autoscaler_measured", "Controller measurement.", y, labels)]
        ratio = svc.roles.ratio if svc.roles is not None else None
        if ratio is not None:
            desired, note = self._ratio_guard(est, svc, desired, ratio)
            if note:
                reasons.append(note)
        current = est.pool_current
        if all(r.endswith("unknown") for r in reasons[:2]):
            return Decision(dict(current), "; ".join(reasons), Reason.SIGNAL_UNKNOWN, hold=True)
        return Decision(desired, "; ".join(reasons), change_reason(desired, current), terms=terms,
                        gauges=tuple(gauges))

    def _pool_step(self, est: ServiceEstimate, svc: Service, role: str, pool: PoolObservation,
                   y: float) -> tuple[dict[str, int], str, dict[str, float]]:
        """One pool's ``pid_step`` and rules: (pool variant -> replicas, verb, terms)."""
        pid = self.settings
        variants = pool_variants(svc, role)
        w = {v.name: est.pool_weights[v.name] for v in variants}  # this pool's: its state is counted in them
        current = pool.current
        cap = capacity_of(current, w)
        ready_cap = sum(v.ready * w[n] for n, v in pool.variants.items())
        starting = sum(v.starting for v in pool.variants.values())
        out_min = sum(v.min_replicas * w[v.name] for v in variants)
        out_max = sum(v.cap * w[v.name] for v in variants)
        key = (svc.name, role)
        state = rescale(self.pool_states.get(key, PIDState()), current, w)
        u, state, terms = pid_step(pid, state, y, self.tick_s, cap, out_min, out_max,
                                   hold_integral=starting > 0, scale=ready_cap)
        ready = record_ready(state.ready_history, est.time_s, self.window_s,
                             {n: v.ready for n, v in pool.variants.items()})
        sig = pool.signals
        recent = est.time_s - OVERLOAD_LOOKBACK_S
        names = set(current)
        load = Load(
            capacity_rps=cap, ready_capacity_rps=ready_cap, out_max=out_max, served_rps=sig.request_rate_rps,
            arrivals_rps=est.signals.arrival_rate_rps, shedding=False,
            history=record_queue(state.queue_history, est.time_s, sig.queue_length), running=sig.running,
            queue=sig.queue_length,
            settling=starting > 0 or any(p.variant in names and p.ready_s is not None and p.ready_s > recent
                                         for p in est.pods),
            warm_start_s=min(v.startup_warm_s for v in variants), served_capacity_rps=served_capacity(ready, w),
            arrivals_low=arrivals_low(est))
        state = replace(state, queue_history=load.history, ready_history=ready)
        backlog = est.signals.queue_length  # the service's: gateway and both pools (each request passes both)
        capped = backlog_cap(demand_cap(overload_target(u, terms.error, pid.error_clip, load), load), load, backlog)
        target = demand_floor(capped, load)
        desired = split_capacity(target, variants, current, w)
        change = capacity_of(desired, w) - cap
        held = against_error(change, terms.error, load) or slo_hold(change, est.signals.slo_mean_ratio)
        if held is not None:
            desired, change = dict(current), 0.0
        state = replace(state, integral=reanchor(state.integral, terms.error, held is not None, cap,
                                                 terms.p, terms.d, out_min, out_max))
        self.pool_states[key] = state
        verb = "scale up" if change > 0 else "scale down" if change < 0 else "no change"
        if held is not None:
            verb += f" ({held})"
        elif change == 0 and floor_unknown(capped, load):
            verb += f" ({FLOOR_UNKNOWN})"
        return desired, verb, {"measurement": y, "error": terms.error, "p": terms.p, "i": terms.i, "d": terms.d,
                               "target_capacity_rps": target}

    @staticmethod
    def _ratio_guard(est: ServiceEstimate, svc: Service, desired: dict[str, int],
                     ratio: PDRatio) -> tuple[dict[str, int], str]:
        """``desired`` with the pools' totals repaired into ``roles.ratio`` (``enforce_ratio``), and a note
        when it changed them."""
        totals, bounds = {}, {}
        for role in ROLES:
            vs = pool_variants(svc, role)
            totals[role] = sum(desired[v.name] for v in vs)
            bounds[role] = (sum(v.min_replicas for v in vs), sum(v.cap for v in vs))
        p, d = enforce_ratio(totals[PREFILL], totals[DECODE], ratio, bounds[PREFILL], bounds[DECODE])
        if (p, d) == (totals[PREFILL], totals[DECODE]):
            return desired, ""
        out = dict(desired)
        for role, n in ((PREFILL, p), (DECODE, d)):
            if n != totals[role]:
                pool = pool_service(svc, role)
                mine = {v.name: desired[v.name] for v in pool.variants}
                out.update(place_count(n, pool, mine, est.pool_weights))
        return out, (f"ratio guard: prefill:decode {totals[PREFILL]}:{totals[DECODE]} -> {p}:{d} "
                     f"(within [{ratio.min_ratio:g}, {ratio.max_ratio:g}])")

    @staticmethod
    def _load(est: ServiceEstimate, svc: Service, out_max: float, history: History) -> Load:
        """What the rules read of this tick (``pid_rules.Load``)."""
        recent = est.time_s - OVERLOAD_LOOKBACK_S
        settling = (est.starting > 0 or any(p.ready_s is not None and p.ready_s > recent for p in est.pods)
                    or silent_pods(est) > 0)
        return Load(
            capacity_rps=est.capacity_rps,
            ready_capacity_rps=est.ready_capacity_rps,
            out_max=out_max,
            served_rps=est.signals.request_rate_rps,
            arrivals_rps=est.signals.arrival_rate_rps,
            shedding=any((est.signals.priority(p).shed_rps or 0.0) > 0 for p in PRIORITIES),
            history=history,
            running=est.signals.running,
            queue=est.signals.queue_length,
            settling=settling,
            warm_start_s=min(v.startup_warm_s for v in svc.variants),
            arrivals_low=arrivals_low(est),
        )

    def on_guard_cut(self, service: str, intended: Mapping[str, int], applied: Mapping[str, int],
                     weights: Mapping[str, float]) -> None:
        """Back-calculation anti-windup: move the integral toward what was applied (``track``), the
        service's and each pool's apart (a pool's variants are those its state was counted in)."""
        pooled: set[str] = set()
        for (name, role), state in list(self.pool_states.items()):
            if name != service:
                continue
            mine = {v for v, _ in state.weights}
            pooled |= mine
            done = capacity_of({v: n for v, n in applied.items() if v in mine}, weights)
            want = capacity_of({v: n for v, n in intended.items() if v in mine}, weights)
            self.pool_states[(name, role)] = track(state, done - want, done)
        if service in self.states:
            done = capacity_of({v: n for v, n in applied.items() if v not in pooled}, weights)
            want = capacity_of({v: n for v, n in intended.items() if v not in pooled}, weights)
            self.states[service] = track(self.states[service], done - want, done)
