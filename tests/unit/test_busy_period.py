"""The ITL bound's busy-period form (``models.capacity.ReplicaSpec.busy_period``): Takacs' count law
by hand, the gamma form against a brute-force busy period, the fixed window as its upper bound, and
the simulator's count of prefills riding in a decode against the law.

A decode of ``D`` steps carries the prefills that arrive while it runs, and each one it carries
lengthens it, so more arrive: the work it carries is that of an M/G/1 busy period begun by the
decode's own steps (Kendall's identity; for one prefill size, Takacs' formula).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from autoscaler.config.loading import parse_config
from autoscaler.knee import poisson_workload
from autoscaler.report import outcome_columns
from autoscaler.simulate import run_simulation
from controllers.static import StaticController
from models.capacity import (
    ReplicaSpec,
    RequestMix,
    _busy_tail,
    _busy_tail_one,
    _gamma_sf,
    _initial_work,
    _itl_miss,
    operating_point,
    replica_capacity,
)
from models.profiles import get_profile

H100 = get_profile("llama-3-8b/h100-sxm")



ONE_H100 = {"services": [{"name": "svc", "model": "m", "max_model_len": 16384,
                          "slo": {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20, "itl_s": 1}},
                          "variants": [{"name": "h100", "gpu": "H100-SXM", "price_per_gpu_hour": 2.99,
                                        "min_replicas": 0, "max_replicas": 1, "initial_replicas": 1,
                                        "startup_cold_s": 10, "kv_cache_tokens": 400_000,
                                        "profile": "llama-3-8b/h100-sxm"}]}],
            "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 8192}}
"""One H100 replica of an 8B model on 8192-token steps (the capacity benchmark's ITL-bound case)."""

def test_takacs_count_law_by_hand() -> None:
    # x = 0.3 s of the decode's own steps, prefills of c = 0.2 s at 2/s. With slack 0.1 < c one
    # prefill is already a miss: P(miss) = P(an arrival within x) = 1 - e^{-0.6}. With slack 0.3 one
    # fits and two do not: P(N = 1) = x / (x + c) Pois(1; 2 (x + c)) = 0.6 * 1.0 e^{-1.0} / 1.0.
    x = np.array([0.3, 0.3])
    got = _busy_tail_one(x, np.array([0.1, 0.3]), 2.0, 0.2)
    assert got[0] == pytest.approx(1 - math.exp(-0.6), rel=1e-12)
    assert got[1] == pytest.approx(1 - math.exp(-0.6) - 0.3 / 0.5 * 1.0 * math.exp(-1.0), rel=1e-12)


def brute_force_busy_tail(x: float, slack: float, rate: float, mean_cost: float, paths: int = 200_000) -> float:
    """P(the work arriving during a busy period begun by ``x`` exceeds ``slack``), Poisson arrivals
    of exponential work, by simulating each path arrival by arrival (seeded)."""
    rng = np.random.default_rng(0)
    work = np.zeros(paths)
    arrival = rng.exponential(1 / rate, paths)
    alive = np.ones(paths, dtype=bool)
    while True:
        ride = alive & (arrival < x + work)  # arrives before the decode (x plus what it carries) ends
        if not ride.any():
            break
        work[ride] += rng.exponential(mean_cost, ride.sum())
        arrival[ride] += rng.exponential(1 / rate, ride.sum())
        alive = ride & (work <= slack)
    return float(np.mean(work > slack))


@pytest.mark.parametrize(("x", "slack", "rate", "cost"), [(0.06, 0.09, 6.0, 0.05), (0.5, 1.8, 1.5, 0.2)])
def test_the_busy_period_tail_against_brute_force(x: float, slack: float, rate: float, cost: float) -> None:
    # Exponential work: m2 = 2 m1^2. The brute force is ~9 % and ~1.3 % here (the budget's scale);
    # the gamma stand-in for the arrived work keeps within -15 %/+25 % of it, where the fixed window
    # over the same length (x + slack) counts every arrival and is at least 1.6x.
    want = brute_force_busy_tail(x, slack, rate, cost)
    got = float(_busy_tail(np.array([x]), np.array([slack]), rate, cost, 2 * cost * cost, 1.0)[0])
    fixed = float(_gamma_sf(np.array([slack]), rate * (x + slack) * cost, rate * (x + slack) * 2 * cost * cost)[0])
    assert 0.85 * want <= got <= 1.25 * want
    assert fixed >= 1.6 * want


def test_the_fixed_window_bounds_the_busy_period_from_above() -> None:
    # A busy period past x + slack has carried more than slack by then, so P(busy) <= P(fixed window
    # of x + slack). Where the budget is spent (misses of 0.1-5 %) the gamma stand-ins keep that, to
    # within the quadrature's 2e-4 (1 - atom - integral: a fiftieth of a 1 % budget).
    rng = np.random.default_rng(1)
    x = rng.uniform(0.02, 1.0, 400)
    slack = rng.uniform(0.05, 2.0, 400)
    for rate, m1, cv2 in ((2.0, 0.05, 1.0), (8.0, 0.02, 2.0), (1.0, 0.2, 0.5)):
        m2 = m1 * m1 * (1 + cv2)
        busy = _busy_tail(x, slack, rate, m1, m2, 1.0)
        fixed = _gamma_sf(slack, rate * (x + slack) * m1, rate * (x + slack) * m2)
        low = fixed < 0.05
        assert np.all(busy[low] <= fixed[low] + 2e-4)
        near = (fixed > 1e-3) & (fixed < 0.05)
        assert near.sum() > 20 and np.all(busy[near] <= fixed[near])
        assert np.any(busy[near] < 0.5 * fixed[near])  # and well below it there: not the same form


def test_the_simulators_decodes_carry_prefills_as_the_busy_period_says() -> None:
    # One replica, 8000-token prompts, 20-token outputs on 8192-token steps (the ITL-bound case of
    # benchmarks/capacity.py): each prefill rides whole in one step of the decodes running then. The
    # simulator's share of decodes that carry no prefill (no other request's first token between a
    # request's first token and its last) is e^{-rate x}, x from ``_initial_work``; its ITL misses
    # are within 25 % of the busy-period form's, where the fixed window overstates them.
    cfg = parse_config(ONE_H100, "<busy-period test>")
    rate = 1.53
    wl = poisson_workload(rate, np.array([8000]), np.array([20]), 20_000 / rate, seed=0)
    one = StaticController({"svc": {"h100": 1}}, cfg.controller.tick_s, cfg.controller.window_s)
    o = outcome_columns(run_simulation(cfg, wl, one))
    first, finish = o["arrival"] + o["ttft"], o["finish"]
    ordered = np.sort(first)
    riding = np.searchsorted(ordered, finish, side="right") - np.searchsorted(ordered, first, side="right")
    spec = ReplicaSpec.of(cfg.services[0].variants[0], cfg.engine)
    mix = RequestMix.from_requests([8000], [20])
    op = operating_point(spec, mix, rate)
    x = float(_initial_work(spec, mix, op, rate, spec.max_num_batched_tokens - op.decoding, 1)[0])
    assert np.mean(riding == 0) == pytest.approx(math.exp(-rate * x), abs=0.02)
    sim_miss = float(np.mean(~o["itl_ok"]))
    busy = _itl_miss(replace(spec, busy_period=True), mix, rate, 0.1)
    fixed = _itl_miss(spec, mix, rate, 0.1)
    assert 0.75 * sim_miss <= busy <= 1.25 * sim_miss
    assert fixed > busy


def test_the_busy_period_form_is_off_by_default_and_raises_short_decodes_capacity() -> None:
    # Azure code's shape on 8192-token steps (2k prompts, 28-token outputs, lognormal): the short
    # decodes' misses bind the ITL bound, and the busy-period form lets a replica carry more; the
    # slot and KV bounds do not move (its TTFT bound is the prefill queue's whole law:
    # tests/unit/test_prefill_wait.py).
    spec = ReplicaSpec(H100, 256, 8192, 16, 400_000)
    q = stats.norm.ppf((np.arange(100) + 0.5) / 100)
    prompts = 2048 * np.exp(-0.32 + 0.8 * q)  # lognormal, mean 2048, sigma 0.8 (benchmarks/capacity.py)
    outputs = np.maximum(np.rint(28 * np.exp(-0.5 + 1.0 * q)), 1)  # mean 28, sigma 1.0
    ins, outs = np.meshgrid(prompts, outputs)
    mix = RequestMix.from_requests(ins.ravel(), outs.ravel())
    plain = replica_capacity(spec, mix, 2.0, 0.1)
    busy = replica_capacity(replace(spec, busy_period=True), mix, 2.0, 0.1)
    assert not spec.busy_period
    assert plain.binding == "itl" and busy.itl_rps > 1.1 * plain.itl_rps
    assert busy.kv_rps == plain.kv_rps
    # the slot wait reads the prompts' marginal in the busy form (tests/unit/test_busy_shared.py); the
    # same prompts here, so the same bound to within the marginal's strata
    assert busy.seqs_rps == pytest.approx(plain.seqs_rps, rel=1e-4)
    assert busy.ttft_rps > busy.itl_rps


@pytest.mark.slow
def test_the_busy_period_form_is_within_the_band_of_the_knee_on_azure_code_like_lengths() -> None:
    # benchmarks/capacity.py's "azure-code-like 2048/28" (8192-token steps, so the per-step cap does
    # not apply): the fixed window gives 0.77 of the simulator's knee, the busy-period form 0.97 (d766c9f),
    # 0.94 with the prefill queue's law and joining prefills (5698ae9).
    from support.busy_knee import busy_model_and_knee, lognormal_lengths

    from autoscaler.knee import one_replica

    ins, outs = lognormal_lengths(20_000, (2048, 0.32, 0.8), (28, 0.5, 1.0))
    keep = ins + outs <= 16384
    ins, outs = ins[keep], outs[keep]
    cfg = one_replica(parse_config(ONE_H100, "<busy-period knee>"), "h100")
    model, measured = busy_model_and_knee(cfg, ins, outs, np.ones(len(ins), dtype=bool), 1.5, 8)
    print(f"\nazure-code-like: busy-period model {model:.3f} req/s, knee {measured:.3f}: {model / measured:.2f}")
    assert 0.51 * model < measured < 1.49 * model
    assert 0.90 <= model / measured <= 1.05


def test_mpc_busy_option_plans_on_the_busy_period_form() -> None:
    from autoscaler.config.loading import default_config
    from controllers.mpc import MPCController
    from controllers.registry import build

    cfg = default_config()
    v = cfg.services[0].variants[0]
    on, off = build("mpc:busy=1", cfg), build("mpc", cfg)
    assert isinstance(on, MPCController) and isinstance(off, MPCController)
    assert on._slowed(v, 1.0).busy_period and not off._slowed(v, 1.0).busy_period
    with pytest.raises(ValueError, match="busy"):
        build("mpc:busy=2", cfg)
