"""The gateway's backlog (``FleetSimulator._drain_gateway``): requests held while no replica could take
them are released one at a time by the router's rule (least outstanding, a decode replica's remote
prefills counted), among the replicas the gateway's per-pod saturation rule leaves free, once every
replica turning ready at that instant is ready. Each split is worked out by hand in the comments.

Every replica here runs ``llama-3-8b/h100-sxm``; its step times only order events, never enter a value.
"""

from __future__ import annotations

from typing import Any

from autoscaler.config.loading import parse_config
from autoscaler.simulator.disagg import DecodeReplica
from autoscaler.simulator.engine import COMPLETED
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import Request, Workload

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, replicas: int, most: int | None = None) -> dict[str, Any]:
    """A variant of ``replicas`` replicas at the start (up to ``most``), each 10 s from scale-up to ready."""
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 0,
            "max_replicas": replicas if most is None else most, "initial_replicas": replicas,
            "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm", "startup_cold_s": 10.0,
            "startup_warm_s": 10.0}


def pools_doc(decode: int, **simulator: Any) -> dict[str, Any]:
    """Service ``svc``: one prefill replica ``p`` and ``decode`` decode replicas ``d`` (up to 2); prompts
    of 2,048 tokens or more are prefilled remotely (llm-d's threshold)."""
    svc = {"name": "svc", "model": "m", "slo": SLO, "variants": [],
           "roles": {"prefill": [variant("p", 1)], "decode": [variant("d", decode, most=2)],
                     "non_cached_tokens": 2048}}
    return {"services": [svc], "simulator": simulator}


def aggregated_doc() -> dict[str, Any]:
    return {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg", 0, most=2)]}]}


def decode_rids(sim: FleetSimulator) -> list[int]:
    return [r.rid for r in sim.services["svc"].replicas if isinstance(r, DecodeReplica)]


def test_a_backlog_of_six_splits_three_three_over_two_decode_replicas_ready_together() -> None:
    # No decode replica at first: six short prompts (500 tokens, local prefill) arrive at 1-6 s and are
    # held. Two decode replicas asked for at 0 s turn ready together at 10 s. Least outstanding, ties to
    # the earlier replica: A (0 -> 1), B (0 -> 1), A (1, 1: tie -> 2), B, A, B. Before, the whole
    # backlog went to A, the first one made ready.
    wl = Workload([Request(arrival_s=float(t), input_tokens=500, output_tokens=200) for t in range(1, 7)])
    sim = FleetSimulator(parse_config(pools_doc(decode=0), "<pools>"), wl)
    sim.set_replicas("svc", "d", 2)
    sim.run_until(9.9)
    assert len(sim.services["svc"].gateway) == 6
    sim.run_until(600.0)
    a, b = decode_rids(sim)
    assert [sr.replica.rid for sr in sim.requests] == [a, b, a, b, a, b]
    assert all(sr.status == COMPLETED for sr in sim.requests)


def test_after_a_decode_pool_loss_the_backlog_spreads_over_the_replacements_counting_remote_prefills() -> None:
    # Both decode replicas crash at 0.5 s; their replacements start then and turn ready together at
    # 10.5 s. Six long prompts (4,000 tokens >= 2,048: prefilled on p) arrive at 1-6 s and are held. At
    # 10.5 s: each goes to the decode replica with the fewest outstanding, counting the prompts p is
    # prefilling for it (Replica.inbound): A, B, A, B, A, B; p queues at most 5 (not over the gateway's
    # queue_depth_threshold of 5), so all six are released at once. Without the remote prefills counted,
    # A (the earlier on every tie at 0 outstanding) took all six.
    wl = Workload([Request(arrival_s=float(t), input_tokens=4000, output_tokens=200) for t in range(1, 7)])
    sim = FleetSimulator(parse_config(pools_doc(decode=2), "<pools>"), wl)
    sim.run_until(0.5)
    assert sim.crash("svc", "d") == 0 and sim.crash("svc", "d") == 0
    sim.run_until(10.4)
    svc = sim.services["svc"]
    assert len(svc.gateway) == 6 and not svc.decode_ready
    sim.run_until(10.5)
    assert not svc.gateway
    sim.run_until(600.0)
    a, b = [r.rid for r in svc.decode_ready]
    assert [sr.replica.rid for sr in sim.requests] == [a, b, a, b, a, b]
    assert all(sr.status == COMPLETED for sr in sim.requests)
    assert all(r.inbound == 0 for r in svc.decode_ready)  # every hand-over counted once, then uncounted


def test_a_saturated_replica_gets_no_more_of_the_backlog_and_new_arrivals_queue_behind_it() -> None:
    # One running sequence per replica (max_num_seqs 1); the gateway holds a replica saturated past 1
    # waiting request (queue_depth_threshold 1). Eight requests (500-token prompts, 500 tokens out: each
    # runs ~4 s) held until two decode replicas turn ready at 10 s: A runs 0, B runs 1, A queues 2, B 3,
    # A 4 (2 waiting: saturated), B 5 (saturated); 6 and 7 stay held. A ninth arriving at 10.5 s queues
    # behind them. When A finishes 0 it starts 2 (1 waiting): 6 goes to A; B, ending its step at the same
    # instant just after A, starts 3: 7 goes to B. Then A, finishing 2 first, takes 8.
    wl = Workload([*(Request(arrival_s=float(t), input_tokens=500, output_tokens=500) for t in range(1, 9)),
                   Request(arrival_s=10.5, input_tokens=500, output_tokens=500)])
    doc = pools_doc(decode=0, gateway={"queue_depth_threshold": 1})
    doc["engine"] = {"max_num_seqs": 1}
    sim = FleetSimulator(parse_config(doc, "<pools>"), wl)
    sim.set_replicas("svc", "d", 2)
    sim.run_until(10.0)
    svc = sim.services["svc"]
    a, b = svc.decode_ready
    assert (len(a.waiting), len(b.waiting)) == (2, 2)
    assert [sr.req.rid for sr in svc.gateway] == [6, 7]
    sim.run_until(10.5)
    assert [sr.req.rid for sr in svc.gateway] == [6, 7, 8]
    sim.run_until(900.0)
    assert [sr.replica.rid for sr in sim.requests] == [a.rid, b.rid] * 4 + [a.rid]
    assert all(sr.status == COMPLETED for sr in sim.requests)


def test_an_aggregated_backlog_splits_over_the_replicas_ready_together() -> None:
    # The same rule without roles: two aggregated replicas asked for at 0 s, ready at 10 s; six held
    # requests go A, B, A, B, A, B.
    wl = Workload([Request(arrival_s=float(t), input_tokens=500, output_tokens=200) for t in range(1, 7)])
    sim = FleetSimulator(parse_config(aggregated_doc(), "<agg>"), wl)
    sim.set_replicas("svc", "agg", 2)
    sim.run_until(600.0)
    a, b = [r.rid for r in sim.services["svc"].replicas]
    assert [sr.replica.rid for sr in sim.requests] == [a, b, a, b, a, b]
