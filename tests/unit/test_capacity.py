"""The capacity model (models.capacity): each bound against the simulator's measured knee, the fluid
formulas by hand, and the request mix.

The knee is measured, not modelled: one replica, Poisson arrivals of fixed-length requests for 20
minutes at a rate, SLO attainment of the run; bisection on the rate between 0 and the fluid limit
(the rate at which the mean step time diverges) finds the highest rate served at >= 99 %.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats
from support.paths import DATA_DIR

from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.knee import knee as measured_knee
from autoscaler.knee import one_replica
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.workload.loader import load_trace
from autoscaler.workload.types import Request, Workload
from controllers.registry import build
from controllers.static import StaticController
from models.capacity import (
    UNSERVABLE_SHARE,
    ReplicaSpec,
    RequestMix,
    _erlang_c,
    _gamma_sf,
    _itl_miss,
    _kv_miss,
    _seqs_miss,
    _ttft_miss,
    allowance,
    idle_misses,
    marginal_costs,
    mean_itl_rate,
    operating_point,
    replica_capacity,
    shared_capacity,
    slo_miss,
)
from models.profiles import get_profile

H100 = get_profile("llama-3-8b/h100-sxm")
RUN_S = 1200.0


def fleet(ttft_s: float = 2.0, itl_s: float = 0.1, kv: int = 400_000, seqs: int = 256, replicas: int = 1,
          max_replicas: int = 1) -> FleetConfig:
    doc: dict[str, Any] = {
        "services": [{"name": "svc", "model": "m", "max_model_len": 16384,
                      "slo": {"interactive": {"ttft_s": ttft_s, "itl_s": itl_s}, "batch": {"ttft_s": 20, "itl_s": 1}},
                      "variants": [{"name": "h100", "gpu": "H100-SXM", "price_per_gpu_hour": 2.99,
                                    "min_replicas": 0, "max_replicas": max_replicas, "initial_replicas": replicas,
                                    "startup_cold_s": 10, "kv_cache_tokens": kv,
                                    "profile": "llama-3-8b/h100-sxm"}]}],
        "engine": {"max_num_seqs": seqs, "max_num_batched_tokens": 8192},
    }
    return parse_config(doc, "<capacity test>")


def poisson(rate_rps: float, input_tokens: int, output_tokens: int, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, RUN_S, rng.poisson(rate_rps * RUN_S)))
    return Workload([Request(float(a), input_tokens, output_tokens) for a in t], source="poisson")


def attainment(cfg: FleetConfig, wl: Workload, controller: Any) -> float:
    return summarize(run_simulation(cfg, wl, controller))["slo_attainment"]["interactive"]


def knee(cfg: FleetConfig, input_tokens: int, output_tokens: int) -> float:
    """Highest rate one replica serves at >= 99 % (module docstring), requests/s."""
    spec = ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine)
    _, a, b, g = marginal_costs(spec.profile)
    lo, hi = 0.0, 1.0 / (a * input_tokens + b * output_tokens
                         + g * (input_tokens * output_tokens + output_tokens ** 2 / 2))
    one = StaticController({"svc": {"h100": 1}}, cfg.controller.tick_s, cfg.controller.window_s)
    for _ in range(9):
        mid = (lo + hi) / 2
        if attainment(cfg, poisson(mid, input_tokens, output_tokens), one) >= 0.99:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# name, fleet, prompt, output: each workload makes one bound the tightest
BOUNDS = [
    # many long decodes on a small batch limit: slots run out before steps get slow
    ("seqs", dict(seqs=64), 100, 1000),
    # long outputs on a small KV cache: resident tokens run out first
    ("kv", dict(kv=120_000), 1000, 3000),
    # long prompts against a tight TTFT objective: the prefill queue
    ("ttft", dict(ttft_s=0.5), 4000, 50),
    # long prompts, short outputs: the prefill chunks of others stall a short decode past its ITL
    ("itl", {}, 8000, 20),
]


@pytest.mark.parametrize(("bound", "settings", "input_tokens", "output_tokens"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_each_bound_is_within_15_percent_of_the_simulators_knee(bound: str, settings: dict[str, Any],
                                                               input_tokens: int, output_tokens: int) -> None:
    cfg = fleet(**settings)
    spec = ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine)
    slo = cfg.services[0].slo["interactive"]
    model = replica_capacity(spec, RequestMix.from_requests([input_tokens], [output_tokens]), slo.ttft_s, slo.itl_s)
    measured = knee(cfg, input_tokens, output_tokens)
    print(f"\n{bound}: model {model.rps:.3f} req/s ({model.binding}), simulator knee {measured:.3f}")
    assert model.binding == bound
    assert model.rps == pytest.approx(measured, rel=0.15)
    # the other bounds are well above it: the workload really tests this one
    others = [getattr(model, f"{b}_rps") for b, *_ in BOUNDS if b != bound]
    assert min(others) > 1.1 * model.rps


@pytest.mark.parametrize(("bound", "settings", "input_tokens", "output_tokens"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_static_sizing_on_the_model_meets_the_slo(bound: str, settings: dict[str, Any], input_tokens: int,
                                                  output_tokens: int) -> None:
    cfg = fleet(**settings, replicas=0, max_replicas=20)
    spec = ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine)
    slo = cfg.services[0].slo["interactive"]
    per = replica_capacity(spec, RequestMix.from_requests([input_tokens], [output_tokens]), slo.ttft_s, slo.itl_s).rps
    wl = poisson(3.5 * per, input_tokens, output_tokens, seed=1)
    static = build("static", cfg, workload=wl)
    assert 4 <= static.replicas["svc"]["h100"] <= 6  # ceil(peak minute / capacity)
    assert attainment(cfg, wl, static) >= 0.99


# ------------------------------------------------------------------------------------ by hand
def test_fluid_rates_by_hand() -> None:
    spec = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    t0, a, b, g = marginal_costs(H100)
    mix = RequestMix.from_requests([1000], [200])
    # The prompt's 1000 tokens form 1000 x 1001 / 2 attention pairs, each worth r tokens of matmuls.
    prefill = 1000 + H100.attention_tokens_per_pair * 1000 * 1001 / 2
    work = a * prefill + b * 200 + g * (1000 * 200 + 200 * 200 / 2)
    assert mean_itl_rate(spec, mix, 0.1) == pytest.approx((1 - t0 / 0.1) / work, rel=1e-12)
    op = operating_point(spec, mix, 5.0)
    assert op.step_s == pytest.approx(t0 / (1 - 5.0 * work), rel=1e-12)
    assert op.decoding == pytest.approx(5.0 * op.step_s * 200, rel=1e-12)  # Little's law on decode steps
    assert op.concurrency == pytest.approx(5.0 * op.time_in_system_s, rel=1e-12)
    with pytest.raises(ValueError, match="below the fixed step time"):
        mean_itl_rate(spec, mix, t0 / 2)
    with pytest.raises(ValueError, match="fluid limit"):
        operating_point(spec, mix, 1.0 / work)


def test_prefix_hits_raise_capacity_of_a_prefill_bound_replica() -> None:
    spec = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    cold = replica_capacity(spec, RequestMix.from_requests([8000], [20]), 2.0, 0.1)
    warm = replica_capacity(spec, RequestMix.from_requests([8000], [20], prefix_hit_rate=0.5), 2.0, 0.1)
    assert warm.rps > 1.5 * cold.rps


def test_capacity_falls_as_the_attainment_goal_rises() -> None:
    spec = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    mix = RequestMix.from_means(1154, 211)
    rates = [replica_capacity(spec, mix, 2.0, 0.1, attainment=q).rps for q in (0.9, 0.99, 0.999)]
    assert rates[0] > rates[1] > rates[2] > 0
    assert rates[0] < mean_itl_rate(spec, mix, 0.1) * 1.0001  # never above the fluid mean-ITL rate
    with pytest.raises(ValueError, match="attainment"):
        replica_capacity(spec, mix, 2.0, 0.1, attainment=1.0)


def test_erlang_c_known_values() -> None:
    assert _erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    assert _erlang_c(2, 1.0) == pytest.approx(1 / 3)  # (A^2/2 * 2/(2-1)) / (1 + 1 + 2) = 2/6
    assert _erlang_c(4, 4.0) == 1.0


def test_request_mix_keeps_moments_and_merges_equal_points() -> None:
    rng = np.random.default_rng(3)
    ins = np.clip(np.rint(rng.lognormal(6.8, 0.6, 50_000)), 1, None)
    outs = np.clip(np.rint(rng.lognormal(4.8, 1.0, 50_000)), 1, None)
    mix = RequestMix.from_requests(ins, outs)
    assert len(mix.weights) <= 250 and mix.weights.sum() == pytest.approx(1.0)
    assert mix.mean_input == pytest.approx(ins.mean(), rel=1e-9)
    assert mix.mean_output == pytest.approx(outs.mean(), rel=1e-9)
    # second moments, which the tails of the bounds read, within a few percent
    assert float(mix.weights @ mix.output_tokens ** 2) == pytest.approx(float(np.mean(outs ** 2)), rel=0.05)
    assert float(mix.weights @ mix.input_tokens ** 2) == pytest.approx(float(np.mean(ins ** 2)), rel=0.06)
    assert mix.uncached_m2 == pytest.approx(float(np.mean(ins ** 2)), rel=1e-9)  # kept exactly
    assert mix.with_prefix_hit_rate(0.5).uncached_m2 == pytest.approx(float(np.mean(ins ** 2)) / 4, rel=1e-9)
    one = RequestMix.from_requests([500] * 7, [40] * 7)
    assert (list(one.input_tokens), list(one.output_tokens), list(one.weights)) == ([500.0], [40.0], [1.0])
    means = RequestMix.from_means(1000, 200)
    assert means.mean_input == pytest.approx(1000, rel=0.01) and means.mean_output == pytest.approx(200, rel=0.02)
    with pytest.raises(ValueError, match="at least one"):
        RequestMix.from_requests([], [])
    with pytest.raises(ValueError, match="prefix_hit_rate"):
        RequestMix.from_requests([10], [10], prefix_hit_rate=1.0)
    assert math.isclose(means.with_prefix_hit_rate(0.3).prefix_hit_rate, 0.3)


def test_requests_no_idle_replica_can_serve_do_not_zero_a_variant() -> None:
    # 3 % of prompts are so long that an idle replica's prefill alone (a x P, by hand from the
    # profile) exceeds the 0.5-s TTFT target: they miss at any rate. Counted against the 1 % budget
    # they left the variant no capacity (issue 28: A100s on long-prompt days); the budget is for the
    # misses load adds, so the capacity is positive, and below the mix without them (they still load
    # the replica). With a quarter of them so long, the variant cannot serve the mix: 0.
    spec = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    a = H100.prefill_s_per_token
    long = math.ceil(0.6 / a)  # prefill alone > 0.5 s
    assert a * long > 0.5
    servable = RequestMix.from_requests([1000] * 97, [100] * 97)
    with_long = RequestMix.from_requests([1000] * 97 + [long] * 3, [100] * 100)
    alone = replica_capacity(spec, servable, 0.5, 0.1)
    mixed = replica_capacity(spec, with_long, 0.5, 0.1)
    assert 0 < mixed.ttft_rps < alone.ttft_rps
    assert 0 < mixed.rps <= alone.rps
    mostly_long = RequestMix.from_requests([1000] * 75 + [long] * 25, [100] * 100)
    assert replica_capacity(spec, mostly_long, 0.5, 0.1).ttft_rps == 0


def test_what_no_variant_can_serve_idle_never_zeroes_the_service() -> None:
    # A long-prompt day (ServeGen with Mooncake lengths): 8 % of prompts cannot be prefilled within the
    # TTFT target by an idle replica of any variant here. With an absolute 5 % allowance every variant
    # got 0, the MPC and the oracle planned no capacity, and the MPC served 3 % of the day. The
    # allowance is relative: 5 points above what the best variant misses idle. An H100 and a replica
    # of half its prefill speed: the H100 misses the 8 % idle (by hand: a x P > 0.5 s), the slow one
    # also the prompts between half and all of the target (another 40 %): it cannot serve this mix.
    h100 = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    slow = ReplicaSpec(H100.slowed(2.0), 256, 8192, 16, 400_000)
    a = H100.prefill_s_per_token
    long, middle = math.ceil(0.6 / a), math.ceil(0.3 / a)  # idle prefill > 0.5 s on the H100; on the slow one
    assert a * long > 0.5 and 2 * a * middle > 0.5 > a * middle
    mix = RequestMix.from_requests([1000] * 52 + [middle] * 40 + [long] * 8, [100] * 100)
    assert idle_misses(h100, mix, 0.5, 0.1) == pytest.approx(0.08, abs=0.005)
    assert idle_misses(slow, mix, 0.5, 0.1) == pytest.approx(0.48, abs=0.005)
    limit = allowance([h100, slow], mix, 0.5, 0.1)
    assert limit == pytest.approx(0.08 + UNSERVABLE_SHARE, abs=0.005)
    assert replica_capacity(h100, mix, 0.5, 0.1).rps == 0  # the absolute rule: nothing for anyone
    assert replica_capacity(h100, mix, 0.5, 0.1, unservable=limit).rps > 0
    assert replica_capacity(slow, mix, 0.5, 0.1, unservable=limit).rps == 0


# ------------------------------------------------------------------ one budget, step budgets, real mixes
def test_the_bounds_share_one_budget_of_misses() -> None:
    # One request size: each bound's miss is one number, and the share missing any part of the SLO is
    # 1 - prod(1 - m_b) by hand, at least the largest and at most their sum.
    spec = ReplicaSpec(H100, 64, 8192, 16, 120_000)
    mix = RequestMix.from_requests([3000], [600])
    rate = 0.9 * replica_capacity(spec, mix, 0.5, 0.05).rps
    m = [_itl_miss(spec, mix, rate, 0.05), _ttft_miss(spec, mix, rate, 0.5), _seqs_miss(spec, mix, rate, 0.5),
         _kv_miss(spec, mix, rate)]
    assert sum(x > 1e-4 for x in m) >= 2  # two bounds miss here: the case tests the sharing
    joint = slo_miss(spec, mix, rate, 0.5, 0.05)
    assert joint == pytest.approx(1 - math.prod(1 - x for x in m), rel=1e-9)
    assert max(m) < joint < sum(m)
    shared = shared_capacity(spec, mix, 0.5, 0.05)
    assert shared < replica_capacity(spec, mix, 0.5, 0.05).rps
    assert slo_miss(spec, mix, shared, 0.5, 0.05) == pytest.approx(0.01, abs=1e-6)


def trace_pairs(trace: str, context: int) -> np.ndarray:
    """(prompt, output) pairs of a shared trace (relative to ``DATA_DIR``) within ``context`` tokens, shape (n, 2)."""
    pairs = np.array([(q.input_tokens, q.output_tokens) for q in load_trace(DATA_DIR / trace).requests])
    return pairs[pairs.sum(axis=1) <= context]


# The shipped traces' own (prompt, output) pairs on one replica, each as its benchmark scenario runs it
# (benchmarks/capacity.py prints these and more). Issue 28's band for model / knee is 0.90-1.05: the
# planners' model (the tightest bound) meets it on Azure conv's mix; on Mooncake's only the bounds
# sharing one budget come near (1.06 on 5,000 requests a rate; the tightest bound alone 1.3-1.6), so
# there the test guards 0.90-1.10 against a regression. Azure code's mix on its 2048-token chunks is
# in neither (0.47: docs/benchmarks.md says why).
TRACE_CASES = [
    ("azure-conv", "azure-llm-2023/AzureLLMInferenceTrace_conv.csv", 8192, "model", 1.05),
    ("mooncake", "mooncake/conversation_trace.jsonl", 8192, "shared", 1.10),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "trace", "chunk", "which", "high"), TRACE_CASES, ids=[c[0] for c in TRACE_CASES])
def test_the_model_is_within_the_band_of_the_knee_on_each_traces_mix(name: str, trace: str, chunk: int, which: str,
                                                                      high: float) -> None:
    cfg = one_replica(fleet(max_replicas=1), "h100", max_num_batched_tokens=chunk, max_model_len=32768)
    pairs = trace_pairs(trace, 32768)
    slo = cfg.services[0].slo["interactive"]
    spec = ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine)
    mix = RequestMix.from_requests(pairs[:, 0], pairs[:, 1])
    model = (replica_capacity(spec, mix, slo.ttft_s, slo.itl_s).rps if which == "model"
             else shared_capacity(spec, mix, slo.ttft_s, slo.itl_s))
    measured, target = measured_knee(cfg, pairs[:, 0], pairs[:, 1], 0.5 * model, 1.5 * model, min_requests=5000)
    print(f"\n{name}: {which} {model:.3f} req/s, knee {measured:.3f} at {target:.2%}: {model / measured:.2f}")
    assert 0.51 * model < measured < 1.49 * model  # inside the search, not at its edge
    assert 0.90 <= model / measured <= high


# ------------------------------------------------------------------------------ pools of replicas
def test_a_pool_waits_with_the_erlang_c_probability_and_decays_n_times_as_fast() -> None:
    # Two replicas behind a least-loaded router: an arrival waits with probability C(2, 2 rho) =
    # 2 rho^2 / (1 + rho) (Erlang C for two servers, by hand) instead of rho, and the wait's tail
    # decays twice as fast: P(miss) = C exp(-2 x 2 (1 - rho) slack / (E[S] (1 + cs^2))).
    spec = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    mix = RequestMix.from_requests([4000], [50])
    rate = 3.0
    op = operating_point(spec, mix, rate)
    service = float(H100.prefill_s_per_token * H100.prefill_equivalent(4000) + op.decode_step_s)
    rho = rate * service
    slack = 0.5 - service - op.decode_step_s
    assert 0 < rho < 1 and slack > 0
    one = rho * math.exp(-2 * (1 - rho) * slack / service)  # cs^2 = 0: one size, one chunk
    two = 2 * rho ** 2 / (1 + rho) * math.exp(-2 * 2 * (1 - rho) * slack / service)
    assert _ttft_miss(spec, mix, rate, 0.5) == pytest.approx(one, rel=1e-9)
    assert _ttft_miss(spec, mix, rate, 0.5, replicas=2) == pytest.approx(two, rel=1e-9)


def test_a_pool_spreads_the_prefills_arriving_during_a_decode_evenly() -> None:
    # One request size: the prefill work X arriving during a decode has mean lam w a Q and, with each
    # replica getting every n-th arrival (an Erlang-n count), variance lam w (a Q)^2 / n; the ITL miss
    # is the gamma tail with those moments (by hand with scipy's gamma).
    spec = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    mix = RequestMix.from_requests([8000], [20])
    rate, itl, n = 1.0, 0.1, 4
    op = operating_point(spec, mix, rate)
    c = H100.prefill_s_per_token * float(H100.prefill_equivalent(8000))
    window = 19 * itl
    mean, var = rate * window * c, rate * window * c * c / n
    slack = 19 * (itl - op.decode_step_s)
    by_hand = stats.gamma.sf(slack, mean * mean / var, scale=var / mean)
    assert _itl_miss(spec, mix, rate, itl, replicas=n) == pytest.approx(by_hand, rel=1e-9)
    assert _itl_miss(spec, mix, rate, itl, replicas=n) < _itl_miss(spec, mix, rate, itl)


@pytest.mark.slow
def test_a_pool_of_four_carries_what_the_simulators_four_replicas_carry() -> None:
    # Mooncake's pairs on four H100s behind the simulator's least-loaded router: each carries about
    # 1.3-1.37 req/s at 99 % (one alone about 0.8); the pooled model is within 10 % of it (the knee on
    # 5,000 requests a rate moves by about 5 %: 1.305 here, 1.365 on 10,000 in the benchmark).
    cfg = one_replica(fleet(max_replicas=4), "h100", max_model_len=32768, replicas=4)
    pairs = trace_pairs("mooncake/conversation_trace.jsonl", 32768)
    slo = cfg.services[0].slo["interactive"]
    spec = ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine)
    mix = RequestMix.from_requests(pairs[:, 0], pairs[:, 1])
    pooled = replica_capacity(spec, mix, slo.ttft_s, slo.itl_s, replicas=4).rps
    alone = replica_capacity(spec, mix, slo.ttft_s, slo.itl_s).rps
    measured, _ = measured_knee(cfg, pairs[:, 0], pairs[:, 1], 0.5 * pooled, 1.5 * pooled, min_requests=5000)
    print(f"\npool of 4: model {pooled:.3f} req/s a replica (alone {alone:.3f}), knee {measured:.3f}")
    assert pooled > 1.1 * alone
    assert 0.51 * pooled < measured < 1.49 * pooled
    assert 0.90 <= pooled / measured <= 1.10


def test_gamma_sf_is_scipys_gamma_sf_bit_for_bit() -> None:
    """``_gamma_sf`` calls ``gammaincc`` directly (issue 33: scipy's generic ``sf`` was a large share
    of a tick); it must give exactly what ``scipy.stats.gamma.sf`` gives for the same mean and
    variance, edge values included (0 and negative thresholds, zero, tiny, huge, inf and NaN moments)."""
    def reference(x: Any, mean: Any, var: Any) -> np.ndarray:
        mean = np.asarray(mean, dtype=float)
        var = np.maximum(np.asarray(var, dtype=float), 1e-300)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = stats.gamma.sf(x, mean * mean / var, scale=var / np.maximum(mean, 1e-300))
        return np.where(mean > 0, out, 0.0)

    edges = [0.0, -0.0, -1.0, 1e-310, 1e-200, 1.0, 3.5, 1e5, 1e300, math.inf, -math.inf, math.nan]
    rng = np.random.default_rng(0)
    xs = edges + list(rng.lognormal(0, 5, 20))
    means = edges + list(rng.lognormal(0, 5, 10))
    variances = [0.0, -1.0, 1e-300, 1e-10, 0.5, 2.0, 1e8, 1e300, math.inf, math.nan]
    with np.errstate(over="ignore"):
        for x in xs:
            for mean in means:
                for var in variances:
                    assert _gamma_sf(x, mean, var).tobytes() == reference(x, mean, var).tobytes(), (x, mean, var)
        x = rng.lognormal(5, 3, 50) * rng.choice([1.0, -1.0, 0.0], 50)
        mean = rng.lognormal(3, 3, 50) * rng.choice([1.0, 0.0], 50)
        var = rng.lognormal(6, 4, 50)
        got, want = _gamma_sf(x, mean, var), reference(x, mean, var)
        assert got.shape == want.shape == (50,)
        assert got.tobytes() == want.tobytes()
        assert 0.0 < got[(mean > 0) & (x > 0)].max() <= 1.0  # the comparison is not of empty or all-zero arrays


def test_capacities_and_itl_budgets_of_the_same_inputs_are_computed_once(monkeypatch) -> None:
    """Issue 35: a daemon taking over 100 services on the same variants computed the same capacities
    and ITL budgets 100 times (~60 ms each). Another service name, or another ``RequestMix`` object of
    the same points, is the same input (no bisection run); another mix, KV cache or speed factor is
    not; the answers equal a computation with the memos empty, and a caller's copy is its own."""
    import controllers.admission as adm
    import models.capacity as cap
    from autoscaler.config.loading import default_fleet_document

    cfg = FleetConfig.model_validate(default_fleet_document())
    svc, engine = cfg.services[0], cfg.engine
    runs: list[int] = []
    real = cap.replica_capacity

    def counting(*a: Any, **k: Any) -> Any:
        runs.append(1)
        return real(*a, **k)

    monkeypatch.setattr(cap, "replica_capacity", counting)
    monkeypatch.setattr(adm, "replica_capacity", counting)
    monkeypatch.setattr(cap, "_WEIGHTS", cap.Memo(16))
    monkeypatch.setattr(adm, "_BUDGETS", cap.Memo(16))
    mix = cap.RequestMix.from_means(1500, 300, 0.2)
    first = cap.variant_weights(svc, engine, mix)
    n = len(runs)
    assert n == len(svc.variants)
    twin = svc.model_copy(update={"name": "tenant-b"})
    again = cap.variant_weights(twin, engine, cap.RequestMix.from_means(1500, 300, 0.2))
    assert again == first and len(runs) == n
    again["x"] = 1.0
    assert "x" not in cap.variant_weights(svc, engine, mix)
    other = cap.variant_weights(svc, engine, cap.RequestMix.from_means(3000, 300, 0.2))
    assert len(runs) == 2 * n
    v0 = svc.variants[0]
    small = svc.model_copy(update={"variants": [v0.model_copy(update={"kv_cache_tokens": v0.kv_cache_tokens // 8}),
                                                *svc.variants[1:]]})
    cap.variant_weights(small, engine, mix)
    assert len(runs) == 3 * n
    budgets = adm.itl_budgets(svc, engine, None, mix)
    m = len(runs)
    assert adm.itl_budgets(twin, engine, None, mix) == budgets and len(runs) == m
    slowed = adm.itl_budgets(svc, engine, {v0.name: 1.5}, mix)
    assert len(runs) == m + len(svc.variants) and slowed[v0.name].itl_rps < budgets[v0.name].itl_rps
    monkeypatch.setattr(cap, "_WEIGHTS", cap.Memo(16))  # emptied: computed afresh, the same numbers
    monkeypatch.setattr(adm, "_BUDGETS", cap.Memo(16))
    assert cap.variant_weights(svc, engine, mix) == first
    assert cap.variant_weights(svc, engine, cap.RequestMix.from_means(3000, 300, 0.2)) == other
    assert adm.itl_budgets(svc, engine, {v0.name: 1.5}, mix) == slowed


def test_the_memo_keeps_the_most_recently_used() -> None:
    from models.capacity import Memo

    memo = Memo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1  # a is now the most recent
    memo.put("c", 3)  # b goes
    assert (memo.get("a"), memo.get("b"), memo.get("c")) == (1, None, 3)
