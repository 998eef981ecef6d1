"""Estimate stage: derive the controllers' inputs from an observation (and infer arrivals without a gateway).

Derived signals: ``ttft_p95_ratio`` (p95 TTFT / the interactive TTFT SLO), ``tpot_p95_ratio``
(p95 of per-request mean time per output token / the interactive ITL SLO, which is a per-request
mean), ``slo_p95_ratio`` (the larger of the two; with one unknown, the other if it is >= 1, since
the larger can only be higher, else unknown); ``ttft_mean_ratio``, ``tpot_mean_ratio`` and
``slo_mean_ratio``, the same with the window means (``ttft_mean_s``, ``tpot_mean_s``); ``queue_per_replica``
(waiting requests per ready replica), and ``kv_usage`` as observed. Idle detection uses the
request counters, never the (undefined at zero traffic) latency quantiles, and is unknown when any
query failed: idle is no request finished, none running, none waiting, and no arrival counted at the
gateway (``counted_arrivals``: requests it shed or rejected included, so a service whose every request
is turned away before a replica sees it is not idle; an unknown gateway counter leaves the rest to
decide, as before gateways were read).

Bad data, whatever the source: NaN (0/0, e.g. a quantile at zero traffic) becomes None quietly;
an infinite or negative value, or a fraction (``kv_usage``, ``prefix_hit_rate``) above 1, becomes
None with a line in ``warnings``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace

from autoscaler.config import SLO, Service
from autoscaler.state import (
    DERIVED,
    FORECAST_NAMES,
    PRIORITY_NAMES,
    SIGNALS,
    ServiceEstimate,
    ServiceObservation,
    Signals,
)
from autoscaler.workload.types import INTERACTIVE

# vLLM's ``kv_cache_usage_perc`` is a fraction 0..1 despite its name (METRICS.md, vLLM 0.33.0).
FRACTIONS = ("kv_usage", "prefix_hit_rate")


def sanitize(signals: Signals, warnings: list[str], scope: str) -> Signals:
    """``signals`` with NaN, infinite, negative and above-one fractions set to None, and the derived
    signals dropped (see module docstring): ``signals`` itself when there is nothing to change (the
    usual case; ``Signals.of`` would rebuild an equal copy)."""
    if _clean(signals):
        return signals
    out: dict[str, float | None] = {}
    for name, x in signals.flat(derived=False).items():
        bad = x is not None and not math.isnan(x) and (math.isinf(x) or x < 0 or (name in FRACTIONS and x > 1))
        if bad:
            bound = ", <= 1" if name in FRACTIONS else ""
            warnings.append(f"{scope}: rejected {name}={x:g} (must be finite, >= 0{bound})")
        out[name] = None if x is None or math.isnan(x) or bad else x
    return Signals.of(out)


def _clean(signals: Signals) -> bool:
    """Whether ``sanitize`` has nothing to change: no derived signal set, and every value of
    ``signals.flat(derived=False)`` None or finite and >= 0 (<= 1 for a fraction). Read field by field,
    without building ``flat()``'s dict (issue 33: four times a tick); only ``SIGNALS`` holds fractions."""
    for name in DERIVED:
        if getattr(signals, name) is not None:
            return False
    for name in SIGNALS:
        x = getattr(signals, name)
        if x is not None and not (0.0 <= x < math.inf and (x <= 1.0 or name not in FRACTIONS)):
            return False
    values: list[float | None] = [getattr(ps, f) for ps in signals.by_priority.values() for f in PRIORITY_NAMES]
    if signals.forecast is not None:
        values += [getattr(signals.forecast, f) for f in FORECAST_NAMES]
    if signals.warmth_known:
        values.append(signals.prefix_hit_rate_forecast)
    values.append(signals.arrival_dispersion)  # in flat() only when known: None passes
    return all(x is None or 0.0 <= x < math.inf for x in values)


def slo_ratios(ttft: float | None, tpot: float | None, slo: SLO) -> tuple[float | None, float | None, float | None]:
    """``(ttft ratio, tpot ratio, slo ratio)`` of a TTFT and a per-request mean time per output token
    (seconds) to the interactive SLO (module docstring); each None when unknown."""
    r_ttft = None if ttft is None else ttft / slo.ttft_s
    r_tpot = None if tpot is None else tpot / slo.itl_s
    known = [r for r in (r_ttft, r_tpot) if r is not None]
    # One ratio unknown (e.g. no request with two output tokens finished): the known one is a
    # lower bound of the larger, so it stands only once it is past the SLO itself (>= 1).
    r_slo = max(known) if len(known) == 2 or (known and known[0] >= 1.0) else None
    return r_ttft, r_tpot, r_slo


def estimate(obs: ServiceObservation, svc: Service, weights: dict[str, float]) -> ServiceEstimate:
    """Derive a ``ServiceEstimate`` from one observation (pure)."""
    warnings: list[str] = []
    observed = sanitize(obs.signals, warnings, obs.service)
    variants = {n: replace(v, signals=sanitize(v.signals, warnings, f"{obs.service}/{n}"))
                for n, v in obs.variants.items()}
    pools = {role: replace(pool, signals=sanitize(pool.signals, warnings, f"{obs.service}/{role}"),
                           variants={n: replace(v, signals=sanitize(v.signals, warnings, f"{obs.service}/{n}"))
                                     for n, v in pool.variants.items()})
             for role, pool in obs.pools.items()}
    slo = svc.slo[INTERACTIVE]
    ttft_p95, tpot_p95, slo_p95 = slo_ratios(observed.ttft_p95_s, observed.tpot_p95_s, slo)
    ttft_mean, tpot_mean, slo_mean = slo_ratios(observed.ttft_mean_s, observed.tpot_mean_s, slo)
    ready = sum(v.ready for v in obs.variants.values())
    queue = observed.queue_length
    sig = replace(observed, ttft_p95_ratio=ttft_p95, tpot_p95_ratio=tpot_p95, slo_p95_ratio=slo_p95,
                  ttft_mean_ratio=ttft_mean, tpot_mean_ratio=tpot_mean, slo_mean_ratio=slo_mean,
                  queue_per_replica=None if queue is None else queue / max(ready, 1))
    rate, running = sig.request_rate_rps, sig.running
    known = rate is not None and running is not None and queue is not None
    if obs.errors:
        idle = None
    elif counted_arrivals(sig):
        idle = False  # requests arrive, even if none reaches a replica (shed, rejected): not idle
    else:
        idle = (rate == 0 and running == 0 and queue == 0) if known else None
    cap = sum(v.current * weights[name] for name, v in obs.variants.items())
    starting = sum(v.starting for v in obs.variants.values())
    return ServiceEstimate(
        service=obs.service,
        time_s=obs.time_s,
        signals=sig,
        variants=variants,
        weights=weights,
        idle=idle,
        capacity_rps=cap,
        ready_capacity_rps=sum(v.ready * weights[name] for name, v in obs.variants.items()),
        starting=starting,
        errors=list(obs.errors),
        pods=list(obs.pods),
        warnings=warnings,
        history_s=obs.history_s,
        pools=pools,
    )


def counted_arrivals(signals: Signals) -> bool:
    """Whether the gateway counted requests arriving over its window (``arrival_rate_rps``, service-wide
    or of a priority, which counts the attempts it shed or rejected too) or shed any (``shed_rps`` of a
    priority) at a rate above 0; False where every such counter is unknown or 0. Read on the source's
    signals, before ``ArrivalInference`` (inferred arrivals are not counted)."""
    rates = [signals.arrival_rate_rps]
    for ps in signals.by_priority.values():
        rates += [ps.arrival_rate_rps, ps.shed_rps]
    return any(x is not None and x > 0 for x in rates)


ARRIVAL_LOOKBACK_S = 60.0
"""``ArrivalInference``'s default look-back, seconds: the MPC's signal window. The loop builds it with its
controller's ``window_s`` instead (the window the source reads the completions' rate over), so the growth
and the completions cover the same span: over mismatched spans a fast drain reads as no arrivals (a
300-s completions' rate beside a 60-s growth read 0 req/s while 10 arrived)."""


def inferred_arrivals(served_rps: float, t0: float, held0: float, t1: float, held1: float) -> float:
    """Requests/s arriving from the completions and the requests in the system at two times: what arrives
    either completes or is still held, so ``arrivals = completions + (held1 - held0) / (t1 - t0)``, the
    growth signed (a backlog draining completes more than arrives). Below 0 where the data are
    inconsistent (requests lost in a crash, pods dropping out of the sums): ``ArrivalInference`` reads
    that as unknown, not as no arrivals.

    Args:
        served_rps: completions over the span, requests/s (vLLM's ``request_success_total`` rate, which
            counts a request when it finishes, not when it arrives).
        t0, t1: the two sample times, seconds, ``t1 > t0``.
        held0, held1: requests in the system then (waiting plus running, the gateway's queue included).

    Raises:
        ValueError: ``t1`` not after ``t0``, or a count or rate not finite or below 0.
    """
    if not t1 > t0:
        raise ValueError(f"inferred_arrivals: need t1 > t0, got {t0} and {t1}")
    for what, x in (("served_rps", served_rps), ("held0", held0), ("held1", held1)):
        if not 0 <= x < math.inf:
            raise ValueError(f"inferred_arrivals: {what} must be a finite number >= 0, got {x}")
    return served_rps + (held1 - held0) / (t1 - t0)


class ArrivalInference:
    """``arrival_rate_rps`` where the source has none (no gateway metric): completions plus the growth of
    the requests in the system (``queue_length`` waiting, the gateway's held ones included, plus
    ``running``) over the last ``lookback_s`` seconds (``inferred_arrivals``), the arrivals the
    PID's demand cap and floor read (``controllers.pid_rules``), the MPC holds, and ``mpc:arrivals=1``'s
    forecast is fed.

    Unknown (None), never a guess: until two samples a time apart exist, on a tick whose completions,
    queue or running are unknown (the growth would come from older samples than the completions'
    window), and where the completions and the growth add up to less than 0. A tick with an unknown
    count is not kept: the growth spans the known samples around it.

    A ready replica that reports nothing is missing from the sums, so the estimate reads low while one
    is silent; it is still read then (unknown arrivals would leave the MPC planning on the completions
    alone, lower still: a review measured pod-metrics-missing without a gateway counter at 71-73 %
    with it unknown against 78-80 % read low). The estimate is marked ``arrivals_inferred``, so a rule
    that must not read it low (the PID's demand floor) can tell it from a counted rate.

    The growth is signed: while a backlog drains the completions exceed the arrivals by the drain
    (issue 34's decode-pool-loss: 24-31 req/s completed at 12 arriving); counted as no growth, the drain
    would read as arrivals, which is what feeding the forecast the arrivals is meant to avoid. Running
    requests are counted with the waiting ones: while new replicas take a queue in, requests move from
    waiting to running without leaving the system.
    """

    def __init__(self, lookback_s: float = ARRIVAL_LOOKBACK_S) -> None:
        self.lookback_s = lookback_s
        self._held: deque[tuple[float, float]] = deque()

    def apply(self, est: ServiceEstimate) -> ServiceEstimate:
        """Record the requests in the system; ``est`` with ``arrival_rate_rps`` filled when it is unknown
        and can be inferred (class docstring)."""
        queue, running = est.signals.queue_length, est.signals.running
        held = None if queue is None or running is None else queue + running
        known = held is not None and 0 <= held < math.inf
        if held is not None and known and (not self._held or est.time_s > self._held[-1][0]):
            self._held.append((est.time_s, held))
        while self._held and self._held[0][0] < est.time_s - self.lookback_s:
            self._held.popleft()
        served = est.signals.request_rate_rps
        if (est.signals.arrival_rate_rps is not None or served is None or not 0 <= served < math.inf or not known
                or len(self._held) < 2):
            return est
        (t0, h0), (t1, h1) = self._held[0], self._held[-1]
        if t1 <= t0 or t1 != est.time_s:
            return est
        arrivals = inferred_arrivals(served, t0, h0, t1, h1)
        if arrivals < 0:  # more left than was held and completed: inconsistent, not zero arrivals
            return est
        return replace(est, signals=replace(est.signals, arrival_rate_rps=arrivals), arrivals_inferred=True)
