"""Capacity per role (models.capacity_roles) against hand calculations on a tiny profile.

The profile: t0 = 0.01 s a step, a = 1e-4 s a prompt token, no attention term (r = 0), decode b per
sequence as each test sets, and a context cost g of 1e-15 s a token (KV 1,000 bytes a token over
1e18 B/s: nothing). One request size, so each bound's miss is a closed form solved here with
scipy's root finder, independently of the module's bisection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import optimize, stats

from models.capacity import UNSERVABLE_SHARE, ReplicaSpec, RequestMix, idle_misses
from models.capacity_roles import (
    decode_capacity,
    decode_idle_misses,
    pair_idle_misses,
    pool_allowance,
    prefill_capacity,
    prefill_idle_misses,
    remote_points,
    transfer_s,
)
from models.profiles import PerformanceProfile

T0, A = 0.01, 1e-4


@dataclass(frozen=True)
class Link:
    bandwidth_gbps: float = 8.0
    latency_s: float = 0.05


def spec(b: float = 0.0, kv: int = 10_000_000, seqs: int = 100_000) -> ReplicaSpec:
    prof = PerformanceProfile("tiny/gpu", "tiny", "gpu", kv_bytes_per_token=1000, mem_bandwidth_bytes_per_s=1e18,
                              step_overhead_s=T0, prefill_s_per_token=A, decode_s_per_seq=b,
                              bandwidth_efficiency=1.0)
    return ReplicaSpec(prof, max_num_seqs=seqs, max_num_batched_tokens=2048, block_size=16, kv_cache_tokens=kv)


def one(prompt: float, output: float) -> RequestMix:
    return RequestMix(np.array([prompt]), np.array([output]), np.array([1.0]))


def test_transfer_is_bytes_over_the_line_rate_plus_the_latency() -> None:
    # 1000 tokens x 1000 B x 8 bit / 8e9 bit/s = 1 ms, + 50 ms
    assert float(transfer_s(Link(), 1000.0, 1000)) == pytest.approx(0.051)


def test_remote_points_follow_the_threshold() -> None:
    mix = RequestMix(np.array([10.0, 16.0, 4000.0]), np.array([5.0, 5.0, 5.0]), np.full(3, 1 / 3))
    assert remote_points(mix, 16).tolist() == [0.0, 1.0, 1.0]
    assert remote_points(mix, 0).tolist() == [0.0, 0.0, 0.0]  # 0 turns remote prefill off
    # half of each prompt cached: 16 x 0.5 = 8 uncached < 16 stays local
    assert remote_points(mix.with_prefix_hit_rate(0.5), 16).tolist() == [0.0, 0.0, 1.0]


def test_prefill_ttft_bound_by_hand() -> None:
    # P = 1000 < 2048: one step. Alone: a P + t0 = 0.11 s. Busy (steps full): a P + t0 P / 2048.
    # Slack: 1.0 - 0.11 - t0 (step in flight) - 0.051 (read) - 2 t0 (decode's step in flight and its
    # one-token step) = 0.809 s; a waiting request's last step is filled by the next prompts:
    # a (2048 - 1000) = 0.1048 s. Miss = rho exp(-2 (1 - rho) (0.809 - 0.1048) / E[S]) (cs^2 = 0).
    busy = A * 1000 + T0 * 1000 / 2048
    left = 1.0 - 0.11 - T0 - 0.051 - 2 * T0 - A * 1048

    def miss(rate: float) -> float:
        rho = rate * busy
        return rho * math.exp(-2 * (1 - rho) * left / busy)

    # the idle floor (at 1e-6 of the fluid limit) is ~1e-6: the budget is 1 % on top of it
    floor = miss(1e-6 / busy)
    expected = optimize.brentq(lambda r: miss(r) - 0.01 - floor, 1e-3, 0.999 / busy, xtol=1e-12)
    cap = prefill_capacity(spec(), one(1000, 10), 1.0, Link())
    assert cap.bounds["ttft"] == pytest.approx(expected, rel=1e-6)
    assert cap.binding == "ttft"
    assert cap.remote_share == 1.0
    assert cap.prompt_tokens_per_s == pytest.approx(1000 * cap.rps)


def test_prefill_kv_bound_by_hand() -> None:
    # KV of 2100 tokens: a prompt (1000 + one 16-token block) is pinned 0.11 s (prefill) + 0.051 s
    # (read). Resident tokens: gamma with mean rate x 1016 x 0.161, variance rate x 1016^2 x 0.161;
    # an arrival misses when they exceed 2100 - 1016.
    hold, lin = 0.11 + 0.051, 1016.0

    def miss(rate: float) -> float:
        mean, var = rate * lin * hold, rate * lin * lin * hold
        return float(stats.gamma.sf(2100 - lin, mean * mean / var, scale=var / mean))

    busy = A * 1000 + T0 * 1000 / 2048
    floor = miss(1e-6 / busy)
    expected = optimize.brentq(lambda r: miss(r) - 0.01 - floor, 1e-3, 0.999 / busy, xtol=1e-12)
    cap = prefill_capacity(spec(kv=2100), one(1000, 10), 100.0, Link())
    assert cap.bounds["kv"] == pytest.approx(expected, rel=1e-6)
    assert cap.binding == "kv"


def test_a_mix_prefilled_locally_costs_a_prefill_replica_nothing() -> None:
    cap = prefill_capacity(spec(), one(10, 10), 1.0, Link())
    assert cap.rps == math.inf and cap.remote_share == 0.0


def test_decode_itl_bound_is_where_the_decode_step_reaches_the_target() -> None:
    # b = 1e-3 s a sequence, outputs of 11 tokens: each request brings a (1 recomputed token) + 11 b
    # = 0.0111 s of step work; s = t0 / (1 - rate W), decode-only step sd = t0 + rate s 11 b. Its
    # prefill work (1e-4 s a request) is too small to matter, so the bound is within 1 % of sd = ITL:
    # t0 + rate 11 b t0 / (1 - rate W) = 0.05  ->  rate = 0.04 / (11 b t0 + 0.04 W).
    w = A + 11e-3
    at_target = 0.04 / (11e-3 * T0 + 0.04 * w)
    cap = decode_capacity(spec(b=1e-3), one(1000, 11), 10.0, 0.05, Link())
    assert cap.bounds["itl"] == pytest.approx(at_target, rel=0.01)
    assert cap.bounds["itl"] < at_target


def test_decode_kv_bound_by_hand() -> None:
    # KV of 30,000 tokens, b = 1e-3, a TTFT target of 1 s. Each remote request holds 1016 tokens from its
    # read's start: the read (0.051 s, not feeding back), half a step (the step in flight) and its 11
    # steps of s (feeding back: variance x s / t0), growing one token a step. One size, so the
    # occupancy's correlation time is half its hold, times s / t0. A request misses when the occupancy
    # x exceeds mean + (room - mean) e^(slack / tau), room = 30,000 - 1016, slack = 1 s less the unloaded
    # prefill (0.1 s + one step of 0.01 s), the step in flight there (0.01 s), the read and two decode
    # steps; every request misses once the mean passes the room.
    lin, lout, b = 1016.0, 11.0, 1e-3
    w = A + lout * b
    room = 30_000 - lin

    def occupancy(rate: float) -> tuple[float, float, float, float]:
        """(mean, variance, correlation time, slack) at ``rate``."""
        s = T0 / (1 - rate * w)
        sd = T0 + rate * s * lout * b
        fixed, stepped = 0.051, 0.5 * sd + lout * s
        mean = rate * (lin * (fixed + stepped) + s * lout * lout / 2)
        var = rate * lin * lin * fixed + rate * (lin * lin * stepped + s * (lin * lout ** 2 + lout ** 3 / 3)) * s / T0
        return mean, var, (fixed + stepped) / 2 * s / T0, 1.0 - (0.1 + T0 + T0) - 0.051 - 2 * sd

    def miss(rate: float) -> float:
        mean, var, tau, slack = occupancy(rate)
        if mean >= room:
            return 1.0
        return float(stats.gamma.sf(mean + (room - mean) * math.exp(slack / tau), mean * mean / var,
                                    scale=var / mean))

    def overflow(rate: float) -> float:
        mean, var, _, _ = occupancy(rate)
        return float(stats.gamma.sf(room, mean * mean / var, scale=var / mean))

    floor = miss(1e-6 / w)
    expected = optimize.brentq(lambda r: miss(r) - 0.01 - floor, 1e-3, 0.999 / w, xtol=1e-12)
    cap = decode_capacity(spec(b=b, kv=30_000), one(1000, 11), 1.0, 1.0, Link())
    assert cap.bounds["kv"] == pytest.approx(expected, rel=1e-6)
    assert cap.binding == "kv"
    # the wait a request may spend on the KV lifts the bound above the occupancy's 1 % overflow
    assert expected > 1.01 * optimize.brentq(lambda r: overflow(r) - 0.01, 1e-3, 0.999 / w, xtol=1e-12)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="attainment"):
        prefill_capacity(spec(), one(1000, 10), 1.0, Link(), attainment=1.0)
    with pytest.raises(ValueError, match="non_cached_tokens"):
        decode_capacity(spec(), one(1000, 10), 1.0, 0.05, Link(), non_cached_tokens=-1)
    with pytest.raises(ValueError, match="fixed step time"):
        decode_capacity(spec(), one(1000, 10), 1.0, 0.005, Link())


# ------------------------------------------------------------------------- against the simulator's knee
def test_prefill_replica_within_the_band_of_the_simulated_knee() -> None:
    """One prefill replica of examples/fleet-pd.yaml (H100, Llama-3-8B) with three decode replicas, on
    Azure-code-like lengths (lognormal, means 2048 / 28, sigmas 0.8 / 1.0, seeded): the model within
    0.90-1.05 of the knee the simulator's bisection finds (``autoscaler.knee``, 7 steps of 600-s runs)."""
    from pathlib import Path

    from autoscaler.config.loading import load_config
    from autoscaler.knee import knee, pd_fleet

    root = Path(__file__).resolve().parents[2]
    cfg = pd_fleet(load_config(root / "examples" / "fleet-pd.yaml"), 1, 3)
    svc = cfg.services[0]
    assert svc.roles is not None
    rng = np.random.default_rng(1)
    ins = np.clip(np.rint(rng.lognormal(math.log(2048) - 0.32, 0.8, 5000)), 1, None)
    outs = np.clip(np.rint(rng.lognormal(math.log(28) - 0.5, 1.0, 5000)), 1, None)
    keep = ins + outs <= svc.max_model_len
    ins, outs = ins[keep], outs[keep]
    mix = RequestMix.from_requests(ins.tolist(), outs.tolist())
    model = prefill_capacity(ReplicaSpec.of(svc.roles.prefill[0], cfg.engine), mix, svc.slo["interactive"].ttft_s,
                             svc.roles.kv_transfer, non_cached_tokens=svc.roles.non_cached_tokens).rps
    measured, _ = knee(cfg, ins, outs, 0.5 * model, 2.0 * model, steps=7, run_s=600.0)
    assert 0.5 * model < measured < 2.0 * model  # inside the bracket
    assert 0.90 <= model / measured <= 1.05


def test_decode_replica_within_the_band_of_the_simulated_knee() -> None:
    """One decode replica of examples/fleet-pd.yaml (H100, Llama-3-8B) with 100,000 KV tokens a replica
    and 24 prefill replicas (four times the decode model's rate in the prefill model's, so only the decode
    replica limits), on Azure-code-like lengths (lognormal, means 2048 / 28, sigmas 0.8 / 1.0, seeded):
    the model within 0.90-1.05 of the knee the simulator's bisection finds (``autoscaler.knee``, 7 steps
    of 600-s runs). Its KV bound binds, and short outputs turn the KV over within the TTFT slack, so a
    request that finds it full waits rather than misses: 1ee56d1's model (the occupancy's 1 % overflow,
    each hold two steps longer) gave 60.8 req/s, 0.70 of the knee."""
    from pathlib import Path

    from autoscaler.config.loading import load_config
    from autoscaler.knee import knee, pd_fleet

    root = Path(__file__).resolve().parents[2]
    cfg = pd_fleet(load_config(root / "examples" / "fleet-pd.yaml"), 24, 1, kv_cache_tokens=100_000)
    svc = cfg.services[0]
    assert svc.roles is not None
    rng = np.random.default_rng(1)
    ins = np.clip(np.rint(rng.lognormal(math.log(2048) - 0.32, 0.8, 5000)), 1, None)
    outs = np.clip(np.rint(rng.lognormal(math.log(28) - 0.5, 1.0, 5000)), 1, None)
    keep = ins + outs <= svc.max_model_len
    ins, outs = ins[keep], outs[keep]
    mix = RequestMix.from_requests(ins.tolist(), outs.tolist())
    pre = ReplicaSpec.of(svc.roles.prefill[0], cfg.engine)
    slo, link, thr = svc.slo["interactive"], svc.roles.kv_transfer, svc.roles.non_cached_tokens
    cap = decode_capacity(ReplicaSpec.of(svc.roles.decode[0], cfg.engine), mix, slo.ttft_s, slo.itl_s, link,
                          prefill_spec=pre, non_cached_tokens=thr)
    assert cap.binding == "kv"
    model = cap.rps
    # the prefill pool is not what limits: 24 replicas hold four times the decode model's rate
    assert 24 * prefill_capacity(pre, mix, slo.ttft_s, link, non_cached_tokens=thr).rps >= 4.0 * model
    measured, _ = knee(cfg, ins, outs, 0.5 * model, 2.0 * model, steps=7, run_s=600.0)
    assert 0.5 * model < measured < 2.0 * model  # inside the bracket
    assert 0.90 <= model / measured <= 1.05


# ------------------------------------------------------------------------- the idle-miss allowance
def profile_spec(a: float) -> ReplicaSpec:
    """``spec()``'s replica with ``a`` s a prompt token (``spec`` has ``A``)."""
    prof = PerformanceProfile("tiny/gpu", "tiny", "gpu", kv_bytes_per_token=1000, mem_bandwidth_bytes_per_s=1e18,
                              step_overhead_s=T0, prefill_s_per_token=a, decode_s_per_seq=0.0,
                              bandwidth_efficiency=1.0)
    return ReplicaSpec(prof, max_num_seqs=100_000, max_num_batched_tokens=2048, block_size=16,
                       kv_cache_tokens=10_000_000)


def mix_of(prompts: dict[int, float]) -> RequestMix:
    """Prompt tokens -> share of the mix, 10-token outputs."""
    p = np.array(sorted(prompts), dtype=float)
    return RequestMix(p, np.full(len(p), 10.0), np.array([prompts[int(x)] for x in p]))


def test_a_pool_keeps_its_capacity_while_its_idle_misses_are_within_the_allowance() -> None:
    # TTFT 1 s. An idle prefill replica's TTFT for a prompt of P tokens: a P + ceil(P / 2048) t0 (its
    # chunks) + t0 (a step in flight) + P x 1000 B x 8 / 8 Gb/s + 0.05 s (the read) + 2 t0 (the decode
    # replica's step in flight and one-token step). Fast replica (a = 1e-4): 1000 -> 0.191 s,
    # 4500 -> 0.5645 s, 9000 -> 1.039 s (misses); slow (a = 2e-4): 4500 -> 1.0145 s (misses).
    fast, slow = profile_spec(A), profile_spec(2 * A)
    for p, fast_s, slow_s in ((1000, 0.191, 0.291), (4500, 0.5645, 1.0145), (9000, 1.039, 1.939)):
        for a, want in ((A, fast_s), (2 * A, slow_s)):
            assert a * p + math.ceil(p / 2048) * T0 + T0 + p * 1e-6 + 0.05 + 2 * T0 == pytest.approx(want)
    mix = mix_of({1000: 0.52, 4500: 0.40, 9000: 0.08})
    ttft, itl = 1.0, 0.05
    # By hand: the fast replica misses the 8 % idle, the slow one 48 %; a decode replica behind either
    # misses the same prompts (its seqs bound's slack holds that prefill), so the best pair misses 8 %.
    assert prefill_idle_misses(fast, mix, ttft, Link()) == pytest.approx(0.08, abs=1e-4)
    assert prefill_idle_misses(slow, mix, ttft, Link()) == pytest.approx(0.48, abs=1e-4)
    assert decode_idle_misses(fast, mix, ttft, itl, Link(), prefill_spec=fast) == pytest.approx(0.08, abs=1e-4)
    assert decode_idle_misses(fast, mix, ttft, itl, Link(), prefill_spec=slow) == pytest.approx(0.48, abs=1e-4)
    assert pair_idle_misses(fast, fast, mix, ttft, itl, Link()) == pytest.approx(0.08, abs=1e-4)
    limit = pool_allowance([], [fast, slow], [fast], mix, ttft, itl, Link())
    assert limit == pytest.approx(0.08 + UNSERVABLE_SHARE, abs=1e-4)  # models.capacity's rule
    # The absolute 5 % gave both pools 0; the allowance keeps the fast pair and still refuses the slow
    # prefill replica (48 % > 13 %) and a decode replica behind it.
    assert prefill_capacity(fast, mix, ttft, Link()).rps == 0
    assert decode_capacity(fast, mix, ttft, itl, Link(), prefill_spec=fast).rps == 0
    assert prefill_capacity(fast, mix, ttft, Link(), unservable=limit).rps > 0
    assert decode_capacity(fast, mix, ttft, itl, Link(), prefill_spec=fast, unservable=limit).rps > 0
    assert prefill_capacity(slow, mix, ttft, Link(), unservable=limit).rps == 0
    assert decode_capacity(fast, mix, ttft, itl, Link(), prefill_spec=slow, unservable=limit).rps == 0
    # With 4 % of 4500-token prompts instead of 40 %, the slow replica misses 12 % idle: within 5 points
    # of the best pair's 8 %, it keeps a capacity too.
    within = mix_of({1000: 0.88, 4500: 0.04, 9000: 0.08})
    assert prefill_idle_misses(slow, within, ttft, Link()) == pytest.approx(0.12, abs=1e-4)
    limit = pool_allowance([], [fast, slow], [fast], within, ttft, itl, Link())
    assert limit == pytest.approx(0.13, abs=1e-4)
    assert prefill_capacity(slow, within, ttft, Link(), unservable=limit).rps > 0
    # An aggregated replica of the fast profile serves every prompt idle: the 9000-token one takes its
    # five chunks and a step in flight, 0.96 s, without the read and the decode replica's two steps.
    # That sets the allowance to 5 % (no more than its misses at 1e-6 of its fluid limit): the pair's
    # 8 % no longer passes, and the MPC plans the aggregated variant only.
    agg = ReplicaSpec(spec().profile, 100_000, 2048, 16, 10_000_000)
    assert idle_misses(agg, mix, ttft, itl) == pytest.approx(0.0, abs=1e-5)
    limit = pool_allowance([agg], [fast], [fast], mix, ttft, itl, Link())
    assert limit == pytest.approx(UNSERVABLE_SHARE, abs=1e-5)
    assert prefill_capacity(fast, mix, ttft, Link(), unservable=limit).rps == 0


def test_a_mix_every_prompt_of_which_misses_idle_gets_no_pool() -> None:
    # Every prompt 9000 tokens: 1.039 s > 1 s idle (above) on every pair. The best pair misses 100 %,
    # above MOSTLY_UNSERVABLE: the allowance is 5 %, and both pools get 0.
    fast = profile_spec(A)
    mix = mix_of({9000: 1.0})
    assert pair_idle_misses(fast, fast, mix, 1.0, 0.05, Link()) == 1.0
    limit = pool_allowance([], [fast], [fast], mix, 1.0, 0.05, Link())
    assert limit == pytest.approx(UNSERVABLE_SHARE)
    assert prefill_capacity(fast, mix, 1.0, Link(), unservable=limit).rps == 0
    assert decode_capacity(fast, mix, 1.0, 0.05, Link(), prefill_spec=fast, unservable=limit).rps == 0


def test_idle_misses_of_a_decode_replica_below_the_itl_target_are_all() -> None:
    assert decode_idle_misses(spec(), one(1000, 10), 1.0, 0.005, Link()) == 1.0  # t0 = 0.01 s > 5 ms
    assert prefill_idle_misses(spec(), one(10, 10), 1.0, Link()) == 0.0  # prefilled locally: nothing here
