"""The simulator behind the loop's interfaces: a ``MetricsSource`` and an ``Actuator``.

``SimMetricsSource`` shows the controller what a Prometheus scraping every pod would: ``scrape``
takes one sample of every serving pod's counters, histograms and gauges (and of the gateway's
arrivals counter), at the scrape interval; ``observe`` evaluates each signal as the PromQL of
``autoscaler.promql`` would on those samples (replica counts are read at the tick, as
kube-state-metrics reports a Deployment's status as it changes):

- ``rate()`` of a counter over ``(now - window, now]`` is Prometheus's ``extrapolatedRate``
  (Prometheus 2.x ``promql/functions.go``): the increase between the first and last sample in the
  window, extrapolated toward the window's edges by at most half a sample interval (or to where the
  counter would reach zero), over the window; a series with fewer than two samples in the window
  has no rate. A new pod's series starts at its first scrape, so what it served before that first
  sample is not counted, as in Prometheus.
- ``histogram_quantile`` of ``sum by (le) (rate(..._bucket))`` and means ``rate(_sum) / rate(_count)``;
  gauges at their latest sample, ``max_over_time`` over the window's samples.
- Only pods that serve now (ready or draining) and have been scraped are in scope, as the
  Prometheus source keeps only pods with fresh samples; a removed pod's series goes stale at once.
- The gateway's binned counters (the ``models.arrivals.BIN_S`` bins completed, the arrivals in them
  and the sum of each one's arrivals squared) give ``arrival_dispersion``, the index of dispersion
  of its binned arrival counts over the window (``models.arrivals.dispersion_from_rates``).
- The gateway's counters per priority (attempts received; under flow control, attempts dispatched,
  the seconds they waited, and attempts shed) give ``arrival_rate_rps.<priority>``,
  ``gateway_wait_s.<priority>`` (mean wait of the dispatched, ``rate(wait) / rate(dispatched)``) and
  ``gateway_shed_rps.<priority>`` (HTTP 429s per second, deferred ones shed at their deadline
  included) and ``gateway_dispatched_rps.<priority>`` over the last ``GATEWAY_WINDOW_S`` (or the
  window, if shorter), and its gauge ``gateway_queue.<priority>`` (requests queued) at the latest
  scrape: what an EPP's flow-control series give the Prometheus source (``autoscaler.promql``), no
  more; the flow-control signals are absent (unknown) without flow control. Under flow
  control the service's ``queue_length`` counts the gateway's queue and ``ttft_mean_s`` adds the mean
  gateway wait of the requests dispatched over the window: the TTFT users see includes it, and a
  controller reading vLLM's TTFT alone would see a calm fleet while requests wait at the gateway.

Prefill/decode pools (``Service.roles``): each pool is reported apart (``ServiceObservation.pools``): its
variants' counts and signals, and the signals over all its pods (a Prometheus selecting
``llm_d_ai_role="prefill"`` or ``"decode"``). The service-wide signals (``ServiceObservation.signals``)
are read over the pods that finish the users' requests, the aggregated and decode pods
(``llm_d_ai_role!="prefill"``), so each request counts once: a remotely prefilled request runs on its
prefill pod as a request of its own (``simulator.disagg``: vLLM's ``NixlConnector`` prefill is a
``max_tokens=1`` request that ends ``length``, and vLLM's ``vllm/v1/metrics/loggers.py``
``PrometheusStatLogger.record``, read at the 0.11 cycle (it marks ``vllm:time_per_output_token_seconds``
deprecated in 0.11), counts each finished request in ``vllm:request_success`` by finish reason and in
the e2e and token histograms, and each prefill's prompt tokens and TTFT), so over every pod the
request rate, completions, token rates and latencies would count it twice. The gauges (running,
waiting, KV usage) keep every pod: a request is in flight on one pod at a time (the decode pod receives
it once its prefill request has ended), and the prefill pods' queue is the service's backlog too.
``ServiceObservation.pods`` keeps every ready pod (a pool's pods are drained by name); a controller
counting its aggregated variants' pods takes ``controllers.base.aggregated_pods``.

Faults: a pod for which ``silent(replica, now)`` is true is not scraped (its target is down, or it
emits nothing yet), so its series goes stale as a removed pod's does. A variant whose replicas have
stayed Pending (``simulator.unschedulable``) for ``kubernetes.pending_timeout_s`` is marked
``unavailable`` by the daemon's rule (``autoscaler.loop.observe.PendingMarks``); every variant's
observation, a pool's too, carries how long its longest-Pending replica has waited
(``VariantObservation.unschedulable_s``, from the replica's creation; 0.0 when none waits).

``SimAdmissionSink`` hands a decision's admission thresholds to each service's gateway.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from autoscaler.loop.actuate import APPLIED, ActuationResult, ActuationStatus
from autoscaler.loop.admission import check_itl_budget
from autoscaler.loop.observe import PendingMarks
from autoscaler.promql import GATEWAY_WINDOW_S
from autoscaler.simulator.disagg import PREFILL
from autoscaler.simulator.engine import DRAINING, PROVISIONING, READY, Replica
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.metrics import ITL_BUCKETS, TTFT_BUCKETS, ReplicaMetrics, histogram_quantile
from autoscaler.state import (
    PodObservation,
    PoolObservation,
    PrioritySignals,
    ServiceObservation,
    Signals,
    VariantObservation,
)
from autoscaler.workload.types import PRIORITIES
from models.arrivals import dispersion_from_rates

# Counter layout of one sample: scalar counters, then the cumulative buckets of each histogram.
_SCALARS = ("prompt_tokens", "generation_tokens", "prefix_queries", "prefix_hits", "preemptions", "success",
            "aborts", "ttft_sum", "ttft_count", "tpot_sum", "tpot_count", "e2e_count", "request_prompt_sum",
            "request_generation_sum")
_HISTS = {"ttft": len(TTFT_BUCKETS) + 1, "itl": len(ITL_BUCKETS) + 1, "tpot": len(ITL_BUCKETS) + 1}
_INDEX = {k: i for i, k in enumerate(_SCALARS)}
_SLICES: dict[str, slice] = {}
_at = len(_SCALARS)
for _name, _n in _HISTS.items():
    _SLICES[_name] = slice(_at, _at + _n)
    _at += _n
(_PROMPT_TOKENS, _GENERATION_TOKENS, _PREFIX_QUERIES, _PREFIX_HITS, _PREEMPTIONS, _SUCCESS, _ABORTS, _TTFT_SUM,
 _TTFT_COUNT, _TPOT_SUM, _TPOT_COUNT, _E2E_COUNT, _REQUEST_PROMPT_SUM, _REQUEST_GENERATION_SUM) = range(len(_SCALARS))


def _deltas(rates: list[float], cumulative: slice) -> list[float]:
    """Per-bucket values of the cumulative buckets ``rates[cumulative]``: each minus the one before
    (the first minus 0.0), as ``np.diff(..., prepend=0.0)`` computes them."""
    cum = rates[cumulative]
    return [b - a for a, b in zip([0.0, *cum[:-1]], cum, strict=True)]


def _counters(m: ReplicaMetrics) -> np.ndarray:
    """One sample of every counter of a replica (the layout above; histogram buckets cumulative)."""
    served = sum(m.success.values())
    aborts = m.success["abort"] + m.success["error"]
    scalars = [m.prompt_tokens, m.generation_tokens, m.prefix_queries, m.prefix_hits, m.preemptions,
               served - aborts, aborts, m.ttft.total, m.ttft.count, m.tpot.total, m.tpot.count, m.e2e.count,
               m.request_prompt_tokens.total, m.request_generation_tokens.total]
    return np.concatenate([np.array(scalars, dtype=float), m.ttft.cumulative(), m.itl.cumulative(),
                           m.tpot.cumulative()])


def extrapolated_rate(times: np.ndarray, values: np.ndarray, start: float, end: float) -> np.ndarray | None:
    """Prometheus 2.x ``rate()`` of counter samples over the range ``[start, end]``, per second.

    Args:
        times: sample times, seconds, increasing, shape (n,), all inside the range.
        values: counter values, shape (n,) or (n, k) for k series sampled together.

    Returns:
        the rate of each series, or None with fewer than two samples (no rate, as in Prometheus).
    """
    n = len(times)
    if n < 2:
        return None
    first = values[0]
    result = values[-1] - first  # the simulator's counters never reset
    t0, t1 = float(times[0]), float(times[-1])
    sampled = t1 - t0
    average = sampled / (n - 1)
    threshold = average * 1.1
    to_start, to_end = t0 - start, end - t1
    tail = to_end if to_end < threshold else average / 2
    positive = result > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        to_zero = sampled * first / np.where(positive, result, 1.0)  # where used: the series' own
    closer = positive & (first >= 0) & (to_zero < to_start)  # extrapolated to where it would be 0
    if closer.any():
        lead = np.where(closer, to_zero, to_start)
        interval = sampled + np.where(lead < threshold, lead, average / 2) + tail
        return result * (interval / sampled) / (end - start)
    # no series reaches 0 before the window's start: one interval for all (the same sums as per series)
    return result * ((sampled + (to_start if to_start < threshold else average / 2) + tail) / sampled) \
        / (end - start)


@dataclass
class _PodSeries:
    """The scraped samples of one pod: times, counter vectors, and (KV usage, waiting, running) gauges."""

    times: deque[float] = field(default_factory=deque)
    counters: deque[np.ndarray] = field(default_factory=deque)
    gauges: deque[tuple[float, ...]] = field(default_factory=deque)


def _unschedulable_s(replicas: list[Replica], variant: str, now: float) -> float:
    """Seconds (``now`` minus its creation) the longest-Pending replica of ``variant`` has waited for a node
    (``simulator.unschedulable``: provisioning, not placed yet at ``now``); 0.0 when none is waiting."""
    return max((now - r.created_s for r in replicas
                if r.variant == variant and r.state == PROVISIONING and r.scheduled_s > now), default=0.0)


class SimMetricsSource:
    """Signals of a ``FleetSimulator``'s services, as a Prometheus scraping every pod would report.

    Args:
        sim: the simulator.
        window_s: the look-back window of rates and ``max_over_time``, seconds.
        scrape_interval_s: how often pods are sampled, seconds; ``observe`` samples only when the
            last sample is at least this old (a driver scraping on its own grid keeps it from doing so).
        pending: the rule marking variants whose pods stay Pending unavailable (None: never marked).

    Attributes:
        silent: (replica, now) -> whether that pod's metrics are missing at ``now`` (a fault; never
            by default).
    """

    def __init__(self, sim: FleetSimulator, window_s: float, scrape_interval_s: float = 15.0,
                 pending: PendingMarks | None = None) -> None:
        self.sim = sim
        self.window_s = window_s
        self.scrape_interval_s = scrape_interval_s
        self._pods: dict[int, _PodSeries] = {}
        self._arrivals: dict[str, _PodSeries] = {name: _PodSeries() for name in sim.services}
        self._first_scrape: dict[str, float] = {}
        self._last_scrape: float | None = None
        self.pending = pending
        self.silent: Callable[[Replica, float], bool] = lambda r, now: False

    def scrape(self, now: float) -> None:
        """Take one sample of every serving pod and of each gateway at ``now`` (seconds); once per instant."""
        if self._last_scrape is not None and now <= self._last_scrape:
            return
        self._last_scrape = now
        keep = now - self.window_s
        serving: set[int] = set()
        for name, svc in self.sim.services.items():
            gw = self._arrivals[name]
            gw.times.append(now)
            flow = svc.flow
            n = len(PRIORITIES)
            flow_counters = [*flow.dispatched, *flow.wait_sum_s, *flow.shed] if flow is not None else [0.0] * (3 * n)
            gw.counters.append(np.array([float(svc.arrivals), *svc.arrivals_by_priority, *flow_counters,
                                         *map(float, svc.arrival_bins(now))], dtype=float))
            gw.gauges.append(tuple(float(x) for x in flow.queued) if flow is not None else ())
            _prune(gw, keep)
            for r in svc.replicas:
                if r.state not in (READY, DRAINING) or self.silent(r, now):
                    continue
                r.refresh_gauges()
                series = self._pods.setdefault(r.rid, _PodSeries())
                series.times.append(now)
                series.counters.append(_counters(r.metrics))
                series.gauges.append((r.metrics.kv_usage, float(r.metrics.waiting), float(r.metrics.running)))
                _prune(series, keep)
                serving.add(r.rid)
                self._first_scrape.setdefault(name, now)
        for rid in self._pods.keys() - serving:  # gone: its series is stale
            del self._pods[rid]

    def _pod_rates(self, rids: list[int], now: float) -> dict[int, np.ndarray | None]:
        """``rate()`` of every counter of each pod over the window (None: fewer than two samples)."""
        return {rid: extrapolated_rate(np.array(self._pods[rid].times), np.array(self._pods[rid].counters),
                                       now - self.window_s, now) for rid in rids}

    def _signals(self, replicas: list[Replica], pod_rates: dict[int, np.ndarray | None]) -> Signals:
        """The signals over ``replicas`` from their counters' rates (summed over the pods) and latest gauges.

        The rates are read as Python floats (``tolist``) and each histogram's per-bucket rates are their
        cumulative rates' differences taken one by one: the same IEEE subtractions as ``np.diff`` and the
        same sums in ``histogram_quantile``, without a NumPy call per bucket (issue 33: this was the
        largest share of a tick at 1x)."""
        if not replicas:
            return Signals()
        known = [pr for r in replicas if (pr := pod_rates[r.rid]) is not None]
        latest = [self._pods[r.rid].gauges[-1] for r in replicas]
        kv_usage = sum(g[0] for g in latest) / len(latest)
        queue_length = sum(g[1] for g in latest)
        running = sum(g[2] for g in latest)
        if not known:
            return Signals(kv_usage=kv_usage, queue_length=queue_length, running=running)
        # one pod: its own rates (a sum over one row is that row); more: summed row by row, as before
        rates: list[float] = (known[0] if len(known) == 1 else np.sum(known, axis=0)).tolist()
        ttft, itl, tpot = (_deltas(rates, _SLICES[h]) for h in ("ttft", "itl", "tpot"))
        queries = rates[_PREFIX_QUERIES]
        ttft_n, tpot_n = rates[_TTFT_COUNT], rates[_TPOT_COUNT]
        return Signals(
            request_rate_rps=rates[_E2E_COUNT],
            prompt_tokens_rps=rates[_PROMPT_TOKENS],
            generation_tokens_rps=rates[_GENERATION_TOKENS],
            request_prompt_tokens_rps=rates[_REQUEST_PROMPT_SUM],
            request_generation_tokens_rps=rates[_REQUEST_GENERATION_SUM],
            ttft_p50_s=histogram_quantile(0.5, TTFT_BUCKETS, ttft),
            ttft_p95_s=histogram_quantile(0.95, TTFT_BUCKETS, ttft),
            itl_p50_s=histogram_quantile(0.5, ITL_BUCKETS, itl),
            itl_p95_s=histogram_quantile(0.95, ITL_BUCKETS, itl),
            tpot_p95_s=histogram_quantile(0.95, ITL_BUCKETS, tpot),
            ttft_mean_s=rates[_TTFT_SUM] / ttft_n if ttft_n > 0 else None,
            tpot_mean_s=rates[_TPOT_SUM] / tpot_n if tpot_n > 0 else None,
            kv_usage=kv_usage,
            queue_length=queue_length,
            running=running,
            prefix_hit_rate=rates[_PREFIX_HITS] / queries if queries > 0 else None,
            success_rps=rates[_SUCCESS],
            abort_rps=rates[_ABORTS],
            preemptions_rps=rates[_PREEMPTIONS],
        )

    def _pod_observations(self, service: str, replicas: list[Replica]) -> list[PodObservation]:
        """Latest and window-max gauges and prefix-cache counters of the ``replicas`` (ready ones)."""
        out = []
        for r in replicas:
            s = self._pods[r.rid]
            kv, waiting, running = s.gauges[-1]
            counters = s.counters[-1]
            out.append(PodObservation(
                variant=r.variant, kv_usage=kv, waiting=waiting, running=running,
                kv_usage_max=max(g[0] for g in s.gauges), waiting_max=max(g[1] for g in s.gauges),
                name=pod_name(service, r.variant, r.rid),
                prefix_hits_total=float(counters[_INDEX["prefix_hits"]]),
                prefix_queries_total=float(counters[_INDEX["prefix_queries"]]),
                ready_s=r.ready_s,
            ))
        return out

    def observe(self, now: float, scrape: bool = True) -> dict[str, ServiceObservation]:
        """Signals of every service at ``now`` (seconds) from the window's samples (a scrape first when
        the last one is a scrape interval old or more, unless ``scrape`` is False: a Prometheus that
        is down takes none, ``autoscaler.faults.inject.FaultySource``)."""
        if scrape and (self._last_scrape is None or now - self._last_scrape >= self.scrape_interval_s - 1e-9):
            self.scrape(now)
        out: dict[str, ServiceObservation] = {}
        for name, svc in self.sim.services.items():
            scraped = [r for r in svc.replicas if r.state in (READY, DRAINING) and r.rid in self._pods]
            pod_rates = self._pod_rates([r.rid for r in scraped], now)
            memo: dict[tuple[int, ...], Signals] = {}

            def signals_of(replicas: list[Replica], pod_rates: dict[int, np.ndarray | None] = pod_rates,
                           memo: dict[tuple[int, ...], Signals] = memo) -> Signals:
                # _signals of the same pods in the same order is the same (frozen) Signals: computed once a
                # tick (one variant serving: its signals are the service's; issue 33, ~5 % of a tick at 1x)
                key = tuple([r.rid for r in replicas])
                sig = memo.get(key)
                if sig is None:
                    sig = memo[key] = self._signals(replicas, pod_rates)
                return sig
            variants = {}
            for vname in svc.variants:
                c = svc.counts(vname)
                mine = [r for r in scraped if r.variant == vname]
                stuck = _unschedulable_s(svc.replicas, vname, now)
                variants[vname] = VariantObservation(c.ready, c.starting, c.draining, signals_of(mine),
                                                     unavailable=self.pending is not None
                                                     and self.pending.mark_if_stuck((name, vname), stuck, now),
                                                     unschedulable_s=stuck)
            pools = {}
            for role, pool in (("prefill", svc.pd.prefill), ("decode", svc.pd.decode)) if svc.pd is not None else ():
                pool_variants = {}
                for v in pool:
                    c = svc.counts(v.name)
                    pool_variants[v.name] = VariantObservation(
                        c.ready, c.starting, c.draining,
                        signals_of([r for r in scraped if r.variant == v.name]),
                        unschedulable_s=_unschedulable_s(svc.replicas, v.name, now))
                pools[role] = PoolObservation(role, signals_of([r for r in scraped if r.role == role]),
                                              pool_variants)
            # rates and latencies over the pods that finish requests (a remote-prefilled request would
            # count twice), the gauges over every pod (an in-flight request is on one pod at a time)
            finishing = [r for r in scraped if r.role != PREFILL] if svc.pd is not None else scraped
            signals = signals_of(finishing)
            if finishing is not scraped:
                every = signals_of(scraped)
                signals = replace(signals, kv_usage=every.kv_usage, queue_length=every.queue_length,
                                  running=every.running)
            # the gateway's queue (requests held while no replica is ready) is part of the service's queue
            queue = (signals.queue_length or 0.0) + len(svc.gateway)
            # set with the gateway's signals below (one copy of the signals): no pod finishing requests, none
            # finished; no pod serving, nothing to measure, but nothing is in flight on a pod either
            request_rate = signals.request_rate_rps if finishing else 0.0
            running = signals.running if scraped else 0.0
            gw = self._arrivals[name]
            gw_times, gw_counters = np.array(gw.times), np.array(gw.counters)  # read twice: copied once
            arrivals = extrapolated_rate(gw_times, gw_counters, now - self.window_s, now)
            ttft_mean = signals.ttft_mean_s
            if svc.flow is not None:  # the user's TTFT includes the gateway's wait, and its queue is the service's
                queue = queue + svc.flow.waiting
                wait = None if arrivals is None else _mean_gateway_wait(arrivals)
                if wait is not None and ttft_mean is not None:
                    ttft_mean += wait
            signals = replace(signals, request_rate_rps=request_rate, running=running, queue_length=queue,
                              ttft_mean_s=ttft_mean,
                              arrival_rate_rps=None if arrivals is None else float(arrivals[0]),
                              arrival_dispersion=None if arrivals is None else dispersion_from_rates(
                                  float(arrivals[-3]), float(arrivals[-2]), float(arrivals[-1]), self.window_s),
                              by_priority=_gateway_signals(gw, gw_times, gw_counters, now,
                                                           min(self.window_s, GATEWAY_WINDOW_S), svc.flow is not None))
            first = self._first_scrape.get(name)
            ready = [r for r in scraped if r.state == READY]
            out[name] = ServiceObservation(name, now, signals, variants, pods=self._pod_observations(name, ready),
                                           history_s=None if first is None else now - first, pools=pools)
        return out


def _gateway_signals(gw: _PodSeries, times: np.ndarray, counters: np.ndarray, now: float, window_s: float,
                     flow: bool) -> dict[str, PrioritySignals]:
    """Per-priority gateway signals (module docstring) from the gateway's samples (``times``, shape (n,),
    and ``counters``, shape (n, k): ``gw``'s as arrays)."""
    n = len(PRIORITIES)
    recent = times > now - window_s
    rates = extrapolated_rate(times[recent], counters[recent], now - window_s, now) \
        if recent.any() else None
    latest = gw.gauges[-1] if gw.gauges else ()
    out: dict[str, PrioritySignals] = {}
    for i, p in enumerate(PRIORITIES):
        arrival = None if rates is None else float(rates[1 + i])
        if not flow:
            out[p] = PrioritySignals(arrival_rate_rps=arrival)
            continue
        dispatched = None if rates is None else float(rates[1 + n + i])
        waited = None if rates is None else float(rates[1 + 2 * n + i])
        out[p] = PrioritySignals(
            arrival_rate_rps=arrival,
            wait_s=waited / dispatched if dispatched and waited is not None else None,
            shed_rps=None if rates is None else float(rates[1 + 3 * n + i]),
            queue=latest[i] if latest else None,
            dispatched_rps=dispatched,
        )
    return out


def _mean_gateway_wait(rates: np.ndarray) -> float | None:
    """Mean gateway wait of the requests dispatched over the window, all priorities, seconds, from the
    ``rate()`` of every gateway counter over it."""
    n = len(PRIORITIES)
    dispatched, waited = float(rates[1 + n:1 + 2 * n].sum()), float(rates[1 + 2 * n:1 + 3 * n].sum())
    return waited / dispatched if dispatched > 0 else None


def _prune(series: _PodSeries, keep_after: float) -> None:
    """Drop samples at or before ``keep_after`` (outside every window still to come)."""
    while series.times and series.times[0] <= keep_after:
        series.times.popleft()
        series.counters.popleft()
        if series.gauges:
            series.gauges.popleft()


def pod_name(service: str, variant: str, rid: int) -> str:
    """The name a simulated replica's pod goes by (``PodObservation.name``)."""
    return f"{service}-{variant}-{rid}"


class SimAdmissionSink:
    """Sets the simulator's gateway thresholds (``autoscaler.simulator.gateway.Gateway.set_thresholds``):
    a malformed set is refused (``invalid``) and the last good one stays in force."""

    def __init__(self, sim: FleetSimulator) -> None:
        self.sim = sim

    def publish(self, service: str, thresholds: Mapping[str, float | None],
                itl_budget: Mapping[str, int] | None = None) -> ActuationResult:
        """Apply ``thresholds`` (priority -> seconds of estimated wait, None for no limit) at ``service``'s
        gateway, and ``itl_budget`` where its concurrency detector follows one
        (``FleetSimulator.follow_itl_budget``)."""
        flow = self.sim.services[service].flow
        if flow is None:
            return ActuationResult(ActuationStatus.INVALID, f"{service}: the gateway runs without flow control")
        why = check_itl_budget(itl_budget or {}) or flow.set_thresholds(thresholds)
        if why is None and itl_budget:
            self.sim.follow_itl_budget(service, itl_budget)
        return APPLIED if why is None else ActuationResult(ActuationStatus.INVALID, f"{service}: {why}")


class SimActuator:
    """Scales the simulator's Deployments (every write applies: the simulator has no API server)."""

    def __init__(self, sim: FleetSimulator) -> None:
        self.sim = sim

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        """Set the variant's replicas; the pods named in ``remove_first`` (``pod_name``) go first."""
        rids = {pod_name(service, r.variant, r.rid): r.rid for r in self.sim.alive_replicas(service)} \
            if remove_first else {}
        self.sim.set_replicas(service, variant, replicas, [rids[n] for n in remove_first if n in rids])
        return APPLIED


class SimDrainer:
    """Takes the simulator's pods (``pod_name``) out of its router and back (``Drainer``)."""

    def __init__(self, sim: FleetSimulator) -> None:
        self.sim = sim

    def _set(self, service: str, pods: Sequence[str], cordoned: bool) -> list[str]:
        by_name = {pod_name(service, r.variant, r.rid): r for r in self.sim.alive_replicas(service)}
        done = []
        for name in pods:
            if name in by_name:
                by_name[name].cordoned = cordoned
                done.append(name)
        return done

    def cordon(self, service: str, pods: Sequence[str]) -> list[str]:
        """No new request goes to ``pods``; returns those that exist."""
        return self._set(service, pods, True)

    def uncordon(self, service: str, pods: Sequence[str]) -> None:
        """``pods`` take new requests again."""
        self._set(service, pods, False)
