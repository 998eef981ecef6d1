"""Cache warmth: the prefix-cache hit rate of each replica and of the fleet, now and after a change.

Model. A fraction ``shared_hit`` of prompt tokens (common system prompts) hits on any replica that
has served a little traffic. A further fraction ``reuse_hit`` repeats an earlier request's prefix
(the previous turn of a conversation); it hits only if that earlier request ran on the same replica
and its blocks are still cached. The time between the two requests (the reuse distance) has CDF G,
taken as Erlang with ``SHAPE`` = 2 stages and mean ``reuse_time_s``. On the Mooncake conversation
trace (token-weighted over its ~93,700 reused blocks; mean 241 s) G is 0.10 at 45 s, 0.46 at 120 s,
0.76 at 300 s and 0.93 at 600 s: reuse starts slowly (the previous answer must finish first). An
exponential puts its most likely distance at 0 (G = 0.17 at 45 s with that mean); two stages start
flat, as the trace does (0.05 at 45 s), at the price of a lighter tail.

Let p_r(t) be replica r's share of requests and S_r(t) = integral of g(d) p_r(t - d) dd the share of
reusable prefixes whose earlier request ran on r: S_r is p_r passed through ``SHAPE`` exponential
moving averages in series, starting at 0 when r becomes ready (empty cache) and gone when r is
removed (its cache goes with it). Then, per replica,

    least_outstanding (placement ignores the cache):  h_r = shared_hit + reuse_hit * E_r * S_r
    prefix_affinity (a request follows its prefix):   h_r = shared_hit + reuse_hit * E_r * S_r / p_r

and the fleet rate is sum_r p_r h_r. E_r = G(T_evict) is the share of reuse distances shorter than
the LRU eviction horizon T_evict: the time in which the replica newly cached ``kv_cache_tokens``
tokens (misses). So a replica warms up as G(age); with N equal replicas and placement that ignores
the cache the reusable hits scale as 1/N; removing a replica loses the share S_r of the reusable
prefixes it held, regained as the others' S grow.

Learning. For each ``reuse_time_s`` on a grid, S_r is tracked from the observed per-replica query
shares and (shared_hit, reuse_hit) follow by weighted least squares (weights = query tokens,
exponential forgetting); the grid value with the smallest residual wins. T_evict is measured from
the misses *before* each interval, so a burst of hits cannot inflate its own regressor. Per
observation this is O(grid x replicas) arithmetic.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

ROUTERS = ("least_outstanding", "prefix_affinity")  # autoscaler.config simulator.router values
SHAPE = 2  # Erlang stages of the reuse-distance distribution (see the module docstring)
# mean reuse distance grid, seconds: log-spaced from 15 s (one controller tick) to 1 hour
REUSE_TIMES_S = tuple(float(x) for x in np.geomspace(15.0, 3600.0, 13))
MIN_SAMPLES = 20  # replica-intervals with traffic before the parameters are reported
FIXED_POINT_ITERATIONS = 5  # eviction horizon <-> hit rate; converges in 2-3 on Mooncake-like loads
# Misses older than this are forgotten: reuse distances that long are certain under every grid mean
# (Erlang(2) CDF at 10 means: 1 - 21 e^-20), so an eviction horizon beyond it reads as infinite.
MISS_HISTORY_S = 10 * max(REUSE_TIMES_S)


def reuse_cdf(d_s: np.ndarray | float, reuse_time_s: float) -> np.ndarray:
    """G(d): Erlang(``SHAPE``) CDF with mean ``reuse_time_s`` at reuse distances ``d_s`` (seconds, may be inf)."""
    x = np.asarray(d_s, dtype=np.float64) * SHAPE / reuse_time_s
    tail = sum(np.where(np.isfinite(x), x, 0.0) ** i / math.factorial(i) for i in range(SHAPE))
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(np.isfinite(x), 1.0 - np.exp(-x) * tail, 1.0)


@dataclass(frozen=True)
class ReplicaSample:
    """One replica's prefix-cache counters over one observation interval.

    Attributes:
        replica_id: stable identity of the replica (pod name).
        ready_s: when it became ready, seconds (same clock as ``observe``'s ``t_s``).
        hits_tokens: increase of ``vllm:prefix_cache_hits_total`` over the interval, tokens.
        queries_tokens: increase of ``vllm:prefix_cache_queries_total`` over the interval, tokens.
        kv_cache_tokens: its KV-cache capacity, tokens.
    """

    replica_id: Hashable
    ready_s: float
    hits_tokens: float
    queries_tokens: float
    kv_cache_tokens: float


@dataclass(frozen=True)
class ReplicaPlan:
    """A replica in a planned fleet.

    Attributes:
        replica_id: identity; an id the model has observed keeps its learned warmth.
        ready_s: when it serves (future for a replica being added), seconds.
        kv_cache_tokens: KV-cache capacity, tokens.
        weight: relative capacity; the router gives it ``weight / sum(weights)`` of the requests.
        removed_s: when it stops taking requests (scale-down), or None.
    """

    replica_id: Hashable
    ready_s: float
    kv_cache_tokens: float
    weight: float = 1.0
    removed_s: float | None = None


@dataclass(frozen=True)
class WarmthParams:
    """Learned parameters: hit fractions of prompt tokens (0-1) and the mean reuse distance (s)."""

    shared_hit: float
    reuse_hit: float
    reuse_time_s: float


@dataclass(frozen=True)
class WarmthForecast:
    """Predicted hit rates over steps ending at ``times_s`` (shape (k,)).

    Attributes:
        times_s: end of each step, seconds.
        fleet_hit_rate: hit tokens / query tokens of the whole fleet per step, shape (k,), NaN for a
            step in which no replica serves.
        replica_hit_rate: replica id -> hit rate per step, shape (k,), NaN while it does not serve.
    """

    times_s: np.ndarray
    fleet_hit_rate: np.ndarray
    replica_hit_rate: dict[Hashable, np.ndarray]


def _erlang_stages(p: float, age_s: float, reuse_time_s: float) -> np.ndarray:
    """Stage values after ``age_s`` seconds of a constant share ``p`` from an empty cache, shape (SHAPE,).

    Stage j (1-based) of a cascade of exponential averages with time constant reuse_time_s / SHAPE,
    driven by a step of height p, is p times the Erlang(j) CDF at ``age_s``.
    """
    x = max(age_s, 0.0) * SHAPE / reuse_time_s
    cdf = [1 - math.exp(-x) * sum(x**i / math.factorial(i) for i in range(j)) for j in range(1, SHAPE + 1)]
    return p * np.array(cdf)


def _advance(stages: np.ndarray, p: np.ndarray, dt: float | np.ndarray, reuse_time_s: float) -> np.ndarray:
    """Run the cascade ``dt`` seconds (one value, or one per row) with each row's input held at ``p``:
    rows are replicas, columns stages.

    Exact for a constant input, whatever ``dt``: with x = dt SHAPE / reuse_time_s, stage j (1-based)
    becomes p + e^-x sum_{i<=j} (s_i - p) x^(j-i) / (j-i)!. From an empty cache that is p times the
    Erlang(j) CDF, as ``_erlang_stages``.
    """
    x = (np.maximum(dt, 0.0) * SHAPE / reuse_time_s) * np.ones(len(stages))
    decay = np.exp(-x)
    gap = stages - np.asarray(p, dtype=np.float64)[:, None]
    out = np.empty_like(stages)
    for j in range(SHAPE):
        acc = sum(gap[:, i] * x ** (j - i) / math.factorial(j - i) for i in range(j + 1))
        out[:, j] = p + decay * acc
    return out


def _eviction_horizon(history: deque[tuple[float, float, float]], now_s: float, capacity: float) -> float:
    """Seconds back from ``now_s`` in which the replica newly cached ``capacity`` tokens (inf: not yet).

    ``history`` holds (start, end, miss tokens) per interval, oldest first; misses are spread evenly
    over their interval. Entries older than the one that reaches ``capacity`` are dropped.
    """
    total = 0.0
    for i in range(len(history) - 1, -1, -1):
        start, end, tokens = history[i]
        if tokens > 0 and total + tokens >= capacity:
            for _ in range(i):
                history.popleft()
            return now_s - (end - (capacity - total) / tokens * (end - start))
        total += tokens
    return math.inf


class _Fit:
    """Per reuse time: every replica's cascade state and the weighted least-squares sums of y = a + b x."""

    def __init__(self, reuse_time_s: float) -> None:
        self.tau = reuse_time_s
        self.stages: dict[Hashable, np.ndarray] = {}
        self.stats = np.zeros(6)  # sums of w, w x, w x^2, w y, w x y, w y^2

    def solve(self) -> tuple[float, float, float]:
        """(shared_hit, reuse_hit, weighted squared error) with 0 <= shared, 0 <= reuse, shared + reuse <= 1."""
        w, wx, wxx, wy, wxy, wyy = self.stats
        if w <= 0:
            return 0.0, 0.0, math.inf
        det = w * wxx - wx * wx
        b = (w * wxy - wx * wy) / det if det > 1e-12 * w * w else 0.0  # no spread in x: no slope
        b = min(max(b, 0.0), 1.0)
        a = min(max((wy - b * wx) / w, 0.0), 1.0 - b)
        sse = wyy - 2 * a * wy - 2 * b * wxy + a * a * w + 2 * a * b * wx + b * b * wxx
        return a, b, float(sse)


class CacheWarmthModel:
    """Online model of prefix-cache warmth; see the module docstring for the equations.

    Call pattern (each controller tick, then whenever a scaling decision is weighed)::

        model = CacheWarmthModel(router="least_outstanding")
        model.observe(t_s, [ReplicaSample(pod, ready_s, d_hits, d_queries, kv_tokens), ...])
        plan = [ReplicaPlan(pod, ready_s, kv_tokens) for each current pod]
        plan.append(ReplicaPlan("new-1", t_s + startup_s, kv_tokens))        # a scale-up, or
        # ReplicaPlan(pod, ready_s, kv_tokens, removed_s=t_s) for a pod to remove
        f = model.predict(t_s, plan, horizon_s=600, step_s=60, rate_rps=r, mean_input_tokens=l)
        f.fleet_hit_rate, f.replica_hit_rate["new-1"]

    ``observe`` takes the counter increases since the previous call for every replica that was
    serving (ready or draining); a replica absent from a call is treated as removed. Before
    ``MIN_SAMPLES`` replica-intervals with traffic, ``params`` is None and ``predict`` assumes no
    cache hits at all (the cold, capacity-safe assumption).

    Identifiability: shared_hit and reuse_hit separate only when x = E_r S_r varies, i.e. when
    replicas of different ages serve (a deploy, a scale event) or load changes the eviction horizon.
    With no spread the slope is 0 and the whole hit rate is read as shared (new replicas then
    predict warm at once).

    Cost: observe and predict are O(grid x replicas x steps) numpy arithmetic.

    Args:
        router: ``least_outstanding`` (placement ignores the cache) or ``prefix_affinity``.
        reuse_times_s: grid of candidate mean reuse distances, seconds (all > 0).
        half_life_s: forgetting half-life of the fit, seconds of observation time (> 0).
        fixed: parameters to use instead of learned ones (e.g. carried over from an earlier run);
            ``observe`` then only tracks the replicas' state.

    Raises:
        ValueError: unknown router, empty or non-positive grid, non-positive half-life.
    """

    def __init__(
        self,
        router: str = "least_outstanding",
        reuse_times_s: Sequence[float] = REUSE_TIMES_S,
        half_life_s: float = 3600.0,
        fixed: WarmthParams | None = None,
    ) -> None:
        if router not in ROUTERS:
            raise ValueError(f"router must be one of {ROUTERS}, got {router!r}")
        if not reuse_times_s or min(reuse_times_s) <= 0 or half_life_s <= 0:
            raise ValueError("reuse_times_s must be non-empty and positive, half_life_s positive")
        self.router = router
        self.half_life_s = half_life_s
        self.fixed = fixed
        self._fits = [_Fit(float(t)) for t in ((fixed.reuse_time_s,) if fixed else reuse_times_s)]
        self._misses: dict[Hashable, deque[tuple[float, float, float]]] = {}
        self._t_prev: float | None = None
        self._samples = 0

    @property
    def params(self) -> WarmthParams | None:
        """``fixed``, else the best fit, or None before ``MIN_SAMPLES`` replica-intervals with traffic."""
        if self.fixed:
            return self.fixed
        if self._samples < MIN_SAMPLES:
            return None
        a, b, _, tau = min(((*f.solve(), f.tau) for f in self._fits), key=lambda r: r[2])
        return WarmthParams(a, b, tau)

    def _regressor(self, evict: np.ndarray, share: np.ndarray, p: np.ndarray) -> np.ndarray:
        """x_r = E_r S_r, divided by p_r under prefix affinity (a replica with no share keeps E_r S_r)."""
        x = evict * share
        return x / np.where(p > 0, p, 1.0) if self.router == "prefix_affinity" else x

    def observe(self, t_s: float, samples: Sequence[ReplicaSample]) -> None:
        """Learn from one interval ending at ``t_s`` (seconds), one sample per serving replica.

        The first call only initialises the replicas' state (there is no interval yet), each replica
        as if it had served its share of this call's queries since its ``ready_s`` (equal shares
        when no replica saw a query); a later call in which no replica saw a query leaves the state
        as it is.

        Raises:
            ValueError: ``t_s`` not after the previous call's, or negative counter increases.
        """
        if self._t_prev is not None and t_s <= self._t_prev:
            raise ValueError(f"observe times must increase: {t_s} after {self._t_prev}")
        if any(s.hits_tokens < 0 or s.queries_tokens < 0 for s in samples):
            raise ValueError("counter increases must be >= 0 (a reset counter is the caller's to handle)")
        ids = [s.replica_id for s in samples]
        q = np.array([s.queries_tokens for s in samples], dtype=np.float64)
        hits = np.array([s.hits_tokens for s in samples], dtype=np.float64)
        total = q.sum()
        t_prev = t_s if self._t_prev is None else self._t_prev
        self._t_prev = t_s
        learn = t_s > t_prev and total > 0
        # no query at all (e.g. the first call): shares unknown, taken as equal for replicas first seen now
        p = q / total if total > 0 else np.full(len(q), 1.0 / max(len(q), 1))
        self._misses = {rid: self._misses.get(rid, deque()) for rid in ids}
        # measured before this interval's misses join, so a burst of hits cannot inflate its own regressor
        horizon = np.array([_eviction_horizon(self._misses[s.replica_id], t_prev, s.kv_cache_tokens) for s in samples])
        for s, miss in zip(samples, q - hits, strict=True):
            history = self._misses[s.replica_id]
            if miss > 0:  # an interval without misses cannot move the horizon: not kept
                history.append((max(t_prev, s.ready_s), t_s, float(miss)))
            while history and history[0][1] < t_s - MISS_HISTORY_S:
                history.popleft()
        # a replica that became ready inside the interval has served only since then
        served_s = t_s - np.maximum(t_prev, np.array([s.ready_s for s in samples], dtype=np.float64))
        used = q > 0
        forget = 0.5 ** ((t_s - t_prev) / self.half_life_s)
        for f in self._fits:
            # a replica seen for the first time: the state a constant share since ready_s would give
            fresh = [_erlang_stages(p[i], t_prev - s.ready_s, f.tau) for i, s in enumerate(samples)]
            start = np.array([f.stages.get(rid, fresh[i]) for i, rid in enumerate(ids)]).reshape(len(ids), SHAPE)
            end = _advance(start, p, served_s, f.tau) if learn else start
            f.stages = dict(zip(ids, end, strict=True))  # a replica absent from this call is gone
            if not learn:
                continue
            mid = 0.5 * (start[:, -1] + end[:, -1])
            x = self._regressor(reuse_cdf(horizon, f.tau), mid, p)[used]
            w, y = q[used], hits[used] / q[used]
            f.stats = forget * f.stats + np.array([w.sum(), w @ x, w @ x**2, w @ y, w @ (x * y), w @ y**2])
        if learn:
            self._samples += int(used.sum())

    def predict(
        self,
        t_s: float,
        plan: Sequence[ReplicaPlan],
        horizon_s: float,
        step_s: float,
        rate_rps: float,
        mean_input_tokens: float,
    ) -> WarmthForecast:
        """Hit rates over the next ``horizon_s`` seconds in steps of ``step_s`` for the fleet in ``plan``.

        Args:
            t_s: now, seconds (normally the last ``observe`` time).
            plan: every replica of the planned fleet: current ones, added ones (future ``ready_s``)
                and removed ones (``removed_s``).
            horizon_s, step_s: prediction span and step, seconds (> 0).
            rate_rps: expected request rate of the fleet, requests/s (>= 0).
            mean_input_tokens: expected mean prompt length, tokens (>= 0).

        Requests are shared by ``weight`` among the replicas serving at mid-step; a replica the model
        has not observed starts from the state a constant share since its ``ready_s`` would give. The
        learned states date from the last ``observe``; the time from then to ``t_s`` is run with the
        shares of the replicas serving at ``t_s``.

        Raises:
            ValueError: non-positive ``horizon_s``/``step_s``, negative rate or prompt length.
        """
        if horizon_s <= 0 or step_s <= 0 or rate_rps < 0 or mean_input_tokens < 0:
            raise ValueError("horizon_s and step_s must be > 0, rate_rps and mean_input_tokens >= 0")
        learned = self.params
        params = learned or WarmthParams(0.0, 0.0, REUSE_TIMES_S[0])
        known = next((f.stages for f in self._fits if f.tau == params.reuse_time_s), {}) if learned else {}
        tau = params.reuse_time_s
        times = t_s + step_s * np.arange(1, math.ceil(horizon_s / step_s) + 1)
        weight = np.array([r.weight for r in plan], dtype=np.float64)
        capacity = np.array([r.kv_cache_tokens for r in plan], dtype=np.float64)
        ready_at = np.array([r.ready_s for r in plan])
        removed_at = np.array([math.inf if r.removed_s is None else r.removed_s for r in plan])
        now = (ready_at <= t_s) & (t_s < removed_at)
        p_now = np.where(now, weight, 0.0) / max(float(weight[now].sum()), 1e-300)
        # The learned states are as of the last observation (t0); carry every replica to t_s with
        # today's shares, so the held shares stay consistent (they sum to at most 1).
        t0 = min(self._t_prev, t_s) if known and self._t_prev is not None else t_s
        stages = np.array(
            [known.get(r.replica_id, _erlang_stages(p_now[i], t0 - r.ready_s, tau)) for i, r in enumerate(plan)]
        ).reshape(len(plan), SHAPE)
        if t0 < t_s:
            served = t_s - np.maximum(t0, ready_at)
            stages = np.where(now[:, None], _advance(stages, p_now, served, tau), stages)
        fleet = np.full(len(times), np.nan)  # a step in which no replica serves has no hit rate
        per = np.full((len(plan), len(times)), np.nan)
        hit = np.full(len(plan), params.shared_hit)
        for j, t in enumerate(times):
            t_mid = t - step_s / 2
            serving = (ready_at <= t_mid) & (t_mid < removed_at)
            stages[t_mid >= removed_at] = 0.0  # a removed replica's cache is gone
            if not serving.any():
                continue
            p = np.where(serving, weight, 0.0) / weight[serving].sum()
            start = stages[:, -1].copy()
            stages = np.where(serving[:, None], _advance(stages, p, step_s, tau), stages)
            mid = 0.5 * (start + stages[:, -1])
            for _ in range(FIXED_POINT_ITERATIONS):
                miss = rate_rps * p * mean_input_tokens * (1 - hit)
                evict = np.divide(capacity, miss, out=np.full(len(plan), math.inf), where=miss > 0)
                x = self._regressor(reuse_cdf(evict, tau), mid, p)
                hit = np.clip(params.shared_hit + params.reuse_hit * x, 0.0, 1.0)
            per[serving, j] = hit[serving]
            fleet[j] = float(p[serving] @ hit[serving])
        return WarmthForecast(times, fleet, {r.replica_id: per[i] for i, r in enumerate(plan)})
