"""Prefill/decode disaggregation in the simulator (autoscaler.simulator.disagg): the KV hand-over's time
and KV accounting worked out by hand, llm-d's remote-prefill rule, the role label, and the fleet file's
errors.

Hand values use the ``llama-3-8b/h100-sxm`` profile's coefficients (``models/profiles/coefficients.json``):
t0 = 7.7655e-3 s, a = 2.45596e-5 s/token, r = 3.75601e-5 tokens/pair, b = 4.89138e-5 s/seq,
g = 131072 B / (0.677163 x 3.35e12 B/s) = 5.7779e-8 s/token, and 131,072 KV bytes per token.
A prefill chunk of k tokens after s computed ones takes t0 + a (k + r (k s + k (k + 1) / 2)).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from autoscaler.adapters.simulator import SimMetricsSource
from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError
from autoscaler.simulate import run_simulation
from autoscaler.simulator.disagg import LOADED, DecodeReplica, PrefillReplica, remote_prefill
from autoscaler.simulator.engine import COMPLETED, FAILED
from autoscaler.simulator.exposition import ROLE_LABEL, SimCollector
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.metrics import NUM_REQUESTS_RUNNING
from autoscaler.workload.types import Request, Workload
from controllers.base import Reason
from models.profiles import get_profile, prefill_pairs

H100 = get_profile("llama-3-8b/h100-sxm")
SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def st(p: int, n: int = 0, c: int = 0, start: int = 0) -> float:
    """One step of the profile: ``p`` prompt tokens after ``start`` computed ones, ``n`` decodes of ``c``
    context tokens in all."""
    return H100.step_time(p, n, c, prefill_pairs(start, p))


def variant(name: str, replicas: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": replicas,
            "max_replicas": replicas, "initial_replicas": replicas, "kv_cache_tokens": 400_000,
            "profile": "llama-3-8b/h100-sxm", **extra}


def pd_doc(threshold: int = 2048, bandwidth_gbps: float = 400.0, latency_s: float = 0.01,
           aggregated: int = 0, client_timeout_s: float = 600.0) -> dict[str, Any]:
    """One service ``svc``: a prefill replica ``p`` and a decode replica ``d`` (and ``aggregated``
    aggregated replicas ``agg``), all on ``llama-3-8b/h100-sxm``."""
    svc: dict[str, Any] = {
        "name": "svc", "model": "m", "slo": SLO,
        "variants": [variant("agg", aggregated)] if aggregated else [],
        "roles": {"prefill": [variant("p")], "decode": [variant("d")], "non_cached_tokens": threshold,
                  "kv_transfer": {"bandwidth_gbps": bandwidth_gbps, "latency_s": latency_s}},
    }
    return {"services": [svc], "simulator": {"client_timeout_s": client_timeout_s}}


def pools(sim: FleetSimulator) -> tuple[PrefillReplica, DecodeReplica]:
    p, d = sim.services["svc"].replicas
    assert isinstance(p, PrefillReplica) and isinstance(d, DecodeReplica)
    return p, d


# ------------------------------------------------------------------------------ the hand-over, by hand
def test_a_long_prompt_is_prefilled_remotely_and_a_short_one_locally() -> None:
    # Request 0 (4000-token prompt, 3 output tokens) at t = 0; request 1 (500 tokens, 3) at t = 10 s, once
    # request 0 is done. Threshold 2048: 4000 >= 2048 and the decode replica caches none of it -> remote;
    # 500 < 2048 -> the decode replica prefills it itself.
    cfg = parse_config(pd_doc(), "<pd>")
    wl = Workload([Request(arrival_s=0.0, input_tokens=4000, output_tokens=3),
                   Request(arrival_s=10.0, input_tokens=500, output_tokens=3)])
    sim = FleetSimulator(cfg, wl)
    p, d = pools(sim)

    # The prefill replica prefills the 4000 tokens in one step (under the 8192-token budget):
    # 8,002,000 attention pairs; t0 + a (4000 + r x 8,002,000) = 7.7655e-3 + 2.45596e-5 x 4300.56 = 0.113386 s.
    t_p = st(4000)
    assert t_p == pytest.approx(0.113386, abs=1e-6)
    # The read: 4000 tokens x 131,072 B x 8 bit / 400e9 bit/s = 0.01048576 s, plus the 0.01-s latency.
    t_x = t_p + 4000 * 131_072 * 8 / 400e9 + 0.01
    assert t_x - t_p == pytest.approx(0.02048576, abs=1e-12)
    # Then the decode replica computes the prompt's last token (1 token after 3999: 4000 pairs),
    # t0 + a (1 + r x 4000) = 7.7938e-3 s, which samples the first token.
    t_first = t_x + st(1, start=3999)
    assert t_first - t_x == pytest.approx(0.0077938, abs=1e-7)

    sim.run_until(t_p / 2)  # prefilling: the prompt's KV is the prefill replica's, none on the decode one
    assert (p.kv_used, d.kv_used) == (4000, 0)
    sim.run_until((t_p + t_x) / 2)  # reading: both hold the prompt's KV, the decode replica reserved it
    assert (p.kv_used, d.kv_used, d.receiving) == (4000, 4000, 1)
    d.refresh_gauges()
    assert (d.metrics.waiting, d.metrics.running) == (1, 0)  # waiting for its KV, as vLLM counts it
    sim.run_until((t_x + t_first) / 2)  # read: the prefill replica has freed it
    assert (p.kv_used, d.kv_used, d.receiving) == (0, 4000, 0)

    sim.run_until(100.0)
    assert sim.done
    r0, r1 = sim.requests
    assert r0.status == r1.status == COMPLETED
    # TTFT holds the prefill, the read and the decode replica's step: 0.113386 + 0.020486 + 0.007794 s
    assert r0.t_first - r0.req.arrival_s == pytest.approx(t_first, rel=1e-12)
    assert r0.t_first == pytest.approx(0.141666, abs=1e-6)
    # two decode steps at 4000 and 4001 context tokens: t0 + b + g x ctx each
    assert r0.t_finish - r0.t_first == pytest.approx(st(0, 1, 4000) + st(0, 1, 4001), rel=1e-9)
    # The short prompt, prefilled by the decode replica: 10 s + t0 + a (500 + r x 125,250) = 10.020161 s.
    assert r1.t_first == pytest.approx(10.0 + st(500), rel=1e-12)
    assert r1.t_first == pytest.approx(10.020161, abs=1e-6)
    assert r1.replica is d

    # The prefill replica ran only the long prompt, as a one-token request (vLLM ends it "length"),
    # its TTFT its own prefill; the decode replica's TTFT clock starts when the prompt is handed to it.
    pm, dm = p.metrics, d.metrics
    assert (pm.prompt_tokens, pm.generation_tokens, pm.success["length"], pm.success["stop"]) == (4000, 1, 1, 0)
    assert pm.ttft.count == 1 and pm.ttft.total == pytest.approx(t_p, rel=1e-12)
    assert (dm.prompt_tokens, dm.generation_tokens, dm.success["stop"]) == (4500, 6, 2)
    assert dm.ttft.total == pytest.approx((t_first - t_p) + st(500), rel=1e-12)
    assert (p.kv_used, d.kv_used) == (0, 0)


def test_a_decode_replicas_cached_prefix_is_not_read_and_can_keep_the_prefill_local() -> None:
    # Both prompts share 3 leading 512-token blocks (1536 tokens); threshold 1000. Request 0 (2000
    # tokens, nothing cached) is prefilled remotely and its blocks enter the decode replica's cache as it
    # takes them in. Request 1 (2000 tokens): 2000 - 1536 = 464 uncached < 1000 -> prefilled locally.
    # Request 2 (4000 tokens, the same 3 blocks then 5 new ones): 4000 - 1536 = 2464 >= 1000 -> remote,
    # and only the 2464 uncached tokens are read: 2464 x 131,072 x 8 / 400e9 = 6.45922816e-3 s (+ 0.01 s).
    shared = (1, 2, 3)
    cfg = parse_config(pd_doc(threshold=1000), "<pd>")
    wl = Workload([Request(arrival_s=0.0, input_tokens=2000, output_tokens=2, hash_ids=(*shared, 4)),
                   Request(arrival_s=5.0, input_tokens=2000, output_tokens=2, hash_ids=(*shared, 5)),
                   Request(arrival_s=10.0, input_tokens=4000, output_tokens=2, hash_ids=(*shared, 6, 7, 8, 9, 10))],
                  block_tokens=512)
    sim = FleetSimulator(cfg, wl)
    p, d = pools(sim)
    sim.run_until(100.0)
    assert sim.done
    r0, r1, r2 = sim.requests
    assert r0.status == r1.status == r2.status == COMPLETED
    assert p.metrics.prompt_tokens == 2000 + 4000  # requests 0 and 2
    # the decode replica takes in all three; its prefix cache hits 0, then 1536 and 1536 tokens
    assert (d.metrics.prompt_tokens, d.metrics.prefix_hits) == (3 * 2000 + 2000, 2 * 1536)
    assert r1.t_first == pytest.approx(5.0 + st(2000 - 1536, start=1536), rel=1e-12)
    # request 2: the prefill replica prefills all 4000 (its cache holds request 0's blocks: 1536 hit,
    # 2464 computed after them), the decode replica reads 2464 tokens and recomputes the last one
    t_p = 10.0 + st(2464, start=1536)
    read = 2464 * 131_072 * 8 / 400e9 + 0.01
    assert read == pytest.approx(0.01645922816, abs=1e-12)
    assert r2.t_first == pytest.approx(t_p + read + st(1, start=3999), rel=1e-12)


def test_the_remote_prefill_rule_is_llm_ds_prefix_based_decider() -> None:
    # prefix_based_pd_decider.go: off at 0; remote when the prompt and its uncached part both reach it
    assert not remote_prefill(10_000, 0, 0)
    assert not remote_prefill(15, 0, 16)  # prompt shorter than the threshold
    assert remote_prefill(16, 0, 16)  # ">=": a prompt of exactly the threshold goes remote
    assert not remote_prefill(4000, 3990, 16)  # 10 uncached tokens
    assert remote_prefill(4000, 3984, 16)  # 16 uncached tokens


def test_without_a_ready_prefill_replica_the_decode_replica_prefills() -> None:
    doc = pd_doc()
    doc["services"][0]["roles"]["prefill"][0].update(min_replicas=0, initial_replicas=0)
    sim = FleetSimulator(parse_config(doc, "<pd>"), Workload([Request(arrival_s=0.0, input_tokens=4000,
                                                                       output_tokens=2)]))
    sim.run_until(100.0)
    (sr,) = sim.requests
    assert sr.status == COMPLETED and sr.t_first == pytest.approx(st(4000), rel=1e-12)


def test_a_client_giving_up_during_the_read_frees_both_replicas_kv() -> None:
    # A 1-s hand-over latency: the read spans [t_p, t_p + 1.0105 s]; the client gives up at 0.5 s.
    cfg = parse_config(pd_doc(latency_s=1.0, client_timeout_s=0.5), "<pd>")
    sim = FleetSimulator(cfg, Workload([Request(arrival_s=0.0, input_tokens=4000, output_tokens=2)]))
    p, d = pools(sim)
    sim.run_until(0.4)
    assert (p.kv_used, d.kv_used, d.receiving) == (4000, 4000, 1)
    sim.run_until(5.0)
    (sr,) = sim.requests
    assert sr.status == FAILED and sr.t_first is None
    assert (p.kv_used, d.kv_used, d.receiving) == (0, 0, 0)
    assert d.metrics.success["abort"] == 1


def test_an_aggregated_replica_serves_whole_requests_beside_the_pools() -> None:
    # One aggregated replica beside the pools: llm-d's decode filter passes it (no role label), and the
    # router (least outstanding, equal weights) puts the first request there, the second on the decode
    # replica; an aggregated replica prefills its own requests whatever their length.
    sim = FleetSimulator(parse_config(pd_doc(aggregated=1), "<pd>"),
                         Workload([Request(arrival_s=0.0, input_tokens=4000, output_tokens=2),
                                   Request(arrival_s=0.0, input_tokens=4000, output_tokens=2)]))
    sim.run_until(100.0)
    r0, r1 = sim.requests
    assert r0.replica is not None and r0.replica.role == "" and r0.t_first == pytest.approx(st(4000), rel=1e-12)
    assert r1.replica is not None and r1.replica.role == "decode" and r1.t_first > st(4000) + 0.02


# ------------------------------------------------------------------------------ metrics per role
def test_every_pod_carries_its_llm_d_role_label_in_a_fleet_with_roles() -> None:
    sim = FleetSimulator(parse_config(pd_doc(aggregated=1), "<pd>"), Workload([]))
    fams = {f.name: f for f in SimCollector(sim).collect()}
    roles = {s.labels["pod"]: s.labels[ROLE_LABEL] for s in fams[NUM_REQUESTS_RUNNING].samples}
    assert sorted(roles.values()) == ["", "decode", "prefill"]
    assert {pod.rsplit("-", 1)[0]: role for pod, role in roles.items()} == {"svc-agg": "", "svc-p": "prefill",
                                                                          "svc-d": "decode"}
    deployments = {s.labels["deployment"] for s in fams["kube_deployment_spec_replicas"].samples}
    assert deployments == {"svc-agg", "svc-p", "svc-d"}


def test_the_service_wide_signals_count_a_remotely_prefilled_request_once() -> None:
    # The two requests of the hand-over test: request 0 prefilled on ``p`` (vLLM ends that one-token
    # request "length") then served on ``d``, request 1 prefilled and served on ``d``. Scrapes at t = 0
    # (every counter 0), 0.05 s (still 0) and 20 s (both done); rate() over (-40 s, 20 s]: the counters
    # start at 0 at the first sample, so nothing is extrapolated (Prometheus's zero cut-off) and a rate is the
    # increase over the 60-s window. The service-wide signals read the pods that finish requests: 2
    # requests, not 3; the prompts' 4500 tokens, not 8500; 6 generated tokens, not 7 (``p``'s discarded one).
    sim = FleetSimulator(parse_config(pd_doc(), "<pd>"),
                         Workload([Request(arrival_s=0.0, input_tokens=4000, output_tokens=3),
                                   Request(arrival_s=10.0, input_tokens=500, output_tokens=3)]))
    src = SimMetricsSource(sim, window_s=60.0, scrape_interval_s=20.0)
    src.scrape(0.0)
    # At t = 0.05 s request 0 is prefilling on p (0.113 s): in flight on one pod, p's; the gauges read
    # every pod, so the service has 1 running request.
    sim.run_until(0.05)
    src.scrape(0.05)
    mid = src.observe(0.05)["svc"]
    assert (mid.signals.running, mid.pools["prefill"].signals.running, mid.pools["decode"].signals.running) \
        == (1.0, 1.0, 0.0)
    sim.run_until(20.0)
    assert sim.done
    src.scrape(20.0)
    obs = src.observe(20.0)["svc"]
    assert obs.signals.request_rate_rps == pytest.approx(2 / 60, rel=1e-12)
    assert obs.signals.success_rps == pytest.approx(2 / 60, rel=1e-12)
    assert obs.signals.prompt_tokens_rps == pytest.approx(4500 / 60, rel=1e-12)
    assert obs.signals.generation_tokens_rps == pytest.approx(6 / 60, rel=1e-12)
    # the pools are still read apart, the prefill pool's one-token request included
    assert obs.pools["prefill"].signals.request_rate_rps == pytest.approx(1 / 60, rel=1e-12)
    assert obs.pools["decode"].signals.request_rate_rps == pytest.approx(2 / 60, rel=1e-12)
    # every ready pod stays listed (a pool's pods are drained by name)
    assert sorted(p.variant for p in obs.pods) == ["d", "p"]


def test_a_fleet_without_roles_exports_no_role_label(make_fleet) -> None:
    sim = FleetSimulator(make_fleet(1), Workload([]))
    (sample,) = next(f for f in SimCollector(sim).collect() if f.name == NUM_REQUESTS_RUNNING).samples
    assert ROLE_LABEL not in sample.labels


# ------------------------------------------------------------------------------ fleet-file errors
def one_line_error(doc: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(doc, "<pd>")
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_a_service_needs_variants_or_roles() -> None:
    doc = pd_doc()
    del doc["services"][0]["roles"]
    assert one_line_error(doc) == ("<pd>: services[svc]: variants: at least one variant is required (or roles "
                                   "with prefill and decode pools)")


@pytest.mark.parametrize(("path", "value", "expected"), [
    (("prefill",), [], "<pd>: services[svc].roles.prefill: List should have at least 1 item after validation, "
                             "not 0"),
    (("decode",), None, "<pd>: services[svc].roles.decode: Input should be a valid list"),
    (("non_cached_tokens",), -1, "<pd>: services[svc].roles.non_cached_tokens: Input should be greater than or "
                                 "equal to 0"),
    (("kv_transfer", "bandwidth_gbps"), 0, "<pd>: services[svc].roles.kv_transfer.bandwidth_gbps: Input should "
                                           "be greater than 0"),
    (("kv_transfer", "latency_s"), -0.1, "<pd>: services[svc].roles.kv_transfer.latency_s: Input should be "
                                         "greater than or equal to 0"),
    (("kv_transfer", "link"), 1, "<pd>: services[svc].roles.kv_transfer.link: Extra inputs are not permitted"),
])
def test_bad_roles_are_one_line_errors_naming_the_key(path: tuple[str, ...], value: object, expected: str) -> None:
    doc = pd_doc()
    node = doc["services"][0]["roles"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert one_line_error(doc) == expected


def test_role_variants_are_checked_as_variants() -> None:
    doc = pd_doc(aggregated=1)
    doc["services"][0]["roles"]["decode"][0]["name"] = "agg"
    assert one_line_error(doc) == "<pd>: services[svc]: duplicate variant name(s): agg"
    doc = pd_doc()
    doc["services"][0]["roles"]["decode"][0]["profile"] = "llama-3-8b/nope"
    assert one_line_error(doc).startswith("<pd>: services[svc].roles.decode[d].profile: unknown performance "
                                          "profile 'llama-3-8b/nope'")
    doc = pd_doc()
    doc["services"][0]["roles"]["prefill"][0]["kv_cache_tokens"] = 1000
    assert one_line_error(doc) == ("<pd>: services[svc].roles.prefill[p].kv_cache_tokens (1000) cannot hold one "
                                   "max_model_len (32768) sequence plus one 16-token block")
    doc = pd_doc()
    doc["services"][0]["roles"]["prefill"][0]["gpus_per_replica"] = 2
    assert one_line_error(doc).startswith("<pd>: services[svc].roles.prefill[p].gpus_per_replica: 2, but profile")


def test_flow_control_with_roles_is_refused() -> None:
    with pytest.raises(ValueError, match=r"flow control \(an admission policy\) with prefill/decode roles is not "
                                         "simulated yet"):
        FleetSimulator(parse_config(pd_doc(), "<pd>"), Workload([]), admission=True)


# ------------------------------------------------------------------------------ the loop
def test_a_controller_that_does_not_scale_roles_holds_a_service_of_pools_only() -> None:
    # WVA scales aggregated variants only (``Controller.scales_roles`` False): the loop holds the service
    # (reason "fixed") instead of asking for a replica of an aggregated variant it does not have, and
    # every request is served by the pools.
    wl = Workload([Request(arrival_s=2.0 * i, input_tokens=3000 if i % 2 else 300, output_tokens=20)
                   for i in range(60)])
    run = run_simulation(parse_config(pd_doc(), "<pd>"), wl, "wva")
    assert [sr.status for sr in run.sim.requests] == [COMPLETED] * 60
    assert {rec.services["svc"].decision.code for rec in run.ticks} == {Reason.FIXED}
    assert [(r.name, r.gone_s) for r in run.sim.services["svc"].replicas] == [("svc-p-1", None), ("svc-d-2", None)]
    p, d = pools(run.sim)
    assert p.metrics.prompt_tokens == 30 * 3000  # the 3000-token prompts (>= 2048) went to the prefill pool
    assert d.metrics.prompt_tokens == 30 * 3000 + 30 * 300  # and all 60 reached the decode replica


@pytest.mark.slow
def test_the_pid_scales_both_pools_of_a_service_of_pools_only_through_the_loop() -> None:
    # 20 req/s of 3,000-token prompts and 400-token outputs overload one prefill replica (~12 prompts/s)
    # and one decode replica (KV: 20 x 3,400 tokens held ~6 s is past its 400,000): the PID's two loops
    # scale each pool, written as two targets through the simulator's actuator, within the pools' bounds.
    doc = pd_doc()
    svc = doc["services"][0]
    for role in ("prefill", "decode"):
        svc["roles"][role][0].update(min_replicas=1, max_replicas=4, initial_replicas=1, startup_cold_s=30.0)
    doc["controller"] = {"tick_s": 15, "window_s": 60}
    wl = Workload([Request(arrival_s=0.05 * i, input_tokens=3000, output_tokens=400) for i in range(4000)])
    run = run_simulation(parse_config(doc, "<pd>"), wl, "pid")
    written = {v for rec in run.ticks for v in rec.services["svc"].actuation}
    assert written == {"p", "d"}
    most = {v: max(rec.services["svc"].pool_applied[v] for rec in run.ticks) for v in ("p", "d")}
    assert most["p"] > 1 and most["d"] > 1
    assert max(most.values()) <= 4
    assert {r.variant for r in run.sim.services["svc"].replicas} == {"p", "d"}  # no aggregated replica asked for


# ------------------------------------------------------------------------------ crashes during a read
def test_a_decode_replica_crashing_during_the_read_fails_the_request_and_frees_the_prefill_kv() -> None:
    # A 1-s hand-over latency: the read spans [t_p, t_p + 1.0105 s] (t_p = 0.113 s); the decode replica
    # crashes at 0.5 s. The attempt fails there (no retry), the prefill replica frees the 4000 tokens it
    # held at once, and the read's end changes nothing.
    cfg = parse_config(pd_doc(latency_s=1.0), "<pd>")
    sim = FleetSimulator(cfg, Workload([Request(arrival_s=0.0, input_tokens=4000, output_tokens=2)]))
    p, d = pools(sim)
    sim.run_until(0.5)
    assert (p.kv_used, d.kv_used, d.receiving) == (4000, 4000, 1)
    assert sim.crash("svc", "d") == 1
    assert (p.kv_used, d.kv_used, d.receiving) == (0, 0, 0)
    sim.run_until(5.0)
    (sr,) = sim.requests
    assert sr.status == FAILED and sr.t_first is None
    assert p.kv_used == 0 and not sim._handoffs


def test_a_prefill_replica_crashing_during_the_read_loses_its_kv_but_not_the_read() -> None:
    # Not modelled as a failed read (module docstring): the decode replica still gets the KV at
    # t_p + 1.0105 s and serves the request; the crashed replica's KV is gone with it.
    cfg = parse_config(pd_doc(latency_s=1.0), "<pd>")
    sim = FleetSimulator(cfg, Workload([Request(arrival_s=0.0, input_tokens=4000, output_tokens=2)]))
    p, d = pools(sim)
    sim.run_until(0.5)
    assert sim.crash("svc", "p") == 0  # the request is no longer on the prefill replica
    assert (p.kv_used, d.kv_used) == (0, 4000)
    sim.run_until(10.0)
    (sr,) = sim.requests
    assert sr.status == COMPLETED
    assert sr.t_first == pytest.approx(st(4000) + 4000 * 131_072 * 8 / 400e9 + 1.0 + st(1, start=3999), rel=1e-12)


# ------------------------------------------------------------------------------ no circular wait
def test_a_preempted_request_never_queues_in_front_of_one_whose_kv_was_read() -> None:
    # KV pools of 2100 tokens (one 2048-token sequence and a block fit: the fleet file accepts them) under
    # a load that preempts. A request whose KV has been read (LOADED) holds its prompt's KV and needs
    # none more; a preemption victim queued in front of it that cannot fit would wait on KV only the
    # LOADED request can free, while the prefill replica waits on reads that never start. Before the
    # fix the decode queue had a LOADED request behind another at 1,169 of the 1,800 half-second
    # checks, and 280 of the 480 requests failed (client timeout, 600 s); now none is ever behind a
    # non-LOADED one, and all 480 complete.
    doc = pd_doc(threshold=16)
    svc = doc["services"][0]
    svc["max_model_len"] = 2048
    for role in ("prefill", "decode"):
        svc["roles"][role][0]["kv_cache_tokens"] = 2100
    rng = random.Random(0)
    wl = Workload([Request(arrival_s=0.25 * i, input_tokens=rng.randint(100, 1900),
                           output_tokens=rng.randint(20, 140)) for i in range(480)])
    sim = FleetSimulator(parse_config(doc, "<pd>"), wl)
    _, d = pools(sim)
    behind = 0
    for k in range(1, 1801):
        sim.run_until(0.5 * k)
        loaded = [d._remote.get(sr) == LOADED for sr in d.waiting]
        behind += not all(loaded[:sum(loaded)])  # the LOADED requests are the queue's head, if any
    assert d.metrics.preemptions > 0  # the case this is about
    assert behind == 0
    assert [sr.status for sr in sim.requests] == [COMPLETED] * 480


@pytest.mark.parametrize("controller", ["hpa", "keda", "oracle"])
def test_a_controller_that_calibrates_on_a_variant_says_the_service_has_none(controller: str) -> None:
    # They calibrate a target (or plan) on the aggregated variants' capacity; with pools only they
    # refused with "no variant meets the interactive SLO for this request mix", which is not the reason.
    wl = Workload([Request(arrival_s=1.0 * i, input_tokens=300, output_tokens=20) for i in range(20)])
    with pytest.raises(ValueError, match=r"service svc has no aggregated variant: its prefill/decode pools are scaled "
                                         r"only by the controllers that scale roles \(pid, mpc, dynamo-pd, wva-pd\)"):
        run_simulation(parse_config(pd_doc(), "<pd>"), wl, controller)


def test_a_configured_crash_of_a_pool_variant_takes_that_pools_oldest_replica() -> None:
    # Before, the fleet file's faults named aggregated variants only ("'d' is a decode pool variant, which
    # the simulator's faults cannot name yet"). Pools of 2 prefill (p) and 3 decode (d) replicas, all ready
    # at 0; the crash at 60 s takes the oldest d (the first made), which a cold replacement replaces: by
    # hand, 2 decode replicas ready, 1 starting, the prefill pool untouched.
    doc = pd_doc()
    svc = doc["services"][0]
    svc["roles"]["prefill"] = [variant("p", 2)]
    svc["roles"]["decode"] = [variant("d", 3)]
    doc["simulator"] = {"crashes": [{"time_s": 60, "variant": "d"}]}
    sim = FleetSimulator(parse_config(doc, "<pd>"), Workload([Request(arrival_s=100.0, input_tokens=10,
                                                                      output_tokens=2)]))
    first_d = min((r for r in sim.services["svc"].replicas if r.variant == "d"), key=lambda r: r.rid)
    sim.run_until(61.0)
    d, p = sim.services["svc"].counts("d"), sim.services["svc"].counts("p")
    assert (d.ready, d.starting, p.ready, p.starting) == (2, 1, 2, 0)
    assert first_d.state == "gone" and first_d.gone_s == 60.0
    assert sim.crash_outcomes()[0]["applied"] is True


def test_a_link_slowdown_divides_the_bandwidth_and_adds_its_latency_to_a_read_inside_it() -> None:
    # Two 4000-token prompts, both prefilled remotely (threshold 2048): request 0 at 0 s inside the window
    # [0, 5) (bandwidth / 10, +0.05 s), request 1 at 10 s after it. By hand (the first test's figures):
    # the read at 400 Gb/s is 4000 x 131,072 B x 8 / 400e9 = 0.01048576 s + 0.01 s latency; inside the
    # window 10 x 0.01048576 + 0.01 + 0.05 = 0.1648576 s.
    doc = pd_doc()
    doc["simulator"]["link_slowdowns"] = [{"start_s": 0, "end_s": 5, "bandwidth_factor": 10, "extra_latency_s": 0.05}]
    wl = Workload([Request(arrival_s=0.0, input_tokens=4000, output_tokens=3),
                   Request(arrival_s=10.0, input_tokens=4000, output_tokens=3)])
    sim = FleetSimulator(parse_config(doc, "<pd>"), wl)
    t_p = st(4000)
    t_x = t_p + 0.1648576
    sim.run_until(t_p + 0.1)  # still reading: a read outside the window would have ended at t_p + 0.0205
    p, d = pools(sim)
    assert (p.kv_used, d.kv_used, d.receiving) == (4000, 4000, 1)
    sim.run_until(100.0)
    r0, r1 = sim.requests
    assert r0.status == r1.status == COMPLETED
    assert r0.t_first == pytest.approx(t_x + st(1, start=3999), rel=1e-12)
    assert r1.t_first == pytest.approx(10.0 + t_p + 0.02048576 + st(1, start=3999), rel=1e-12)
    # the slowed read less its latencies is ten times the plain read less its latency
    slow, plain = r0.t_first - t_p - st(1, start=3999), r1.t_first - 10.0 - t_p - st(1, start=3999)
    assert slow - 0.06 == pytest.approx(10 * (plain - 0.01), rel=1e-9)


@pytest.mark.parametrize(("simulator", "expected"), [
    ({"crashes": [{"time_s": 60, "variant": "x"}]},
     "simulator.crashes[0].variant: unknown variant 'x' of service 'svc' (known: d, p)"),
    ({"slowdown": {"x": 2.0}}, "simulator.slowdown: unknown variant 'x' (fleet has: d, p)"),
    ({"link_slowdowns": [{"start_s": 10, "end_s": 5, "bandwidth_factor": 2}]},
     "simulator.link_slowdowns[0]: end_s (5) must be after start_s (10)"),
    ({"link_slowdowns": [{"start_s": 10}]},
     "simulator.link_slowdowns[0]: a link slowdown needs bandwidth_factor > 1 or extra_latency_s > 0"),
])
def test_bad_pool_faults_are_one_line_errors(simulator: dict[str, Any], expected: str) -> None:
    doc = pd_doc()
    doc["simulator"] = simulator
    assert one_line_error(doc) == f"<pd>: {expected}"


def test_a_link_slowdown_needs_a_service_with_roles() -> None:
    doc = pd_doc()
    doc["services"][0]["roles"] = None
    doc["services"][0]["variants"] = [variant("agg")]
    doc["simulator"] = {"link_slowdowns": [{"bandwidth_factor": 2}]}
    assert one_line_error(doc) == ("<pd>: simulator.link_slowdowns[0].service: 'svc' has no prefill/decode roles, "
                                   "hence no KV-transfer link to slow down")
