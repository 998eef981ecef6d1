"""Benchmark: load forecasters against the Dynamo planner's predictors, and the cache-warmth model.

Forecasting (default section). Series, all real:
  * ServeGen (Alibaba, arXiv:2505.09999) language/m-large and m-mid: total request rate per 600-s
    window over 14 days (``servegen/DERIVED_aggregate_rate_per_window.csv``). The seasonal period is
    one day = 144 windows. A window with no active client at all (84 windows of m-mid, in runs of
    6-12 next to ~2,000 req/s) is a collection gap: it is fed to the models as NaN (the Dynamo
    predictors turn it into 0, as they do) and never scored.
  * Azure LLM inference 2023 conv and code, Mooncake conversation: requests binned at ``--bin-s``
    (default 30 s): request rate (req/s), mean input tokens and mean output tokens per bin (NaN for
    a bin without requests). No seasonal period (each trace is one hour).

Protocol per series: the first half is training. Every model is fitted on the training half minus
a burn-in (the last 30 steps, or 144 for ServeGen), walked through the burn-in unscored (so the
interval trackers hold errors when scoring starts), then through the second half: at each origin it
forecasts 1..6 steps, is scored, and is updated with the next value. Intervals: every model's 90%
interval comes from its own recent errors (``models.forecast.intervals``). MASE scale: in-sample
one-step naive MAE of the training half (``models.forecast.metrics``). MAPE skips zero actuals.
``fit_s``: initial fit, seconds; ``tick_s``: mean update + forecast per step, seconds, re-selections
of ``auto`` included.

The goal, per series at 3 steps: ``auto`` below the best anchor (the Dynamo predictors) and at
least half way from it to the hindsight linear bound: the MASE of the best linear predictor from
the last 12 values (and the same step one and two seasons back), its coefficients fitted on the
scored half itself (``hindsight_linear_bound``), so no linear forecaster on those values does
better. ``--json`` adds one row per series with model ``hindsight_linear`` at ``horizon_steps`` 3
(that bound's MASE). The goal lines also give the MASE of a non-causal oracle (each scored value
predicted by the mean or median of its neighbours on both sides, ``smoother_bound``) and, for the
series binned from a trace, a sampling-noise floor (``noise_floor``): the MASE a forecaster would
reach if it knew each bin's expected count and mean length exactly, the Poisson and sampling error
of the bin's requests being all that is left (requests independent given the past).

Cache warmth (``--cache``, also run after the table without ``--json``): the Mooncake conversation
trace (real prefix hashes, workflows grouped, superposed 4x with disjoint hashes to cut sampling
noise) through the fleet simulator with 16 H100 replicas of ``CACHE_KV_TOKENS`` KV cache, ready at
t = 0 with empty caches, cold start 60 s. The model observes per-replica counter increases every
15 s. At 1,200 s the fleet scales 16 -> 24, at 2,400 s 24 -> 12; at each change the model
predicts the next 10 minutes per minute (rate and mean prompt of the previous 5 minutes as load),
and is compared with the simulated hit rate per minute. Baseline: the last 5 minutes' hit rate held.

    python benchmarks/forecast.py [--data ../shared/data] [--bin-s 15] [--json] [--cache]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from autoscaler.config.loading import parse_config
from autoscaler.simulator.engine import DRAINING, GONE, READY
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.classes import group_workflows
from autoscaler.workload.loader import load_trace
from autoscaler.workload.shaping import shape
from models.cache_warmth import CacheWarmthModel, ReplicaPlan, ReplicaSample, WarmthForecast, WarmthParams
from models.forecast.anchors import DynamoArima, DynamoConstant, DynamoKalman
from models.forecast.arima import AutoArima
from models.forecast.auto import AutoForecaster
from models.forecast.base import PointForecaster
from models.forecast.baselines import LastValue, SeasonalNaive
from models.forecast.ensemble import MedianEnsemble
from models.forecast.ets import HoltWinters
from models.forecast.intervals import ResidualIntervals
from models.forecast.llt import LocalLinearTrend
from models.forecast.metrics import (
    coverage,
    hindsight_linear_mae,
    mape,
    mase,
    mean_sampling_mad,
    naive_scale,
    poisson_mad,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
HORIZONS = (1, 3, 6)
MAX_H = max(HORIZONS)
SERVEGEN_PERIOD = 144  # one day of 600-s windows
ANCHORS = ("dynamo_constant", "dynamo_arima", "dynamo_kalman")
MODELS = ("last_value", "seasonal_naive", "holt_winters", "sarimax", "local_linear_trend", "median_ensemble")
CACHE_KV_TOKENS = (400_000, 2_000_000)  # examples/fleet.yaml H100 value; a 5x larger (offloaded) cache
CACHE_TICK_S = 15.0  # examples/fleet.yaml controller.tick_s
CACHE_EVENTS = ((1200.0, 24), (2400.0, 12))  # (time s, replicas after)


@dataclass
class Series:
    """One benchmark series: name, values (NaN = missing), seasonal period in steps, burn-in steps,
    and, for series binned from a trace, each bin's sampling-noise floor (``noise_floor``)."""

    name: str
    y: np.ndarray
    period: int | None
    burn: int
    floor_mae: np.ndarray | None = None


def servegen(data: Path) -> list[Series]:
    """ServeGen total rate per window for m-large and m-mid; windows with no active client are NaN."""
    rows: dict[str, list[float]] = {}
    with open(data / "servegen" / "DERIVED_aggregate_rate_per_window.csv", newline="") as f:
        for r in csv.DictReader(f):
            gap = int(r["active_clients"]) == 0
            rows.setdefault(r["category_model"], []).append(float("nan") if gap else float(r["sum_rate_rps"]))
    return [
        Series(f"servegen-{m}@600s:rate_rps", np.array(rows[f"language/{m}"]), SERVEGEN_PERIOD, SERVEGEN_PERIOD)
        for m in ("m-large", "m-mid")
    ]


def binned(path: Path, label: str, bin_s: float) -> list[Series]:
    """Request rate, mean input and mean output tokens per ``bin_s`` bin of a trace (last partial bin dropped)."""
    reqs = load_trace(path).requests
    t = np.array([r.arrival_s for r in reqs])
    n = int(t.max() // bin_s)
    idx = (t // bin_s).astype(int)
    keep = idx < n
    idx = idx[keep]
    count = np.bincount(idx, minlength=n).astype(np.float64)
    tokens = {k: np.array([getattr(r, k) for r in reqs], dtype=np.float64)[keep]
              for k in ("input_tokens", "output_tokens")}
    means, floors = {}, {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for k, x in tokens.items():
            means[k] = np.bincount(idx, x, n) / count
            var = (np.bincount(idx, x * x, n) - count * means[k] ** 2) / (count - 1)
            floors[k] = np.where(count >= 2, mean_sampling_mad(np.sqrt(np.maximum(var, 0.0)), count), np.nan)
    tag = f"{label}@{bin_s:g}s"
    return [
        Series(f"{tag}:rate_rps", count / bin_s, None, 30, poisson_mad(count) / bin_s),
        Series(f"{tag}:mean_input_tokens", means["input_tokens"], None, 30, floors["input_tokens"]),
        Series(f"{tag}:mean_output_tokens", means["output_tokens"], None, 30, floors["output_tokens"]),
    ]


class Calibrated:
    """A point model plus the shared empirical interval, behind the same calls as ``AutoForecaster``."""

    def __init__(self, model: PointForecaster) -> None:
        self.model = model
        self.intervals = ResidualIntervals(MAX_H)
        self.sd1 = 0.0
        self.path = np.zeros(MAX_H)

    def fit(self, y: np.ndarray) -> None:
        self.model.fit(y)
        d = np.diff(y)
        self.sd1 = float(np.nanstd(d)) if np.isfinite(d).sum() > 1 else 0.0
        self.path = self.model.predict(MAX_H)
        self.intervals.record(self.path)

    def update(self, y: float) -> None:
        self.intervals.observe(y)
        self.model.update(y)
        self.path = self.model.predict(MAX_H)
        self.intervals.record(self.path)

    def forecast(self, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        path = self.path[:h]
        lo, hi = self.intervals.bounds(path, self.sd1)
        return path, np.maximum(lo, 0.0), np.maximum(hi, 0.0)


class Auto:
    """``AutoForecaster`` behind the benchmark's calls."""

    def __init__(self, period: int | None) -> None:
        self.inner = AutoForecaster(period, max_horizon=MAX_H, reselect_every=period or 60)

    def fit(self, y: np.ndarray) -> None:
        self.inner.fit(y)

    def update(self, y: float) -> None:
        self.inner.update(y)

    def forecast(self, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        f = self.inner.forecast(h)
        assert f is not None  # fit() saw finite values
        return f.mean, f.lower, f.upper


def models(period: int | None) -> dict[str, Callable[[], Calibrated | Auto]]:
    """Every model of the table, anchors first; seasonal variants get ``period``."""
    out: dict[str, Callable[[], Calibrated | Auto]] = {
        "dynamo_constant": lambda: Calibrated(DynamoConstant()),
        "dynamo_arima": lambda: Calibrated(DynamoArima()),
        "dynamo_kalman": lambda: Calibrated(DynamoKalman()),
        "last_value": lambda: Calibrated(LastValue()),
    }
    if period:
        out["seasonal_naive"] = lambda: Calibrated(SeasonalNaive(period))
    out["holt_winters"] = lambda: Calibrated(HoltWinters(period))
    out["sarimax"] = lambda: Calibrated(AutoArima(period))
    out["local_linear_trend"] = lambda: Calibrated(LocalLinearTrend())
    members = [LastValue, HoltWinters, AutoArima, LocalLinearTrend]
    out["median_ensemble"] = lambda: Calibrated(
        MedianEnsemble([m() for m in members] + ([SeasonalNaive(period)] if period else []))
    )
    out["auto"] = lambda: Auto(period)
    return out


def evaluate(series: Series, name: str, factory: Callable[[], Calibrated | Auto]) -> list[dict[str, object]]:
    """Fit, walk and score one model on one series; one row per horizon."""
    y = series.y
    n = len(y)
    n_train = n // 2
    n_fit = n_train - series.burn
    model = factory()
    t0 = time.perf_counter()
    model.fit(y[:n_fit])
    fit_s = time.perf_counter() - t0
    paths: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
    tick = 0.0
    for origin in range(n_fit - 1, n - 1):
        t0 = time.perf_counter()
        path, lo, hi = model.forecast(MAX_H)
        if origin >= n_train - 1:
            paths.append((origin, path, lo, hi))
        model.update(float(y[origin + 1]))
        tick += time.perf_counter() - t0
    scale = naive_scale(y[:n_train])
    rows = []
    for h in HORIZONS:
        sel = [(o, p, lo, hi) for o, p, lo, hi in paths if o + h < n]
        actual = np.array([y[o + h] for o, *_ in sel])
        point, lower, upper = (np.array([p[h - 1] for _, p, _, _ in sel]), np.array([lo[h - 1] for _, _, lo, _ in sel]),
                               np.array([hi[h - 1] for _, _, _, hi in sel]))
        rows.append(
            {
                "dataset": series.name,
                "horizon_steps": h,
                "model": name,
                "mase": mase(actual, point, scale),
                "mape": mape(actual, point),
                "coverage90": coverage(actual, lower, upper),
                "fit_s": fit_s,
                "tick_s": tick / (n - n_fit),
                "n_scored": int(np.isfinite(actual).sum()),
            }
        )
    return rows


def all_series(data: Path, bin_s: float) -> list[Series]:
    """The benchmark's series: ServeGen, then each trace's rate and token means per ``bin_s`` bin."""
    series = servegen(data)
    traces = [
        ("azure-conv", data / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"),
        ("azure-code", data / "azure-llm-2023" / "AzureLLMInferenceTrace_code.csv"),
        ("mooncake-conv", data / "mooncake" / "conversation_trace.jsonl"),
    ]
    for label, path in traces:
        series += binned(path, label, bin_s)
    return series


SMOOTHER_HALF_WIDTHS = (1, 2, 3, 5, 8, 12, 20)


def smoother_bound(s: Series) -> float:
    """MASE of a non-causal oracle: each scored value predicted by the mean or the median of its
    neighbours on both sides (itself left out), the best of either at the best half-width of
    ``SMOOTHER_HALF_WIDTHS``, chosen on the scored half.

    Not a forecaster: it sees the future. A forecaster that sees only the past rarely beats it, so
    where it misses a target the goal is very likely out of reach (not a proof: a series with
    structure beyond its local level can be forecast better).
    """
    y, half = s.y, len(s.y) // 2
    scale = naive_scale(y[:half])
    best = float("inf")
    for k in SMOOTHER_HALF_WIDTHS:
        errs: dict[str, list[float]] = {"mean": [], "median": []}
        for t in range(half, len(y)):
            win = np.r_[y[max(0, t - k):t], y[t + 1:t + 1 + k]]
            win = win[np.isfinite(win)]
            if np.isfinite(y[t]) and win.size:
                errs["mean"].append(abs(y[t] - win.mean()))
                errs["median"].append(abs(y[t] - np.median(win)))
        best = min(best, *(float(np.mean(e)) / scale for e in errs.values()))
    return best


HINDSIGHT_LAGS = 12  # past values the hindsight linear predictor reads (3 minutes at 15 s, 2 hours at 10 min)


def hindsight_linear_bound(s: Series, horizon: int = 3) -> float:
    """MASE at ``horizon`` steps of the best linear predictor from the last ``HINDSIGHT_LAGS`` values
    (and, for a seasonal series, the same step one and two seasons back), its coefficients fitted on
    the scored half itself (``models.forecast.metrics.hindsight_linear_mae``): where even it misses a
    target, no linear forecaster on those values meets it."""
    half = len(s.y) // 2
    mae = hindsight_linear_mae(s.y, half - 1, horizon, HINDSIGHT_LAGS, s.period)
    return mae / naive_scale(s.y[:half])


def noise_floor(s: Series) -> float | None:
    """Lower bound on any forecaster's MASE for a series binned from a trace: the mean sampling-noise
    floor (``models.forecast.metrics``; a bin's observed count stands in for its expected count, a
    bin's sample standard deviation for the length distribution's) over the scored half, over the
    MASE scale. None for series with no request samples behind them (ServeGen's aggregate rates).

    It holds under the sampling model: requests independent given the past. Turns of one
    conversation are not (a forecaster that tracks open conversations could do better on their
    lengths), so on Mooncake's token means it is an estimate, not a proof.
    """
    if s.floor_mae is None:
        return None
    half = len(s.y) // 2
    f = s.floor_mae[half:]
    ok = np.isfinite(s.y[half:]) & np.isfinite(f)
    return float(np.mean(f[ok])) / naive_scale(s.y[:half])


def forecast_rows(data: Path, bin_s: float, verbose: bool) -> list[dict[str, object]]:
    """Every (series, model, horizon) row."""
    rows: list[dict[str, object]] = []
    for s in all_series(data, bin_s):
        for name, factory in models(s.period).items():
            rows += evaluate(s, name, factory)
            if verbose:
                r = rows[-3:]
                print(f"  {s.name} {name}: " + " ".join(f"{x['mase']:.3f}" for x in r), flush=True)
    return rows


def print_table(rows: list[dict[str, object]], bounds: dict[str, float], floors: dict[str, float | None],
                linear: dict[str, float]) -> None:
    """One line per (dataset, model): MASE and coverage at each horizon, MAPE at 3 steps, timings;
    then the goal per dataset, with ``bounds`` (dataset -> ``smoother_bound``), ``floors``
    (dataset -> ``noise_floor``) and ``linear`` (dataset -> ``hindsight_linear_bound``) against its target."""
    by: dict[tuple[str, str], dict[int, dict[str, object]]] = {}
    for r in rows:
        by.setdefault((str(r["dataset"]), str(r["model"])), {})[int(str(r["horizon_steps"]))] = r
    head = f"{'dataset':44s} {'model':19s} " + " ".join(f"MASE@{h}" for h in HORIZONS)
    head += "  MAPE@3 " + " ".join(f"cov@{h}" for h in HORIZONS) + "   fit_s  tick_ms"
    current = ""
    for (ds, model), hs in by.items():
        if ds != current:
            print()
            print(head)
            current = ds
        cells = " ".join(f"{hs[h]['mase']:6.3f}" for h in HORIZONS)
        covs = " ".join(f"{hs[h]['coverage90']:5.2f}" for h in HORIZONS)
        r3 = hs[3]
        print(
            f"{ds:44s} {model:19s} {cells}  {r3['mape']:6.1f} {covs} "
            f"{r3['fit_s']:7.2f} {1000 * float(r3['tick_s']):8.2f}"  # type: ignore[arg-type]
        )
    print("\nGoal per series, MASE at 3 steps: auto below the best anchor (Dynamo predictors), and at least half"
          " way from it to the hindsight linear bound")
    for ds in dict.fromkeys(d for d, _ in by):
        best_anchor = min(ANCHORS, key=lambda m: by[(ds, m)][3]["mase"])  # type: ignore[arg-type,return-value]
        a = float(by[(ds, best_anchor)][3]["mase"])  # type: ignore[arg-type]
        ours = by[(ds, "auto")][3]
        m = float(ours["mase"])  # type: ignore[arg-type]
        cov = float(ours["coverage90"])  # type: ignore[arg-type]
        bound, floor, lin = bounds[ds], floors[ds], linear[ds]
        target = min(a, (a + lin) / 2)  # the bound above the anchor: beating the anchor is the goal
        closed = 100 * (a - m) / (a - lin) if a > lin else float("nan")
        ok = "MET" if m < a and m <= target else "not met"
        best = min((k for k in by if k[0] == ds and k[1] in MODELS), key=lambda k: by[k][3]["mase"])[1]  # type: ignore[arg-type,return-value]
        noise = "" if floor is None else f", noise floor {floor:.3f}"
        print(
            f"  {ds:44s} best anchor {best_anchor:16s} {a:.3f}  hindsight linear {lin:.3f}  target {target:.3f}"
            f"  auto {m:.3f} ({closed:+.0f}% of the gap)  cov {cov:.2f}  {ok}; best single model {best}"
            f" {float(by[(ds, best)][3]['mase']):.3f}, oracle {bound:.3f}{noise}"  # type: ignore[arg-type]
        )


def _cache_fleet(router: str, kv_tokens: int) -> dict[str, object]:
    """Fleet document: one service, 16 H100 replicas ready at t = 0, cold start 60 s, ``router``."""
    slo = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
    variant = {
        "name": "h100",
        "gpu": "H100-SXM",
        "gpus_per_replica": 1,
        "price_per_gpu_hour": 2.99,
        "min_replicas": 0,
        "max_replicas": 64,
        "initial_replicas": 16,
        "startup_cold_s": 60,
        "startup_warm_s": 60,
        "warm_nodes": 0,
        "kv_cache_tokens": kv_tokens,
        "profile": "llama-3-8b/h100-sxm",
    }
    service = {"name": "svc", "model": "m", "max_model_len": 131072, "slo": slo, "variants": [variant]}
    return {"services": [service], "simulator": {"router": router}}


Ticks = list[tuple[float, dict[int, tuple[float, float]]]]  # (tick end s, replica -> (hit, query tokens))


def _hit_rate(ticks: Ticks, t0: float, t1: float, replicas: list[int] | None = None) -> float:
    """Hit tokens / query tokens over ticks ending in (t0, t1] of ``replicas`` (None = all); NaN if no query."""
    hits = queries = 0.0
    for t, per in ticks:
        if t0 < t <= t1:
            for rid, (h, q) in per.items():
                if replicas is None or rid in replicas:
                    hits, queries = hits + h, queries + q
    return hits / queries if queries else float("nan")


@dataclass
class CacheEvent:
    """One scale event of the validation: the forecast made at it and what the simulator did."""

    router: str
    kv_tokens: int
    time_s: float
    forecast: WarmthForecast
    new: list[int]
    held: float
    actual: np.ndarray = field(default_factory=lambda: np.zeros(0))
    new_actual: np.ndarray = field(default_factory=lambda: np.zeros(0))
    params: WarmthParams | None = None

    @property
    def mae_pp(self) -> float:
        """Mean |simulated - predicted| fleet hit rate over the 10 minutes, percentage points."""
        return 100 * float(np.mean(np.abs(self.actual - self.forecast.fleet_hit_rate)))

    @property
    def held_mae_pp(self) -> float:
        """The same for the baseline that holds the last 5 minutes' hit rate."""
        return 100 * float(np.mean(np.abs(self.actual - self.held)))

    @property
    def new_mae_pp(self) -> float:
        """Mean |simulated - predicted| hit rate of the added replicas while serving (NaN: none added)."""
        if not self.new:
            return float("nan")
        per = np.array([self.forecast.replica_hit_rate[i] for i in self.new])
        serving = np.isfinite(per).sum(axis=0)
        pred = np.where(serving > 0, np.nansum(per, axis=0) / np.maximum(serving, 1), np.nan)
        ok = np.isfinite(self.new_actual) & np.isfinite(pred)
        return 100 * float(np.mean(np.abs(self.new_actual[ok] - pred[ok])))


def cache_validation(data: Path, router: str, kv_tokens: int) -> list[CacheEvent]:
    """Run the simulator with ``CACHE_EVENTS`` and score the model's forecast at each (module docstring)."""
    wl = shape(group_workflows(load_trace(data / "mooncake" / "conversation_trace.jsonl")), rate_scale=4.0)
    sim = FleetSimulator(parse_config(_cache_fleet(router, kv_tokens), "<cache validation>"), wl)
    model = CacheWarmthModel(router)
    seen: dict[int, tuple[float, float]] = {}
    ticks: Ticks = []
    out: list[CacheEvent] = []
    targets = dict(CACHE_EVENTS)
    t = 0.0
    while t < max(targets) + 600.0:
        t += CACHE_TICK_S
        sim.run_until(t)
        samples = []
        for r in sim.alive_replicas("svc"):
            if r.state in (READY, DRAINING):
                h0, q0 = seen.get(r.rid, (0.0, 0.0))
                seen[r.rid] = (r.metrics.prefix_hits, r.metrics.prefix_queries)
                dh, dq = r.metrics.prefix_hits - h0, r.metrics.prefix_queries - q0
                samples.append(ReplicaSample(r.rid, r.ready_s, dh, dq, kv_tokens))
        model.observe(t, samples)
        ticks.append((t, {int(str(s.replica_id)): (s.hits_tokens, s.queries_tokens) for s in samples}))
        if t in targets:
            recent = [r for r in wl.requests if t - 300 < r.arrival_s <= t]
            before = {r.rid for r in sim.alive_replicas("svc")}
            sim.set_replicas("svc", "h100", targets[t])
            plan = [
                ReplicaPlan(r.rid, r.ready_s, kv_tokens, removed_s=t if r.state in (DRAINING, GONE) else None)
                for r in sim.services["svc"].replicas
                if r.rid in before or r.state != GONE
            ]
            rate, prompt = len(recent) / 300, float(np.mean([r.input_tokens for r in recent]))
            f = model.predict(t, plan, 600.0, 60.0, rate, prompt)
            new = [r.rid for r in sim.alive_replicas("svc") if r.rid not in before]
            out.append(CacheEvent(router, kv_tokens, t, f, new, _hit_rate(ticks, t - 300, t), params=model.params))
    for e in out:
        minutes = [(e.time_s + 60 * k, e.time_s + 60 * (k + 1)) for k in range(10)]
        e.actual = np.array([_hit_rate(ticks, a, b) for a, b in minutes])
        e.new_actual = np.array([_hit_rate(ticks, a, b, e.new) for a, b in minutes])
    return out


def print_cache(data: Path) -> None:
    """The cache-warmth validation table: errors in percentage points, then hit rates per minute (%)."""
    print("\nCache warmth vs simulator (Mooncake conversation x4; 16 -> 24 replicas at 1200 s, 24 -> 12 at 2400 s)")
    print(
        f"{'router':18s} {'kv tokens':>9s} {'change':10s} {'learned shared/reuse/T_s':25s} "
        f"{'MAE_pp':>6s} {'held':>6s} {'new':>6s}  per minute: simulated / predicted (%)"
    )
    for router in ("least_outstanding", "prefix_affinity"):
        for kv in CACHE_KV_TOKENS:
            for e in cache_validation(data, router, kv):
                p = e.params
                learned = f"{p.shared_hit:.3f} / {p.reuse_hit:.3f} / {p.reuse_time_s:.0f}" if p else "-"
                change = "scale-up" if e.new else "scale-down"
                head = f"{router:18s} {kv:9d} {change:10s} {learned:25s} {e.mae_pp:6.2f} {e.held_mae_pp:6.2f}"
                print(f"{head} {e.new_mae_pp:6.2f}  " + " ".join(f"{100 * a:4.1f}" for a in e.actual))
                print(" " * (len(head) + 9) + " ".join(f"{100 * a:4.1f}" for a in e.forecast.fleet_hit_rate))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="folder holding the traces the series are built from")
    ap.add_argument("--bin-s", type=float, default=15.0, help="bin width for the per-request traces, seconds")
    ap.add_argument("--json", action="store_true", help="print the forecast rows as one JSON list")
    ap.add_argument("--cache", action="store_true", help="run only the cache-warmth validation")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", file=sys.stderr if args.json else sys.stdout, flush=True)
    # statsmodels' small state-space fits run 10-50x slower with OpenBLAS threads on a shared CPU
    with threadpool_limits(limits=1, user_api="blas"):
        run(args)


def run(args: argparse.Namespace) -> None:
    """The forecast table (or its JSON rows) and the cache-warmth validation, as ``args`` say."""
    if not args.cache:
        rows = forecast_rows(args.data, args.bin_s, verbose=not args.json)
        series = all_series(args.data, args.bin_s)
        linear = {s.name: hindsight_linear_bound(s) for s in series}
        if args.json:  # NaN (e.g. MAPE with only zero actuals) becomes null: strict JSON
            rows += [bound_row(name, value) for name, value in linear.items()]
            clean = [
                {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in r.items()} for r in rows
            ]
            print(json.dumps(clean, allow_nan=False))
            return
        print_table(rows, {s.name: smoother_bound(s) for s in series}, {s.name: noise_floor(s) for s in series},
                    linear)
    print_cache(args.data)


def bound_row(dataset: str, mase_value: float) -> dict[str, object]:
    """The JSON row of a series' hindsight linear bound: model ``hindsight_linear`` at 3 steps (its
    MASE; the other fields of a model row do not apply and are null)."""
    return {"dataset": dataset, "horizon_steps": 3, "model": "hindsight_linear", "mase": mase_value,
            "mape": None, "coverage90": None, "fit_s": None, "tick_s": None, "n_scored": None}


if __name__ == "__main__":
    main()
