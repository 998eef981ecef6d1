"""Admission on inter-token latency (issue 29): each replica held to the requests in flight its ITL
bound allows, by llm-d-router v0.10.0's ``concurrency-detector`` (``requests`` mode,
``pkg/epp/framework/plugins/flowcontrol/saturationdetector/concurrency``), which the simulated
gateway runs as ``saturation: concurrency``.

The budget comes from the capacity model (``models.capacity.itl_concurrency``); these tests check it
against the simulator itself, and show what it buys on a long-prompt surge that the utilization
detector (the EPP's default, ``saturation: pool``) lets through to the replicas' batches.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.paths import ROOT

from autoscaler.config import FleetConfig
from autoscaler.config.loading import load_config
from autoscaler.knee import one_replica, poisson_workload
from autoscaler.report import request_outcomes
from autoscaler.simulate import run_simulation
from autoscaler.workload import synthetic as syn
from autoscaler.workload.types import BATCH, INTERACTIVE, Request, Workload
from controllers.admission import concurrency_budget
from controllers.static import StaticController
from models.capacity import ReplicaSpec, RequestMix, itl_concurrency, replica_capacity

SCALE = 3.5  # every prompt 3.5x the embedded default's: mean ~4,040 tokens, the Azure code trace's order


def lengths(n: int, scale: float, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) pairs of the embedded default's lognormal sizes, prompts times ``scale``."""
    rng = np.random.default_rng(seed)
    mu, sg = syn.lognormal_params(syn.INPUT_MEDIAN_TOKENS, syn.INPUT_MEAN_TOKENS)
    mo, so = syn.lognormal_params(syn.OUTPUT_MEDIAN_TOKENS, syn.OUTPUT_MEAN_TOKENS)
    ins = np.maximum(1, np.rint(np.clip(np.rint(rng.lognormal(mu, sg, n)), 1, syn.INPUT_MAX_TOKENS) * scale))
    outs = np.clip(np.rint(rng.lognormal(mo, so, n)), 1, syn.OUTPUT_MAX_TOKENS)
    return ins, outs


def fleet(variant: str, replicas: int = 1) -> FleetConfig:
    cfg = one_replica(load_config(ROOT / "examples" / "fleet.yaml"), variant, replicas=replicas)
    cfg.services[0].typical_request.input_tokens = SCALE * syn.INPUT_MEAN_TOKENS
    cfg.services[0].typical_request.output_tokens = syn.OUTPUT_MEAN_TOKENS
    return cfg


def interactive_itl_met(cfg: FleetConfig, workload: Workload, saturation: str, max_concurrency: int | str = "auto",
                        admission: str = "pid") -> dict[str, np.ndarray]:
    c = cfg.model_copy(deep=True)
    c.simulator.gateway.saturation = saturation  # type: ignore[assignment]
    c.simulator.gateway.max_concurrency = max_concurrency  # type: ignore[assignment]
    v = c.services[0].variants[0]
    held = StaticController({c.services[0].name: {v.name: v.initial_replicas or 1}}, c.controller.tick_s,
                            c.controller.window_s)
    run = run_simulation(c, workload, held, admission=admission)
    out = request_outcomes(run)
    out["arrival"] = np.array([sr.req.arrival_s for sr in run.sim.final])
    return out


@pytest.mark.parametrize(("variant", "scale"), [("gh200", SCALE), ("a100", 1.0)])
def test_the_itl_budget_holds_the_objective_and_lies_below_the_simulators_knee(variant: str, scale: float) -> None:
    """One replica offered twice its capacity, the gateway holding it to N requests in flight. The
    simulator's knee is the most N at which 99 % of the completed interactive requests meet the ITL
    objective. The model's budget must hold it (an ITL bound above the knee would fail the very class
    admission protects) and be no more conservative than 0.6x the knee: at N = budget / 0.6 the
    simulator misses. (Over six cases of two to six times the prompt lengths the ratio is 0.34-1.02,
    docs/admission.md; the two here are the ones the benchmark's surges resemble.)"""
    cfg = fleet(variant)
    svc = cfg.services[0]
    slo = svc.slo[INTERACTIVE]
    ins, outs = lengths(5000, scale)
    spec = ReplicaSpec.of(svc.variants[0], cfg.engine)
    mix = RequestMix.from_requests(ins, outs)
    budget = itl_concurrency(spec, mix, slo.ttft_s, slo.itl_s)
    workload = poisson_workload(2 * replica_capacity(spec, mix, slo.ttft_s, slo.itl_s).rps, ins, outs, 600.0)

    def met(n: int) -> float:
        o = interactive_itl_met(cfg, workload, "concurrency", n)
        done = (o["status"] == "completed") & (o["cls"] == INTERACTIVE)
        return float(o["itl_ok"][done].mean())
    assert met(math.floor(budget)) >= 0.99
    assert met(math.ceil(budget / 0.6)) < 0.99


def test_auto_budget_is_each_variants_itl_concurrency_capped_at_max_num_seqs() -> None:
    """``auto``: floor(itl_concurrency) per variant, at most max_num_seqs; ``auto-min``: the fewest for all."""
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    svc = cfg.services[0]
    svc.typical_request.input_tokens, svc.typical_request.output_tokens = 4041.0, 211.0
    mix = RequestMix.from_means(4041.0, 211.0)
    slo = svc.slo[INTERACTIVE]
    each = {v.name: itl_concurrency(ReplicaSpec.of(v, cfg.engine), mix, slo.ttft_s, slo.itl_s) for v in svc.variants}
    auto = concurrency_budget(svc, cfg.engine, "auto")
    assert auto == {k: min(cfg.engine.max_num_seqs, math.floor(n)) for k, n in each.items()}
    assert set(concurrency_budget(svc, cfg.engine, "auto-min").values()) == {min(auto.values())}
    assert concurrency_budget(svc, cfg.engine, 7) == {v.name: 7 for v in svc.variants}
    svc.typical_request.input_tokens, svc.typical_request.output_tokens = 1024.0, 256.0
    gh200 = next(v for v in svc.variants if v.name == "gh200")
    short = itl_concurrency(ReplicaSpec.of(gh200, cfg.engine), RequestMix.from_means(1024.0, 256.0), slo.ttft_s,
                            slo.itl_s)
    assert short > cfg.engine.max_num_seqs  # short prompts: the ITL bound lies past the engine's batch
    assert concurrency_budget(svc, cfg.engine, "auto")["gh200"] == cfg.engine.max_num_seqs
    svc.typical_request.input_tokens = 200_000.0  # no variant prefills it within the TTFT objective
    with pytest.raises(ValueError, match="no variant serves its typical_request"):
        concurrency_budget(svc, cfg.engine, "auto-min")


def surge(seed: int) -> Workload:
    """Poisson arrivals at 5 req/s for 300 s, 21 req/s for 300 s (twice what two GH200 serve at the
    SLO on these lengths), 5 req/s for 300 s; 20 % batch (sheddable), of the rest 25 % critical."""
    rng = np.random.default_rng(seed)
    times = np.concatenate([np.sort(rng.uniform(a, b, rng.poisson(r * (b - a))))
                            for a, b, r in ((0, 300, 5.0), (300, 600, 21.0), (600, 900, 5.0))])
    ins, outs = lengths(times.size, SCALE, seed)
    reqs = []
    for t, i, o in zip(times, ins, outs, strict=True):
        u = rng.random()
        priority = 0 if u < 0.2 else (2 if u < 0.4 else 1)
        reqs.append(Request(float(t), int(i), int(o), request_class=BATCH if priority == 0 else INTERACTIVE,
                            priority=priority))
    return Workload(reqs, source="test:long-surge")


@pytest.mark.parametrize(("seed", "admission"), [(0, "pid"), (1, "mpc")])
def test_on_a_long_prompt_surge_the_budget_holds_the_critical_class_where_the_queue_rule_fails_it(
        seed: int, admission: str) -> None:
    """Two GH200 held (no scaling), streaming clients that give up after 30 s and retry twice. Under
    the utilization detector the queue stays short (TTFT met) while every admitted request shares
    an overloaded batch: critical requests miss on ITL. Held to the ITL budget, the excess waits at
    the gateway, critical first: critical >= 99 % on both TTFT and ITL, and the classes ordered."""
    cfg = fleet("gh200", replicas=2)
    cfg.simulator.client_timeout_s = 30.0
    cfg.simulator.clients.max_retries, cfg.simulator.clients.streaming = 2, True
    wl = surge(seed)

    def by_priority(saturation: str) -> list[tuple[float, float, float]]:
        o = interactive_itl_met(cfg, wl, saturation, admission=admission)
        window = (o["arrival"] >= 300) & (o["arrival"] < 600)
        return [tuple(float(o[k][window & (o["priority"] == p)].mean()) for k in ("ttft_ok", "itl_ok", "ok"))
                for p in range(3)]  # type: ignore[misc]
    pool = by_priority("pool")
    assert pool[2][0] >= 0.99 and pool[2][1] < 0.99  # queue-only: TTFT held, ITL not
    held = by_priority("concurrency")
    assert held[2][2] >= 0.99
    assert held[2][2] >= held[1][2] >= held[0][2]


@pytest.mark.parametrize("seed", [0, 1])
def test_gpus_slower_than_profiled_the_learned_budget_holds_the_critical_class_where_the_profiles_fails_it(
        seed: int) -> None:
    """The same long-prompt surge on two GH200 (the MPC may not scale them) whose steps take 1.3x what
    their profile says (``simulator.slowdown``). The gateway's ``auto`` budget comes from the profile,
    too many requests in flight for the GPUs it has: critical misses (98.86 and 98.11 % on these
    seeds when written). Following the budget the MPC publishes (``budget_refresh_s``: its learned
    speed factor lowers it), the excess waits at the gateway: critical >= 99 % and the classes ordered."""
    cfg = fleet("gh200", replicas=2)
    cfg.simulator.client_timeout_s = 30.0
    cfg.simulator.clients.max_retries, cfg.simulator.clients.streaming = 2, True
    v = cfg.services[0].variants[0]
    v.min_replicas = v.max_replicas = 2
    cfg.simulator.slowdown = {"gh200": 1.3}
    cfg.simulator.gateway.saturation = "concurrency"
    profiled = concurrency_budget(cfg.services[0], cfg.engine, "auto")["gh200"]
    wl = surge(seed)

    def critical_and_order(refresh: float | None) -> tuple[list[float], int, list[dict[str, int]]]:
        c = cfg.model_copy(deep=True)
        c.simulator.gateway.budget_refresh_s = refresh
        run = run_simulation(c, wl, "mpc", admission="mpc")
        o = request_outcomes(run)
        arrival = np.array([sr.req.arrival_s for sr in run.sim.final])
        window = (arrival >= 300) & (arrival < 600)
        ok = [float(o["ok"][window & (o["priority"] == p)].mean()) for p in range(3)]
        published = [t.services[c.services[0].name].decision.itl_budget
                     for t in run.ticks]
        return ok, run.sim.services[c.services[0].name].max_concurrency["gh200"], published
    held, kept, _ = critical_and_order(None)
    assert kept == profiled and held[2] < 0.99
    learned, followed, published = critical_and_order(60.0)
    assert learned[2] >= 0.99 and learned[2] >= learned[1] >= learned[0]
    assert followed < profiled and followed in [b["gh200"] for b in published if b]
