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
  * a pod's ready time is the source's ``ready_s`` whenever it gives one; otherwise the tick the pod was
    first seen, except pods present at the stage's first tick, which have served for an unknown
    time and are taken as warm (ready ``WARM_AGE_S`` earlier);
  * a pod first seen after the first tick started with its counters at zero (a new process), so its
    whole counter is its increase;
  * a counter that went down is a restarted server: the new value is the increase, and the pod is a
    new replica to the model, cold from this tick;
  * the model learns only on ticks where every ready replica reported both counters (it reads a
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
        self._last: dict[str, tuple[float, float]] = {}  # pod name -> (hits, queries) at the last learning tick

    def apply(self, est: ServiceEstimate) -> None:
        """Learn from ``est.pods`` and add ``forecast_prefix_hit_rate`` to ``est.signals`` (in place)."""
        now = est.time_s
        pods = [p for p in est.pods if p.name and p.variant in self.variants]
        if not self._started:
            self._started = True
            self._initial = {p.name for p in pods}
        for p in pods:
            if p.ready_s is not None:
                self._ready[p.name] = p.ready_s
            elif p.name not in self._ready:
                self._ready[p.name] = now - WARM_AGE_S if p.name in self._initial else now
        counters = {p.name: (p.prefix_hits_total, p.prefix_queries_total) for p in pods}
        reported = [(p, h, q) for p, (h, q) in zip(pods, counters.values(), strict=True)
                    if h is not None and q is not None]
        ready = sum(v.ready for v in est.variants.values() if v.counts_known)
        if reported and len(reported) == len(pods) == ready:
            self._learn(now, reported)
        for d in (self._ready, self._restarts, self._last):
            for name in d.keys() - counters.keys():
                del d[name]
        self._initial &= counters.keys()
        est.signals["forecast_prefix_hit_rate"] = self._predict(est, pods)

    def _id(self, name: str) -> str:
        """The model's replica id of pod ``name``: a restarted server is a new replica."""
        n = self._restarts.get(name, 0)
        return f"{name}#{n}" if n else name

    def _learn(self, now: float, reported: list[tuple[PodObservation, float, float]]) -> None:
        samples = []
        for p, hits, queries in reported:
            before = self._last.get(p.name)
            if before is None:
                base = p.name in self._initial
                self._initial.discard(p.name)
                d_hits, d_queries = (0.0, 0.0) if base else (hits, queries)
            elif hits < before[0] or queries < before[1]:  # restarted: counters from zero, cache cold
                d_hits, d_queries = hits, queries
                self._ready[p.name] = p.ready_s if p.ready_s is not None else now
                self._restarts[p.name] = self._restarts.get(p.name, 0) + 1
            else:
                d_hits, d_queries = hits - before[0], queries - before[1]
            v = self.variants[p.variant]
            samples.append(ReplicaSample(self._id(p.name), self._ready[p.name], min(d_hits, d_queries), d_queries,
                                         float(v.kv_cache_tokens)))
        self._last = {p.name: (hits, queries) for p, hits, queries in reported}
        self.model.observe(now, samples)

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
        step = min(self.cfg.step_s, self.cfg.horizon_s)
        f = self.model.predict(now, plan, self.cfg.horizon_s, step, max(rate, 0.0), max(prompt, 0.0))
        x = float(f.fleet_hit_rate[-1])
        return x if math.isfinite(x) else None
