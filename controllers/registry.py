"""Every controller, built by spec for every driver (simulate, compare, dry-run, backtest, the daemon).

A spec is ``name`` or ``name:key=value[:key=value...]``, e.g. ``hpa:metric=queue:target=5`` or
``dynamo:ttft=2:itl=0.1:predictor=constant``. ``parse_spec`` checks each value against the
parameter's ``Param`` (text, or a finite number in range: targets and windows > 0, tolerances and
thresholds >= 0) and names the controller and parameter when one is wrong.

Names: ``pid`` (``controllers.pid``); ``static`` and ``static-ilp`` (fixed fleets,
``controllers.static``, ``controllers.baselines.static_ilp``); the anchors' autoscalers
(``controllers.baselines``): ``hpa``, ``keda``, ``kpa`` (Knative), ``aibrix`` and ``aibrix-apa``,
``dynamo``, ``dynamo-pd`` (Dynamo's planner in its disaggregated mode: the prefill/decode pools of a
service with ``roles``), ``wva``, ``wva-pd`` (llm-d's WVA with its role-aware grouping: each role's
pods analysed apart; a service with ``roles``);
``mpc`` (``controllers.mpc``: ``mpc:horizon=40:quantile=0.9:miss_weight=10:forecast=auto``;
``hedge=measured`` plans on its own forecast errors instead of the forecaster's band, and on the
hold they show; ``hold=measured`` measures the hold under any hedge; ``hold_s=S`` fixes it (300 s; refused
beside ``hold=measured`` or ``hold=fixed``);
``learn=0`` turns off the speed it learns,
``learn=2`` adds the capacity posterior (``models.learning``), ``learn=3`` gates its corrections by
the p95 SLO ratio; ``burst=1`` plans for the arrivals'
measured burstiness (``models.arrivals``), ``cap=1`` counts that a step prefills at most its budget,
``busy=1`` takes the prefill riding in a decode as a busy period's work (``ReplicaSpec.busy_period``);
``backlog=1`` adds to that form its prefill queue as a backlog serves it (``ReplicaSpec.backlog``);
``marginal=1`` has the TTFT bound read the prompts' marginal (``ReplicaSpec.prompt_marginal``);
``cover=1`` holds a scale-down while the plan is short within a cold start (``hold_downs_within_start``);
``trend=1`` plans for the rise the last cold start's rates show (``rising_slope``, ``trend_path``);
``floor=1`` never plans below the burst floor: the highest one-tick arrival rate over the hold, times
``tick / (tick + ttft)`` (``controllers.burst_floor``); ``rise=1`` holds every aggregated scale-down
while the last two minutes' rates rise (``hold_downs_while_rising``); ``overdue=1`` counts a start still not ready a
margin past its start-up as capacity at risk and orders on another variant (``controllers.mpc.starts_at_risk``);
``gap=1`` holds every scale-down for a signal window after the rates come back from a gap longer than the
window (``controllers.mpc.hold_downs_after_gap``: a Prometheus back from an outage reads low meanwhile);
``pending=1`` counts the starts of a variant whose pod has been unschedulable for a tick as capacity at risk
at once (``controllers.mpc.pending_at_risk``, on ``VariantObservation.unschedulable_s``);
``unserved=1`` prices a shortfall below the hold's highest rate, where an order can still serve, at
``controllers.mpc.UNSERVED_WEIGHT`` instead of the miss weight (``controllers.mpc.seen_shortfall``);
``drain=1`` charges today's queue from the first plan step a replica can serve it, not from now
(``controllers.mpc.drain_start``: a pool lost whole serves nothing before a start-up);
``arrivals=1`` feeds the forecast stage the arrival rate instead of the completions
(``controllers.base.Controller.forecast_demand``);
``settle_s=S``, where the plan's total falls, holds each variant's scale-down at the highest count the
plan recommended for it within the last S seconds, the total never above today's (a swap between variants
passes; ``controllers.mpc.settle_downs``: the HPA's scale-down stabilisation window; off at 0);
``settle_by=capacity`` has that window compare the capacity (req/s) the plan's fleet serves instead of
its counts (``controllers.mpc.settle_capacity``), and ``settle_final=1`` makes a fall it let through final
(``controllers.mpc.release_counts``); both need ``settle_s`` > 0 or ``settle=measured``, which measures the
window on the service's own last hour (``controllers.mpc.measured_settle``);
``spill=R`` has the aggregated variants hold R times the pools' planned rate beside their own share, for the
arrivals a saturated prefill pool spills to them (``models.planning.PlanService.pd_spill``; off at 0), and
``spill_idle=1`` routes those variants their planned share alone (``controllers.mpc.idle_reserve``);
``smooth_s=S`` feeds the forecast stage the mean of the last S seconds' demand rates
(``autoscaler.loop.forecast.smoothed``; off at 0);
``forecast=last`` plans on today's rate, ``forecast=perfect`` on the trace's true demand, with a trace;
``forecast=arima`` on the forecast stage's path with its request rate from an ARIMA refitted every step;
``mpc:node_limit=N`` bounds each solve by branch-and-bound nodes as well as time, and ``time_limit=S`` sets that
time (10 s; raised for simulation only); ``int_blocks=K`` keeps
only the first K of a lone service's plan blocks integer (``PlanProblem.integer_blocks``), and ``int_up=1``
prices the rest as if rounded up (``PlanProblem.tail_up``); ``joint_blocks=K`` keeps the first K
integer for several services planned together under shared GPU limits, and ``joint_warm=1`` solves
their decomposed plan's coordinator LP from the last tick's basis (``PlanProblem.warm_coordinator``);
``shed=1`` plans
shedding the sheddable priority in the same problem and sets the gateway's thresholds);
``oracle`` (``controllers.oracle``: the same plan solved offline on the trace's true demand; needs a trace;
``oracle:node_limit=N`` replaces its ``OFFLINE_NODE_LIMIT``); ``bound`` (``controllers.bound``: the
cheapest schedule of the oracle's family, its capacities scaled, that reaches ``target`` (0.99)
interactive attainment in simulation, within ``simulations`` (8) runs; needs a trace and a driver
that simulates: ``simulate``, ``compare``).

With a workload (a trace, in ``simulate`` and ``compare``), what is calibrated comes from it: the
fixed fleets are sized for its peak 60-s arrival rate, and the metric targets of HPA, KEDA, Knative
and AIBrix are one replica's load at 70 % of its capacity for its request mix
(``controllers.baselines.calibrate``). Without one (``dry-run``, ``backtest``, the daemon), from the
fleet file and the profiles alone: the mix is the service's ``typical_request``; ``static`` holds
each variant's ``initial_replicas`` unless ``static:peak_rps=R`` sizes it for ``R`` requests/s, and
``static-ilp`` needs ``peak_rps``. Queue-metric targets default to the anchors' thresholds (HPA 5,
KEDA 10). Calibration is for the target service (default the first); the controller applies the
same targets to every service it runs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoscaler.config import FleetConfig, Service
from autoscaler.workload.stream import AnyWorkload
from autoscaler.workload.types import Workload
from controllers.base import Controller, FleetMismatchError
from controllers.baselines.aibrix import AIBrixController
from controllers.baselines.calibrate import Calibration, calibrate
from controllers.baselines.dynamo import DynamoPlanner
from controllers.baselines.dynamo_pd import DynamoPDPlanner
from controllers.baselines.hpa import DEFAULT_QUEUE_TARGET, HPAController
from controllers.baselines.keda import DEFAULT_QUEUE_THRESHOLD, KedaController
from controllers.baselines.knative import KnativeKPAController
from controllers.baselines.static_ilp import static_ilp_controller
from controllers.baselines.wva import WVAController
from controllers.baselines.wva_pd import WVAPDController
from controllers.bound import Simulate, bound_controller
from controllers.mpc import MPCController
from controllers.oracle import oracle_controller, true_demand
from controllers.pid import PIDController
from controllers.static import StaticController, peak_rate_rps, provision_for, steady_start_fleet, workload_mix
from models.capacity import RequestMix, service_mix, variant_weights


@dataclass(frozen=True)
class Param:
    """What a spec may set one parameter to.

    ``kind`` is ``str`` (passed as written; the controller checks the choice), ``float`` (a finite
    number) or ``int`` (a whole number), written without ``_`` (Python reads ``1_5`` as 15); numbers
    must be ``> low`` (``>= low`` when ``closed``) and, with ``high``, ``<= high`` (``< high`` when
    ``high_open``).
    """

    kind: type
    low: float | None = None
    closed: bool = False
    high: float | None = None
    high_open: bool = False

    def bounds(self) -> str:
        """The range as text: ``> 0``, ``>= 1``, ``in (0, 100]``."""
        low = "" if self.low is None else format(self.low, "g")
        if self.high is None:
            return f"{'>=' if self.closed else '>'} {low}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return f"in {'[' if self.closed else '('}{low}, {self.high:g}{')' if self.high_open else ']'}"

    def parse(self, name: str, key: str, text: str) -> int | float | str:
        """``text`` as this parameter's value.

        Raises:
            ValueError: one line naming ``name`` and ``key``: not a number (or one with ``_``), not
                finite, out of range.
        """
        if self.kind is str:
            return text
        what = f"{name} {key}"
        if "_" in text:  # Python's int() and float() read 1_5 as 15: a typo for 1.5 would run silently
            kind = "a whole number" if self.kind is int else "a number"
            raise ValueError(f"{what} must be {kind} without '_', got '{text}'")
        try:
            value: int | float = int(text) if self.kind is int else float(text)
        except ValueError:
            kind = "a whole number" if self.kind is int else "a number"
            raise ValueError(f"{what} must be {kind}, got '{text}'") from None
        if not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number, got '{text}'")
        below = self.low is not None and (value < self.low if self.closed else value <= self.low)
        above = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if below or above:
            raise ValueError(f"{what} must be {self.bounds()}, got {text}")
        return value


TEXT = Param(str)
POSITIVE = Param(float, 0.0)
NON_NEGATIVE = Param(float, 0.0, closed=True)


@dataclass(frozen=True)
class BuildContext:
    """What a factory may read: the fleet, the target service, the spec, and the workload (None live)."""

    cfg: FleetConfig
    svc: Service
    spec: str
    workload: AnyWorkload | None
    simulate: Simulate | None = None

    def whole(self, why: str) -> Workload:
        """The workload with every request made (``Workload``).

        Raises:
            ValueError: none (a live loop), or a ``WorkloadStream``: ``why`` says what needs it.
        """
        if not isinstance(self.workload, Workload):
            where = "a trace (simulate, compare)" if self.workload is None else "the whole workload, not a stream"
            raise ValueError(f"{self.spec.split(':', 1)[0]} needs {where}: {why}")
        return self.workload

    @property
    def mix(self) -> RequestMix | None:
        """The request mix to calibrate on: the workload's accepted requests, else the fleet file's."""
        return service_mix(self.svc) if self.workload is None else workload_mix(self.svc, self.workload)

    def calibration(self) -> Calibration:
        """One replica's load at 70 % of capacity (``controllers.baselines.calibrate``)."""
        mix = self.mix
        return calibrate(self.svc, self.cfg.engine, service_mix(self.svc) if mix is None else mix)

    def peak_rps(self, given: float | None) -> float:
        """``given``, else the workload's peak 60-s arrival rate.

        Raises:
            ValueError: neither (no workload, no ``peak_rps``).
        """
        if given is not None:
            return given
        if self.workload is None:
            raise ValueError(f"{self.spec.split(':', 1)[0]} needs a trace (simulate, compare) or peak_rps=R "
                             "(requests/s to size the fleet for)")
        return peak_rate_rps(self.workload, max_model_len=self.svc.max_model_len)


_Factory = Callable[[dict[str, Any], BuildContext], Controller]


def _params(cls: type, *skip: str, **schema: Param) -> dict[str, Param]:
    """Constructor parameters a spec may set (the fleet file gives the rest), in signature order,
    each with its ``Param``; ``schema`` must cover exactly those parameters."""
    names = [p for p in inspect.signature(cls).parameters if p not in ("engine", "window_s", "name", *skip)]
    if set(names) != set(schema):
        raise TypeError(f"{cls.__name__}: spec schema {sorted(schema)} != constructor parameters {sorted(names)}")
    return {n: schema[n] for n in names}


def _window(ctx: BuildContext) -> float:
    return ctx.cfg.controller.window_s


def _pid(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    c = ctx.cfg.controller
    return PIDController(c.pid, c.tick_s, c.window_s, name=ctx.spec)


def _static(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    c, svc = ctx.cfg.controller, ctx.svc
    if ctx.workload is None and "peak_rps" not in kw:
        replicas = {v.name: v.start_replicas for v in svc.variants}
    else:
        replicas = provision_for(svc, ctx.cfg.engine, ctx.mix, ctx.peak_rps(kw.get("peak_rps")))
    return StaticController({svc.name: replicas}, c.tick_s, c.window_s, name=ctx.spec)


def _static_ilp(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    c = ctx.cfg.controller
    return static_ilp_controller(ctx.svc, ctx.cfg.engine, ctx.mix, ctx.peak_rps(kw.get("peak_rps")),
                                 c.tick_s, c.window_s, name=ctx.spec)


def _hpa(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    if "target" not in kw:
        queue = kw.get("metric") == "queue"
        kw = {**kw, "target": DEFAULT_QUEUE_TARGET if queue else ctx.calibration().kv_usage}
    return HPAController(**kw, window_s=_window(ctx), name=ctx.spec)


def _keda(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    if "threshold" not in kw:
        queue = kw.get("metric") == "queue"
        kw = {**kw, "threshold": DEFAULT_QUEUE_THRESHOLD if queue else ctx.calibration().concurrency}
    return KedaController(**kw, window_s=_window(ctx), name=ctx.spec)


def _kpa(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    kw = {"target": ctx.calibration().concurrency, **kw} if "target" not in kw else kw
    return KnativeKPAController(**kw, window_s=_window(ctx), name=ctx.spec)


def _aibrix(strategy: str) -> _Factory:
    def build(kw: dict[str, Any], ctx: BuildContext) -> Controller:
        kw = {"target": ctx.calibration().kv_usage, **kw} if "target" not in kw else kw
        return AIBrixController(**kw, strategy=strategy, window_s=_window(ctx), name=ctx.spec)
    return build


def _dynamo_pd(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    if ctx.svc.roles is None:
        raise FleetMismatchError(f"dynamo-pd scales prefill/decode pools: service {ctx.svc.name} has none (roles in "
                                 "the fleet file; dynamo is the aggregated planner)")
    return DynamoPDPlanner(ctx.cfg.engine, **kw, name=ctx.spec)


def _wva_pd(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    if ctx.svc.roles is None:
        raise FleetMismatchError(f"wva-pd scales prefill/decode pools: service {ctx.svc.name} has none (roles in "
                                 "the fleet file; wva is the aggregated autoscaler)")
    return WVAPDController(name=ctx.spec)


MAX_HORIZON = 480
"""Longest MPC horizon a spec may ask for, ticks (2 h at 15 s): the plan's size and solve time grow
with it, and no start-up plus cool-down in a fleet file is near that long."""


def _mpc(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    mixes = _service_mixes(ctx)
    future = None
    if kw.get("forecast") == "perfect" and ctx.workload is not None:
        wl = ctx.whole("a perfect forecast reads the true future demand")
        dt = ctx.cfg.controller.tick_s
        steps = math.ceil(wl.duration_s / dt) + 2
        future = {s.name: true_demand(s, wl, dt, steps, 1) for s in ctx.cfg.services}
    return MPCController(ctx.cfg, _service_weights(ctx, mixes), **kw, mixes=mixes, future_rps=future, name=ctx.spec)


def _oracle(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    wl = ctx.whole("it plans on the true future demand")
    svc = ctx.svc
    itl = ctx.cfg.controller.pid.setpoint * svc.slo["interactive"].itl_s
    initial = steady_start_fleet(svc, ctx.cfg.engine, wl, itl)
    mixes = _service_mixes(ctx)  # the pools' capacities, and ``pool`` > 1's pooled weights, are for its mix
    # opt-in: ``oracle:roles=1`` plans the P/D pools, and the router splits by its plan unless ``route=0``
    kw = {**kw, "roles": bool(kw.get("roles", 0)), "route": bool(kw.get("route", 1))}
    return oracle_controller(ctx.cfg, svc, wl, _service_weights(ctx, mixes)[svc.name], initial, **kw,
                             name=ctx.spec, mix=mixes[svc.name])


def _bound(kw: dict[str, Any], ctx: BuildContext) -> Controller:
    wl = ctx.whole("it searches schedules by simulating them")
    if ctx.simulate is None:
        raise ValueError("bound is searched by simulation: run it with simulate or compare")
    svc = ctx.svc
    itl = ctx.cfg.controller.pid.setpoint * svc.slo["interactive"].itl_s
    initial = steady_start_fleet(svc, ctx.cfg.engine, wl, itl)
    return bound_controller(ctx.cfg, svc, wl, _service_weights(ctx)[svc.name], initial, ctx.simulate,
                            **kw, name=ctx.spec)


def _service_mixes(ctx: BuildContext) -> dict[str, RequestMix | None]:
    """service -> the mix it is sized for: its accepted requests of the workload, else its
    ``typical_request``; None for a service that accepts none of the workload."""
    return {svc.name: service_mix(svc) if ctx.workload is None else workload_mix(svc, ctx.workload)
            for svc in ctx.cfg.services}


def _service_weights(ctx: BuildContext,
                     mixes: dict[str, RequestMix | None] | None = None) -> dict[str, dict[str, float]]:
    """service -> variant -> one replica's capacity (requests/s) for the service's mix (``mixes``,
    default ``_service_mixes``); 0 for a service that accepts none of the workload."""
    mixes = _service_mixes(ctx) if mixes is None else mixes
    return {svc.name: {v.name: 0.0 for v in svc.variants} if mixes[svc.name] is None
            else variant_weights(svc, ctx.cfg.planning_engine(), mixes[svc.name]) for svc in ctx.cfg.services}


_AIBRIX = _params(AIBrixController, "strategy", target=POSITIVE)
_SPECS: dict[str, tuple[dict[str, Param], _Factory]] = {
    "pid": ({}, _pid),
    "static": ({"peak_rps": POSITIVE}, _static),
    "hpa": (_params(HPAController, "scale_up", "scale_down", target=POSITIVE, metric=TEXT, tolerance=NON_NEGATIVE,
                    downscale_window_s=NON_NEGATIVE, behavior=TEXT, upscale_window_s=NON_NEGATIVE,
                    up_tolerance=NON_NEGATIVE, down_tolerance=NON_NEGATIVE), _hpa),
    "keda": (_params(KedaController, threshold=POSITIVE, metric=TEXT, activation_threshold=NON_NEGATIVE,
                     fallback_failures=Param(int, 0, closed=True), fallback_replicas=Param(int, 0, closed=True),
                     fallback_behavior=TEXT), _keda),
    "kpa": (_params(KnativeKPAController, target=POSITIVE, stable_window_s=POSITIVE,
                    panic_window_percentage=Param(float, 0.0, high=100.0),
                    activation_scale=Param(int, 1, closed=True), scale_down_delay_s=NON_NEGATIVE), _kpa),
    "aibrix": (_AIBRIX, _aibrix("kpa")),
    "aibrix-apa": (_AIBRIX, _aibrix("apa")),
    "dynamo": (_params(DynamoPlanner, predictor=TEXT, ttft=POSITIVE, itl=POSITIVE),
               lambda kw, ctx: DynamoPlanner(ctx.cfg.engine, **kw, name=ctx.spec)),
    "dynamo-pd": (_params(DynamoPDPlanner, predictor=TEXT, ttft=POSITIVE, itl=POSITIVE), _dynamo_pd),
    "wva": (_params(WVAController), lambda kw, ctx: WVAController(name=ctx.spec)),
    "wva-pd": (_params(WVAPDController), _wva_pd),
    "static-ilp": ({"peak_rps": POSITIVE}, _static_ilp),
    "oracle": ({"miss_weight": POSITIVE, "node_limit": Param(int, 0, closed=True),
                "pool": Param(int, 1, closed=True, high=256), "pd_util": Param(float, 0.0, high=1.0),
                "roles": Param(int, 0, closed=True, high=1), "route": Param(int, 0, closed=True, high=1),
                "peak_s": POSITIVE}, _oracle),
    "bound": ({"target": Param(float, 0.0, high=1.0), "simulations": Param(int, 1, closed=True, high=40),
               "miss_weight": POSITIVE, "node_limit": Param(int, 0, closed=True)}, _bound),
    "mpc": (_params(MPCController, "cfg", "weights", "mixes", "future_rps",
                    horizon=Param(int, 1, closed=True, high=MAX_HORIZON),
                    quantile=Param(float, 0.0, high=0.999), miss_weight=POSITIVE, forecast=TEXT,
                    hold_s=NON_NEGATIVE, learn=Param(int, 0, closed=True, high=3), hedge=TEXT, hold=TEXT, mix=TEXT,
                    node_limit=Param(int, 0, closed=True), time_limit=Param(float, 0.0, high=3600.0),
                    pool=Param(int, 1, closed=True, high=256), warm=Param(int, 0, closed=True, high=1),
                    int_blocks=Param(int, 0, closed=True), int_up=Param(int, 0, closed=True, high=1),
                    joint_blocks=Param(int, 0, closed=True), joint_warm=Param(int, 0, closed=True, high=1),
                    shed=Param(int, 0, closed=True, high=1),
                    shed_weight=POSITIVE, pd_util=Param(float, 0.0, high=1.0),
                    spill=Param(float, 0.0, closed=True, high=1.0, high_open=True),
                    spill_idle=Param(int, 0, closed=True, high=1),
                    pd_scale=Param(int, 0, closed=True, high=1),
                    burst=Param(int, 0, closed=True, high=1), cap=Param(int, 0, closed=True, high=1),
                    busy=Param(int, 0, closed=True, high=1), backlog=Param(int, 0, closed=True, high=1),
                    marginal=Param(int, 0, closed=True, high=1),
                    coverage=Param(float, 0.0, high=0.999), cover=Param(int, 0, closed=True, high=1),
                    trend=Param(int, 0, closed=True, high=1), floor=Param(int, 0, closed=True, high=1),
                    floor_x=Param(float, 1.0, closed=True, high=10.0), floor_ahead_s=NON_NEGATIVE,
                    rise=Param(int, 0, closed=True, high=1),
                    overdue=Param(int, 0, closed=True, high=1),
                    gap=Param(int, 0, closed=True, high=1), pending=Param(int, 0, closed=True, high=1),
                    unserved=Param(int, 0, closed=True, high=1),
                    drain=Param(int, 0, closed=True, high=1),
                    arrivals=Param(int, 0, closed=True, high=1), settle_s=NON_NEGATIVE,
                    settle_by=TEXT, settle_final=Param(int, 0, closed=True, high=1), settle=TEXT,
                    smooth_s=NON_NEGATIVE), _mpc),
}
NAMES = tuple(_SPECS)
NEEDS: dict[str, dict[str, tuple[str, int | float | str]]] = {
    "mpc": {"shed_weight": ("shed", 1), "coverage": ("hedge", "adaptive")},
    "oracle": {"pd_util": ("roles", 1), "route": ("roles", 1)},
}
"""name -> parameter -> (parameter, value) it needs in the same spec: without it the parameter would
be read by nothing (``mpc``'s ``shed_weight`` prices the shedding only ``shed=1`` plans; ``oracle``'s
``pd_util`` and ``route`` act on the pools' plan only ``roles=1`` makes: ``oracle_controller``). A
parameter that acts on its own is not listed: ``mpc``'s ``hold_s`` fixes the hold under either hedge,
``oracle``'s ``peak_s`` sizes every block with or without the pools."""
IMPLIES: dict[str, dict[tuple[str, int | float | str], tuple[str, int | float | str]]] = {
    "mpc": {("backlog", 1): ("busy", 1)},
}
"""name -> (parameter, value) -> (parameter, value) it implies: given the first, the second may be left
out but not set otherwise (``mpc``'s ``backlog=1`` plans on the busy-period form, so ``busy=0`` beside
it would be overridden)."""
ANCHORS = frozenset({"hpa", "keda", "kpa", "aibrix", "aibrix-apa", "dynamo", "dynamo-pd", "wva", "wva-pd"})
"""The anchors' autoscalers (``controllers.baselines``): run without admission unless told otherwise."""
ROLE_ONLY = ("dynamo-pd", "wva-pd")
"""Controllers built only for a service with ``roles``: ``dynamo-pd`` scales its prefill/decode pools only,
``wva-pd`` its pools and, as their own role group, its aggregated variants."""
BASELINE_NAMES = tuple(n for n in NAMES if n not in ("pid", "static", "mpc", "oracle", "bound", *ROLE_ONLY))
"""The baselines that run on any fleet (those of ``ROLE_ONLY`` need pools)."""


SET_IN_FLEET_FILE = {
    "pid": "its gains and setpoint (kp, ki, kd, setpoint, deadband, ...) are set in the fleet file under "
           "controller.pid (docs/configuration.md#controller)",
    "wva": "it has no settings of its own: it reads each pod's KV usage and waiting requests "
           "(docs/controllers.md#what-each-baseline-reads)",
    "wva-pd": "it has no settings of its own: it reads each pod's KV usage and waiting requests, per role "
              "(docs/controllers.md#what-each-baseline-reads)",
}
"""Where a controller whose spec takes no parameters is configured instead (the error of ``parse_spec``)."""


def _takes(name: str, allowed: dict[str, Param]) -> str:
    """What ``name``'s spec takes, for an error: its parameters, or that it takes none and where it is set."""
    if allowed:
        return f"it takes: {', '.join(allowed)}"
    where = SET_IN_FLEET_FILE.get(name)
    return "its spec takes no parameters" + (f"; {where}" if where else "")


def parse_spec(spec: str) -> tuple[str, dict[str, int | float | str]]:
    """Split ``name:key=value:...`` into the name and its parameters (numbers parsed and checked).

    Raises:
        ValueError: one line: unknown name (listing the known ones), a parameter without ``=``, one the
            controller does not take or given twice, a number that is not one, not finite or out of
            range (``Param``), a parameter without the one it needs (``NEEDS``).
    """
    name, *parts = spec.strip().split(":")
    if name not in _SPECS:
        raise ValueError(f"unknown controller '{name}'; choose one of: {', '.join(NAMES)}")
    allowed = _SPECS[name][0]
    params: dict[str, int | float | str] = {}
    for part in parts:
        key, eq, text = part.partition("=")
        if not eq or key not in allowed:
            raise ValueError(f"bad parameter '{part}' for {name}; {_takes(name, allowed)}")
        if key in params:
            raise ValueError(f"{name} {key} given twice in '{spec}'")
        params[key] = allowed[key].parse(name, key, text)
    for key, (other, value) in NEEDS.get(name, {}).items():
        if key in params and params.get(other) != value:
            raise ValueError(f"{name} {key} needs {other}={value} in the same spec (without it nothing reads "
                             f"{key}), got '{spec.strip()}'")
    for (key, value), (other, implied) in IMPLIES.get(name, {}).items():
        if params.get(key) == value and other in params and params[other] != implied:
            raise ValueError(f"{name} {key}={value} implies {other}={implied}, got '{spec.strip()}'")
    return name, params


def needs_whole(spec: str) -> bool:
    """Whether the controller of ``spec`` reads the whole workload up front (``BuildContext.whole``):
    ``oracle``, ``bound`` and ``mpc`` with ``forecast=perfect``; the rest run on a ``WorkloadStream``.

    Raises:
        ValueError: a bad spec (``parse_spec``).
    """
    name, params = parse_spec(spec)
    return name in ("oracle", "bound") or (name == "mpc" and params.get("forecast") == "perfect")


def build(spec: str, cfg: FleetConfig, service: str | None = None, workload: AnyWorkload | None = None,
          simulate: Simulate | None = None) -> Controller:
    """The controller named by ``spec`` (module docstring); its ``name`` is the spec.

    Args:
        spec: ``name[:key=value...]``.
        cfg: the fleet (settings of the PID and the loop, engine settings, variants).
        service: the service calibrated on (default the first).
        workload: the trace, in simulation (a ``WorkloadStream`` for the controllers that do not plan
            on the whole of it: not ``oracle``, ``bound``, ``mpc:forecast=perfect``); None for a live loop.
        simulate: runs a controller on this fleet and workload and measures it (``controllers.bound``);
            the simulation drivers give it, and only ``bound`` reads it.

    Raises:
        ValueError: unknown name, bad parameter, or a value the controller rejects; unknown service.
    """
    name, params = parse_spec(spec)
    try:
        svc = cfg.service(service)
    except KeyError:
        known = ", ".join(s.name for s in cfg.services)
        raise ValueError(f"unknown service '{service}' (fleet has: {known})") from None
    return _SPECS[name][1](dict(params), BuildContext(cfg, svc, spec.strip(), workload, simulate))
