"""The controller's own metrics (prefix ``autoscaler_``) and the HTTP server that exposes a registry.

``LoopMetrics`` is a ``prometheus_client`` collector in its own ``CollectorRegistry``; call
``record(tick, duration_s)`` after each ``ControlLoop.tick``. Families (labels in braces):

- ``autoscaler_current_replicas``, ``autoscaler_ready_replicas``, ``autoscaler_desired_replicas``
  {service, variant}: ready + starting, ready, and the guarded decision of the last tick (absent
  while the variant's replica count is unknown);
- ``autoscaler_pool_current_replicas``, ``autoscaler_pool_ready_replicas``,
  ``autoscaler_pool_desired_replicas`` {service, variant, llm_d_ai_role}: the same for each variant of
  a service's prefill or decode pool (``Service.roles``; the role label as llm-d's pods carry it in
  Prometheus, ``autoscaler.promql.ROLE_LABEL``); desired is what the loop applied to a pool, or its
  count where the controller does not scale pools (it holds them); absent for a fleet without roles;
- the gauges the decision names itself (``controllers.base.Gauge``) {service, and the gauge's
  labels}: a setpoint controller's ``autoscaler_setpoint`` and ``autoscaler_measured`` {signal: what
  it controls} (absent while the measurement is unknown), a planning controller's
  ``autoscaler_mpc_demand_rps`` and ``autoscaler_mpc_solve_seconds``; the exporter knows no controller;
- ``autoscaler_controller_term`` {service, controller, term}: the other numbers the controller
  returned (PID: ``error``, ``p``, ``i``, ``d``, ``target_capacity_rps``);
- ``autoscaler_signal`` {service, signal}: every known observed and derived signal; unknown ones
  are absent, never 0;
- ``autoscaler_admission_threshold`` {service, priority}: the decision's admission thresholds
  (longest estimated queue wait, seconds; +Inf for no limit), absent when none is set;
- ``autoscaler_admission_shed_total`` {service, priority}: attempts the gateway shed (HTTP 429), from the
  gateway's own count where the loop runs one (the simulator), absent otherwise;
- ``autoscaler_idle_ticks`` {service}: consecutive idle ticks;
- ``autoscaler_decisions_total`` {service, reason}: ``scale_up``, ``scale_down``, ``no_change``
  (what was applied), or the named reason of a decision that could not be made
  (``controllers.base.Reason``: ``signal_unknown``, ``warming_up``, ``metrics_error``,
  ``counts_unknown``), ``idle_to_min``, ``scale_from_zero``; every reason present from the start at 0;
- ``autoscaler_guard_limits_total`` {service, limit}: the guard's cuts (``scale_up_limit``,
  ``scale_down_limit``, ``cooldown``, ``too_many_replicas``, ``too_few_replicas``);
- ``autoscaler_metric_query_failures_total`` {service}: failed metric queries;
- ``autoscaler_actuation_errors_total`` {service, target, result}: writes that failed (``target`` is a
  variant: its replica count, a pool's variant's too; ``admission``: its thresholds; or, with a drainer,
  ``uncordon``: putting back in routing the drained pods whose removal was not written, ``loop.drain.restore``,
  where it raised (an uncordon the drain itself makes, for a decision that no longer removes its pods,
  fails the service's decision instead); ``result`` ``conflict``, ``not_leader``, ``forbidden``,
  ``unreachable``, ``invalid``: ``autoscaler.loop.actuate``, or ``error``: the call raised),
  every combination present from the start at 0, so ``rate()`` and alerts see a series before the
  first failure;
- ``autoscaler_able_to_scale`` {service, variant}: 1 when the variant's last write was applied (or
  none was needed), 0 when it failed, as the HPA's ``AbleToScale`` condition (a write not made because
  this daemon may no longer lead, ``not_leader``, leaves it as it was);
- ``autoscaler_replica_price_usd_per_hour`` {service, variant}: a replica's price from the fleet file
  (its GPUs x ``price_per_gpu_hour``), so dashboards can turn replicas into cost;
- ``autoscaler_loop_duration_seconds``: histogram of tick wall time, prometheus_client's default
  buckets (``Histogram.DEFAULT_BUCKETS``);
- ``autoscaler_forecast_rate_rps`` {service, bound=point|lower|upper} and
  ``autoscaler_forecast_tokens`` {service, kind=input|output}: the forecast stage's outputs
  (``controller.forecast.enabled``), ``horizon_s`` ahead; absent while unknown or disabled;
- ``autoscaler_forecast_prefix_hit_rate`` {service}: the cache-warmth stage's fleet prefix-cache hit
  rate ``horizon_s`` ahead (fraction), absent while the model has not learned or is disabled;
- ``autoscaler_mpc_planned_replicas`` {service, variant, step=1..3}: a planning controller's plan
  (``Decision.plan``) for the next three ticks; absent for other controllers.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from autoscaler.loop.actuate import ActuationStatus
from autoscaler.loop.runner import UNCORDON, ControlLoop, ServiceTick, TickRecord
from autoscaler.promql import ROLE_LABEL
from autoscaler.state import WARMTH_NAME
from controllers.base import HOLD_REASONS, Reason, change_reason

ACTUATION_ERRORS_HELP = ("Writes that failed, by target: a variant's replicas (the variant), the admission thresholds "
                         "(admission), putting back in routing drained pods whose removal was not written "
                         "(uncordon); result error: the call raised.")
"""HELP of ``autoscaler_actuation_errors_total``: what ``ControlLoop`` counts in ``actuation_errors``."""

PLAN_STEPS = 3
"""Steps of a controller's plan exported per variant (the MPC's next three ticks)."""

BUCKETS: tuple[float, ...] = tuple(b for b in Histogram.DEFAULT_BUCKETS if b != float("inf"))


# Forecast-stage signals (autoscaler.loop.forecast) exported as their own families.
FORECAST_RATE_BOUNDS = {"forecast_rate_rps": "point", "forecast_rate_lower_rps": "lower",
                        "forecast_rate_upper_rps": "upper"}
FORECAST_TOKEN_KINDS = {"forecast_input_tokens": "input", "forecast_output_tokens": "output"}


DECISION_KINDS = (Reason.SCALE_UP.value, Reason.SCALE_DOWN.value, Reason.NO_CHANGE.value,
                  *sorted(r.value for r in HOLD_REASONS), Reason.IDLE_TO_MIN.value, Reason.SCALE_FROM_ZERO.value)
"""Every ``reason`` label ``decision_kind`` gives; each service's counters start at 0 for all of them."""


def decision_kind(st: ServiceTick) -> str:
    """The ``reason`` label of one service's decision (see the module docstring)."""
    code = st.decision.code
    if st.decision.hold or code in (Reason.IDLE_TO_MIN, Reason.SCALE_FROM_ZERO):
        return code.value
    return change_reason(st.applied, st.estimate.current).value


class LoopMetrics(Collector):
    """``autoscaler_*`` metrics of one ``ControlLoop`` (see the module docstring).

    Args:
        loop: the loop whose ticks are recorded.
        registry: where to register (a new registry by default).
        shed: returns (service, priority) -> attempts the gateway shed, where the loop runs the gateway.

    Attributes:
        registry: the registry this collector is registered in (serve it with ``serve``).
    """

    def __init__(self, loop: ControlLoop, registry: CollectorRegistry | None = None,
                 shed: Callable[[], Mapping[tuple[str, str], int]] | None = None) -> None:
        self.loop = loop
        self.shed = shed
        self.registry = registry if registry is not None else CollectorRegistry()
        self._lock = threading.Lock()
        self._last: TickRecord | None = None
        self._idle: dict[str, int] = {}
        self._decisions: dict[tuple[str, str], int] = {}
        self._limits: dict[tuple[str, str], int] = {}
        self._able: dict[tuple[str, str], bool] = {}
        self._buckets = [0] * (len(BUCKETS) + 1)
        self._duration_sum = 0.0
        self.registry.register(self)

    def record(self, tick: TickRecord, duration_s: float) -> None:
        """Account for one tick that took ``duration_s`` wall seconds."""
        with self._lock:
            self._last = tick
            for name, st in tick.services.items():
                self._idle[name] = self.loop.guards[name].idle_ticks
                key = (name, decision_kind(st))
                self._decisions[key] = self._decisions.get(key, 0) + 1
                for limit in st.limits:
                    self._limits[(name, limit.value)] = self._limits.get((name, limit.value), 0) + 1
                for v, res in st.actuation.items():
                    if res.status is not ActuationStatus.NOT_LEADER:  # says nothing of the workload's scaling
                        self._able[(name, v)] = res.ok
            for name, results in tick.written.items():  # written before its writes raised: as any tick's
                for v, res in results.items():
                    if res.status is not ActuationStatus.NOT_LEADER:
                        self._able[(name, v)] = res.ok
            for name, variants in tick.unwritten.items():  # its writes raised: not scaled as asked
                for v in variants:
                    self._able[(name, v)] = False
            self._buckets[bisect_left(BUCKETS, duration_s)] += 1
            self._duration_sum += duration_s

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: label sets depend on the ticks recorded."""
        return []

    def collect(self) -> Iterable[Metric]:
        """The families of the module docstring."""
        with self._lock:
            return list(self._families())

    def _families(self) -> Iterable[Metric]:
        ticked = [] if self._last is None else list(self._last.services.items())
        return [*self._replica_families(ticked), *self._decision_families(ticked), *self._signal_families(ticked),
                *self._counter_families(), *self._variant_families(), self._duration_family()]

    @staticmethod
    def _replica_families(ticked: list[tuple[str, ServiceTick]]) -> list[Metric]:
        sv = ("service", "variant")
        current = GaugeMetricFamily("autoscaler_current_replicas", "Replicas ready or starting, per variant.",
                                    labels=sv)
        ready = GaugeMetricFamily("autoscaler_ready_replicas", "Replicas ready, per variant.", labels=sv)
        desired = GaugeMetricFamily("autoscaler_desired_replicas", "Replicas decided (after the guard), per variant.",
                                    labels=sv)
        svr = ("service", "variant", ROLE_LABEL)
        pool_current = GaugeMetricFamily("autoscaler_pool_current_replicas",
                                         "Replicas ready or starting, per prefill/decode pool variant.", labels=svr)
        pool_ready = GaugeMetricFamily("autoscaler_pool_ready_replicas", "Replicas ready, per prefill/decode pool "
                                       "variant.", labels=svr)
        pool_desired = GaugeMetricFamily("autoscaler_pool_desired_replicas", "Replicas decided (after the guard), "
                                         "per prefill/decode pool variant.", labels=svr)
        for name, st in ticked:
            for v, obs in st.estimate.variants.items():
                if not obs.counts_known:  # unknown: no sample rather than a false 0
                    continue
                current.add_metric([name, v], obs.current)
                ready.add_metric([name, v], obs.ready)
                desired.add_metric([name, v], st.applied[v])
            for role, pool in st.estimate.pools.items():
                for v, obs in pool.variants.items():
                    if not obs.counts_known:
                        continue
                    pool_current.add_metric([name, v, role], obs.current)
                    pool_ready.add_metric([name, v, role], obs.ready)
                    pool_desired.add_metric([name, v, role], st.pool_applied.get(v, obs.current))
        return [current, ready, desired, pool_current, pool_ready, pool_desired]

    def _decision_families(self, ticked: list[tuple[str, ServiceTick]]) -> list[Metric]:
        """The decision's terms, admission thresholds, plan, and the gauges the controller names itself."""
        terms = GaugeMetricFamily("autoscaler_controller_term", "Controller terms (PID error, p, i, d, target).",
                                  labels=("service", "controller", "term"))
        admission = GaugeMetricFamily("autoscaler_admission_threshold",
                                      "Admission threshold per priority: longest estimated queue wait, seconds.",
                                      labels=("service", "priority"))
        plan = GaugeMetricFamily("autoscaler_mpc_planned_replicas",
                                 f"Replicas the plan holds for each of the next {PLAN_STEPS} ticks.",
                                 labels=("service", "variant", "step"))
        own: dict[str, GaugeMetricFamily] = {}
        controller = self.loop.controller.name
        for name, st in ticked:
            d = st.decision
            for v, steps in d.plan.items():
                for k, n in enumerate(steps[:PLAN_STEPS], start=1):
                    plan.add_metric([name, v, str(k)], n)
            for priority, wait in sorted(d.admission.items()):
                admission.add_metric([name, priority], math.inf if wait is None else wait)
            for g in d.gauges:
                family = own.get(g.name)
                if family is None:
                    labels = ("service", *(k for k, _ in g.labels))
                    family = own[g.name] = GaugeMetricFamily(g.name, g.help, labels=labels)
                family.add_metric([name, *(x for _, x in g.labels)], g.value)
            mirrored = {g.term for g in d.gauges}
            for term, x in d.terms.items():
                if term not in mirrored:
                    terms.add_metric([name, controller, term], x)
        return [*own.values(), terms, admission, plan]

    def _signal_families(self, ticked: list[tuple[str, ServiceTick]]) -> list[Metric]:
        """Every known signal; the forecast stages' outputs in their own families."""
        signals = GaugeMetricFamily("autoscaler_signal", "Observed and derived signals; unknown ones are absent.",
                                    labels=("service", "signal"))
        fc = self.loop.cfg.controller.forecast
        horizon = f"{fc.horizon_s:g} s ahead"
        f_rate = GaugeMetricFamily("autoscaler_forecast_rate_rps",
                                   f"Forecast request rate {horizon}, requests/s: point and 90% interval bounds.",
                                   labels=("service", "bound"))
        f_tokens = GaugeMetricFamily("autoscaler_forecast_tokens",
                                     f"Forecast mean tokens per request {horizon}.", labels=("service", "kind"))
        f_hits = GaugeMetricFamily("autoscaler_forecast_prefix_hit_rate",
                                   f"Forecast prefix-cache hit rate of the fleet {horizon}, fraction.",
                                   labels=("service",))
        for name, st in ticked:
            for sig, x in st.estimate.signals.flat().items():
                if x is None:
                    continue
                if sig in FORECAST_RATE_BOUNDS:
                    f_rate.add_metric([name, FORECAST_RATE_BOUNDS[sig]], x)
                elif sig in FORECAST_TOKEN_KINDS:
                    f_tokens.add_metric([name, FORECAST_TOKEN_KINDS[sig]], x)
                elif sig == WARMTH_NAME:
                    f_hits.add_metric([name], x)
                else:
                    signals.add_metric([name, sig], x)
        return [signals, f_rate, f_tokens, f_hits]

    def _counter_families(self) -> list[Metric]:
        """Shed attempts, idle ticks, decisions by reason, query failures, the guard's cuts, failed writes."""
        shed = CounterMetricFamily("autoscaler_admission_shed", "Attempts the gateway shed (HTTP 429), per priority.",
                                   labels=("service", "priority"))
        idle = GaugeMetricFamily("autoscaler_idle_ticks", "Consecutive idle ticks.", labels=("service",))
        decisions = CounterMetricFamily("autoscaler_decisions", "Decisions by reason.", labels=("service", "reason"))
        failures = CounterMetricFamily("autoscaler_metric_query_failures", "Metric queries that failed.",
                                       labels=("service",))
        limits = CounterMetricFamily("autoscaler_guard_limits", "Cuts the guard made to decisions, by rule.",
                                     labels=("service", "limit"))
        act_errors = CounterMetricFamily("autoscaler_actuation_errors", ACTUATION_ERRORS_HELP,
                                         labels=("service", "target", "result"))
        for (name, priority), n in sorted((self.shed() if self.shed is not None else {}).items()):
            shed.add_metric([name, priority], n)
        for name, n in self._idle.items():
            idle.add_metric([name], n)
        for svc in self.loop.cfg.services:
            for reason in DECISION_KINDS:
                decisions.add_metric([svc.name, reason], self._decisions.get((svc.name, reason), 0))
        for name, n in self.loop.query_failures.items():
            failures.add_metric([name], n)
        for (name, limit), n in sorted(self._limits.items()):
            limits.add_metric([name, limit], n)
        errors = self.loop.actuation_errors
        failed = [st for st in ActuationStatus if st != ActuationStatus.APPLIED]
        drained = (UNCORDON,) if self.loop.drainer is not None else ()  # putting drained pods back in routing
        for svc in self.loop.cfg.services:
            pools = (v.name for _, v in svc.role_variants())  # a pool's variant's writes are counted too
            for target in (*(v.name for v in svc.variants), *pools, "admission", *drained):
                for status in failed:
                    act_errors.add_metric([svc.name, target, status.value], errors.get((svc.name, target, status), 0))
        return [shed, idle, decisions, failures, limits, act_errors]

    def _variant_families(self) -> list[Metric]:
        """Whether each variant's last write was applied, and a replica's price."""
        sv = ("service", "variant")
        able = GaugeMetricFamily("autoscaler_able_to_scale", "1 when the variant's last write was applied, else 0.",
                                 labels=sv)
        price = GaugeMetricFamily("autoscaler_replica_price_usd_per_hour", "Price of one replica, USD per hour.",
                                  labels=sv)
        for svc in self.loop.cfg.services:
            for v in svc.variants:
                able.add_metric([svc.name, v.name], float(self._able.get((svc.name, v.name), True)))
                price.add_metric([svc.name, v.name], v.price_per_replica_hour)
        return [able, price]

    def _duration_family(self) -> Metric:
        duration = HistogramMetricFamily("autoscaler_loop_duration_seconds", "Wall time of one loop tick.")
        cum, acc = [], 0
        for b, n in zip((*BUCKETS, float("inf")), self._buckets, strict=True):
            acc += n
            cum.append((floatToGoString(b), acc))
        duration.add_metric([], cum, self._duration_sum)
        return duration


IDLE_TIMEOUT_S = 10.0
"""A connection that sends nothing for this long is closed (a scrape or probe sends at once)."""
MAX_CONNECTIONS = 32
"""Connections served at once; one more is closed at once rather than given a thread."""


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log."""


class _BoundedServer(ThreadingWSGIServer):
    """prometheus_client's threading WSGI server with at most ``slots`` connections at a time, each
    closed after ``timeout`` s of silence (``StreamRequestHandler.timeout``)."""

    slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection when a slot is free; else close it."""
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve the connection, then free its slot."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port).

    Raises:
        ValueError: not ``HOST:PORT`` with a port in 0..65535.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"'{address}' is not HOST:PORT")
    return host.strip("[]"), int(port)


def _plain(start_response: Callable[..., Any], code: int, data: bytes,
           headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(f"{code} {HTTPStatus(code).phrase}", [("Content-Type", "text/plain; charset=utf-8"),
                                                          ("Content-Length", str(len(data))), *(headers or [])])
    return [data]


@dataclass
class MetricsServer:
    """A running HTTP server for one registry; ``close()`` stops it."""

    httpd: ThreadingWSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        """Stop serving and release the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve(registry: CollectorRegistry | None, address: str,
          routes: Mapping[str, Callable[[], bytes | tuple[int, bytes]]] | None = None,
          idle_timeout_s: float = IDLE_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS) -> MetricsServer:
    """Serve ``registry`` at ``http://HOST:PORT/metrics`` (None: no ``/metrics``, a port of ``routes``
    alone) in a background thread; ``routes`` maps a
    path (``/v1/admission``, ``/healthz``) to what returns its body (JSON, or text), with its HTTP
    status when not 200 (``(503, b"not ready")``). Any other path is 404 (a probe with a typo fails),
    any method but GET and HEAD 405; a connection silent for ``idle_timeout_s`` is closed, and at most
    ``max_connections`` are served at once.

    Metrics always in the text format 0.0.4, as vLLM serves (METRICS.md): prometheus_client 0.26's
    OpenMetrics writer, which Prometheus asks for first, rewrites the colon of ``vllm:`` names to ``_``.

    Raises:
        ValueError: bad address.
        OSError: the address cannot be bound.
    """
    host, port = parse_address(address)
    inner: Callable[..., Any] | None = None if registry is None else make_wsgi_app(registry)
    extra = dict(routes or {})
    paths = ([] if inner is None else ["/metrics"]) + list(extra)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("REQUEST_METHOD") == "HEAD":  # a GET's status and headers, without the body
            body = get(dict(environ, REQUEST_METHOD="GET"), start_response)
            if hasattr(body, "close"):
                body.close()
            return []
        return get(environ, start_response)

    def get(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if path not in extra and (path != "/metrics" or inner is None):
            return _plain(start_response, 404, f"no such path: {path} ({', '.join(paths)})".encode())
        if environ.get("REQUEST_METHOD", "GET") != "GET":
            return _plain(start_response, 405, b"only GET and HEAD", [("Allow", "GET, HEAD")])
        body = extra.get(path)
        if body is not None:
            answer = body()
            code, data = answer if isinstance(answer, tuple) else (200, answer)
            kind = "application/json" if data.startswith((b"{", b"[")) else "text/plain; charset=utf-8"
            start_response(f"{code} {HTTPStatus(code).phrase}", [("Content-Type", kind),
                                                                  ("Content-Length", str(len(data)))])
            return [data]
        assert inner is not None
        environ["HTTP_ACCEPT"] = "text/plain; version=0.0.4"
        return inner(environ, start_response)

    handler = type("_Handler", (_Quiet,), {"timeout": idle_timeout_s})
    httpd = make_server(host, port, app, _BoundedServer, handler_class=handler)
    httpd.slots = threading.BoundedSemaphore(max_connections)
    thread = threading.Thread(target=httpd.serve_forever, name=f"metrics-{port}", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)
