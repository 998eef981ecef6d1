"""Cache-warmth stage: the fleet's prefix-cache hit rate ``horizon_s`` ahead, learned from per-pod counters.

Each tick it turns every ready pod's prefix-cache counters (``PodObservation.prefix_hits_total`` /
``prefix_queries_total``, tokens) into increases since the previous tick, feeds them to
``models.cache_warmth.CacheWarmthModel``, and predicts the fleet's hit rate over the forecast step
that ends ``horizon_s`` ahead, for the fleet as it will be then: the ready pods (keeping what each
has learned) plus every replica still starting, cold, ready after its variant's ``startup_warm_s``
(the earliest it can serve, so the prediction errs toward fewer hits: more prefill work).

Adds ``forecast_prefix_hit_rate`` (fraction 0..1) to the estimate's signals. It is None, never 0,
while the model has not learned yet (``models.cache_warmth.MIN_SAMPLES``), while no pod reports
the counters, or while the load is unknown.

Rules, each because a counter alone cannot tell:
  * a pod's ready time is the source's ``ready_s`` whenever it gives one (never later than now: it is
    listed as ready); otherwise the tick the pod was first seen, except pods seen before the first
    tick on which every ready replica reported, which have served for an unknown time and are taken
    as warm (ready ``WARM_AGE_S`` earlier) and start from their first reading;
  * a pod first seen later started with its counters at zero (a new process), so its whole counter
    is its first increase;
  * a pod missing for a while (a failed query, a stale scrape) and back with counters that did not
    go down is the same process: its increase runs from its last reading, unless the model learned
    a tick without it (it then read the pod as removed and gave its share of the cache to the
    others), in which case it comes back as a restarted one (pods unseen for ``RETAIN_S`` are forgotten);
  * a counter that went down is a restarted server (or a reused pod name): a new replica to the model,
    cold from this tick; the tick's increases are unknown, so it is not learned from and every
    pod's reading becomes a new baseline;
  * a counter that is not finite, negative, or hits above queries is unknown for that tick;
  * the model learns only on ticks where every ready replica reported both counters once (it reads a
    replica missing from an interval as removed); on other ticks it only predicts.
"""

from __future__ import annotations

import math

from autoscaler.config import ForecastConfig, Service
from autoscaler.loop.estimate import ServiceEstimate
from autoscaler.loop.observe import PodObservation
from models.cache_warmth import REUSE_TIMES_S, CacheWarmthModel, ReplicaPlan, ReplicaSample

WARMTH_SIGNALS = ("forecast_prefix_hit_rate",)
WARM_AGE_S = 10 * max(REUSE_TIMES_S)  # Erlang(2) reuse CDF at 10 means is 1 - 21 e^-20: warm
RETAIN_S = 3600.0  # a pod unseen this long is forgotten (its name may come back as a new process)


def _counters(p: PodObservation) -> tuple[float, float] | None:
    """(hits, queries) of a pod when both are known, finite, >= 0 and hits <= queries; else None."""
    h, q = p.prefix_hits_total, p.prefix_queries_total
    if h is None or q is None or not (0 <= h <= q < math.inf):
        return None
    return float(h), float(q)


def _per_request(tokens_rps: float | None, rate_rps: float | None) -> float | None:
    if tokens_rps is None or rate_rps is None or rate_rps <= 0:
        return None
    return tokens_rps / rate_rps


class WarmthStage:
    """One service's cache-warmth model (see the module docstring).

    Args:
        cfg: the forecast section (``horizon_s``, ``step_s``, ``router``).
        svc: the service (variants' KV capacity and warm start time).
        router: how the gateway places requests: ``least_outstanding`` or ``prefix_affinity``.
        model: the model to use (e.g. one with ``fixed`` parameters); default a new one for ``router``.
    """

    def __init__(self, cfg: ForecastConfig, svc: Service, router: str,
                 model: CacheWarmthModel | None = None) -> None:
        self.cfg = cfg
        self.variants = {v.name: v for v in svc.variants}
        self.model = model or CacheWarmthModel(router=router)
        self._started = False
        self._initial: set[str] = set()  # pods of the first tick not yet read: their first reading is a baseline
        self._ready: dict[str, float] = {}  # pod name -> ready time used by the model
        self._restarts: dict[str, int] = {}  # pod name -> server restarts seen (part of the model's replica id)
        self._last: dict[str, tuple[float, float]] = {}  # pod name -> (hits, queries) at its last reading
        self._read_s: dict[str, float] = {}  # pod name -> time of that reading
        self._cold: dict[str, float] = {}  # pod name -> since when the model counts it cold (restart, return)
        self._seen: dict[str, float] = {}  # pod name -> last tick it was listed
        self._t_learned: float | None = None
        self._in_model: set[str] = set()  # pods of the last tick learned from

    def apply(self, est: ServiceEstimate) -> None:
        """Learn from ``est.pods`` and add ``forecast_prefix_hit_rate`` to ``est.signals`` (in place)."""
        now = est.time_s
        pods: dict[str, PodObservation] = {}
        duplicated = False
        for p in est.pods:  # a pod listed twice (overlapping variant selectors) counts once
            if p.name and p.variant in self.variants:
                duplicated = duplicated or p.name in pods
                pods.setdefault(p.name, p)
        if self._t_learned is None:  # until a complete tick, every pod seen has served for an unknown time
            self._initial |= pods.keys() - self._last.keys()
        for name, p in pods.items():
            self._seen[name] = now
            if p.ready_s is not None and math.isfinite(p.ready_s):
                self._ready[name] = max(min(p.ready_s, now), self._cold.get(name, -math.inf))
            elif name not in self._ready:
                self._ready[name] = now - WARM_AGE_S if name in self._initial else now
        reported = {name: c for name, p in pods.items() if (c := _counters(p)) is not None}
        ready = sum(v.ready for v in est.variants.values() if v.counts_known)
        complete = not duplicated and bool(reported) and len(reported) == len(pods) == ready
        if complete and (self._t_learned is None or now > self._t_learned):
            self._learn(now, pods, reported)
        for name in [n for n, t in self._seen.items() if t < now - RETAIN_S]:
            for d in (self._seen, self._ready, self._restarts, self._last, self._read_s, self._cold):
                d.pop(name, None)
            self._initial.discard(name)
        est.signals["forecast_prefix_hit_rate"] = self._predict(est, list(pods.values()))

    def _id(self, name: str) -> str:
        """The model's replica id of pod ``name``: a restarted server is a new replica."""
        n = self._restarts.get(name, 0)
        return f"{name}#{n}" if n else name

    def _learn(self, now: float, pods: dict[str, PodObservation], reported: dict[str, tuple[float, float]]) -> None:
        restarted = [n for n, (h, q) in reported.items() if n in self._last and (h < self._last[n][0]
                                                                               or q < self._last[n][1])]
        # back after the model learned a tick without it (and so dropped it): its increase spans
        # intervals the model never saw, and its share of the cache went to the others meanwhile
        returned = [n for n in reported if n in self._last and n not in restarted and self._t_learned is not None
                    and self._read_s[n] < self._t_learned and n not in self._in_model]
        for name in restarted + returned:  # a new replica to the model, cold from now
            self._ready[name] = self._cold[name] = now
            self._restarts[name] = self._restarts.get(name, 0) + 1
        if restarted or returned:  # their increases are unknown: every reading is a new baseline, nothing learned
            self._remember(now, reported)
            return
        samples = []
        for name, (hits, queries) in reported.items():
            before = self._last.get(name)
            if before is None:
                base = name in self._initial
                d_hits, d_queries = (0.0, 0.0) if base else (hits, queries)
            else:
                d_hits, d_queries = hits - before[0], queries - before[1]
            kv = float(self.variants[pods[name].variant].kv_cache_tokens)
            # hits can outrun queries between two readings only through skewed scrapes: capped
            samples.append(ReplicaSample(self._id(name), self._ready[name], min(d_hits, d_queries), d_queries, kv))
        self._initial -= reported.keys()
        self._remember(now, reported)
        self.model.observe(now, samples)
        self._t_learned = now
        self._in_model = set(reported)

    def _remember(self, now: float, reported: dict[str, tuple[float, float]]) -> None:
        self._last.update(reported)
        self._read_s.update(dict.fromkeys(reported, now))

    def _predict(self, est: ServiceEstimate, pods: list[PodObservation]) -> float | None:
        if self.model.params is None:
            return None
        sig = est.signals
        rate = sig.get("forecast_rate_rps")
        if rate is None:
            rate = sig.get("request_rate_rps")
        prompt = sig.get("forecast_input_tokens")
        if prompt is None:
            prompt = _per_request(sig.get("prompt_tokens_rps"), sig.get("request_rate_rps"))
        if rate is None or prompt is None or not pods:
            return None
        now = est.time_s
        plan = [ReplicaPlan(self._id(p.name), self._ready[p.name], float(self.variants[p.variant].kv_cache_tokens),
                            est.weights.get(p.variant, 1.0)) for p in pods]
        for name, obs in est.variants.items():
            v = self.variants.get(name)
            if v is None or not obs.counts_known:
                continue
            plan += [ReplicaPlan(f"{name}/starting-{i}", now + v.startup_warm_s, float(v.kv_cache_tokens),
                                 est.weights.get(name, 1.0)) for i in range(obs.starting)]
        horizon = self.cfg.horizon_s
        step = horizon / math.ceil(horizon / self.cfg.step_s)  # the last step ends at the horizon exactly
        f = self.model.predict(now, plan, horizon, step, max(rate, 0.0), max(prompt, 0.0))
        x = float(f.fleet_hit_rate[-1])
        return x if math.isfinite(x) else None
