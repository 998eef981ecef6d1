"""The loop's cache-warmth stage (autoscaler.loop.warmth): counters to model samples, hand-computed
predictions, unknown never read as zero, and the stage wired into the loop, timeline and exports."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.adapters.simulator import SimActuator, SimMetricsSource
from autoscaler.config import FleetConfig, ForecastConfig
from autoscaler.loop.estimate import estimate
from autoscaler.loop.export import LoopMetrics
from autoscaler.loop.runner import ControlLoop
from autoscaler.loop.warmth import WARM_AGE_S, WarmthStage
from autoscaler.report import timeline_rows
from autoscaler.simulate import run_simulation
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.state import PodObservation, ServiceObservation, Signals, VariantObservation
from autoscaler.workload.types import Request, Workload
from controllers.registry import build
from models.cache_warmth import CacheWarmthModel, ReplicaSample, WarmthParams

HUGE_KV = 10**15  # eviction horizon effectively infinite: every reusable prefix is still cached


def pod(name: str, hits: float | None, queries: float | None, ready_s: float | None = None) -> PodObservation:
    return PodObservation("h100", 0.1, 0.0, 1.0, 0.1, 0.0, name=name, prefix_hits_total=hits,
                          prefix_queries_total=queries, ready_s=ready_s)


def tick(cfg: FleetConfig, t: float, pods: list[PodObservation], starting: int = 0,
         rate: float | None = 10.0, ready: int | None = None) -> Any:
    prompt = None if rate is None else 1000 * rate
    sig: dict[str, float | None] = {"request_rate_rps": rate, "prompt_tokens_rps": prompt}
    n = len(pods) if ready is None else ready
    obs = ServiceObservation("svc", t, Signals.of(sig), {"h100": VariantObservation(n, starting, 0, Signals.of(sig))},
                             pods=pods)
    return estimate(obs, cfg.services[0], {"h100": 5.0})


class Spy(CacheWarmthModel):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[float, list[ReplicaSample]]] = []

    def observe(self, t_s: float, samples: Any) -> None:
        self.calls.append((t_s, list(samples)))
        super().observe(t_s, samples)


def test_counters_become_increases_with_ready_times(make_fleet) -> None:
    cfg = make_fleet(3, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 100.0, [pod("a", 50, 100), pod("b", 10, 40)]))
    # a pod without counters: an incomplete tick, not learned (the model would read c as removed)
    stage.apply(tick(cfg, 115.0, [pod("a", 60, 120), pod("b", 10, 50), pod("c", None, None)]))
    # b's counters went down: a restarted server. Its increase is unknown, so the model only
    # restarts its interval here (every increase 0).
    stage.apply(tick(cfg, 130.0, [pod("a", 80, 160), pod("b", 3, 5), pod("c", 30, 70)]))
    stage.apply(tick(cfg, 145.0, [pod("a", 90, 190), pod("b", 13, 25), pod("c", 40, 90)]))
    assert [t for t, _ in spy.calls] == [100.0, 130.0, 145.0]
    first = {s.replica_id: s for s in spy.calls[0][1]}
    # the first complete tick: warm pods (served for an unknown time), their readings a baseline
    assert first["a"].ready_s == first["b"].ready_s == 100.0 - WARM_AGE_S
    assert (first["a"].hits_tokens, first["a"].queries_tokens) == (0.0, 0.0)
    restart = {s.replica_id: (s.ready_s, s.hits_tokens, s.queries_tokens) for s in spy.calls[1][1]}
    # the restarted b is a new replica, cold from 130 s; c (no source ready time: it may be an old
    # pod that was hidden) joins cold from 130 s too
    assert restart == {"a": (100.0 - WARM_AGE_S, 0.0, 0.0), "b#1": (130.0, 0.0, 0.0), "c": (130.0, 0.0, 0.0)}
    second = {s.replica_id: (s.hits_tokens, s.queries_tokens) for s in spy.calls[2][1]}
    assert second == {"a": (10.0, 30.0), "b#1": (10.0, 20.0), "c": (10.0, 20.0)}  # since 130 s
    assert all(s.kv_cache_tokens == 400_000 for s in spy.calls[2][1])


def test_a_new_process_since_the_last_learned_tick_brings_its_whole_counter(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 0, 0)]))
    stage.apply(tick(cfg, 15.0, [pod("a", 10, 20), pod("c", 4, 9, ready_s=6.0)]))  # c scaled up at 6 s
    got = {s.replica_id: (s.ready_s, s.hits_tokens, s.queries_tokens) for s in spy.calls[-1][1]}
    assert got == {"a": (-WARM_AGE_S, 10.0, 20.0), "c": (6.0, 4.0, 9.0)}
    # without a source ready time a new name may be an old pod that was hidden: cold, interval restart
    stage.apply(tick(cfg, 30.0, [pod("a", 20, 40), pod("c", 8, 18, ready_s=6.0), pod("d", 9e8, 1e9)], ready=3))
    got = {s.replica_id: (s.ready_s, s.queries_tokens) for s in spy.calls[-1][1]}
    assert got == {"a": (-WARM_AGE_S, 0.0), "c": (6.0, 0.0), "d": (30.0, 0.0)}


@pytest.mark.parametrize("second", [0.0, -10.0])
def test_a_restart_on_a_repeated_or_earlier_timestamp_is_kept(make_fleet, second: float) -> None:
    cfg = make_fleet(1, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 100, 200)]))
    stage.apply(tick(cfg, second, [pod("a", 5, 10)]))  # counters went down; the clock did not advance
    stage.apply(tick(cfg, 15.0, [pod("a", 150, 300)]))
    assert [(s.replica_id, s.ready_s, s.queries_tokens) for s in spy.calls[-1][1]] == [("a#1", 0.0, 0.0)]


def test_a_pod_missing_for_a_tick_continues_from_its_last_reading(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 3e8, 5e8), pod("b", 3e8, 5e8)]))
    stage.apply(tick(cfg, 15.0, [pod("a", 3e8 + 3e3, 5e8 + 1e4)], ready=2))  # b's query failed
    stage.apply(tick(cfg, 30.0, [pod("a", 3e8 + 6e3, 5e8 + 2e4), pod("b", 3e8 + 6e3, 5e8 + 2e4)]))
    got = {s.replica_id: (s.hits_tokens, s.queries_tokens) for s in spy.calls[-1][1]}
    assert got == {"a": (6e3, 2e4), "b": (6e3, 2e4)}  # not b's lifetime counters


def test_the_first_tick_with_pods_sets_the_warm_baseline(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [], ready=0))  # every query failed on the first tick
    stage.apply(tick(cfg, 15.0, [pod("a", 3e8, 5e8), pod("b", 3e8, 5e8)]))
    [(_, samples)] = spy.calls
    assert [(s.ready_s, s.queries_tokens) for s in samples] == [(15.0 - WARM_AGE_S, 0.0)] * 2


@pytest.mark.parametrize("bad", [(float("nan"), 10.0), (5.0, float("inf")), (-1.0, 10.0), (20.0, 10.0)])
def test_an_absurd_counter_is_unknown_for_its_tick(make_fleet, bad: tuple[float, float]) -> None:
    cfg = make_fleet(1, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 0, 0)]))
    stage.apply(tick(cfg, 15.0, [pod("a", *bad)]))
    stage.apply(tick(cfg, 30.0, [pod("a", 5, 10)]))
    assert [t for t, _ in spy.calls] == [0.0, 30.0]
    assert (spy.calls[1][1][0].hits_tokens, spy.calls[1][1][0].queries_tokens) == (5.0, 10.0)


def test_a_pod_listed_twice_does_not_break_the_tick(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    est = tick(cfg, 0.0, [pod("a", 0, 0), pod("a", 0, 0)], ready=2)
    est = stage.apply(est)
    assert spy.calls == [] and est.signals.prefix_hit_rate_forecast is None


def test_a_count_mismatch_or_a_source_ready_time(make_fleet) -> None:
    cfg = make_fleet(3, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    # three replicas ready but two pods reported: no learning
    stage.apply(tick(cfg, 10.0, [pod("a", 0, 0), pod("b", 0, 0)], ready=3))
    assert spy.calls == []
    stage.apply(tick(cfg, 25.0, [pod("a", 5, 10, ready_s=-40.0), pod("b", 5, 10)]))
    (_, samples), = spy.calls
    assert samples[0].ready_s == -40.0  # the source's ready time wins over the first-tick rule


def test_hand_computed_fleet_hit_rates(make_fleet) -> None:
    # Fixed parameters, a cache so large nothing is evicted (E = 1), shared 0.1, reusable 0.6.
    cfg = make_fleet(2, max_replicas=4, kv_cache_tokens=HUGE_KV, startup_s=10.0)
    fc = ForecastConfig(enabled=True, horizon_s=300, step_s=60)
    params = WarmthParams(shared_hit=0.1, reuse_hit=0.6, reuse_time_s=120.0)

    def run(router: str, starting: int) -> float | None:
        stage = WarmthStage(fc, cfg.services[0], router, model=CacheWarmthModel(router, fixed=params))
        pods = [pod("a", 0, 0), pod("b", 0, 0)]
        stage.apply(tick(cfg, 0.0, pods))
        est = tick(cfg, 15.0, pods, starting=starting)
        est = stage.apply(est)
        return est.signals.prefix_hit_rate_forecast

    # Placement ignores the cache: each of N warm replicas holds 1/N of the reusable prefixes and gets
    # 1/N of the requests: fleet = 0.1 + 0.6 / N.
    assert run("least_outstanding", 0) == pytest.approx(0.1 + 0.6 / 2, abs=1e-9)
    # A third replica starting (ready in 10 s): the replicas' held shares always sum to 1 (all are
    # driven by shares summing to 1 from a total of 1), and each gets 1/3: fleet = 0.1 + 0.6 / 3.
    assert run("least_outstanding", 1) == pytest.approx(0.1 + 0.6 / 3, abs=1e-9)
    # Prefix affinity: a request goes where its prefix is, so every reusable prefix hits: 0.1 + 0.6.
    assert run("prefix_affinity", 0) == pytest.approx(0.1 + 0.6, abs=1e-9)


def test_unknown_until_learned_or_when_the_load_is_unknown(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    fc = ForecastConfig(enabled=True)
    stage = WarmthStage(fc, cfg.services[0], "least_outstanding")
    est = tick(cfg, 0.0, [pod("a", 0, 0), pod("b", 0, 0)])
    est = stage.apply(est)
    assert est.signals.prefix_hit_rate_forecast is None  # nothing learned: unknown, not 0
    fixed = CacheWarmthModel(fixed=WarmthParams(0.2, 0.0, 60.0))
    stage = WarmthStage(fc, cfg.services[0], "least_outstanding", model=fixed)
    est = tick(cfg, 0.0, [pod("a", 0, 0)], rate=None)
    est = stage.apply(est)
    assert est.signals.prefix_hit_rate_forecast is None


def system_prompt_load(rate_rps: float, duration_s: float) -> Workload:
    """1,024-token prompts whose first 512-token block is one shared system prompt, the rest unique."""
    n = int(rate_rps * duration_s)
    return Workload([Request(arrival_s=i / rate_rps, input_tokens=1024, output_tokens=20, hash_ids=(1, 100 + i))
                     for i in range(n)], block_tokens=512)


def test_the_loop_forecasts_the_shared_prompt_hit_rate(make_fleet) -> None:
    # Every request after a replica's first hits exactly its 512-token system-prompt block: 512/1024.
    # Requests 0.25 s apart finish before the next arrives, so one replica takes them all and the model
    # has its MIN_SAMPLES = 20 replica-intervals with traffic after 20 ticks (300 s); unknown before.
    cfg = make_fleet(2, controller={"forecast": {"enabled": True, "horizon_s": 300, "step_s": 60}})
    run = run_simulation(cfg, system_prompt_load(4.0, 900.0), "pid")
    rows = timeline_rows(run)
    assert all(r["forecast_prefix_hit_rate"] is None for r in rows if r["time_s"] < 300)
    late = [r for r in rows if r["time_s"] >= 330]
    assert late and all(r["forecast_prefix_hit_rate"] == pytest.approx(0.5, abs=0.01) for r in late)


def test_the_forecast_hit_rate_is_exported(make_fleet) -> None:
    cfg = make_fleet(1, controller={"forecast": {"enabled": True}})
    sim = FleetSimulator(cfg, system_prompt_load(2.0, 400.0))
    loop = ControlLoop(cfg, SimMetricsSource(sim, 60.0), SimActuator(sim), build("pid", cfg))
    metrics = LoopMetrics(loop, CollectorRegistry())
    for k in range(1, 26):  # 20 ticks with traffic before the model reports (see the test above)
        sim.run_until(15.0 * k)
        metrics.record(loop.tick(15.0 * k), 0.001)
    text = generate_latest(metrics.registry).decode()
    line = next(x for x in text.splitlines() if x.startswith('autoscaler_forecast_prefix_hit_rate{service="svc"}'))
    assert float(line.split()[-1]) == pytest.approx(0.5, abs=0.01)


FIXED = WarmthParams(shared_hit=0.1, reuse_hit=0.6, reuse_time_s=600.0)


def fixed_stage(cfg: FleetConfig) -> tuple[WarmthStage, Spy]:
    spy = Spy()
    spy.fixed = FIXED
    spy._fits = CacheWarmthModel(fixed=FIXED)._fits
    return WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy), spy


def test_a_pod_back_after_ticks_learned_without_it_starts_from_a_new_reading(make_fleet) -> None:
    # Two equal warm replicas under cache-blind placement hold at most 0.1 + 0.6 / 2 = 0.40.
    cfg = make_fleet(2, max_replicas=4, kv_cache_tokens=HUGE_KV)
    stage, spy = fixed_stage(cfg)
    stage.apply(tick(cfg, 0.0, [pod("a", 0, 0), pod("b", 0, 0)]))
    for i, t in enumerate((15.0, 30.0, 45.0)):  # b gone, and the ready count with it: learned without b
        stage.apply(tick(cfg, t, [pod("a", 1e4 * (i + 1), 2e4 * (i + 1))], ready=1))
    stage.apply(tick(cfg, 60.0, [pod("a", 4e4, 8e4), pod("b", 4e4, 8e4)]))
    # b's increase is unknown on the tick it comes back: the model only restarts its interval
    assert spy.calls[-1][0] == 60.0 and all(s.queries_tokens == 0.0 for s in spy.calls[-1][1])
    est = tick(cfg, 75.0, [pod("a", 5e4, 1e5), pod("b", 5e4, 1e5)])
    est = stage.apply(est)
    # b is a new, cold replica to the model (its share of the cache went to a while it was away)
    got = {s.replica_id: (s.queries_tokens, s.ready_s) for s in spy.calls[-1][1]}
    assert got == {"a": (2e4, -WARM_AGE_S), "b": (2e4, 60.0)}  # the model dropped the old b at 15 s
    assert est.signals.prefix_hit_rate_forecast <= 0.40 + 1e-9


def test_pods_seen_before_the_first_complete_tick_are_warm(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4, kv_cache_tokens=HUGE_KV)
    stage, spy = fixed_stage(cfg)
    stage.apply(tick(cfg, 0.0, [pod("a", 3e8, 5e8)], ready=2))  # b's gauges missing on the first scrape
    est = tick(cfg, 15.0, [pod("a", 3e8 + 1e4, 5e8 + 2e4), pod("b", 3e8 + 1e4, 5e8 + 2e4)])
    est = stage.apply(est)
    assert [(s.ready_s, s.queries_tokens) for s in spy.calls[0][1]] == [(15.0 - WARM_AGE_S, 0.0)] * 2
    assert est.signals.prefix_hit_rate_forecast == pytest.approx(0.1 + 0.6 / 2, abs=1e-9)


def test_a_name_unseen_for_retain_s_comes_back_as_a_new_cold_replica(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 0, 0), pod("b", None, None)]))
    stage.apply(tick(cfg, 15.0, [pod("a", 10, 20)], ready=1))
    stage.apply(tick(cfg, 4000.0, [pod("a", 30, 60)], ready=1))
    stage.apply(tick(cfg, 4015.0, [pod("a", 40, 80), pod("b", 500, 1000)]))
    b = next(s for s in spy.calls[-1][1] if s.replica_id == "b")
    # forgotten, so not a warm baseline; no source ready time, so its counter is not an increase
    assert (b.ready_s, b.hits_tokens, b.queries_tokens) == (4015.0, 0.0, 0.0)


def test_a_ready_time_in_the_future_is_now_and_never_a_zero_forecast(make_fleet) -> None:
    cfg = make_fleet(1, max_replicas=4, kv_cache_tokens=HUGE_KV)
    stage, spy = fixed_stage(cfg)
    est = tick(cfg, 0.0, [pod("a", 0, 0, ready_s=400.0)])  # a skewed source clock
    est = stage.apply(est)
    assert spy.calls[0][1][0].ready_s == 0.0
    assert est.signals.prefix_hit_rate_forecast is not None and est.signals.prefix_hit_rate_forecast >= 0.1


def test_pods_counted_late_never_push_the_held_shares_above_one(make_fleet) -> None:
    # A scale-up whose new pod reports no counters for 10 minutes, a pod listed without counters that
    # comes back with its lifetime counter, and a pod whose source says it is old but the model never
    # saw: under cache-blind placement N replicas hold at most 0.1 + 0.6 / N.
    cfg = make_fleet(3, max_replicas=4, kv_cache_tokens=HUGE_KV)
    stage, _ = fixed_stage(cfg)
    stage.apply(tick(cfg, 0.0, [pod("a", 0, 0), pod("b", 0, 0)]))
    for k in range(1, 40):
        t = 15.0 * k
        c = pod("c", 4e5 + k, 8e5 + 2 * k) if t >= 600 else pod("c", None, None)
        est = tick(cfg, t, [pod("a", 1e4 * k, 2e4 * k), pod("b", 1e4 * k, 2e4 * k), c])
        est = stage.apply(est)
        assert est.signals.prefix_hit_rate_forecast <= 0.1 + 0.6 / 3 + 1e-9
    two = make_fleet(2, max_replicas=4, kv_cache_tokens=HUGE_KV)
    stage, _ = fixed_stage(two)
    stage.apply(tick(two, 0.0, [pod("a", 0, 0)], ready=1))
    for k in range(1, 5):
        old = [pod("b", 3e8 + k, 5e8 + k, ready_s=-7200.0)] if k >= 2 else []
        est = tick(two, 15.0 * k, [pod("a", 1e4 * k, 2e4 * k), *old])
        est = stage.apply(est)
        assert est.signals.prefix_hit_rate_forecast <= 0.1 + 0.6 / (1 + len(old)) + 1e-9


def test_a_restart_seen_on_an_incomplete_tick_is_not_missed(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 100, 200), pod("b", 100, 200)]))
    stage.apply(tick(cfg, 15.0, [pod("a", 5, 10)], ready=2))  # a restarted; b's query failed
    stage.apply(tick(cfg, 30.0, [pod("a", 150, 300), pod("b", 150, 300)]))  # a is past its old reading
    ids = {s.replica_id: s.ready_s for s in spy.calls[-1][1]}
    assert ids == {"a#1": 15.0, "b": -WARM_AGE_S}


@pytest.mark.parametrize("router", ["least_outstanding", "prefix_affinity"])
def test_random_pod_churn_never_crashes_or_breaks_the_share_bound(make_fleet, router: str) -> None:
    # With equal weights and a cache too large to evict, N replicas hold at most 0.1 + 0.6 / N
    # (cache-blind placement) or 0.1 + 0.6 (prefix affinity): the held shares sum to at most 1.
    cfg = make_fleet(4, max_replicas=8, kv_cache_tokens=HUGE_KV)
    for seed in range(30):
        rng = np.random.default_rng(seed)
        spy = Spy()
        spy.fixed, spy.router = FIXED, router
        spy._fits = CacheWarmthModel(fixed=FIXED)._fits
        stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], router, model=spy)
        counters = {n: [0.0, 0.0] for n in "abcdef"}
        live = {"a", "b"}
        t = 0.0
        for _ in range(60):
            t += 15.0 if rng.random() > 0.05 else 4000.0  # now and then a gap longer than RETAIN_S
            if rng.random() < 0.15:
                live ^= {str(rng.choice(list("abcdef")))}
            for n in live:
                if rng.random() < 0.05:
                    counters[n] = [0.0, 0.0]  # restart
                q = float(rng.integers(0, 2000))
                counters[n][0] += float(rng.integers(0, int(q) + 1))
                counters[n][1] += q
            pods = [pod(n, *counters[n]) if rng.random() > 0.1 else pod(n, None, None) for n in sorted(live)]
            ready = len(pods) + (int(rng.integers(-1, 2)) if rng.random() < 0.1 else 0)
            starting = int(rng.integers(0, 2))
            est = tick(cfg, t, pods, starting=starting, ready=max(ready, 0))
            est = stage.apply(est)
            x = est.signals.prefix_hit_rate_forecast
            if x is None:
                continue
            n = len(pods) + starting
            bound = 0.1 + 0.6 if router == "prefix_affinity" else 0.1 + 0.6 / n
            assert 0.0 <= x <= bound + 1e-9, (seed, t)


@pytest.mark.parametrize(("router", "bound"), [("least_outstanding", 0.1 + 0.6 / 2), ("prefix_affinity", 0.7)])
def test_an_old_restart_mark_does_not_bring_a_pod_back_warm(make_fleet, router: str, bound: float) -> None:
    cfg = make_fleet(2, max_replicas=4, kv_cache_tokens=HUGE_KV)
    spy = Spy()
    spy.fixed, spy.router, spy._fits = FIXED, router, CacheWarmthModel(fixed=FIXED)._fits
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], router, model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 0, 0), pod("b", 100, 200)]))
    stage.apply(tick(cfg, 15.0, [pod("a", 10, 20), pod("b", 5, 10)], ready=3))  # b restarted; incomplete
    for k in range(2, 200):  # b gone for 50 minutes, learned without it
        stage.apply(tick(cfg, 15.0 * k, [pod("a", 10 * k, 20 * k)], ready=1))
    est = tick(cfg, 3000.0, [pod("a", 2000, 4000), pod("b", 50, 100)])
    est = stage.apply(est)
    assert {s.replica_id: s.ready_s for s in spy.calls[-1][1]}["b"] == 3000.0
    assert est.signals.prefix_hit_rate_forecast <= bound + 1e-9


def test_a_pod_the_model_holds_keeps_its_baseline_through_a_long_gap(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 3e8, 5e8), pod("b", 3e8, 5e8)]))
    for k in range(1, 250):  # b's metrics missing for over an hour while it still serves: nothing learned
        stage.apply(tick(cfg, 15.0 * k, [pod("a", 3e8 + 1e3 * k, 5e8 + 2e3 * k)], ready=2))
    stage.apply(tick(cfg, 3750.0, [pod("a", 3e8 + 2.5e5, 5e8 + 5e5), pod("b", 3e8 + 2.5e5, 5e8 + 5e5)]))
    assert spy.calls[-1][0] == 3750.0
    got = {s.replica_id: (s.hits_tokens, s.queries_tokens) for s in spy.calls[-1][1]}
    assert got == {"a": (2.5e5, 5e5), "b": (2.5e5, 5e5)}  # both over the same 0 -> 3750 s interval


def test_a_source_ready_time_shows_a_restart_the_counters_hide(make_fleet) -> None:
    cfg = make_fleet(2, max_replicas=4)
    spy = Spy()
    stage = WarmthStage(ForecastConfig(enabled=True), cfg.services[0], "least_outstanding", model=spy)
    stage.apply(tick(cfg, 0.0, [pod("a", 0, 0, ready_s=-7200.0), pod("b", 100, 200, ready_s=-7200.0)]))
    stage.apply(tick(cfg, 15.0, [pod("a", 10, 20, ready_s=-7200.0), pod("b", 500, 1000, ready_s=5.0)]))
    got = {s.replica_id: (s.ready_s, s.queries_tokens) for s in spy.calls[-1][1]}
    assert got == {"a": (-7200.0, 0.0), "b#1": (5.0, 0.0)}  # a new incarnation: the interval restarts
