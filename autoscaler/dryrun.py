"""``autoscaler dry-run``: the control loop on a live Prometheus, deciding every tick, never actuating.

``DryRun`` runs ``ControlLoop`` with a ``PrometheusSource``, no actuator (the loop then never scales
anything) and any controller of the registry (``controllers.registry``; default ``pid``) in tracking
mode (``Shadow``). Prometheus already holds history, so the loop decides from its first tick (no
warm-up). The fleet file's admission policy (``controller.admission``) runs too; its thresholds go to
``DryRun.document`` (served at ``GET /v1/admission`` with ``--serve-metrics``) and are shown as
``-``/null while none is set (the policies read the gateway's per-priority signals; a source without
them holds).

``tick_json`` is the machine interface (one JSON object per tick)::

    {"time": unix s, "loop_time_s": s,
     "services": {<service>: {
        "variants": {<variant>: {"current_replicas", "ready_replicas", "starting_replicas",
                                 "desired_replicas", "reason"[, "role"]}},
        "signals": {<signal>: value or null}, "decision": {"hold", "reason", "terms", "plan", "remove_first"},
        "admission_thresholds": {<priority>: s or null (no limit)} or null, "query_set": <name>,
        "errors": [...], "warnings": [...]}}}

A prefill/decode pool's variant (``Service.roles``) is a variant there too, with ``"role"``
(``prefill`` / ``decode``), under a controller that scales the pools (``Controller.scales_roles``);
the table names it ``<variant> (<role>)``. Under the others the pools are not shown (nothing decides them).

``query_set`` is the query set the service's signals were read with this tick (``autoscaler.promql``):
the configured one, or with ``auto`` the one detected from its pods' series (the table's signals
title names it too).

``errors`` lists failed queries (empty when all worked); on any, the loop holds. A variant whose
replica count is unknown (every query that tells it failed, none known before) has null counts
(``?`` in the table), and the loop holds. A tick on which no variant of any service matched a
series (``unmatched``: the selectors name nothing in this Prometheus) makes ``dry-run --once`` exit 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.config import FleetConfig
from autoscaler.loop.admission import PATH, AdmissionDocument
from autoscaler.loop.export import PLAN_STEPS, LoopMetrics, MetricsServer, serve
from autoscaler.loop.forecast import FORECAST_SIGNALS
from autoscaler.loop.runner import ServiceTick, TickRecord
from autoscaler.loop.ticker import run_every
from autoscaler.loop.warmth import WARMTH_SIGNALS
from autoscaler.wiring import admission_policy, build_loop
from controllers.base import Controller, Decision

if TYPE_CHECKING:
    from collections.abc import Mapping

    from autoscaler.config import Service
    from autoscaler.state import ServiceEstimate, VariantObservation

TABLE_SIGNALS = ("request_rate_rps", "ttft_p95_s", "tpot_p95_s", "itl_p95_s", "slo_p95_ratio", "slo_mean_ratio",
                 "kv_usage", "queue_length", "running", "prefix_hit_rate", "success_rps", "abort_rps")


class Shadow(Controller):
    """A controller in tracking mode, for a loop whose decisions nobody applies.

    Someone else sets the replicas (a person, an HPA, or nobody), so before each decision the
    controller is told the difference between what it asked for last time and what the fleet has
    now, through the same hook the guard uses for its own cuts (``on_guard_cut``; PID:
    ``controllers.pid.track``): to the controller, whoever set the fleet is one more guard. Its
    state (the PID integral) then follows the real fleet, as in a bumpless transfer, instead of
    winding up against decisions that were never applied.
    """

    def __init__(self, inner: Controller) -> None:
        super().__init__(inner.name, inner.tick_s, inner.window_s, inner.own_guard, inner.forecast_horizon_s,
                         inner.forecast_model, inner.forecast_demand, inner.forecast_smooth_s)
        self.scales_roles = inner.scales_roles  # the loop reads it to show the controller the pools
        self.inner = inner
        self._asked: dict[str, dict[str, int]] = {}
        self._tracked: set[str] = set()  # services tracked by this tick's prepare

    def _track(self, est: ServiceEstimate) -> None:
        asked = self._asked.get(est.service)
        actual = _fleet(est)
        if asked is not None and asked != actual:
            self.inner.on_guard_cut(est.service, asked, actual, {**est.weights, **est.pool_weights})

    def prepare(self, estimates: Mapping[str, ServiceEstimate]) -> None:
        """Track every service's actual replicas, then let the inner controller plan them."""
        for est in estimates.values():
            self._track(est)
        self._tracked = set(estimates)
        self.inner.prepare(estimates)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """The inner decision, after tracking the fleet's actual replicas."""
        if svc.name not in self._tracked:
            self._track(est)
        self._tracked.discard(svc.name)
        decision = self.inner.decide(est, svc)
        self._asked[svc.name] = _fleet(est) if decision.hold else dict(decision.desired)
        return decision

    @property
    def plans_jointly(self) -> bool:
        """The inner controller's: whether this tick's ``prepare`` planned the services together."""
        return self.inner.plans_jointly

    def on_admission(self, enforced: bool) -> None:
        """Forward whether an admission policy runs: the inner controller plans on shedding only
        where one does (``controllers.mpc``, ``shed=1``), as it would in ``run``."""
        self.inner.on_admission(enforced)

    def on_guard_cut(self, service: str, intended: Mapping[str, int], applied: Mapping[str, int],
                     weights: Mapping[str, float]) -> None:
        """Forward the guard's cut; what was asked is then what the guard let through."""
        self.inner.on_guard_cut(service, intended, applied, weights)
        self._asked[service] = dict(applied)


def _fleet(est: ServiceEstimate) -> dict[str, int]:
    """variant -> ready + starting replicas, the prefill/decode pools' variants too (for a controller that
    scales them: the estimate carries them then)."""
    return {**est.current, **est.pool_current}


@dataclass
class DryRun:
    """The loop over ``source``, never actuating.

    Args:
        cfg: the fleet.
        source: a ``PrometheusSource``.
        controller: the policy (``controllers.registry.build(spec, cfg)``), run as a ``Shadow``.
        speed: simulated seconds per wall second of the source (1 for a real cluster); the loop's
            time is wall time since the start times ``speed``.

    Attributes:
        document: the admission thresholds the loop would publish (``autoscaler.loop.admission``).
    """

    cfg: FleetConfig
    source: PrometheusSource
    controller: Controller
    speed: float = 1.0
    t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.document = AdmissionDocument()
        self.loop = build_loop(self.cfg, "dry-run", self.source, Shadow(self.controller), sink=self.document,
                               policy=admission_policy(self.cfg, "dry-run"))
        self.metrics = LoopMetrics(self.loop)

    def tick(self) -> TickRecord:
        """One observe-decide cycle now."""
        started = time.perf_counter()
        record = self.loop.tick((time.monotonic() - self.t0) * self.speed)
        self.metrics.record(record, time.perf_counter() - started)
        return record

    def query_set(self, service: str) -> str:
        """The name of the query set ``service`` is read with now (``PrometheusSource.query_set``)."""
        svc = next(s for s in self.cfg.services if s.name == service)
        return self.source.query_set(svc).name

    def warnings(self, service: str, record: TickRecord) -> list[str]:
        """The tick's warnings for ``service``: pods ignored by the source, values rejected by estimate."""
        return [*self.source.warnings.get(service, []), *record.services[service].estimate.warnings]


@dataclass
class TickCount:
    """Ticks a dry-run has run (``done``) and those on which a query failed (``failed``)."""

    done: int = 0
    failed: int = 0


def run_ticks(run: DryRun, period_s: float, limit: int | None, show: Callable[[TickRecord, float], None],
              count: TickCount) -> None:
    """Tick ``run`` every ``period_s`` wall seconds (``loop.ticker.run_every``), ``limit`` times (None:
    until interrupted), handing each record and its wall time (unix s) to ``show``; ``count`` counts
    them as they run, so it holds the tally when ``KeyboardInterrupt`` propagates.

    Raises:
        ValueError: ``period_s`` not a finite number > 0, or ``limit`` below 1.
    """
    def tick() -> None:
        record = run.tick()
        wall = time.time()
        count.done += 1
        count.failed += any(st.estimate.errors for st in record.services.values())
        show(record, wall)

    run_every(period_s, tick, limit)


def serve_dry_run(run: DryRun, address: str) -> MetricsServer:
    """Serve ``run``'s ``autoscaler_*`` metrics and admission document (``GET /v1/admission``) at ``HOST:PORT``.

    Raises:
        ValueError: a bad address or one that cannot be bound, naming it.
    """
    try:
        return serve(run.metrics.registry, address, {PATH: run.document.json})
    except ValueError as exc:
        raise ValueError(f"--serve-metrics {address}: {exc}") from None
    except OSError as exc:
        raise ValueError(f"--serve-metrics {address}: {exc.strerror or exc}") from None


NO_SERIES = "no series match the selectors"
"""The source's warning for a variant none of whose selectors matched a series (``adapters.prometheus``)."""


def unmatched(run: DryRun, record: TickRecord) -> list[str]:
    """The tick's no-series warnings (each naming its variant's selectors) when every variant of every
    service has one, i.e. nothing in Prometheus matched; [] when anything matched."""
    found = [w for name in record.services for w in run.source.warnings.get(name, []) if NO_SERIES in w]
    variants = sum(len(st.estimate.variants) for st in record.services.values())
    return found if variants and len(found) >= variants else []


def _rows(st: ServiceTick) -> list[tuple[str, str | None, VariantObservation, int]]:
    """(variant, role or None, observation, desired replicas) of the aggregated variants, then of each
    prefill/decode pool's variants the estimate carries (a controller that scales them)."""
    rows: list[tuple[str, str | None, VariantObservation, int]] = [
        (v, None, obs, st.applied[v]) for v, obs in st.estimate.variants.items()]
    for role, pool in st.estimate.pools.items():
        rows += [(v, role, obs, st.pool_applied.get(v, obs.current)) for v, obs in pool.variants.items()]
    return rows


def tick_json(run: DryRun, record: TickRecord, wall_s: float) -> dict[str, Any]:
    """The documented JSON object of one tick (module docstring)."""
    services: dict[str, Any] = {}
    for name, st in record.services.items():
        est = st.estimate
        variants: dict[str, Any] = {}
        for v, role, obs, desired in _rows(st):
            known = obs.counts_known  # unknown: null, never 0
            variants[v] = {"current_replicas": obs.current if known else None,
                           "ready_replicas": obs.ready if known else None,
                           "starting_replicas": obs.starting if known else None,
                           "desired_replicas": desired if known else None, "reason": st.reason}
            if role is not None:
                variants[v]["role"] = role
        services[name] = {
            "variants": variants,
            "signals": est.signals.flat(),
            "decision": {"hold": st.decision.hold, "reason": st.decision.reason, "terms": dict(st.decision.terms),
                         "plan": dict(st.decision.plan) or None,
                         "remove_first": dict(st.decision.remove_first) or None},
            "admission_thresholds": dict(st.decision.admission) or None,
            "query_set": run.query_set(name),
            "errors": list(est.errors),
            "warnings": run.warnings(name, record),
        }
    return {"time": wall_s, "loop_time_s": record.time_s, "services": services}


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def tick_tables(run: DryRun, record: TickRecord, wall_s: float) -> list[Table | str]:
    """Rich renderables for one tick: per service a replicas table, a signals table, errors and warnings."""
    out: list[Table | str] = []
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall_s))
    for name, st in record.services.items():
        est = st.estimate
        t = Table(title=f"{name} at {stamp} (dry-run: nothing is changed)", title_justify="left")
        plan = st.decision.plan
        cols = ("variant", "current (ready+starting)", "desired", "change", *(("plan",) if plan else ()), "admission",
                "reason")
        for col in cols:
            t.add_column(col, justify="right" if col in ("desired", "change") else "left")
        admission = ", ".join(f"{c} {'no limit' if s is None else format(s, 'g') + ' s'}"
                              for c, s in sorted(st.decision.admission.items())) or "-"
        for v, role, obs, desired in _rows(st):
            planned = ("/".join(str(n) for n in plan.get(v, [])[:PLAN_STEPS]),) if plan else ()
            label = v if role is None else f"{v} ({role})"
            if not obs.counts_known:  # unknown: "?", never 0
                t.add_row(label, "? (?+?)", "?", "?", *planned, admission, escape(st.reason))
                continue
            delta = desired - obs.current
            t.add_row(label, f"{obs.current} ({obs.ready}+{obs.starting})", str(desired),
                      f"{delta:+d}" if delta else "0", *planned, admission, escape(st.reason))
        out.append(t)
        s = Table(show_header=True, title=f"{name}: observed signals (query set {run.query_set(name)})",
                  title_justify="left")
        s.add_column("signal")
        for col in ("service", *est.variants):
            s.add_column(col, justify="right")
        for sig in TABLE_SIGNALS:
            s.add_row(sig, _fmt(est.signals.value(sig)), *(_fmt(v.signals.value(sig)) for v in est.variants.values()))
        flat = est.signals.flat()
        for sig in (*FORECAST_SIGNALS, *WARMTH_SIGNALS):  # service-wide, present when the forecast stages run
            if sig in flat:
                s.add_row(sig, _fmt(flat[sig]), *("-" for _ in est.variants))
        out.append(s)
        out += [f"[red]error:[/] {escape(e)}" for e in est.errors]
        out += [f"[yellow]warning:[/] {escape(w)}" for w in run.warnings(name, record)]
    return out
