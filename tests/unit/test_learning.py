"""Capacity learned online (``models.learning``) and the MPC's measured hedges (``controllers.mpc``)."""

from __future__ import annotations

import itertools
import math
from collections import deque

import numpy as np
import pytest

from autoscaler.config.loading import default_config
from autoscaler.simulate import run_simulation
from autoscaler.state import PodObservation, PrioritySignals, ServiceEstimate, Signals, VariantObservation
from autoscaler.workload.types import Request, Workload
from controllers.mpc import (
    COVERAGE,
    DEFAULT_HOLD_S,
    MPCController,
    _ServiceMemory,
    learnable,
    measured_hold,
    measured_path,
    p95_stress,
)
from models.capacity import ReplicaSpec, RequestMix, replica_capacity
from models.learning import STRESS, CapacityPosterior, latency_curve, mean_latencies

CFG = default_config()
SVC = CFG.services[0]
SLO = SVC.slo["interactive"]
MIX = RequestMix.from_requests([1024], [128])


def h100() -> tuple[ReplicaSpec, float]:
    spec = ReplicaSpec.of(next(v for v in SVC.variants if v.name == "h100"), CFG.engine)
    return spec, replica_capacity(spec, MIX, SLO.ttft_s, SLO.itl_s).rps


@pytest.mark.parametrize("prior_error", [0.7, 1.3])
def test_the_posterior_finds_a_capacity_its_prior_puts_30_percent_off(prior_error: float) -> None:
    # The replica truly behaves as the model says (its latencies are the model's at its rate), but the
    # plan's prior is the model's capacity x prior_error: 30 % low or high, so the truth relative to
    # the prior is 1 / prior_error. Each tick it serves 50-90 % of what the plan believes it can (at
    # most 95 % of the model's capacity: past it the model's queue has no steady state), its mean
    # latencies with 5 % noise. Within 10 % of the truth in a few ticks, and it stays there.
    spec, model = h100()
    curve = latency_curve(spec, MIX, SLO.ttft_s, SLO.itl_s, model)
    kappa_true = 1.0 / prior_error  # relative to the prior
    prior = model * prior_error
    post = CapacityPosterior()
    rng = np.random.default_rng(0)
    within = None
    for tick in range(60):
        believed = prior * post.planned()
        rate = min(believed * rng.uniform(0.5, 0.9), 0.95 * model)
        ttft, tpot = mean_latencies(spec, MIX, rate)
        noise = rng.lognormal(0.0, 0.05, 2)
        post.observe(rate / prior, ttft * noise[0] / SLO.ttft_s, tpot * noise[1] / SLO.itl_s, curve)
        if within is None and abs(post.kappa / kappa_true - 1.0) <= 0.1:
            within = tick + 1
        if within is not None and tick >= within + 5:
            assert abs(post.kappa / kappa_true - 1.0) <= 0.1, (tick, post)
    assert within is not None and within <= 10, (within, post)


def test_a_tick_at_light_load_teaches_nothing() -> None:
    # At 3 % of capacity the model's latencies are flat in load: no measurement, the prior unchanged.
    spec, model = h100()
    curve = latency_curve(spec, MIX, SLO.ttft_s, SLO.itl_s, model)
    ttft, tpot = mean_latencies(spec, MIX, 0.03 * model)
    post = CapacityPosterior()
    assert not post.observe(0.03, 1.5 * ttft / SLO.ttft_s, 1.5 * tpot / SLO.itl_s, curve)
    assert post == CapacityPosterior()


def test_the_gate_takes_a_correction_only_where_the_slo_agrees_with_its_sign() -> None:
    # A replica at 80 % of the prior's capacity whose mean TTFT is what the model shows at 90 % reads
    # as a capacity 0.8 / 0.9 of the prior (down); at 60 %, 0.8 / 0.6 of it (up). With the gate
    # (``stress``, the p95 SLO ratio) a correction down is taken only where the tail is at STRESS (0.8)
    # or above, one up only below it and at UP_LOAD (0.8) of the believed capacity or more; a taken one
    # is exactly the ungated update.
    spec, model = h100()
    curve = latency_curve(spec, MIX, SLO.ttft_s, SLO.itl_s, model)
    for at, sign in ((0.9, -1.0), (0.6, 1.0)):
        ratio = mean_latencies(spec, MIX, at * model)[0] / SLO.ttft_s
        free = CapacityPosterior()
        assert free.measure(0.8, ratio, curve.ttft)
        assert np.sign(free.mean) == sign and np.sign(math.log(0.8 / at)) == sign
        calm, near = 0.5 * STRESS, 1.5 * STRESS
        refused, taken = (calm, near) if sign < 0 else (near, calm)
        post = CapacityPosterior()
        assert not post.measure(0.8, ratio, curve.ttft, stress=refused)
        assert post == CapacityPosterior()
        assert post.measure(0.8, ratio, curve.ttft, stress=taken)
        assert post == free
    # Calm, but at 70 % of the believed capacity (below UP_LOAD, 0.8): no correction up.
    light = mean_latencies(spec, MIX, 0.5 * model)[0] / SLO.ttft_s
    assert CapacityPosterior().measure(0.7, light, curve.ttft)
    assert not CapacityPosterior().measure(0.7, light, curve.ttft, stress=0.5 * STRESS)
    # At the threshold itself a tick is near capacity: down taken, up refused.
    down = mean_latencies(spec, MIX, 0.9 * model)[0] / SLO.ttft_s
    up = mean_latencies(spec, MIX, 0.6 * model)[0] / SLO.ttft_s
    assert CapacityPosterior().measure(0.8, down, curve.ttft, stress=STRESS)
    assert not CapacityPosterior().measure(0.8, up, curve.ttft, stress=STRESS)


@pytest.mark.parametrize("prior_error", [0.7, 1.3])
def test_the_gated_posterior_still_finds_a_capacity_30_percent_off(prior_error: float) -> None:
    # As the ungated test above, but the plan runs its replicas at 90 % of what it believes (as the MPC
    # does near its plan) and each tick's tail is near the SLO (stress 1.0) once the rate is past 85 %
    # of the true capacity, calm (0.5) below: from a prior 30 % high the posterior learns down only on
    # those stressed ticks, from one 30 % low up only on calm ones. Within 10 % of the truth in at
    # most 5 ticks either way (1 each here: the prior's sd, 0.3, gives the first tick most weight),
    # and it stays there.
    spec, model = h100()
    curve = latency_curve(spec, MIX, SLO.ttft_s, SLO.itl_s, model)
    kappa_true = 1.0 / prior_error
    prior = model * prior_error
    post = CapacityPosterior()
    rng = np.random.default_rng(1)
    within = None
    for tick in range(60):
        rate = min(prior * post.planned() * 0.9 * rng.uniform(0.95, 1.05), 0.95 * model)
        ttft, tpot = mean_latencies(spec, MIX, rate)
        noise = rng.lognormal(0.0, 0.05, 2)
        stress = 1.0 if rate >= 0.85 * model else 0.5
        post.observe(rate / prior, ttft * noise[0] / SLO.ttft_s, tpot * noise[1] / SLO.itl_s, curve, stress)
        if within is None and abs(post.kappa / kappa_true - 1.0) <= 0.1:
            within = tick + 1
        if within is not None and tick >= within + 5:
            assert abs(post.kappa / kappa_true - 1.0) <= 0.1, (tick, post)
    assert within is not None and within <= 5, (within, post)


def test_p95_stress_is_the_worse_tail_over_its_target_and_unknown_without_both() -> None:
    # TTFT p95 1.0 s of a 2.0-s target (0.5), time per output token p95 0.07 s of 0.1 s (0.7): 0.7.
    obs = VariantObservation(2, 0, signals=Signals(ttft_p95_s=1.0, tpot_p95_s=0.07))
    assert p95_stress(obs, SLO) == pytest.approx(max(1.0 / 2.0, 0.07 / 0.1))
    assert p95_stress(VariantObservation(2, 0, signals=Signals(ttft_p95_s=1.0)), SLO) is None
    assert p95_stress(VariantObservation(2, 0, signals=Signals(tpot_p95_s=0.2)), SLO) is None


def _estimate(ready: int = 2, shed: float | None = 0.0, pods: int = 2, ttft: float | None = 0.1) -> ServiceEstimate:
    sig = Signals(request_rate_rps=20.0, ttft_mean_s=ttft, tpot_mean_s=0.03)
    variants = {v.name: VariantObservation(ready if v.name == "h100" else 0, 0, signals=sig if v.name == "h100"
                                           else Signals()) for v in SVC.variants}
    top = Signals(by_priority={"sheddable": PrioritySignals(shed_rps=shed)})
    pod_list = [PodObservation("h100", 0.1, 0.0, 2.0, 0.1, 0.0, name=f"p{i}") for i in range(pods)]
    return ServiceEstimate(SVC.name, 600.0, top, variants, {}, False, 0.0, 0.0, 0, pods=pod_list)


def test_learnable_refuses_ticks_that_cannot_show_capacity() -> None:
    ok = _estimate()
    assert learnable(ok, ok.variants["h100"], 0.0, 60.0, SLO) == pytest.approx((20.0, 0.1 / SLO.ttft_s,
                                                                               0.03 / SLO.itl_s))
    shedding = _estimate(shed=1.0)
    assert learnable(shedding, shedding.variants["h100"], 0.0, 60.0, SLO) is None
    silent = _estimate(pods=1)  # a ready pod without series
    assert learnable(silent, silent.variants["h100"], 0.0, 60.0, SLO) is None
    unknown = _estimate(ttft=None)
    assert learnable(unknown, unknown.variants["h100"], 0.0, 60.0, SLO) is None
    assert learnable(ok, ok.variants["h100"], 570.0, 60.0, SLO) is None  # ready count changed 30 s ago
    idle = _estimate(ready=0, pods=0)
    assert learnable(idle, idle.variants["h100"], 0.0, 60.0, SLO) is None


def test_measured_hold_is_the_shortest_whose_falls_do_not_come_back() -> None:
    # Rates alternate 120 s at 40 req/s and 120 s at 20 req/s (15-s ticks) for an hour: with no hold or
    # a 60-s one the floor falls in every dip and the load is back within a cold start (300 s); a 120-s
    # hold (its window reaches the last 40-req/s tick from the dip's last one) never falls.
    t = np.arange(0.0, 3600.0, 15.0)
    rates = [(float(x), 40.0 if (x // 120) % 2 == 0 else 20.0) for x in t]
    assert measured_hold(rates, 300.0) == 120.0
    # A load that falls once and stays down: no hold is needed.
    rates = [(float(x), (40.0 if x < 600 else 20.0) * (1.0 + 0.01 * math.sin(x))) for x in t]
    assert measured_hold(rates, 300.0) == 0.0
    # Too little history: the default.
    assert measured_hold(rates[:30], 300.0) == DEFAULT_HOLD_S


def test_measured_path_reads_the_services_own_errors() -> None:
    # A forecaster whose mean is always 20 % low, the truth 100 req/s with 10 % lognormal noise: the
    # measured hedge at each step is the truth's 0.9 quantile, 100 x exp(z(0.9) x 0.1) = 113.6 req/s,
    # within the sampling error of 240 residuals.
    mem = _ServiceMemory()
    rng = np.random.default_rng(3)
    h, dt = 4, 15.0
    band = np.full(h, 1000.0)
    for k in range(300):
        out = measured_path(mem, k * dt, dt, np.full(h, 80.0), band, float(100.0 * rng.lognormal(0.0, 0.1)))
    from statistics import NormalDist
    expected = 100.0 * math.exp(NormalDist().inv_cdf(COVERAGE) * 0.1)
    assert out == pytest.approx(np.full(h, expected), rel=0.04)
    # Without residuals yet: the forecaster's band.
    assert measured_path(_ServiceMemory(), 0.0, dt, np.full(h, 80.0), band, 100.0) == pytest.approx(band)
    assert isinstance(mem.residuals[0], deque)


@pytest.mark.slow
def test_the_mpc_learns_one_capacity_from_either_side_without_oscillating() -> None:
    # One H100 variant, fixed 1024/128 requests at 4x the model's capacity for 40 minutes; the MPC's
    # prior capacity 30 % low, then 30 % high. Both posteriors settle on the same capacity (within 10 %
    # of each other), nearer it than either prior, and the fleet never reverses direction once settled.
    cfg = CFG.model_copy(deep=True)
    svc = cfg.services[0]
    svc.variants = [v for v in svc.variants if v.name == "h100"]
    v = svc.variants[0]
    v.min_replicas, v.initial_replicas, v.quota, v.max_replicas = 0, 1, None, 40
    _spec, model = h100()
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 2400.0, rng.poisson(4 * model * 2400.0)))
    wl = Workload([Request(float(a), 1024, 128) for a in t], source="test")
    learned = {}
    for prior in (0.7, 1.3):
        ctrl = MPCController(cfg, {svc.name: {"h100": model * prior}}, mixes={svc.name: MIX}, forecast="last",
                             learn=2)
        run = run_simulation(cfg, wl, ctrl)
        late = [tk.services[svc.name].decision for tk in run.ticks if tk.time_s >= 600.0]
        learned[prior] = model * prior * float(np.median([d.terms["capacity_scale_h100"] for d in late[-40:]]))
        counts = [d.desired["h100"] for d in late]
        moves = [np.sign(b - a) for a, b in itertools.pairwise(counts) if b != a]
        assert sum(1 for a, b in itertools.pairwise(moves) if a != b) == 0, counts
    low, high = learned[0.7], learned[1.3]
    assert abs(low / high - 1.0) <= 0.1, learned
    assert abs(low - model) < abs(0.7 * model - model) and abs(high - model) < abs(1.3 * model - model), learned
