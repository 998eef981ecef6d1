"""The busy-period form's prefill queue as a backlog serves it (``models.capacity.ReplicaSpec.backlog``,
opt-in, ``mpc:backlog=1``): queued prompts share a step's overhead, and the prompts a prefill busy period
admitted before a request weigh on its steps and the KV. Each term against a hand calculation or a
simulated queue; the form off leaves the busy-period form as it was.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support.paths import ROOT

from autoscaler.config.loading import load_config
from controllers.registry import build, parse_spec
from models.capacity import (
    ReplicaSpec,
    RequestMix,
    _backlog_kv,
    _backlog_service,
    _earlier_in_busy_period,
    _kv_points,
    _ttft_miss,
    marginal_costs,
    operating_point,
    replica_capacity,
)
from models.profiles import get_profile

H100 = get_profile("llama-3-8b/h100-sxm")
SPEC = ReplicaSpec(H100, 256, 8192, 16, 400_000, busy_period=True)
TTFT_BOUND = RequestMix(np.array([4000.0]), np.array([50.0]), np.array([1.0]))  # benchmarks/capacity.py's case


def test_requests_before_in_a_busy_period_by_hand() -> None:
    """``E[N (N - 1)] / (2 E[N])`` with ``E[N] = 1 / (1 - rho)``, ``Var N = (rho (1 - rho) + rate^2 E[S^2]) /
    (1 - rho)^3``. One size at rho = 1/2 (rate 5, S = 0.1 s): Var A = 1/4 + 1/4 = 1/2, E[N] = 2, Var N = 4,
    E[N^2] = 8, so (8 - 2) / 4 = 1.5. Two sizes 0.1 / 0.3 s, each half, rate 2: E[S] = 0.2, rho = 0.4,
    E[S^2] = 0.05, Var A = 0.24 + 0.2 = 0.44, E[N] = 5/3, Var N = 0.44 / 0.216 = 55/27, E[N^2] = 130/27,
    (130/27 - 45/27) / (10/3) = 17/18. At rho >= 1: inf."""
    assert _earlier_in_busy_period(np.array([0.1]), np.array([1.0]), 5.0) == pytest.approx(1.5, rel=1e-12)
    assert _earlier_in_busy_period(np.array([0.1, 0.3]), np.array([0.5, 0.5]), 2.0) == pytest.approx(17 / 18,
                                                                                                      rel=1e-12)
    assert _earlier_in_busy_period(np.array([0.1]), np.array([1.0]), 10.0) == math.inf


def test_requests_before_in_a_busy_period_against_a_simulated_queue() -> None:
    """An M/D/1 queue at rho = 1/2 (rate 5, service 0.1 s) run for 400,000 arrivals (Lindley's recursion,
    seed 0): each request's index in its busy period less one, averaged, is the formula's 1.5 within 3 %
    (the count's spread over 400,000 requests in ~200,000 busy periods is under 1 %)."""
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1 / 5.0, 400_000))
    before = np.empty(arrivals.size)
    free, k = -1.0, 0
    for i, t in enumerate(arrivals):
        k = k + 1 if t < free else 0
        before[i] = k
        free = max(free, t) + 0.1
    assert float(before.mean()) == pytest.approx(1.5, rel=0.03)


def test_the_backlogs_prefill_service_by_hand() -> None:
    """One 4,000-token prompt on an H100 (``a`` = 2.45596e-5 s a token, 4,300.56 prefill-token
    equivalents with attention: 0.105620 s), a step budget of 8,189 tokens, ``s_d`` = 0.0085 s, 3.75 req/s.
    The step overhead per token: 0.0085 x 4,000 / 8,189 = 0.004152 s, so 0.109772 s (the default's whole
    step: 0.114120 s); rho = 0.411645, and one size gives ``rho (2 - rho) / (2 (1 - rho)^2)`` = 0.94441
    requests before in the busy period, each decoding with ``b + g 4,000`` = 2.8003e-4 s a step: the step
    0.0085 + 0.000264 = 0.008764 s, and the service 0.105620 + 0.48846 x 0.008764 = 0.109901 s."""
    a = H100.prefill_s_per_token
    _, _, b, g = marginal_costs(H100)
    q = np.array([H100.prefill_equivalent(4000.0, 0.0)])
    p = np.array([4000.0])
    service, extra = _backlog_service(SPEC, q, p, np.array([1.0]), 4000.0, 8189.0, 0.0085, 3.75)
    plain = a * q[0] + 0.0085 * 4000 / 8189
    assert plain == pytest.approx(0.109772, abs=5e-7)
    rho = 3.75 * plain
    assert extra == pytest.approx(rho * (2 - rho) / (2 * (1 - rho) ** 2), rel=1e-12)
    assert extra == pytest.approx(0.94441, abs=5e-5)
    assert b + g * 4000 == pytest.approx(2.8003e-4, rel=1e-4)
    assert service[0] == pytest.approx(0.109901, abs=5e-7)
    # idle: nothing before, the shared overhead alone
    assert _backlog_service(SPEC, q, p, np.array([1.0]), 4000.0, 8189.0, 0.0085, 0.0)[0][0] == \
        pytest.approx(plain, rel=1e-12)


def test_the_kv_holds_the_prompts_a_busy_period_admitted() -> None:
    """An arrival finds the prefill queue busy with probability ``rho`` and then ``n`` requests before it
    in the busy period, each holding its prompt and a block (4,016 tokens): the occupancy's mean grows
    by ``rho n 4,016`` and its variance by ``rho n 4,016^2`` (over ``_backlog_service`` at the operating
    point); and with the form on the KV misses at 4 req/s rise."""
    rate = 4.0
    spec = replace(SPEC, backlog=True)
    op = operating_point(spec, TTFT_BOUND, rate)
    q = np.array([H100.prefill_equivalent(4000.0, 0.0)])
    budget = 8192 - op.decoding
    service, extra = _backlog_service(spec, q, np.array([4000.0]), np.array([1.0]), 4000.0, budget,
                                      op.decode_step_s, rate)
    rho = rate * float(service[0])
    mean, var = _backlog_kv(spec, TTFT_BOUND, op, rate, 1000.0, 2000.0)
    assert mean == pytest.approx(1000.0 + rho * extra * 4016.0, rel=1e-12)
    assert var == pytest.approx(2000.0 + rho * extra * 4016.0 ** 2, rel=1e-12)
    assert rho * extra > 0.1
    assert float(_kv_points(spec, TTFT_BOUND, rate)[0]) > float(_kv_points(SPEC, TTFT_BOUND, rate)[0])


def test_the_ttft_bound_case_misses_what_the_simulator_misses_with_the_form() -> None:
    """benchmarks/capacity.py's TTFT-bound case (4,000/50 tokens, H100, 0.5-s TTFT) at 3.75 req/s: the
    simulator misses 0.663 +- 0.037 % of TTFTs over 12 seeds (docs/benchmarks.md, "The out-of-band
    cases, third pass"); the busy-period form counts 1.000 % (each queued prompt charged a whole step's
    overhead), the backlog form within 10 % of the simulator."""
    plain = _ttft_miss(SPEC, TTFT_BOUND, 3.75, 0.5)
    backlog = _ttft_miss(replace(SPEC, backlog=True), TTFT_BOUND, 3.75, 0.5)
    assert plain == pytest.approx(0.0100, abs=0.0005)
    assert backlog == pytest.approx(0.00663, rel=0.10)


def test_the_form_is_off_by_default_and_needs_the_busy_period_form() -> None:
    """Off by default (the busy-period form's capacity the same with ``backlog=False`` named), a
    ValueError without ``busy_period``, and on it raises the TTFT-bound case's capacity (the queue's
    prompts share their steps' overhead)."""
    assert not SPEC.backlog
    off = replica_capacity(replace(SPEC, backlog=False), TTFT_BOUND, 0.5, 0.1)
    assert off == replica_capacity(SPEC, TTFT_BOUND, 0.5, 0.1)
    on = replica_capacity(replace(SPEC, backlog=True), TTFT_BOUND, 0.5, 0.1)
    assert on.ttft_rps > 1.03 * off.ttft_rps
    with pytest.raises(ValueError, match="needs busy_period=True"):
        ReplicaSpec(H100, 256, 8192, 16, 400_000, backlog=True)


def test_mpc_backlog_plans_on_the_form_and_implies_busy() -> None:
    """``mpc:backlog=1`` parses, and its replicas are specified with the busy-period form and the backlog
    terms; plain ``mpc`` and ``mpc:busy=1`` without them."""
    cfg = load_config(Path(ROOT) / "examples" / "fleet.yaml")
    assert parse_spec("mpc:backlog=1") == ("mpc", {"backlog": 1})
    variant = cfg.services[0].variants[0]
    for spec, busy, backlog in (("mpc", False, False), ("mpc:busy=1", True, False), ("mpc:backlog=1", True, True)):
        ctl = build(spec, cfg)
        slowed = ctl._slowed(variant, 1.0)  # type: ignore[attr-defined]
        assert (slowed.busy_period, slowed.backlog) == (busy, backlog)


def test_mpc_backlog_refuses_an_explicit_busy_0_it_would_override() -> None:
    assert parse_spec("mpc:backlog=1:busy=1") == ("mpc", {"backlog": 1, "busy": 1})
    with pytest.raises(ValueError, match=r"^mpc backlog=1 implies busy=1, got 'mpc:busy=0:backlog=1'$"):
        parse_spec("mpc:busy=0:backlog=1")
