"""The arrivals' burstiness (models.arrivals): the index of dispersion of 1-s counts by hand, from the
gateway's two counter rates, on a Poisson and a batch-Poisson process, through the simulator's
gateway, and what the capacity model does with it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from autoscaler.adapters.simulator import SimMetricsSource
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import Request, Workload
from models.arrivals import BIN_S, MIN_COUNT, dispersion_from_rates, dispersion_of_counts, per_replica_scv
from models.capacity import ReplicaSpec, RequestMix, _itl_miss, _ttft_miss, operating_point, replica_capacity
from models.profiles import get_profile

H100 = get_profile("llama-3-8b/h100-sxm")


def test_dispersion_of_counts_by_hand() -> None:
    # [1, 3, 2, 2]: mean 2, population variance (1 + 1 + 0 + 0) / 4 = 0.5, index 0.25
    assert dispersion_of_counts([1, 3, 2, 2]) == pytest.approx(0.25)
    # [0, 4]: mean 2, variance 4, index 2
    assert dispersion_of_counts([0, 4]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        dispersion_of_counts([0, 0])
    with pytest.raises(ValueError):
        dispersion_of_counts([])


def test_the_two_counter_rates_give_the_counts_index() -> None:
    # 1-s bins over 60 s: 30 with no arrival, 30 with 4. rate(K) = 1, rate(N) = 120 / 60 = 2, rate(Q) =
    # 30 x 16 / 60 = 8: m = 2, E[n^2] = 8, (8 - 4) / 2 = 2, the counts' own index.
    counts = [0] * 30 + [4] * 30
    assert dispersion_from_rates(1.0, 2.0, 8.0, 60.0) == pytest.approx(2.0)
    assert dispersion_of_counts(counts) == pytest.approx(2.0)
    # 2-s bins over 60 s: 15 with 2, 15 with 6. rate(K) = 0.5, rate(N) = 2, rate(Q) = 15 x (4 + 36) / 60
    # = 10: m = 4, E[n^2] = 20, (20 - 16) / 4 = 1; by hand: mean 4, variance 4, index 1. Rates all
    # scaled alike (Prometheus's extrapolation) give the same index.
    assert dispersion_from_rates(0.5, 2.0, 10.0, 60.0) == pytest.approx(1.0)
    assert dispersion_from_rates(0.55, 2.2, 11.0, 60.0) == pytest.approx(1.0)
    assert dispersion_of_counts([2] * 15 + [6] * 15) == pytest.approx(1.0)
    # too few arrivals to tell, unknown rates, a bad window
    assert dispersion_from_rates(1.0, (MIN_COUNT - 1) / 60, 1.0, 60.0) is None
    assert dispersion_from_rates(1.0, math.nan, 8.0, 60.0) is None
    assert dispersion_from_rates(0.0, 2.0, 8.0, 60.0) is None
    with pytest.raises(ValueError):
        dispersion_from_rates(1.0, 2.0, 8.0, 0.0)


def counts_1s(times: np.ndarray, span_s: int, bin_s: float = 1.0) -> np.ndarray:
    n = int(span_s / bin_s)
    return np.bincount(np.floor(times / bin_s).astype(int), minlength=n)[:n]


def test_poisson_arrivals_have_index_one_and_batches_of_five_index_five() -> None:
    rng = np.random.default_rng(3)
    span = 1200
    poisson = np.cumsum(rng.exponential(1 / 20.0, 30_000))
    poisson = poisson[poisson < span]
    # Batches of 5 at the same instant, the batches Poisson at 4/s: index E[K^2] / E[K] = 25 / 5 = 5
    batches = np.cumsum(rng.exponential(1 / 4.0, 6_000))
    bursty = np.repeat(batches[batches < span], 5)
    # 1,200 bins: the sample index has a standard error of about sqrt(2 / 1200) = 4 % of itself
    assert dispersion_of_counts(counts_1s(poisson, span)) == pytest.approx(1.0, abs=0.15)
    assert dispersion_of_counts(counts_1s(bursty, span)) == pytest.approx(5.0, rel=0.15)


def test_the_simulators_gateway_reports_the_windows_index(make_fleet) -> None:
    # Batches of 3 requests 0.25 s apart within the second, pairs of seconds alternating 1 and 2
    # batches a second: 2-s counts 6, 12, 6, 12, ...: in any 60-s window mean 9, variance 9, index 1.
    cfg = make_fleet(1)
    reqs = []
    for sec in range(200):
        for b in range(1 + (sec // 2) % 2):
            reqs += [Request(arrival_s=sec + 0.25 * b + 0.01 * i, input_tokens=64, output_tokens=4) for i in range(3)]
    sim = FleetSimulator(cfg, Workload(reqs))
    src = SimMetricsSource(sim, 60.0)
    for t in range(15, 181, 15):
        sim.run_until(float(t))
        obs = src.observe(float(t))
    times = np.array([r.arrival_s for r in reqs])
    window = counts_1s(times, 180, BIN_S)[60:90]
    assert BIN_S == 2.0 and dispersion_of_counts(window) == pytest.approx(1.0)
    assert obs["svc"].signals.arrival_dispersion == pytest.approx(1.0, rel=0.02)


def test_per_replica_variability_of_a_random_split() -> None:
    # n = 4, I = 9: 9 / 4 + 3 / 4 = 3 (a thinned stream); Poisson stays Poisson; one replica keeps it all
    assert per_replica_scv(9.0, 4) == pytest.approx(3.0)
    assert per_replica_scv(1.0, 7) == pytest.approx(1.0)
    assert per_replica_scv(5.0, 1) == pytest.approx(5.0)
    with pytest.raises(ValueError):
        per_replica_scv(2.0, 0)


def test_burstiness_lengthens_the_prefill_queues_tail_as_kingman_says() -> None:
    # One size, one chunk: P(miss) = rho exp(-2 (1 - rho) slack / (E[S] (ca^2 + 0))); ca^2 = 3 divides
    # the decay by 3 (by hand from the same operating point).
    spec = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    mix = RequestMix.from_requests([4000], [50])
    rate = 3.0
    op = operating_point(spec, mix, rate)
    service = float(H100.prefill_s_per_token * H100.prefill_equivalent(4000) + op.decode_step_s)
    rho, slack = rate * service, 0.5 - service - op.decode_step_s
    by_hand = rho * math.exp(-2 * (1 - rho) * slack / (service * 3.0))
    assert _ttft_miss(spec, replace(mix, arrival_scv=3.0), rate, 0.5) == pytest.approx(by_hand, rel=1e-9)


def test_the_prefill_cap_clears_the_itl_bound_where_the_dearest_chunk_fits() -> None:
    # 2048-token steps, 2k prompts, 28-token outputs (Azure code's shape): a full chunk costs about
    # 0.05 s on an H100, within the 0.1-s ITL target with the decode step, so no burst of prefills
    # makes a decode miss; uncapped the model counts the whole burst in the decode's steps.
    spec = ReplicaSpec(H100, 256, 2048, 16, 400_000)
    capped = replace(spec, prefill_cap=True)
    mix = RequestMix.from_means(2048, 28)
    rate = 8.0  # above the uncapped model's capacity (5.3 req/s)
    op = operating_point(spec, mix, rate)
    chunk = np.minimum(mix.uncached, 2048 - op.decoding)
    dearest = H100.prefill_s_per_token * float(np.max(H100.prefill_equivalent(chunk, mix.input_tokens - chunk)))
    assert op.decode_step_s + dearest <= 0.1  # by hand: the cap applies here
    assert _itl_miss(spec, mix, rate, 0.1) > 0.01
    assert _itl_miss(capped, mix, rate, 0.1) == 0.0
    # with the cap the TTFT bound binds, and burstiness lowers it
    plain = replica_capacity(capped, mix, 2.0, 0.1)
    bursty = replica_capacity(capped, replace(mix, arrival_scv=4.0), 2.0, 0.1)
    assert plain.binding == "ttft" and bursty.ttft_rps < plain.ttft_rps
    assert replica_capacity(spec, mix, 2.0, 0.1).rps < plain.rps
