"""Model-predictive control: every tick, plan replicas per variant over a horizon and apply the first step.

Each tick ``MPCController.decide`` builds one ``models.planning`` problem for the service and solves
it with HiGHS (``scipy.optimize.milp``):

- demand per step (requests/s): the load forecast's ``quantile`` (the forecast stage's path, its
  90 % interval read as normal: ``mean + z(q) / z(0.95) x (upper - mean)``), never below today's
  arrival rate (a forecast that lags a rise must not cancel it; a fall is followed when it is
  seen), plus today's queue spread over the steps until new replicas have run ``DRAIN_S``. Without a
  forecast yet (the first step of history), or with ``forecast=last``, today's rate for every step;
- capacity per replica (requests/s at the interactive SLO, ``models.capacity``) for the mix the
  registry calibrated on (the trace's in simulation, the fleet file's ``typical_request`` live);
- replicas ready by each step: today's ready ones, and the starting ones when their start-up (warm
  while warm nodes are free, else cold) has run from the tick this controller saw them appear;
- a service that lost replicas it did not ask to remove (a crash, an eviction) is recovering for a
  cold start plus the guard's cool-down: meanwhile no plan removes a ready replica;
- costs: GPU $/hour, ``miss_weight`` times the dearest variant's $ per request served for each
  request of demand left unserved, and a cold start's GPU time per replica started.

The loop's guard still applies (step limits, cool-down, warm-up and idle rules); the plan's step
limits are the guard's, so it seldom cuts. ``Decision.plan`` holds the plan per variant;
``Decision.terms`` the demand planned for now (``demand_rps``), the solve time (``solve_ms``) and the
unserved demand over the horizon (``unserved_rps_max``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from controllers.base import Controller, Decision, change_reason, hold
from models.planning import PlanProblem, PlanService, PlanVariant, solve

if TYPE_CHECKING:
    from autoscaler.config import FleetConfig, Service, Variant
    from autoscaler.state import ServiceEstimate

DRAIN_S = 60.0
"""Seconds over which the plan drains today's queue (the TTFT SLOs are seconds; a minute keeps the
backlog's extra replicas few)."""

DEFAULT_WINDOW_S = 60.0
"""Signal window, seconds: the plan reads rates, not latency quantiles, and a 300-s window (the PID's)
would show a step in load a cold start late. 60 s is four 15-s scrapes, PromQL's least for a steady ``rate``."""

Z95 = NormalDist().inv_cdf(0.95)
FORECASTS = ("auto", "last")


@dataclass
class _ServiceMemory:
    """What the controller remembers of a service between ticks."""

    seen_starting: dict[str, list[float]] = field(default_factory=dict)  # variant -> first-seen time per start
    last_applied: dict[str, int] = field(default_factory=dict)
    last_time_s: float = -math.inf
    recovering_until: float = -math.inf


class MPCController(Controller):
    """Receding-horizon replica planning (module docstring).

    Args:
        cfg: the fleet (tick, window, guard limits).
        weights: service -> variant -> capacity of one replica, requests/s.
        horizon: steps of ``tick_s`` planned (>= 1).
        quantile: forecast quantile planned on, in (0, 1).
        miss_weight: cost of a request left unserved, in units of the dearest variant's cost per request.
        forecast: ``auto`` (the forecast stage's path) or ``last`` (today's rate for every step).
        window_s: signal window, seconds (at least the tick).
        name: the spec it was built from.

    Raises:
        ValueError: an argument out of range or an unknown ``forecast``.
    """

    def __init__(self, cfg: FleetConfig, weights: Mapping[str, Mapping[str, float]], horizon: int = 40,
                 quantile: float = 0.9, miss_weight: float = 10.0, forecast: str = "auto",
                 window_s: float = DEFAULT_WINDOW_S, name: str = "mpc") -> None:
        if horizon < 1 or not 0 < quantile < 1 or not 0 < miss_weight < math.inf:
            raise ValueError(f"{name}: need horizon >= 1, quantile in (0, 1) and miss_weight > 0, got "
                             f"{horizon}, {quantile}, {miss_weight}")
        if forecast not in FORECASTS:
            raise ValueError(f"{name}: forecast must be one of {', '.join(FORECASTS)}, got '{forecast}'")
        c = cfg.controller
        super().__init__(name, c.tick_s, max(window_s, c.tick_s),
                         forecast_horizon_s=horizon * c.tick_s if forecast == "auto" else None)
        self.guard = c.guard
        self.weights = {s: dict(w) for s, w in weights.items()}
        self.horizon = horizon
        self.quantile = quantile
        self.z = NormalDist().inv_cdf(quantile) / Z95
        self.miss_weight = miss_weight
        self.forecast = forecast
        self.memory: dict[str, _ServiceMemory] = {}

    # ------------------------------------------------------------------ demand
    def demand(self, est: ServiceEstimate, svc: Service, now_rps: float) -> np.ndarray:
        """Requests/s to serve in each of the ``horizon`` steps (module docstring), shape (horizon,)."""
        dt, h = self.tick_s, self.horizon
        mid = est.time_s + (np.arange(h) + 0.5) * dt
        path = np.full(h, now_rps)
        f = est.forecast.rate_rps if est.forecast is not None and self.forecast == "auto" else None
        if f is not None:
            mean, upper = np.asarray(f.path.mean, float), np.asarray(f.path.upper, float)
            spread = np.where(np.isfinite(upper), upper - mean, 0.0)
            q = np.maximum(mean + self.z * spread, 0.0)
            path = np.interp(mid, f.times_s, q)
        path = np.maximum(path, now_rps)
        fastest = min(math.ceil((v.startup_warm_s if v.warm_nodes else v.startup_cold_s) / dt) for v in svc.variants)
        queue = est.signals.get("queue_length") or 0.0
        drain = fastest + max(1, math.ceil(DRAIN_S / dt))  # until new replicas have served a drain period
        path[:drain] += queue / (drain * dt)
        return path

    # ------------------------------------------------------------------ fleet state
    def _ready_by_step(self, est: ServiceEstimate, v: Variant, mem: _ServiceMemory) -> np.ndarray:
        """Replicas of ``v`` ready by each step from today's replicas alone."""
        obs = est.variants[v.name]
        seen = mem.seen_starting.setdefault(v.name, [])
        while len(seen) > obs.starting:  # the oldest starts became ready (or were removed)
            seen.pop(0)
        while len(seen) < obs.starting:
            seen.append(est.time_s)
        warm_left = v.warm_nodes
        ready = np.full(self.horizon, float(obs.ready))
        for first_seen in seen:
            startup = v.startup_warm_s if warm_left > 0 else v.startup_cold_s
            warm_left -= 1
            left = max(0.0, first_seen + startup - est.time_s)
            ready[min(self.horizon, math.ceil(left / self.tick_s)):] += 1
        return ready

    def _recovering(self, est: ServiceEstimate, svc: Service, mem: _ServiceMemory) -> bool:
        """True while the service recovers from a loss: fewer replicas than were applied last tick."""
        follows = est.time_s - mem.last_time_s <= 1.5 * self.tick_s  # the loop's own rules did not act between
        if follows and any(v in est.variants and est.variants[v].current < n for v, n in mem.last_applied.items()):
            cold_s = max(v.startup_cold_s for v in svc.variants)
            mem.recovering_until = est.time_s + cold_s + self.guard.scale_down_cooldown_s
        return est.time_s < mem.recovering_until

    # ------------------------------------------------------------------ decide
    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Plan the horizon and ask for its first step (module docstring)."""
        current = est.current
        now_rps = est.signals.get("arrival_rate_rps")
        if now_rps is None:
            now_rps = est.signals.get("request_rate_rps")
        if now_rps is None:
            return hold(current, "hold: request rate unknown")
        mem = self.memory.setdefault(svc.name, _ServiceMemory())
        recovering = self._recovering(est, svc, mem)
        weights = self.weights.get(svc.name, est.weights)
        dt = self.tick_s
        demand = self.demand(est, svc, now_rps)
        variants = []
        for v in svc.variants:
            obs = est.variants[v.name]
            w = float(weights.get(v.name, 0.0))
            variants.append(PlanVariant(
                name=v.name, gpu=v.gpu, gpus_per_replica=v.gpus_per_replica, price_per_hour=v.price_per_replica_hour,
                capacity_rps=np.full(self.horizon, w), current=obs.current,
                ready=self._ready_by_step(est, v, mem), min_replicas=v.min_replicas, max_replicas=v.cap,
                warm_steps=math.ceil(v.startup_warm_s / dt), cold_steps=math.ceil(v.startup_cold_s / dt),
                warm_free=max(0, v.warm_nodes - obs.current), keep=obs.ready if recovering else 0,
                start_cost=v.price_per_replica_hour * v.startup_cold_s / 3600.0,
            ))
        per_request = [v.price_per_hour / 3600.0 / v.capacity_rps[0] for v in variants if v.capacity_rps[0] > 0]
        if not per_request:
            return hold(current, "hold: no variant can serve within the SLO")
        problem = PlanProblem(
            [PlanService(svc.name, variants, demand, self.miss_weight * max(per_request),
                         self.guard.max_step_up, self.guard.max_step_down)],
            dt, self.horizon)
        plan = solve(problem)
        steps = plan.replicas[svc.name]
        desired = {name: int(n[0]) for name, n in steps.items()}
        unserved = plan.unserved_rps[svc.name]
        mem.last_applied, mem.last_time_s = dict(desired), est.time_s
        terms = {"demand_rps": float(demand[0]), "solve_ms": plan.solve_ms,
                 "unserved_rps_max": float(unserved.max()), "recovering": float(recovering)}
        code = change_reason(desired, current)
        why = (f"mpc: plan for {demand[0]:.1f} req/s now, up to {demand.max():.1f} within "
               f"{self.horizon * dt:g} s" + ("; recovering from a loss" if recovering else ""))
        return Decision(desired, why, code, terms, plan={name: [int(x) for x in n] for name, n in steps.items()})

    def on_guard_cut(self, service: str, intended: Mapping[str, int], applied: Mapping[str, int],
                     weights: Mapping[str, float]) -> None:
        """Remember what the fleet got, so a guard's cut is not read as a loss on the next tick."""
        self.memory.setdefault(service, _ServiceMemory()).last_applied = dict(applied)
