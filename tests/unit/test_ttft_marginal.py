"""The default form's TTFT bound with ``ReplicaSpec.prompt_marginal`` (opt-in, ``mpc:marginal=1``) reads
the prompts' marginal (``RequestMix.prompt_points``) on one replica: its queue's service moments and
each request's slack come from the marginal's points, not the mix's stratified ones. Checked against
the formula worked by hand (Kingman's tail over the marginal), the TTFT bound's rate against a
bisection of that hand formula, and without the option (or a marginal) against the stratified points.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from models.capacity import UNLOADED, ReplicaSpec, RequestMix, _ttft_miss, _work, operating_point, replica_capacity
from models.profiles import get_profile

H100 = get_profile("llama-3-8b/h100-sxm")
PLAIN = ReplicaSpec(H100, 256, 8192, 16, 400_000)
SPEC = replace(PLAIN, prompt_marginal=True)
TTFT_S = 0.5
# Two stratified points whose prompts average a marginal of four: the same mean prompt (4,000 tokens),
# but the marginal's prefill service varies more (the points average each stratum's long prompts away).
PROMPTS, SHARES = np.array([1000.0, 3000.0, 5000.0, 7000.0]), np.array([0.25, 0.25, 0.25, 0.25])
MIX = RequestMix(np.array([2000.0, 6000.0]), np.array([200.0, 200.0]), np.array([0.5, 0.5]),
                 prompt_points=PROMPTS, prompt_weights=SHARES)
WITHOUT = replace(MIX, prompt_points=None, prompt_weights=None)


def by_hand(rate: float, prompts: np.ndarray, weights: np.ndarray) -> float:
    """TTFT misses at ``rate`` by the module docstring's formula: the prefill service of a prompt ``P``
    is ``a Q(P) + ceil(P / budget) s_d`` (``Q``: its prefill-token equivalents, ``budget``: the step's
    tokens less the decoding sequences, ``s_d``: the decode step, both at the mix's fluid operating
    point); an arrival waits with probability ``rho = lam E[S]`` and beyond ``t`` with ``rho exp(-2 (1 -
    rho) t / (E[S] (1 + cs^2)))`` (Kingman, Poisson arrivals); it misses when the wait exceeds ``ttft -
    S - s_d``, or always where that is negative."""
    op = operating_point(SPEC, MIX, rate)
    a = H100.prefill_s_per_token
    budget = 8192 - op.decoding
    sd = op.decode_step_s
    service = np.array([a * H100.prefill_equivalent(p, 0) + math.ceil(p / budget) * sd for p in prompts])
    es = float(weights @ service)
    cs2 = float(weights @ service ** 2) / es ** 2 - 1.0
    rho = rate * es
    decay = 2.0 * (1.0 - rho) / (es * (1.0 + cs2))
    slack = TTFT_S - service - sd
    return float(sum(w * (1.0 if z < 0 else rho * math.exp(-decay * z)) for w, z in zip(weights, slack, strict=True)))


def test_the_ttft_misses_are_kingmans_tail_over_the_prompts_marginal() -> None:
    for rate in (2.0, 3.0, 3.5):
        over_marginal = by_hand(rate, PROMPTS, SHARES)
        over_points = by_hand(rate, MIX.input_tokens, MIX.weights)
        assert _ttft_miss(SPEC, MIX, rate, TTFT_S) == pytest.approx(over_marginal, rel=1e-9)
        # a mix without a marginal keeps its points, and so does the default form without the option
        assert _ttft_miss(SPEC, WITHOUT, rate, TTFT_S) == pytest.approx(over_points, rel=1e-9)
        assert _ttft_miss(PLAIN, MIX, rate, TTFT_S) == pytest.approx(over_points, rel=1e-9)
        # and the marginal's heavier service law misses more: the two differ well beyond rounding
        assert over_marginal > 1.1 * over_points


def test_the_ttft_bound_is_the_rate_where_the_hand_formula_reaches_the_budget() -> None:
    # the budget is 1 % over what an idle replica misses (``replica_capacity``): no prompt here (the
    # longest, 7,000 tokens, prefills in ~0.2 s), so the idle share is only Kingman's tail at rho ~ 0
    floor = by_hand(UNLOADED / _work(SPEC, MIX), PROMPTS, SHARES)
    assert floor < 1e-6
    lo, hi = 0.5, 6.0
    assert by_hand(lo, PROMPTS, SHARES) < 0.01 < by_hand(hi, PROMPTS, SHARES)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if by_hand(mid, PROMPTS, SHARES) <= 0.01 + floor else (lo, mid)
    bounds = replica_capacity(SPEC, MIX, TTFT_S, 0.1)
    assert bounds.ttft_rps == pytest.approx(lo, rel=1e-6)
    # over the stratified points (the default form's, the planners') the bound is higher
    assert replica_capacity(PLAIN, MIX, TTFT_S, 0.1).ttft_rps > 1.03 * bounds.ttft_rps


def test_a_pool_keeps_the_mixs_points() -> None:
    # pooled replicas keep Kingman-Whitt's queue over the stratified points (docs/benchmarks.md)
    assert _ttft_miss(SPEC, MIX, 3.0, TTFT_S, replicas=4) == _ttft_miss(SPEC, WITHOUT, 3.0, TTFT_S, replicas=4)


def test_mpc_marginal_option_plans_on_the_prompts_marginal() -> None:
    from autoscaler.config.loading import default_config
    from controllers.mpc import MPCController
    from controllers.registry import build

    cfg = default_config()
    v = cfg.services[0].variants[0]
    on, off = build("mpc:marginal=1", cfg), build("mpc", cfg)
    assert isinstance(on, MPCController) and isinstance(off, MPCController)
    assert on._slowed(v, 1.0).prompt_marginal and not off._slowed(v, 1.0).prompt_marginal
    with pytest.raises(ValueError, match="marginal"):
        build("mpc:marginal=2", cfg)
