"""``simulator.prefill_priority`` (issue 34): a prefill replica serves its waiting queue highest
``Request.priority`` first, first come, first served within a priority (vLLM's ``--scheduling-policy
priority``), and the saturation filter judges a prefill replica by the requests an arrival would wait
behind. Every expected order and time below is worked by hand; the default (off) keeps first come,
first served.

Hand values use the ``llama-3-8b/h100-sxm`` profile (``models/profiles/coefficients.json``): t0 = 7.7655e-3
s, a = 2.45596e-5 s/token, r = 3.75601e-5 tokens/pair. A 4096-token prompt prefilled in one step from
nothing takes t0 + a (4096 + r x 4096 x 4097 / 2) = 7.7655e-3 + 2.45596e-5 x (4096 + 315.152) = 0.116101 s.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config.loading import parse_config
from autoscaler.simulator.disagg import PrefillReplica
from autoscaler.simulator.engine import COMPLETED, SimRequest
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import BATCH, CRITICAL, INTERACTIVE, SHEDDABLE, STANDARD, Request, Workload
from models.profiles import get_profile, prefill_pairs

H100 = get_profile("llama-3-8b/h100-sxm")
SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
T = H100.step_time(4096, 0, 0, prefill_pairs(0, 4096))  # one 4096-token prefill step


def variant(name: str) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 1,
            "initial_replicas": 1, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


def doc(priority: bool | None, aggregated: bool = False, saturation_filter: bool = False) -> dict[str, Any]:
    """One service: a prefill replica ``p``, a decode replica ``d`` (and an aggregated one ``agg``); a step
    holds 4096 prompt tokens, so a prefill replica prefills one 4096-token prompt a step."""
    svc = {"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg")] if aggregated else [],
           "roles": {"prefill": [variant("p")], "decode": [variant("d")], "non_cached_tokens": 2048}}
    sim: dict[str, Any] = {"pd_saturation_filter": saturation_filter}
    if priority is not None:
        sim["prefill_priority"] = priority
    return {"services": [svc], "engine": {"max_num_batched_tokens": 4096}, "simulator": sim}


def req(t: float, priority: int, tokens: int = 4096) -> Request:
    return Request(arrival_s=t, input_tokens=tokens, output_tokens=2,
                   request_class=BATCH if priority == SHEDDABLE else INTERACTIVE, priority=priority)


def test_the_step_time_by_hand() -> None:
    assert pytest.approx(0.116101, abs=1e-6) == T


# Request 0 (sheddable) arrives at an idle prefill replica at t = 0 and takes the step [0, T). Requests 1
# (sheddable), 2 (critical) and 3 (standard) arrive at 1, 2 and 3 ms and wait. Each later step prefills
# one of them, in queue order, ending at 2T, 3T and 4T.
@pytest.mark.parametrize(("priority", "order"), [(None, [1, 2, 3]), (False, [1, 2, 3]), (True, [2, 3, 1])])
def test_the_prefill_queue_order(priority: bool | None, order: list[int]) -> None:
    wl = Workload([req(0.0, SHEDDABLE), req(0.001, SHEDDABLE), req(0.002, CRITICAL), req(0.003, STANDARD)])
    sim = FleetSimulator(parse_config(doc(priority), "<pd>"), wl)
    p = sim.services["svc"].replicas[0]
    assert isinstance(p, PrefillReplica)
    done: dict[int, float] = {}
    on_prefilled = sim.on_prefilled

    def record(sr: SimRequest, replica: PrefillReplica, now: float) -> None:
        done[sr.req.rid] = now
        on_prefilled(sr, replica, now)

    sim.on_prefilled = record  # type: ignore[method-assign]
    sim.run_until(0.005)
    assert [sr.req.rid for sr in p.waiting] == order
    sim.run_until(100.0)
    assert sim.done and all(sr.status == COMPLETED for sr in sim.requests)
    assert done[0] == pytest.approx(T, rel=1e-9)
    for k, rid in enumerate(order):
        assert done[rid] == pytest.approx((k + 2) * T, rel=1e-9)


def test_ahead_counts_the_requests_an_arrival_would_wait_behind() -> None:
    # A queue of priorities [2, 1, 0, 0] (as the priority order keeps it): a critical arrival waits
    # behind 1, a standard one behind 2, a sheddable one behind all 4; first come, first served, all 4.
    for priority, expect in ((True, (1, 2, 4)), (False, (4, 4, 4))):
        sim = FleetSimulator(parse_config(doc(priority), "<pd>"), Workload([]))
        p = sim.services["svc"].replicas[0]
        assert isinstance(p, PrefillReplica)
        p.waiting.extend(SimRequest(req(0.0, level)) for level in (CRITICAL, STANDARD, SHEDDABLE, SHEDDABLE))
        assert (p.ahead(CRITICAL), p.ahead(STANDARD), p.ahead(SHEDDABLE)) == expect


def test_the_filter_spills_only_the_priorities_the_queue_holds_up() -> None:
    # The prefill replica holds 6 waiting sheddable requests, over the gateway's queue_depth_threshold (5):
    # saturated for a sheddable arrival (6 ahead), so its decode pick leaves out the decode replica and only
    # the aggregated one is left; a standard arrival would overtake all 6 (0 ahead), so the pool is not
    # saturated for it and both stay candidates. Without the priority order the pool is saturated for both.
    for priority, expect in ((True, ({"agg"}, {"agg", "d"})), (False, ({"agg"}, {"agg"}))):
        sim = FleetSimulator(parse_config(doc(priority, aggregated=True, saturation_filter=True), "<pd>"),
                             Workload([]))
        svc = sim.services["svc"]
        p = svc.prefill_ready[0]
        p.waiting.extend(SimRequest(req(0.0, SHEDDABLE)) for _ in range(6))
        decoders = svc.ready + svc.decode_ready
        got = tuple({r.variant for r in sim._spill(svc, decoders, level)} for level in (SHEDDABLE, STANDARD))
        assert got == expect
