"""Cache-warmth stage: the fleet's prefix-cache hit rate ``horizon_s`` ahead, learned from per-pod counters.

Each tick it turns every ready pod's prefix-cache counters (``PodObservation.prefix_hits_total`` /
``prefix_queries_total``, tokens) into increases, feeds them to ``models.cache_warmth.CacheWarmthModel``,
and predicts the fleet's hit rate over the forecast step that ends ``horizon_s`` ahead, for the fleet
as it will be then: the ready pods plus every replica still starting, cold, ready after its
variant's ``startup_warm_s`` (the earliest it can serve, so the prediction errs toward fewer hits:
more prefill work).

Adds ``forecast_prefix_hit_rate`` (fraction 0..1) to the estimate's signals. It is None, never 0,
while the model has not learned yet (``models.cache_warmth.MIN_SAMPLES``), while no pod is listed,
or while the load is unknown.

The model needs, on every tick it learns from, each serving replica's counter increase over one
interval (since the last tick it learned from). Rules, each because a counter alone cannot tell:
  * it learns only on complete ticks: every variant's replica count known and equal to its pods
    listed, each with both counters (a replica missing from an interval reads as removed);
  * the first complete tick is a baseline: its pods have served for an unknown time and are taken
    as warm (ready ``WARM_AGE_S`` earlier, or at the source's ``ready_s``);
  * a pod read on the last learned tick continues: its increase is the difference of readings;
  * a pod whose source ``ready_s`` is after the last learned tick is a new process: its counters
    started at zero, so they are its increase;
  * any other pod joining (new without a source ready time: it may be an old pod that was hidden;
    back after the model learned ticks without it; never read before), and a pod whose counter went
    down on any tick since, or whose source ready time moved later (a restarted server, a reused
    name), is a new replica to the model, cold from this tick (or from the restart): its share of
    the cache went to the others meanwhile. Its increase is unknown, so on that tick the model only
    restarts its interval (every increase taken as 0);
  * a counter that is not finite, negative, or hits above queries is unknown (the tick is incomplete);
  * a pod listed but not learned yet is planned as the model would take it: new processes (by the
    source's ready time) from then, others cold from now (before the first complete tick: warm);
  * names unseen for ``RETAIN_S`` that the model does not hold are forgotten; a ready time is never
    later than now; a tick at a non-finite time is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import replace

from autoscaler.config import ForecastConfig, Service
from autoscaler.loop.forecast import served_mix
from autoscaler.state import WARMTH_NAME, ForecastSignals, PodObservation, ServiceEstimate
from models.cache_warmth import REUSE_TIMES_S, CacheWarmthModel, ReplicaPlan, ReplicaSample

WARMTH_SIGNALS = (WARMTH_NAME,)
WARM_AGE_S = 10 * max(REUSE_TIMES_S)  # Erlang(2) reuse CDF at 10 means is 1 - 21 e^-20: warm
RETAIN_S = 3600.0  # a pod unseen this long is forgotten (its name may come back as a new process)
READY_TOLERANCE_S = 1.0  # a source ready time later than the model's by more than this is a new process


def _counters(p: PodObservation) -> tuple[float, float] | None:
    """(hits, queries) of a pod when both are known, finite, >= 0 and hits <= queries; else None."""
    h, q = p.prefix_hits_total, p.prefix_queries_total
    if h is None or q is None or not (0 <= h <= q < math.inf):
        return None
    return float(h), float(q)


def _source_ready(p: PodObservation) -> float | None:
    return p.ready_s if p.ready_s is not None and math.isfinite(p.ready_s) else None


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
        self.longest = svc.max_model_len
        self.model = model or CacheWarmthModel(router=router)
        self._seen: dict[str, float] = {}  # pod name -> last tick it was listed
        self._born: dict[str, float] = {}  # pod name -> when it became ready (source's ready_s, else first listed)
        self._id: dict[str, str] = {}  # pods of the model -> replica id there
        self._ready: dict[str, float] = {}  # pods of the model -> ready time there
        self._last: dict[str, tuple[float, float]] = {}  # pods of the model -> (hits, queries) at the last learned tick
        self._t_learned: float | None = None
        self._model_ids: set[Hashable] = set()  # replica ids of the model's last observation
        self._reading: dict[str, tuple[float, float]] = {}  # pod name -> its newest reading, any tick
        self._restarted: dict[str, float] = {}  # pod name -> when its counters went down, until learned
        self._serial = 0

    def apply(self, est: ServiceEstimate) -> ServiceEstimate:
        """Learn from ``est.pods``; ``est`` with the fleet's forecast prefix-cache hit rate
        (``Signals.prefix_hit_rate_forecast``, exported as ``forecast_prefix_hit_rate``)."""
        now = est.time_s
        if not math.isfinite(now):  # a broken clock: nothing to learn or plan from
            return _with_warmth(est, None)
        pods: dict[str, PodObservation] = {}
        duplicated = False
        for p in est.pods:  # a pod listed twice (overlapping variant selectors) counts once
            if p.name and p.variant in self.variants:
                duplicated = duplicated or p.name in pods
                pods.setdefault(p.name, p)
        for name, p in pods.items():
            self._seen[name] = now
            ready = _source_ready(p)
            if ready is not None:
                ready = min(ready, now)
                if name in self._id and ready > self._ready[name] + READY_TOLERANCE_S:
                    self._restarted[name] = ready  # the source says: a newer process than the model's
                self._born[name] = ready
            else:
                self._born.setdefault(name, now)
        reported = {name: c for name, p in pods.items() if (c := _counters(p)) is not None}
        for name, (hits, queries) in reported.items():  # a restart seen on any tick, complete or not
            before = self._reading.get(name)
            if before is not None and (hits < before[0] or queries < before[1]):
                self._restarted[name] = now
            self._reading[name] = (hits, queries)
        if (not duplicated and self._complete(est, pods, reported)
                and (self._t_learned is None or now > self._t_learned)):
            self._learn(now, pods, reported)
        # forgotten: names long unseen that the model does not hold (its baseline must outlive any gap)
        for name in [n for n, t in self._seen.items() if t < now - RETAIN_S and n not in self._id]:
            for d in (self._seen, self._born, self._id, self._ready, self._last, self._reading, self._restarted):
                d.pop(name, None)
        return _with_warmth(est, self._predict(est, pods))

    @staticmethod
    def _complete(est: ServiceEstimate, pods: dict[str, PodObservation],
                  reported: dict[str, tuple[float, float]]) -> bool:
        """Every variant's count known and equal to its listed pods, every pod with both counters."""
        if not reported or len(reported) != len(pods):
            return False
        for name, obs in est.variants.items():
            listed = sum(1 for p in pods.values() if p.variant == name)
            if not obs.counts_known or obs.ready != listed:
                return False
        return True

    def _join(self, name: str, ready_s: float) -> None:
        """Pod ``name`` becomes a replica of the model, ready at ``ready_s``, under an id the model does not hold."""
        taken = self._model_ids | set(self._id.values()) | self._seen.keys()
        taken.discard(name)
        rid = name
        while rid in taken or (rid == name and name in self._model_ids):
            self._serial += 1
            rid = f"{name}#{self._serial}"
        self._id[name] = rid
        self._ready[name] = ready_s

    def _learn(self, now: float, pods: dict[str, PodObservation], reported: dict[str, tuple[float, float]]) -> None:
        """One complete tick: the increases since the last learned tick, or a restart of the interval."""
        known = True  # every increase known: learn from them; else only restart the model's interval
        increases: dict[str, tuple[float, float]] = {}
        for name, (hits, queries) in reported.items():
            before = self._last.get(name)
            restarted = self._restarted.get(name)  # marks clear on every learned tick: this one is newer
            if self._t_learned is None:
                source = _source_ready(pods[name])
                warm = self._born[name] if source is not None else now - WARM_AGE_S
                self._join(name, warm if restarted is None else restarted)
                increases[name] = (0.0, 0.0)
            elif restarted is None and before is not None and hits >= before[0] and queries >= before[1]:
                increases[name] = (hits - before[0], queries - before[1])
            elif before is None and _source_ready(pods[name]) is not None and self._born[name] > self._t_learned:
                self._join(name, max(self._born[name], restarted or -math.inf))
                increases[name] = (hits, queries)
            else:
                self._join(name, now if restarted is None else max(restarted, self._t_learned))
                increases[name] = (0.0, 0.0)
                known = False
        samples = []
        for name, (d_hits, d_queries) in increases.items():
            if not known:
                d_hits = d_queries = 0.0
            kv = float(self.variants[pods[name].variant].kv_cache_tokens)
            # hits can outrun queries between two readings only through skewed scrapes: capped
            samples.append(ReplicaSample(self._id[name], self._ready[name], min(d_hits, d_queries), d_queries, kv))
        self._restarted.clear()
        self._last = dict(reported)
        self._id = {n: i for n, i in self._id.items() if n in reported}
        self._ready = {n: t for n, t in self._ready.items() if n in reported}
        self.model.observe(now, samples)
        self._t_learned = now
        self._model_ids = {s.replica_id for s in samples}

    def _predict(self, est: ServiceEstimate, pods: dict[str, PodObservation]) -> float | None:
        if self.model.params is None:
            return None
        sig = est.signals
        forecast = sig.forecast or ForecastSignals()
        rate = forecast.rate_rps
        if rate is None:
            rate = sig.request_rate_rps
        prompt = forecast.input_tokens
        if prompt is None:
            prompt = served_mix(sig, self.longest)[0]
        if rate is None or prompt is None or not pods:
            return None
        now = est.time_s
        plan = []
        for name, p in pods.items():
            kv, weight = float(self.variants[p.variant].kv_cache_tokens), est.weights.get(p.variant, 1.0)
            if name in self._id:  # a replica of the model
                plan.append(ReplicaPlan(self._id[name], self._ready[name], kv, weight))
                continue
            # listed, not learned yet: as the model would take it on its next complete tick
            if self._t_learned is None:
                ready = self._born[name] if _source_ready(p) is not None else now - WARM_AGE_S
            elif _source_ready(p) is not None and self._born[name] > self._t_learned:
                ready = self._born[name]
            else:
                ready = now
            plan.append(ReplicaPlan(f"{name}/unlearned", ready, kv, weight))
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


def _with_warmth(est: ServiceEstimate, hit_rate: float | None) -> ServiceEstimate:
    """``est`` with the warmth stage's forecast hit rate (None: unknown)."""
    return replace(est, signals=replace(est.signals, prefix_hit_rate_forecast=hit_rate, warmth_known=True))
