"""The concurrency detector's ``tokens`` and ``hybrid`` modes at the simulated gateway (issue 29):
llm-d-router v0.10.0 (commit 71f4f09) ``pkg/epp/framework/plugins/flowcontrol/saturationdetector/
concurrency/{config,detector}.go`` over the ``inflight-load-producer``'s counts
(``pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload/producer.go``).

As in ``test_admission.py``, one replica runs one request at a time (``max_num_seqs`` 1) and every
prompt is 100 tokens, so the tokens in flight are 100 per request counted; expected values are
worked by hand from the plugin's rules: the filter keeps a replica while its load is *below* the
limit (a replica under it takes a request whatever its size), the pool gate holds at saturation 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.paths import ROOT

from autoscaler.config import GatewayConfig
from autoscaler.config.loading import load_config
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import INTERACTIVE, Request, Workload
from controllers.admission import itl_budgets, token_budget, token_charge
from models.capacity import (
    ReplicaSpec,
    RequestMix,
    concurrency_at,
    operating_point,
    rate_at_concurrency,
    service_mix,
    tokens_in_flight_at,
)

ENGINE = {"max_num_seqs": 1, "max_num_batched_tokens": 8192}


def req(t: float, out: int = 1000, hash_ids: tuple[int, ...] = ()) -> Request:
    return Request(arrival_s=t, input_tokens=100, output_tokens=out, request_class=INTERACTIVE, priority=2,
                   hash_ids=hash_ids)


def sim_of(make_fleet, requests: list[Request], replicas: int = 1, streaming: bool = False,
           simulator: dict | None = None, **gateway) -> FleetSimulator:
    sim_cfg = {"gateway": {"saturation": "concurrency", **gateway},
               "clients": {"max_retries": 0, "streaming": streaming}, **(simulator or {})}
    cfg = make_fleet(replicas, simulator=sim_cfg, engine=ENGINE)
    return FleetSimulator(cfg, Workload(requests, source="test:tokens"), admission=True)


def run_to_first_finish(sim: FleetSimulator) -> None:
    first = sim.final[0]
    while first.t_finish is None:
        sim.run_until(sim.now + 1.0)
    sim.run_until(first.t_finish + 1e-3)


def test_tokens_mode_holds_a_replica_at_its_token_budget_and_a_completion_frees_its_tokens(make_fleet) -> None:
    """Budget 250 tokens, 100 a request, charged until the last token (a non-streaming response):
    dispatched at 0 and 100 tokens in flight, and at 200 (< 250) a third, to 300; then held (filter:
    300 >= 250; saturation 1.2). A completion frees exactly its 100 (200: one more goes, 300 again)."""
    sim = sim_of(make_fleet, [req(0.001 * i) for i in range(10)], concurrency_mode="tokens",
                 max_token_concurrency=250)
    svc = sim.services["svc"]
    sim.run_until(0.5)
    (replica,) = svc.replicas
    assert (replica.n_running, len(replica.waiting)) == (1, 2)
    assert svc.tokens[replica.rid] == 300 and svc.flow.queued == [0, 0, 7]
    run_to_first_finish(sim)
    assert replica.outstanding == 3 and svc.tokens[replica.rid] == 300 and svc.flow.queued == [0, 0, 6]
    while not sim.done:
        sim.run_until(sim.now + 10.0)
    assert svc.tokens[replica.rid] == 0  # every charge released, none twice


def test_a_streaming_requests_tokens_are_freed_at_its_first_token(make_fleet) -> None:
    """Without the output estimate a streaming request's tokens go at its first token (the producer's
    StartOfStream): the running one's 100 are freed as soon as it is prefilled, so a fourth request
    is dispatched (3 waiting in the replica, 300 tokens: theirs) while the first still decodes. With
    ``output_estimate`` they stay to its last token: 100 + round(100 x 1.5) = 250 each, so the
    replica holds 1 (250 < 300) then 2 (500): held at 2 in flight."""
    sim = sim_of(make_fleet, [req(0.001 * i) for i in range(10)], streaming=True, concurrency_mode="tokens",
                 max_token_concurrency=300)
    svc = sim.services["svc"]
    sim.run_until(0.5)
    (replica,) = svc.replicas
    assert sim.final[0].t_first is not None and sim.final[0].t_finish is None
    assert (replica.n_running, len(replica.waiting)) == (1, 3) and svc.tokens[replica.rid] == 300
    assert svc.flow.queued == [0, 0, 6]
    sim = sim_of(make_fleet, [req(0.001 * i) for i in range(10)], streaming=True, concurrency_mode="tokens",
                 max_token_concurrency=300, output_estimate=True)
    svc = sim.services["svc"]
    sim.run_until(0.5)
    (replica,) = svc.replicas
    assert replica.outstanding == 2 and svc.tokens[replica.rid] == 500 and svc.flow.queued == [0, 0, 8]


@pytest.mark.parametrize(("max_concurrency", "max_tokens", "in_flight"), [(2, 1000, 2), (10, 250, 3)])
def test_hybrid_holds_on_whichever_limit_binds_first(make_fleet, max_concurrency: int, max_tokens: int,
                                                     in_flight: int) -> None:
    """Hybrid: saturation max(requests / max_concurrency, tokens / max_token_concurrency), a replica a
    candidate while below both. 2 requests and 1,000 tokens: the requests bind (2 in flight: 1.0 vs
    0.2). 10 requests and 250 tokens: the tokens bind (3 in flight, 300 tokens, as in tokens mode)."""
    sim = sim_of(make_fleet, [req(0.001 * i) for i in range(10)], concurrency_mode="hybrid",
                 max_concurrency=max_concurrency, max_token_concurrency=max_tokens)
    svc = sim.services["svc"]
    sim.run_until(0.5)
    (replica,) = svc.replicas
    assert replica.outstanding == in_flight and svc.tokens[replica.rid] == 100 * in_flight
    assert svc.flow.queued == [0, 0, 10 - in_flight]


def test_hybrid_saturation_is_the_mean_of_each_replicas_larger_ratio(make_fleet) -> None:
    """The plugin's own case (detector_test.go, ``endpoints_saturated_on_different_dimensions``):
    replica A full on requests (2 of 2, no tokens), B full on tokens (1,000 of 1,000, no request):
    hybrid reports mean(1, 1) = 1 where the aggregate ratios are 0.5 each; the filter drops both."""
    sim = sim_of(make_fleet, [], replicas=2, concurrency_mode="hybrid", max_concurrency=2,
                 max_token_concurrency=1000)
    svc = sim.services["svc"]
    a, b = svc.replicas
    a.waiting.extend([object(), object()])  # type: ignore[list-item]  # two requests held, not run
    svc.tokens[b.rid] = 1000
    assert sim._concurrency_saturation(svc, [a, b]) == 1.0
    assert not sim._below_limits(svc, a) and not sim._below_limits(svc, b)
    sim.cfg.simulator.gateway.concurrency_mode = "tokens"
    assert sim._concurrency_saturation(svc, [a, b]) == 0.5 and sim._below_limits(svc, a)
    sim.cfg.simulator.gateway.concurrency_mode = "requests"
    assert sim._concurrency_saturation(svc, [a, b]) == 0.5 and sim._below_limits(svc, b)
    a.waiting.clear()


def test_the_prefix_a_replica_holds_is_not_charged_under_prefix_affinity(make_fleet) -> None:
    """With the prefix-cache scorer (``router: prefix_affinity``) the producer charges the uncached
    part: the second of two requests on one prefix block finds it in the replica's cache (the first
    was admitted into the engine at once) and is charged 0 of its 100 tokens."""
    sim = sim_of(make_fleet, [req(0.0, hash_ids=(7,)), req(0.001, hash_ids=(7,))], concurrency_mode="tokens",
                 max_token_concurrency=1000, simulator={"router": "prefix_affinity"})
    svc = sim.services["svc"]
    sim.run_until(0.002)
    (replica,) = svc.replicas
    assert replica.outstanding == 2 and (sim.final[0].gw_tokens, sim.final[1].gw_tokens) == (100, 0)


def test_token_charge_by_hand() -> None:
    """The producer's charge: ceil(prompt x bytes per token / 4), less the cached part, plus
    min(round(estimate x output_ratio), max_estimated_output_tokens) with the output estimate."""
    g = GatewayConfig(saturation="concurrency", concurrency_mode="tokens")
    p, none = np.array([1000.0, 3.0]), np.zeros(2)
    assert token_charge(p, none, g).tolist() == [1000.0, 3.0]
    g.prompt_bytes_per_token = 3.0  # denser text than the 4-byte estimate assumes: undercounted
    assert token_charge(p, none, g).tolist() == [750.0, 3.0]  # ceil(2.25) = 3
    assert token_charge(p, np.array([512.0, 0.0]), g).tolist() == [238.0, 3.0]
    g.output_estimate = True
    assert token_charge(p, none, g).tolist() == [750.0 + 1125.0, 3.0 + 5.0]  # round(4.5) = 5, away from 0
    g.max_estimated_output_tokens = 500
    assert token_charge(p, np.array([512.0, 0.0]), g).tolist() == [238.0 + 500.0, 8.0]


def test_tokens_in_flight_is_littles_law_on_the_operating_point() -> None:
    """One point (4,000-token prompt, 200-token output) on a GH200: tokens held to the last token are
    the requests in flight times the charge; held to the first token, rate x charge x prefill time."""
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    gh200 = next(v for v in cfg.services[0].variants if v.name == "gh200")
    spec = ReplicaSpec.of(gh200, cfg.engine)
    mix = RequestMix.from_requests(np.array([4000.0]), np.array([200.0]))
    rate = 2.0
    charge = np.array([4000.0])
    assert tokens_in_flight_at(spec, mix, rate, charge, False) == pytest.approx(4000 * concurrency_at(spec, mix, rate))
    assert tokens_in_flight_at(spec, mix, rate, charge, True) == pytest.approx(
        rate * 4000 * operating_point(spec, mix, rate).prefill_s)
    assert tokens_in_flight_at(spec, mix, 0.0, charge, True) == 0.0
    with pytest.raises(ValueError, match="charge has 2 values for a mix of 1 points"):
        tokens_in_flight_at(spec, mix, rate, np.array([1.0, 2.0]), True)


def test_the_auto_token_budget_follows_the_itl_bound_and_the_release() -> None:
    """``auto``: tokens in flight at each variant's ITL bound's rate under the counter's charge and
    release; held to the last token it is far more than held to the first (a prompt's tokens are in
    flight for its whole life, not its prefill); ``auto-min`` the fewest; a number is taken as is."""
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    svc = cfg.services[0]
    g = GatewayConfig(saturation="concurrency", concurrency_mode="tokens")
    end = token_budget(svc, cfg.engine, g, False, False)
    first = token_budget(svc, cfg.engine, g, True, False)
    budgets = itl_budgets(svc, cfg.engine)
    mix = service_mix(svc)
    for v in svc.variants:
        spec, b = ReplicaSpec.of(v, cfg.engine), budgets[v.name]
        rate = rate_at_concurrency(spec, mix, cfg.engine.max_num_seqs, b.itl_rps)
        # the rate is the ITL bound's unless more than max_num_seqs would be in flight there (h100, gh200)
        assert concurrency_at(spec, mix, rate) == pytest.approx(min(b.in_flight, cfg.engine.max_num_seqs), rel=1e-6)
        assert (rate < b.itl_rps) == (b.in_flight > cfg.engine.max_num_seqs)
        whole = np.ceil(mix.input_tokens)  # the counter charges whole tokens
        assert end[v.name] == math.floor(tokens_in_flight_at(spec, mix, rate, whole, False))
        assert first[v.name] < end[v.name] / 20
    assert sum(b.in_flight > cfg.engine.max_num_seqs for b in budgets.values()) == 2
    # held to the last token at max_num_seqs in flight: about 256 mean prompts (1,024 tokens)
    assert end["gh200"] == pytest.approx(256 * 1024, rel=0.01)
    g.max_token_concurrency = "auto-min"
    assert set(token_budget(svc, cfg.engine, g, False, False).values()) == {min(end.values())}
    g.output_estimate = True  # charged 2.5 prompts (1.5 as output) and held to the last token either way
    est = token_budget(svc, cfg.engine, g, True, False)
    assert est == token_budget(svc, cfg.engine, g, False, False)
    assert min(est.values()) == pytest.approx(2.5 * min(end.values()), rel=1e-3)
    g.max_token_concurrency = 5000
    assert set(token_budget(svc, cfg.engine, g, True, False).values()) == {5000}


@pytest.mark.parametrize(("settings", "message"), [
    ({"concurrency_mode": "tokens"}, "concurrency_mode tokens is the concurrency detector's: it needs saturation "
                                     "concurrency, not pool"),
    ({"saturation": "pod", "concurrency_mode": "hybrid"}, "it needs saturation concurrency, not pod"),
    ({"saturation": "concurrency", "concurrency_mode": "magic"}, "concurrency_mode"),
    ({"saturation": "concurrency", "max_token_concurrency": 0},
     "a positive integer, auto or auto-min is expected, got 0"),
    ({"saturation": "concurrency", "max_token_concurrency": "1e6"}, "a positive integer, auto or auto-min"),
    ({"output_ratio": -0.5}, "output_ratio"),
    ({"max_estimated_output_tokens": -1}, "max_estimated_output_tokens"),
    ({"prompt_bytes_per_token": 0}, "prompt_bytes_per_token"),
    ({"output_estimate": "yes"}, "output_estimate"),
])
def test_bad_settings_are_refused_in_one_line(settings: dict, message: str) -> None:
    from autoscaler.config.loading import parse_config
    from autoscaler.errors import ConfigError

    doc = load_config(ROOT / "examples" / "fleet.yaml").model_dump(mode="json", exclude_unset=True)
    with pytest.raises(ConfigError, match=r"simulator\.gateway") as exc:
        parse_config({**doc, "simulator": {"gateway": settings}}, "f.yaml")
    assert message in str(exc.value) and "\n" not in str(exc.value).strip()


def test_the_default_is_the_requests_mode_and_counts_no_token(make_fleet) -> None:
    """``saturation: concurrency`` alone is the requests mode, as before: no token is counted and the
    token settings change nothing (held at max_concurrency 3 with or without them)."""
    g = GatewayConfig()
    assert (g.concurrency_mode, g.max_token_concurrency, g.output_estimate) == ("requests", "auto", False)
    for extra in ({}, {"output_estimate": True, "max_token_concurrency": 1}):
        sim = sim_of(make_fleet, [req(0.001 * i) for i in range(10)], max_concurrency=3, **extra)
        svc = sim.services["svc"]
        sim.run_until(0.5)
        assert svc.replicas[0].outstanding == 3 and svc.tokens == {} and svc.flow.queued == [0, 0, 7]
